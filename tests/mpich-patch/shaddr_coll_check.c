/* SPDX-License-Identifier: MIT */
/*
 * Differential check of the collectives the MPICH patch routes to libshaddr: Bcast (contiguous
 * and a strided datatype), Reduce and Allreduce (several types and ops, MPI_IN_PLACE),
 * Allgather and Alltoall (contiguous, strided, in place), Barrier, on MPI_COMM_WORLD and on a
 * split communicator, at sizes on both sides of every step of libshaddr's plan; then the same
 * arguments again and again, with datatypes that differ between ranks but have the same type
 * signature bytes. Every result is compared with what it must be; prints "No Errors" (MPICH
 * test suite convention) or the first errors, and exits non-zero on any error.
 *
 *   shaddr_coll_check [max_bytes] [iterations]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int errors;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			if (errors++ < 10) {                               \
				fprintf(stderr, "[%d] ", world_rank);      \
				fprintf(stderr, __VA_ARGS__);              \
				fputc('\n', stderr);                       \
			}                                                  \
		}                                                          \
	} while (0)

static int world_rank;

static unsigned char pattern(size_t i, int seed)
{
	return (unsigned char)((i * 131u + (unsigned)seed * 7u + (i >> 12)) & 0xff);
}

/* A bcast of @bytes as elements of @type on this rank (MPI lets the ranks' datatypes differ as
 * long as the bytes agree). */
static void bcast_as(MPI_Comm comm, size_t bytes, MPI_Datatype type, int root, int seed)
{
	int rank, type_size;
	unsigned char *buf = malloc(bytes + 1);

	MPI_Comm_rank(comm, &rank);
	MPI_Type_size(type, &type_size);
	for (size_t i = 0; i < bytes; i++)
		buf[i] = rank == root ? pattern(i, seed) : 0xee;
	MPI_Bcast(buf, (int)(bytes / (size_t)type_size), type, root, comm);
	for (size_t i = 0; i < bytes; i++)
		if (buf[i] != pattern(i, seed)) {
			CHECK(0, "bcast %zu B root %d as %d-byte elements: byte %zu is %u, expected %u",
			      bytes, root, type_size, i, buf[i], pattern(i, seed));
			break;
		}
	free(buf);
}

static void check_bcast(MPI_Comm comm, size_t bytes, int root, int seed)
{
	bcast_as(comm, bytes, MPI_BYTE, root, seed);
}

/* A strided datatype (every other int) on the root, plain ints elsewhere: the patch packs. */
static void check_bcast_vector(MPI_Comm comm, int count, int root, int seed)
{
	int rank;
	MPI_Datatype vec;
	int *buf = malloc(sizeof(int) * 2 * (size_t)count + sizeof(int));

	MPI_Comm_rank(comm, &rank);
	MPI_Type_vector(count, 1, 2, MPI_INT, &vec);
	MPI_Type_commit(&vec);
	for (int i = 0; i < 2 * count; i++)
		buf[i] = rank == root ? (i % 2 ? -1 : i / 2 * 3 + seed) : -2;
	if (rank == root)
		MPI_Bcast(buf, 1, vec, root, comm);
	else
		MPI_Bcast(buf, count, MPI_INT, root, comm);
	for (int i = 0; i < count; i++) {
		int got = rank == root ? buf[2 * i] : buf[i];
		if (got != i * 3 + seed) {
			CHECK(0, "bcast vector %d ints root %d: element %d is %d, expected %d", count,
			      root, i, got, i * 3 + seed);
			break;
		}
	}
	MPI_Type_free(&vec);
	free(buf);
}

static void check_allreduce_int(MPI_Comm comm, int count, int in_place, int seed)
{
	int rank, size;
	int *in = malloc(sizeof(int) * (size_t)count + 1), *out = malloc(sizeof(int) * (size_t)count + 1);

	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	for (int i = 0; i < count; i++) {
		in[i] = (i + seed) % 1000 + rank;
		out[i] = in_place ? in[i] : -7;
	}
	MPI_Allreduce(in_place ? MPI_IN_PLACE : in, out, count, MPI_INT, MPI_SUM, comm);
	for (int i = 0; i < count; i++) {
		int want = size * ((i + seed) % 1000) + size * (size - 1) / 2;
		if (out[i] != want) {
			CHECK(0, "allreduce sum %d ints%s: element %d is %d, expected %d", count,
			      in_place ? " (in place)" : "", i, out[i], want);
			break;
		}
	}
	free(in);
	free(out);
}

static void check_allreduce_double_max(MPI_Comm comm, int count, int seed)
{
	int rank, size;
	double *in = malloc(sizeof(double) * (size_t)count + 1);
	double *out = malloc(sizeof(double) * (size_t)count + 1);

	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	for (int i = 0; i < count; i++)
		in[i] = (double)((i * 7 + seed + rank * 13) % (size * 5 + 1)) + 0.5;
	MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_MAX, comm);
	for (int i = 0; i < count; i++) {
		double want = 0;
		for (int r = 0; r < size; r++) {
			double v = (double)((i * 7 + seed + r * 13) % (size * 5 + 1)) + 0.5;
			if (v > want)
				want = v;
		}
		if (out[i] != want) {
			CHECK(0, "allreduce max %d doubles: element %d is %g, expected %g", count, i,
			      out[i], want);
			break;
		}
	}
	free(in);
	free(out);
}

static void check_reduce(MPI_Comm comm, int count, int root, int in_place, int seed)
{
	int rank, size;
	int64_t *in = malloc(sizeof(int64_t) * (size_t)count + 1);
	int64_t *out = malloc(sizeof(int64_t) * (size_t)count + 1);

	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	for (int i = 0; i < count; i++) {
		in[i] = (int64_t)i * 3 + seed + rank * 1000003LL;
		out[i] = (rank == root && in_place) ? in[i] : -7;
	}
	if (rank == root && in_place)
		MPI_Reduce(MPI_IN_PLACE, out, count, MPI_INT64_T, MPI_SUM, root, comm);
	else
		MPI_Reduce(in, out, count, MPI_INT64_T, MPI_SUM, root, comm);
	if (rank == root)
		for (int i = 0; i < count; i++) {
			int64_t want = ((int64_t)i * 3 + seed) * size +
				       1000003LL * size * (size - 1) / 2;
			if (out[i] != want) {
				CHECK(0, "reduce sum %d int64 root %d%s: element %d is %lld, expected %lld",
				      count, root, in_place ? " (in place)" : "", i,
				      (long long)out[i], (long long)want);
				break;
			}
		}
	free(in);
	free(out);
}

static void check_minloc(MPI_Comm comm, int count)
{
	struct { double v; int i; } *in, *out;
	int rank, size;

	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	in = malloc(sizeof(*in) * (size_t)count + 1);
	out = malloc(sizeof(*out) * (size_t)count + 1);
	for (int k = 0; k < count; k++) {
		in[k].v = (double)((k + rank) % size);
		in[k].i = rank;
	}
	MPI_Allreduce(in, out, count, MPI_DOUBLE_INT, MPI_MINLOC, comm);
	for (int k = 0; k < count; k++) {
		int want = (size - k % size) % size; /* the rank whose value is 0 */
		if (out[k].v != 0.0 || out[k].i != want) {
			CHECK(0, "allreduce minloc %d: element %d is (%g,%d), expected (0,%d)", count,
			      k, out[k].v, out[k].i, want);
			break;
		}
	}
	free(in);
	free(out);
}

static int block_value(int owner, int dest, int i, int seed)
{
	return owner * 1000003 + dest * 7919 + i * 3 + seed;
}

/* Allgather of @count ints per rank; strided receive type or in place on odd seeds. */
static void check_allgather(MPI_Comm comm, int count, int seed)
{
	int rank, size, in_place = seed % 2;
	int *send, *recv;

	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	send = malloc(sizeof(int) * (size_t)count + 1);
	recv = malloc(sizeof(int) * (size_t)count * size + 1);
	for (int i = 0; i < count; i++)
		send[i] = block_value(rank, 0, i, seed);
	for (int i = 0; i < count * size; i++)
		recv[i] = -1;
	if (in_place) {
		memcpy(recv + (size_t)rank * count, send, sizeof(int) * (size_t)count);
		MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, count, MPI_INT, comm);
	} else {
		MPI_Allgather(send, count, MPI_INT, recv, count, MPI_INT, comm);
	}
	for (int r = 0; r < size; r++)
		for (int i = 0; i < count; i++)
			if (recv[(size_t)r * count + i] != block_value(r, 0, i, seed)) {
				CHECK(0, "allgather %d ints%s: block %d element %d is %d, expected %d",
				      count, in_place ? " (in place)" : "", r, i,
				      recv[(size_t)r * count + i], block_value(r, 0, i, seed));
				r = size;
				break;
			}
	free(send);
	free(recv);
}

/* Alltoall of @count ints per pair; a strided send type on even seeds. */
static void check_alltoall(MPI_Comm comm, int count, int seed)
{
	int rank, size, strided = seed % 2 == 0;
	int *send, *recv;
	MPI_Datatype vec = MPI_DATATYPE_NULL, vec_resized = MPI_DATATYPE_NULL;

	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	send = malloc(sizeof(int) * (size_t)count * size * 2 + 1);
	recv = malloc(sizeof(int) * (size_t)count * size + 1);
	for (int p = 0; p < size; p++)
		for (int i = 0; i < count; i++) {
			if (strided) {
				send[((size_t)p * count + i) * 2] = block_value(rank, p, i, seed);
				send[((size_t)p * count + i) * 2 + 1] = -3;
			} else {
				send[(size_t)p * count + i] = block_value(rank, p, i, seed);
			}
		}
	for (int i = 0; i < count * size; i++)
		recv[i] = -1;
	if (strided) {
		MPI_Type_vector(count, 1, 2, MPI_INT, &vec);
		MPI_Type_create_resized(vec, 0, (MPI_Aint)sizeof(int) * 2 * count, &vec_resized);
		MPI_Type_commit(&vec_resized);
		MPI_Alltoall(send, 1, vec_resized, recv, count, MPI_INT, comm);
		MPI_Type_free(&vec_resized);
		MPI_Type_free(&vec);
	} else {
		MPI_Alltoall(send, count, MPI_INT, recv, count, MPI_INT, comm);
	}
	for (int r = 0; r < size; r++)
		for (int i = 0; i < count; i++)
			if (recv[(size_t)r * count + i] != block_value(r, rank, i, seed)) {
				CHECK(0, "alltoall %d ints%s: block %d element %d is %d, expected %d",
				      count, strided ? " (strided send)" : "", r, i,
				      recv[(size_t)r * count + i], block_value(r, rank, i, seed));
				r = size;
				break;
			}
	free(send);
	free(recv);
}

/*
 * The path of a call (libshaddr or release_gather/MPIR) may depend only on what MPI makes equal
 * on every rank. Repeat arguments below and above the plan's crossovers while the root,
 * MPI_IN_PLACE and (for bcast) each rank's datatype change under the same signature bytes.
 */
static void check_repeated_arguments(MPI_Comm comm)
{
	static const size_t sizes[] = {8, 24, 4104, 8, 8, 65544, 24, 8};
	int rank, size;

	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	for (int it = 0; it < 24; it++) {
		size_t bytes = sizes[it % 8];
		int root = it % size;

		bcast_as(comm, bytes, rank % 2 ? MPI_INT : MPI_BYTE, root, it);
		bcast_as(comm, bytes, (rank + it) % 2 ? MPI_DOUBLE : MPI_BYTE, root, it + 1);
		check_reduce(comm, (int)(bytes / 8), root, it % 3 == 0, it);
		check_allreduce_int(comm, (int)(bytes / 4), it % 2, it);
		check_allgather(comm, (int)(bytes / 4), it);
		check_alltoall(comm, (int)(bytes / 4), it);
	}
}

static void run(MPI_Comm comm, size_t max_bytes, int iterations)
{
	static const size_t sizes[] = {1, 8, 1000, 4096, 16384, 65536, 262144, 1048576, 4194304,
				       16777216};
	int size;

	MPI_Comm_size(comm, &size);
	for (int it = 0; it < iterations; it++) {
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			size_t bytes = sizes[s];
			int count = (int)(bytes / 8 ? bytes / 8 : 1);
			int root = (int)((s + (size_t)it) % (size_t)size);

			if (bytes > max_bytes)
				break;
			check_bcast(comm, bytes, root, it + (int)s);
			check_bcast(comm, bytes + 3, 0, it);
			if (bytes <= 1048576)
				check_bcast_vector(comm, count, root, it);
			check_allreduce_int(comm, count, it % 2, it + (int)s);
			check_allreduce_double_max(comm, count, it);
			check_reduce(comm, count, root, 0, it);
			check_reduce(comm, count, size - 1 - root, 1, it);
			if (bytes <= 262144)
				check_minloc(comm, count);
			if (bytes * (size_t)size <= 16777216) {
				check_allgather(comm, (int)(bytes / 4 ? bytes / 4 : 1), it + (int)s);
				check_alltoall(comm, (int)(bytes / 4 ? bytes / 4 : 1), it + (int)s);
			}
			MPI_Barrier(comm);
		}
	}
	check_repeated_arguments(comm);
}

int main(int argc, char **argv)
{
	size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : 16777216;
	int iterations = argc > 2 ? atoi(argv[2]) : 7; /* past MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD */
	int total, rank;
	MPI_Comm half;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
	run(MPI_COMM_WORLD, max_bytes, iterations);

	/* A second communicator: odd and even ranks, reversed order. */
	MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, -world_rank, &half);
	run(half, max_bytes > 1048576 ? 1048576 : max_bytes, 2);
	MPI_Comm_free(&half);

	MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (rank == 0) {
		if (total == 0)
			printf(" No Errors\n");
		else
			printf(" Found %d errors\n", total);
		fflush(stdout);
	}
	MPI_Finalize();
	return total != 0;
}
