/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Small shims so one source builds against every kernel Debian ships (6.1,
 * 6.12, trixie-backports' 7.x). The SHADDR_* feature macros come from header
 * probes in Kbuild; each shim names the kernel change it covers.
 */
#ifndef _SHADDR_COMPAT_H
#define _SHADDR_COMPAT_H

#include <linux/mm.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/coredump.h>
#ifdef SHADDR_HAVE_TASK_EXEC_STATE
#include <linux/sched/exec_state.h>
#endif
#ifdef SHADDR_HAVE_PFN_T
#include <linux/pfn_t.h>
#endif

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

#ifdef CONFIG_ARCH_SUPPORTS_PMD_PFNMAP
/*
 * 6.17 removed pfn_t ("mm: remove callers of pfn_t functionality", 21aa65bf82a7,
 * and the series around it): vmf_insert_pfn_pmd() takes a plain pfn.
 */
static inline vm_fault_t shaddr_insert_pfn_pmd(struct vm_fault *vmf,
					       unsigned long pfn, bool write)
{
#ifdef SHADDR_HAVE_PFN_T
	return vmf_insert_pfn_pmd(vmf, __pfn_to_pfn_t(pfn, 0), write);
#else
	return vmf_insert_pfn_pmd(vmf, pfn, write);
#endif
}
#endif

/*
 * Whether a task is dumpable by its owner, and the user namespace that owns
 * its executable image: ptrace's access rule asks both of them. They lived in
 * the address space (get_dumpable(mm) == SUID_DUMP_USER, mm->user_ns) until
 * "sched: introduce struct task_exec_state" (7.x, after 7.1-rc4) moved them
 * to the state an exec gives the task (task->exec_state: ->dumpable == TASK_DUMPABLE_OWNER,
 * ->user_ns), which ptrace_may_access() reads since. @task is the exporter's
 * thread-group leader, @mm its address space; call under rcu_read_lock().
 */
#ifdef SHADDR_HAVE_TASK_EXEC_STATE
static inline bool shaddr_owner_dumpable(struct task_struct *task,
					 struct mm_struct *mm)
{
	return READ_ONCE(rcu_dereference(task->exec_state)->dumpable) ==
	       TASK_DUMPABLE_OWNER;
}

static inline struct user_namespace *
shaddr_image_user_ns(struct task_struct *task, struct mm_struct *mm)
{
	return rcu_dereference(task->exec_state)->user_ns;
}
#else
static inline bool shaddr_owner_dumpable(struct task_struct *task,
					 struct mm_struct *mm)
{
	return get_dumpable(mm) == SUID_DUMP_USER;
}

static inline struct user_namespace *
shaddr_image_user_ns(struct task_struct *task, struct mm_struct *mm)
{
	return mm->user_ns;
}
#endif

#endif /* _SHADDR_COMPAT_H */
