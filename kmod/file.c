// SPDX-License-Identifier: GPL-2.0
/*
 * File operations of /dev/shaddr: open/release of the per-file context and
 * the ioctl dispatcher. Each ioctl's work lives in the file of its feature.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "shaddr_priv.h"

/* A file's own address space holds VMAs only, never pages. */
static const struct address_space_operations shaddr_aops;

static int shaddr_open(struct inode *inode, struct file *file)
{
	struct shaddr_file *sf;

	if (!current->mm)
		return -EINVAL;
	sf = kzalloc(sizeof(*sf), GFP_KERNEL_ACCOUNT);
	if (!sf)
		return -ENOMEM;
	mutex_init(&sf->lock);
	spin_lock_init(&sf->slot_lock);
	INIT_LIST_HEAD(&sf->exports);
	INIT_LIST_HEAD(&sf->accesses);
	INIT_LIST_HEAD(&sf->attachments);
	sf->mm = current->mm;
	mmgrab(sf->mm);
	sf->owner_tgid = task_tgid_vnr(current);
	sf->slot_size = shaddr_default_slot_size;
	sf->nr_slots = shaddr_max_slots;
	ida_init(&sf->mapping_ids);
	/*
	 * The VMAs of this file's mappings live in its own address space, not
	 * in the device inode's: a zap walks only them, and no other user's
	 * mmap or munmap of the device contends with it (DRM does alike).
	 */
	address_space_init_once(&sf->mapping);
	sf->mapping.a_ops = &shaddr_aops;
	sf->mapping.host = inode;
	file->f_mapping = &sf->mapping;
	file->private_data = sf;
	atomic64_inc(&shaddr_stats.open_files);
	pr_debug("open by tgid %d\n", sf->owner_tgid);
	return 0;
}

static int shaddr_release(struct inode *inode, struct file *file)
{
	struct shaddr_file *sf = file->private_data;

	pr_debug("release of file opened by tgid %d\n", sf->owner_tgid);
	/* Every mapping holds the file, so none is left here. */
	mutex_lock(&sf->lock);
	shaddr_access_release_all(sf);
	shaddr_export_release_all(sf);
	mutex_unlock(&sf->lock);
	mmdrop(sf->mm);
	WARN_ON_ONCE(!RB_EMPTY_ROOT(&sf->mapping.i_mmap.rb_root));
	ida_destroy(&sf->mapping_ids);
	mutex_destroy(&sf->lock);
	kfree(sf);
	atomic64_dec(&shaddr_stats.open_files);
	return 0;
}

/*
 * A descriptor of the file is closed. At the exit of a thread group, its
 * descriptor table is closed once every thread of it is exiting, before
 * the group can be reaped: the exports it made die here, not only when its
 * address space is torn down, which another user of it can defer.
 */
static int shaddr_flush(struct file *file, fl_owner_t id)
{
	struct shaddr_file *sf = file->private_data;

	if (!(current->flags & PF_EXITING) ||
	    atomic_read(&current->signal->live))
		return 0;
	mutex_lock(&sf->lock);
	shaddr_export_withdraw_group(sf, task_tgid(current));
	mutex_unlock(&sf->lock);
	return 0;
}

static long shaddr_ioc_version(void __user *uarg)
{
	struct shaddr_version ver = {
		.abi_major = SHADDR_ABI_MAJOR,
		.abi_minor = SHADDR_ABI_MINOR,
		.features = SHADDR_FEAT_WINDOWS | SHADDR_FEAT_SEGMENTS |
			    SHADDR_FEAT_READ_ONLY_PAGES,
	};

	if (IS_ENABLED(CONFIG_ARCH_SUPPORTS_PMD_PFNMAP))
		ver.features |= SHADDR_FEAT_HUGE_MAP;

	if (copy_to_user(uarg, &ver, sizeof(ver)))
		return -EFAULT;
	return 0;
}

static long shaddr_ioc_set_slot_size(struct shaddr_file *sf,
				     void __user *uarg)
{
	u64 size;

	if (copy_from_user(&size, uarg, sizeof(size)))
		return -EFAULT;
	if (size != SHADDR_SLOT_1M && size != SHADDR_SLOT_16M &&
	    size != SHADDR_SLOT_256M)
		return -EINVAL;
	if (sf->used)
		return -EBUSY;
	sf->slot_size = size;
	return 0;
}

/*
 * May the caller issue @cmd (not VERSION) on this file? Unknown commands
 * are -ENOTTY. Every command acts on the state of the address space that
 * opened the file: from any other (a passed or inherited descriptor) it
 * fails with -EBADFD, so that nothing of the owner's shows. Every command
 * but QUERY needs a descriptor open for writing (-EBADF).
 */
static long shaddr_may_issue(struct shaddr_file *sf, struct file *file,
			     unsigned int cmd)
{
	switch (cmd) {
	case SHADDR_IOC_TRANSLATE:
	case SHADDR_IOC_REVOKE:
	case SHADDR_IOC_MAP:
	case SHADDR_IOC_UNMAP:
	case SHADDR_IOC_QUERY:
	case SHADDR_IOC_SET_SLOT_SIZE:
	case SHADDR_IOC_MAKE:
	case SHADDR_IOC_REMOVE:
	case SHADDR_IOC_GET:
	case SHADDR_IOC_RELEASE:
	case SHADDR_IOC_ATTACH:
	case SHADDR_IOC_DETACH:
		break;
	default:
		return -ENOTTY;
	}
	if (current->mm != sf->mm)
		return -EBADFD;
	if (cmd != SHADDR_IOC_QUERY && !(file->f_mode & FMODE_WRITE))
		return -EBADF;
	return 0;
}

static long shaddr_ioctl(struct file *file, unsigned int cmd,
			 unsigned long arg)
{
	struct shaddr_file *sf = file->private_data;
	void __user *uarg = (void __user *)arg;
	long ret;

	if (cmd == SHADDR_IOC_VERSION) {
		ret = shaddr_ioc_version(uarg);
		goto out;
	}
	ret = shaddr_may_issue(sf, file, cmd);
	if (ret)
		goto out;

	mutex_lock(&sf->lock);
	switch (cmd) {
	case SHADDR_IOC_TRANSLATE:
		ret = shaddr_ioc_translate(sf, uarg);
		break;
	case SHADDR_IOC_REVOKE:
		ret = shaddr_ioc_revoke(sf, uarg);
		break;
	case SHADDR_IOC_MAP:
		ret = shaddr_ioc_map(sf, file, uarg);
		break;
	case SHADDR_IOC_UNMAP:
		ret = shaddr_ioc_unmap(sf, uarg);
		break;
	case SHADDR_IOC_QUERY:
		ret = shaddr_ioc_query(sf, uarg);
		break;
	case SHADDR_IOC_SET_SLOT_SIZE:
		ret = shaddr_ioc_set_slot_size(sf, uarg);
		break;
	case SHADDR_IOC_MAKE:
		ret = shaddr_ioc_make(sf, uarg);
		break;
	case SHADDR_IOC_REMOVE:
		ret = shaddr_ioc_remove(sf, uarg);
		break;
	case SHADDR_IOC_GET:
		ret = shaddr_ioc_get(sf, uarg);
		break;
	case SHADDR_IOC_RELEASE:
		ret = shaddr_ioc_release(sf, uarg);
		break;
	case SHADDR_IOC_ATTACH:
		ret = shaddr_ioc_attach(sf, file, uarg);
		break;
	case SHADDR_IOC_DETACH:
		ret = shaddr_ioc_detach(sf, uarg);
		break;
	default:
		ret = -ENOTTY;
		break;
	}
	mutex_unlock(&sf->lock);
out:
	atomic64_inc(&shaddr_stats.ioctls);
	if (ret < 0)
		atomic64_inc(&shaddr_stats.ioctl_errors);
	return ret;
}

const struct file_operations shaddr_fops = {
	.owner = THIS_MODULE,
	.open = shaddr_open,
	.flush = shaddr_flush,
	.release = shaddr_release,
	.unlocked_ioctl = shaddr_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = shaddr_mmap,
#ifdef CONFIG_ARCH_SUPPORTS_PMD_PFNMAP
	/* Line windows up with the exporter's 2 MiB boundaries for PMDs. */
	.get_unmapped_area = thp_get_unmapped_area,
#endif
	.llseek = noop_llseek,
};
