// SPDX-License-Identifier: GPL-2.0
/*
 * Who may map another process's memory: the rule of ptrace attach with real
 * credentials (PTRACE_MODE_ATTACH_REALCREDS), as process_vm_readv() applies
 * it. ptrace_may_access() is not exported to modules, so its credential and
 * dumpability checks are applied here with the same semantics; the LSM
 * ptrace hook (e.g. Yama's ptrace_scope) is not reachable from a module.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/user_namespace.h>

#include "compat.h"
#include "shaddr_priv.h"

static bool shaddr_creds_match(const struct cred *cred,
			       const struct cred *tcred)
{
	return uid_eq(cred->uid, tcred->euid) &&
	       uid_eq(cred->uid, tcred->suid) &&
	       uid_eq(cred->uid, tcred->uid) &&
	       gid_eq(cred->gid, tcred->egid) &&
	       gid_eq(cred->gid, tcred->sgid) &&
	       gid_eq(cred->gid, tcred->gid);
}

/**
 * shaddr_may_attach() - may current map memory of the thread group @tgid?
 * @tgid: the exporter's thread group
 * @mm: the exporter's address space
 *
 * Return: true if current belongs to @tgid, or its real uid/gid equal all of
 * the target's uids/gids and the target is dumpable, or current has
 * CAP_SYS_PTRACE in the target's user namespace (and, for a non-dumpable
 * target, in the user namespace that owns its executable image).
 */
bool shaddr_may_attach(struct pid *tgid, struct mm_struct *mm)
{
	const struct cred *tcred;
	struct task_struct *task;
	bool ok;

	task = get_pid_task(tgid, PIDTYPE_TGID);
	if (!task)
		return false;
	if (same_thread_group(task, current)) {
		put_task_struct(task);
		return true;
	}

	rcu_read_lock();
	tcred = __task_cred(task);
	ok = shaddr_creds_match(current_cred(), tcred);
	if (!ok)
		ok = ns_capable(tcred->user_ns, CAP_SYS_PTRACE);
	if (ok && !shaddr_owner_dumpable(task, mm))
		ok = ns_capable(shaddr_image_user_ns(task, mm), CAP_SYS_PTRACE);
	rcu_read_unlock();
	put_task_struct(task);
	return ok;
}

/**
 * shaddr_exporter_capable() - has current @cap over the exporter's image?
 * @tgid: the exporter's thread group
 * @mm: the exporter's address space
 * @cap: the capability
 *
 * Return: true if current has @cap in the user namespace that owns the
 * executable image of @tgid (false once @tgid is gone).
 */
bool shaddr_exporter_capable(struct pid *tgid, struct mm_struct *mm, int cap)
{
	struct task_struct *task;
	bool ok;

	task = get_pid_task(tgid, PIDTYPE_TGID);
	if (!task)
		return false;
	rcu_read_lock();
	ok = ns_capable(shaddr_image_user_ns(task, mm), cap);
	rcu_read_unlock();
	put_task_struct(task);
	return ok;
}
