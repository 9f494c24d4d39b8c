/* SPDX-License-Identifier: MIT */
/*
 * MPI_Bcast from every root at sizes around the plan's first size down the topology levels
 * (16 KiB on heap+cma, 16 KiB + 1 on the module's backends, 256 KiB + 1 on cma alone) and
 * over several chunks, in bytes and in a derived
 * type (every other int of a vector), each rank's result checked against what the root holds
 * (and a derived type's gaps left alone). Prints a digest of every rank's received bytes: a
 * run with SHADDR_TOPOLOGY=flat must print the same (tests/vm/bcast-levels).
 *
 * Usage: bcast_levels
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(size_t i, int root, int call)
{
	return (unsigned char)(i * 131 + (size_t)root * 7 + (size_t)call);
}

/* A running digest of the bytes a rank received (order-sensitive). */
static uint64_t mix(uint64_t h, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull + (h >> 29);
	return h;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 16384, 16385, 262144, 262145, 262146, (1u << 20) + 3,
					(3u << 20) + 5 };
	int rank, size, bad = 0, call = 0;
	uint64_t h = 0xcbf29ce484222325ull;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		const size_t n = sizes[k];
		unsigned char *buf = malloc(n);
		int *ints = malloc(2 * (n / 4 + 1) * sizeof(int));
		const int count = (int)(n / 8) + 1; /* the vector's ints: n / 2 bytes and more */
		MPI_Datatype every_other;

		MPI_Type_vector(count, 1, 2, MPI_INT, &every_other);
		MPI_Type_commit(&every_other);
		for (int root = 0; root < size; root++, call++) {
			for (size_t i = 0; i < n; i++)
				buf[i] = rank == root ? pattern(i, root, call) : 0xee;
			MPI_Bcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
			for (size_t i = 0; i < n; i++)
				bad += buf[i] != pattern(i, root, call);
			h = mix(h, buf, n);
			for (int i = 0; i < 2 * count; i++)
				ints[i] = rank == root || i % 2 ? i * 3 + root + call : -1;
			MPI_Bcast(ints, 1, every_other, root, MPI_COMM_WORLD);
			for (int i = 0; i < 2 * count; i++)
				bad += ints[i] != i * 3 + root + call;
			h = mix(h, (const unsigned char *)ints, 2 * (size_t)count * sizeof(int));
		}
		MPI_Type_free(&every_other);
		free(ints);
		free(buf);
	}
	int any = 0;
	MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	for (int r = 0; r < size; r++) {
		if (r == rank)
			printf("bcast_levels: rank %d: %d calls, %d bytes wrong, digest %016llx\n", rank,
			       2 * call, bad, (unsigned long long)h);
		fflush(stdout);
		MPI_Barrier(MPI_COMM_WORLD);
	}
	MPI_Finalize();
	return any ? 1 : 0;
}
