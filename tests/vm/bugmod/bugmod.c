// SPDX-License-Identifier: GPL-2.0
/*
 * shaddr_vmtest: real kernel bugs on demand, for the VM runner's self-tests
 * (tests/vm/runner-selftest real_reports). Writing a bug's name to
 * /sys/module/shaddr_vmtest/parameters/trigger commits it once:
 *   page_write_after_free  write through a stale alias (vmap) into a page already freed, then
 *                          allocate it again: page poisoning reports "pagealloc: memory
 *                          corruption" (the class of bug a stale user mapping would be)
 *   leak                   lose a 1 KiB allocation (0x5a bytes): kmemleak's scan finds it
 *   lock_order             take two mutexes in both orders: lockdep reports a possible
 *                          circular locking dependency
 * Never load it anywhere but a throw-away test guest.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/vmalloc.h>
#include <linux/gfp.h>
#include <linux/mm.h>

static void bug_page_write_after_free(void)
{
	struct page *page = alloc_page(GFP_KERNEL), *again[64];
	void *alias;
	int i, n = 0;

	if (!page)
		return;
	alias = vmap(&page, 1, VM_MAP, PAGE_KERNEL);
	if (!alias) {
		__free_page(page);
		return;
	}
	__free_page(page);
	memset(alias, 0x42, 64);
	/* The freed page is usually the next one this CPU allocates: its poison check reports. */
	while (n < ARRAY_SIZE(again)) {
		again[n] = alloc_page(GFP_KERNEL);
		if (!again[n] || again[n++] == page)
			break;
	}
	for (i = 0; i < n; i++)
		if (again[i])
			__free_page(again[i]);
	vunmap(alias);
}

static noinline void bug_leak(void)
{
	char *p = kmalloc(1024, GFP_KERNEL);

	if (!p)
		return;
	memset(p, 0x5a, 1024);
	OPTIMIZER_HIDE_VAR(p); /* the bytes are written; then the only pointer is gone */
}

static DEFINE_MUTEX(lock_a);
static DEFINE_MUTEX(lock_b);

static void bug_lock_order(void)
{
	mutex_lock(&lock_a);
	mutex_lock(&lock_b);
	mutex_unlock(&lock_b);
	mutex_unlock(&lock_a);
	mutex_lock(&lock_b);
	mutex_lock(&lock_a);
	mutex_unlock(&lock_a);
	mutex_unlock(&lock_b);
}

static int trigger_set(const char *val, const struct kernel_param *kp)
{
	if (sysfs_streq(val, "page_write_after_free"))
		bug_page_write_after_free();
	else if (sysfs_streq(val, "leak"))
		bug_leak();
	else if (sysfs_streq(val, "lock_order"))
		bug_lock_order();
	else
		return -EINVAL;
	pr_info("shaddr_vmtest: committed %s\n", val);
	return 0;
}

static const struct kernel_param_ops trigger_ops = { .set = trigger_set };
module_param_cb(trigger, &trigger_ops, NULL, 0200);
MODULE_PARM_DESC(trigger, "commit a bug: page_write_after_free, leak, lock_order");

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("shaddr VM runner self-test: real kernel bugs on demand");
