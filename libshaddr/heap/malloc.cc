// The malloc family of libshaddr-heap: route by size into the heap, by address out of it.
//
// Requests of SHADDR_HEAP_MIN bytes or more go to the heap's jemalloc arena when it is on,
// everything else (and whatever the heap cannot take: a full range, an error) to glibc's
// malloc through its __libc_* entry points. free, realloc and malloc_usable_size look at the
// address: inside the reserved range is the heap's, anything else is glibc's, including
// memory allocated before the heap existed. The fast paths are one relaxed load and a
// compare; nothing here throws or allocates on its own.
//
// Not compiled in sanitizer builds: the sanitizer's allocator must stay in charge.
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "heap_internal.h"

#if !defined(SHADDR_HEAP_SANITIZER) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)

extern "C" {
void *__libc_malloc(size_t);
void __libc_free(void *);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
}

namespace {

using namespace shaddr::heap::detail;

// The most a growing block gets beyond its request (realloc below).
constexpr size_t kGrowRoomMax = size_t{256} << 20;
// Blocks smaller than this move into a growth block rather than try to grow in place.
constexpr size_t kCopyCheap = size_t{1} << 20;

bool routed(size_t n) { return n >= g_route_min.load(std::memory_order_relaxed); }

size_t page_size() {
  static const size_t ps = (size_t)sysconf(_SC_PAGESIZE);
  return ps;
}

bool power_of_two(size_t a) { return a && !(a & (a - 1)); }

// A heap block going back to the allocator: pages the program withdrew from the heap
// (memops.cc) get the file back, so that the block is shared again when it is handed out next
// (restore_range looks at the table's bits first and locks only if one is set). Only blocks
// with pages of their own (jemalloc's large ones, from 4 pages): a smaller one shares its
// pages, which go back when jemalloc purges them. A large block up to 8 MiB starts at a random
// cache line of its extent's first page (jemalloc's cache_oblivious), so its pages are those
// its bytes touch. errno is kept, as free() must (POSIX.1-2024; glibc since 2.33): giving
// pages back makes system calls.
void release_block(void *p) {
  const int e = errno;
  const size_t n = engine_usable_size(p);
  if (g_withdrawn.load(std::memory_order_relaxed) && n >= 4 * page_size()) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p), mask = page_size() - 1;
    restore_range(a & ~mask, (a + n + mask) & ~mask);
  }
  if (!engine_release_grow_block(p, n) && !engine_slot_put(p, n)) {
    engine_free_sized(p, n);  // the size known: jemalloc need not look it up again
    note_freed(n);
  }
  errno = e;
}

// Moves heap block @p (@old usable bytes) to @q, which holds at least as much.
void *moved(void *p, size_t old, void *q) {
  memcpy(q, p, old);
  release_block(p);
  return q;
}

// The normal allocator: glibc's, or the program's own (g_next, heap_internal.h).
void *normal_malloc(size_t n) {
  const NextAllocator *x = g_next.load(std::memory_order_relaxed);
  return x ? x->malloc(n) : __libc_malloc(n);
}
void normal_free(void *p) {
  const NextAllocator *x = g_next.load(std::memory_order_relaxed);
  x ? x->free(p) : __libc_free(p);
}
void *normal_calloc(size_t n, size_t m) {
  const NextAllocator *x = g_next.load(std::memory_order_relaxed);
  return x ? x->calloc(n, m) : __libc_calloc(n, m);
}
void *normal_realloc(void *p, size_t n) {
  const NextAllocator *x = g_next.load(std::memory_order_relaxed);
  return x ? x->realloc(p, n) : __libc_realloc(p, n);
}
void *normal_memalign(size_t a, size_t n) {
  const NextAllocator *x = g_next.load(std::memory_order_relaxed);
  return x ? x->memalign(a, n) : __libc_memalign(a, n);
}

// The normal allocator's malloc_usable_size (heap_internal.h: looked up when the heap starts).
size_t normal_usable_size(void *p) {
  if (const NextAllocator *x = g_next.load(std::memory_order_relaxed)) return x->usable_size(p);
  size_t (*f)(void *) = g_libc_usable_size.load(std::memory_order_relaxed);
  return f ? f(p) : 0;
}

size_t usable_size(void *p) {
  if (!p) return 0;
  started();
  return in_heap(p) ? engine_usable_size(p) : normal_usable_size(p);
}

// Aligned allocation with glibc's memalign conventions: align is a power of two.
void *aligned(size_t align, size_t n) {
  started();
  if (routed(n))
    if (void *p = engine_alloc(n, align, false)) return p;
  return normal_memalign(align, n);
}

}  // namespace

#define HEAP_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" __attribute__((visibility("default"))) void *shaddr_heap_malloc(size_t n) {
  started();
  if (routed(n)) {
    // Where realloc can grow it without a copy, if this thread has such room (its growth
    // block, realloc below); else the block this thread freed last, if it is about this size.
    if (n < kCopyCheap) {
      if (void *p = engine_lend_grow_block(n)) return p;
      if (void *p = engine_slot_take(n)) return p;
    }
    if (void *p = engine_alloc(n, 0, false)) return p;
  }
  return normal_malloc(n);
}

HEAP_EXPORT void *malloc(size_t n) __attribute__((alias("shaddr_heap_malloc")));

HEAP_EXPORT void free(void *p) {
  if (in_heap(p))
    release_block(p);
  else
    normal_free(p);
}

HEAP_EXPORT void *calloc(size_t n, size_t m) {
  size_t total;
  if (__builtin_mul_overflow(n, m, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  started();
  if (routed(total))
    if (void *p = engine_alloc(total, 0, true)) return p;
  return normal_calloc(n, m);
}

HEAP_EXPORT void *realloc(void *p, size_t n) {
  if (!p) return shaddr_heap_malloc(n);
  started();
  if (!in_heap(p)) {
    if (!routed(n)) return normal_realloc(p, n);
    // Growing across the threshold: into the heap.
    void *q = engine_alloc(n, 0, false);
    if (!q) return normal_realloc(p, n);
    size_t old = normal_usable_size(p);
    memcpy(q, p, old < n ? old : n);
    normal_free(p);
    return q;
  }
  if (n == 0) {  // glibc's realloc(p, 0): free, return NULL
    release_block(p);
    return nullptr;
  }
  size_t old = engine_usable_size(p);
  if (block_withdrawn(p, old)) {  // moved by hand, so that its pages are given back
    void *q = routed(n) ? engine_alloc(n, 0, false) : nullptr;
    if (!q) q = normal_malloc(n);
    if (!q) return nullptr;
    memcpy(q, p, old < n ? old : n);
    release_block(p);
    return q;
  }
  if (routed(n) || g_route_min.load(std::memory_order_relaxed) == SIZE_MAX) {
    // Stays in the heap (in mpi-alloc-only mode, heap memory stays there whatever its size).
    // glibc grows a block in place where it can (at the top of its heap, or by mremap); the
    // heap's file cannot move pages, so a block that must move to grow moves into a growth
    // block (heap_internal.h), once: up to its size it then grows in place. Below kCopyCheap
    // bytes that move is cheaper than asking jemalloc to grow the block where it is (which
    // rarely can, and costs its arena's lock). A larger one, or beyond a growth block, gets
    // as much room again beyond the request, in place if its neighbour is free, else where
    // it moves. Untouched pages of a heap file cost nothing. A block that still fits stays
    // (a growth block whatever it shrinks to, as glibc's top keeps its pages). A new small
    // block may start in a growth block already (malloc above): then it never moves.
    if (n <= old && old == grow_block_size()) {
      engine_grow_block_resized(p, n);
      return p;
    }
    if (n <= old && n >= old / 2) return p;
    if (n > old) {
      if (old < kCopyCheap)
        if (void *q = engine_grow_block(n)) return moved(p, old, q);
      const size_t room = n < kGrowRoomMax ? n : kGrowRoomMax;
      size_t want;
      if (__builtin_add_overflow(n, room, &want)) want = n;
      if (engine_grow_in_place(p, n, want - n)) return p;
      if (void *q = engine_grow_block(n)) return moved(p, old, q);
      if (void *q = engine_alloc(want, 0, false)) return moved(p, old, q);
    }
    if (void *q = engine_realloc(p, n)) return q;
  }
  // Shrinking below the threshold, or the heap is full: out of it.
  void *q = normal_malloc(n);
  if (!q) return nullptr;  // p stays valid, as realloc promises
  memcpy(q, p, old < n ? old : n);
  release_block(p);
  return q;
}

HEAP_EXPORT void *reallocarray(void *p, size_t n, size_t m) {
  size_t total;
  if (__builtin_mul_overflow(n, m, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, total);
}

HEAP_EXPORT int posix_memalign(void **out, size_t align, size_t n) {
  if (!power_of_two(align) || align % sizeof(void *)) return EINVAL;
  int e = errno;
  void *p = aligned(align, n);
  if (!p) return ENOMEM;
  errno = e;
  *out = p;
  return 0;
}

HEAP_EXPORT void *aligned_alloc(size_t align, size_t n) {
  if (!power_of_two(align)) {  // glibc 2.36 refuses these too
    errno = EINVAL;
    return nullptr;
  }
  return aligned(align, n);
}

HEAP_EXPORT void *memalign(size_t align, size_t n) {
  if (align > SIZE_MAX / 2 + 1) {
    errno = EINVAL;
    return nullptr;
  }
  if (align < sizeof(void *)) align = sizeof(void *);
  if (!power_of_two(align)) align = size_t{1} << (64 - __builtin_clzl(align));  // glibc rounds up
  return aligned(align, n);
}

HEAP_EXPORT void *valloc(size_t n) { return aligned(page_size(), n); }

HEAP_EXPORT void *pvalloc(size_t n) {
  size_t ps = page_size(), r;
  if (__builtin_add_overflow(n, ps - 1, &r)) {
    errno = ENOMEM;
    return nullptr;
  }
  r &= ~(ps - 1);
  return aligned(ps, r ? r : ps);
}

HEAP_EXPORT size_t malloc_usable_size(void *p) { return usable_size(p); }

#endif  // not a sanitizer build
