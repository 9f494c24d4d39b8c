// SPDX-License-Identifier: GPL-2.0
/*
 * Which pages of a mapping may have PTEs: a sparse bitmap, kept in chunks
 * of SHADDR_TRACK_CHUNK pages that are allocated when a page of theirs is
 * first mapped. Its memory follows what was mapped (about 1/64 of the page
 * tables the same PTEs need), not the size of the mapping: a huge,
 * untouched attachment costs no chunk at all.
 *
 * Chunks are allocated by shaddr_track_prepare() before the caller takes
 * the export's lock (nothing under it may reclaim memory) and live until
 * the mapping is freed; the bits are set, tested and cleared under the
 * export's lock.
 */
#include <linux/bitmap.h>
#include <linux/slab.h>
#include <linux/xarray.h>

#include "shaddr_priv.h"

#define SHADDR_TRACK_CHUNK	512

struct shaddr_track_chunk {
	DECLARE_BITMAP(bits, SHADDR_TRACK_CHUNK);
};

/**
 * shaddr_track_prepare() - make sure pages [@first, @first + @nr) have chunks
 * @xa: the mapping's tracking array
 * @first: first page index
 * @nr: number of pages
 *
 * Return: 0 or -ENOMEM.
 */
int shaddr_track_prepare(struct xarray *xa, unsigned long first,
			 unsigned long nr)
{
	unsigned long c, last = (first + nr - 1) / SHADDR_TRACK_CHUNK;
	struct shaddr_track_chunk *chunk, *old;

	for (c = first / SHADDR_TRACK_CHUNK; c <= last; c++) {
		if (xa_load(xa, c))
			continue;
		chunk = kzalloc(sizeof(*chunk), GFP_KERNEL_ACCOUNT);
		if (!chunk)
			return -ENOMEM;
		old = xa_cmpxchg(xa, c, NULL, chunk, GFP_KERNEL_ACCOUNT);
		if (old) {
			/* A racing fault put one there (or the store failed). */
			kfree(chunk);
			if (xa_is_err(old))
				return xa_err(old);
			continue;
		}
		atomic64_add(sizeof(*chunk), &shaddr_stats.track_bytes);
	}
	return 0;
}

/* Set pages [@first, @first + @nr); their chunks were prepared. */
void shaddr_track_set(struct xarray *xa, unsigned long first, unsigned long nr)
{
	while (nr) {
		struct shaddr_track_chunk *chunk =
			xa_load(xa, first / SHADDR_TRACK_CHUNK);
		unsigned long bit = first % SHADDR_TRACK_CHUNK;
		unsigned long n = min(nr, SHADDR_TRACK_CHUNK - bit);

		if (WARN_ON_ONCE(!chunk))
			return;
		bitmap_set(chunk->bits, bit, n);
		first += n;
		nr -= n;
	}
}

/* Is any page of [@first, @last) set? */
bool shaddr_track_any(struct xarray *xa, unsigned long first,
		      unsigned long last)
{
	struct shaddr_track_chunk *chunk;
	unsigned long c;

	if (first >= last)
		return false;
	xa_for_each_range(xa, c, chunk, first / SHADDR_TRACK_CHUNK,
			  (last - 1) / SHADDR_TRACK_CHUNK) {
		unsigned long base = c * SHADDR_TRACK_CHUNK;
		unsigned long s = max(first, base) - base;
		unsigned long e = min(last, base + SHADDR_TRACK_CHUNK) - base;

		if (find_next_bit(chunk->bits, e, s) < e)
			return true;
	}
	return false;
}

/* Clear pages [@first, @last). */
void shaddr_track_clear(struct xarray *xa, unsigned long first,
			unsigned long last)
{
	struct shaddr_track_chunk *chunk;
	unsigned long c;

	if (first >= last)
		return;
	xa_for_each_range(xa, c, chunk, first / SHADDR_TRACK_CHUNK,
			  (last - 1) / SHADDR_TRACK_CHUNK) {
		unsigned long base = c * SHADDR_TRACK_CHUNK;
		unsigned long s = max(first, base) - base;
		unsigned long e = min(last, base + SHADDR_TRACK_CHUNK) - base;

		bitmap_clear(chunk->bits, s, e - s);
	}
}

/* Free every chunk; the mapping is being freed. */
void shaddr_track_destroy(struct xarray *xa)
{
	struct shaddr_track_chunk *chunk;
	unsigned long c;

	xa_for_each(xa, c, chunk) {
		kfree(chunk);
		atomic64_sub(sizeof(*chunk), &shaddr_stats.track_bytes);
	}
	xa_destroy(xa);
}
