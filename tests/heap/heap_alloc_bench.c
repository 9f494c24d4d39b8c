/* Allocation rounds as a program makes them, timed: run on glibc's malloc and with
 * libshaddr-heap.so preloaded, and compare (tools/shaddr_bench/alloccost.py, `make bench`).
 * Knows nothing of shaddr.
 *   malloc:  p = malloc(n), one byte written per page (what a program's first pass costs:
 *            the page faults of memory the allocator gave back), free(p)
 *   realloc: p = malloc(16 KiB), realloc doubling up to n, each new page written, free(p)
 * Each of T threads runs its rounds at once, in batches of a few milliseconds; each batch's
 * rounds are timed by the wall clock and by the thread's own CPU time (which the thread does
 * not pay while it waits for a core: on a loaded host the wall clock is mostly that wait).
 * Per thread: the wall time per round over the whole run, and the median and the minimum of
 * its batches' CPU time per round. The line gives the median over threads of each, and so
 * does the JSON line after it (what alloccost.py reads): us, cpu_us, cpu_min_us.
 * Usage: shaddr_heap_alloc_bench malloc|realloc SIZE THREADS SECONDS */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BATCHES 512

static size_t g_size;
static int g_realloc;
static double g_seconds;
static pthread_barrier_t g_start;

struct result {
  double wall_us, cpu_us, cpu_min_us;
};

static double clock_s(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
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

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void *worker(void *out) {
  struct result *r = out;
  double cpu[MAX_BATCHES];  /* on the stack: the bench allocates nothing of its own */
  /* Batches of 2 ms, fewer and longer for long runs; a round longer than that is a batch. */
  double batch = g_seconds / MAX_BATCHES > 0.002 ? g_seconds / MAX_BATCHES : 0.002;
  for (int i = 0; i < 3; i++) round_once();  /* warm up: the allocator's steady state */
  pthread_barrier_wait(&g_start);
  long rounds = 0;
  int batches = 0;
  double t0 = clock_s(CLOCK_MONOTONIC), t = t0;
  while (t - t0 < g_seconds && batches < MAX_BATCHES) {
    double b0 = t, c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    long n = 0;
    do {
      round_once();
      n++;
      t = clock_s(CLOCK_MONOTONIC);
    } while (t - b0 < batch);
    cpu[batches++] = (clock_s(CLOCK_THREAD_CPUTIME_ID) - c0) / n * 1e6;
    rounds += n;
  }
  r->wall_us = (t - t0) / rounds * 1e6;
  qsort(cpu, (size_t)batches, sizeof cpu[0], cmp);
  r->cpu_us = cpu[batches / 2];
  r->cpu_min_us = cpu[0];
  return NULL;
}

/* The median over @n threads of the field at @off of their results. */
static double median_of(const struct result *res, int n, size_t off) {
  double v[64];
  for (int i = 0; i < n; i++) v[i] = *(const double *)((const char *)&res[i] + off);
  qsort(v, (size_t)n, sizeof v[0], cmp);
  return v[n / 2];
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
  struct result res[64];
  pthread_barrier_init(&g_start, NULL, (unsigned)threads);
  for (int i = 0; i < threads; i++)
    if (pthread_create(&tid[i], NULL, worker, &res[i])) return 1;
  for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
  double wall = median_of(res, threads, offsetof(struct result, wall_us));
  double cpu = median_of(res, threads, offsetof(struct result, cpu_us));
  double cpu_min = median_of(res, threads, offsetof(struct result, cpu_min_us));
  printf("alloc_bench: %s %zu bytes, %d threads: %.3f us/round wall, %.3f us/round CPU "
         "(batches' median; minimum %.3f)\n", argv[1], g_size, threads, wall, cpu, cpu_min);
  printf("{\"tool\": \"alloc_bench\", \"mode\": \"%s\", \"size\": %zu, \"threads\": %d, "
         "\"us\": %.3f, \"cpu_us\": %.3f, \"cpu_min_us\": %.3f}\n", argv[1], g_size, threads,
         wall, cpu, cpu_min);
  return 0;
}
