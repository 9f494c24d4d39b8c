/* SPDX-License-Identifier: MIT */
/*
 * MPI's progress rule inside libshaddr's waits: a rank blocked in a collective keeps the MPI's
 * other operations moving. Rank 0 enters a collective at once; every other rank first does a
 * passive-target epoch on rank 0's window (MPI_Win_lock, MPI_Put, MPI_Win_flush,
 * MPI_Win_unlock) and only then joins. Where the MPI needs the target to progress one-sided
 * operations (MPICH's active messages on a window of plain memory), the origin waits for rank
 * 0's MPI while rank 0 waits in libshaddr for the origin: without progress in libshaddr's
 * waits, a hang, which alarm() turns into a failure.
 *
 * Every collective kind the interposer sends to libshaddr, each checked (the counters must
 * show the call accelerated, the window the data put). Run under shaddr-run with
 * SHADDR_MIN=0.
 */
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "shaddr_interpose.h"

enum { kBig = 1 << 20, kWinInts = 1024 };

static int rank, size, errors;
static int *win_mem;
static MPI_Win win;
static char *sbuf, *rbuf;
static int (*get_stats)(struct shaddr_interpose_stats *);

static void on_alarm(int sig) {
	(void)sig;
	static const char msg[] = "progress_rma: timed out: a rank waiting in a collective did not "
				  "progress the MPI's one-sided operations\n";
	ssize_t n = write(2, msg, sizeof msg - 1);
	(void)n;
	_exit(2);
}

static void sleep_ms(int ms) {
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* The origin's epoch: rank r puts its tag into rank 0's window at slot r. */
static void epoch(int tag) {
	int v = tag;
	MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
	MPI_Put(&v, 1, MPI_INT, 0, rank, 1, MPI_INT, win);
	MPI_Win_flush(0, win);
	MPI_Win_unlock(0, win);
}

static void collective(int which, size_t bytes) {
	const int n = (int)bytes;
	switch (which) {
	case SHADDR_IP_BARRIER:
		MPI_Barrier(MPI_COMM_WORLD);
		break;
	case SHADDR_IP_BCAST:
		MPI_Bcast(rbuf, n, MPI_BYTE, 0, MPI_COMM_WORLD);
		break;
	case SHADDR_IP_REDUCE:
		MPI_Reduce(sbuf, rbuf, n / 8, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		break;
	case SHADDR_IP_ALLREDUCE:
		MPI_Allreduce(sbuf, rbuf, n / 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		break;
	case SHADDR_IP_GATHER:
		MPI_Gather(sbuf, n / size, MPI_BYTE, rbuf, n / size, MPI_BYTE, 0, MPI_COMM_WORLD);
		break;
	case SHADDR_IP_SCATTER:
		MPI_Scatter(sbuf, n / size, MPI_BYTE, rbuf, n / size, MPI_BYTE, 0, MPI_COMM_WORLD);
		break;
	case SHADDR_IP_ALLGATHER:
		MPI_Allgather(sbuf, n / size, MPI_BYTE, rbuf, n / size, MPI_BYTE, MPI_COMM_WORLD);
		break;
	case SHADDR_IP_ALLTOALL:
		MPI_Alltoall(sbuf, n / size / size, MPI_BYTE, rbuf, n / size / size, MPI_BYTE,
			     MPI_COMM_WORLD);
		break;
	}
}

/* Is @call (lower case) in the comma-separated SHADDR_INTERPOSE_FORWARD? */
static int forwarded_by_setting(const char *call) {
	const char *list = getenv("SHADDR_INTERPOSE_FORWARD");
	const size_t n = strlen(call);
	for (const char *p = list; p && *p;) {
		const char *end = strchr(p, ',');
		const size_t len = end ? (size_t)(end - p) : strlen(p);
		if ((len == n && !strncasecmp(p, call, n)) || (len == 3 && !strncasecmp(p, "all", 3)))
			return 1;
		p = end ? end + 1 : p + len;
	}
	return 0;
}

static int counting = 1;
static int stats_none(struct shaddr_interpose_stats *st) {
	memset(st, 0, sizeof *st);
	counting = 0;
	return 0;
}

static const char *name(int which) {
	static const char *const names[SHADDR_IP_COUNT] = {
		"Barrier", "Bcast", "Reduce", "Allreduce", "Gather", "Gatherv",
		"Scatter", "Scatterv", "Allgather", "Allgatherv", "Alltoall", "Alltoallv"};
	return names[which];
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const char *t = getenv("PROGRESS_RMA_TIMEOUT");
	signal(SIGALRM, on_alarm);
	/* PROGRESS_RMA_NO_STATS=1: no interposer to ask (the patched MPICH runs libshaddr
	 * itself); only the hang and the data are checked. */
	const char *no_stats = getenv("PROGRESS_RMA_NO_STATS");
	*(void **)&get_stats = dlsym(RTLD_DEFAULT, "shaddr_interpose_get_stats");
	if (no_stats && atoi(no_stats))
		get_stats = stats_none;
	if (!get_stats) {
		fprintf(stderr, "progress_rma: rank %d: the interposer is not loaded\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	/* Plain memory, not MPI_Alloc_mem / MPI_Win_allocate: what ARMCI-MPI uses with
	 * ARMCI_USE_WIN_ALLOCATE=0, and what MPICH serves with active messages. */
	win_mem = calloc(kWinInts, sizeof(int));
	sbuf = malloc(kBig);
	rbuf = malloc(kBig);
	if (!win_mem || !sbuf || !rbuf)
		MPI_Abort(MPI_COMM_WORLD, 1);
	memset(sbuf, 1, kBig);
	MPI_Win_create(win_mem, kWinInts * sizeof(int), sizeof(int), MPI_INFO_NULL,
		       MPI_COMM_WORLD, &win);
	static const int calls[] = {SHADDR_IP_BARRIER, SHADDR_IP_BCAST, SHADDR_IP_REDUCE,
				    SHADDR_IP_ALLREDUCE, SHADDR_IP_GATHER, SHADDR_IP_SCATTER,
				    SHADDR_IP_ALLGATHER, SHADDR_IP_ALLTOALL};
	static const size_t sizes[] = {64, kBig};
	int tag = 0;
	struct shaddr_interpose_stats first;
	MPI_Barrier(MPI_COMM_WORLD);  /* makes the interposer's state of MPI_COMM_WORLD */
	get_stats(&first);
	for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
		for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
			const int which = calls[c];
			if (which == SHADDR_IP_BARRIER && z)
				continue;
			/* Over several (virtual) nodes, Gather and Scatter are forwarded. */
			if (first.world_nodes > 1 &&
			    (which == SHADDR_IP_GATHER || which == SHADDR_IP_SCATTER))
				continue;
			tag++;
			struct shaddr_interpose_stats before, after;
			get_stats(&before);
			/* Line up, then rank 0 goes first into the collective. */
			MPI_Barrier(MPI_COMM_WORLD);
			alarm(t ? (unsigned)atoi(t) : 60);
			if (rank == 0) {
				collective(which, sizes[z]);
			} else {
				sleep_ms(50);  /* rank 0 is asleep in libshaddr's wait by now */
				epoch(tag);
				collective(which, sizes[z]);
			}
			alarm(0);
			get_stats(&after);
			char lower[16];
			snprintf(lower, sizeof lower, "%s", name(which));
			for (char *p = lower; *p; p++)
				*p = (char)(*p | 0x20);
			const int lib = after.accelerated[which] + after.fallbacks[which] !=
					before.accelerated[which] + before.fallbacks[which];
			if (!counting) {
				/* nothing to compare */
			} else if (forwarded_by_setting(lower)) {
				/* SHADDR_INTERPOSE_FORWARD names it: MPI's own, whatever the size. */
				if (lib || after.forwarded[which] == before.forwarded[which]) {
					fprintf(stderr, "progress_rma: rank %d: %s of %zu bytes was not "
						"forwarded (SHADDR_INTERPOSE_FORWARD)\n", rank,
						name(which), sizes[z]);
					errors++;
				}
			} else if (!lib) {
				fprintf(stderr, "progress_rma: rank %d: %s of %zu bytes did not go "
					"through libshaddr (nothing was tested)\n", rank, name(which),
					sizes[z]);
				errors++;
			}
			/* The puts must have landed: rank 0 looks at its window in an epoch of its
			 * own. */
			MPI_Barrier(MPI_COMM_WORLD);
			if (rank == 0) {
				MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
				for (int r = 1; r < size; r++)
					if (win_mem[r] != tag) {
						fprintf(stderr, "progress_rma: %s: rank %d's put: %d, "
							"want %d\n", name(which), r, win_mem[r], tag);
						errors++;
					}
				MPI_Win_unlock(0, win);
			}
		}
	}
	MPI_Win_free(&win);
	int all = 0;
	MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("progress_rma: %d ranks, %d collectives with a one-sided epoch to a waiting "
		       "rank: %s\n", size, tag, all ? "FAILED" : "passed");
	free(win_mem);
	free(sbuf);
	free(rbuf);
	MPI_Finalize();
	return all ? 1 : 0;
}
