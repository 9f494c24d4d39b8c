/* SPDX-License-Identifier: GPL-2.0 */
/*
 * shaddr internal definitions: objects, their lifetimes, and which lock
 * guards what.
 *
 * Objects
 *  - struct shaddr_file: one open of /dev/shaddr, bound to the address space
 *    (mm) that opened it. Owns its exports, its access ids, its slot table
 *    and its attachment quota.
 *  - struct shaddr_export: a handle from TRANSLATE or a segment from MAKE:
 *    a range of the owner's address space, watched by an mmu interval
 *    notifier. Found by id in a global RCU hash table. kref: the table
 *    (until revoked), each mapping of it, each access id (segments), and
 *    transient lookups.
 *  - struct shaddr_mapping: one importer mapping of part of an export: a
 *    window (one block of a handle, in a slot) or an attachment (a range of
 *    a segment). kref: MAP/ATTACH while it creates the mapping, each VMA
 *    that maps it (taken in ->mmap and vm_ops->open, dropped in
 *    vm_ops->close), and transient users (invalidations).
 *
 * VMA lifecycle
 *  A mapping is bound to a VMA only by the ->mmap that its own MAP/ATTACH
 *  ioctl triggers through vm_mmap(): ->mmap accepts the mapping pending in
 *  the file *for the calling task* and consumes it, so no other mmap() of
 *  the device (another thread, another offset, remap_file_pages()) can bind
 *  anything. The kernel may duplicate the VMA (a move that mremap() then
 *  undoes): vm_ops->open counts the duplicate, vm_ops->close uncounts each
 *  VMA, and only when the last VMA of a mapping closes is the mapping
 *  retired: taken off its export's list and its slot or quota released.
 *  A VMA never unlinks a mapping that another VMA still shows.
 *
 * Locking (outermost first)
 *  - shaddr_file.lock (mutex): ioctls of one file; its exports and access
 *    ids.
 *  - mmap_lock: the importer's (faults, vm_ops, MAP/ATTACH populating) and
 *    the exporter's (pinning). One is only ever tried, never waited for,
 *    while the other is held: a fault holding its own lock takes the
 *    exporter's with mmap_read_trylock(); when that fails it drops its own,
 *    waits for the exporter's and pins under it, then tries its own (or
 *    takes it once the exporter's is dropped) to insert. Population pins
 *    with the exporter's lock alone and inserts with the importer's alone.
 *    Two processes mapping each other cannot deadlock.
 *  - shaddr_export.lock (mutex): the export's mapping list, each mapping's
 *    populated bitmap, the dead flag, and the notifier sequence: a PTE is
 *    only inserted under this lock after
 *    mmu_interval_read_retry() said the pages are still current, and only
 *    into a mapping still on the list. Nothing that can reclaim memory runs
 *    under it (the notifier takes it from reclaim).
 *  - shaddr_file.slot_lock (spinlock): the slot table, the attachment list
 *    and quota, the pending mapping, and each mapping's VMA count and
 *    state; taken last.
 *  - shaddr_exports_lock (spinlock): writers of the handle hash table.
 *  - shaddr_users_lock (spinlock): the per-user charges (user.c).
 *
 * Coherence: exporter pages are pinned (FOLL_PIN) only while their PFNs are
 * inserted, as KVM does; the mmu interval notifier then zaps importer PTEs
 * before the exporter's page can be freed, migrated or replaced. An
 * invalidation zaps every mapping with populated pages in its range and
 * clears their bits only once the zap is done: a second invalidation of the
 * same pages meanwhile zaps them too instead of returning early, so its
 * caller cannot free pages an importer still maps. No PTE is inserted
 * while an invalidation of the export is under way. The zap
 * (unmap_mapping_range() of the mapping's range of its file) runs on a
 * workqueue while the notifier waits, so that no mm's notifier is entered
 * from inside another's; no shaddr lock is held while it runs.
 */
#ifndef _SHADDR_PRIV_H
#define _SHADDR_PRIV_H

#include <linux/atomic.h>
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mmu_notifier.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/sysfs.h>
#include <linux/types.h>
#include <linux/xarray.h>

#include <linux/shaddr.h>

struct shaddr_mapping;
struct shaddr_user;

/**
 * struct shaddr_file - state of one open file description of /dev/shaddr
 * @lock: serialises ioctls on this file and guards @exports, @nr_exports,
 *        @accesses, @nr_accesses, @used and @slot_size
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
 * @slot_lock: guards @slots, @attachments, @nr_attachments, @attach_bytes,
 *             @pending, @pending_task, and the VMA count and state of every
 *             mapping imported through this file
 * @slots: the window in each slot, or NULL
 * @attachments: segment attachments (struct shaddr_mapping.file_node)
 * @nr_attachments: length of @attachments
 * @attach_bytes: bytes of all @attachments
 * @pending: the mapping a MAP or ATTACH of this file is creating with
 *           vm_mmap(); ->mmap binds only it, and only once
 * @pending_task: the task inside that vm_mmap()
 * @mapping: the file's own address space (its f_mapping): the VMAs of its
 *           mappings, so that zapping one walks only this file's VMAs
 * @mapping_ids: ids of its mappings, selecting their ranges of @mapping
 */
struct shaddr_file {
	struct mutex lock;	/* ioctls of this file; see kernel-doc */
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
	struct shaddr_mapping *slots[SHADDR_MAX_SLOTS];
	struct list_head attachments;
	unsigned int nr_attachments;
	unsigned long attach_bytes;
	struct shaddr_mapping *pending;
	struct task_struct *pending_task;
	struct address_space mapping;
	struct ida mapping_ids;
};

/* What a struct shaddr_export is. */
enum shaddr_export_kind {
	SHADDR_EXPORT_HANDLE,	/* TRANSLATE: blocks for windows */
	SHADDR_EXPORT_SEGMENT,	/* MAKE: an XPMEM-style segment */
};

/**
 * struct shaddr_export - an exported range of blocks (a handle) or a segment
 * @kref: see the file comment
 * @handle: the opaque handle or segid
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
 * @lock: see the file comment
 * @mappings: mappings of this export (struct shaddr_mapping.exp_node), in
 *            creation order
 * @next_serial: serial number of the next mapping added to @mappings
 * @dead: revoked, or its file closed: mappings raise SIGBUS
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
	struct mutex lock;	/* see the file comment */
	struct list_head mappings;
	u64 next_serial;
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

/* Where a mapping is in its life (struct shaddr_mapping.state). */
enum shaddr_mapping_state {
	SHADDR_MAPPING_NEW,	/* created, waiting for its ->mmap */
	SHADDR_MAPPING_MAPPED,	/* shown by @nr_vmas VMAs */
	SHADDR_MAPPING_RETIRED,	/* off its export, slot/quota released */
};

/**
 * struct shaddr_mapping - a window (one block of a handle, in a slot) or an
 * attachment (a range of a segment) mapped into an importer
 * @kref: see the file comment
 * @exp: the export (holds a reference)
 * @importer: the importing file; kept alive by @file
 * @file: the device file the mapping is made through (holds a reference)
 * @slot: slot index in @importer, or -1 for an attachment
 * @apid: access id an attachment was made through (0 for windows)
 * @file_node: in @importer->attachments (attachments, until retired)
 * @exp_node: in @exp->mappings (until retired; under @exp->lock)
 * @serial: position in @exp->mappings (increasing along the list)
 * @src: exporter address of the first byte mapped
 * @size: bytes mapped (page multiple)
 * @file_off: offset of the mapping in @importer->mapping, unique in it for
 *            the mapping's whole life, so that unmap_mapping_range() zaps
 *            exactly this mapping
 * @writable: the mapping may map with write permission: pages the exporter
 *            may write are mapped writable, pages it may only read
 *            read-only (a write there raises SIGSEGV)
 * @state: see enum shaddr_mapping_state (under @importer->slot_lock)
 * @nr_vmas: VMAs showing the mapping (under @importer->slot_lock)
 * @uaddr: start of its VMA in the importer (under @importer->slot_lock)
 * @populated: which pages may have a PTE: a sparse bitmap (track.c); bits
 *             under @exp->lock
 * @user: the user the mapping's size is charged to (user.c)
 * @hole_task: a task whose fault's slow path found a hole at @hole_off
 *             (or a write the exporter may not make there) with the
 *             exporter's range as of @hole_seq; its retry (the same
 *             access, @hole_write) raises @hole_sig (these five under
 *             @exp->lock)
 * @hole_off: see @hole_task
 * @hole_write: see @hole_task: the fault was a write
 * @hole_seq: see @hole_task
 * @hole_sig: VM_FAULT_SIGBUS (a hole) or VM_FAULT_SIGSEGV (write denied)
 */
struct shaddr_mapping {
	struct kref kref;
	struct shaddr_export *exp;
	struct shaddr_file *importer;
	struct file *file;
	int slot;
	u64 apid;
	struct list_head file_node;
	struct list_head exp_node;
	u64 serial;
	unsigned long src;
	unsigned long size;
	loff_t file_off;
	bool writable;
	enum shaddr_mapping_state state;
	unsigned int nr_vmas;
	unsigned long uaddr;
	struct xarray populated;
	struct shaddr_user *user;
	struct task_struct *hole_task;
	unsigned long hole_off;
	bool hole_write;
	unsigned long hole_seq;
	vm_fault_t hole_sig;
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
 * @track_bytes: bytes of the mappings' population bitmaps right now
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
	atomic64_t track_bytes;
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
extern unsigned long shaddr_max_user_map_mib;

void shaddr_stats_init(void);

/* access.c */
bool shaddr_may_attach(struct pid *tgid, struct mm_struct *mm);
bool shaddr_exporter_capable(struct pid *tgid, struct mm_struct *mm, int cap);

/* export.c */
int shaddr_export_init(void);
void shaddr_export_exit(void);
void shaddr_export_revoke(struct shaddr_file *sf, struct shaddr_export *exp);
long shaddr_ioc_translate(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_revoke(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_make(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_remove(struct shaddr_file *sf, void __user *uarg);
void shaddr_export_release_all(struct shaddr_file *sf);
void shaddr_export_withdraw_group(struct shaddr_file *sf, struct pid *tgid);
struct shaddr_export *shaddr_export_lookup(u64 handle,
					   enum shaddr_export_kind kind);
void shaddr_export_put(struct shaddr_export *exp);
bool shaddr_export_dead(struct shaddr_export *exp);

/* mapping.c */
long shaddr_mapping_create(struct shaddr_file *sf, struct file *file,
			   struct shaddr_export *exp, unsigned long src,
			   unsigned long size, bool writable, u64 apid,
			   unsigned long hint, bool fixed, unsigned long *addr,
			   int *slot);
int shaddr_mmap(struct file *file, struct vm_area_struct *vma);
void shaddr_mapping_zap(struct shaddr_mapping *m, unsigned long first,
			unsigned long last);
void shaddr_mapping_put(struct shaddr_mapping *m);

/* track.c */
int shaddr_track_prepare(struct xarray *xa, unsigned long first,
			 unsigned long nr);
void shaddr_track_set(struct xarray *xa, unsigned long first,
		      unsigned long nr);
bool shaddr_track_any(struct xarray *xa, unsigned long first,
		      unsigned long last);
void shaddr_track_clear(struct xarray *xa, unsigned long first,
			unsigned long last);
void shaddr_track_destroy(struct xarray *xa);

/* user.c */
struct shaddr_user *shaddr_user_charge(unsigned long bytes);
void shaddr_user_uncharge(struct shaddr_user *u, unsigned long bytes);

/* window.c */
long shaddr_ioc_map(struct shaddr_file *sf, struct file *file,
		    void __user *uarg);
long shaddr_ioc_unmap(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_query(struct shaddr_file *sf, void __user *uarg);

/* segment.c */
long shaddr_ioc_get(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_release(struct shaddr_file *sf, void __user *uarg);
long shaddr_ioc_attach(struct shaddr_file *sf, struct file *file,
		       void __user *uarg);
long shaddr_ioc_detach(struct shaddr_file *sf, void __user *uarg);
void shaddr_access_release_all(struct shaddr_file *sf);

#endif /* _SHADDR_PRIV_H */
