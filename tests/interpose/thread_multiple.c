/* SPDX-License-Identifier: MIT */
/*
 * MPI_Init_thread(MPI_THREAD_MULTIPLE) under the interposer: two threads per rank run
 * collectives at the same time, each on its own communicator, and check the results. With
 * MPI_THREAD_MULTIPLE provided, the interposer must forward every call to PMPI_* (libshaddr's
 * node communicators are not made for concurrent callers): its counters must say so.
 */
#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shaddr_interpose.h"

#define ITERS 200
#define N 20000

static int g_rank, g_size;

struct job {
	MPI_Comm comm;
	int id;
	int errors;
};

static void *worker(void *arg) {
	struct job *j = arg;
	int *buf = malloc(N * sizeof(int)), *sum = malloc(N * sizeof(int));
	for (int it = 0; it < ITERS; it++) {
		int root = it % g_size;
		for (int i = 0; i < N; i++)
			buf[i] = g_rank == root ? i * 3 + it + j->id : -1;
		MPI_Bcast(buf, N, MPI_INT, root, j->comm);
		for (int i = 0; i < N; i++)
			if (buf[i] != i * 3 + it + j->id) {
				j->errors++;
				break;
			}
		for (int i = 0; i < N; i++)
			buf[i] = g_rank + i;
		MPI_Allreduce(buf, sum, N, MPI_INT, MPI_SUM, j->comm);
		for (int i = 0; i < N; i++)
			if (sum[i] != g_size * (g_size - 1) / 2 + g_size * i) {
				j->errors++;
				break;
			}
		MPI_Barrier(j->comm);
	}
	free(buf);
	free(sum);
	return NULL;
}

int main(int argc, char **argv) {
	int provided, errors = 0;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_size);
	if (provided != MPI_THREAD_MULTIPLE) {
		if (g_rank == 0)
			printf("thread_multiple: MPI provides only level %d: nothing to test\n", provided);
		MPI_Finalize();
		return 77; /* skipped */
	}
	struct job jobs[2];
	pthread_t th[2];
	for (int k = 0; k < 2; k++) {
		MPI_Comm_dup(MPI_COMM_WORLD, &jobs[k].comm);
		jobs[k].id = k;
		jobs[k].errors = 0;
	}
	for (int k = 0; k < 2; k++)
		pthread_create(&th[k], NULL, worker, &jobs[k]);
	for (int k = 0; k < 2; k++) {
		pthread_join(th[k], NULL);
		errors += jobs[k].errors;
		MPI_Comm_free(&jobs[k].comm);
	}
	int (*get)(struct shaddr_interpose_stats *);
	*(void **)&get = dlsym(RTLD_DEFAULT, "shaddr_interpose_get_stats");
	if (!get) {
		fprintf(stderr, "thread_multiple: the interposer is not loaded\n");
		errors++;
	} else {
		struct shaddr_interpose_stats st;
		get(&st);
		unsigned long acc = 0, fwd = 0;
		for (int c = 0; c < SHADDR_IP_COUNT; c++)
			acc += st.accelerated[c] + st.fallbacks[c], fwd += st.forwarded[c];
		if (acc || st.comms_created || fwd != 2UL * 3 * ITERS) {
			fprintf(stderr, "thread_multiple: rank %d: %lu accelerated, %lu forwarded (want "
				"0 and %d)\n", g_rank, acc, fwd, 2 * 3 * ITERS);
			errors++;
		}
	}
	int total = 0;
	MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("thread_multiple: %d ranks x 2 threads: %s\n", g_size, total ? "FAILED" : "passed");
	MPI_Finalize();
	return total ? 1 : 0;
}
