/* A program that knows nothing of shaddr: run under LD_PRELOAD=libshaddr-heap.so, its large
 * malloc must land in the memfd heap (in_heap=1); without it, not. A program that brings its
 * own allocator is the same program built with -DOWN_MALLOC: then the heap must step aside.
 * Built with -DTAKE_MALLOC_ADDRESS and without -fPIE (as Debian's python3 is), it allocates
 * through malloc's address: the executable then holds malloc's canonical PLT entry. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef OWN_MALLOC
void *__libc_malloc(size_t);
void __libc_free(void *);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void *malloc(size_t n) { return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
void *calloc(size_t n, size_t m) { return __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { return __libc_memalign(a, n); }
int posix_memalign(void **r, size_t a, size_t n) {
  *r = __libc_memalign(a, n);
  return *r ? 0 : 12;
}
#endif

static int in_memfd_heap(const void *p) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  int found = 0;
  uintptr_t a = (uintptr_t)p;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi && strstr(line, "memfd:shaddr-heap"))
      found = 1;
  }
  if (f) fclose(f);
  return found;
}

#ifdef TAKE_MALLOC_ADDRESS
static void *(*volatile alloc)(size_t);
#else
#define alloc malloc
#endif

/* The process's first malloc: preinit_array functions run before every constructor (the
 * preloaded heap's included), so the heap must start inside this call. */
static char *g_first;
static void first_malloc(void) { g_first = malloc(1 << 20); }
__attribute__((section(".preinit_array"), used)) static void (*g_preinit)(void) = first_malloc;

int main(void) {
#ifdef TAKE_MALLOC_ADDRESS
  alloc = malloc;  /* in code: the address comes from the executable's own PLT entry */
#endif
  char *p = alloc(1 << 20);
  if (!p || !g_first) return 2;
  memset(p, 7, 1 << 20);
  memset(g_first, 8, 1 << 20);
  printf("in_heap=%d first_in_heap=%d\n", in_memfd_heap(p), in_memfd_heap(g_first));
  free(p);
  free(g_first);
  return 0;
}
