/* SPDX-License-Identifier: MIT */
/*
 * Another process floods the ranks' heap sockets while communicators are set up: it reads the
 * listening sockets' names from /proc/net/unix (any user can) and keeps connecting to every
 * "shaddr-heap-" socket, as many connections as the backlog takes, again and again (as
 * another user when started as root). Every communicator must still share the ranks' heaps:
 * each one's 1 MiB Allreduce must read from the heap (the interposer's heap_transfers grow).
 *
 *   heap_flood [COMMUNICATORS]   (default 40)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "shaddr_interpose.h"

enum { kConns = 1500 };

/* The flooder: never returns. */
static void flood(void) {
	static int fds[kConns];
	int nfd = 0;
	if (geteuid() == 0 && setresgid(65534, 65534, 65534) == 0)
		(void)!setresuid(65534, 65534, 65534);
	for (;;) {
		FILE *f = fopen("/proc/net/unix", "r");
		char line[512];
		while (f && fgets(line, sizeof line, f)) {
			char *at = strstr(line, "@shaddr-heap-");
			if (!at)
				continue;
			at[strcspn(at, "\n ")] = 0;
			struct sockaddr_un sa;
			memset(&sa, 0, sizeof sa);
			sa.sun_family = AF_UNIX;
			const size_t len = strlen(at + 1);
			memcpy(sa.sun_path + 1, at + 1, len);
			const socklen_t salen =
			    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
			while (nfd < kConns) {
				int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
				if (s < 0)
					break;
				if (connect(s, (struct sockaddr *)&sa, salen) != 0) {
					close(s);
					break;
				}
				fds[nfd++] = s;
			}
		}
		if (f)
			fclose(f);
		/* Let go of the oldest half, so that fresh connections take their places. */
		for (int i = 0; i < nfd / 2; i++)
			close(fds[i]);
		memmove(fds, fds + nfd / 2, (size_t)(nfd - nfd / 2) * sizeof fds[0]);
		nfd -= nfd / 2;
		if (getppid() == 1)
			_exit(0);
	}
}

int main(int argc, char **argv) {
	/* The flooder is forked before MPI exists in this process; it dies with its parent. */
	pid_t flooder = fork();
	if (flooder == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		flood();
	}
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const int comms = argc > 1 ? atoi(argv[1]) : 40;
	int (*get)(struct shaddr_interpose_stats *);
	*(void **)&get = dlsym(RTLD_DEFAULT, "shaddr_interpose_get_stats");
	if (!get) {
		fprintf(stderr, "heap_flood: the interposer is not loaded\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	const int n = (1 << 20) / 8;
	double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
	for (int i = 0; i < n; i++)
		a[i] = i;
	int without_heap = 0, wrong = 0;
	/* The ranks in reverse order: not MPI_COMM_WORLD's group, whose set-up the interposer
	 * keeps; each communicator, freed before the next, is set up afresh and exchanges the
	 * heaps again. */
	for (int k = 0; k < comms; k++) {
		MPI_Comm c;
		MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &c);
		struct shaddr_interpose_stats before, after;
		get(&before);
		MPI_Allreduce(a, b, n, MPI_DOUBLE, MPI_SUM, c);
		get(&after);
		wrong += b[n - 1] != (double)(n - 1) * size;
		without_heap += after.heap_transfers == before.heap_transfers;
		MPI_Comm_free(&c);
	}
	kill(flooder, SIGKILL);
	int counts[2] = {without_heap, wrong}, all[2];
	MPI_Allreduce(counts, all, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("heap_flood: %d ranks, %d communicators set up under a connection flood: %d "
		       "rank-communicators without the heap, %d wrong results: %s\n",
		       size, comms, all[0], all[1], all[0] || all[1] ? "FAILED" : "passed");
	free(a);
	free(b);
	MPI_Finalize();
	return all[0] || all[1] ? 1 : 0;
}
