/* SPDX-License-Identifier: MIT */
/*
 * A library that links MPI, for a program that does not (indirect_main.c): shaddr-run must find
 * the MPI through the library (ldd), not only among the program's own DT_NEEDED entries.
 */
#include <mpi.h>
#include <stdlib.h>

/* MPI_Init, a 1 MiB + 3 byte Allreduce (MPI_SUM of ranks), MPI_Finalize. Returns 0 if right. */
int indirect_allreduce(int *argc, char ***argv, int *nranks)
{
	enum { COUNT = (1 << 20) + 3 };
	int rank, size, bad = 0;
	unsigned char *in = malloc(COUNT), *out = malloc(COUNT);

	if (!in || !out || MPI_Init(argc, argv) != MPI_SUCCESS)
		return 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int i = 0; i < COUNT; i++)
		in[i] = (unsigned char)(rank + i);
	MPI_Allreduce(in, out, COUNT, MPI_UNSIGNED_CHAR, MPI_SUM, MPI_COMM_WORLD);
	for (int i = 0; i < COUNT; i++) {
		unsigned char want = (unsigned char)(size * (size - 1) / 2 + size * i);

		bad |= out[i] != want;
	}
	*nranks = size;
	MPI_Finalize();
	free(in);
	free(out);
	return bad;
}
