/* SPDX-License-Identifier: MIT */
/*
 * MPI_Bcast from every root at sizes around the plan's first size down the topology levels
 * (16 KiB on heap+cma, 16 KiB + 1 on the module's backends, 256 KiB + 1 on cma alone) and
 * over several chunks, in bytes and in a derived
 * type (every other int of a vector), each rank's result checked against what the root holds
 * (and a derived type's gaps left alone); then MPI_Allgather and MPI_Allgatherv at block sizes
 * around the plan's first size across the levels (the slots' largest + 1), in place or not,
 * the Allgatherv with each rank's own displacements (block i at slot (i + rank) % size, a gap
 * of the rank's own), every block checked and the gaps left alone. Prints a digest of every
 * rank's received bytes: a run with SHADDR_TOPOLOGY=flat must print the same
 * (tests/vm/bcast-levels).
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
	int rank, size, bad = 0, call = 0, calls = 0;
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
		for (int root = 0; root < size; root++, call++, calls += 2) {
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
	static const size_t blocks[] = { 4096, 8192, 8193, 16384, 16385, 262147, (1u << 20) + 3 };
	for (size_t k = 0; k < sizeof(blocks) / sizeof(blocks[0]); k++) {
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
			if (v)
				MPI_Allgatherv(ip ? MPI_IN_PLACE : send, (int)n, MPI_BYTE, out, counts, displs,
					       MPI_BYTE, MPI_COMM_WORLD);
			else
				MPI_Allgather(ip ? MPI_IN_PLACE : send, (int)n, MPI_BYTE, out, (int)n,
					      MPI_BYTE, MPI_COMM_WORLD);
			for (int r = 0; r < size; r++)
				for (size_t i = 0; i < n; i++)
					bad += out[displs[r] + i] != pattern(i, r, call);
			for (size_t i = 0; v && i < slot * (size_t)size; i++)
				bad += i % slot >= n && out[i] != 0xee; /* the gaps */
			for (int r = 0; r < size; r++)
				h = mix(h, out + displs[r], n);
		}
		free(displs);
		free(counts);
		free(out);
		free(send);
	}
	int any = 0;
	MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	for (int r = 0; r < size; r++) {
		if (r == rank)
			printf("bcast_levels: rank %d: %d calls, %d bytes wrong, digest %016llx\n", rank,
			       calls, bad, (unsigned long long)h);
		fflush(stdout);
		MPI_Barrier(MPI_COMM_WORLD);
	}
	MPI_Finalize();
	return any ? 1 : 0;
}
