/* SPDX-License-Identifier: MIT */
/*
 * mh_fail: a rank dies in the middle of a collective (tests/multihost).
 *
 * Every rank runs Allreduces and Bcasts of SIZE bytes on MPI_COMM_WORLD in a loop. On world
 * rank VICTIM a thread waits until the loop has run WARM calls and the main thread has just
 * entered the next one, then kills the process with SIGKILL: no MPI_Abort, no clean-up, as a
 * crash or the OOM killer would. The surviving ranks are inside that collective (on the
 * victim's node: in libshaddr's node phase; on the others: waiting for the leaders' exchange).
 * The job must end with an error, within the bound the test sets, and leave no process.
 *
 * Usage: mh_fail VICTIM [SIZE [WARM]]   (default SIZE 1 MiB, WARM 20); without the kill the
 * loop ends after 100000 calls (the test's bound ends it long before).
 */
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int g_calls, g_inside;
static int g_warm = 20;

static void *killer(void *arg) {
	(void)arg;
	while (atomic_load(&g_calls) < g_warm || !atomic_load(&g_inside))
		usleep(100);
	fprintf(stderr, "mh_fail: killing myself (pid %d) inside call %d\n", (int)getpid(),
		atomic_load(&g_calls) + 1);
	fflush(stderr);
	raise(SIGKILL);
	return NULL;
}

int main(int argc, char **argv) {
	int rank, victim;
	size_t bytes = 1u << 20;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (argc < 2) {
		if (rank == 0)
			fprintf(stderr, "usage: mh_fail VICTIM [SIZE [WARM]]\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	victim = atoi(argv[1]);
	if (argc > 2)
		bytes = strtoull(argv[2], NULL, 0);
	if (argc > 3)
		g_warm = atoi(argv[3]);
	char *a = malloc(bytes), *b = malloc(bytes);
	memset(a, rank, bytes);
	pthread_t t;
	if (rank == victim)
		pthread_create(&t, NULL, killer, NULL);
	for (int k = 0; k < 100000; k++) {
		atomic_store(&g_inside, 1);
		if (k % 2)
			MPI_Bcast(a, (int)bytes, MPI_BYTE, k % 3, MPI_COMM_WORLD);
		else
			MPI_Allreduce(a, b, (int)(bytes / sizeof(int)), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		atomic_store(&g_inside, 0);
		atomic_fetch_add(&g_calls, 1);
	}
	if (rank == 0)
		printf("mh_fail: the loop ended: nobody died\n");
	MPI_Finalize();
	return 0;
}
