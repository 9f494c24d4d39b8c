// SPDX-License-Identifier: GPL-2.0
/*
 * XPMEM-like segments (importer side): GET an access id for a segment,
 * ATTACH ranges of it, DETACH, RELEASE. MAKE and REMOVE live with the other
 * exports in export.c; the mapping machinery is shared with windows.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/mm.h>
#include <linux/random.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "shaddr_priv.h"

/* The largest attachment: one window id's span of the device file. */
#define SHADDR_MAX_ATTACH	BIT_ULL(40)

/* XPMEM_PERMIT_MODE semantics: owner, group or other bits, as IPC does. */
static int shaddr_seg_permitted(struct shaddr_export *seg, bool writable)
{
	u32 want = writable ? 06 : 04;
	u32 granted;

	if (uid_eq(current_euid(), seg->uid))
		granted = seg->mode >> 6;
	else if (in_egroup_p(seg->gid))
		granted = seg->mode >> 3;
	else
		granted = seg->mode;
	if ((granted & want) == want)
		return 0;
	if (shaddr_exporter_capable(seg->tgid, seg->mm, CAP_IPC_OWNER))
		return 0;
	return -EACCES;
}

static struct shaddr_access *shaddr_access_find(struct shaddr_file *sf,
						u64 apid)
{
	struct shaddr_access *acc;

	list_for_each_entry(acc, &sf->accesses, file_node)
		if (acc->apid == apid)
			return acc;
	return NULL;
}

static u64 shaddr_new_apid(struct shaddr_file *sf)
{
	u64 apid;

	do {
		apid = get_random_u64() & ~BIT_ULL(63);
	} while (!apid || shaddr_access_find(sf, apid));
	return apid;
}

long shaddr_ioc_get(struct shaddr_file *sf, void __user *uarg)
{
	struct shaddr_export *seg;
	struct shaddr_access *acc;
	struct shaddr_get req;
	bool writable;
	long ret;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.pad || (req.flags != SHADDR_SEG_RDONLY &&
			req.flags != SHADDR_SEG_RDWR))
		return -EINVAL;
	writable = req.flags == SHADDR_SEG_RDWR;
	if (sf->nr_accesses >= shaddr_max_exports)
		return -ENOSPC;

	seg = shaddr_export_lookup(req.segid, SHADDR_EXPORT_SEGMENT);
	if (!seg)
		return -ENOENT;
	ret = shaddr_seg_permitted(seg, writable);
	if (!ret && !shaddr_may_attach(seg->tgid, seg->mm))
		ret = -EPERM;
	if (ret) {
		atomic64_inc(&shaddr_stats.refusals);
		goto out_put;
	}

	acc = kzalloc(sizeof(*acc), GFP_KERNEL_ACCOUNT);
	if (!acc) {
		ret = -ENOMEM;
		goto out_put;
	}
	acc->seg = seg;
	acc->writable = writable;
	acc->apid = shaddr_new_apid(sf);
	list_add(&acc->file_node, &sf->accesses);
	sf->nr_accesses++;

	req.apid = acc->apid;
	if (copy_to_user(uarg, &req, sizeof(req))) {
		list_del(&acc->file_node);
		sf->nr_accesses--;
		kfree(acc);
		ret = -EFAULT;
		goto out_put;
	}
	return 0;

out_put:
	shaddr_export_put(seg);
	return ret;
}

static void shaddr_access_free(struct shaddr_file *sf,
			       struct shaddr_access *acc)
{
	list_del(&acc->file_node);
	sf->nr_accesses--;
	shaddr_export_put(acc->seg);
	kfree(acc);
}

/*
 * munmap the attachment of @sf containing @addr (any attachment made
 * through @apid if @apid is not 0). Returns 0, -ENOENT or an error of
 * vm_munmap(); the close of the VMA retires the attachment.
 */
static long shaddr_detach_one(struct shaddr_file *sf, unsigned long addr,
			      u64 apid)
{
	unsigned long start = 0, size = 0;
	struct shaddr_mapping *m;

	spin_lock(&sf->slot_lock);
	list_for_each_entry(m, &sf->attachments, file_node) {
		if (m->state != SHADDR_MAPPING_MAPPED)
			continue;
		if (apid ? m->apid == apid :
		    addr >= m->uaddr && addr - m->uaddr < m->size) {
			start = m->uaddr;
			size = m->size;
			break;
		}
	}
	spin_unlock(&sf->slot_lock);
	if (!size)
		return -ENOENT;
	return vm_munmap(start, size);
}

long shaddr_ioc_release(struct shaddr_file *sf, void __user *uarg)
{
	struct shaddr_access *acc;
	unsigned int n;
	u64 apid;

	if (copy_from_user(&apid, uarg, sizeof(apid)))
		return -EFAULT;
	acc = shaddr_access_find(sf, apid);
	if (!acc)
		return -ENOENT;
	/* Each round unmaps one; bounded by what the file could hold. */
	for (n = 0; n <= shaddr_max_attachments; n++)
		if (shaddr_detach_one(sf, 0, apid))
			break;
	shaddr_access_free(sf, acc);
	return 0;
}

long shaddr_ioc_attach(struct shaddr_file *sf, struct file *file,
		       void __user *uarg)
{
	unsigned long pg_off, start, len, hint, addr;
	struct shaddr_access *acc;
	struct shaddr_export *seg;
	struct shaddr_attach req;
	bool fixed;
	long ret;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.pad || (req.flags & ~SHADDR_ATTACH_FIXED) || !req.size)
		return -EINVAL;
	acc = shaddr_access_find(sf, req.apid);
	if (!acc)
		return -ENOENT;
	seg = acc->seg;
	if (shaddr_export_dead(seg))
		return -ENOENT;
	if (req.offset >= seg->size || req.size > seg->size - req.offset)
		return -EINVAL;

	pg_off = req.offset & ~PAGE_MASK;
	start = seg->base + req.offset - pg_off;
	if (req.size > SHADDR_MAX_ATTACH - pg_off)
		return -EINVAL;
	len = PAGE_ALIGN(req.size + pg_off);
	fixed = req.flags & SHADDR_ATTACH_FIXED;
	if (fixed && (req.vaddr & ~PAGE_MASK) != pg_off)
		return -EINVAL;
	hint = req.vaddr & PAGE_MASK;

	kref_get(&seg->kref);	/* handed to the attachment */
	ret = shaddr_mapping_create(sf, file, seg, start, len, acc->writable,
				    acc->apid, hint, fixed, &addr, NULL);
	if (ret)
		return ret;
	sf->used = true;

	req.addr = addr + pg_off;
	if (copy_to_user(uarg, &req, sizeof(req))) {
		vm_munmap(addr, len);
		return -EFAULT;
	}
	return 0;
}

long shaddr_ioc_detach(struct shaddr_file *sf, void __user *uarg)
{
	u64 addr;

	if (copy_from_user(&addr, uarg, sizeof(addr)))
		return -EFAULT;
	return shaddr_detach_one(sf, addr, 0);
}

/* The file is being released: its attachments are gone (VMAs hold it). */
void shaddr_access_release_all(struct shaddr_file *sf)
{
	struct shaddr_access *acc, *tmp;

	list_for_each_entry_safe(acc, tmp, &sf->accesses, file_node)
		shaddr_access_free(sf, acc);
}
