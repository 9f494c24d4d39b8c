/* SPDX-License-Identifier: GPL-2.0 */
/*
 * shaddr internal definitions: the per-file context, statistics, and which
 * lock guards what.
 *
 * Locking rules
 *  - struct shaddr_stats counters are atomics (atomic64_t); no lock.
 *  - A struct shaddr_file is private to its open file; file operations on it
 *    are serialised by shaddr_file.lock.
 */
#ifndef _SHADDR_PRIV_H
#define _SHADDR_PRIV_H

#include <linux/atomic.h>
#include <linux/fs.h>
#include <linux/mutex.h>
#include <linux/sysfs.h>

#include <linux/shaddr.h>

/**
 * struct shaddr_file - state of one open file description of /dev/shaddr
 * @lock: serialises ioctls on this file
 * @owner_tgid: thread group that opened the file (for diagnostics)
 */
struct shaddr_file {
	struct mutex lock;	/* serialises ioctls on this file */
	pid_t owner_tgid;
};

/**
 * struct shaddr_stats - module-wide counters, exported under
 * /sys/class/misc/shaddr/stats/
 * @open_files: file descriptions of /dev/shaddr open right now
 * @ioctls: ioctls answered since load
 * @ioctl_errors: ioctls that returned an error since load
 */
struct shaddr_stats {
	atomic64_t open_files;
	atomic64_t ioctls;
	atomic64_t ioctl_errors;
};

extern struct shaddr_stats shaddr_stats;
extern const struct attribute_group *shaddr_attr_groups[];
extern const struct file_operations shaddr_fops;

void shaddr_stats_init(void);

#endif /* _SHADDR_PRIV_H */
