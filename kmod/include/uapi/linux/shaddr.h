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
 */
#ifndef _UAPI_LINUX_SHADDR_H
#define _UAPI_LINUX_SHADDR_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* Name of the misc device: /dev/shaddr. */
#define SHADDR_DEVICE_NAME	"shaddr"

#define SHADDR_ABI_MAJOR	1
#define SHADDR_ABI_MINOR	0

/*
 * Feature bits reported by SHADDR_IOC_VERSION. A bit is set only when the
 * running module implements the feature completely.
 */
#define SHADDR_FEAT_WINDOWS	(1ULL << 0)	/* CNK-style process windows */
#define SHADDR_FEAT_SEGMENTS	(1ULL << 1)	/* XPMEM-like segments */
#define SHADDR_FEAT_HUGE_MAP	(1ULL << 2)	/* PMD/PUD-sized window entries */

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

#endif /* _UAPI_LINUX_SHADDR_H */
