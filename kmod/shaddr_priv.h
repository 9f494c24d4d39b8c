/* SPDX-License-Identifier: GPL-2.0 */
/*
 * shaddr internal definitions: objects, their lifetimes, and which lock
 * guards what.
 *
 * Objects
 *  - struct shaddr_file: one open of /dev/shaddr, bound to the address space
 *    (mm) that opened it. Owns its exports and its slot table.
 *  - struct shaddr_export: a handle from TRANSLATE: blocks of the owner's
 *    address space, watched by an mmu interval notifier. Found by handle in
 *    a global RCU hash table. kref: the hash table (until revoked), each
 *    window mapped from it, and transient lookups.
 *  - struct shaddr_window: one importer mapping of one block of an export,
 *    occupying one slot. kref: the VMA (dropped at vm_ops->close), and
 *    transient users (the invalidation path).
 *
 * Locking (outermost first)
 *  - shaddr_file.lock (mutex): ioctls of one file; its export list.
 *  - importer mmap_lock -> exporter mmap_lock: only in the fault path, and
 *    there with mmap_read_trylock() (a busy exporter means "fault again"), so
 *    two processes mapping each other cannot deadlock.
 *  - shaddr_export.lock (mutex): the export's window list, each window's
 *    populated bitmap, the dead flag, and the notifier sequence: a PTE is only
 *    inserted under this lock after mmu_interval_read_retry() said the pages
 *    are still current.
 *  - shaddr_file.slot_lock (spinlock): the slot table; taken last.
 *  - shaddr_exports_lock (spinlock): writers of the handle hash table.
 *
 * Coherence: exporter pages are pinned (FOLL_PIN) only while their PFNs are
 * inserted into a window, as KVM does; the mmu interval notifier then zaps
 * importer PTEs before the exporter's page can be freed, migrated or
 * replaced. The zap (unmap_mapping_range on the window's file range) runs
 * on a workqueue while the notifier waits, so that no mm's notifier is
 * entered from inside another's.
 */
#ifndef _SHADDR_PRIV_H
#define _SHADDR_PRIV_H

#include <linux/atomic.h>
#include <linux/fs.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mmu_notifier.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/sysfs.h>
#include <linux/types.h>

#include <linux/shaddr.h>

struct shaddr_window;

/**
 * struct shaddr_file - state of one open file description of /dev/shaddr
 * @lock: serialises ioctls on this file and guards @exports, @nr_exports
 * @mm: address space that opened the file (mmgrab'd); ioctls from any other
 *      address space fail with -EBADFD
 * @owner_tgid: thread group that opened the file (for diagnostics)
 * @slot_size: block size of TRANSLATE on this file
 * @used: a TRANSLATE or MAP happened: @slot_size is fixed
 * @nr_slots: number of slots (module parameter max_slots at open)
 * @exports: handles this file exported (struct shaddr_export.file_node)
 * @nr_exports: length of @exports
 * @slot_lock: guards @slots
 * @slots: the window in each slot, or NULL
 */
struct shaddr_file {
	struct mutex lock;	/* ioctls of this file; exports */
	struct mm_struct *mm;
	pid_t owner_tgid;
	u64 slot_size;
	bool used;
	unsigned int nr_slots;
	struct list_head exports;
	unsigned int nr_exports;
	spinlock_t slot_lock;	/* guards @slots */
	struct shaddr_window *slots[SHADDR_MAX_SLOTS];
};

/**
 * struct shaddr_export - an exported range of blocks (a handle)
 * @kref: see the file comment
 * @handle: the opaque handle
 * @hash_node: in the global handle table while not revoked
 * @file_node: in the owning file's export list while not revoked
 * @rcu: frees the export after an RCU grace period
 * @mm: exporter's address space (mmgrab'd)
 * @tgid: exporter's thread group (for the ptrace-attach check)
 * @base: first block's address
 * @block_size: bytes per block
 * @nr_blocks: blocks in the export
 * @prot: %SHADDR_PROT_* granted
 * @notifier: mmu interval notifier over [@base, @base + @nr_blocks * size)
 * @lock: guards @windows, @dead and the populated bitmaps of the windows;
 *        held while PTEs are inserted
 * @windows: windows mapped from this export (struct shaddr_window.exp_node)
 * @dead: revoked, or its file closed: windows raise SIGBUS
 */
struct shaddr_export {
	struct kref kref;
	u64 handle;
	struct hlist_node hash_node;
	struct list_head file_node;
	struct rcu_head rcu;
	struct mm_struct *mm;
	struct pid *tgid;
	unsigned long base;
	unsigned long block_size;
	unsigned int nr_blocks;
	u32 prot;
	struct mmu_interval_notifier notifier;
	struct mutex lock;	/* guards windows, dead, bitmaps */
	struct list_head windows;
	bool dead;
};

/**
 * struct shaddr_window - one block of an export mapped into an importer
 * @kref: see the file comment
 * @exp: the export (holds a reference)
 * @importer: the importing file (outlives the window: the VMA pins the file)
 * @slot: slot index in @importer
 * @exp_node: in @exp->windows
 * @src: exporter address of the block
 * @size: window size in bytes (the export's block size)
 * @uaddr: window start in the importer, 0 until mapped
 * @file_off: offset of the window in the device file's address space,
 *            unique per window, so that unmap_mapping_range() zaps exactly
 *            this window
 * @file: the device file the window is mapped through (holds a reference)
 * @writable: the window maps with write permission
 * @vma_live: between ->mmap and ->close of its VMA
 * @populated: one bit per page that may have a PTE (under @exp->lock)
 */
struct shaddr_window {
	struct kref kref;
	struct shaddr_export *exp;
	struct shaddr_file *importer;
	unsigned int slot;
	struct list_head exp_node;
	unsigned long src;
	unsigned long size;
	unsigned long uaddr;
	loff_t file_off;
	struct file *file;
	bool writable;
	bool vma_live;
	unsigned long *populated;
};

/**
 * struct shaddr_stats - module-wide counters, exported under
 * /sys/class/misc/shaddr/stats/
 * @open_files: file descriptions of /dev/shaddr open right now
 * @ioctls: ioctls answered since load
 * @ioctl_errors: ioctls that returned an error since load
 * @exports: handles alive right now (not yet freed)
 * @windows: windows mapped right now
 * @pages_pinned: exporter pages pinned right now (transiently)
 * @pages_mapped: window PTEs inserted since load
 * @faults: window page faults since load
 * @invalidations: notifier invalidations that zapped window PTEs
 * @refusals: MAPs refused (-EPERM, -EACCES, -ENOSPC) since load
 */
struct shaddr_stats {
	atomic64_t open_files;
	atomic64_t ioctls;
	atomic64_t ioctl_errors;
	atomic64_t exports;
	atomic64_t windows;
	atomic64_t pages_pinned;
	atomic64_t pages_mapped;
	atomic64_t faults;
	atomic64_t invalidations;
	atomic64_t refusals;
};

extern struct shaddr_stats shaddr_stats;
extern const struct attribute_group *shaddr_attr_groups[];
extern const struct file_operations shaddr_fops;

/* Module parameters (main.c). */
extern unsigned int shaddr_max_slots;
extern unsigned long shaddr_default_slot_size;
extern unsigned int shaddr_max_exports;

void shaddr_stats_init(void);

/* access.c */
bool shaddr_may_attach(struct pid *tgid, struct mm_struct *mm);

/* export.c */
int shaddr_export_init(void);
void shaddr_export_exit(void);
long shaddr_ioc_translate(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_revoke(struct shaddr_file *sf, void __user *uarg);
void shaddr_export_release_all(struct shaddr_file *sf);
struct shaddr_export *shaddr_export_lookup(u64 handle);
void shaddr_export_put(struct shaddr_export *exp);

/* window.c */
long shaddr_ioc_map(struct shaddr_file *sf, struct file *file,
		    void __user *uarg);
long shaddr_ioc_unmap(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_query(struct shaddr_file *sf, void __user *uarg);
int shaddr_mmap(struct file *file, struct vm_area_struct *vma);
void shaddr_window_zap(struct shaddr_window *win, unsigned long start,
		       unsigned long end);
void shaddr_window_put(struct shaddr_window *win);

#endif /* _SHADDR_PRIV_H */
