/* malloc'd memory keeps private anonymous memory's rules under shaddr-run, with peers reading
 * it through the shared heap (docs/heap.md), and a rank's children do not inherit the preload.
 * Each size (4 KiB: glibc; 64 KiB-8 MiB: the heap), first without, then after a collective in
 * which the peers read the buffer:
 *   - MADV_DONTNEED reads back zeros on the owner before any MPI call, and a Bcast from it
 *     then delivers zeros;
 *   - MADV_WIPEONFORK is accepted, a fork child reads zeros, and a Bcast from the buffer
 *     delivers the owner's bytes (the pages left the heap: the peers must not read the file);
 *   - a root buffer made read-only (mprotect) still bcasts; an Allgather from such buffers;
 *   - copy on write across fork();
 * then a Bcast racing a thread that rewrites and purges its buffer (every byte received is
 * the pattern or zero), and a child started after MPI_Init (popen) that has no libshaddr.
 * Correct MPI on any MPI: the same checks hold stock. Exit 0: all good.
 * Usage: heap_semantics [--expect-heap]  (fails unless libshaddr-heap is loaded) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_rank, g_size, g_fail;

#define CHECK(c, ...)                                                       \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "heap_semantics rank %d: %s: ", g_rank, #c);          \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      g_fail = 1;                                                           \
    }                                                                       \
  } while (0)

static unsigned char pat(int seed, size_t i) { return (unsigned char)(((i * 2654435761u) >> 9) + seed) | 1; }

static void fill(unsigned char *p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) p[i] = pat(seed, i);
}
/* The first index whose byte is not pattern @seed (seed < 0: zero), or n. */
static size_t first_bad(const unsigned char *p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (seed < 0 ? 0 : pat(seed, i))) return i;
  return n;
}

static unsigned char *fresh(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, n)) abort();
  memset(p, 0, n);
  return p;
}

/* A fork child's view: 0 if it reads pattern @seed (or zeros for -1), 1 if not. */
static int child_sees(const unsigned char *p, size_t n, int seed) {
  pid_t pid = fork();
  if (pid == 0) _exit(first_bad(p, n, seed) == n ? 0 : 1);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}

static void one_size(size_t n, int peer_first) {
  unsigned char *buf = fresh(n);
  if (g_rank == 0) fill(buf, n, 5);
  if (peer_first) {
    MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    CHECK(first_bad(buf, n, 5) == n, "%zu: first Bcast", n);
  }
  /* MADV_DONTNEED: zeros at once, and a Bcast from the buffer delivers zeros. */
  if (g_rank == 0) {
    CHECK(madvise(buf, n, MADV_DONTNEED) == 0, "%zu", n);
    CHECK(first_bad(buf, n, -1) == n, "%zu: MADV_DONTNEED left byte %zu", n, first_bad(buf, n, -1));
  } else {
    fill(buf, n, 9);
  }
  MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK(first_bad(buf, n, -1) == n, "%zu/%d: Bcast after MADV_DONTNEED: byte %zu", n, peer_first,
        first_bad(buf, n, -1));

  /* MADV_WIPEONFORK: accepted, the child reads zeros, the peers get the owner's bytes. */
  if (g_rank == 0) {
    fill(buf, n, 6);
    CHECK(madvise(buf, n, MADV_WIPEONFORK) == 0, "%zu", n);
    CHECK(child_sees(buf, n, -1) == 0, "%zu: the fork child does not read zeros", n);
    CHECK(first_bad(buf, n, 6) == n, "%zu: MADV_WIPEONFORK changed the bytes", n);
  }
  MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK(first_bad(buf, n, 6) == n, "%zu/%d: Bcast after MADV_WIPEONFORK: byte %zu", n, peer_first,
        first_bad(buf, n, 6));

  /* A read-only root buffer, then an Allgather from buffers some of which left the heap. */
  if (g_rank == 0) CHECK(mprotect(buf, n, PROT_READ) == 0, "%zu", n);
  MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK(first_bad(buf, n, 6) == n, "%zu: Bcast from a read-only buffer", n);
  if (g_rank == 0) CHECK(mprotect(buf, n, PROT_READ | PROT_WRITE) == 0, "%zu", n);
  fill(buf, n, 20 + g_rank);
  unsigned char *all = fresh(n * (size_t)g_size);
  MPI_Allgather(buf, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < g_size; r++)
    CHECK(first_bad(all + (size_t)r * n, n, 20 + r) == n, "%zu: Allgather block %d", n, r);
  free(all);

  /* Copy on write: the child's writes stay its own. */
  fill(buf, n, 7);
  pid_t pid = fork();
  if (pid == 0) {
    fill(buf, n, 8);
    _exit(0);
  }
  waitpid(pid, NULL, 0);
  CHECK(first_bad(buf, n, 7) == n, "%zu: a fork child's writes reached the parent", n);
  free(buf);
}

/* Rank 0's thread rewrites and purges the buffer while the main thread bcasts it. */
static unsigned char *g_race;
static size_t g_race_n;
static void *purger(void *arg) {
  (void)arg;
  for (int i = 0; i < 300; i++) {
    memset(g_race, 0x71, g_race_n);
    madvise(g_race, g_race_n, i % 2 ? MADV_DONTNEED : MADV_FREE);
  }
  return NULL;
}

static void race(void) {
  g_race_n = 1 << 20;
  g_race = fresh(g_race_n);
  memset(g_race, 0x71, g_race_n);
  unsigned char *got = fresh(g_race_n);
  pthread_t t;
  if (g_rank == 0 && pthread_create(&t, NULL, purger, NULL)) abort();
  for (int round = 0; round < 20; round++) {
    unsigned char *b = g_rank == 0 ? g_race : got;
    MPI_Bcast(b, (int)g_race_n, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (g_rank != 0)
      for (size_t i = 0; i < g_race_n; i++)
        if (got[i] != 0 && got[i] != 0x71) {
          CHECK(0, "racing Bcast: byte %zu is %d, neither the pattern nor zero", i, got[i]);
          break;
        }
  }
  if (g_rank == 0) {
    pthread_join(t, NULL);
    CHECK(madvise(g_race, g_race_n, MADV_DONTNEED) == 0, "race");
  }
  MPI_Bcast(g_rank == 0 ? g_race : got, (int)g_race_n, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (g_rank != 0) CHECK(first_bad(got, g_race_n, -1) == g_race_n, "after the race: not zeros");
  free(got);
  free(g_race);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const int heap = dlsym(RTLD_DEFAULT, "shaddr_heap_api_v1") != NULL;
  if (argc > 1 && !strcmp(argv[1], "--expect-heap")) CHECK(heap, "libshaddr-heap is not loaded");

  static const size_t sizes[] = {4096, 64 << 10, 1 << 20, 8 << 20};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (int peer_first = 0; peer_first < 2; peer_first++) one_size(sizes[s], peer_first);
  race();

  /* A child started now is not a rank: nothing of shaddr is loaded in it. */
  FILE *f = popen("grep -c libshaddr /proc/self/maps", "r");
  char line[32] = "";
  CHECK(f && fgets(line, sizeof line, f) && atoi(line) == 0, "a popen child maps libshaddr (%s)", line);
  if (f) pclose(f);

  int bad = g_fail, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0) printf("heap_semantics: %d ranks, heap %s: %s\n", g_size, heap ? "loaded" : "not loaded",
                          any ? "FAILED" : "ok");
  MPI_Finalize();
  return any;
}
