// SPDX-License-Identifier: GPL-2.0
/*
 * Process windows (importer side): MAP a block of an export into one of the
 * caller's slots, populate it, fault the rest in on demand, UNMAP, QUERY.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitmap.h>
#include <linux/file.h>
#include <linux/idr.h>
#include <linux/mm.h>
#include <linux/mman.h>
#include <linux/pfn_t.h>
#include <linux/pid.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "compat.h"
#include "shaddr_priv.h"

/* Pages pinned per batch when a window is populated at MAP time. */
#define SHADDR_POPULATE_BATCH	256
/* Pages a fault maps: the faulting one, plus present ones after it. */
#define SHADDR_FAULT_AROUND	16
/*
 * A window id selects a unique range of the device file, one maximal
 * window or attachment (1 TiB) wide.
 */
#define SHADDR_WINDOW_SPAN	BIT_ULL(40)
#define SHADDR_MAX_WINDOW_IDS	BIT(22)

static DEFINE_IDA(shaddr_window_ids);
static const struct vm_operations_struct shaddr_window_vm_ops;

static void shaddr_window_release(struct kref *kref)
{
	struct shaddr_window *win =
		container_of(kref, struct shaddr_window, kref);

	if (win->file)
		fput(win->file);
	ida_free(&shaddr_window_ids, win->file_off / SHADDR_WINDOW_SPAN);
	shaddr_export_put(win->exp);
	bitmap_free(win->populated);
	kfree(win);
}

void shaddr_window_put(struct shaddr_window *win)
{
	kref_put(&win->kref, shaddr_window_release);
}

/* Remove the importer's PTEs of [start, end) (exporter addresses). */
void shaddr_window_zap(struct shaddr_window *win, unsigned long start,
		       unsigned long end)
{
	if (!win->file)
		return;
	unmap_mapping_range(win->file->f_mapping,
			    win->file_off + (start - win->src), end - start, 1);
}

/* Take the window out of its export and its slot; the VMA is gone. */
static void shaddr_window_unlink(struct shaddr_window *win)
{
	struct shaddr_export *exp = win->exp;
	struct shaddr_file *sf = win->importer;

	mutex_lock(&exp->lock);
	list_del_init(&win->exp_node);
	mutex_unlock(&exp->lock);

	spin_lock(&sf->slot_lock);
	if (win->slot >= 0) {
		if (sf->slots[win->slot] == win)
			sf->slots[win->slot] = NULL;
	} else if (!list_empty(&win->file_node)) {
		list_del_init(&win->file_node);
		sf->nr_attachments--;
		sf->attach_bytes -= win->size;
	}
	spin_unlock(&sf->slot_lock);
	atomic64_dec(win->slot >= 0 ? &shaddr_stats.windows :
		     &shaddr_stats.attachments);
}

#ifdef CONFIG_ARCH_SUPPORTS_PMD_PFNMAP
/*
 * Is the page at byte offset @off of the window part of a PMD-sized folio
 * that the exporter maps at a 2 MiB-aligned address, in a window whose
 * importer address is aligned alike? Then one PMD can map all of it.
 */
static bool shaddr_huge_eligible(struct shaddr_window *win,
				 struct vm_area_struct *vma, unsigned long off,
				 struct page *page)
{
	struct folio *folio = page_folio(page);
	unsigned long src = win->src + off, haddr;

	if (!folio_test_pmd_mappable(folio) || folio_order(folio) != PMD_ORDER)
		return false;
	if ((src & ~PMD_MASK) != folio_page_idx(folio, page) << PAGE_SHIFT)
		return false;
	haddr = (vma->vm_start + off) & PMD_MASK;
	return ((vma->vm_start + off) & ~PMD_MASK) == (src & ~PMD_MASK) &&
	       haddr >= vma->vm_start && haddr + PMD_SIZE <= vma->vm_end;
}
#else
static bool shaddr_huge_eligible(struct shaddr_window *win,
				 struct vm_area_struct *vma, unsigned long off,
				 struct page *page)
{
	return false;
}
#endif

/*
 * Insert PTEs for @nr pinned exporter pages at byte offset @off of the
 * window, unless an invalidation ran since @seq. Caller holds the importer's
 * mmap lock (or VMA lock). With @leave_huge, pages that a PMD can map are
 * skipped: their first touch takes the huge fault path. Returns 0, -EAGAIN
 * (pages went stale: retry), -ENOENT (export dead) or -ENOMEM.
 */
static int shaddr_window_insert(struct shaddr_window *win,
				struct vm_area_struct *vma, unsigned long off,
				struct page **pages, long nr, unsigned long seq,
				bool leave_huge)
{
	struct shaddr_export *exp = win->exp;
	unsigned int noreclaim;
	vm_fault_t vmf;
	int ret = 0;
	long i;

	mutex_lock(&exp->lock);
	if (exp->dead) {
		ret = -ENOENT;
		goto out;
	}
	if (mmu_interval_read_retry(&exp->notifier, seq)) {
		ret = -EAGAIN;
		goto out;
	}
	/* Page-table allocations here must not recurse into our notifier. */
	noreclaim = memalloc_noreclaim_save();
	for (i = 0; i < nr; i++) {
		unsigned long idx = (off >> PAGE_SHIFT) + i;

		if (leave_huge &&
		    shaddr_huge_eligible(win, vma, idx << PAGE_SHIFT, pages[i]))
			continue;
		set_bit(idx, win->populated);
		vmf = vmf_insert_pfn(vma, vma->vm_start + (idx << PAGE_SHIFT),
				     page_to_pfn(pages[i]));
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

static void shaddr_unpin(struct shaddr_window *win, struct page **pages,
			 long nr)
{
	/* A writable window may be written through: the pages are dirty. */
	unpin_user_pages_dirty_lock(pages, nr, win->writable);
	atomic64_sub(nr, &shaddr_stats.pages_pinned);
}

static long shaddr_pin(struct shaddr_window *win, struct mm_struct *mm,
		       unsigned long addr, long nr, unsigned int flags,
		       struct page **pages)
{
	long n;

	if (win->writable)
		flags |= FOLL_WRITE;
	n = shaddr_pin_remote(mm, addr, nr, flags, pages);
	if (n > 0)
		atomic64_add(n, &shaddr_stats.pages_pinned);
	return n;
}

/*
 * Map every page the exporter has present in the block, batch by batch,
 * without faulting anything in. Called from MAP with no mmap lock held.
 */
static void shaddr_window_populate(struct shaddr_window *win)
{
	struct mm_struct *mm = win->exp->mm;
	struct mm_struct *self = current->mm;
	unsigned long addr = win->src, end = win->src + win->size;
	struct vm_area_struct *vma;
	struct page **pages;
	unsigned long seq;
	int retries = 0;
	long nr, n;

	pages = kmalloc_array(SHADDR_POPULATE_BATCH, sizeof(*pages),
			      GFP_KERNEL);
	if (!pages || !mmget_not_zero(mm))
		goto out_free;

	while (addr < end) {
		seq = mmu_interval_read_begin(&win->exp->notifier);
		mmap_read_lock(mm);
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
		n = shaddr_pin(win, mm, addr, nr, FOLL_NOFAULT, pages);
		mmap_read_unlock(mm);
		if (n <= 0) {
			addr += PAGE_SIZE;	/* not present: on demand */
			continue;
		}

		mmap_read_lock(self);
		vma = find_vma(self, win->uaddr);
		if (vma && vma->vm_start == win->uaddr &&
		    vma->vm_private_data == win) {
			int ret = shaddr_window_insert(win, vma,
						       addr - win->src,
						       pages, n, seq, true);

			if (ret == -EAGAIN && ++retries < 4) {
				mmap_read_unlock(self);
				shaddr_unpin(win, pages, n);
				continue;
			}
			if (ret && ret != -EAGAIN)
				addr = end;
		} else {
			addr = end;	/* unmapped under us */
		}
		mmap_read_unlock(self);
		shaddr_unpin(win, pages, n);
		retries = 0;
		addr += n << PAGE_SHIFT;
	}
	mmput(mm);
out_free:
	kfree(pages);
}

static vm_fault_t shaddr_window_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct shaddr_window *win = vma->vm_private_data;
	struct shaddr_export *exp = win->exp;
	struct page *pages[SHADDR_FAULT_AROUND];
	unsigned long off = (vmf->address & PAGE_MASK) - vma->vm_start;
	unsigned long src = win->src + off;
	struct mm_struct *mm = exp->mm;
	unsigned long seq;
	vm_fault_t ret;
	long n, more;
	int err;

	atomic64_inc(&shaddr_stats.faults);
	if (READ_ONCE(exp->dead) || !mmget_not_zero(mm))
		return VM_FAULT_SIGBUS;

	seq = mmu_interval_read_begin(&exp->notifier);
	/*
	 * We hold our own mmap lock; waiting for the exporter's could deadlock
	 * against an exporter that maps us. A busy exporter means: fault again.
	 */
	if (!mmap_read_trylock(mm)) {
		ret = VM_FAULT_NOPAGE;
		goto out_put;
	}
	/* The faulting page may be faulted in (in the exporter)... */
	n = shaddr_pin(win, mm, src, 1, 0, pages);
	/* ...the ones after it are mapped only if already present. */
	if (n == 1) {
		more = min_t(long, SHADDR_FAULT_AROUND - 1,
			     (win->size - off) / PAGE_SIZE - 1);
		if (more > 0) {
			more = shaddr_pin(win, mm, src + PAGE_SIZE, more,
					  FOLL_NOFAULT, pages + 1);
			if (more > 0)
				n += more;
		}
	}
	mmap_read_unlock(mm);
	if (n <= 0) {
		ret = VM_FAULT_SIGBUS;	/* a hole, or no access there */
		goto out_put;
	}

	err = shaddr_window_insert(win, vma, off, pages, n, seq, false);
	shaddr_unpin(win, pages, n);
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
static vm_fault_t shaddr_window_huge_fault(struct vm_fault *vmf,
					   unsigned int order)
{
	struct vm_area_struct *vma = vmf->vma;
	struct shaddr_window *win = vma->vm_private_data;
	struct shaddr_export *exp = win->exp;
	unsigned long haddr = vmf->address & PMD_MASK;
	unsigned long off = haddr - vma->vm_start;
	struct mm_struct *mm = exp->mm;
	vm_fault_t ret = VM_FAULT_FALLBACK;
	struct page **pages;
	struct folio *folio;
	unsigned long seq;
	long n = 0, i;

	if (order != PMD_ORDER || haddr < vma->vm_start ||
	    haddr + PMD_SIZE > vma->vm_end || (win->src + off) & ~PMD_MASK)
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
	n = shaddr_pin(win, mm, win->src + off, 1, 0, pages);
	if (n == 1) {
		long more = shaddr_pin(win, mm, win->src + off + PAGE_SIZE,
				       HPAGE_PMD_NR - 1, FOLL_NOFAULT,
				       pages + 1);
		if (more > 0)
			n += more;
	}
	mmap_read_unlock(mm);
	if (n != HPAGE_PMD_NR)
		goto out_unpin;
	folio = page_folio(pages[0]);
	if (folio_order(folio) != PMD_ORDER || pages[0] != folio_page(folio, 0))
		goto out_unpin;
	for (i = 1; i < n; i++)
		if (pages[i] != folio_page(folio, i))
			goto out_unpin;

	mutex_lock(&exp->lock);
	if (!exp->dead && !mmu_interval_read_retry(&exp->notifier, seq)) {
		unsigned int noreclaim = memalloc_noreclaim_save();

		bitmap_set(win->populated, off >> PAGE_SHIFT, HPAGE_PMD_NR);
		ret = vmf_insert_pfn_pmd(vmf,
					 __pfn_to_pfn_t(page_to_pfn(pages[0]), 0),
					 win->writable &&
					 (vmf->flags & FAULT_FLAG_WRITE));
		memalloc_noreclaim_restore(noreclaim);
		if (ret == VM_FAULT_NOPAGE) {
			atomic64_add(HPAGE_PMD_NR, &shaddr_stats.pages_mapped);
			atomic64_inc(&shaddr_stats.huge_mapped);
		}
	}
	mutex_unlock(&exp->lock);
out_unpin:
	if (n > 0)
		shaddr_unpin(win, pages, n);
out_free:
	kfree(pages);
out_put:
	mmput_async(mm);
	return ret;
}
#endif

static void shaddr_window_vm_close(struct vm_area_struct *vma)
{
	struct shaddr_window *win = vma->vm_private_data;

	win->vma_live = false;
	shaddr_window_unlink(win);
	shaddr_window_put(win);
}

static int shaddr_window_may_split(struct vm_area_struct *vma,
				   unsigned long addr)
{
	return -EINVAL;
}

static int shaddr_window_mremap(struct vm_area_struct *vma)
{
	return -EINVAL;
}

static const struct vm_operations_struct shaddr_window_vm_ops = {
	.fault = shaddr_window_fault,
#ifdef CONFIG_ARCH_SUPPORTS_PMD_PFNMAP
	.huge_fault = shaddr_window_huge_fault,
#endif
	.close = shaddr_window_vm_close,
	.may_split = shaddr_window_may_split,
	.mremap = shaddr_window_mremap,
};

/**
 * shaddr_mmap() - mmap handler of /dev/shaddr
 * @file: the device file
 * @vma: the new VMA
 *
 * Windows are only created by SHADDR_IOC_MAP, which calls vm_mmap() with the
 * window pending in the file; a plain mmap() of the device is refused.
 *
 * Return: 0 or -EINVAL.
 */
int shaddr_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct shaddr_file *sf = file->private_data;
	struct shaddr_window *win;

	spin_lock(&sf->slot_lock);
	win = sf->pending;
	spin_unlock(&sf->slot_lock);
	if (!win || win->uaddr || win->file != file || current->mm != sf->mm ||
	    vma->vm_pgoff != win->file_off >> PAGE_SHIFT ||
	    vma->vm_end - vma->vm_start != win->size ||
	    !(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if ((vma->vm_flags & VM_WRITE) && !win->writable)
		return -EINVAL;

	vm_flags_set(vma, VM_PFNMAP | VM_IO | VM_DONTCOPY | VM_DONTEXPAND |
			  VM_DONTDUMP);
	if (!win->writable)
		vm_flags_clear(vma, VM_MAYWRITE);
	vma->vm_ops = &shaddr_window_vm_ops;
	vma->vm_private_data = win;
	kref_get(&win->kref);	/* the VMA's reference */
	win->uaddr = vma->vm_start;
	win->vma_live = true;
	return 0;
}

/* Take a free slot (windows) or attachment quota (attachments). */
static int shaddr_reserve(struct shaddr_file *sf, struct shaddr_window *win)
{
	int ret = -ENOSPC;
	unsigned int i;

	spin_lock(&sf->slot_lock);
	if (win->slot < 0) {
		if (sf->nr_attachments >= shaddr_max_attachments) {
			ret = -ENOSPC;
		} else if ((sf->attach_bytes + win->size) >> 20 >
			   shaddr_max_attach_mib) {
			ret = -ENOMEM;
		} else {
			list_add(&win->file_node, &sf->attachments);
			sf->nr_attachments++;
			sf->attach_bytes += win->size;
			ret = 0;
		}
	} else {
		for (i = 0; i < sf->nr_slots; i++) {
			if (!sf->slots[i]) {
				sf->slots[i] = win;
				win->slot = i;
				ret = 0;
				break;
			}
		}
	}
	spin_unlock(&sf->slot_lock);
	return ret;
}

/**
 * shaddr_window_create() - map [@src, @src + @size) of @exp into the caller
 * @sf: the importing file (its lock held; current->mm is its mm)
 * @file: the device file
 * @exp: the export; the new window takes over the caller's reference, on
 *       success and on failure
 * @src: exporter address of the first byte, page-aligned
 * @size: bytes, page multiple, at most 1 TiB
 * @writable: map with write permission
 * @apid: 0 for a window in a slot; else the access id of an attachment
 * @hint: address hint for vm_mmap(), or 0
 * @fixed: map exactly at @hint
 * @addr: out: the start of the mapping
 *
 * Return: 0, or a negative errno (see SHADDR_IOC_MAP and SHADDR_IOC_ATTACH).
 */
long shaddr_window_create(struct shaddr_file *sf, struct file *file,
			  struct shaddr_export *exp, unsigned long src,
			  unsigned long size, bool writable, u64 apid,
			  unsigned long hint, bool fixed, unsigned long *addr)
{
	struct shaddr_window *win;
	unsigned long uaddr;
	long ret;
	int id;

	win = kzalloc(sizeof(*win), GFP_KERNEL_ACCOUNT);
	if (!win) {
		shaddr_export_put(exp);
		return -ENOMEM;
	}
	id = ida_alloc_max(&shaddr_window_ids, SHADDR_MAX_WINDOW_IDS - 1,
			   GFP_KERNEL);
	if (id < 0) {
		kfree(win);
		shaddr_export_put(exp);
		return id;
	}
	kref_init(&win->kref);
	INIT_LIST_HEAD(&win->exp_node);
	INIT_LIST_HEAD(&win->file_node);
	win->exp = exp;			/* the window owns this reference now */
	win->importer = sf;
	win->slot = apid ? -1 : 0;
	win->apid = apid;
	win->src = src;
	win->size = size;
	/* Same offset in 2 MiB as the source, so that PMDs can line up. */
	win->file_off = (loff_t)id * SHADDR_WINDOW_SPAN + (src & ~PMD_MASK);
	win->writable = writable;
	win->populated = bitmap_zalloc(size >> PAGE_SHIFT, GFP_KERNEL_ACCOUNT);
	if (!win->populated) {
		ret = -ENOMEM;
		goto out_put_win;
	}
	ret = shaddr_reserve(sf, win);
	if (ret) {
		atomic64_inc(&shaddr_stats.refusals);
		goto out_put_win;
	}
	win->file = get_file(file);
	atomic64_inc(apid ? &shaddr_stats.attachments : &shaddr_stats.windows);

	mutex_lock(&exp->lock);
	if (exp->dead) {
		mutex_unlock(&exp->lock);
		ret = -ENOENT;
		goto out_unlink;
	}
	list_add(&win->exp_node, &exp->windows);
	mutex_unlock(&exp->lock);
	sf->used = true;

	spin_lock(&sf->slot_lock);
	sf->pending = win;
	spin_unlock(&sf->slot_lock);
	uaddr = vm_mmap(file, hint, size,
			PROT_READ | (writable ? PROT_WRITE : 0),
			MAP_SHARED | (fixed ? MAP_FIXED : 0), win->file_off);
	spin_lock(&sf->slot_lock);
	sf->pending = NULL;
	spin_unlock(&sf->slot_lock);
	if (IS_ERR_VALUE(uaddr)) {
		ret = (long)uaddr;
		if (win->vma_live) {
			/* ->mmap succeeded but the VMA was dropped unclosed. */
			win->vma_live = false;
			shaddr_window_unlink(win);
			shaddr_window_put(win);
			goto out_put_win;
		}
		if (!win->uaddr)
			goto out_unlink;	/* ->mmap never ran */
		goto out_put_win;		/* ->close already ran */
	}

	shaddr_window_populate(win);
	*addr = uaddr;
	shaddr_window_put(win);		/* the VMA holds it now */
	return 0;

out_unlink:
	shaddr_window_unlink(win);
out_put_win:
	shaddr_window_put(win);
	return ret;
}

long shaddr_ioc_map(struct shaddr_file *sf, struct file *file,
		    void __user *uarg)
{
	struct shaddr_export *exp;
	struct shaddr_map req;
	unsigned long addr;
	long ret;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.flags || (req.prot != SHADDR_PROT_READ &&
			  req.prot != (SHADDR_PROT_READ | SHADDR_PROT_WRITE)))
		return -EINVAL;

	exp = shaddr_export_lookup(req.handle, SHADDR_EXPORT_HANDLE);
	if (!exp)
		return -ENOENT;
	if (req.block >= exp->nr_blocks) {
		ret = -EINVAL;
		goto out_put_exp;
	}
	if (!shaddr_may_attach(exp->tgid, exp->mm)) {
		ret = -EPERM;
		goto out_refused;
	}
	if ((req.prot & SHADDR_PROT_WRITE) && !(exp->prot & SHADDR_PROT_WRITE)) {
		ret = -EACCES;
		goto out_refused;
	}

	ret = shaddr_window_create(sf, file, exp,
				   exp->base + (unsigned long)req.block *
						exp->block_size,
				   exp->block_size,
				   req.prot & SHADDR_PROT_WRITE, 0, 0, false,
				   &addr);
	if (ret)
		return ret;

	req.addr = addr;
	req.size = exp->block_size;
	spin_lock(&sf->slot_lock);
	for (req.slot = 0; req.slot < sf->nr_slots; req.slot++)
		if (sf->slots[req.slot] && sf->slots[req.slot]->uaddr == addr)
			break;
	spin_unlock(&sf->slot_lock);
	if (copy_to_user(uarg, &req, sizeof(req))) {
		vm_munmap(addr, req.size);
		return -EFAULT;
	}
	return 0;

out_refused:
	atomic64_inc(&shaddr_stats.refusals);
out_put_exp:
	shaddr_export_put(exp);
	return ret;
}

/**
 * shaddr_detach_at() - munmap the attachment of @sf containing @addr
 * @sf: the file (its lock held; current->mm is its mm)
 * @addr: an address inside the attachment
 *
 * Return: 0, -ENOENT, or an error of vm_munmap().
 */
long shaddr_detach_at(struct shaddr_file *sf, unsigned long addr)
{
	unsigned long start = 0, size = 0;
	struct shaddr_window *win;

	spin_lock(&sf->slot_lock);
	list_for_each_entry(win, &sf->attachments, file_node) {
		if (win->uaddr && addr >= win->uaddr &&
		    addr - win->uaddr < win->size) {
			start = win->uaddr;
			size = win->size;
			break;
		}
	}
	spin_unlock(&sf->slot_lock);
	if (!size)
		return -ENOENT;
	/* close() of the VMA unlinks and drops the attachment. */
	return vm_munmap(start, size);
}

/* munmap every attachment of @sf made through @apid. */
void shaddr_detach_apid(struct shaddr_file *sf, u64 apid)
{
	struct shaddr_window *win;
	unsigned long start, size;

	for (;;) {
		size = 0;
		spin_lock(&sf->slot_lock);
		list_for_each_entry(win, &sf->attachments, file_node) {
			if (win->apid == apid && win->uaddr) {
				start = win->uaddr;
				size = win->size;
				break;
			}
		}
		spin_unlock(&sf->slot_lock);
		if (!size || vm_munmap(start, size))
			return;
	}
}

long shaddr_ioc_unmap(struct shaddr_file *sf, void __user *uarg)
{
	struct shaddr_window *win = NULL;
	struct shaddr_unmap req;
	unsigned long addr = 0, size = 0;
	unsigned int i;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.flags & ~SHADDR_UNMAP_BY_SLOT)
		return -EINVAL;
	if ((req.flags & SHADDR_UNMAP_BY_SLOT) && req.slot >= sf->nr_slots)
		return -EINVAL;

	spin_lock(&sf->slot_lock);
	for (i = 0; i < sf->nr_slots; i++) {
		struct shaddr_window *w = sf->slots[i];

		if (!w || !w->uaddr)
			continue;
		if ((req.flags & SHADDR_UNMAP_BY_SLOT) ? i == req.slot :
		    w->uaddr == req.addr) {
			win = w;
			addr = w->uaddr;
			size = w->size;
			break;
		}
	}
	spin_unlock(&sf->slot_lock);
	if (!win)
		return -ENOENT;
	/* close() of the VMA frees the slot and drops the window. */
	return vm_munmap(addr, size);
}

long shaddr_ioc_query(struct shaddr_file *sf, void __user *uarg)
{
	struct shaddr_query *q;
	unsigned int i;
	long ret = 0;

	q = kzalloc(sizeof(*q), GFP_KERNEL);
	if (!q)
		return -ENOMEM;
	q->nr_slots = sf->nr_slots;
	q->slot_size = sf->slot_size;
	spin_lock(&sf->slot_lock);
	for (i = 0; i < sf->nr_slots; i++) {
		struct shaddr_window *w = sf->slots[i];
		struct shaddr_slot_info *si = &q->slots[i];

		if (!w || !w->uaddr)
			continue;
		q->nr_mapped++;
		si->state = READ_ONCE(w->exp->dead) ? SHADDR_SLOT_DEAD :
						      SHADDR_SLOT_MAPPED;
		si->prot = SHADDR_PROT_READ |
			   (w->writable ? SHADDR_PROT_WRITE : 0);
		si->peer = pid_vnr(w->exp->tgid);
		si->handle = w->exp->handle;
		si->addr = w->uaddr;
		si->block = w->src;
		si->size = w->size;
	}
	spin_unlock(&sf->slot_lock);
	if (copy_to_user(uarg, q, sizeof(*q)))
		ret = -EFAULT;
	kfree(q);
	return ret;
}
