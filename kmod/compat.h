/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Small shims so one source builds against 6.1 and 6.12 (and later). The
 * SHADDR_* feature macros come from header probes in Kbuild.
 */
#ifndef _SHADDR_COMPAT_H
#define _SHADDR_COMPAT_H

#include <linux/mm.h>

#ifndef SHADDR_HAVE_VM_FLAGS_SET
/* 6.3 made vm_flags read-only behind accessors (per-VMA locking). */
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}

static inline void vm_flags_clear(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags &= ~flags;
}
#endif

#ifndef SHADDR_HAVE_RELEASE_FAULT_LOCK
/* Before per-VMA locks (6.4), a fault always holds the mmap lock. */
static inline void release_fault_lock(struct vm_fault *vmf)
{
	mmap_read_unlock(vmf->vma->vm_mm);
}
#endif

/* 6.5 dropped the vmas argument of pin_user_pages_remote(). */
static inline long shaddr_pin_remote(struct mm_struct *mm, unsigned long start,
				     unsigned long nr_pages,
				     unsigned int gup_flags,
				     struct page **pages)
{
#ifdef SHADDR_PIN_REMOTE_HAS_VMAS
	return pin_user_pages_remote(mm, start, nr_pages, gup_flags, pages,
				     NULL, NULL);
#else
	return pin_user_pages_remote(mm, start, nr_pages, gup_flags, pages,
				     NULL);
#endif
}

#endif /* _SHADDR_COMPAT_H */
