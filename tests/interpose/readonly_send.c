/* SPDX-License-Identifier: MIT */
/*
 * Read-only send buffers, as user programs have them: every collective the interposer takes
 * (Bcast at the root, Reduce, Allreduce, Gather(v), Scatter(v) at the root, Allgather(v),
 * Alltoall(v)) reads its send side from memory the sending rank cannot write, short (through
 * the slots and the FIFO) and long (32 KiB blocks: the backends' single-copy paths). MPI's send
 * sides are const: the program is correct MPI, and stock MPI runs it.
 *
 *   readonly_send KIND|all [ROUNDS]     (ROUNDS: 1 unless given)
 *     rodata    a const table in .rodata
 *     mprotect  a page-aligned malloc block, mprotect(PROT_READ)
 *     file      a read-only MAP_SHARED mapping of a file opened O_RDONLY ($TMPDIR)
 *     protnone  a malloc block read once by every collective (so attached by the peers), then
 *               mprotect(PROT_NONE) and back to PROT_READ before the same collectives read it
 *               again; meanwhile the arguments MPI ignores (a non-root's Scatter send buffer,
 *               its Gather receive buffer) point at PROT_NONE memory
 *
 * Each result is checked element by element against the values the senders hold; the exit
 * status is 0 when every check passed on every rank (agreed with PMPI_Allreduce). With
 * READONLY_SEND_EXPECT=accel, every collective must also have run through libshaddr, none
 * forwarded or fallen back to PMPI_* (the interposer's counters, shaddr_interpose.h).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shaddr_interpose.h"

/* The table: value(i) for i < TABLE, laid down by the compiler in .rodata. */
#define TABLE 65536
#define V(i) ((unsigned)((i) * 2654435761u + 12345u))
#define R4(i) V(i), V((i) + 1), V((i) + 2), V((i) + 3)
#define R16(i) R4(i), R4((i) + 4), R4((i) + 8), R4((i) + 12)
#define R64(i) R16(i), R16((i) + 16), R16((i) + 32), R16((i) + 48)
#define R256(i) R64(i), R64((i) + 64), R64((i) + 128), R64((i) + 192)
#define R1K(i) R256(i), R256((i) + 256), R256((i) + 512), R256((i) + 768)
#define R4K(i) R1K(i), R1K((i) + 1024), R1K((i) + 2048), R1K((i) + 3072)
#define R16K(i) R4K(i), R4K((i) + 4096), R4K((i) + 8192), R4K((i) + 12288)
#define R64K(i) R16K(i), R16K((i) + 16384), R16K((i) + 32768), R16K((i) + 49152)
static const unsigned table[TABLE] __attribute__((aligned(4096))) = {R64K(0)};

#define SHORT 16
#define LONG 8192 /* ints per block: 32 KiB, above the slots' and the FIFO's 16 KiB */
#define BYTES ((size_t)TABLE * sizeof(unsigned))

static int g_rank, g_size, g_errors;

static unsigned value(size_t i) { return V(i); }

/* Rank r's send data starts at element offset(r) of the source: different on every rank. */
static size_t offset(int r) { return (size_t)r * 97; }

static void *page_alloc(size_t bytes)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, bytes)) {
		perror("posix_memalign");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return p;
}

static void protect(void *p, size_t bytes, int prot)
{
	if (mprotect(p, bytes, prot)) {
		perror("mprotect");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
}

/* The read-only source of KIND: TABLE values, value(i) at i. */
static const unsigned *source(const char *kind, void **to_free)
{
	*to_free = NULL;
	if (!strcmp(kind, "rodata"))
		return table;
	if (!strcmp(kind, "mprotect") || !strcmp(kind, "protnone")) {
		unsigned *p = page_alloc(BYTES);

		for (size_t i = 0; i < TABLE; i++)
			p[i] = value(i);
		protect(p, BYTES, PROT_READ);
		*to_free = p;
		return p;
	}
	if (!strcmp(kind, "file")) {
		const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
		char path[4096];
		int fd;
		void *m;

		snprintf(path, sizeof(path), "%s/readonly_send.%d.XXXXXX", dir, g_rank);
		fd = mkstemp(path);
		if (fd < 0 || write(fd, table, BYTES) != (ssize_t)BYTES) {
			perror(path);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		close(fd);
		fd = open(path, O_RDONLY);
		unlink(path);
		m = fd < 0 ? MAP_FAILED : mmap(NULL, BYTES, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) {
			perror("mmap");
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		close(fd);
		return m;
	}
	fprintf(stderr, "readonly_send: unknown kind %s\n", kind);
	MPI_Abort(MPI_COMM_WORLD, 2);
	return NULL;
}

static void expect(const char *what, int n, const unsigned *got, unsigned (*want)(int, int),
		   int arg)
{
	for (int i = 0; i < n; i++) {
		if (got[i] != want(arg, i)) {
			if (g_errors++ < 5)
				fprintf(stderr, "readonly_send: rank %d: %s: [%d] = %u, want %u\n",
					g_rank, what, i, got[i], want(arg, i));
			return;
		}
	}
}

/* Element i of what rank r sends. */
static unsigned sent(int r, int i) { return value(offset(r) + (size_t)i); }
static unsigned sum(int n, int i)
{
	unsigned s = 0;

	for (int r = 0; r < n; r++)
		s += sent(r, i);
	return s;
}

static int g_count; /* ints per block of the running round */
/* Block q of a gather-like result (block q from rank q): element i of the whole. */
static unsigned gathered(int unused, int i)
{
	(void)unused;
	return sent(i / g_count, i % g_count);
}
/* What rank `me` receives in Alltoall: block q is block `me` of rank q's send data. */
static unsigned all_to(int me, int i)
{
	return sent(i / g_count, me * g_count + i % g_count);
}
/* What rank `me` receives in Scatter from root 0: block `me` of the root's send data. */
static unsigned scattered(int me, int i) { return sent(0, me * g_count + i); }

/* One round of every collective with the send side in src; ignored arguments at `ignored`. */
static void round_of(const unsigned *src, int count, void *ignored)
{
	const int n = g_size, me = g_rank, root = 0;
	const unsigned *mine = src + offset(me);
	unsigned *out = calloc((size_t)n * count, sizeof(unsigned));
	int *counts = malloc(sizeof(int) * n), *displs = malloc(sizeof(int) * n);

	g_count = count;
	for (int r = 0; r < n; r++) {
		counts[r] = count;
		displs[r] = r * count;
	}

	/* Bcast: the root's buffer is only read; the others receive. */
	if (me == root)
		MPI_Bcast((void *)mine, count, MPI_UNSIGNED, root, MPI_COMM_WORLD);
	else {
		MPI_Bcast(out, count, MPI_UNSIGNED, root, MPI_COMM_WORLD);
		expect("Bcast", count, out, sent, root);
	}

	memset(out, 0, sizeof(unsigned) * count);
	MPI_Reduce(mine, me == root ? out : ignored, count, MPI_UNSIGNED, MPI_SUM, root,
		   MPI_COMM_WORLD);
	if (me == root)
		expect("Reduce", count, out, sum, n);

	memset(out, 0, sizeof(unsigned) * count);
	MPI_Allreduce(mine, out, count, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD);
	expect("Allreduce", count, out, sum, n);

	memset(out, 0, sizeof(unsigned) * n * count);
	MPI_Gather(mine, count, MPI_UNSIGNED, me == root ? out : ignored, count, MPI_UNSIGNED,
		   root, MPI_COMM_WORLD);
	if (me == root)
		expect("Gather", n * count, out, gathered, 0);

	memset(out, 0, sizeof(unsigned) * n * count);
	MPI_Gatherv(mine, count, MPI_UNSIGNED, me == root ? out : ignored, counts, displs,
		    MPI_UNSIGNED, root, MPI_COMM_WORLD);
	if (me == root)
		expect("Gatherv", n * count, out, gathered, 0);

	/* Scatter(v): only the root's send buffer counts (the root's data: rank 0's). */
	memset(out, 0, sizeof(unsigned) * count);
	MPI_Scatter(me == root ? mine : ignored, count, MPI_UNSIGNED, out, count, MPI_UNSIGNED,
		    root, MPI_COMM_WORLD);
	expect("Scatter", count, out, scattered, me);

	memset(out, 0, sizeof(unsigned) * count);
	MPI_Scatterv(me == root ? mine : ignored, counts, displs, MPI_UNSIGNED, out, count,
		     MPI_UNSIGNED, root, MPI_COMM_WORLD);
	expect("Scatterv", count, out, scattered, me);

	memset(out, 0, sizeof(unsigned) * n * count);
	MPI_Allgather(mine, count, MPI_UNSIGNED, out, count, MPI_UNSIGNED, MPI_COMM_WORLD);
	expect("Allgather", n * count, out, gathered, 0);

	memset(out, 0, sizeof(unsigned) * n * count);
	MPI_Allgatherv(mine, count, MPI_UNSIGNED, out, counts, displs, MPI_UNSIGNED,
		       MPI_COMM_WORLD);
	expect("Allgatherv", n * count, out, gathered, 0);

	memset(out, 0, sizeof(unsigned) * n * count);
	MPI_Alltoall(mine, count, MPI_UNSIGNED, out, count, MPI_UNSIGNED, MPI_COMM_WORLD);
	expect("Alltoall", n * count, out, all_to, me);

	memset(out, 0, sizeof(unsigned) * n * count);
	MPI_Alltoallv(mine, counts, displs, MPI_UNSIGNED, out, counts, displs, MPI_UNSIGNED,
		      MPI_COMM_WORLD);
	expect("Alltoallv", n * count, out, all_to, me);

	free(out);
	free(counts);
	free(displs);
}

/* READONLY_SEND_EXPECT=accel: did every collective of this rank run through libshaddr? */
static void check_accelerated(void)
{
	const char *expect = getenv("READONLY_SEND_EXPECT");
	int (*get)(struct shaddr_interpose_stats *);
	struct shaddr_interpose_stats st;

	if (!expect || strcmp(expect, "accel"))
		return;
	*(void **)&get = dlsym(RTLD_DEFAULT, "shaddr_interpose_get_stats");
	if (!get || get(&st)) {
		fprintf(stderr, "readonly_send: rank %d: the interposer is not loaded\n", g_rank);
		g_errors++;
		return;
	}
	for (int c = SHADDR_IP_BCAST; c < SHADDR_IP_COUNT; c++) {
		if (st.accelerated[c] && !st.forwarded[c] && !st.fallbacks[c])
			continue;
		fprintf(stderr,
			"readonly_send: rank %d: call %d: %llu through libshaddr, %llu forwarded, "
			"%llu fallen back to PMPI_* (SHADDR_VERBOSE=1 says why)\n",
			g_rank, c, (unsigned long long)st.accelerated[c],
			(unsigned long long)st.forwarded[c], (unsigned long long)st.fallbacks[c]);
		g_errors++;
	}
}

/* Every round of one kind of source. */
static void run_kind(const char *kind, int rounds)
{
	void *to_free, *ignored = NULL;
	const unsigned *src = source(kind, &to_free);

	if (!strcmp(kind, "protnone")) {
		/* Ignored arguments: PROT_NONE pages, which nothing may touch. */
		ignored = page_alloc((size_t)g_size * LONG * sizeof(unsigned));
		protect(ignored, (size_t)g_size * LONG * sizeof(unsigned), PROT_NONE);
	}
	for (int r = 0; r < rounds; r++) {
		round_of(src, SHORT, ignored);
		round_of(src, LONG, ignored);
		if (!strcmp(kind, "protnone")) {
			/* Attached by now: the protection changes under the peers' mappings... */
			protect(to_free, BYTES, PROT_NONE);
			PMPI_Barrier(MPI_COMM_WORLD);
			protect(to_free, BYTES, PROT_READ);
			PMPI_Barrier(MPI_COMM_WORLD);
			/* ...and they read it again. */
			round_of(src, LONG, ignored);
		}
	}
	if (to_free) {
		protect(to_free, BYTES, PROT_READ | PROT_WRITE);
		free(to_free);
	} else if (src != table) {
		munmap((void *)src, BYTES);
	}
	if (ignored) {
		protect(ignored, (size_t)g_size * LONG * sizeof(unsigned), PROT_READ | PROT_WRITE);
		free(ignored);
	}
}

int main(int argc, char **argv)
{
	static const char *const all[] = {"rodata", "mprotect", "file", "protnone"};
	const char *kind = argc > 1 ? argv[1] : "";
	const int rounds = argc > 2 ? atoi(argv[2]) : 1;
	int total = 0, ran = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_size);
	if (offset(g_size) + (size_t)g_size * LONG > TABLE) {
		fprintf(stderr, "readonly_send: at most %d ranks\n",
			(int)(TABLE / (LONG + 97)) - 1);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (int k = 0; k < 4; k++) {
		if (strcmp(kind, "all") && strcmp(kind, all[k]))
			continue;
		run_kind(all[k], rounds);
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "usage: readonly_send rodata|mprotect|file|protnone|all [ROUNDS]\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	check_accelerated();
	PMPI_Allreduce(&g_errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("readonly_send %s: %d ranks, %d rounds: %s\n", kind, g_size, rounds,
		       total ? "FAILED" : "ok");
	MPI_Finalize();
	return total ? 1 : 0;
}
