// SPDX-License-Identifier: GPL-2.0
/*
 * shaddr: single-copy shared-address memory for intra-node MPI collectives.
 *
 * Module entry and exit: registers the /dev/shaddr misc device. The device
 * is world-accessible (0666) like /dev/xpmem; access to another process's
 * memory is authorised per request, never by the device mode.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/miscdevice.h>
#include <linux/module.h>

#include "shaddr_priv.h"

static struct miscdevice shaddr_miscdev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = SHADDR_DEVICE_NAME,
	.fops = &shaddr_fops,
	.groups = shaddr_attr_groups,
	.mode = 0666,
};

static int __init shaddr_init(void)
{
	int ret;

	shaddr_stats_init();
	ret = misc_register(&shaddr_miscdev);
	if (ret) {
		pr_err("cannot register /dev/%s: %d\n", SHADDR_DEVICE_NAME, ret);
		return ret;
	}
	pr_info("loaded: /dev/%s, ABI %u.%u\n", SHADDR_DEVICE_NAME,
		SHADDR_ABI_MAJOR, SHADDR_ABI_MINOR);
	return 0;
}

static void __exit shaddr_exit(void)
{
	misc_deregister(&shaddr_miscdev);
	pr_info("unloaded\n");
}

module_init(shaddr_init);
module_exit(shaddr_exit);

MODULE_DESCRIPTION("Single-copy shared-address memory for intra-node MPI");
MODULE_AUTHOR("The shaddr developers");
MODULE_LICENSE("GPL");
MODULE_VERSION("0.1.0");
