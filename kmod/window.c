// SPDX-License-Identifier: GPL-2.0
/*
 * Process windows (importer side): MAP a block of a handle into one of the
 * caller's slots, UNMAP it, QUERY the slots. The mapping machinery is in
 * mapping.c.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/mm.h>
#include <linux/pid.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "shaddr_priv.h"

long shaddr_ioc_map(struct shaddr_file *sf, struct file *file,
		    void __user *uarg)
{
	struct shaddr_export *exp;
	struct shaddr_map req;
	unsigned long addr;
	int slot;
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

	ret = shaddr_mapping_create(sf, file, exp,
				    exp->base + (unsigned long)req.block *
						 exp->block_size,
				    exp->block_size,
				    req.prot & SHADDR_PROT_WRITE, 0, 0, false,
				    &addr, &slot);
	if (ret)
		return ret;
	sf->used = true;

	req.addr = addr;
	req.size = exp->block_size;
	req.slot = slot;
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

long shaddr_ioc_unmap(struct shaddr_file *sf, void __user *uarg)
{
	unsigned long addr = 0, size = 0;
	struct shaddr_unmap req;
	unsigned int i;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.flags & ~SHADDR_UNMAP_BY_SLOT)
		return -EINVAL;
	if ((req.flags & SHADDR_UNMAP_BY_SLOT) && req.slot >= sf->nr_slots)
		return -EINVAL;

	spin_lock(&sf->slot_lock);
	for (i = 0; i < sf->nr_slots; i++) {
		struct shaddr_mapping *m = sf->slots[i];

		if (!m || m->state != SHADDR_MAPPING_MAPPED)
			continue;
		if ((req.flags & SHADDR_UNMAP_BY_SLOT) ? i == req.slot :
		    m->uaddr == req.addr) {
			addr = m->uaddr;
			size = m->size;
			break;
		}
	}
	spin_unlock(&sf->slot_lock);
	if (!size)
		return -ENOENT;
	/* The close of its VMA frees the slot and drops the window. */
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
		struct shaddr_mapping *m = sf->slots[i];
		struct shaddr_slot_info *si = &q->slots[i];

		if (!m || m->state != SHADDR_MAPPING_MAPPED)
			continue;
		q->nr_mapped++;
		si->state = shaddr_export_dead(m->exp) ? SHADDR_SLOT_DEAD :
							 SHADDR_SLOT_MAPPED;
		si->prot = SHADDR_PROT_READ |
			   (m->writable ? SHADDR_PROT_WRITE : 0);
		si->peer = pid_vnr(m->exp->tgid);
		si->handle = m->exp->handle;
		si->addr = m->uaddr;
		si->block = m->src;
		si->size = m->size;
	}
	spin_unlock(&sf->slot_lock);
	if (copy_to_user(uarg, q, sizeof(*q)))
		ret = -EFAULT;
	kfree(q);
	return ret;
}
