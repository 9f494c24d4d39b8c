/* SPDX-License-Identifier: MIT */
/*
 * Every collective at the sizes where the plan's topology levels apply and around them, each
 * result checked, each rank's received data folded into digests that a run with
 * SHADDR_TOPOLOGY=flat, and for the exact data stock MPI, must print equal
 * (tests/vm/bcast-levels):
 *
 *  - MPI_Bcast from every root at sizes around the plan's first size down the topology levels
 *    (16 KiB on heap+cma, 16 KiB + 1 on the module's backends, 256 KiB + 1 on cma alone) and
 *    over several chunks, in bytes and in a derived type (every other int of a vector), each
 *    rank's result checked against what the root holds (and a derived type's gaps left alone);
 *  - MPI_Allgather and MPI_Allgatherv at block sizes around the plan's first size across the
 *    levels (the slots' largest + 1), in place or not, the Allgatherv with each rank's own
 *    displacements (block i at slot (i + rank) % size, a gap of the rank's own), every block
 *    checked and the gaps left alone;
 *  - MPI_Reduce from every root (in place at roots 1, 2, 5, 6, ...) and MPI_Allreduce (in
 *    place and not) with MPI_SUM on MPI_INT and MPI_MAX on MPI_DOUBLE, checked exactly, and
 *    MPI_SUM on MPI_DOUBLE of values whose sum depends on the order of addition (1e16-ish among
 *    small inexact ones), not checked; 2000 bytes a rank (the slots), 16 KiB and one element either
 *    side, 64 KiB, 256 KiB, 1 MiB and 3 MiB and an odd number of elements (uneven slices);
 *  - MPI_Gather(v) and MPI_Scatter(v) from every root and MPI_Alltoall(v), blocks of 1001 B,
 *    4 KiB, 16 KiB + 3 and 256 KiB + 1: plain, in place, the v form with counts that differ
 *    by rank and displacements of the root's (each receiver's) own with gaps, and ints into
 *    (out of) every other int of a vector, every block checked and the gaps left alone.
 *
 * Under shaddr-run, a buffer of the rank's heap share lies on the NUMA node of its CPU
 * (move_pages; heap_placement()).
 *
 * Rank 0 prints, one line a rank, the number of its calls checked (two collectives more close
 * the run: MPI_Allreduce, MPI_Gather; no other call), of wrong values, and two digests:
 * "digest" of the exact data it received (everything but the order-dependent sums) and
 * "doubles" of those sums; and where it is at each part's end. A wrong value is reported (the
 * first few a rank sees, on stderr) and makes the exit status 1.
 *
 * Usage: bcast_levels [--reduce-not-in-place]
 *
 * --reduce-not-in-place: MPI_Reduce not in place at any root (the same results, the same
 * digests): stock MPICH 4.0.2 (Debian 12's) and 4.1 crash in an in-place MPI_Reduce at a root
 * other than 0 from a few KiB (pmodels/mpich#6540).
 */
#define _GNU_SOURCE /* sched_getcpu, RTLD_DEFAULT */
#include <dlfcn.h>
#include <errno.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

static int rank, size, bad, call, calls, reduce_not_in_place;
static uint64_t hx = 0xcbf29ce484222325ull; /* the exact results */
static uint64_t hd = 0xcbf29ce484222325ull; /* the order-dependent sums */
static char what[160]; /* the call being checked, for the report of a wrong value */
static double t0;

static unsigned char pattern(size_t i, int root, int call)
{
	return (unsigned char)(i * 131 + (size_t)root * 7 + (size_t)call);
}

/* A running digest of the bytes a rank received (order-sensitive). */
static uint64_t mix(uint64_t h, const void *v, size_t n)
{
	const unsigned char *p = v;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull + (h >> 29);
	return h;
}

static void wrong(size_t i, long long got, long long want)
{
	if (bad++ < 8)
		fprintf(stderr, "bcast_levels: rank %d: %s: [%zu] is %lld, expected %lld\n", rank,
			what, i, got, want);
}

static void wrong_double(size_t i, double got, double want)
{
	if (bad++ < 8)
		fprintf(stderr, "bcast_levels: rank %d: %s: [%zu] is %a, expected %a\n", rank, what,
			i, got, want);
}

#define CHECK(i, got, want)                                                 \
	do {                                                                \
		if ((got) != (want))                                        \
			wrong((i), (long long)(got), (long long)(want));    \
	} while (0)

static void progress(const char *part)
{
	if (!rank) {
		printf("bcast_levels: %s done at %.1f s\n", part, MPI_Wtime() - t0);
		fflush(stdout);
	}
}

/* count ints at every other int, its extent 2 * count ints (so blocks of it follow each other) */
static MPI_Datatype every_other(int count)
{
	MPI_Datatype v, t;

	MPI_Type_vector(count, 1, 2, MPI_INT, &v);
	MPI_Type_create_resized(v, 0, (MPI_Aint)(2 * (size_t)count * sizeof(int)), &t);
	MPI_Type_free(&v);
	MPI_Type_commit(&t);
	return t;
}

static void bcasts(void)
{
	static const size_t sizes[] = { 16384, 16385, 262144, 262145, 262146, (1u << 20) + 3,
					(3u << 20) + 5 };

	for (size_t k = 0; k < NELEMS(sizes); k++) {
		const size_t n = sizes[k];
		unsigned char *buf = malloc(n);
		int *ints = malloc(2 * (n / 4 + 1) * sizeof(int));
		const int count = (int)(n / 8) + 1; /* the vector's ints: n / 2 bytes and more */
		MPI_Datatype every_other;

		MPI_Type_vector(count, 1, 2, MPI_INT, &every_other);
		MPI_Type_commit(&every_other);
		for (int root = 0; root < size; root++, call++, calls += 2) {
			for (size_t i = 0; i < n; i++)
				buf[i] = rank == root ? pattern(i, root, call) : 0xee;
			snprintf(what, sizeof(what), "MPI_Bcast of %zu bytes from %d", n, root);
			MPI_Bcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
			for (size_t i = 0; i < n; i++)
				CHECK(i, buf[i], pattern(i, root, call));
			hx = mix(hx, buf, n);
			for (int i = 0; i < 2 * count; i++)
				ints[i] = rank == root || i % 2 ? i * 3 + root + call : -1;
			snprintf(what, sizeof(what), "MPI_Bcast of a vector of %d ints from %d", count,
				 root);
			MPI_Bcast(ints, 1, every_other, root, MPI_COMM_WORLD);
			for (int i = 0; i < 2 * count; i++)
				CHECK(i, ints[i], i * 3 + root + call);
			hx = mix(hx, ints, 2 * (size_t)count * sizeof(int));
		}
		MPI_Type_free(&every_other);
		free(ints);
		free(buf);
	}
}

static void allgathers(void)
{
	static const size_t blocks[] = { 4096, 8192, 8193, 16384, 16385, 262147, (1u << 20) + 3 };

	for (size_t k = 0; k < NELEMS(blocks); k++) {
		const size_t n = blocks[k], gap = 64 * (size_t)(rank + 1), slot = n + gap;
		unsigned char *send = malloc(n), *out = malloc(slot * (size_t)size);
		int *counts = malloc(sizeof(int) * (size_t)size), *displs = malloc(sizeof(int) * (size_t)size);

		for (int kind = 0; kind < 4; kind++, call++, calls++) {
			/* 0: Allgather, 1: in place, 2: Allgatherv of own displacements, 3: in place */
			const int v = kind >= 2, ip = kind % 2;

			for (int i = 0; i < size; i++) {
				counts[i] = (int)n;
				displs[i] = (int)((size_t)(v ? (i + rank) % size : i) * (v ? slot : n));
			}
			memset(out, 0xee, slot * (size_t)size);
			for (size_t i = 0; i < n; i++)
				send[i] = pattern(i, rank, call);
			if (ip)
				memcpy(out + displs[rank], send, n);
			snprintf(what, sizeof(what), "MPI_Allgather%s of %zu bytes%s", v ? "v" : "", n,
				 ip ? " in place" : "");
			if (v)
				MPI_Allgatherv(ip ? MPI_IN_PLACE : send, (int)n, MPI_BYTE, out, counts, displs,
					       MPI_BYTE, MPI_COMM_WORLD);
			else
				MPI_Allgather(ip ? MPI_IN_PLACE : send, (int)n, MPI_BYTE, out, (int)n,
					      MPI_BYTE, MPI_COMM_WORLD);
			for (int r = 0; r < size; r++)
				for (size_t i = 0; i < n; i++)
					CHECK(displs[r] + i, out[displs[r] + i], pattern(i, r, call));
			for (size_t i = 0; v && i < slot * (size_t)size; i++)
				if (i % slot >= n) /* the gaps */
					CHECK(i, out[i], 0xee);
			for (int r = 0; r < size; r++)
				hx = mix(hx, out + displs[r], n);
		}
		free(displs);
		free(counts);
		free(out);
		free(send);
	}
}

/*
 * The reductions' operands. MPI_SUM on ints: rank r's element i is f(i) (r + 1) + 7919 r - call,
 * the sum f(i) s (s + 1) / 2 + 7919 s (s - 1) / 2 - s call for s ranks. MPI_MAX on doubles:
 * 4 f(i + call) + (i + r) % s / 4, the largest (s - 1) / 4 above 4 f(i + call), from a rank that
 * changes with i. MPI_SUM on doubles: a third of them +-1e16 to +-1.6e17, the others inexact
 * below 22000, so that the sum depends on the order of the additions.
 */
static int f12(size_t i)
{
	return (int)((i * 2654435761u >> 9) & 0xfff) - 2048;
}

static int int_operand(int r, size_t i)
{
	return f12(i) * (r + 1) + 7919 * r - call;
}

static double max_operand(int r, size_t i)
{
	return 4.0 * f12(i + (size_t)call) + 0.25 * (double)((i + (size_t)r) % (size_t)size);
}

static double sum_operand(int r, size_t i)
{
	uint32_t x = (uint32_t)i * 0x9e3779b1u ^ (uint32_t)r * 0x85ebca6bu ^
		     (uint32_t)call * 0xc2b2ae35u;

	x ^= x >> 15;
	x *= 0x2c1b3c6du;
	x ^= x >> 12;
	if (x % 3 == 0)
		return (x & 8 ? 1e16 : -1e16) * (double)(1 + (x >> 28));
	return (double)(x >> 8 & 0xffff) / 3.0 + 0.1 * r;
}

enum { INT_SUM, DOUBLE_MAX, DOUBLE_SUM };

/* One MPI_Reduce (root >= 0) or MPI_Allreduce (root < 0) of count elements of op. */
static void reduce(int op, size_t count, int root, int in_place)
{
	static const char *const name[] = { "MPI_SUM of ints", "MPI_MAX of doubles",
					    "MPI_SUM of doubles" };
	const size_t esize = op == INT_SUM ? sizeof(int) : sizeof(double);
	const int gets = root < 0 || rank == root, ip = in_place && gets;
	void *send = malloc(count * esize), *out = malloc(count * esize);
	void *in = ip ? out : send;

	for (size_t i = 0; i < count; i++)
		if (op == INT_SUM)
			((int *)in)[i] = int_operand(rank, i);
		else if (op == DOUBLE_MAX)
			((double *)in)[i] = max_operand(rank, i);
		else
			((double *)in)[i] = sum_operand(rank, i);
	if (!ip)
		memset(out, 0xee, count * esize);
	snprintf(what, sizeof(what), "MPI_%s %s of %zu%s from %d", root < 0 ? "Allreduce" : "Reduce",
		 name[op], count, in_place ? " in place" : "", root);
	if (root < 0)
		MPI_Allreduce(ip ? MPI_IN_PLACE : send, out, (int)count,
			      op == INT_SUM ? MPI_INT : MPI_DOUBLE, op == DOUBLE_MAX ? MPI_MAX : MPI_SUM,
			      MPI_COMM_WORLD);
	else
		MPI_Reduce(ip ? MPI_IN_PLACE : send, out, (int)count,
			   op == INT_SUM ? MPI_INT : MPI_DOUBLE, op == DOUBLE_MAX ? MPI_MAX : MPI_SUM,
			   root, MPI_COMM_WORLD);
	if (gets && op == INT_SUM) {
		const int *o = out, s = size;

		for (size_t i = 0; i < count; i++)
			CHECK(i, o[i], f12(i) * s * (s + 1) / 2 + 7919 * s * (s - 1) / 2 - s * call);
		hx = mix(hx, out, count * esize);
	} else if (gets && op == DOUBLE_MAX) {
		const double *o = out;

		for (size_t i = 0; i < count; i++) {
			const double want = 4.0 * f12(i + (size_t)call) + 0.25 * (size - 1);

			if (o[i] != want)
				wrong_double(i, o[i], want);
		}
		hx = mix(hx, out, count * esize);
	} else if (gets) {
		hd = mix(hd, out, count * esize);
	}
	call++;
	calls++;
	free(out);
	free(send);
}

static void reductions(void)
{
	/* bytes a rank: 2000 (the slots), 16 KiB and an element either side, 64 KiB, 256 KiB,
	 * 1 MiB and 3 MiB and an odd number of elements */
	static const size_t ints[] = { 500, 4095, 4096, 4097, 16384, 65539, 262149, 786439 };
	static const size_t doubles[] = { 250, 2047, 2048, 2049, 8192, 32771, 131077, 393219 };

	for (size_t k = 0; k < NELEMS(ints); k++) {
		for (int op = INT_SUM; op <= DOUBLE_SUM; op++) {
			const size_t count = op == INT_SUM ? ints[k] : doubles[k];

			/* in place at roots 1, 2, 5, 6, ...: a group's first and second rank on
			 * guests of 2 ranks a NUMA node */
			for (int root = 0; root < size; root++)
				reduce(op, count, root, (root + root / 2) % 2 && !reduce_not_in_place);
			reduce(op, count, -1, 0);
			reduce(op, count, -1, 1);
		}
	}
}

/* Gather(v), Scatter(v), Alltoall(v): block b (a rank's, or from s to d) in call c. */
static unsigned char block_byte(size_t i, int b, int c)
{
	return pattern(i, b * 37 + 1, c);
}

static int block_int(size_t j, int b, int c)
{
	return (int)j * 3 + b * 1000003 + c;
}

/* The bytes of out outside the blocks [displs[r], displs[r] + counts[r]) left alone (0xee). */
static void check_gaps(const unsigned char *out, size_t len, const int *counts, const int *displs,
		       int nblocks)
{
	unsigned char *in = calloc(len, 1);

	for (int r = 0; r < nblocks; r++)
		memset(in + displs[r], 1, (size_t)counts[r]);
	for (size_t i = 0; i < len; i++)
		if (!in[i])
			CHECK(i, out[i], 0xee);
	free(in);
}

/*
 * From every root: 0 MPI_Gather, 1 in place at the root, 2 MPI_Gatherv of n - 3 r bytes from
 * rank r at the root's own displacements (block r at slot (r + root) % size, gaps between), 3
 * n / 4 ints from each rank into every other int of the root's buffer.
 */
static void gathers(size_t n)
{
	const size_t slot = n + 64, m = n / 4;
	unsigned char *send = malloc(n), *out = malloc(slot * (size_t)size);
	int *isend = malloc(m * sizeof(int)), *iout = malloc(2 * m * (size_t)size * sizeof(int));
	int *counts = malloc(sizeof(int) * (size_t)size), *displs = malloc(sizeof(int) * (size_t)size);
	MPI_Datatype vec = every_other((int)m);

	for (int root = 0; root < size; root++) {
		for (int kind = 0; kind < 4; kind++, call++, calls++) {
			const int me = rank == root;

			if (kind == 3) {
				for (size_t j = 0; j < m; j++)
					isend[j] = block_int(j, rank, call);
				for (size_t j = 0; me && j < 2 * m * (size_t)size; j++)
					iout[j] = -1;
				snprintf(what, sizeof(what), "MPI_Gather of %zu ints into a vector at %d",
					 m, root);
				MPI_Gather(isend, (int)m, MPI_INT, iout, 1, vec, root, MPI_COMM_WORLD);
				if (!me)
					continue;
				for (int r = 0; r < size; r++)
					for (size_t j = r * 2 * m; j < (r + 1) * 2 * m; j++)
						CHECK(j, iout[j], j % 2 ? -1 : block_int(j / 2 - r * m, r, call));
				hx = mix(hx, iout, 2 * m * (size_t)size * sizeof(int));
				continue;
			}
			for (int r = 0; r < size; r++) {
				counts[r] = (int)(kind == 2 ? n - 3 * (size_t)r : n);
				displs[r] = (int)(kind == 2 ? (size_t)((r + root) % size) * slot : (size_t)r * n);
			}
			for (size_t i = 0; i < (size_t)counts[rank]; i++)
				send[i] = block_byte(i, rank, call);
			if (me) {
				memset(out, 0xee, slot * (size_t)size);
				if (kind == 1)
					memcpy(out + displs[rank], send, n);
			}
			snprintf(what, sizeof(what), "MPI_Gather%s of %zu bytes%s at %d",
				 kind == 2 ? "v" : "", n, kind == 1 ? " in place" : "", root);
			if (kind == 2)
				MPI_Gatherv(send, counts[rank], MPI_BYTE, out, counts, displs, MPI_BYTE, root,
					    MPI_COMM_WORLD);
			else
				MPI_Gather(kind == 1 && me ? MPI_IN_PLACE : send, (int)n, MPI_BYTE, out,
					   (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
			if (!me)
				continue;
			for (int r = 0; r < size; r++) {
				for (size_t i = 0; i < (size_t)counts[r]; i++)
					CHECK(displs[r] + i, out[displs[r] + i], block_byte(i, r, call));
				hx = mix(hx, out + displs[r], (size_t)counts[r]);
			}
			check_gaps(out, slot * (size_t)size, counts, displs, size);
		}
	}
	MPI_Type_free(&vec);
	free(displs);
	free(counts);
	free(iout);
	free(isend);
	free(out);
	free(send);
}

/*
 * From every root: 0 MPI_Scatter, 1 in place at the root, 2 MPI_Scatterv of n - 3 r bytes to
 * rank r from the root's own displacements (block r at slot (r + root) % size), 3 every other
 * int of the root's buffer into every other int of each rank's (n / 4 of them).
 */
static void scatters(size_t n)
{
	const size_t slot = n + 64, m = n / 4;
	unsigned char *send = malloc(slot * (size_t)size), *out = malloc(slot);
	int *isend = malloc(2 * m * (size_t)size * sizeof(int)), *iout = malloc(2 * m * sizeof(int));
	int *counts = malloc(sizeof(int) * (size_t)size), *displs = malloc(sizeof(int) * (size_t)size);
	MPI_Datatype vec = every_other((int)m);

	for (int root = 0; root < size; root++) {
		for (int kind = 0; kind < 4; kind++, call++, calls++) {
			const int me = rank == root;

			if (kind == 3) {
				for (int r = 0; me && r < size; r++)
					for (size_t j = r * 2 * m; j < (r + 1) * 2 * m; j++)
						isend[j] = j % 2 ? -7 : block_int(j / 2 - r * m, r * 64 + root, call);
				for (size_t j = 0; j < 2 * m; j++)
					iout[j] = -1;
				snprintf(what, sizeof(what), "MPI_Scatter of vectors of %zu ints from %d",
					 m, root);
				MPI_Scatter(isend, 1, vec, iout, 1, vec, root, MPI_COMM_WORLD);
				for (size_t j = 0; j < 2 * m; j++)
					CHECK(j, iout[j], j % 2 ? -1 : block_int(j / 2, rank * 64 + root, call));
				hx = mix(hx, iout, 2 * m * sizeof(int));
				continue;
			}
			for (int r = 0; r < size; r++) {
				counts[r] = (int)(kind == 2 ? n - 3 * (size_t)r : n);
				displs[r] = (int)(kind == 2 ? (size_t)((r + root) % size) * slot : (size_t)r * n);
			}
			if (me) {
				memset(send, 0x5a, slot * (size_t)size);
				for (int r = 0; r < size; r++)
					for (size_t i = 0; i < (size_t)counts[r]; i++)
						send[displs[r] + i] = block_byte(i, r * 64 + root, call);
			}
			memset(out, 0xee, slot);
			snprintf(what, sizeof(what), "MPI_Scatter%s of %zu bytes%s from %d",
				 kind == 2 ? "v" : "", n, kind == 1 ? " in place" : "", root);
			if (kind == 2)
				MPI_Scatterv(send, counts, displs, MPI_BYTE, out, counts[rank], MPI_BYTE, root,
					     MPI_COMM_WORLD);
			else
				MPI_Scatter(send, (int)n, MPI_BYTE, kind == 1 && me ? MPI_IN_PLACE : out,
					    (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
			if (kind == 1 && me)
				continue; /* nothing received */
			for (size_t i = 0; i < slot; i++)
				CHECK(i, out[i],
				      i < (size_t)counts[rank] ? block_byte(i, rank * 64 + root, call) : 0xee);
			hx = mix(hx, out, (size_t)counts[rank]);
		}
	}
	MPI_Type_free(&vec);
	free(displs);
	free(counts);
	free(iout);
	free(isend);
	free(out);
	free(send);
}

/*
 * 0 MPI_Alltoall, 1 in place, 2 MPI_Alltoallv of n - (3 s + d) % 7 bytes from s to d, each
 * rank's own displacements on both sides (d's block from s at slot (d - s - 1) % size, gaps
 * between), 3 n / 4 ints to each rank into every other int of its buffer.
 */
static void alltoalls(size_t n)
{
	const size_t slot = n + 64, m = n / 4, len = slot * (size_t)size;
	unsigned char *send = malloc(len), *out = malloc(len);
	int *isend = malloc(m * (size_t)size * sizeof(int)), *iout = malloc(2 * m * (size_t)size * sizeof(int));
	int *scounts = malloc(sizeof(int) * (size_t)size), *sdispls = malloc(sizeof(int) * (size_t)size);
	int *rcounts = malloc(sizeof(int) * (size_t)size), *rdispls = malloc(sizeof(int) * (size_t)size);
	MPI_Datatype vec = every_other((int)m);

	for (int kind = 0; kind < 4; kind++, call++, calls++) {
		if (kind == 3) {
			for (int d = 0; d < size; d++)
				for (size_t j = 0; j < m; j++)
					isend[d * m + j] = block_int(j, rank * 64 + d, call);
			for (size_t j = 0; j < 2 * m * (size_t)size; j++)
				iout[j] = -1;
			snprintf(what, sizeof(what), "MPI_Alltoall of %zu ints into vectors", m);
			MPI_Alltoall(isend, (int)m, MPI_INT, iout, 1, vec, MPI_COMM_WORLD);
			for (int s = 0; s < size; s++)
				for (size_t j = s * 2 * m; j < (s + 1) * 2 * m; j++)
					CHECK(j, iout[j], j % 2 ? -1 : block_int(j / 2 - s * m, s * 64 + rank, call));
			hx = mix(hx, iout, 2 * m * (size_t)size * sizeof(int));
			continue;
		}
		for (int r = 0; r < size; r++) {
			const int v = kind == 2;

			scounts[r] = (int)(v ? n - (size_t)((3 * rank + r) % 7) : n);
			rcounts[r] = (int)(v ? n - (size_t)((3 * r + rank) % 7) : n);
			sdispls[r] = (int)(v ? (size_t)((r + rank) % size) * slot : (size_t)r * n);
			rdispls[r] = (int)(v ? (size_t)((rank - r - 1 + 2 * size) % size) * slot : (size_t)r * n);
		}
		memset(send, 0x5a, len);
		memset(out, 0xee, len);
		for (int d = 0; d < size; d++)
			for (size_t i = 0; i < (size_t)scounts[d]; i++)
				(kind == 1 ? out : send)[sdispls[d] + i] = block_byte(i, rank * 64 + d, call);
		snprintf(what, sizeof(what), "MPI_Alltoall%s of %zu bytes%s", kind == 2 ? "v" : "", n,
			 kind == 1 ? " in place" : "");
		if (kind == 2)
			MPI_Alltoallv(send, scounts, sdispls, MPI_BYTE, out, rcounts, rdispls, MPI_BYTE,
				      MPI_COMM_WORLD);
		else
			MPI_Alltoall(kind == 1 ? MPI_IN_PLACE : send, (int)n, MPI_BYTE, out, (int)n,
				     MPI_BYTE, MPI_COMM_WORLD);
		for (int s = 0; s < size; s++) {
			for (size_t i = 0; i < (size_t)rcounts[s]; i++)
				CHECK(rdispls[s] + i, out[rdispls[s] + i], block_byte(i, s * 64 + rank, call));
			hx = mix(hx, out + rdispls[s], (size_t)rcounts[s]);
		}
		check_gaps(out, len, rcounts, rdispls, size);
	}
	MPI_Type_free(&vec);
	free(rdispls);
	free(rcounts);
	free(sdispls);
	free(scounts);
	free(iout);
	free(isend);
	free(out);
	free(send);
}

/* The NUMA node of @cpu (sysfs: its nodeN entry), or -1. */
static int node_of_cpu(int cpu)
{
	char path[96];

	for (int node = 0; node < 1024; node++) {
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/node%d", cpu, node);
		if (!access(path, F_OK))
			return node;
	}
	return -1;
}

/* Whether [p, p + 1) lies in a mapping of the shared heap's memfd ("shaddr-heap"). */
static int in_heap_share(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int found = 0;

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo && (uintptr_t)p < hi) {
			found = strstr(line, "shaddr-heap") != NULL;
			break;
		}
	}
	if (f)
		fclose(f);
	return found;
}

/*
 * Under shaddr-run (the shared heap loaded): a 4 MiB buffer this rank mallocs and writes lies
 * in its heap share, and every page of it is on the NUMA node of the CPU the rank is bound to,
 * as move_pages says (the heap's shares are placed by their owner's first touch,
 * docs/topology.md). A page elsewhere counts as a wrong value. No MPI call: the count of
 * calls stays.
 */
static void heap_placement(void)
{
	const size_t n = 4u << 20, page = (size_t)sysconf(_SC_PAGESIZE), pages = n / page;
	const int cpu = sched_getcpu(), node = node_of_cpu(cpu);
	char *buf = malloc(n);
	void **addr = malloc(pages * sizeof(void *));
	int *status = malloc(pages * sizeof(int));
	size_t here = 0;

	if (!dlsym(RTLD_DEFAULT, "shaddr_heap_api_v1") || !buf || !addr || !status)
		goto out;
	memset(buf, rank + 1, n);
	snprintf(what, sizeof(what), "heap placement (cpu %d, node %d)", cpu, node);
	CHECK(0, in_heap_share(buf), 1);
	for (size_t i = 0; i < pages; i++)
		addr[i] = buf + i * page, status[i] = -1;
	if (syscall(SYS_move_pages, 0, (unsigned long)pages, addr, NULL, status, 0)) {
		CHECK(0, -errno, 0);
		goto out;
	}
	for (size_t i = 0; i < pages; i++) {
		CHECK(i, status[i], node);
		here += status[i] == node;
	}
	fprintf(stderr, "bcast_levels: heap of rank %d: a buffer of %zu B: %zu of %zu pages on node "
		"%d (cpu %d)\n", rank, n, here, pages, node, cpu);
out:
	free(status);
	free(addr);
	free(buf);
}

int main(int argc, char **argv)
{
	static const size_t blocks[] = { 1001, 4096, 16387, 262145 };

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	reduce_not_in_place = argc == 2 && !strcmp(argv[1], "--reduce-not-in-place");
	if (argc > 1 + reduce_not_in_place) {
		if (!rank)
			fprintf(stderr, "usage: bcast_levels [--reduce-not-in-place]\n");
		MPI_Finalize();
		return 2;
	}
	t0 = MPI_Wtime();
	bcasts();
	progress("MPI_Bcast");
	allgathers();
	progress("MPI_Allgather(v)");
	reductions();
	progress("MPI_Reduce, MPI_Allreduce");
	for (size_t k = 0; k < NELEMS(blocks); k++)
		gathers(blocks[k]);
	progress("MPI_Gather(v)");
	for (size_t k = 0; k < NELEMS(blocks); k++)
		scatters(blocks[k]);
	progress("MPI_Scatter(v)");
	for (size_t k = 0; k < NELEMS(blocks); k++)
		alltoalls(blocks[k]);
	progress("MPI_Alltoall(v)");
	heap_placement();

	/* two more collectives, so that all of them may be counted (no MPI_Barrier) */
	int any = 0;
	char line[160], *lines = malloc(sizeof(line) * (size_t)size);

	MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	snprintf(line, sizeof(line),
		 "bcast_levels: rank %d: %d calls, %d values wrong, digest %016llx, doubles %016llx\n",
		 rank, calls, bad, (unsigned long long)hx, (unsigned long long)hd);
	MPI_Gather(line, sizeof(line), MPI_CHAR, lines, sizeof(line), MPI_CHAR, 0, MPI_COMM_WORLD);
	for (int r = 0; !rank && r < size; r++)
		fputs(lines + sizeof(line) * (size_t)r, stdout);
	fflush(stdout);
	free(lines);
	MPI_Finalize();
	return any ? 1 : 0;
}
