/* SPDX-License-Identifier: MIT */
/*
 * Warm 1 MiB MPI_Bcasts from rank 0, nothing else between MPI_Init and MPI_Finalize, so that the
 * call tracer (trace_hook.cc) records one call's path: check-bcast-path traces the third. Each
 * call carries its own bytes and every rank checks them, so a path that ran but moved nothing
 * fails too. The buffer is malloc'd, as a program not written for shaddr has it (under
 * shaddr-run's defaults it is in the rank's shared heap).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { BYTES = 1 << 20, CALLS = 5 };

int main(int argc, char **argv) {
	int rank, errors = 0;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	unsigned char *buf = malloc(BYTES);
	if (!buf) {
		fprintf(stderr, "bcast_warm: rank %d: no memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	for (int call = 0; call < CALLS; call++) {
		for (int i = 0; i < BYTES; i++)
			buf[i] = rank == 0 ? (unsigned char)(i * 7 + call) : 0;
		MPI_Bcast(buf, BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
		for (int i = 0; i < BYTES; i++) {
			if (buf[i] != (unsigned char)(i * 7 + call)) {
				fprintf(stderr, "bcast_warm: rank %d, call %d: byte %d is %u, want %u\n", rank,
					call, i, buf[i], (unsigned char)(i * 7 + call));
				errors++;
				break;
			}
		}
	}
	free(buf);
	MPI_Finalize();
	if (rank == 0 && !errors)
		printf("bcast_warm: %d calls of %d bytes: passed\n", CALLS, BYTES);
	return errors ? 1 : 0;
}
