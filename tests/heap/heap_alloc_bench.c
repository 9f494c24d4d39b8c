/* Allocation rounds as a program makes them, timed: run on glibc's malloc and with
 * libshaddr-heap.so preloaded, and compare (tools/shaddr_bench/alloccost.py, `make bench`).
 * Knows nothing of shaddr.
 *   malloc:  p = malloc(n), one byte written per page (what a program's first pass costs:
 *            the page faults of memory the allocator gave back), free(p)
 *   realloc: p = malloc(16 KiB), realloc doubling up to n, each new page written, free(p)
 * Each of T threads runs its rounds at once; the line gives the median over threads of each
 * thread's time per round, and so does the JSON line after it (what alloccost.py reads).
 * Usage: shaddr_heap_alloc_bench malloc|realloc SIZE THREADS SECONDS */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t g_size;
static int g_realloc;
static double g_seconds;
static pthread_barrier_t g_start;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void touch(volatile char *p, size_t from, size_t to) {
  for (size_t i = from; i < to; i += 4096) p[i] = (char)i;
  if (to > from) p[to - 1] = 1;
}

static void round_once(void) {
  if (!g_realloc) {
    char *p = malloc(g_size);
    if (!p) abort();
    touch(p, 0, g_size);
    free(p);
    return;
  }
  size_t n = 16 << 10;
  char *p = malloc(n);
  if (!p) abort();
  touch(p, 0, n);
  while (n < g_size) {
    size_t m = n * 2 < g_size ? n * 2 : g_size;
    p = realloc(p, m);
    if (!p) abort();
    touch(p, n, m);
    n = m;
  }
  free(p);
}

static void *worker(void *out) {
  for (int i = 0; i < 3; i++) round_once();  /* warm up: the allocator's steady state */
  pthread_barrier_wait(&g_start);
  long rounds = 0;
  double t0 = now(), t;
  do {
    round_once();
    rounds++;
    t = now();
  } while (t - t0 < g_seconds);
  *(double *)out = (t - t0) / rounds * 1e6;
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc != 5 || (strcmp(argv[1], "malloc") && strcmp(argv[1], "realloc"))) {
    fprintf(stderr, "usage: %s malloc|realloc SIZE THREADS SECONDS\n", argv[0]);
    return 2;
  }
  g_realloc = !strcmp(argv[1], "realloc");
  g_size = strtoull(argv[2], NULL, 0);
  int threads = atoi(argv[3]);
  g_seconds = atof(argv[4]);
  if (g_size < 16 || threads < 1 || threads > 64 || g_seconds <= 0) return 2;
  pthread_t tid[64];
  double us[64];
  pthread_barrier_init(&g_start, NULL, (unsigned)threads);
  for (int i = 0; i < threads; i++)
    if (pthread_create(&tid[i], NULL, worker, &us[i])) return 1;
  for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
  qsort(us, (size_t)threads, sizeof us[0], cmp);
  printf("alloc_bench: %s %zu bytes, %d threads: %.3f us/round\n", argv[1], g_size, threads,
         us[threads / 2]);
  printf("{\"tool\": \"alloc_bench\", \"mode\": \"%s\", \"size\": %zu, \"threads\": %d, "
         "\"us\": %.3f}\n", argv[1], g_size, threads, us[threads / 2]);
  return 0;
}
