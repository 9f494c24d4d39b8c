// SPDX-License-Identifier: GPL-2.0
/*
 * Exports: TRANSLATE/REVOKE (handles) and MAKE/REMOVE (segments), the
 * global handle table, and the mmu interval notifier that keeps importers'
 * mappings coherent with the exporter's address space.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/hashtable.h>
#include <linux/mm.h>
#include <linux/pid.h>
#include <linux/random.h>
#include <linux/rculist.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>

#include "shaddr_priv.h"

/* Mappings zapped per round of one invalidation; more take more rounds. */
#define SHADDR_ZAP_BATCH	8

static DEFINE_HASHTABLE(shaddr_exports_table, 10);
static DEFINE_SPINLOCK(shaddr_exports_lock);
static struct workqueue_struct *shaddr_zap_wq;

/*
 * One round of an invalidation's zapping: the mappings, and the pages of
 * each whose PTEs must go, [@first, @last). With @work, it runs on
 * shaddr_zap_wq while the notifier waits: zapping an importer's PTEs enters
 * that importer's mmu notifiers, which must not nest inside the exporter's.
 */
struct shaddr_zap {
	struct work_struct work;
	struct completion done;
	unsigned int nr;
	struct shaddr_mapping *m[SHADDR_ZAP_BATCH];
	unsigned long first[SHADDR_ZAP_BATCH];
	unsigned long last[SHADDR_ZAP_BATCH];
};

static void shaddr_zap_batch(struct shaddr_zap *zap)
{
	unsigned int i;

	for (i = 0; i < zap->nr; i++)
		shaddr_mapping_zap(zap->m[i], zap->first[i], zap->last[i]);
}

static void shaddr_zap_work(struct work_struct *work)
{
	struct shaddr_zap *zap = container_of(work, struct shaddr_zap, work);

	shaddr_zap_batch(zap);
	complete(&zap->done);
}

/*
 * The pages of @m that [start, end) overlaps: [*first, *last). True if any
 * of them may have a PTE. Caller holds exp->lock.
 */
static bool shaddr_may_have_ptes(struct shaddr_mapping *m,
				 unsigned long start, unsigned long end,
				 unsigned long *first, unsigned long *last)
{
	unsigned long s = max(start, m->src);
	unsigned long e = min(end, m->src + m->size);

	if (s >= e)
		return false;
	*first = (s - m->src) >> PAGE_SHIFT;
	*last = (e - m->src + PAGE_SIZE - 1) >> PAGE_SHIFT;
	return shaddr_track_any(&m->populated, *first, *last);
}

/*
 * Collect the next mappings after serial @*cursor that may have PTEs in
 * [start, end), with a reference each. Their bits stay set until the zap is
 * done: a concurrent invalidation of the same pages must not return before
 * the PTEs are gone, and while the bits are set it zaps them too (the
 * kernel makes concurrent zaps of one range safe). Caller holds exp->lock.
 * Returns how many; fewer than SHADDR_ZAP_BATCH means the list has been
 * walked to its end.
 */
static unsigned int shaddr_collect(struct shaddr_export *exp,
				   unsigned long start, unsigned long end,
				   u64 *cursor, struct shaddr_zap *zap)
{
	struct shaddr_mapping *m;
	unsigned long first, last;

	lockdep_assert_held(&exp->lock);
	zap->nr = 0;
	list_for_each_entry(m, &exp->mappings, exp_node) {
		if (m->serial < *cursor ||
		    !shaddr_may_have_ptes(m, start, end, &first, &last))
			continue;
		kref_get(&m->kref);
		zap->m[zap->nr] = m;
		zap->first[zap->nr] = first;
		zap->last[zap->nr] = last;
		*cursor = m->serial + 1;
		if (++zap->nr == SHADDR_ZAP_BATCH)
			break;
	}
	return zap->nr;
}

/*
 * Zap every importer PTE that may map exporter pages in [start, end), and
 * return only when they are gone. Mappings are visited in list order, a
 * batch per round, with no lock held while zapping. No PTE can be inserted
 * meanwhile (the export is dead, or the caller is an invalidation that set
 * the notifier's sequence), so the bits are cleared once the zap is done.
 */
static void shaddr_export_zap(struct shaddr_export *exp, unsigned long start,
			      unsigned long end, bool via_worker)
{
	struct shaddr_zap zap;
	u64 cursor = 0;
	unsigned int i, nr;

	do {
		mutex_lock(&exp->lock);
		nr = shaddr_collect(exp, start, end, &cursor, &zap);
		mutex_unlock(&exp->lock);
		if (!nr)
			break;
		if (via_worker) {
			INIT_WORK_ONSTACK(&zap.work, shaddr_zap_work);
			init_completion(&zap.done);
			queue_work(shaddr_zap_wq, &zap.work);
			wait_for_completion(&zap.done);
			destroy_work_on_stack(&zap.work);
		} else {
			shaddr_zap_batch(&zap);
		}
		mutex_lock(&exp->lock);
		for (i = 0; i < nr; i++)
			shaddr_track_clear(&zap.m[i]->populated, zap.first[i],
					   zap.last[i]);
		mutex_unlock(&exp->lock);
		for (i = 0; i < nr; i++)
			shaddr_mapping_put(zap.m[i]);
		atomic64_inc(&shaddr_stats.invalidations);
	} while (nr == SHADDR_ZAP_BATCH);
}

/* Would an invalidation of [start, end) have PTEs to zap? exp->lock held. */
static bool shaddr_needs_zap(struct shaddr_export *exp, unsigned long start,
			     unsigned long end)
{
	struct shaddr_mapping *m;
	unsigned long first, last;

	list_for_each_entry(m, &exp->mappings, exp_node)
		if (shaddr_may_have_ptes(m, start, end, &first, &last))
			return true;
	return false;
}

static bool shaddr_export_invalidate(struct mmu_interval_notifier *mni,
				     const struct mmu_notifier_range *range,
				     unsigned long cur_seq)
{
	struct shaddr_export *exp =
		container_of(mni, struct shaddr_export, notifier);
	bool busy;

	if (!mmu_notifier_range_blockable(range)) {
		/* Zapping sleeps: refuse if anything would need it. */
		if (!mutex_trylock(&exp->lock))
			return false;
		busy = shaddr_needs_zap(exp, range->start, range->end);
		if (!busy)
			mmu_interval_set_seq(mni, cur_seq);
		mutex_unlock(&exp->lock);
		return !busy;
	}

	/* From here on, no PTE of the range can be inserted... */
	mutex_lock(&exp->lock);
	mmu_interval_set_seq(mni, cur_seq);
	/* The exporter's address space is being torn down: the export dies. */
	if (!atomic_read(&exp->mm->mm_users))
		WRITE_ONCE(exp->dead, true);
	mutex_unlock(&exp->lock);
	/* ...and the ones there are go before we return. */
	shaddr_export_zap(exp, range->start, range->end, true);
	return true;
}

static const struct mmu_interval_notifier_ops shaddr_export_notifier_ops = {
	.invalidate = shaddr_export_invalidate,
};

static void shaddr_export_free_rcu(struct rcu_head *rcu)
{
	kfree(container_of(rcu, struct shaddr_export, rcu));
}

static void shaddr_export_release(struct kref *kref)
{
	struct shaddr_export *exp =
		container_of(kref, struct shaddr_export, kref);

	WARN_ON_ONCE(!list_empty(&exp->mappings));
	mmdrop(exp->mm);
	put_pid(exp->tgid);
	mutex_destroy(&exp->lock);
	atomic64_dec(exp->kind == SHADDR_EXPORT_SEGMENT ?
		     &shaddr_stats.segments : &shaddr_stats.exports);
	call_rcu(&exp->rcu, shaddr_export_free_rcu);
}

/**
 * shaddr_export_dead() - is the export withdrawn or its exporter gone?
 * @exp: the export
 *
 * An exporter whose address space has no users left (it exited or exec'd,
 * even while a fork child still holds its file) exports nothing any more.
 *
 * Return: true if mappings of @exp can only raise SIGBUS.
 */
bool shaddr_export_dead(struct shaddr_export *exp)
{
	return READ_ONCE(exp->dead) || !atomic_read(&exp->mm->mm_users);
}

void shaddr_export_put(struct shaddr_export *exp)
{
	kref_put(&exp->kref, shaddr_export_release);
}

/**
 * shaddr_export_lookup() - find a live export by handle or segid
 * @handle: the handle or segid
 * @kind: what it must be
 *
 * Return: the export with a reference held, or NULL.
 */
struct shaddr_export *shaddr_export_lookup(u64 handle,
					   enum shaddr_export_kind kind)
{
	struct shaddr_export *exp, *found = NULL;

	rcu_read_lock();
	hash_for_each_possible_rcu(shaddr_exports_table, exp, hash_node,
				   handle) {
		if (exp->handle == handle && exp->kind == kind &&
		    kref_get_unless_zero(&exp->kref)) {
			found = exp;
			break;
		}
	}
	rcu_read_unlock();
	if (found && shaddr_export_dead(found)) {
		shaddr_export_put(found);
		found = NULL;
	}
	return found;
}

/*
 * Pick a random handle not in use; caller holds the table lock. Bit 63 is
 * clear so that XPMEM's signed segids stay positive.
 */
static u64 shaddr_new_handle(void)
{
	struct shaddr_export *exp;
	u64 handle;

again:
	handle = get_random_u64() & ~BIT_ULL(63);
	if (!handle)
		goto again;
	hash_for_each_possible(shaddr_exports_table, exp, hash_node, handle)
		if (exp->handle == handle)
			goto again;
	return handle;
}

/*
 * Withdraw an export: no new lookups, its mappings zapped and dead (SIGBUS),
 * the notifier removed, and the table's reference dropped. Caller holds
 * sf->lock of the owning file and has unlinked nothing yet.
 */
void shaddr_export_revoke(struct shaddr_file *sf, struct shaddr_export *exp)
{
	spin_lock(&shaddr_exports_lock);
	hash_del_rcu(&exp->hash_node);
	spin_unlock(&shaddr_exports_lock);
	list_del(&exp->file_node);
	sf->nr_exports--;

	/* No PTE is inserted once it is dead... */
	mutex_lock(&exp->lock);
	WRITE_ONCE(exp->dead, true);
	mutex_unlock(&exp->lock);
	/* ...and those there are go (not inside a notifier: zap directly). */
	shaddr_export_zap(exp, 0, ULONG_MAX, false);
	mmu_interval_notifier_remove(&exp->notifier);
	shaddr_export_put(exp);
}

/**
 * shaddr_export_create() - export [@base, @base + @size) of the file's mm
 * @sf: the exporting file (its lock held)
 * @kind: handle or segment
 * @base: first byte
 * @size: bytes
 *
 * Allocates the export and registers its notifier. The caller fills in the
 * kind-specific fields, then shaddr_export_publish() makes it findable.
 *
 * Return: the export (one reference, the table's once published), or
 * ERR_PTR(-ENOSPC/-ENOMEM/...).
 */
static struct shaddr_export *
shaddr_export_create(struct shaddr_file *sf, enum shaddr_export_kind kind,
		     unsigned long base, unsigned long size)
{
	struct shaddr_export *exp;
	int ret;

	if (sf->nr_exports >= shaddr_max_exports)
		return ERR_PTR(-ENOSPC);
	exp = kzalloc(sizeof(*exp), GFP_KERNEL_ACCOUNT);
	if (!exp)
		return ERR_PTR(-ENOMEM);
	kref_init(&exp->kref);
	mutex_init(&exp->lock);
	INIT_LIST_HEAD(&exp->mappings);
	exp->mm = sf->mm;
	mmgrab(exp->mm);
	exp->tgid = get_task_pid(current, PIDTYPE_TGID);
	exp->kind = kind;
	exp->base = base;
	exp->size = size;
	atomic64_inc(kind == SHADDR_EXPORT_SEGMENT ?
		     &shaddr_stats.segments : &shaddr_stats.exports);

	ret = mmu_interval_notifier_insert(&exp->notifier, exp->mm, base, size,
					   &shaddr_export_notifier_ops);
	if (ret) {
		shaddr_export_put(exp);
		return ERR_PTR(ret);
	}
	return exp;
}

/* Make a created export findable; caller holds sf->lock. */
static void shaddr_export_publish(struct shaddr_file *sf,
				  struct shaddr_export *exp)
{
	spin_lock(&shaddr_exports_lock);
	exp->handle = shaddr_new_handle();
	hash_add_rcu(shaddr_exports_table, &exp->hash_node, exp->handle);
	spin_unlock(&shaddr_exports_lock);
	list_add(&exp->file_node, &sf->exports);
	sf->nr_exports++;
}

long shaddr_ioc_translate(struct shaddr_file *sf, void __user *uarg)
{
	struct shaddr_translate req;
	struct shaddr_export *exp;
	unsigned long base, end, block;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.flags || (req.prot != SHADDR_PROT_READ &&
			  req.prot != (SHADDR_PROT_READ | SHADDR_PROT_WRITE)))
		return -EINVAL;
	if (!req.len || req.va + req.len < req.va ||
	    req.va + req.len > TASK_SIZE)
		return -EINVAL;

	block = sf->slot_size;
	base = ALIGN_DOWN(req.va, block);
	end = ALIGN(req.va + req.len, block);
	if (!end || end > TASK_SIZE)	/* the last block must exist too */
		return -EINVAL;

	exp = shaddr_export_create(sf, SHADDR_EXPORT_HANDLE, base, end - base);
	if (IS_ERR(exp))
		return PTR_ERR(exp);
	exp->block_size = block;
	exp->nr_blocks = (end - base) / block;
	exp->prot = req.prot;
	shaddr_export_publish(sf, exp);
	sf->used = true;

	req.handle = exp->handle;
	req.base = base;
	req.block_size = block;
	req.nr_blocks = exp->nr_blocks;
	req.pad = 0;
	if (copy_to_user(uarg, &req, sizeof(req))) {
		shaddr_export_revoke(sf, exp);
		return -EFAULT;
	}
	return 0;
}

/**
 * shaddr_ioc_make() - SHADDR_IOC_MAKE: export a segment
 * @sf: the file (its lock held)
 * @uarg: &struct shaddr_make
 *
 * Return: see the uapi header.
 */
long shaddr_ioc_make(struct shaddr_file *sf, void __user *uarg)
{
	struct shaddr_make req;
	struct shaddr_export *exp;
	unsigned long end;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.mode & ~0777u || !req.size ||
	    !PAGE_ALIGNED(req.va) || req.va >= TASK_SIZE)
		return -EINVAL;
	/* Clip at the end of user space: "the whole address space". */
	end = (req.size > TASK_SIZE - req.va) ? TASK_SIZE : req.va + req.size;
	if (!PAGE_ALIGNED(end) || end <= req.va)
		return -EINVAL;

	exp = shaddr_export_create(sf, SHADDR_EXPORT_SEGMENT, req.va,
				   end - req.va);
	if (IS_ERR(exp))
		return PTR_ERR(exp);
	exp->uid = current_euid();
	exp->gid = current_egid();
	exp->mode = req.mode;
	exp->prot = SHADDR_PROT_READ | SHADDR_PROT_WRITE;
	shaddr_export_publish(sf, exp);

	req.segid = exp->handle;
	if (copy_to_user(uarg, &req, sizeof(req))) {
		shaddr_export_revoke(sf, exp);
		return -EFAULT;
	}
	return 0;
}

/* REVOKE (handles) and REMOVE (segments): withdraw one of this file's. */
static long shaddr_withdraw(struct shaddr_file *sf, void __user *uarg,
			    enum shaddr_export_kind kind)
{
	struct shaddr_export *exp;
	u64 id;

	if (copy_from_user(&id, uarg, sizeof(id)))
		return -EFAULT;
	list_for_each_entry(exp, &sf->exports, file_node) {
		if (exp->handle == id && exp->kind == kind) {
			shaddr_export_revoke(sf, exp);
			return 0;
		}
	}
	return -ENOENT;
}

long shaddr_ioc_remove(struct shaddr_file *sf, void __user *uarg)
{
	return shaddr_withdraw(sf, uarg, SHADDR_EXPORT_SEGMENT);
}

long shaddr_ioc_revoke(struct shaddr_file *sf, void __user *uarg)
{
	return shaddr_withdraw(sf, uarg, SHADDR_EXPORT_HANDLE);
}

/* The file is being released: withdraw every export it made. */
void shaddr_export_release_all(struct shaddr_file *sf)
{
	struct shaddr_export *exp, *tmp;

	list_for_each_entry_safe(exp, tmp, &sf->exports, file_node)
		shaddr_export_revoke(sf, exp);
}

/**
 * shaddr_export_withdraw_group() - withdraw the exports of an exiting group
 * @sf: the file (its lock held)
 * @tgid: the thread group that is exiting
 *
 * The teardown of the exporter's address space also kills its exports, but
 * any other holder of the address space's users (an importer's fault in
 * flight, a third process's process_vm_readv) defers that teardown until it
 * lets go, possibly after the exporter has been reaped. Withdrawing them
 * here, from the exit of the group itself, makes every access SIGBUS before
 * anyone can reap it.
 */
void shaddr_export_withdraw_group(struct shaddr_file *sf, struct pid *tgid)
{
	struct shaddr_export *exp, *tmp;

	lockdep_assert_held(&sf->lock);
	list_for_each_entry_safe(exp, tmp, &sf->exports, file_node)
		if (exp->tgid == tgid)
			shaddr_export_revoke(sf, exp);
}

int shaddr_export_init(void)
{
	shaddr_zap_wq = alloc_workqueue("shaddr_zap",
					WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	return shaddr_zap_wq ? 0 : -ENOMEM;
}

void shaddr_export_exit(void)
{
	destroy_workqueue(shaddr_zap_wq);
	/* Exports are freed through RCU: let those callbacks finish. */
	rcu_barrier();
}
