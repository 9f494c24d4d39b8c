/* SPDX-License-Identifier: MIT */
/*
 * Differential test of the interposer: every intercepted collective (MPI_*, through the
 * interposer when it is preloaded) against the MPI library's own PMPI_* on the same inputs, on
 * MPI_COMM_WORLD, a dup, a split in reversed rank order (its nodes are not rank blocks) and a
 * communicator that is freed; sizes 0, 1, 7, 4095, 4096, 4097 and 1 MiB + 3 bytes; several
 * roots; every op x type pair MPI defines; in place; derived (non-contiguous) datatypes; a user
 * op (forwarded). Receive buffers start with a sentinel, so writes outside the result count too.
 *
 * It also proves which path each call took, from the interposer's counters
 * (shaddr_interpose_get_stats, looked up with dlsym): SHADDR_EXPECT says what to expect on
 * MPI_COMM_WORLD (and its dup):
 *   accel  every call with data went through libshaddr on one node
 *   hier   Barrier/Bcast/Reduce/Allreduce/Allgather/Alltoall went through the node/leader
 *          hierarchy, the others were forwarded
 *   off    the interposer is loaded but forwards everything (MPI_THREAD_MULTIPLE, one rank...)
 *   none   no interposer (the counters do not exist)
 * Every intercepted call must move exactly one counter by one, and nothing may fall back,
 * unless SHADDR_INTERPOSE_FAIL_EVERY makes the interposer treat every n-th libshaddr call as
 * failed: then fallbacks must happen, and their results must be right all the same.
 * SHADDR_EXPECT_HEAP=1: libshaddr's heap layer must have served transfers (reads of a peer's
 * buffer through its heap file, mapped once) on some rank over the run: the 1 MiB + 3 and 64 KiB
 * buffers are malloc'd, so with libshaddr-heap preloaded they are in the heap;
 * SHADDR_EXPECT_HEAP=0: none may have (SHADDR_HEAP=off).
 * SHADDR_INTERPOSE_FORWARD (the interposer's own setting, read here too): the calls it names
 * must have been forwarded to PMPI_* whatever SHADDR_EXPECT says for the others.
 *
 * Usage: coll_diff [--quick] [--thread-multiple]
 */
#define _GNU_SOURCE /* dladdr (mpi_reference.h) */
#include <ctype.h>
#include <dlfcn.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shaddr_interpose.h"
#include "mpi_reference.h" /* PMPI_*: the MPI library's own, not the interposer's */

static int g_rank, g_size, g_errors, g_checks, g_quick;
static const char *g_expect = "none";
static int (*g_stats_fn)(struct shaddr_interpose_stats *);
static const char *g_comm_name = "";
static int g_comm_checked;  /* path expectations apply (world and its dup) */
static int g_allow_fallbacks; /* SHADDR_INTERPOSE_FAIL_EVERY is set: fallbacks are the point */
static size_t g_min;          /* SHADDR_MIN: smaller calls are forwarded */
/* COLL_DIFF_EXPECT_MIN replaces g_min: where libshaddr's plan starts taking calls (a test
 * model). Allgatherv's size is one block's either way. */

/* SHADDR_INTERPOSE_FORWARD: the calls named, indexed like the counters. */
static int g_forward[SHADDR_IP_COUNT];

static void read_forward(void) {
	static const char *const names[SHADDR_IP_COUNT] = {
		[SHADDR_IP_BARRIER] = "barrier",     [SHADDR_IP_BCAST] = "bcast",
		[SHADDR_IP_REDUCE] = "reduce",       [SHADDR_IP_ALLREDUCE] = "allreduce",
		[SHADDR_IP_GATHER] = "gather",       [SHADDR_IP_GATHERV] = "gatherv",
		[SHADDR_IP_SCATTER] = "scatter",     [SHADDR_IP_SCATTERV] = "scatterv",
		[SHADDR_IP_ALLGATHER] = "allgather", [SHADDR_IP_ALLGATHERV] = "allgatherv",
		[SHADDR_IP_ALLTOALL] = "alltoall",   [SHADDR_IP_ALLTOALLV] = "alltoallv",
	};
	const char *list = getenv("SHADDR_INTERPOSE_FORWARD");
	char word[32];

	while (list && *list) {
		size_t n = strcspn(list, ","), k = 0;

		for (size_t i = 0; i < n && k + 1 < sizeof(word); i++)
			if (list[i] != ' ')
				word[k++] = (char)tolower((unsigned char)list[i]);
		word[k] = '\0';
		for (int c = 0; c < SHADDR_IP_COUNT; c++)
			if (strcmp(word, names[c]) == 0 || strcmp(word, "all") == 0)
				g_forward[c] = 1;
		list += n + (list[n] == ',');
	}
}

/* Whether a call of @bytes (what the interposer compares with its threshold) is large enough
 * to be taken: not empty and not below SHADDR_MIN. */
static int sized(size_t bytes) {
	return bytes > 0 && bytes >= g_min;
}

static void fail(const char *fmt, ...) {
	va_list ap;
	if (g_errors++ > 20)
		return;
	va_start(ap, fmt);
	fprintf(stderr, "coll_diff rank %d [%s]: ", g_rank, g_comm_name);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
}

/* --- which path a call took ------------------------------------------------------------- */
static struct shaddr_interpose_stats g_before;

static int g_trace;

static void path_begin(void) {
	if (g_stats_fn)
		g_stats_fn(&g_before);
}

/* @hier_capable: the hierarchy implements it across nodes; @eligible: data and op that the
 * interposer can take at all (not a user op, not zero bytes). */
static void path_end(enum shaddr_interpose_call c, const char *what, int hier_capable,
		     int eligible) {
	struct shaddr_interpose_stats now;
	long acc, hier, fwd, fb;

	g_checks++;
	if (!g_stats_fn) {
		if (strcmp(g_expect, "none") != 0)
			fail("%s: shaddr_interpose_get_stats not found (interposer not loaded)", what);
		return;
	}
	if (strcmp(g_expect, "none") == 0) {
		fail("%s: the interposer is loaded but SHADDR_EXPECT=none", what);
		return;
	}
	g_stats_fn(&now);
	acc = (long)(now.accelerated[c] - g_before.accelerated[c]);
	hier = (long)(now.hierarchical[c] - g_before.hierarchical[c]);
	fwd = (long)(now.forwarded[c] - g_before.forwarded[c]);
	fb = (long)(now.fallbacks[c] - g_before.fallbacks[c]);
	if (fb && !g_allow_fallbacks)
		fail("%s: fell back to PMPI (libshaddr failed)", what);
	if (acc + fwd + fb != 1)
		fail("%s: %ld accelerated + %ld forwarded + %ld fallbacks, want one call", what,
		     acc, fwd, fb);
	if (!g_comm_checked || fb)
		return;
	if (!eligible || strcmp(g_expect, "off") == 0 || g_forward[c]) {
		if (fwd != 1)
			fail("%s: expected forwarded%s, got accelerated %ld", what,
			     g_forward[c] ? " (SHADDR_INTERPOSE_FORWARD)" : "", acc);
	} else if (strcmp(g_expect, "accel") == 0) {
		if (acc != 1 || hier != 0)
			fail("%s: expected libshaddr on one node, got acc %ld hier %ld fwd %ld", what,
			     acc, hier, fwd);
	} else if (strcmp(g_expect, "hier") == 0) {
		if (hier_capable ? hier != 1 : fwd != 1)
			fail("%s: expected %s, got acc %ld hier %ld fwd %ld", what,
			     hier_capable ? "the hierarchy" : "forwarded", acc, hier, fwd);
	}
}

/* --- data ------------------------------------------------------------------------------- */
static uint64_t mix(uint64_t x) {
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x;
}

static void fill(void *p, size_t n, uint64_t seed) {
	unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)mix(seed * 1000003u + i);
}

#define SENTINEL 0xa5

static void *xmalloc(size_t n) {
	void *p = malloc(n ? n : 1);
	if (!p) {
		fprintf(stderr, "coll_diff: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return p;
}

/* Compare the interposed result with the PMPI one; every rank compares its own buffer. */
static void same(const void *a, const void *b, size_t n, const char *what) {
	if (n && memcmp(a, b, n) != 0) {
		size_t i = 0;
		while (((const unsigned char *)a)[i] == ((const unsigned char *)b)[i])
			i++;
		fail("%s: result differs from PMPI at byte %zu of %zu", what, i, n);
	}
}

/* Two more with COLL_DIFF_EXPECT_MIN: both sides of where the plan starts taking calls, a
 * byte or two away from it (a test model's crossing may be a tie, decided by rounding). */
static size_t SIZES[9] = {0, 1, 7, 4095, 4096, 4097, (1 << 20) + 3};
static size_t NSIZES = 7;

static int roots(int size, int *out) {
	int n = 0, cand[3] = {0, size - 1, size / 2};
	for (int i = 0; i < 3; i++) {
		int dup = 0;
		for (int j = 0; j < n; j++)
			dup |= out[j] == cand[i];
		if (!dup)
			out[n++] = cand[i];
	}
	return g_quick ? 2 < n ? 2 : n : n;
}

/* --- the collectives, one function each: run MPI_* and PMPI_* on the same inputs -------- */
static void t_barrier(MPI_Comm comm) {
	path_begin();
	MPI_Barrier(comm);
	path_end(SHADDR_IP_BARRIER, "Barrier", 1, 1);
}

/* Bcast of @bytes, as MPI_BYTE, or with a non-contiguous vector type on odd ranks. */
static void t_bcast(MPI_Comm comm, int rank, size_t bytes, int root, int vec) {
	char what[96];
	snprintf(what, sizeof what, "Bcast %zu B root %d%s", bytes, root, vec ? " vector" : "");
	if (vec) {
		/* 16-int blocks, 4 ints of data each: receivers unpack, the root packs. */
		size_t n = bytes / 16, len = n * 16 * sizeof(int);
		int *a = xmalloc(len), *b = xmalloc(len);
		MPI_Datatype v;
		MPI_Type_vector((int)n, 4, 16, MPI_INT, &v);
		MPI_Type_commit(&v);
		if (rank == root)
			fill(a, len, bytes), memcpy(b, a, len);
		else
			memset(a, SENTINEL, len), memset(b, SENTINEL, len);
		path_begin();
		MPI_Bcast(a, 1, v, root, comm);
		path_end(SHADDR_IP_BCAST, what, 1, sized(n * 4 * sizeof(int)));
		PMPI_Bcast(b, 1, v, root, comm);
		same(a, b, len, what);
		MPI_Type_free(&v);
		free(a), free(b);
		return;
	}
	char *a = xmalloc(bytes), *b = xmalloc(bytes);
	if (rank == root)
		fill(a, bytes, bytes + 1), memcpy(b, a, bytes);
	else
		memset(a, SENTINEL, bytes), memset(b, SENTINEL, bytes);
	path_begin();
	MPI_Bcast(a, (int)bytes, MPI_BYTE, root, comm);
	path_end(SHADDR_IP_BCAST, what, 1, sized(bytes));
	PMPI_Bcast(b, (int)bytes, MPI_BYTE, root, comm);
	same(a, b, bytes, what);
	free(a), free(b);
}

/* Reductions: values small enough that every order of summation is exact, so the results
 * must be bitwise equal to PMPI's whatever the order. */
struct rtype {
	MPI_Datatype t;
	const char *name;
	size_t esize;
	int kind; /* 0 int, 1 float, 2 complex, 3 bool, 4 byte, 5 pair */
};

static void set_elem(struct rtype *rt, void *p, int rank, size_t i) {
	int v = (int)((mix(i * 31 + (size_t)rank) % 3) + 1); /* 1..3 */
	switch (rt->kind) {
	case 0:
		if (rt->esize == 1)
			*(int8_t *)p = (int8_t)v;
		else if (rt->esize == 2)
			*(int16_t *)p = (int16_t)v;
		else if (rt->esize == 4)
			*(int32_t *)p = v;
		else
			*(int64_t *)p = v;
		break;
	case 1:
		if (rt->esize == 4)
			*(float *)p = (float)v;
		else if (rt->esize == 8)
			*(double *)p = v;
		else
			*(long double *)p = v;
		break;
	case 2:
		if (rt->esize == 8)
			((float *)p)[0] = (float)v, ((float *)p)[1] = (float)(4 - v);
		else if (rt->esize == 16)
			((double *)p)[0] = v, ((double *)p)[1] = 4 - v;
		else
			((long double *)p)[0] = v, ((long double *)p)[1] = 4 - v;
		break;
	case 3:
		*(_Bool *)p = v & 1;
		break;
	case 4:
		*(unsigned char *)p = (unsigned char)mix(i + (size_t)rank * 7);
		break;
	case 5: /* value then int index; ties on purpose (v in 1..3), index = rank */
		if (rt->t == MPI_FLOAT_INT)
			*(float *)p = (float)v, ((int *)p)[1] = rank;
		else if (rt->t == MPI_DOUBLE_INT)
			*(double *)p = v, *(int *)((char *)p + 8) = rank;
		else if (rt->t == MPI_LONG_INT)
			*(long *)p = v, *(int *)((char *)p + 8) = rank;
		else if (rt->t == MPI_2INT)
			((int *)p)[0] = v, ((int *)p)[1] = rank;
		else if (rt->t == MPI_SHORT_INT)
			*(short *)p = (short)v, *(int *)((char *)p + 4) = rank;
		break;
	}
}

static int op_valid(MPI_Op op, int kind) {
	if (op == MPI_MINLOC || op == MPI_MAXLOC)
		return kind == 5;
	if (kind == 5)
		return 0;
	if (op == MPI_SUM || op == MPI_PROD)
		return kind <= 2;
	if (op == MPI_MIN || op == MPI_MAX)
		return kind <= 1;
	if (op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR)
		return kind == 0 || kind == 3;
	return kind == 0 || kind == 4; /* BAND BOR BXOR */
}

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *t) {
	(void)t;
	for (int i = 0; i < *len; i++)
		((int *)inout)[i] += ((int *)in)[i];
}

/* (interposed, reference) pair of a reduction into buffers of count elements. */
static void t_reduce(MPI_Comm comm, int rank, struct rtype *rt, MPI_Op op, const char *opname,
		     size_t count, int root, int in_place, int user_op) {
	char what[128];
	size_t bytes = count * rt->esize;
	char *in = xmalloc(bytes), *ra = xmalloc(bytes), *rb = xmalloc(bytes);
	int all = root < 0;
#ifdef MPICH_VERSION
	/* MPICH 4.0.2 (Debian, ch4:ucx) itself segfaults in MPI_Reduce with MPI_IN_PLACE at a root
	 * other than 0 from about 4 KiB on (reproduced without the interposer): not tested there. */
	if (!all && root != 0)
		in_place = 0;
#endif
	snprintf(what, sizeof what, "%s %s %s x%zu%s%s", all ? "Allreduce" : "Reduce", opname,
		 rt->name, count, in_place ? " in place" : "", root >= 0 && root ? " root>0" : "");
	memset(in, 0, bytes); /* padding of pair types defined */
	for (size_t i = 0; i < count; i++)
		set_elem(rt, in + i * rt->esize, rank, i);
	int here = all || rank == root;
	int ip = in_place && here;
	memset(ra, SENTINEL, bytes), memset(rb, SENTINEL, bytes);
	if (ip)
		memcpy(ra, in, bytes), memcpy(rb, in, bytes);
	if (g_trace)
		fprintf(stderr, "coll_diff rank %d [%s]: %s\n", g_rank, g_comm_name, what);
	path_begin();
	if (all)
		MPI_Allreduce(ip ? MPI_IN_PLACE : in, ra, (int)count, rt->t, op, comm);
	else
		MPI_Reduce(ip ? MPI_IN_PLACE : in, ra, (int)count, rt->t, op, root, comm);
	path_end(all ? SHADDR_IP_ALLREDUCE : SHADDR_IP_REDUCE, what, 1, sized(bytes) && !user_op);
	if (all)
		PMPI_Allreduce(ip ? MPI_IN_PLACE : in, rb, (int)count, rt->t, op, comm);
	else
		PMPI_Reduce(ip ? MPI_IN_PLACE : in, rb, (int)count, rt->t, op, root, comm);
	if (here) {
		/* Compare values, not padding that MPI need not write (the pair types' gap
		 * between value and index, long double's 6 bytes after its 80 bits). */
		if (rt->kind == 1 || rt->kind == 2) {
			/* Floating point by value: the order of a product may give -0 or +0. */
			size_t comp = rt->kind == 2 ? rt->esize / 2 : rt->esize;
			for (size_t i = 0; i < bytes / comp; i++) {
				const char *x = ra + i * comp, *y = rb + i * comp;
				int eq = comp == 4    ? *(const float *)x == *(const float *)y
					 : comp == 8 ? *(const double *)x == *(const double *)y
						     : *(const long double *)x == *(const long double *)y;
				if (!eq) {
					fail("%s: element %zu differs from PMPI", what, i / (rt->esize / comp));
					break;
				}
			}
		} else if (rt->kind == 5 && rt->t != MPI_2INT && rt->t != MPI_FLOAT_INT) {
			for (size_t i = 0; i < count; i++) {
				char *x = ra + i * rt->esize, *y = rb + i * rt->esize;
				size_t vsz = rt->t == MPI_SHORT_INT ? 2 : 8, ioff = vsz == 2 ? 4 : 8;
				if (memcmp(x, y, vsz) || memcmp(x + ioff, y + ioff, 4)) {
					fail("%s: element %zu differs from PMPI", what, i);
					break;
				}
			}
		} else {
			same(ra, rb, bytes, what);
		}
	}
	free(in), free(ra), free(rb);
}

static void t_gather(MPI_Comm comm, int rank, int size, size_t bytes, int root, int in_place) {
	char what[96];
	snprintf(what, sizeof what, "Gather %zu B root %d%s", bytes, root, in_place ? " in place" : "");
	size_t tot = bytes * (size_t)size;
	char *s = xmalloc(bytes), *ra = xmalloc(tot), *rb = xmalloc(tot);
	fill(s, bytes, (uint64_t)rank * 77 + bytes);
	memset(ra, SENTINEL, tot), memset(rb, SENTINEL, tot);
	int ip = in_place && rank == root;
	if (ip)
		memcpy(ra + (size_t)rank * bytes, s, bytes), memcpy(rb + (size_t)rank * bytes, s, bytes);
	path_begin();
	MPI_Gather(ip ? MPI_IN_PLACE : s, (int)bytes, MPI_BYTE, ra, (int)bytes, MPI_BYTE, root, comm);
	path_end(SHADDR_IP_GATHER, what, 0, sized(bytes));
	PMPI_Gather(ip ? MPI_IN_PLACE : s, (int)bytes, MPI_BYTE, rb, (int)bytes, MPI_BYTE, root, comm);
	if (rank == root)
		same(ra, rb, tot, what);
	free(s), free(ra), free(rb);
}

static void t_scatter(MPI_Comm comm, int rank, int size, size_t bytes, int root, int in_place) {
	char what[96];
	snprintf(what, sizeof what, "Scatter %zu B root %d%s", bytes, root, in_place ? " in place" : "");
	size_t tot = bytes * (size_t)size;
	char *s = xmalloc(tot), *ra = xmalloc(bytes), *rb = xmalloc(bytes);
	fill(s, tot, (uint64_t)root * 13 + bytes);
	memset(ra, SENTINEL, bytes), memset(rb, SENTINEL, bytes);
	int ip = in_place && rank == root;
	path_begin();
	MPI_Scatter(s, (int)bytes, MPI_BYTE, ip ? MPI_IN_PLACE : ra, (int)bytes, MPI_BYTE, root, comm);
	path_end(SHADDR_IP_SCATTER, what, 0, sized(bytes));
	PMPI_Scatter(s, (int)bytes, MPI_BYTE, ip ? MPI_IN_PLACE : rb, (int)bytes, MPI_BYTE, root,
		     comm);
	same(ra, rb, bytes, what);
	free(s), free(ra), free(rb);
}

static void t_allgather(MPI_Comm comm, int rank, int size, size_t bytes, int in_place) {
	char what[96];
	snprintf(what, sizeof what, "Allgather %zu B%s", bytes, in_place ? " in place" : "");
	size_t tot = bytes * (size_t)size;
	char *s = xmalloc(bytes), *ra = xmalloc(tot), *rb = xmalloc(tot);
	fill(s, bytes, (uint64_t)rank * 5 + bytes);
	memset(ra, SENTINEL, tot), memset(rb, SENTINEL, tot);
	if (in_place)
		memcpy(ra + (size_t)rank * bytes, s, bytes), memcpy(rb + (size_t)rank * bytes, s, bytes);
	path_begin();
	MPI_Allgather(in_place ? MPI_IN_PLACE : s, (int)bytes, MPI_BYTE, ra, (int)bytes, MPI_BYTE,
		      comm);
	path_end(SHADDR_IP_ALLGATHER, what, 1, sized(bytes));
	PMPI_Allgather(in_place ? MPI_IN_PLACE : s, (int)bytes, MPI_BYTE, rb, (int)bytes, MPI_BYTE,
		       comm);
	same(ra, rb, tot, what);
	free(s), free(ra), free(rb);
}

static void t_alltoall(MPI_Comm comm, int rank, int size, size_t bytes, int in_place) {
	char what[96];
	snprintf(what, sizeof what, "Alltoall %zu B%s", bytes, in_place ? " in place" : "");
	size_t tot = bytes * (size_t)size;
	char *s = xmalloc(tot), *ra = xmalloc(tot), *rb = xmalloc(tot);
	fill(s, tot, (uint64_t)rank * 3 + bytes);
	memset(ra, SENTINEL, tot), memset(rb, SENTINEL, tot);
	if (in_place)
		memcpy(ra, s, tot), memcpy(rb, s, tot);
	path_begin();
	MPI_Alltoall(in_place ? MPI_IN_PLACE : s, (int)bytes, MPI_BYTE, ra, (int)bytes, MPI_BYTE, comm);
	path_end(SHADDR_IP_ALLTOALL, what, 1, sized(bytes));
	PMPI_Alltoall(in_place ? MPI_IN_PLACE : s, (int)bytes, MPI_BYTE, rb, (int)bytes, MPI_BYTE,
		      comm);
	same(ra, rb, tot, what);
	free(s), free(ra), free(rb);
}

/* v-variants: rank r's block is (bytes + r * 3) bytes, at displacements with gaps of 5
 * (which must stay untouched: the sentinel). */
static void vlayout(int size, size_t bytes, int *counts, int *displs, size_t *tot) {
	size_t d = 0;
	for (int r = 0; r < size; r++) {
		counts[r] = (int)(bytes ? bytes + (size_t)r * 3 : 0);
		displs[r] = (int)d;
		d += (size_t)counts[r] + 5;
	}
	*tot = d;
}

static void t_gatherv(MPI_Comm comm, int rank, int size, size_t bytes, int root, int in_place) {
	char what[96];
	snprintf(what, sizeof what, "Gatherv %zu B root %d%s", bytes, root, in_place ? " in place" : "");
	int *cnt = xmalloc(sizeof(int) * size), *dsp = xmalloc(sizeof(int) * size);
	size_t tot;
	vlayout(size, bytes, cnt, dsp, &tot);
	char *s = xmalloc((size_t)cnt[rank]), *ra = xmalloc(tot), *rb = xmalloc(tot);
	fill(s, (size_t)cnt[rank], (uint64_t)rank * 11 + bytes);
	memset(ra, SENTINEL, tot), memset(rb, SENTINEL, tot);
	int ip = in_place && rank == root;
	if (ip)
		memcpy(ra + dsp[rank], s, cnt[rank]), memcpy(rb + dsp[rank], s, cnt[rank]);
	path_begin();
	MPI_Gatherv(ip ? MPI_IN_PLACE : s, cnt[rank], MPI_BYTE, ra, cnt, dsp, MPI_BYTE, root, comm);
	path_end(SHADDR_IP_GATHERV, what, 0, 1);
	PMPI_Gatherv(ip ? MPI_IN_PLACE : s, cnt[rank], MPI_BYTE, rb, cnt, dsp, MPI_BYTE, root, comm);
	if (rank == root)
		same(ra, rb, tot, what);
	free(s), free(ra), free(rb), free(cnt), free(dsp);
}

static void t_scatterv(MPI_Comm comm, int rank, int size, size_t bytes, int root, int in_place) {
	char what[96];
	snprintf(what, sizeof what, "Scatterv %zu B root %d%s", bytes, root,
		 in_place ? " in place" : "");
	int *cnt = xmalloc(sizeof(int) * size), *dsp = xmalloc(sizeof(int) * size);
	size_t tot;
	vlayout(size, bytes, cnt, dsp, &tot);
	char *s = xmalloc(tot), *ra = xmalloc((size_t)cnt[rank]), *rb = xmalloc((size_t)cnt[rank]);
	fill(s, tot, (uint64_t)root * 17 + bytes);
	memset(ra, SENTINEL, cnt[rank]), memset(rb, SENTINEL, cnt[rank]);
	int ip = in_place && rank == root;
	path_begin();
	MPI_Scatterv(s, cnt, dsp, MPI_BYTE, ip ? MPI_IN_PLACE : ra, cnt[rank], MPI_BYTE, root, comm);
	path_end(SHADDR_IP_SCATTERV, what, 0, 1);
	PMPI_Scatterv(s, cnt, dsp, MPI_BYTE, ip ? MPI_IN_PLACE : rb, cnt[rank], MPI_BYTE, root, comm);
	same(ra, rb, (size_t)cnt[rank], what);
	free(s), free(ra), free(rb), free(cnt), free(dsp);
}

static void t_allgatherv(MPI_Comm comm, int rank, int size, size_t bytes, int in_place) {
	char what[96];
	snprintf(what, sizeof what, "Allgatherv %zu B%s", bytes, in_place ? " in place" : "");
	int *cnt = xmalloc(sizeof(int) * size), *dsp = xmalloc(sizeof(int) * size);
	size_t tot;
	vlayout(size, bytes, cnt, dsp, &tot);
	char *s = xmalloc((size_t)cnt[rank]), *ra = xmalloc(tot), *rb = xmalloc(tot);
	fill(s, (size_t)cnt[rank], (uint64_t)rank * 19 + bytes);
	memset(ra, SENTINEL, tot), memset(rb, SENTINEL, tot);
	if (in_place)
		memcpy(ra + dsp[rank], s, cnt[rank]), memcpy(rb + dsp[rank], s, cnt[rank]);
	path_begin();
	MPI_Allgatherv(in_place ? MPI_IN_PLACE : s, cnt[rank], MPI_BYTE, ra, cnt, dsp, MPI_BYTE, comm);
	/* data, no gaps; the plan (and SHADDR_MIN_ALLGATHER) weighs one (average) block */
	const size_t data = tot - 5 * (size_t)size, block = data / size ? data / size : 1;
	path_end(SHADDR_IP_ALLGATHERV, what, 0, data > 0 && block >= g_min);
	PMPI_Allgatherv(in_place ? MPI_IN_PLACE : s, cnt[rank], MPI_BYTE, rb, cnt, dsp, MPI_BYTE,
			comm);
	same(ra, rb, tot, what);
	free(s), free(ra), free(rb), free(cnt), free(dsp);
}

static void t_alltoallv(MPI_Comm comm, int rank, int size, size_t bytes, int in_place) {
	char what[96];
	snprintf(what, sizeof what, "Alltoallv %zu B%s", bytes, in_place ? " in place" : "");
	/* Rank r sends (bytes + r + 2p) bytes to rank p; the layout has gaps of 3. */
	int *sc = xmalloc(sizeof(int) * size), *sd = xmalloc(sizeof(int) * size);
	int *rc = xmalloc(sizeof(int) * size), *rd = xmalloc(sizeof(int) * size);
	size_t st = 0, rt = 0;
	for (int p = 0; p < size; p++) {
		sc[p] = (int)(bytes ? bytes + (size_t)rank + 2 * (size_t)p : 0);
		rc[p] = (int)(bytes ? bytes + (size_t)p + 2 * (size_t)rank : 0);
		sd[p] = (int)st, rd[p] = (int)rt;
		st += (size_t)sc[p] + 3, rt += (size_t)rc[p] + 3;
	}
	if (in_place) /* MPI: the send layout is the receive layout (symmetric counts needed) */
		for (int p = 0; p < size; p++)
			rc[p] = sc[p] = (int)(bytes ? bytes + 1 : 0), rd[p] = sd[p] = (int)((size_t)p * (bytes + 4)),
			st = rt = (size_t)size * (bytes + 4);
	char *s = xmalloc(st), *ra = xmalloc(rt), *rb = xmalloc(rt);
	fill(s, st, (uint64_t)rank * 23 + bytes);
	memset(ra, SENTINEL, rt), memset(rb, SENTINEL, rt);
	if (in_place)
		memcpy(ra, s, rt), memcpy(rb, s, rt);
	path_begin();
	MPI_Alltoallv(in_place ? MPI_IN_PLACE : s, sc, sd, MPI_BYTE, ra, rc, rd, MPI_BYTE, comm);
	path_end(SHADDR_IP_ALLTOALLV, what, 0, 1);
	PMPI_Alltoallv(in_place ? MPI_IN_PLACE : s, sc, sd, MPI_BYTE, rb, rc, rd, MPI_BYTE, comm);
	same(ra, rb, rt, what);
	free(s), free(ra), free(rb), free(sc), free(sd), free(rc), free(rd);
}

/* Allgather and Alltoall with a non-contiguous receive type (resized: extent 2 ints, 1 int of
 * data) against MPI_INT on the send side. */
static void t_derived(MPI_Comm comm, int rank, int size, size_t n) {
	MPI_Datatype r0, rs;
	char what[96];
	MPI_Type_vector(1, 1, 1, MPI_INT, &r0);
	MPI_Type_create_resized(r0, 0, 2 * sizeof(int), &rs);
	MPI_Type_commit(&rs);
	size_t tot = n * (size_t)size;
	int *s = xmalloc(tot * sizeof(int)), *ra = xmalloc(2 * tot * sizeof(int)),
	    *rb = xmalloc(2 * tot * sizeof(int));
	fill(s, tot * sizeof(int), (uint64_t)rank + 99);
	snprintf(what, sizeof what, "Allgather %zu ints into a resized type", n);
	memset(ra, SENTINEL, 2 * tot * sizeof(int)), memset(rb, SENTINEL, 2 * tot * sizeof(int));
	path_begin();
	MPI_Allgather(s, (int)n, MPI_INT, ra, (int)n, rs, comm);
	path_end(SHADDR_IP_ALLGATHER, what, 1, sized(n * sizeof(int)));
	PMPI_Allgather(s, (int)n, MPI_INT, rb, (int)n, rs, comm);
	same(ra, rb, 2 * tot * sizeof(int), what);
	snprintf(what, sizeof what, "Alltoall %zu ints into a resized type", n);
	memset(ra, SENTINEL, 2 * tot * sizeof(int)), memset(rb, SENTINEL, 2 * tot * sizeof(int));
	path_begin();
	MPI_Alltoall(s, (int)n, MPI_INT, ra, (int)n, rs, comm);
	path_end(SHADDR_IP_ALLTOALL, what, 1, sized(n * sizeof(int)));
	PMPI_Alltoall(s, (int)n, MPI_INT, rb, (int)n, rs, comm);
	same(ra, rb, 2 * tot * sizeof(int), what);
	MPI_Type_free(&rs), MPI_Type_free(&r0);
	free(s), free(ra), free(rb);
}

static struct rtype RTYPES[] = {
	{MPI_INT, "int", sizeof(int), 0},
	{MPI_UNSIGNED, "unsigned", sizeof(unsigned), 0},
	{MPI_LONG, "long", sizeof(long), 0},
	{MPI_SHORT, "short", sizeof(short), 0},
	{MPI_UNSIGNED_CHAR, "uchar", 1, 0},
	{MPI_INT8_T, "int8", 1, 0},
	{MPI_UINT64_T, "uint64", 8, 0},
	{MPI_FLOAT, "float", sizeof(float), 1},
	{MPI_DOUBLE, "double", sizeof(double), 1},
	{MPI_LONG_DOUBLE, "long double", sizeof(long double), 1},
	{MPI_C_FLOAT_COMPLEX, "float complex", 8, 2},
	{MPI_C_DOUBLE_COMPLEX, "double complex", 16, 2},
	{MPI_C_BOOL, "bool", sizeof(_Bool), 3},
	{MPI_BYTE, "byte", 1, 4},
	{MPI_2INT, "2int", 8, 5},
	{MPI_FLOAT_INT, "float_int", 8, 5},
	{MPI_DOUBLE_INT, "double_int", 16, 5},
	{MPI_LONG_INT, "long_int", 16, 5},
	{MPI_SHORT_INT, "short_int", 8, 5},
	{MPI_C_LONG_DOUBLE_COMPLEX, "long double complex", 32, 2},
};

static void run_all(MPI_Comm comm, const char *name, int checked) {
	int rank, size, rl[3];
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	g_comm_name = name;
	g_comm_checked = checked;
	int nr = roots(size, rl);

	t_barrier(comm);
	for (size_t si = 0; si < NSIZES; si++) {
		size_t b = SIZES[si];
		if (g_quick && (b == 1 || b == 4095))
			continue;
		for (int ri = 0; ri < nr; ri++) {
			t_bcast(comm, rank, b, rl[ri], 0);
			for (int ip = 0; ip < 2; ip++) {
				t_gather(comm, rank, size, b, rl[ri], ip);
				t_scatter(comm, rank, size, b, rl[ri], ip);
				t_gatherv(comm, rank, size, b, rl[ri], ip);
				t_scatterv(comm, rank, size, b, rl[ri], ip);
			}
		}
		t_bcast(comm, rank, b, rl[nr - 1], 1);
		for (int ip = 0; ip < 2; ip++) {
			t_allgather(comm, rank, size, b, ip);
			t_alltoall(comm, rank, size, b, ip);
			t_allgatherv(comm, rank, size, b, ip);
			t_alltoallv(comm, rank, size, b, ip);
		}
		t_barrier(comm);
	}
	t_derived(comm, rank, size, 1000);

	/* Every op on every type MPI defines it for, at small and slot-crossing counts. */
	static const struct {
		MPI_Op op;
		const char *name;
	} OPS[] = {{MPI_SUM, "sum"},   {MPI_PROD, "prod"}, {MPI_MIN, "min"},
		   {MPI_MAX, "max"},   {MPI_LAND, "land"}, {MPI_LOR, "lor"},
		   {MPI_LXOR, "lxor"}, {MPI_BAND, "band"}, {MPI_BOR, "bor"},
		   {MPI_BXOR, "bxor"}, {MPI_MINLOC, "minloc"}, {MPI_MAXLOC, "maxloc"}};
	const size_t counts[] = {1, 7, 1000};
	for (size_t ti = 0; ti < sizeof RTYPES / sizeof RTYPES[0]; ti++)
		for (size_t oi = 0; oi < sizeof OPS / sizeof OPS[0]; oi++) {
			if (!op_valid(OPS[oi].op, RTYPES[ti].kind))
				continue;
			for (size_t ci = 0; ci < 3; ci++) {
				if (g_quick && ci == 0)
					continue;
				t_reduce(comm, rank, &RTYPES[ti], OPS[oi].op, OPS[oi].name,
					 counts[ci], -1, ci == 2, 0);
				t_reduce(comm, rank, &RTYPES[ti], OPS[oi].op, OPS[oi].name,
					 counts[ci], rl[nr - 1], ci == 1, 0);
			}
		}
	/* Large vectors, every root, in place and not, on the common types. */
	for (size_t si = 0; si < NSIZES; si++) {
		size_t cnt = SIZES[si] / sizeof(double);
		if (g_quick && SIZES[si] != 4096 && SIZES[si] != (1 << 20) + 3)
			continue;
		for (int ip = 0; ip < 2; ip++) {
			t_reduce(comm, rank, &RTYPES[8], MPI_SUM, "sum", cnt, -1, ip, 0);
			t_reduce(comm, rank, &RTYPES[0], MPI_MAX, "max", SIZES[si] / 4, -1, ip, 0);
			for (int ri = 0; ri < nr; ri++)
				t_reduce(comm, rank, &RTYPES[8], MPI_SUM, "sum", cnt, rl[ri], ip, 0);
		}
	}
	/* A user op (commutative or not, the interposer cannot know what it does): forwarded. */
	MPI_Op uop;
	MPI_Op_create(user_sum, 0, &uop);
	t_reduce(comm, rank, &RTYPES[0], uop, "user", 1000, -1, 0, 1);
	t_reduce(comm, rank, &RTYPES[0], uop, "user", 1000, 0, 0, 1);
	MPI_Op_free(&uop);
	t_barrier(comm);
}

int main(int argc, char **argv) {
	int thread_multiple = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			g_quick = 1;
		else if (!strcmp(argv[i], "--thread-multiple"))
			thread_multiple = 1;
	}
	if (thread_multiple) {
		int prov;
		MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
	} else {
		MPI_Init(&argc, &argv);
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_size);
	g_trace = getenv("COLL_DIFF_TRACE") != NULL; /* names each reduction before it runs */
	g_allow_fallbacks = getenv("SHADDR_INTERPOSE_FAIL_EVERY") != NULL;
	if (getenv("SHADDR_EXPECT"))
		g_expect = getenv("SHADDR_EXPECT");
	if (getenv("SHADDR_MIN"))
		g_min = strtoull(getenv("SHADDR_MIN"), NULL, 0);
	/* A tuning file's cost model that makes the selection take calls from this many bytes */
	if (getenv("COLL_DIFF_EXPECT_MIN")) {
		g_min = strtoull(getenv("COLL_DIFF_EXPECT_MIN"), NULL, 0);
		if (g_min > 2) {
			SIZES[NSIZES++] = g_min - 2;
			SIZES[NSIZES++] = g_min + 1;
		}
	}
	read_forward();
	*(void **)&g_stats_fn = dlsym(RTLD_DEFAULT, "shaddr_interpose_get_stats");

	run_all(MPI_COMM_WORLD, "world", 1);

	MPI_Comm dup;
	MPI_Comm_dup(MPI_COMM_WORLD, &dup);
	run_all(dup, "dup", 1);

	/* Split by parity in reversed rank order: nodes of it are not rank blocks. */
	MPI_Comm split;
	MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, -g_rank, &split);
	run_all(split, "split", 0);
	MPI_Comm_free(&split);

	/* Created, used, freed (the state goes with it), then a new one. */
	for (int k = 0; k < 3; k++) {
		MPI_Comm c;
		MPI_Comm_dup(dup, &c);
		char name[32];
		snprintf(name, sizeof name, "churn %d", k);
		g_comm_name = name;
		g_comm_checked = 0;
		t_bcast(c, g_rank, 65536, 0, 0);
		t_reduce(c, g_rank, &RTYPES[8], MPI_SUM, "sum", 8192, -1, 0, 0);
		MPI_Comm_free(&c);
	}
	MPI_Comm_free(&dup);

	struct shaddr_interpose_stats st;
	if (g_stats_fn && g_stats_fn(&st) == 0) {
		unsigned long acc = 0, fwd = 0;
		for (int c = 0; c < SHADDR_IP_COUNT; c++)
			acc += st.accelerated[c], fwd += st.forwarded[c];
		if (g_rank == 0)
			printf("coll_diff: interposer: %lu accelerated (%lu hierarchical bcasts), %lu "
			       "forwarded, libshaddr ran %lu collectives, %lu/%lu communicators freed\n",
			       acc, (unsigned long)st.hierarchical[SHADDR_IP_BCAST], fwd,
			       (unsigned long)st.lib_calls, (unsigned long)st.comms_freed,
			       (unsigned long)st.comms_created);
		unsigned long fbs = 0;
		for (int c = 0; c < SHADDR_IP_COUNT; c++)
			fbs += st.fallbacks[c];
		/* Summed over ranks: a rank alone on its (virtual) node makes no libshaddr calls. */
		unsigned long all_fbs = 0;
		PMPI_Allreduce(&fbs, &all_fbs, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
		if (g_allow_fallbacks && strcmp(g_expect, "off") != 0 && !all_fbs && g_rank == 0)
			fail("SHADDR_INTERPOSE_FAIL_EVERY is set but nothing fell back");
		/* SHADDR_EXPECT_MESH=1: the leaders' short Alltoall exchange took the leaders' 2D mesh. */
		unsigned long mesh = (unsigned long)st.mesh_alltoall, all_mesh = 0;
		PMPI_Allreduce(&mesh, &all_mesh, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
		if (getenv("SHADDR_EXPECT_MESH") && !all_mesh && g_rank == 0)
			fail("no Alltoall went through the leaders' 2D mesh");
		if (g_rank == 0 && all_mesh)
			printf("coll_diff: %lu leaders' Alltoall exchanges through the 2D mesh\n", all_mesh);
		/* SHADDR_EXPECT_HEAP: summed over ranks, as above. */
		unsigned long heap[2] = {(unsigned long)st.heap_transfers,
					 (unsigned long)st.heap_bytes},
			      all_heap[2] = {0, 0};
		PMPI_Allreduce(heap, all_heap, 2, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
		const char *want_heap = getenv("SHADDR_EXPECT_HEAP");
		if (want_heap && g_rank == 0) {
			if (strcmp(want_heap, "1") == 0 && !all_heap[0])
				fail("SHADDR_EXPECT_HEAP=1 but no transfer went through the heap layer");
			else if (strcmp(want_heap, "0") == 0 && all_heap[0])
				fail("SHADDR_EXPECT_HEAP=0 but %lu transfers went through the heap layer",
				     all_heap[0]);
			else if (strcmp(want_heap, "0") != 0 && strcmp(want_heap, "1") != 0)
				fail("SHADDR_EXPECT_HEAP=%s: want 0 or 1", want_heap);
		}
		if (g_rank == 0)
			printf("coll_diff: %lu transfers (%lu bytes) through the heap layer\n",
			       all_heap[0], all_heap[1]);
		if (g_rank == 0 && g_allow_fallbacks)
			printf("coll_diff: %lu calls fell back to PMPI_* on all ranks (injected failures)\n",
			       all_fbs);
		if (strcmp(g_expect, "accel") == 0 || strcmp(g_expect, "hier") == 0) {
			if (!st.lib_calls && strcmp(g_expect, "accel") == 0)
				fail("libshaddr ran no collective");
			if (st.comms_freed < 4)
				fail("%lu communicator states freed, want the split, the churn ones and "
				     "the dup", (unsigned long)st.comms_freed);
		}
	}
	int total = 0, checks = 0;
	PMPI_Allreduce(&g_errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	PMPI_Allreduce(&g_checks, &checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("coll_diff: %d ranks, SHADDR_EXPECT=%s: %d calls checked, %d error(s): %s\n",
		       g_size, g_expect, checks, total, total ? "FAILED" : "passed");
	MPI_Finalize();
	return total ? 1 : 0;
}
