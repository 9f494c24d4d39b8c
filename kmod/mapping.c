// SPDX-License-Identifier: GPL-2.0
/*
 * Mappings (importer side), shared by windows and attachments: create one
 * and bind it to the VMA its own ioctl makes, count the VMAs that show it,
 * retire it when the last one closes, populate it, fault the rest in on
 * demand, and zap its PTEs for the invalidation path.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/file.h>
#include <linux/idr.h>
#include <linux/mm.h>
#include <linux/mman.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "compat.h"
#include "shaddr_priv.h"

/* Pages pinned per batch when a mapping is populated at MAP/ATTACH time. */
#define SHADDR_POPULATE_BATCH	256
/*
 * Bytes populated eagerly: the largest slot. Beyond it, pages fault in on
 * demand, so a huge attachment costs nothing until touched.
 */
#define SHADDR_POPULATE_MAX	SHADDR_SLOT_256M
/* Pages a fault maps: the faulting one, plus present ones after it. */
#define SHADDR_FAULT_AROUND	16
/*
 * Rounds of a fault's slow path when invalidations keep making its pages
 * stale between pin and insert; then the fault is retried from the start.
 */
#define SHADDR_SLOW_TRIES	4
/* Ticks a fault that cannot drop its lock polls for the exporter's. */
#define SHADDR_NORETRY_POLLS	2
/*
 * A mapping id selects a unique range of its file's address space, one
 * maximal attachment (1 TiB) wide; ids are per file.
 */
#define SHADDR_MAPPING_SPAN	BIT_ULL(40)
#define SHADDR_MAX_MAPPING_IDS	BIT(22)

static const struct vm_operations_struct shaddr_mapping_vm_ops;

static void shaddr_mapping_release(struct kref *kref)
{
	struct shaddr_mapping *m =
		container_of(kref, struct shaddr_mapping, kref);

	WARN_ON_ONCE(m->state != SHADDR_MAPPING_RETIRED);
	/* The id first: m->file keeps the importer's ida alive. */
	ida_free(&m->importer->mapping_ids, m->file_off / SHADDR_MAPPING_SPAN);
	fput(m->file);
	shaddr_export_put(m->exp);
	shaddr_track_destroy(&m->populated);
	shaddr_user_uncharge(m->user, m->size);
	kfree(m);
}

void shaddr_mapping_put(struct shaddr_mapping *m)
{
	kref_put(&m->kref, shaddr_mapping_release);
}

/* Remove the importer's PTEs of pages [first, last) of the mapping. */
void shaddr_mapping_zap(struct shaddr_mapping *m, unsigned long first,
			unsigned long last)
{
	unmap_mapping_range(&m->importer->mapping,
			    m->file_off + (first << PAGE_SHIFT),
			    (last - first) << PAGE_SHIFT, 1);
}

/*
 * Take a free slot (windows) or attachment quota (attachments), before
 * anything sized by the request is allocated. On success the mapping is
 * new, waiting for its VMA.
 */
static int shaddr_reserve(struct shaddr_file *sf, struct shaddr_mapping *m)
{
	int ret = -ENOSPC;
	unsigned int i;

	spin_lock(&sf->slot_lock);
	if (m->slot < 0) {
		if (sf->nr_attachments >= shaddr_max_attachments) {
			ret = -ENOSPC;
		} else if ((sf->attach_bytes + m->size) >> 20 >
			   shaddr_max_attach_mib) {
			ret = -ENOMEM;
		} else {
			list_add(&m->file_node, &sf->attachments);
			sf->nr_attachments++;
			sf->attach_bytes += m->size;
			ret = 0;
		}
	} else {
		for (i = 0; i < sf->nr_slots; i++) {
			if (!sf->slots[i]) {
				sf->slots[i] = m;
				m->slot = i;
				ret = 0;
				break;
			}
		}
	}
	if (!ret)
		m->state = SHADDR_MAPPING_NEW;
	spin_unlock(&sf->slot_lock);
	return ret;
}

/*
 * The mapping is shown by no VMA any more (or never was): take it off its
 * export, release its slot or quota. Idempotent; the caller still holds a
 * reference.
 */
static void shaddr_mapping_retire(struct shaddr_mapping *m)
{
	struct shaddr_file *sf = m->importer;
	struct shaddr_export *exp = m->exp;

	spin_lock(&sf->slot_lock);
	if (m->state == SHADDR_MAPPING_RETIRED) {
		spin_unlock(&sf->slot_lock);
		return;
	}
	m->state = SHADDR_MAPPING_RETIRED;
	if (m->slot >= 0) {
		sf->slots[m->slot] = NULL;
	} else {
		list_del_init(&m->file_node);
		sf->nr_attachments--;
		sf->attach_bytes -= m->size;
	}
	spin_unlock(&sf->slot_lock);

	mutex_lock(&exp->lock);
	list_del_init(&m->exp_node);
	mutex_unlock(&exp->lock);
	atomic64_dec(m->slot >= 0 ? &shaddr_stats.windows :
		     &shaddr_stats.attachments);
}

#ifdef CONFIG_ARCH_SUPPORTS_PMD_PFNMAP
/*
 * Is the page at byte offset @off of the mapping part of a PMD-sized folio
 * that the exporter maps at a 2 MiB-aligned address, in a mapping whose
 * importer address is aligned alike? Then one PMD can map all of it.
 */
static bool shaddr_huge_eligible(struct shaddr_mapping *m,
				 struct vm_area_struct *vma, unsigned long off,
				 struct page *page)
{
	struct folio *folio = page_folio(page);
	unsigned long src = m->src + off, haddr;

	if (!folio_test_pmd_mappable(folio) || folio_order(folio) != PMD_ORDER)
		return false;
	if ((src & ~PMD_MASK) != folio_page_idx(folio, page) << PAGE_SHIFT)
		return false;
	haddr = (vma->vm_start + off) & PMD_MASK;
	return ((vma->vm_start + off) & ~PMD_MASK) == (src & ~PMD_MASK) &&
	       haddr >= vma->vm_start && haddr + PMD_SIZE <= vma->vm_end;
}
#else
static bool shaddr_huge_eligible(struct shaddr_mapping *m,
				 struct vm_area_struct *vma, unsigned long off,
				 struct page *page)
{
	return false;
}
#endif

/*
 * May PTEs of @m be inserted now? Caller holds exp->lock: the export is
 * alive, the mapping is still on its list (so invalidations see it), and no
 * invalidation ran since @seq.
 */
static int shaddr_may_insert(struct shaddr_mapping *m, unsigned long seq)
{
	struct shaddr_export *exp = m->exp;

	lockdep_assert_held(&exp->lock);
	if (exp->dead || list_empty(&m->exp_node))
		return -ENOENT;
	if (mmu_interval_read_retry(&exp->notifier, seq))
		return -EAGAIN;
	return 0;
}

/*
 * Insert PTEs for @nr pinned exporter pages at byte offset @off of the
 * mapping, unless an invalidation ran since @seq: writable ones if the pages
 * were pinned for writing (@write), else read-only ones. Caller holds the
 * importer's mmap lock (or VMA lock). With @leave_huge, pages that a PMD can
 * map are skipped: their first touch takes the huge fault path. Returns 0,
 * -EAGAIN (pages went stale: retry), -ENOENT (export or mapping gone) or
 * -ENOMEM.
 */
static int shaddr_mapping_insert(struct shaddr_mapping *m,
				 struct vm_area_struct *vma, unsigned long off,
				 struct page **pages, long nr, unsigned long seq,
				 bool write, bool leave_huge)
{
	struct shaddr_export *exp = m->exp;
	unsigned int noreclaim;
	vm_fault_t vmf;
	pgprot_t prot;
	int ret;
	long i;

	/*
	 * Explicit: a writable VMA's vm_page_prot is read-only (write-notify,
	 * for ->pfn_mkwrite), and a page pinned for reading only must never
	 * become writable through it.
	 */
	prot = vm_get_page_prot(write ? vma->vm_flags :
				vma->vm_flags & ~VM_WRITE);

	/* The tracking chunks are allocated first: not under exp->lock. */
	ret = shaddr_track_prepare(&m->populated, off >> PAGE_SHIFT, nr);
	if (ret)
		return ret;
	mutex_lock(&exp->lock);
	ret = shaddr_may_insert(m, seq);
	if (ret)
		goto out;
	/* Page-table allocations here must not recurse into our notifier. */
	noreclaim = memalloc_noreclaim_save();
	for (i = 0; i < nr; i++) {
		unsigned long idx = (off >> PAGE_SHIFT) + i;

		if (leave_huge &&
		    shaddr_huge_eligible(m, vma, idx << PAGE_SHIFT, pages[i]))
			continue;
		shaddr_track_set(&m->populated, idx, 1);
		vmf = vmf_insert_pfn_prot(vma,
					  vma->vm_start + (idx << PAGE_SHIFT),
					  page_to_pfn(pages[i]), prot);
		if (vmf & VM_FAULT_ERROR) {
			ret = -ENOMEM;
			break;
		}
	}
	memalloc_noreclaim_restore(noreclaim);
	atomic64_add(i, &shaddr_stats.pages_mapped);
out:
	mutex_unlock(&exp->lock);
	return ret;
}

/* Pages pinned for writing may be written through their PTEs: dirty. */
static void shaddr_unpin(struct page **pages, long nr, bool write)
{
	unpin_user_pages_dirty_lock(pages, nr, write);
	atomic64_sub(nr, &shaddr_stats.pages_pinned);
}

static long shaddr_pin(struct mm_struct *mm, unsigned long addr, long nr,
		       unsigned int flags, struct page **pages)
{
	long n = shaddr_pin_remote(mm, addr, nr, flags, pages);

	if (n > 0)
		atomic64_add(n, &shaddr_stats.pages_pinned);
	return n;
}

/*
 * Pin for the access the exporter allows: for writing where the mapping is
 * writable and the exporter may write the pages, else for reading (a page
 * the exporter can only read is mapped read-only, never written through;
 * the exporter's own rule). *@write says which. A read pin never breaks
 * copy-on-write in the exporter: the importer sees the page the exporter
 * sees, and the notifier zaps it when that page is replaced.
 */
static long shaddr_pin_access(struct shaddr_mapping *m, struct mm_struct *mm,
			      unsigned long addr, long nr, unsigned int flags,
			      struct page **pages, bool *write)
{
	struct vm_area_struct *vma;
	long n;

	*write = false;
	if (m->writable) {
		n = shaddr_pin(mm, addr, nr, flags | FOLL_WRITE, pages);
		/* Only a refused write means "read-only there". */
		if (n != -EFAULT) {
			*write = n > 0;
			return n;
		}
		/*
		 * Without faulting, a page of a writable VMA that is present
		 * but not yet writable (copy-on-write, clean) is refused too:
		 * leave it to the fault, which makes it writable.
		 */
		if (flags & FOLL_NOFAULT) {
			vma = vma_lookup(mm, addr);
			if (!vma || (vma->vm_flags & VM_WRITE))
				return n;
		}
	}
	return shaddr_pin(mm, addr, nr, flags, pages);
}

/* The VMA of @m in the caller's mm, or NULL; caller holds its mmap lock. */
static struct vm_area_struct *shaddr_mapping_vma(struct shaddr_mapping *m,
						 unsigned long uaddr)
{
	struct vm_area_struct *vma = find_vma(current->mm, uaddr);

	if (vma && vma->vm_start == uaddr &&
	    vma->vm_ops == &shaddr_mapping_vm_ops &&
	    vma->vm_private_data == m)
		return vma;
	return NULL;
}

/*
 * Map the pages the exporter has present in the first SHADDR_POPULATE_MAX
 * bytes, batch by batch, without faulting anything in. Called from
 * MAP/ATTACH right after vm_mmap(), with no mmap lock held; stops early at
 * a fatal signal or when the VMA is gone.
 */
static void shaddr_mapping_populate(struct shaddr_mapping *m,
				    unsigned long uaddr)
{
	struct mm_struct *mm = m->exp->mm;
	unsigned long addr = m->src;
	unsigned long end = m->src + min_t(unsigned long, m->size,
					   SHADDR_POPULATE_MAX);
	struct vm_area_struct *vma;
	struct page **pages;
	unsigned long seq;
	int retries = 0;
	bool write;
	long nr, n;

	pages = kmalloc_array(SHADDR_POPULATE_BATCH, sizeof(*pages),
			      GFP_KERNEL);
	if (!pages || !mmget_not_zero(mm))
		goto out_free;

	while (addr < end && !fatal_signal_pending(current)) {
		cond_resched();
		seq = mmu_interval_read_begin(&m->exp->notifier);
		if (mmap_read_lock_killable(mm))
			break;
		vma = find_vma(mm, addr);
		if (!vma || vma->vm_start >= end) {
			mmap_read_unlock(mm);
			break;
		}
		if (vma->vm_flags & (VM_IO | VM_PFNMAP)) {
			addr = vma->vm_end;
			mmap_read_unlock(mm);
			continue;
		}
		addr = max(addr, vma->vm_start);
		nr = min3((long)SHADDR_POPULATE_BATCH,
			  (long)((min(end, vma->vm_end) - addr) >> PAGE_SHIFT),
			  (long)((end - addr) >> PAGE_SHIFT));
		n = shaddr_pin_access(m, mm, addr, nr, FOLL_NOFAULT, pages,
				      &write);
		mmap_read_unlock(mm);
		if (n <= 0) {
			addr += PAGE_SIZE;	/* not present: on demand */
			continue;
		}

		if (mmap_read_lock_killable(current->mm)) {
			shaddr_unpin(pages, n, write);
			break;
		}
		vma = shaddr_mapping_vma(m, uaddr);
		if (vma) {
			int ret = shaddr_mapping_insert(m, vma, addr - m->src,
							pages, n, seq, write,
							true);

			if (ret == -EAGAIN && ++retries < 4) {
				mmap_read_unlock(current->mm);
				shaddr_unpin(pages, n, write);
				continue;
			}
			if (ret && ret != -EAGAIN)
				addr = end;
		} else {
			addr = end;	/* unmapped under us */
		}
		mmap_read_unlock(current->mm);
		shaddr_unpin(pages, n, write);
		retries = 0;
		addr += n << PAGE_SHIFT;
	}
	mmput(mm);
out_free:
	kfree(pages);
}

/*
 * Pin the page at byte offset @off of the mapping (the exporter faults it
 * in if need be), and the pages after it (up to SHADDR_FAULT_AROUND in
 * all) that are present there, or with @fault_all, that the exporter can
 * fault in: the slow path paid for the exporter's lock, and a sequential
 * reader needs them next. All for writing, or all for reading (*@write).
 * Caller holds the exporter's mmap lock. Returns how many, 0 if the fault
 * writes (@fault_write) where the exporter may only read (SIGSEGV; nothing
 * pinned), or < 0 for a hole (or no access there).
 */
static long shaddr_fault_pin(struct shaddr_mapping *m, struct mm_struct *mm,
			     unsigned long off, struct page **pages,
			     bool fault_all, bool fault_write, bool *write)
{
	unsigned long src = m->src + off;
	unsigned int flags;
	long n, more;

	n = shaddr_pin_access(m, mm, src, 1, 0, pages, write);
	if (n != 1)
		return n < 0 ? n : -EFAULT;
	if (fault_write && !*write) {
		shaddr_unpin(pages, 1, false);
		return 0;
	}
	more = min_t(long, SHADDR_FAULT_AROUND - 1,
		     (m->size - off) / PAGE_SIZE - 1);
	if (more > 0) {
		flags = (fault_all ? 0 : FOLL_NOFAULT) | (*write ? FOLL_WRITE : 0);
		more = shaddr_pin(mm, src + PAGE_SIZE, more, flags, pages + 1);
		if (more > 0)
			n += more;
	}
	return n;
}

/*
 * The slow path found a hole at @off (@sig VM_FAULT_SIGBUS), or a write
 * where the exporter may only read (VM_FAULT_SIGSEGV): remember it for the
 * same task's next fault there (the retry of this one), which then gives
 * the signal at once instead of waiting for the exporter's lock again,
 * unless the exporter's range changed since @seq.
 */
static void shaddr_fault_note_hole(struct shaddr_mapping *m, unsigned long off,
				   bool write, unsigned long seq, vm_fault_t sig)
{
	mutex_lock(&m->exp->lock);
	WRITE_ONCE(m->hole_task, current);
	m->hole_off = off;
	m->hole_write = write;
	m->hole_seq = seq;
	m->hole_sig = sig;
	mutex_unlock(&m->exp->lock);
}

/*
 * Is this the retry of a fault of current that found a hole at @off (or a
 * write denied there), the same kind of access (@write)? A read after a
 * denied write must map the page. Returns the signal it found, else 0.
 */
static vm_fault_t shaddr_fault_known_hole(struct shaddr_mapping *m,
					  unsigned long off, bool write)
{
	vm_fault_t sig = 0;

	if (READ_ONCE(m->hole_task) != current)
		return 0;
	mutex_lock(&m->exp->lock);
	if (m->hole_task == current && m->hole_off == off &&
	    m->hole_write == write &&
	    !mmu_interval_read_retry(&m->exp->notifier, m->hole_seq))
		sig = m->hole_sig;
	WRITE_ONCE(m->hole_task, NULL);
	mutex_unlock(&m->exp->lock);
	return sig;
}

/*
 * The exporter's mmap lock is busy, and the fault may drop its own lock:
 * drop it, wait (killable) for the exporter's, and do the work under the
 * lock waited for: pin the pages, then insert them under our own lock
 * taken again, only tried while we hold theirs (so two processes mapping
 * each other cannot deadlock), else taken after theirs is dropped. A lock
 * once waited for is never dropped to be merely tried again, so the fault
 * completes however busy the exporter keeps its lock; its retry finds the
 * PTEs in place. Only an invalidation between the pin and the insert sends
 * it round again, a few times at most.
 *
 * Takes over the caller's reference on the exporter's users (mmget), and
 * drops it: an exporter that exits meanwhile is torn down, and importers'
 * PTEs zapped, when it exits, never here.
 */
static vm_fault_t shaddr_fault_slow(struct vm_fault *vmf, struct mm_struct *mm)
{
	struct vm_area_struct *vma = vmf->vma;
	struct shaddr_mapping *m = vma->vm_private_data;
	struct mm_struct *imm = vma->vm_mm;
	unsigned long addr = vmf->address, start = vma->vm_start;
	unsigned long off = (addr & PAGE_MASK) - start;
	struct page *pages[SHADDR_FAULT_AROUND];
	bool fault_write = vmf->flags & FAULT_FLAG_WRITE;
	unsigned long seq;
	int tries, err = -EAGAIN;
	bool write;
	long n;

	kref_get(&m->kref);
	mmgrab(imm);
	release_fault_lock(vmf);	/* vmf->vma is not ours now */
	for (tries = 0; err == -EAGAIN && tries < SHADDR_SLOW_TRIES; tries++) {
		bool both;

		if (mmap_read_lock_killable(mm))
			break;
		/* Read under the lock: writers that ran while we waited are past. */
		seq = mmu_interval_read_begin(&m->exp->notifier);
		n = shaddr_fault_pin(m, mm, off, pages, true, fault_write,
				     &write);
		if (n <= 0) {
			mmap_read_unlock(mm);
			shaddr_fault_note_hole(m, off, fault_write, seq,
					       n ? VM_FAULT_SIGBUS :
						   VM_FAULT_SIGSEGV);
			break;
		}
		/*
		 * Insert before the exporter's writers (queued behind us) can
		 * invalidate: our own lock can only be tried while we hold
		 * theirs; if that fails, take it after dropping theirs.
		 */
		both = mmap_read_trylock(imm);
		if (!both) {
			mmap_read_unlock(mm);
			if (mmap_read_lock_killable(imm)) {
				shaddr_unpin(pages, n, write);
				break;
			}
		}
		err = -ENOENT;
		vma = vma_lookup(imm, addr);
		if (vma && vma->vm_start == start &&
		    vma->vm_ops == &shaddr_mapping_vm_ops &&
		    vma->vm_private_data == m)
			err = shaddr_mapping_insert(m, vma, off, pages, n, seq,
						    write, false);
		mmap_read_unlock(imm);
		if (both)
			mmap_read_unlock(mm);
		shaddr_unpin(pages, n, write);
	}
	mmdrop(imm);
	mmput_async(mm);
	shaddr_mapping_put(m);
	return VM_FAULT_RETRY;
}

/*
 * A fault that may not drop its lock (fixup_user_fault() from futex code,
 * which faults again on VM_FAULT_NOPAGE without a signal check of its own)
 * cannot wait for the exporter's lock while it holds its own: it polls for
 * a few ticks, stopping at once at a fatal signal. Returns 0 with the
 * exporter's lock held, -EINTR or -EBUSY.
 */
static int shaddr_fault_lock_noretry(struct vm_fault *vmf, struct mm_struct *mm)
{
	int i;

	for (i = 0; ; i++) {
		if (mmap_read_trylock(mm))
			return 0;
		if (fatal_signal_pending(current))
			return -EINTR;
		if (i == SHADDR_NORETRY_POLLS ||
		    (vmf->flags & FAULT_FLAG_RETRY_NOWAIT))
			return -EBUSY;
		schedule_timeout_killable(1);
	}
}

static vm_fault_t shaddr_mapping_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct shaddr_mapping *m = vma->vm_private_data;
	struct shaddr_export *exp = m->exp;
	struct page *pages[SHADDR_FAULT_AROUND];
	unsigned long off = (vmf->address & PAGE_MASK) - vma->vm_start;
	bool may_wait = (vmf->flags & FAULT_FLAG_ALLOW_RETRY) &&
			!(vmf->flags & FAULT_FLAG_RETRY_NOWAIT);
	struct mm_struct *mm = exp->mm;
	unsigned long seq;
	vm_fault_t ret;
	bool write;
	long n;
	int err;

	atomic64_inc(&shaddr_stats.faults);
	/* Nothing else bounds a caller that faults again and again. */
	if (!may_wait && fatal_signal_pending(current))
		return VM_FAULT_SIGBUS;
	ret = shaddr_fault_known_hole(m, off, vmf->flags & FAULT_FLAG_WRITE);
	if (ret)
		return ret;
	if (READ_ONCE(exp->dead) || !mmget_not_zero(mm))
		return VM_FAULT_SIGBUS;

	/*
	 * We hold our own mmap lock; waiting for the exporter's could deadlock
	 * against an exporter that maps us. A busy exporter means: the slow
	 * path, without our lock, or polling where that cannot be dropped.
	 */
	if (!mmap_read_trylock(mm)) {
		if (may_wait)
			return shaddr_fault_slow(vmf, mm);	/* drops mm */
		err = shaddr_fault_lock_noretry(vmf, mm);
		if (err) {
			ret = err == -EINTR ? VM_FAULT_SIGBUS :
			      (vmf->flags & FAULT_FLAG_RETRY_NOWAIT) ?
			      VM_FAULT_RETRY : VM_FAULT_NOPAGE;
			goto out_put;
		}
	}
	seq = mmu_interval_read_begin(&exp->notifier);
	n = shaddr_fault_pin(m, mm, off, pages, false,
			     vmf->flags & FAULT_FLAG_WRITE, &write);
	if (n <= 0) {
		mmap_read_unlock(mm);
		/* A hole (or no access there), or a write the exporter may not. */
		ret = n ? VM_FAULT_SIGBUS : VM_FAULT_SIGSEGV;
		goto out_put;
	}
	/* Under both locks: no exporter writer can make the pages stale. */
	err = shaddr_mapping_insert(m, vma, off, pages, n, seq, write, false);
	mmap_read_unlock(mm);
	shaddr_unpin(pages, n, write);
	if (err == -ENOENT)
		ret = VM_FAULT_SIGBUS;
	else if (err == -ENOMEM)
		ret = VM_FAULT_OOM;
	else
		ret = VM_FAULT_NOPAGE;	/* installed, or stale: fault again */
out_put:
	/* The exporter may be exiting: never run its teardown here. */
	mmput_async(mm);
	return ret;
}

#ifdef CONFIG_ARCH_SUPPORTS_PMD_PFNMAP
/*
 * Map 2 MiB with one PMD where the exporter has a PMD-sized folio at a
 * 2 MiB-aligned address. Anything else falls back to 4 KiB faults, which
 * also give SIGBUS where that is due.
 */
static vm_fault_t shaddr_mapping_huge_fault(struct vm_fault *vmf,
					    unsigned int order)
{
	struct vm_area_struct *vma = vmf->vma;
	struct shaddr_mapping *m = vma->vm_private_data;
	struct shaddr_export *exp = m->exp;
	unsigned long haddr = vmf->address & PMD_MASK;
	unsigned long off = haddr - vma->vm_start;
	struct mm_struct *mm = exp->mm;
	unsigned int gup_write = m->writable ? FOLL_WRITE : 0;
	vm_fault_t ret = VM_FAULT_FALLBACK;
	struct page **pages;
	struct folio *folio;
	unsigned long seq;
	long n = 0, i;

	if (order != PMD_ORDER || haddr < vma->vm_start ||
	    haddr + PMD_SIZE > vma->vm_end || (m->src + off) & ~PMD_MASK)
		return VM_FAULT_FALLBACK;
	if (READ_ONCE(exp->dead) || !mmget_not_zero(mm))
		return VM_FAULT_FALLBACK;
	pages = kmalloc_array(HPAGE_PMD_NR, sizeof(*pages), GFP_KERNEL);
	if (!pages)
		goto out_put;

	seq = mmu_interval_read_begin(&exp->notifier);
	if (!mmap_read_trylock(mm))
		goto out_free;
	/* Fault the first page in (the exporter may get a THP), then the rest. */
	/* A page the exporter may not write takes the 4 KiB path. */
	n = shaddr_pin(mm, m->src + off, 1, gup_write, pages);
	if (n == 1) {
		long more = shaddr_pin(mm, m->src + off + PAGE_SIZE,
				       HPAGE_PMD_NR - 1,
				       FOLL_NOFAULT | gup_write, pages + 1);
		if (more > 0)
			n += more;
	}
	mmap_read_unlock(mm);
	if (n != HPAGE_PMD_NR ||
	    shaddr_track_prepare(&m->populated, off >> PAGE_SHIFT, n))
		goto out_unpin;
	folio = page_folio(pages[0]);
	/*
	 * Only a folio of anonymous memory or of a file gets a PMD. Not the
	 * huge zero folio (a read fault of the exporter's THP range; its
	 * symbol is not exported): 7.x's zap_huge_pmd() withdraws a deposited
	 * page table for every huge zero PMD, and a PFN PMD has none.
	 */
	if (folio_order(folio) != PMD_ORDER ||
	    (!folio_test_anon(folio) && !READ_ONCE(folio->mapping)) ||
	    pages[0] != folio_page(folio, 0))
		goto out_unpin;
	for (i = 1; i < n; i++)
		if (pages[i] != folio_page(folio, i))
			goto out_unpin;

	mutex_lock(&exp->lock);
	if (!shaddr_may_insert(m, seq)) {
		unsigned int noreclaim = memalloc_noreclaim_save();

		shaddr_track_set(&m->populated, off >> PAGE_SHIFT,
				 HPAGE_PMD_NR);
		/* Pinned for writing: a later write needs no fault. */
		ret = shaddr_insert_pfn_pmd(vmf, page_to_pfn(pages[0]),
					    m->writable);
		memalloc_noreclaim_restore(noreclaim);
		if (ret == VM_FAULT_NOPAGE) {
			atomic64_add(HPAGE_PMD_NR, &shaddr_stats.pages_mapped);
			atomic64_inc(&shaddr_stats.huge_mapped);
		}
	}
	mutex_unlock(&exp->lock);
out_unpin:
	if (n > 0)
		shaddr_unpin(pages, n, m->writable);
out_free:
	kfree(pages);
out_put:
	mmput_async(mm);
	return ret;
}
#endif

/* The kernel duplicated a VMA of the mapping (a move): count it. */
static void shaddr_mapping_vm_open(struct vm_area_struct *vma)
{
	struct shaddr_mapping *m = vma->vm_private_data;
	struct shaddr_file *sf = m->importer;

	spin_lock(&sf->slot_lock);
	WARN_ON_ONCE(m->state != SHADDR_MAPPING_MAPPED);
	m->nr_vmas++;
	spin_unlock(&sf->slot_lock);
	kref_get(&m->kref);
}

/* A VMA of the mapping is gone; the last one retires the mapping. */
static void shaddr_mapping_vm_close(struct vm_area_struct *vma)
{
	struct shaddr_mapping *m = vma->vm_private_data;
	struct shaddr_file *sf = m->importer;
	bool last;

	spin_lock(&sf->slot_lock);
	last = !--m->nr_vmas;
	spin_unlock(&sf->slot_lock);
	if (last)
		shaddr_mapping_retire(m);
	shaddr_mapping_put(m);
}

/*
 * A write to a read-only PTE of a writable mapping: the page was mapped for
 * reading because the exporter could not write it, or this VMA's own
 * protection changed since. Without this handler the kernel would make the
 * PTE writable as it is; instead it goes, and the write faults again, so
 * that shaddr_mapping_fault() decides by the exporter's permission now:
 * a writable page, or SIGSEGV.
 */
static vm_fault_t shaddr_mapping_pfn_mkwrite(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	unsigned long idx = (vmf->address - vma->vm_start) >> PAGE_SHIFT;

	/*
	 * Through the importer's file, as the notifier zaps: zap_vma_ptes()
	 * is zap_special_vma_range() on 7.x.
	 */
	shaddr_mapping_zap(vma->vm_private_data, idx, idx + 1);
	return VM_FAULT_NOPAGE;
}

/* Neither a part of a mapping nor a moved one is supported. */
static int shaddr_mapping_may_split(struct vm_area_struct *vma,
				    unsigned long addr)
{
	return -EINVAL;
}

static int shaddr_mapping_mremap(struct vm_area_struct *vma)
{
	return -EINVAL;
}

static const struct vm_operations_struct shaddr_mapping_vm_ops = {
	.open = shaddr_mapping_vm_open,
	.close = shaddr_mapping_vm_close,
	.fault = shaddr_mapping_fault,
	.pfn_mkwrite = shaddr_mapping_pfn_mkwrite,
#ifdef CONFIG_ARCH_SUPPORTS_PMD_PFNMAP
	.huge_fault = shaddr_mapping_huge_fault,
#endif
	.may_split = shaddr_mapping_may_split,
	.mremap = shaddr_mapping_mremap,
};

/**
 * shaddr_mmap() - mmap handler of /dev/shaddr
 * @file: the device file
 * @vma: the new VMA
 *
 * Mappings are only created by SHADDR_IOC_MAP and SHADDR_IOC_ATTACH, which
 * call vm_mmap() with the mapping pending in the file. This binds that
 * mapping, once, and only in the task that is inside the ioctl; every other
 * mmap() of the device is refused.
 *
 * Return: 0 or -EINVAL.
 */
int shaddr_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct shaddr_file *sf = file->private_data;
	struct shaddr_mapping *m;

	spin_lock(&sf->slot_lock);
	m = sf->pending;
	if (!m || sf->pending_task != current || m->file != file ||
	    m->state != SHADDR_MAPPING_NEW ||
	    vma->vm_pgoff != m->file_off >> PAGE_SHIFT ||
	    vma->vm_end - vma->vm_start != m->size ||
	    !(vma->vm_flags & VM_SHARED) ||
	    ((vma->vm_flags & VM_WRITE) && !m->writable)) {
		spin_unlock(&sf->slot_lock);
		return -EINVAL;
	}
	sf->pending = NULL;
	m->state = SHADDR_MAPPING_MAPPED;
	m->nr_vmas = 1;
	m->uaddr = vma->vm_start;
	spin_unlock(&sf->slot_lock);

	vm_flags_set(vma, VM_PFNMAP | VM_IO | VM_DONTCOPY | VM_DONTEXPAND |
			  VM_DONTDUMP);
	if (!m->writable)
		vm_flags_clear(vma, VM_MAYWRITE);
	vma->vm_ops = &shaddr_mapping_vm_ops;
	vma->vm_private_data = m;
	kref_get(&m->kref);	/* the VMA's reference */
	return 0;
}

/* Allocate a mapping of [@src, @src + @size) of @exp, with its file range. */
static struct shaddr_mapping *shaddr_mapping_alloc(struct shaddr_file *sf,
						   struct file *file,
						   struct shaddr_export *exp,
						   unsigned long src,
						   unsigned long size,
						   bool writable, u64 apid)
{
	struct shaddr_mapping *m;
	struct shaddr_user *user;
	int id;

	/* The user's bound first: an over-limit request allocates nothing. */
	user = shaddr_user_charge(size);
	if (IS_ERR(user))
		return ERR_CAST(user);
	m = kzalloc(sizeof(*m), GFP_KERNEL_ACCOUNT);
	if (!m)
		goto err_uncharge;
	id = ida_alloc_max(&sf->mapping_ids, SHADDR_MAX_MAPPING_IDS - 1,
			   GFP_KERNEL);
	if (id < 0) {
		kfree(m);
		goto err_uncharge;
	}
	kref_init(&m->kref);
	m->user = user;
	xa_init(&m->populated);
	m->file = get_file(file);
	INIT_LIST_HEAD(&m->exp_node);
	INIT_LIST_HEAD(&m->file_node);
	m->exp = exp;
	m->importer = sf;
	m->slot = apid ? -1 : 0;
	m->apid = apid;
	m->src = src;
	m->size = size;
	/* Same offset in 2 MiB as the source, so that PMDs can line up. */
	m->file_off = (loff_t)id * SHADDR_MAPPING_SPAN + (src & ~PMD_MASK);
	m->writable = writable;
	m->state = SHADDR_MAPPING_RETIRED;	/* until it holds a slot */
	return m;

err_uncharge:
	shaddr_user_uncharge(user, size);
	return ERR_PTR(-ENOMEM);
}

/**
 * shaddr_mapping_create() - map [@src, @src + @size) of @exp into the caller
 * @sf: the importing file (its lock held; current->mm is its mm)
 * @file: the device file
 * @exp: the export; the new mapping takes over the caller's reference, on
 *       success and on failure
 * @src: exporter address of the first byte, page-aligned
 * @size: bytes, page multiple, at most 1 TiB
 * @writable: map with write permission
 * @apid: 0 for a window in a slot; else the access id of an attachment
 * @hint: address hint for vm_mmap(), or 0
 * @fixed: map exactly at @hint
 * @addr: out: the start of the mapping
 * @slot: out: the slot of a window (-1 for an attachment)
 *
 * Return: 0, or a negative errno (see SHADDR_IOC_MAP and SHADDR_IOC_ATTACH).
 */
long shaddr_mapping_create(struct shaddr_file *sf, struct file *file,
			   struct shaddr_export *exp, unsigned long src,
			   unsigned long size, bool writable, u64 apid,
			   unsigned long hint, bool fixed, unsigned long *addr,
			   int *slot)
{
	struct shaddr_mapping *m;
	unsigned long uaddr;
	bool bound_unclosed;
	long ret;

	m = shaddr_mapping_alloc(sf, file, exp, src, size, writable, apid);
	if (IS_ERR(m)) {
		shaddr_export_put(exp);
		return PTR_ERR(m);
	}
	ret = shaddr_reserve(sf, m);
	if (ret) {
		atomic64_inc(&shaddr_stats.refusals);
		goto out_put;
	}
	atomic64_inc(apid ? &shaddr_stats.attachments : &shaddr_stats.windows);

	mutex_lock(&exp->lock);
	if (shaddr_export_dead(exp)) {
		mutex_unlock(&exp->lock);
		ret = -ENOENT;
		goto out_retire;
	}
	m->serial = exp->next_serial++;
	list_add_tail(&m->exp_node, &exp->mappings);
	mutex_unlock(&exp->lock);

	spin_lock(&sf->slot_lock);
	sf->pending = m;
	sf->pending_task = current;
	spin_unlock(&sf->slot_lock);
	uaddr = vm_mmap(file, hint, size,
			PROT_READ | (writable ? PROT_WRITE : 0),
			MAP_SHARED | (fixed ? MAP_FIXED : 0), m->file_off);
	spin_lock(&sf->slot_lock);
	sf->pending = NULL;
	sf->pending_task = NULL;
	/*
	 * Bound by ->mmap, yet the call failed and ->close never ran: the
	 * kernel dropped the VMA (no other task can bind it, so no VMA shows
	 * it). Its reference is ours to drop.
	 */
	bound_unclosed = IS_ERR_VALUE(uaddr) &&
			 m->state == SHADDR_MAPPING_MAPPED;
	if (bound_unclosed)
		m->nr_vmas = 0;
	if (slot)
		*slot = m->slot;
	spin_unlock(&sf->slot_lock);
	if (IS_ERR_VALUE(uaddr)) {
		ret = (long)uaddr;
		if (bound_unclosed)
			shaddr_mapping_put(m);
		goto out_retire;
	}

	shaddr_mapping_populate(m, uaddr);
	*addr = uaddr;
	shaddr_mapping_put(m);		/* its VMA holds it now */
	return 0;

out_retire:
	shaddr_mapping_retire(m);
out_put:
	shaddr_mapping_put(m);
	return ret;
}
