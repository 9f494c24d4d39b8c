/* A program linked with libjemalloc that mixes jemalloc's extended API with the standard one
 * (tests/heap/heap_test.cc, HeapPreload.AProgramLinkedWithJemallocKeepsIt): under
 * libshaddr-heap every block must still go back to the allocator that made it. Exit 0: all
 * good. Knows nothing of shaddr. */
#include <jemalloc/jemalloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define CHECK(c)                                         \
  do {                                                   \
    if (!(c)) {                                          \
      fprintf(stderr, "heap_jemalloc: %s failed\n", #c); \
      return 1;                                          \
    }                                                    \
  } while (0)

int main(void) {
  for (size_t n = 4096; n <= (size_t)32 << 20; n *= 4) {
    char *a = mallocx(n, MALLOCX_ALIGN(4096));  /* jemalloc's API, freed by free() */
    CHECK(a);
    memset(a, 0xab, n);
    CHECK(madvise(a, n, MADV_DONTNEED) == 0);
    for (size_t i = 0; i < n; i += 512) CHECK(a[i] == 0);
    free(a);
    char *b = malloc(n);  /* the standard API, freed by jemalloc's */
    CHECK(b);
    memset(b, 1, n);
    CHECK(malloc_usable_size(b) >= n && sallocx(b, 0) >= n);
    b = rallocx(b, 2 * n, 0);
    CHECK(b && b[n - 1] == 1);
    sdallocx(b, 2 * n, 0);
    char *c = calloc(1, n);
    CHECK(c && c[n / 2] == 0);
    c = realloc(c, n / 2);
    CHECK(c);
    dallocx(c, 0);
  }
  puts("heap_jemalloc: ok");
  return 0;
}
