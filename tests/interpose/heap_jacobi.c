/* SPDX-License-Identifier: MIT */
/*
 * A program written for plain MPI, not for shaddr or MPI_Alloc_mem: Jacobi iterations for the
 * 1D Poisson problem -u'' = f on N points, every array malloc'd as any C program does. Each
 * iteration a rank updates its slice, MPI_Allgather assembles the whole iterate, and the
 * residual r = f h^2 - A u is summed from the ranks' column contributions with MPI_Allreduce
 * over the whole vector; the right-hand side comes from rank 0 by MPI_Bcast and the final
 * iterate goes back to rank 0 with MPI_Gather. At the end every rank recomputes the same
 * iterations serially and compares (the Allreduce adds a boundary element's contributions in
 * another order than the serial loop: a relative tolerance of 1e-12).
 *
 * Under shaddr-run with libshaddr-heap preloaded, the arrays (768 KiB; a rank's slice 96 KiB
 * at 8 ranks, more at fewer) are in the ranks' heaps. With SHADDR_EXPECT_HEAP=1 (a test's
 * wish, not the program's) it also fails unless the interposer's counters
 * (shaddr_interpose_get_stats, looked up with dlsym) show transfers through the heap layer.
 *
 * Usage: heap_jacobi [ITERATIONS]
 */
#include <dlfcn.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shaddr_interpose.h"

#define N (3 * 32768) /* divisible by 1, 2, 3, 4, 6 and 8 ranks */

static double *xmalloc(size_t count) {
	double *p = malloc(count * sizeof(double));
	if (!p) {
		perror("heap_jacobi: malloc");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return p;
}

static double rhs(size_t i) {
	return 1.0 + (double)(i % 17) / 16.0 - (i % 3 == 0 ? 0.5 : 0.0);
}

/* One Jacobi step on points [lo, hi) of u into out[0, hi - lo); u is zero outside [0, N). */
static void jacobi(const double *f, const double *u, double *out, size_t lo, size_t hi) {
	for (size_t i = lo; i < hi; i++) {
		const double left = i ? u[i - 1] : 0.0, right = i + 1 < N ? u[i + 1] : 0.0;
		out[i - lo] = 0.5 * (f[i] + left + right);
	}
}

/* Columns [lo, hi) of A = tridiag(-1, 2, -1) times u, subtracted from r (all N rows). */
static void residual_columns(const double *u, double *r, size_t lo, size_t hi) {
	for (size_t j = lo; j < hi; j++) {
		r[j] -= 2.0 * u[j];
		if (j)
			r[j - 1] += u[j];
		if (j + 1 < N)
			r[j + 1] += u[j];
	}
}

static int compare(const char *what, const double *got, const double *want, size_t n) {
	double scale = 0.0;
	for (size_t i = 0; i < n; i++)
		scale = fmax(scale, fabs(want[i]));
	for (size_t i = 0; i < n; i++)
		if (fabs(got[i] - want[i]) > 1e-12 * scale) {
			fprintf(stderr, "heap_jacobi: %s[%zu] = %.17g, serial %.17g\n", what, i, got[i],
				want[i]);
			return 1;
		}
	return 0;
}

int main(int argc, char **argv) {
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 30, errors = 0;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (N % size) {
		if (!rank)
			fprintf(stderr, "heap_jacobi: %d ranks do not divide %d points\n", size, N);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	const size_t slice = N / size, lo = rank * slice, hi = lo + slice;
	double *f = xmalloc(N), *u = xmalloc(N), *r = xmalloc(N), *rsum = xmalloc(N);
	double *mine = xmalloc(slice), *all = rank == 0 ? xmalloc(N) : NULL;

	if (rank == 0)
		for (size_t i = 0; i < N; i++)
			f[i] = rhs(i);
	else
		memset(f, 0xff, N * sizeof(double)); /* NaNs until the Bcast */
	MPI_Bcast(f, N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	memset(u, 0, N * sizeof(double));
	double norm = 0.0;
	for (int it = 0; it < iters; it++) {
		jacobi(f, u, mine, lo, hi);
		MPI_Allgather(mine, (int)slice, MPI_DOUBLE, u, (int)slice, MPI_DOUBLE, MPI_COMM_WORLD);
		/* r = f (rank 0 only, so it is counted once) - A u, by column blocks. */
		if (rank == 0)
			memcpy(r, f, N * sizeof(double));
		else
			memset(r, 0, N * sizeof(double));
		residual_columns(u, r, lo, hi);
		MPI_Allreduce(r, rsum, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		norm = 0.0;
		for (size_t i = 0; i < N; i++)
			norm += rsum[i] * rsum[i];
	}
	MPI_Gather(u + lo, (int)slice, MPI_DOUBLE, all, (int)slice, MPI_DOUBLE, 0, MPI_COMM_WORLD);

	/* The same iterations, serially. */
	double *sf = xmalloc(N), *su = xmalloc(N), *snew = xmalloc(N), *sr = xmalloc(N);
	for (size_t i = 0; i < N; i++)
		sf[i] = rhs(i);
	memset(su, 0, N * sizeof(double));
	for (int it = 0; it < iters; it++) {
		jacobi(sf, su, snew, 0, N);
		memcpy(su, snew, N * sizeof(double));
	}
	memcpy(sr, sf, N * sizeof(double));
	residual_columns(su, sr, 0, N);
	double snorm = 0.0;
	for (size_t i = 0; i < N; i++)
		snorm += sr[i] * sr[i];

	errors += compare("f", f, sf, N);
	errors += compare("u", u, su, N);
	if (iters)
		errors += compare("r", rsum, sr, N);
	if (rank == 0)
		errors += compare("gathered u", all, su, N);
	if (iters && fabs(norm - snorm) > 1e-10 * snorm) {
		fprintf(stderr, "heap_jacobi: rank %d: |r|^2 %.17g, serial %.17g\n", rank, norm, snorm);
		errors++;
	}

	/* The test's wish: the heap layer served transfers (summed over ranks). */
	int (*get)(struct shaddr_interpose_stats *);
	*(void **)&get = dlsym(RTLD_DEFAULT, "shaddr_interpose_get_stats");
	struct shaddr_interpose_stats st;
	unsigned long heap = 0, all_heap = 0;
	if (get && get(&st) == 0)
		heap = (unsigned long)st.heap_transfers;
	MPI_Allreduce(&heap, &all_heap, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
	const char *want = getenv("SHADDR_EXPECT_HEAP");
	if (rank == 0 && want && (strcmp(want, "1") == 0) != (all_heap > 0)) {
		fprintf(stderr, "heap_jacobi: SHADDR_EXPECT_HEAP=%s but %lu transfers through the heap "
				"layer%s\n", want, all_heap, get ? "" : " (no interposer)");
		errors++;
	}
	int total = 0;
	MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("heap_jacobi: %d ranks, %d points, %d iterations, |r| %.6g; %lu transfers "
		       "through the heap layer; %d error(s): %s\n", size, N, iters, sqrt(norm),
		       all_heap, total, total ? "FAILED" : "passed");
	free(f), free(u), free(r), free(rsum), free(mine), free(all);
	free(sf), free(su), free(snew), free(sr);
	MPI_Finalize();
	return total ? 1 : 0;
}
