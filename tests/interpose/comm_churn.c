/* SPDX-License-Identifier: MIT */
/*
 * Communicator churn: many communicators made (MPI_Comm_dup, MPI_Comm_split, MPI_Comm_create)
 * and freed, handles coming back, interleaved with collectives of every kind and a few sizes
 * on them, each result checked. Whatever the interposer keeps per communicator must be decided
 * alike on every rank, or two ranks wait in different calls (a hang, which alarm() turns into
 * a failure) or exchange the wrong data.
 *
 *   comm_churn [ITERATIONS]     (default 10000; every rank draws the same steps)
 */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kPool = 4, kMaxBytes = 64 << 10 };

static int wrank, wsize, errors;
static uint64_t rng = 0x9e3779b97f4a7c15ull;  /* the same sequence on every rank */
static long iter;
static char *sbuf, *rbuf;

static uint64_t next(void) {
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void on_alarm(int sig) {
	(void)sig;
	char msg[128];
	int n = snprintf(msg, sizeof msg, "comm_churn: rank %d: no progress at iteration %ld\n",
			 wrank, iter);
	ssize_t w = write(2, msg, (size_t)n);
	(void)w;
	_exit(2);
}

static void check(int ok, const char *what, MPI_Comm c, size_t bytes) {
	if (ok)
		return;
	int r, n;
	MPI_Comm_rank(c, &r);
	MPI_Comm_size(c, &n);
	if (errors++ < 10)
		fprintf(stderr, "comm_churn: iteration %ld: %s of %zu bytes on a communicator of %d "
			"ranks: wrong result at rank %d\n", iter, what, bytes, n, r);
}

/* One collective of kind k and about `bytes` bytes on c, its result checked. */
static void collective(MPI_Comm c, int k, size_t bytes) {
	int r, n;
	MPI_Comm_rank(c, &r);
	MPI_Comm_size(c, &n);
	const int root = (int)(iter % n);
	const int cnt = (int)(bytes / sizeof(int)) / n > 0 ? (int)(bytes / sizeof(int)) / n : 1;
	int *s = (int *)sbuf, *d = (int *)rbuf;
	const int total = cnt * n;
	for (int i = 0; i < total; i++)
		s[i] = r * 1000 + i;
	memset(rbuf, 0xff, (size_t)total * sizeof(int));
	int ok = 1;
	switch (k) {
	case 0:
		MPI_Barrier(c);
		break;
	case 1:
		if (r == root)
			memcpy(d, s, (size_t)total * sizeof(int));
		MPI_Bcast(d, total, MPI_INT, root, c);
		for (int i = 0; i < total; i++)
			ok &= d[i] == root * 1000 + i;
		check(ok, "Bcast", c, (size_t)total * 4);
		break;
	case 2:
		MPI_Allreduce(s, d, total, MPI_INT, MPI_SUM, c);
		for (int i = 0; i < total; i++)
			ok &= d[i] == 1000 * n * (n - 1) / 2 + n * i;
		check(ok, "Allreduce", c, (size_t)total * 4);
		break;
	case 3:
		MPI_Reduce(s, d, total, MPI_INT, MPI_MAX, root, c);
		if (r == root)
			for (int i = 0; i < total; i++)
				ok &= d[i] == (n - 1) * 1000 + i;
		check(ok, "Reduce", c, (size_t)total * 4);
		break;
	case 4:
		MPI_Allgather(s, cnt, MPI_INT, d, cnt, MPI_INT, c);
		for (int q = 0; q < n; q++)
			for (int i = 0; i < cnt; i++)
				ok &= d[q * cnt + i] == q * 1000 + i;
		check(ok, "Allgather", c, (size_t)total * 4);
		break;
	case 5:
		MPI_Alltoall(s, cnt, MPI_INT, d, cnt, MPI_INT, c);
		for (int q = 0; q < n; q++)
			for (int i = 0; i < cnt; i++)
				ok &= d[q * cnt + i] == q * 1000 + r * cnt + i;
		check(ok, "Alltoall", c, (size_t)total * 4);
		break;
	case 6:
		MPI_Gather(s, cnt, MPI_INT, d, cnt, MPI_INT, root, c);
		if (r == root)
			for (int q = 0; q < n; q++)
				for (int i = 0; i < cnt; i++)
					ok &= d[q * cnt + i] == q * 1000 + i;
		check(ok, "Gather", c, (size_t)total * 4);
		break;
	case 7:
		MPI_Scatter(s, cnt, MPI_INT, d, cnt, MPI_INT, root, c);
		for (int i = 0; i < cnt; i++)
			ok &= d[i] == root * 1000 + r * cnt + i;
		check(ok, "Scatter", c, (size_t)total * 4);
		break;
	}
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
	MPI_Comm_size(MPI_COMM_WORLD, &wsize);
	const long iterations = argc > 1 ? atol(argv[1]) : 10000;
	sbuf = malloc(kMaxBytes);
	rbuf = malloc(kMaxBytes);
	if (!sbuf || !rbuf)
		MPI_Abort(MPI_COMM_WORLD, 1);
	signal(SIGALRM, on_alarm);
	MPI_Comm pool[kPool];
	int live = 0;
	long made = 0;
	static const size_t sizes[] = {8, 1024, 64 << 10};
	MPI_Group world_group;
	MPI_Comm_group(MPI_COMM_WORLD, &world_group);
	for (iter = 0; iter < iterations; iter++) {
		if (iter % 256 == 0)
			alarm(60);
		const uint64_t x = next();
		const int action = (int)(x % 8);
		if (action < 3 && live < kPool) {
			/* A new communicator from MPI_COMM_WORLD or from one in the pool. */
			MPI_Comm parent = live && (x >> 8) % 2 ? pool[(x >> 16) % live] : MPI_COMM_WORLD;
			MPI_Comm c = MPI_COMM_NULL;
			int pr;
			MPI_Comm_rank(parent, &pr);
			if (action == 0) {
				MPI_Comm_dup(parent, &c);
			} else if (action == 1) {
				/* Halves, or everyone in reverse order. */
				const int halves = (x >> 24) % 2;
				MPI_Comm_split(parent, halves ? pr % 2 : 0, halves ? pr : -pr, &c);
			} else {
				MPI_Group g;
				MPI_Comm_group(parent, &g);
				MPI_Comm_create(parent, g, &c);
				MPI_Group_free(&g);
			}
			pool[live++] = c;
			made++;
		} else if (action == 3 && live > 0) {
			const int i = (int)((x >> 8) % live);
			MPI_Comm_free(&pool[i]);
			pool[i] = pool[--live];
		} else {
			MPI_Comm c = live && (x >> 8) % 4 ? pool[(x >> 16) % live] : MPI_COMM_WORLD;
			collective(c, (int)((x >> 24) % 8), sizes[(x >> 32) % 3]);
		}
		/* The pattern: dup, a large Allreduce, a small Bcast, free. */
		if (iter % 5 == 0) {
			MPI_Comm c;
			MPI_Comm_dup(MPI_COMM_WORLD, &c);
			collective(c, 2, 64 << 10);
			collective(c, 1, 1024);
			MPI_Comm_free(&c);
			made++;
		}
	}
	alarm(0);
	while (live > 0)
		MPI_Comm_free(&pool[--live]);
	MPI_Group_free(&world_group);
	int all = 0;
	MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (wrank == 0)
		printf("comm_churn: %d ranks, %ld steps, %ld communicators made and freed: %s\n",
		       wsize, iterations, made, all ? "FAILED" : "passed");
	free(sbuf);
	free(rbuf);
	MPI_Finalize();
	return all ? 1 : 0;
}
