/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * shaddr: single-copy shared-address memory for intra-node MPI collectives.
 *
 * The ioctl ABI of /dev/shaddr. This header is the single source of truth:
 * the kernel module and every userspace component include it unchanged.
 *
 * Rules for this ABI:
 *  - every structure uses fixed-size types and explicit padding, so its
 *    layout is identical on every 64-bit architecture;
 *  - reserved fields must be zero on input and are zeroed on output;
 *  - a change that is not backward compatible bumps SHADDR_ABI_MAJOR,
 *    an addition bumps SHADDR_ABI_MINOR and sets a new SHADDR_FEAT_* bit.
 *
 * Rules for every command but VERSION:
 *  - it acts on the address space that opened the file: from any other (a
 *    descriptor inherited across fork or passed over a socket) it fails
 *    with -EBADFD, QUERY included;
 *  - QUERY aside, it needs a descriptor open for writing, else -EBADF;
 *  - an unknown command is -ENOTTY.
 * A plain mmap() of the device always fails (-EINVAL): mappings are made
 * by MAP and ATTACH only. They cannot be split, moved, grown or shrunk
 * (mremap() fails and leaves them intact), are not inherited across fork,
 * and go away on UNMAP/DETACH, munmap(), or exit.
 *
 * ABI 1.1: QUERY and the other commands refuse foreign address spaces and
 * read-only descriptors as above (1.0 answered QUERY anywhere and failed
 * MAP on a read-only descriptor with -EINVAL).
 *
 * ABI 1.2 (%SHADDR_FEAT_READ_ONLY_PAGES): a read-write window or attachment
 * maps the pages its exporter may only read (.rodata, mprotect(PROT_READ),
 * read-only file mappings) read-only: reads work, a write there raises
 * SIGSEGV (1.1 raised SIGBUS on any access to them).
 */
#ifndef _UAPI_LINUX_SHADDR_H
#define _UAPI_LINUX_SHADDR_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* Name of the misc device: /dev/shaddr. */
#define SHADDR_DEVICE_NAME	"shaddr"

#define SHADDR_ABI_MAJOR	1
#define SHADDR_ABI_MINOR	2

/*
 * Feature bits reported by SHADDR_IOC_VERSION. A bit is set only when the
 * running module implements the feature completely.
 */
#define SHADDR_FEAT_WINDOWS	(1ULL << 0)	/* CNK-style process windows */
#define SHADDR_FEAT_SEGMENTS	(1ULL << 1)	/* XPMEM-like segments */
#define SHADDR_FEAT_HUGE_MAP	(1ULL << 2)	/* PMD/PUD-sized window entries */
/* Read-write mappings map pages the exporter may only read, read-only. */
#define SHADDR_FEAT_READ_ONLY_PAGES	(1ULL << 3)

/* 0xC6 is unassigned in Documentation/userspace-api/ioctl/ioctl-number.rst. */
#define SHADDR_IOC_MAGIC	0xC6

/**
 * struct shaddr_version - answer of %SHADDR_IOC_VERSION
 * @abi_major: %SHADDR_ABI_MAJOR of the running module; userspace built
 *             against another major must not issue any other ioctl
 * @abi_minor: %SHADDR_ABI_MINOR of the running module
 * @features: %SHADDR_FEAT_* bits the running module implements
 * @reserved: zeroed by the kernel
 */
struct shaddr_version {
	__u32 abi_major;
	__u32 abi_minor;
	__u64 features;
	__u64 reserved[2];
};

/**
 * define SHADDR_IOC_VERSION - report the module's ABI version and features
 *
 * Argument: pointer to a &struct shaddr_version, filled in by the kernel.
 * Never fails on a valid pointer; needs no prior set-up on the file.
 *
 * Return: 0, or -EFAULT if the argument cannot be written.
 */
#define SHADDR_IOC_VERSION	_IOR(SHADDR_IOC_MAGIC, 0x00, \
				     struct shaddr_version)

/* Window protections (TRANSLATE grants, MAP asks). */
#define SHADDR_PROT_READ	0x1
#define SHADDR_PROT_WRITE	0x2

/* Slot (block) sizes a process may choose with SHADDR_IOC_SET_SLOT_SIZE. */
#define SHADDR_SLOT_1M		(1ULL << 20)
#define SHADDR_SLOT_16M		(1ULL << 24)
#define SHADDR_SLOT_256M	(1ULL << 28)

/* Upper bound of the slot count (module parameter max_slots). */
#define SHADDR_MAX_SLOTS	16

/**
 * struct shaddr_translate - argument of %SHADDR_IOC_TRANSLATE
 * @va: in: start of the caller's buffer
 * @len: in: length of the buffer in bytes, > 0
 * @prot: in: %SHADDR_PROT_READ, optionally | %SHADDR_PROT_WRITE: what
 *        importers of the handle may do
 * @flags: in: must be 0
 * @handle: out: opaque, random, never 0, bit 63 clear (users may tag a
 *          handle with it); valid until revoked or until the caller's file
 *          is closed
 * @base: out: address of the first block: @va rounded down to the slot size
 * @block_size: out: the caller's slot size
 * @nr_blocks: out: number of blocks covering [@va, @va + @len)
 * @pad: zeroed
 */
struct shaddr_translate {
	__u64 va;
	__u64 len;
	__u32 prot;
	__u32 flags;
	__u64 handle;
	__u64 base;
	__u64 block_size;
	__u32 nr_blocks;
	__u32 pad;
};

/**
 * struct shaddr_map - argument of %SHADDR_IOC_MAP
 * @handle: in: a handle from another process's %SHADDR_IOC_TRANSLATE
 * @block: in: which block of the handle, 0 <= @block < nr_blocks
 * @prot: in: %SHADDR_PROT_READ, optionally | %SHADDR_PROT_WRITE
 * @addr: out: start of the new window in the caller's address space
 * @size: out: window size (the handle's block size)
 * @slot: out: the slot the window occupies
 * @flags: in: must be 0
 */
struct shaddr_map {
	__u64 handle;
	__u32 block;
	__u32 prot;
	__u64 addr;
	__u64 size;
	__u32 slot;
	__u32 flags;
};

/* UNMAP by slot index instead of by address. */
#define SHADDR_UNMAP_BY_SLOT	0x1

/**
 * struct shaddr_unmap - argument of %SHADDR_IOC_UNMAP
 * @addr: in: start address of a window (unless %SHADDR_UNMAP_BY_SLOT)
 * @slot: in: slot index (with %SHADDR_UNMAP_BY_SLOT)
 * @flags: in: 0 or %SHADDR_UNMAP_BY_SLOT
 */
struct shaddr_unmap {
	__u64 addr;
	__u32 slot;
	__u32 flags;
};

/* States of a slot in struct shaddr_slot_info. */
#define SHADDR_SLOT_FREE	0
#define SHADDR_SLOT_MAPPED	1
#define SHADDR_SLOT_DEAD	2	/* exporter exited/exec'd or revoked: SIGBUS */

/**
 * struct shaddr_slot_info - one slot, as reported by %SHADDR_IOC_QUERY
 * @state: %SHADDR_SLOT_FREE, %SHADDR_SLOT_MAPPED or %SHADDR_SLOT_DEAD
 * @prot: %SHADDR_PROT_* of the window
 * @peer: exporter's thread-group id in the caller's pid namespace (0 if none)
 * @pad: zeroed
 * @handle: the handle the window was mapped from
 * @addr: window start in the caller's address space
 * @block: exporter address of the block the window shows
 * @size: window size
 */
struct shaddr_slot_info {
	__u32 state;
	__u32 prot;
	__s32 peer;
	__u32 pad;
	__u64 handle;
	__u64 addr;
	__u64 block;
	__u64 size;
};

/**
 * struct shaddr_query - answer of %SHADDR_IOC_QUERY
 * @nr_slots: slots this file has (module parameter max_slots at open)
 * @nr_mapped: slots in use
 * @slot_size: this file's slot size
 * @slots: the first @nr_slots entries describe the slots; the rest are zero
 */
struct shaddr_query {
	__u32 nr_slots;
	__u32 nr_mapped;
	__u64 slot_size;
	struct shaddr_slot_info slots[SHADDR_MAX_SLOTS];
};

/**
 * define SHADDR_IOC_TRANSLATE - export blocks of the caller's address space
 *
 * Argument: &struct shaddr_translate. Fixes the file's slot size.
 *
 * Return: 0; -EFAULT (argument not accessible); -EINVAL (zero @len, range
 * overflows or leaves user space, bad @prot or @flags); -EBADFD (the file
 * belongs to another address space, e.g. inherited across fork); -ENOSPC
 * (the file has max_exports handles already); -ENOMEM.
 */
#define SHADDR_IOC_TRANSLATE	_IOWR(SHADDR_IOC_MAGIC, 0x01, \
				      struct shaddr_translate)

/**
 * define SHADDR_IOC_REVOKE - withdraw a handle of the caller's
 *
 * Argument: pointer to the __u64 handle. Windows mapped from it are zapped;
 * their next access raises SIGBUS; new MAPs fail with -ENOENT.
 *
 * Return: 0; -EFAULT; -ENOENT (no such handle of this file); -EBADFD.
 */
#define SHADDR_IOC_REVOKE	_IOW(SHADDR_IOC_MAGIC, 0x02, __u64)

/**
 * define SHADDR_IOC_MAP - map a block of another process into a free slot
 *
 * Argument: &struct shaddr_map. The window is populated with the exporter's
 * present pages at once; other pages fault in on first touch, in the
 * exporter's address space. It is not inherited across fork, cannot be
 * split or moved, and goes away on UNMAP, munmap or exit. Access follows the
 * exporter's own permission, page by page, as of the access: a read-only
 * window reads what the exporter may read; a read-write one also writes
 * what the exporter may write, and maps what it may only read read-only (a
 * write there raises SIGSEGV; the exporter's page is never written). A
 * page the exporter cannot read (unmapped, PROT_NONE, VM_IO/VM_PFNMAP or
 * secret memory, a file hole) raises SIGBUS.
 *
 * Return: 0; -EFAULT; -EINVAL (bad @prot, @flags or @block); -ENOENT (no
 * such handle, revoked, or its exporter exited); -EPERM (the caller may not
 * ptrace-attach to the exporter); -EACCES (@prot asks for write on a
 * read-only handle); -ENOSPC (no free slot); -EBADFD; -EBADF; -ENOMEM (the
 * caller's real uid would exceed max_user_map_mib, checked before anything
 * is allocated, or no memory).
 */
#define SHADDR_IOC_MAP		_IOWR(SHADDR_IOC_MAGIC, 0x03, struct shaddr_map)

/**
 * define SHADDR_IOC_UNMAP - remove a window and free its slot
 *
 * Argument: &struct shaddr_unmap.
 *
 * Return: 0; -EFAULT; -EINVAL (bad @flags, or @slot out of range); -ENOENT
 * (no window at @addr or in @slot); -EBADFD.
 */
#define SHADDR_IOC_UNMAP	_IOW(SHADDR_IOC_MAGIC, 0x04, struct shaddr_unmap)

/**
 * define SHADDR_IOC_QUERY - describe the caller's slots
 *
 * Argument: &struct shaddr_query, filled in by the kernel.
 *
 * Return: 0; -EFAULT; -EBADFD (the file belongs to another address space).
 */
#define SHADDR_IOC_QUERY	_IOR(SHADDR_IOC_MAGIC, 0x05, struct shaddr_query)

/**
 * define SHADDR_IOC_SET_SLOT_SIZE - choose this file's slot size
 *
 * Argument: pointer to a __u64: %SHADDR_SLOT_1M, %SHADDR_SLOT_16M or
 * %SHADDR_SLOT_256M. Allowed until the first TRANSLATE or MAP on the file.
 *
 * Return: 0; -EFAULT; -EINVAL (not one of the three sizes); -EBUSY (the file
 * has been used already).
 */
#define SHADDR_IOC_SET_SLOT_SIZE _IOW(SHADDR_IOC_MAGIC, 0x06, __u64)

/* Segment access flags of SHADDR_IOC_GET (values of XPMEM_RDONLY/XPMEM_RDWR). */
#define SHADDR_SEG_RDONLY	0x1
#define SHADDR_SEG_RDWR		0x2

/* SHADDR_IOC_ATTACH flag: map exactly at @vaddr (MAP_FIXED). */
#define SHADDR_ATTACH_FIXED	0x1

/**
 * struct shaddr_make - argument of %SHADDR_IOC_MAKE
 * @va: in: start of the segment, page-aligned
 * @size: in: bytes, page-aligned and > 0; a range reaching past the end of
 *        user space is clipped there (va 0 with size ~0 exports the whole
 *        address space, as MPI libraries do)
 * @mode: in: permission bits (0777 style) checked against the caller of
 *        %SHADDR_IOC_GET: owner, group, other, as XPMEM_PERMIT_MODE
 * @flags: in: must be 0
 * @segid: out: random, positive (bit 63 clear), never 0
 */
struct shaddr_make {
	__u64 va;
	__u64 size;
	__u32 mode;
	__u32 flags;
	__u64 segid;
};

/**
 * struct shaddr_get - argument of %SHADDR_IOC_GET
 * @segid: in: a segment id
 * @flags: in: %SHADDR_SEG_RDONLY or %SHADDR_SEG_RDWR
 * @pad: in: must be 0
 * @apid: out: access id, random, positive, valid for this file only
 */
struct shaddr_get {
	__u64 segid;
	__u32 flags;
	__u32 pad;
	__u64 apid;
};

/**
 * struct shaddr_attach - argument of %SHADDR_IOC_ATTACH
 * @apid: in: access id from %SHADDR_IOC_GET on this file
 * @offset: in: byte offset into the segment
 * @size: in: bytes to map, > 0; @offset + @size must lie in the segment
 * @vaddr: in: address hint, or the exact address with %SHADDR_ATTACH_FIXED
 *         (then it must have the same offset within a page as @offset)
 * @flags: in: 0 or %SHADDR_ATTACH_FIXED
 * @pad: in: must be 0
 * @addr: out: address of the byte at @offset in the new attachment
 */
struct shaddr_attach {
	__u64 apid;
	__u64 offset;
	__u64 size;
	__u64 vaddr;
	__u32 flags;
	__u32 pad;
	__u64 addr;
};

/**
 * define SHADDR_IOC_MAKE - export a segment of the caller's address space
 *
 * Argument: &struct shaddr_make.
 *
 * Return: 0; -EFAULT; -EINVAL (unaligned, zero or empty range, mode above
 * 0777, @flags); -EBADFD; -ENOSPC (max_exports reached); -ENOMEM.
 */
#define SHADDR_IOC_MAKE		_IOWR(SHADDR_IOC_MAGIC, 0x10, struct shaddr_make)

/**
 * define SHADDR_IOC_REMOVE - withdraw a segment of the caller's
 *
 * Argument: pointer to the __u64 segid. Attachments of it raise SIGBUS on
 * their next access; GET and ATTACH through it fail with -ENOENT.
 *
 * Return: 0; -EFAULT; -ENOENT (no such segment of this file); -EBADFD.
 */
#define SHADDR_IOC_REMOVE	_IOW(SHADDR_IOC_MAGIC, 0x11, __u64)

/**
 * define SHADDR_IOC_GET - obtain access to another process's segment
 *
 * Argument: &struct shaddr_get. Allowed if the segment's mode grants the
 * access to the caller's effective uid/gid (or the caller has CAP_IPC_OWNER
 * in the segment owner's user namespace) *and* the caller may ptrace-attach
 * to the segment's owner.
 *
 * Return: 0; -EFAULT; -EINVAL (@flags, @pad); -ENOENT (no such segment);
 * -EACCES (mode denies it); -EPERM (ptrace-attach denied); -EBADFD;
 * -ENOSPC (max_exports access ids on this file); -ENOMEM.
 */
#define SHADDR_IOC_GET		_IOWR(SHADDR_IOC_MAGIC, 0x12, struct shaddr_get)

/**
 * define SHADDR_IOC_RELEASE - drop an access id and detach what it attached
 *
 * Argument: pointer to the __u64 apid.
 *
 * Return: 0; -EFAULT; -ENOENT (no such access id on this file); -EBADFD.
 */
#define SHADDR_IOC_RELEASE	_IOW(SHADDR_IOC_MAGIC, 0x13, __u64)

/**
 * define SHADDR_IOC_ATTACH - map part of a segment into the caller
 *
 * Argument: &struct shaddr_attach. Read-only unless the access id is
 * %SHADDR_SEG_RDWR; page by page, access follows the exporter's own
 * permission as for %SHADDR_IOC_MAP (a write where the exporter may only
 * read raises SIGSEGV, a page it cannot read SIGBUS). Its first 256 MiB
 * are populated at once with present pages; the rest faults in on demand
 * (population stops at a fatal signal). munmap() of an attachment is a
 * clean detach. At most 1 TiB.
 *
 * Return: 0; -EFAULT; -EINVAL (range outside the segment, zero size or
 * above 1 TiB, @flags, @pad, misaligned fixed address); -ENOENT (no such
 * access id, or the segment was removed, or its exporter exited); -ENOSPC
 * (max_attachments reached); -ENOMEM (max_attach_mib of the file or
 * max_user_map_mib of the caller's real uid reached, checked before
 * anything sized by the request is allocated, or no memory); -EBADFD;
 * -EBADF; errors of mmap(2).
 */
#define SHADDR_IOC_ATTACH	_IOWR(SHADDR_IOC_MAGIC, 0x14, \
				      struct shaddr_attach)

/**
 * define SHADDR_IOC_DETACH - remove the attachment containing an address
 *
 * Argument: pointer to a __u64 address inside an attachment of this file.
 *
 * Return: 0; -EFAULT; -ENOENT (no attachment there); -EBADFD.
 */
#define SHADDR_IOC_DETACH	_IOW(SHADDR_IOC_MAGIC, 0x15, __u64)

#endif /* _UAPI_LINUX_SHADDR_H */
