// madvise, mprotect, pkey_mprotect, mbind and mremap of libshaddr-heap: on the heap's range they
// answer as on the private anonymous memory glibc's malloc would have handed out (heap.h,
// "Private-anonymous semantics"); everywhere else they are the kernel's calls unchanged.
//
// A range is split into runs: pages outside the heap's file and withdrawn pages (private
// memory already) get the kernel's call as they are; the heap's shared pages are punched
// (MADV_DONTNEED, MADV_FREE) or withdrawn first (calls whose effect differs on shared memory or
// would not survive the heap's fork copy). The first error ends the call, as the kernel's does.
//
// Not compiled in sanitizer builds (the heap is off there).
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "heap_internal.h"

#if !defined(SHADDR_HEAP_SANITIZER) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)

// Advices of newer kernels than glibc 2.36's headers.
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

namespace {

using namespace shaddr::heap::detail;

size_t page_size() {
  static const size_t ps = (size_t)sysconf(_SC_PAGESIZE);
  return ps;
}

// [a, *e) page aligned, the length rounded up as the kernel does; false if the kernel would
// refuse the range itself (unaligned start, overflow) or it cannot touch the heap: then the
// kernel's call answers alone.
bool heap_range(const void *addr, size_t len, uintptr_t *a, uintptr_t *e) {
  if (g_size.load(std::memory_order_relaxed) == 0 || len == 0) return false;
  *a = reinterpret_cast<uintptr_t>(addr);
  const size_t ps = page_size();
  if (*a & (ps - 1) || len > SIZE_MAX - ps || *a + ((len + ps - 1) & ~(ps - 1)) < *a) return false;
  *e = *a + ((len + ps - 1) & ~(ps - 1));
  const uintptr_t base = g_base.load(std::memory_order_relaxed);
  return *e > base && *a < base + g_size.load(std::memory_order_relaxed);
}

// Whether @a..@e holds any shared heap page.
bool any_shared(uintptr_t a, uintptr_t e) {
  for (uintptr_t r; a < e; a = r) {
    Pages kind;
    r = page_run(a, e, &kind);
    if (kind == Pages::shared) return true;
  }
  return false;
}

int sys_madvise(uintptr_t a, uintptr_t e, int advice) {
  return raw_madvise(reinterpret_cast<void *>(a), e - a, advice);
}

// Whether this kernel knows @advice: it checks the advice before the range, and an empty range
// is then a success that does nothing. Nothing is withdrawn for an advice it refuses anyway.
bool known_advice(uintptr_t a, int advice) {
  return raw_madvise(reinterpret_cast<void *>(a), 0, advice) == 0;
}

// What a private anonymous mapping would do with these shared heap pages.
int shared_advice(uintptr_t a, uintptr_t e, int advice) {
  switch (advice) {
    case MADV_DONTNEED:
    case MADV_DONTNEED_LOCKED:
    case MADV_FREE: {
      // The kernel's checks (locked pages: EINVAL for DONTNEED and FREE alike), then zeros.
      const int r = sys_madvise(a, e, advice == MADV_DONTNEED_LOCKED ? advice : MADV_DONTNEED);
      if (r != 0) return r;
      if (!punch_range(a, e)) return -1;
      return 0;
    }
    case MADV_WIPEONFORK:     // refused on shared memory
    case MADV_DONTFORK:       // the heap's fork copy would map the pages in the child
    case MADV_MERGEABLE:      // KSM ignores shared memory
    case MADV_HUGEPAGE:       // shmem follows shmem_enabled, not this
    case MADV_COLLAPSE:       // likewise; refused where shmem has no huge pages
    case MADV_GUARD_INSTALL:  // guards would not survive the fork copy
      if (!known_advice(a, advice) || !withdraw_range(a, e)) return -1;
      return sys_madvise(a, e, advice);
    default: {
      // Alike on both (the hints, MADV_REMOVE, MADV_KEEPONFORK, MADV_DOFORK, ...), or newer
      // than this list: as the kernel answers, unless it refuses the shared pages.
      const int r = sys_madvise(a, e, advice);
      if (r == 0 || errno != EINVAL || !known_advice(a, advice)) return r;
      if (!withdraw_range(a, e)) return -1;
      return sys_madvise(a, e, advice);
    }
  }
}

// Withdraws the shared pages of [a, e); false with errno if that fails. PagesLock held.
bool withdraw_shared(const void *addr, size_t len) {
  uintptr_t a, e;
  if (!heap_range(addr, len, &a, &e) || !any_shared(a, e)) return true;
  return withdraw_range(a, e);
}

// Whether [addr, addr + len) can touch the heap: then the caller takes the PagesLock.
bool touches_heap(const void *addr, size_t len) {
  uintptr_t a, e;
  return heap_range(addr, len ? len : 1, &a, &e);
}

// @call on private memory: the range's shared heap pages withdrawn first, all under the lock.
template <class Call>
long on_private(const void *addr, size_t len, Call call) {
  if (!touches_heap(addr, len)) return call();
  PagesLock lock;
  if (!withdraw_shared(addr, len)) return -1;
  return call();
}

}  // namespace

#define HEAP_EXPORT extern "C" __attribute__((visibility("default")))

HEAP_EXPORT int madvise(void *addr, size_t len, int advice) noexcept {
  uintptr_t a, e;
  if (!heap_range(addr, len, &a, &e)) return raw_madvise(addr, len, advice);
  PagesLock lock;  // what page_run() says stays true until the call is done
  int result = 0, saved = 0;
  for (uintptr_t r; a < e; a = r) {
    Pages kind;
    r = page_run(a, e, &kind);
    const int rc = kind == Pages::shared ? shared_advice(a, r, advice) : sys_madvise(a, r, advice);
    if (rc == 0) continue;
    // The kernel goes on past unmapped pages and says ENOMEM at the end; other errors stop it.
    if (errno != ENOMEM) return -1;
    result = -1;
    saved = errno;
  }
  if (result) errno = saved;
  return result;
}

// Any protection but the heap's own read-write would be lost by the fork copy: private first.
HEAP_EXPORT int mprotect(void *addr, size_t len, int prot) noexcept {
  if (prot == (PROT_READ | PROT_WRITE)) return static_cast<int>(syscall(SYS_mprotect, addr, len, prot));
  return static_cast<int>(on_private(addr, len, [&] { return syscall(SYS_mprotect, addr, len, prot); }));
}

HEAP_EXPORT int pkey_mprotect(void *addr, size_t len, int prot, int pkey) noexcept {
  return static_cast<int>(
      on_private(addr, len, [&] { return syscall(SYS_pkey_mprotect, addr, len, prot, pkey); }));
}

// libnuma's entry point (numaif.h); a NUMA policy on shared pages is the file's, and pages a
// peer maps too are not moved (MPOL_MF_STRICT: EIO).
HEAP_EXPORT long mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
                       unsigned long maxnode, unsigned flags) noexcept {
  return on_private(addr, len, [&] { return syscall(SYS_mbind, addr, len, mode, nodemask, maxnode, flags); });
}

// The pages move as private memory (MREMAP_DONTUNMAP refuses shared mappings before Linux
// 5.13). A heap range the move vacates is reserved again (PROT_NONE, still withdrawn) so that
// nothing else is mapped inside the heap's range; its block's free maps the file back.
HEAP_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) noexcept {
  void *new_addr = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_addr = va_arg(ap, void *);
    va_end(ap);
  }
  uintptr_t a, e;
  const bool heap = heap_range(old, old_len ? old_len : 1, &a, &e);
  if (!heap && !((flags & MREMAP_FIXED) && touches_heap(new_addr, new_len)))
    return raw_mremap(old, old_len, new_len, flags, new_addr);
  PagesLock lock;
  if (heap && !withdraw_shared(old, old_len)) return MAP_FAILED;
  if ((flags & MREMAP_FIXED) && !withdraw_shared(new_addr, new_len)) return MAP_FAILED;
  void *r = raw_mremap(old, old_len, new_len, flags, new_addr);
  if (r == MAP_FAILED || !heap || old_len == 0) return r;
  // What of [old, old + old_len) is no longer mapped: all of it after a move (without
  // MREMAP_DONTUNMAP), the tail after a shrink.
  uintptr_t from = e;
  if (r != old && !(flags & MREMAP_DONTUNMAP))
    from = a;
  else if (new_len < old_len)
    from = a + ((new_len + page_size() - 1) & ~(page_size() - 1));
  const uintptr_t base = g_base.load(std::memory_order_relaxed);
  const uintptr_t lo = from > base ? from : base, hi = e < base + g_size.load() ? e : base + g_size.load();
  if (lo < hi) {
    const int err = errno;
    mmap(reinterpret_cast<void *>(lo), hi - lo, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    errno = err;
  }
  return r;
}

#endif  // not a sanitizer build
