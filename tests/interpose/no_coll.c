/* SPDX-License-Identifier: MIT */
/*
 * A program that never calls a collective: point-to-point around a ring only. Under the
 * interposer it must run as without it, and the interposer must have created no state (its
 * MPI_Init/MPI_Finalize wrappers are all it went through).
 */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>

#include "shaddr_interpose.h"

int main(int argc, char **argv) {
	int rank, size, token = -1, errors = 0;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	/* The token goes round the ring; each rank adds its rank. */
	if (rank == 0) {
		token = 0;
		if (size > 1) {
			MPI_Send(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
			MPI_Recv(&token, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		}
		if (token != size * (size - 1) / 2) {
			fprintf(stderr, "no_coll: token %d, want %d\n", token, size * (size - 1) / 2);
			errors++;
		}
	} else {
		MPI_Recv(&token, 1, MPI_INT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		token += rank;
		MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD);
	}
	int (*get)(struct shaddr_interpose_stats *);
	*(void **)&get = dlsym(RTLD_DEFAULT, "shaddr_interpose_get_stats");
	if (!get) {
		fprintf(stderr, "no_coll: rank %d: the interposer is not loaded\n", rank);
		errors++;
	} else {
		struct shaddr_interpose_stats st;
		get(&st);
		unsigned long calls = 0;
		for (int c = 0; c < SHADDR_IP_COUNT; c++)
			calls += st.accelerated[c] + st.forwarded[c] + st.fallbacks[c];
		if (calls || st.comms_created || st.lib_calls) {
			fprintf(stderr, "no_coll: rank %d: the interposer saw %lu collectives, created %lu "
				"states\n", rank, calls, (unsigned long)st.comms_created);
			errors++;
		}
	}
	if (rank == 0)
		printf("no_coll: %d ranks: %s\n", size, errors ? "FAILED" : "passed");
	MPI_Finalize();
	return errors ? 1 : 0;
}
