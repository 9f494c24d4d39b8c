// SPDX-License-Identifier: GPL-2.0
/*
 * File operations of /dev/shaddr: open/release of the per-file context and
 * the ioctl dispatcher. Each ioctl's work lives in the file of its feature.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "shaddr_priv.h"

static int shaddr_open(struct inode *inode, struct file *file)
{
	struct shaddr_file *sf;

	sf = kzalloc(sizeof(*sf), GFP_KERNEL_ACCOUNT);
	if (!sf)
		return -ENOMEM;
	mutex_init(&sf->lock);
	sf->owner_tgid = task_tgid_vnr(current);
	file->private_data = sf;
	atomic64_inc(&shaddr_stats.open_files);
	pr_debug("open by tgid %d\n", sf->owner_tgid);
	return 0;
}

static int shaddr_release(struct inode *inode, struct file *file)
{
	struct shaddr_file *sf = file->private_data;

	pr_debug("release of file opened by tgid %d\n", sf->owner_tgid);
	mutex_destroy(&sf->lock);
	kfree(sf);
	atomic64_dec(&shaddr_stats.open_files);
	return 0;
}

static long shaddr_ioc_version(void __user *uarg)
{
	struct shaddr_version ver = {
		.abi_major = SHADDR_ABI_MAJOR,
		.abi_minor = SHADDR_ABI_MINOR,
		.features = 0,
	};

	if (copy_to_user(uarg, &ver, sizeof(ver)))
		return -EFAULT;
	return 0;
}

static long shaddr_ioctl(struct file *file, unsigned int cmd,
			 unsigned long arg)
{
	void __user *uarg = (void __user *)arg;
	long ret;

	switch (cmd) {
	case SHADDR_IOC_VERSION:
		ret = shaddr_ioc_version(uarg);
		break;
	default:
		ret = -ENOTTY;
		break;
	}

	atomic64_inc(&shaddr_stats.ioctls);
	if (ret < 0)
		atomic64_inc(&shaddr_stats.ioctl_errors);
	return ret;
}

const struct file_operations shaddr_fops = {
	.owner = THIS_MODULE,
	.open = shaddr_open,
	.release = shaddr_release,
	.unlocked_ioctl = shaddr_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};
