/* SPDX-License-Identifier: MIT */
/*
 * A rank that cannot allocate its packed copy. Rank 1 receives a Bcast and an Allgather into a
 * strided (non-contiguous) type, which the single-copy path moves through a packed copy on that
 * rank; the shim tests/mpich-patch/fail_malloc_shim.c (preloaded) makes the first allocation of
 * exactly that copy's size fail, once, on rank 1 only. The other ranks use contiguous types.
 * The calls must end on every rank with the right data: the rank without its copy goes the
 * MPI's own way, and so must its peers, rather than wait for it in libshaddr (the MPI's own
 * algorithm may allocate the same size again: that allocation succeeds).
 * Prints "No Errors" (MPICH test suite convention) and exits 0, or names the first error.
 *
 *   LD_PRELOAD=fail_malloc_shim.so nomem_pack
 */
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ELEMS 262147 /* ints: a packed size (1 MiB + 12 B) that nothing else allocates */

static int rank, errors;

static int value(long i, int seed) { return (int)(i * 2654435761u) ^ seed; }

static void fail(const char *what, int rc)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	MPI_Error_string(rc, msg, &len);
	fprintf(stderr, "[%d] %s: %s\n", rank, what, msg);
	errors++;
}

int main(int argc, char **argv)
{
	int size, rc;
	void (*fail_malloc)(size_t) = (void (*)(size_t))dlsym(RTLD_DEFAULT,
							      "shaddr_test_fail_malloc");
	MPI_Datatype strided, strided_block;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (!fail_malloc) {
		fprintf(stderr, "nomem_pack: fail_malloc_shim.so is not preloaded\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Type_vector(ELEMS, 1, 2, MPI_INT, &strided);
	MPI_Type_commit(&strided);
	/* Allgather: each rank's block of ELEMS ints, rank 1 receiving them strided */
	MPI_Type_vector(ELEMS, 1, 2, MPI_INT, &strided_block);
	MPI_Type_create_resized(strided_block, 0, (MPI_Aint)(2l * ELEMS * sizeof(int)),
				&strided_block);
	MPI_Type_commit(&strided_block);

	const long span = rank == 1 ? 2 : 1;
	int *buf = malloc(span * ELEMS * sizeof(int));
	int *mine = malloc(ELEMS * sizeof(int));
	int *all = malloc(span * ELEMS * size * sizeof(int));

	if (!buf || !mine || !all) {
		fprintf(stderr, "[%d] cannot allocate the test's buffers\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (long i = 0; i < span * ELEMS; i++)
		buf[i] = rank == 0 ? value(i, 1) : -1;
	for (long i = 0; i < ELEMS; i++)
		mine[i] = value(rank * ELEMS + i, 2);
	memset(all, 0xff, span * ELEMS * size * sizeof(int));
	if (rank == 1) {
		fail_malloc(ELEMS * sizeof(int));
		fail_malloc((size_t)size * ELEMS * sizeof(int));
	}

	rc = rank == 1 ? MPI_Bcast(buf, 1, strided, 0, MPI_COMM_WORLD)
		       : MPI_Bcast(buf, ELEMS, MPI_INT, 0, MPI_COMM_WORLD);
	if (rc != MPI_SUCCESS)
		fail("MPI_Bcast", rc);
	for (long i = 0; i < ELEMS && rc == MPI_SUCCESS; i++) {
		int got = buf[span * i];

		if (got != value(i, 1)) {
			fprintf(stderr, "[%d] Bcast: element %ld is %d, expected %d\n", rank, i,
				got, value(i, 1));
			errors++;
			break;
		}
	}

	rc = rank == 1 ? MPI_Allgather(mine, ELEMS, MPI_INT, all, 1, strided_block,
				       MPI_COMM_WORLD)
		       : MPI_Allgather(mine, ELEMS, MPI_INT, all, ELEMS, MPI_INT, MPI_COMM_WORLD);
	if (rc != MPI_SUCCESS)
		fail("MPI_Allgather", rc);
	for (long i = 0; i < (long)ELEMS * size && rc == MPI_SUCCESS; i++) {
		int got = all[span * i];

		if (got != value(i, 2)) {
			fprintf(stderr, "[%d] Allgather: element %ld is %d, expected %d\n", rank,
				i, got, value(i, 2));
			errors++;
			break;
		}
	}

	MPI_Type_free(&strided);
	MPI_Type_free(&strided_block);
	free(buf);
	free(mine);
	free(all);
	int total = 0;
	MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0 && total == 0)
		printf("No Errors\n");
	MPI_Finalize();
	return total != 0;
}
