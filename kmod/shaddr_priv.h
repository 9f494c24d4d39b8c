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
 * @accesses: access ids from GET (struct shaddr_access.file_node)
 * @nr_accesses: length of @accesses
 * @slot_lock: guards @slots, @attachments, @nr_attachments, @attach_bytes
 *             and @pending
 * @slots: the window in each slot, or NULL
 * @attachments: segment attachments (struct shaddr_window.file_node)
 * @nr_attachments: length of @attachments
 * @attach_bytes: bytes of all @attachments
 * @pending: the window a MAP or ATTACH of this file is creating with
 *           vm_mmap(); ->mmap accepts only it
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
	struct list_head accesses;
	unsigned int nr_accesses;
	spinlock_t slot_lock;	/* see kernel-doc above */
	struct shaddr_window *slots[SHADDR_MAX_SLOTS];
	struct list_head attachments;
	unsigned int nr_attachments;
	unsigned long attach_bytes;
	struct shaddr_window *pending;
};

/* What a struct shaddr_export is. */
enum shaddr_export_kind {
	SHADDR_EXPORT_HANDLE,	/* TRANSLATE: blocks for windows */
	SHADDR_EXPORT_SEGMENT,	/* MAKE: an XPMEM-style segment */
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
 * @kind: handle or segment
 * @base: first byte (a block boundary for handles)
 * @size: bytes exported
 * @block_size: bytes per block (handles)
 * @nr_blocks: blocks in the export (handles)
 * @prot: %SHADDR_PROT_* granted (handles)
 * @uid: owner's effective uid at MAKE (segments)
 * @gid: owner's effective gid at MAKE (segments)
 * @mode: 0777-style permission bits (segments)
 * @notifier: mmu interval notifier over [@base, @base + @size)
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
	enum shaddr_export_kind kind;
	unsigned long base;
	unsigned long size;
	unsigned long block_size;
	unsigned int nr_blocks;
	u32 prot;
	kuid_t uid;
	kgid_t gid;
	u32 mode;
	struct mmu_interval_notifier notifier;
	struct mutex lock;	/* guards windows, dead, bitmaps */
	struct list_head windows;
	bool dead;
};

/**
 * struct shaddr_access - an access id (apid) from GET, private to one file
 * @apid: the access id
 * @seg: the segment (holds a reference)
 * @writable: obtained with %SHADDR_SEG_RDWR
 * @file_node: in the file's access list
 */
struct shaddr_access {
	u64 apid;
	struct shaddr_export *seg;
	bool writable;
	struct list_head file_node;
};

/**
 * struct shaddr_window - a window (one block of a handle, in a slot) or an
 * attachment (a range of a segment) mapped into an importer
 * @kref: see the file comment
 * @exp: the export (holds a reference)
 * @importer: the importing file (outlives the window: the VMA pins the file)
 * @slot: slot index in @importer, or -1 for an attachment
 * @apid: access id an attachment was made through (0 for windows)
 * @file_node: in @importer->attachments (attachments only)
 * @exp_node: in @exp->windows
 * @src: exporter address of the first byte mapped
 * @size: bytes mapped (page multiple)
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
	int slot;
	u64 apid;
	struct list_head file_node;
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
 * @refusals: MAPs and GETs refused (-EPERM, -EACCES, -ENOSPC) since load
 * @segments: segments alive right now
 * @attachments: segment attachments mapped right now
 * @huge_mapped: 2 MiB PMD mappings made since load
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
	atomic64_t segments;
	atomic64_t attachments;
	atomic64_t huge_mapped;
};

extern struct shaddr_stats shaddr_stats;
extern const struct attribute_group *shaddr_attr_groups[];
extern const struct file_operations shaddr_fops;

/* Module parameters (main.c). */
extern unsigned int shaddr_max_slots;
extern unsigned long shaddr_default_slot_size;
extern unsigned int shaddr_max_exports;
extern unsigned int shaddr_max_attachments;
extern unsigned long shaddr_max_attach_mib;

void shaddr_stats_init(void);

/* access.c */
bool shaddr_may_attach(struct pid *tgid, struct mm_struct *mm);

/* export.c */
int shaddr_export_init(void);
void shaddr_export_exit(void);
struct shaddr_export *shaddr_export_create(struct shaddr_file *sf,
					   enum shaddr_export_kind kind,
					   unsigned long base,
					   unsigned long size);
void shaddr_export_revoke(struct shaddr_file *sf, struct shaddr_export *exp);
long shaddr_ioc_translate(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_revoke(struct shaddr_file *sf, void __user *uarg);
void shaddr_export_release_all(struct shaddr_file *sf);
struct shaddr_export *shaddr_export_lookup(u64 handle,
					   enum shaddr_export_kind kind);
void shaddr_export_put(struct shaddr_export *exp);

/* segment.c */
long shaddr_ioc_make(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_remove(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_get(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_release(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_attach(struct shaddr_file *sf, struct file *file,
		       void __user *uarg);
long shaddr_ioc_detach(struct shaddr_file *sf, void __user *uarg);
void shaddr_access_release_all(struct shaddr_file *sf);

/* window.c */
long shaddr_window_create(struct shaddr_file *sf, struct file *file,
			  struct shaddr_export *exp, unsigned long src,
			  unsigned long size, bool writable, u64 apid,
			  unsigned long hint, bool fixed, unsigned long *addr);
long shaddr_detach_at(struct shaddr_file *sf, unsigned long addr);
void shaddr_detach_apid(struct shaddr_file *sf, u64 apid);
long shaddr_ioc_map(struct shaddr_file *sf, struct file *file,
		    void __user *uarg);
long shaddr_ioc_unmap(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_query(struct shaddr_file *sf, void __user *uarg);
int shaddr_mmap(struct file *file, struct vm_area_struct *vma);
void shaddr_window_zap(struct shaddr_window *win, unsigned long start,
		       unsigned long end);
void shaddr_window_put(struct shaddr_window *win);

#endif /* _SHADDR_PRIV_H */
