/* SPDX-License-Identifier: MIT */
/*
 * What SHADDR_VERIFY=1 must catch (tests/interpose/test-verify runs it):
 *
 *   verify_check clean      Bcast, Allreduce (double sum: a tolerance case), Allgather and
 *                           Gather with right arguments: must pass, silently;
 *   verify_check inject     the same calls; run with SHADDR_VERIFY_INJECT=n, the n-th result
 *                           checked on the last rank is spoiled: the mismatch must be reported;
 *   verify_check sequence   rank 0 broadcasts 4 ints, the others expect 8 (an erroneous
 *                           program): the disagreement must be reported before the Bcast runs.
 *
 * Each call's result is also checked here against values computed locally, so "clean" fails if
 * the verification itself disturbs a result.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void fail(const char *what) {
	fprintf(stderr, "verify_check: rank %d: %s\n", rank, what);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

static void calls(void) {
	double b[64], s[100], sum[100];
	int mine[10], all[10 * 64], gathered[10 * 64];

	if (size > 64)
		fail("at most 64 ranks");
	for (int i = 0; i < 64; i++)
		b[i] = rank == 0 ? 0.5 * i : -1.0;
	MPI_Bcast(b, 64, MPI_DOUBLE, 0, MPI_COMM_WORLD); /* call 1 */
	for (int i = 0; i < 64; i++)
		if (b[i] != 0.5 * i)
			fail("Bcast: wrong value");

	for (int i = 0; i < 100; i++)
		s[i] = 0.1 * (rank + 1) + i; /* 0.1 is not exact: a sum in another order may round */
	MPI_Allreduce(s, sum, 100, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* call 2 */
	for (int i = 0; i < 100; i++) {
		const double want = 0.1 * size * (size + 1) / 2 + (double)i * size;
		if (sum[i] < want - 1e-9 || sum[i] > want + 1e-9)
			fail("Allreduce: wrong sum");
	}

	for (int i = 0; i < 10; i++)
		mine[i] = 100 * rank + i;
	MPI_Allgather(mine, 10, MPI_INT, all, 10, MPI_INT, MPI_COMM_WORLD); /* call 3 */
	MPI_Gather(mine, 10, MPI_INT, gathered, 10, MPI_INT, size - 1, MPI_COMM_WORLD); /* 4 */
	for (int r = 0; r < size; r++)
		for (int i = 0; i < 10; i++) {
			if (all[10 * r + i] != 100 * r + i)
				fail("Allgather: wrong value");
			if (rank == size - 1 && gathered[10 * r + i] != 100 * r + i)
				fail("Gather: wrong value");
		}
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const char *mode = argc > 1 ? argv[1] : "";
	if (!strcmp(mode, "clean") || !strcmp(mode, "inject")) {
		calls();
	} else if (!strcmp(mode, "sequence")) {
		int v[8] = {0};
		MPI_Bcast(v, rank == 0 ? 4 : 8, MPI_INT, 0, MPI_COMM_WORLD);
		fail("sequence: the mismatched Bcast returned");
	} else {
		if (rank == 0)
			fprintf(stderr, "usage: verify_check clean|inject|sequence\n");
		MPI_Finalize();
		return 2;
	}
	MPI_Finalize();
	if (rank == 0)
		printf("verify_check %s: %d ranks: done\n", mode, size);
	return 0;
}
