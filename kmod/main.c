// SPDX-License-Identifier: GPL-2.0
/*
 * shaddr: single-copy shared-address memory for intra-node MPI collectives.
 *
 * Module entry and exit, module parameters, and the /dev/shaddr misc device.
 * The device is world-accessible (0666) like /dev/xpmem; access to another
 * process's memory is authorised per request, never by the device mode.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/miscdevice.h>
#include <linux/module.h>

#include "shaddr_priv.h"

unsigned int shaddr_max_slots = 3;
module_param_named(max_slots, shaddr_max_slots, uint, 0444);
MODULE_PARM_DESC(max_slots, "Window slots per open file (1-16, default 3)");

unsigned long shaddr_default_slot_size = SHADDR_SLOT_16M;
module_param_named(slot_size, shaddr_default_slot_size, ulong, 0444);
MODULE_PARM_DESC(slot_size,
		 "Default slot size in bytes: 1048576, 16777216 (default) or 268435456");

unsigned int shaddr_max_exports = 256;
module_param_named(max_exports, shaddr_max_exports, uint, 0444);
MODULE_PARM_DESC(max_exports,
		 "Handles+segments one open file may export, and access ids it may hold (default 256)");

unsigned int shaddr_max_attachments = 8192;
module_param_named(max_attachments, shaddr_max_attachments, uint, 0444);
MODULE_PARM_DESC(max_attachments,
		 "Segment attachments per open file (default 8192)");

unsigned long shaddr_max_attach_mib = 1UL << 20;
module_param_named(max_attach_mib, shaddr_max_attach_mib, ulong, 0444);
MODULE_PARM_DESC(max_attach_mib,
		 "MiB of segment attachments per open file (default 1048576)");

unsigned long shaddr_max_user_map_mib = 4UL << 20;
module_param_named(max_user_map_mib, shaddr_max_user_map_mib, ulong, 0444);
MODULE_PARM_DESC(max_user_map_mib,
		 "MiB of windows and attachments one user may have mapped, over all its files (default 4194304)");

static struct miscdevice shaddr_miscdev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = SHADDR_DEVICE_NAME,
	.fops = &shaddr_fops,
	.groups = shaddr_attr_groups,
	.mode = 0666,
};

static int __init shaddr_check_params(void)
{
	if (shaddr_max_slots < 1 || shaddr_max_slots > SHADDR_MAX_SLOTS) {
		pr_err("max_slots=%u: must be 1..%u\n", shaddr_max_slots,
		       SHADDR_MAX_SLOTS);
		return -EINVAL;
	}
	if (shaddr_default_slot_size != SHADDR_SLOT_1M &&
	    shaddr_default_slot_size != SHADDR_SLOT_16M &&
	    shaddr_default_slot_size != SHADDR_SLOT_256M) {
		pr_err("slot_size=%lu: must be 1 MiB, 16 MiB or 256 MiB\n",
		       shaddr_default_slot_size);
		return -EINVAL;
	}
	if (!shaddr_max_exports) {
		pr_err("max_exports must be at least 1\n");
		return -EINVAL;
	}
	return 0;
}

static int __init shaddr_init(void)
{
	int ret;

	ret = shaddr_check_params();
	if (ret)
		return ret;
	shaddr_stats_init();
	ret = shaddr_export_init();
	if (ret)
		return ret;
	ret = misc_register(&shaddr_miscdev);
	if (ret) {
		pr_err("cannot register /dev/%s: %d\n", SHADDR_DEVICE_NAME, ret);
		goto err_export;
	}
	pr_info("loaded: /dev/%s, ABI %u.%u, %u slots of %lu KiB\n",
		SHADDR_DEVICE_NAME, SHADDR_ABI_MAJOR, SHADDR_ABI_MINOR,
		shaddr_max_slots, shaddr_default_slot_size >> 10);
	return 0;

err_export:
	shaddr_export_exit();
	return ret;
}

static void __exit shaddr_exit(void)
{
	misc_deregister(&shaddr_miscdev);
	shaddr_export_exit();
	pr_info("unloaded\n");
}

module_init(shaddr_init);
module_exit(shaddr_exit);

MODULE_DESCRIPTION("Single-copy shared-address memory for intra-node MPI");
MODULE_AUTHOR("The shaddr developers");
MODULE_LICENSE("GPL");
MODULE_VERSION("0.1.0");
