// SPDX-License-Identifier: GPL-2.0
/*
 * Module-wide statistics, read-only under /sys/class/misc/shaddr/stats/.
 * One value per file, as sysfs requires; tools/shaddr-info prints them all.
 */
#include <linux/device.h>
#include <linux/kernel.h>

#include "shaddr_priv.h"

struct shaddr_stats shaddr_stats;

/* A sysfs attribute bound to one counter, so one show() serves them all. */
struct shaddr_stat_attr {
	struct device_attribute dattr;
	atomic64_t *counter;
};

static ssize_t shaddr_stat_show(struct device *dev,
				struct device_attribute *dattr, char *buf)
{
	struct shaddr_stat_attr *sa =
		container_of(dattr, struct shaddr_stat_attr, dattr);

	return sysfs_emit(buf, "%lld\n", (long long)atomic64_read(sa->counter));
}

static struct shaddr_stat_attr shaddr_stat_attrs[] = {
	{ __ATTR(open_files, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.open_files },
	{ __ATTR(ioctls, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.ioctls },
	{ __ATTR(ioctl_errors, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.ioctl_errors },
	{ __ATTR(exports, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.exports },
	{ __ATTR(windows, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.windows },
	{ __ATTR(pages_pinned, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.pages_pinned },
	{ __ATTR(pages_mapped, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.pages_mapped },
	{ __ATTR(faults, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.faults },
	{ __ATTR(invalidations, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.invalidations },
	{ __ATTR(refusals, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.refusals },
	{ __ATTR(segments, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.segments },
	{ __ATTR(attachments, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.attachments },
	{ __ATTR(huge_mapped, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.huge_mapped },
	{ __ATTR(track_bytes, 0444, shaddr_stat_show, NULL),
	  &shaddr_stats.track_bytes },
};

static struct attribute *shaddr_stats_attrs[ARRAY_SIZE(shaddr_stat_attrs) + 1];

static const struct attribute_group shaddr_stats_group = {
	.name = "stats",
	.attrs = shaddr_stats_attrs,
};

const struct attribute_group *shaddr_attr_groups[] = {
	&shaddr_stats_group,
	NULL,
};

/* Fill the NULL-terminated attribute list; called before misc_register(). */
void shaddr_stats_init(void)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(shaddr_stat_attrs); i++)
		shaddr_stats_attrs[i] = &shaddr_stat_attrs[i].dattr.attr;
}
