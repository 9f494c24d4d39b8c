/* SPDX-License-Identifier: MIT */
/*
 * A PMPI tool layered on the interposer: run with LD_PRELOAD="pmpi_tool.so:libshaddr-<mpi>.so"
 * (the tool first), SHADDR_MIN=0. Each call must pass through the tool once and be run by
 * libshaddr once (the interposer's counters: not forwarded, not counted twice), with right
 * results. Exit 0, or 1 with the counts.
 */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "shaddr_interpose.h"

enum { N = 8192, CALLS = 5 };

int main(int argc, char **argv)
{
	int rank, size, bad = 0, i, k;
	double *a = malloc(sizeof(double) * N), *b = malloc(sizeof(double) * N);

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (k = 0; k < CALLS; k++) {
		for (i = 0; i < N; i++)
			a[i] = rank == 0 ? i + k : -1;
		MPI_Bcast(a, N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
		MPI_Allreduce(a, b, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		for (i = 0; i < N; i++)
			bad += a[i] != i + k || b[i] != (double)size * (i + k);
		MPI_Barrier(MPI_COMM_WORLD);
	}
	int (*tool)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "pmpi_tool_calls");
	int (*get)(struct shaddr_interpose_stats *) =
		(int (*)(struct shaddr_interpose_stats *))dlsym(RTLD_DEFAULT,
								 "shaddr_interpose_get_stats");
	struct shaddr_interpose_stats st = { 0 };

	if (!tool || !get || get(&st)) {
		printf("tool_layer rank %d: the tool or the interposer is not loaded\n", rank);
		bad++;
	} else if (tool() != 3 * CALLS || st.accelerated[SHADDR_IP_BCAST] != CALLS ||
		   st.accelerated[SHADDR_IP_ALLREDUCE] != CALLS ||
		   st.accelerated[SHADDR_IP_BARRIER] != CALLS) {
		printf("tool_layer rank %d: the tool saw %d calls (want %d); libshaddr ran Bcast %llu, "
		       "Allreduce %llu, Barrier %llu (want %d each; forwarded %llu, %llu, %llu)\n",
		       rank, tool(), 3 * CALLS,
		       (unsigned long long)st.accelerated[SHADDR_IP_BCAST],
		       (unsigned long long)st.accelerated[SHADDR_IP_ALLREDUCE],
		       (unsigned long long)st.accelerated[SHADDR_IP_BARRIER], CALLS,
		       (unsigned long long)st.forwarded[SHADDR_IP_BCAST],
		       (unsigned long long)st.forwarded[SHADDR_IP_ALLREDUCE],
		       (unsigned long long)st.forwarded[SHADDR_IP_BARRIER]);
		bad++;
	}
	if (bad)
		printf("tool_layer rank %d: %d wrong\n", rank, bad);
	else if (rank == 0)
		printf("tool_layer: ok, %d ranks\n", size);
	MPI_Finalize();
	free(a);
	free(b);
	return bad ? 1 : 0;
}
