/* SPDX-License-Identifier: MIT */
/*
 * XPMEM-compatible userspace API, implemented by shaddr's libxpmem over /dev/shaddr.
 *
 * Programs written for XPMEM's public API build against this header and link with
 * -lxpmem unchanged. Return conventions are XPMEM's: -1 (or (void *)-1 from
 * xpmem_attach) with errno set on failure.
 *
 * Differences from XPMEM, all in the direction of safety:
 *  - segids and apids are random, not {pid, counter};
 *  - getting a segment needs its mode bits *and* the right to ptrace-attach its owner;
 *  - an XPMEM_RDONLY apid attaches read-only (XPMEM could not attach it at all);
 *  - munmap() of an attachment is a clean detach (XPMEM killed the process).
 */
#ifndef SHADDR_XPMEM_H
#define SHADDR_XPMEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The XPMEM API version implemented (XPMEM 2.6 interface). */
#define XPMEM_CURRENT_VERSION 0x00026003

/* Size argument of xpmem_make() that exports everything from vaddr to the end of user space. */
#define XPMEM_MAXADDR_SIZE ((size_t)(-1L))

/* Access flags of xpmem_get(). */
#define XPMEM_RDONLY 0x1
#define XPMEM_RDWR 0x2

/* permit_type of xpmem_make(): permit_value is a mode (0777 style) cast to a pointer. */
#define XPMEM_PERMIT_MODE 0x1

typedef int64_t xpmem_segid_t; /* from xpmem_make(), positive */
typedef int64_t xpmem_apid_t;  /* from xpmem_get(), positive */

/* A place in a segment: the access id and the byte offset from the segment's start. */
struct xpmem_addr {
	xpmem_apid_t apid;
	off_t offset;
};

/* XPMEM_CURRENT_VERSION if the shaddr module is usable, else -1 with errno set. */
int xpmem_version(void);

/* Export [vaddr, vaddr + size) (page-aligned) with a permission mode; segid or -1. */
xpmem_segid_t xpmem_make(void *vaddr, size_t size, int permit_type, void *permit_value);

/* Withdraw a segment: its attachments raise SIGBUS on access. 0 or -1. */
int xpmem_remove(xpmem_segid_t segid);

/* Obtain access (XPMEM_RDONLY or XPMEM_RDWR) to a segment; apid or -1. permit_type and
 * permit_value are accepted for compatibility and not used, as in XPMEM. */
xpmem_apid_t xpmem_get(xpmem_segid_t segid, int flags, int permit_type, void *permit_value);

/* Drop an access id, detaching what was attached through it. 0 or -1. */
int xpmem_release(xpmem_apid_t apid);

/* Map size bytes at addr.offset of a segment; at vaddr exactly if it is not NULL. The
 * address of the byte at addr.offset, or (void *)-1. */
void *xpmem_attach(struct xpmem_addr addr, size_t size, void *vaddr);

/* Remove the attachment containing vaddr. 0 or -1. */
int xpmem_detach(void *vaddr);

#ifdef __cplusplus
}
#endif

#endif /* SHADDR_XPMEM_H */
