// shaddr::heap -- a process heap that node peers can map.
//
// What it is
//   libshaddr-heap replaces the malloc family. Every allocation of SHADDR_HEAP_MIN bytes or
//   more (and every shaddr::heap::alloc(), for MPI_Alloc_mem) comes from one per-process
//   memfd, mapped MAP_SHARED at a fixed virtual range of this process. A peer that holds the
//   memfd's descriptor (passed over SCM_RIGHTS; no ptrace rights needed) maps it once and
//   reads any heap buffer of this process at `peer_map + (addr - base())`: contains() gives
//   that offset. Smaller allocations, and everything when the heap is off, go to glibc's
//   malloc unchanged.
//
// Why jemalloc (Debian's libjemalloc-dev 5.3, linked privately)
//   jemalloc's extent hooks are exactly the seam this needs: a dedicated arena
//   (arenas.create) gets all of its memory, metadata included, from our alloc hook, and tells
//   us when pages are free (purge_forced), which we turn into fallocate(PUNCH_HOLE) so RSS
//   follows the program. mimalloc 2.0.9 can be given a fixed region (mi_manage_os_memory) but
//   has no per-region purge hook: freed pages would be madvise()d, which does not free the
//   pages of a shared file mapping, and its heaps are per thread. jemalloc is only the
//   allocator of the memfd range: malloc routes by size on the way in and by address on the
//   way out (free, realloc, malloc_usable_size), so memory from glibc, also memory allocated
//   before the heap existed, goes back to glibc. jemalloc's public names are renamed
//   (shaddr_je_*, see prefix_jemalloc.cmake), so it clashes neither with this malloc nor with
//   a jemalloc the program loads.
//
// Layout
//   One PROT_NONE reservation of SHADDR_HEAP_MAX bytes, 2 MiB aligned; the memfd is mapped
//   MAP_SHARED|MAP_FIXED over its start as jemalloc asks for extents (the file grows in
//   32 MiB steps), so file offset == address - base(). Extents are handed out once, from the
//   bottom up (jemalloc retains and reuses them); freed pages are hole-punched.
//   SHADDR_HEAP_MAX defaults to min(physical RAM, 64 GiB): a heap larger than RAM cannot be
//   resident anyway, and every rank of a node maps every peer's range, so 64 GiB keeps
//   ranks x range within x86-64's 128 TiB of user address space up to ~1,900 ranks per node.
//   The range is virtual only: untouched pages cost nothing. Under a finite RLIMIT_AS the
//   default is at most a quarter of it, so that the reservation leaves the program its room.
//
// Settings (read once, at load; see config_from_env() in heap.cc). Declared in libshaddr's
// settings registry (libshaddr/src/settings_table.cc, docs/settings.md) and parsed by its
// grammar.
//   SHADDR_HEAP      auto (default): malloc-family allocations >= SHADDR_HEAP_MIN and alloc();
//                    mpi-alloc-only: only alloc(); off: nothing (no memfd, no reservation).
//   SHADDR_HEAP_MIN  bytes, K/M/G/T suffixes. Default kDefaultMinSize (16 KiB): from there
//                    up libshaddr's slots end (SHADDR_SLOT_MAX, 16 KiB at 2 ranks) and a
//                    mapped transfer beats cma's system call per peer, while what a heap
//                    malloc+free costs beyond glibc's is less than the one copy the mapped
//                    path saves per transfer (docs/defaults.md). Smaller allocations
//                    (strings, containers) are most of a program's and stay with glibc.
//   SHADDR_HEAP_MAX  bytes, K/M/G/T suffixes; the reservation (see above).
//   SHADDR_VERBOSE=1 one line on stderr at load: on (and where), or off and why.
//
// Semantics kept
//   calloc zeroes (jemalloc tracks which extents are known zero; punched and fresh pages are);
//   realloc across the threshold moves the data both ways; all alignments; free and
//   malloc_usable_size of glibc memory; threads; exec: the memfd is MFD_CLOEXEC; exhaustion
//   of SHADDR_HEAP_MAX and any failure of the heap fall back to glibc (status().exhausted
//   counts refusals).
//   fork: the MAP_SHARED mapping would be inherited, so our fork handlers (registered before
//   jemalloc's) make the child copy the heap's data into a memfd of its own (sendfile, holes
//   skipped) and map it in place, while the parent waits in its handler before anything,
//   jemalloc's unlocking included, runs on. Neither side sees the other's writes made after
//   fork() returned. A fork child that cannot make a memfd copies into private anonymous
//   memory instead (its heap is then off for sharing); if even that fails it aborts rather
//   than share memory with its parent.
//
// Private-anonymous semantics (memops.cc)
//   A memfd mapped MAP_SHARED is not what glibc's malloc hands out, and the kernel treats the
//   two differently (madvise(2), mprotect(2), mremap(2)). The library defines madvise,
//   mprotect, pkey_mprotect, mremap and mbind, so a call on a heap range behaves as on private
//   anonymous memory:
//   - MADV_DONTNEED, MADV_DONTNEED_LOCKED, MADV_FREE: the kernel checks the range first (the
//     same MADV_DONTNEED call on the shared mapping: EINVAL on locked pages as on private
//     ones), then the pages are hole-punched from the file: they read as zeros here and in
//     every peer's mapping (the punch unmaps them there too). MADV_REMOVE works on the file
//     already (private memory would refuse it).
//   - Calls whose effect would differ on a shared file mapping, or survive fork() where the
//     heap's fork copy (below) would drop it: MADV_WIPEONFORK, MADV_DONTFORK, MADV_MERGEABLE,
//     MADV_HUGEPAGE, MADV_COLLAPSE, MADV_GUARD_INSTALL, any advice this library does not know,
//     any advice the kernel refuses on the shared range with EINVAL, mprotect() to anything but
//     PROT_READ|PROT_WRITE, pkey_mprotect(), mbind(), mremap(): the pages are first *withdrawn*
//     from the heap: replaced in place by private anonymous memory holding the same bytes
//     (the file mapped privately first, so that a concurrent write lands in a private copy,
//     then copied and moved in with mremap; mlock()ed pages locked again), punched from the
//     file, and marked in the heap's withdrawn table, so that neither
//     this process (contains()) nor a peer (range_withdrawn()) reads them through the file
//     again. Then the kernel's own call runs on private memory. Withdrawn pages go back to the
//     heap (the file mapped again, zeros) when their block is freed or jemalloc purges them.
//   - The rest (MADV_NORMAL ... MADV_WILLNEED, MADV_COLD, MADV_PAGEOUT, MADV_POPULATE_*,
//     MADV_DONTDUMP/DODUMP, MADV_KEEPONFORK, MADV_DOFORK, mlock*, msync, mincore, posix_madvise)
//     behaves alike on both kinds of memory and is not intercepted or passed through.
//   A raw syscall() (or a library that makes its own system calls) bypasses this: on a heap
//   range it then gets the shared mapping's answer.
//
// When the heap steps aside (status().reason says which)
//   - sanitizer builds (SHADDR_SANITIZE, or -fsanitize=address/thread/memory): the malloc
//     family is not defined at all, the sanitizer's allocator stays in charge;
//   - a program that brings its own allocator: at load, dlsym(RTLD_DEFAULT, "malloc") is not
//     this library's malloc (the executable, or a library before us in the lookup order,
//     defines it); then this malloc is never called by the program and the heap stays off.
//     One after us (a libjemalloc the program links, a tcmalloc preloaded after us): this
//     malloc family sends every call there (NextAllocator, heap_internal.h), so that its own
//     API (mallocx, then free) keeps working, and the heap stays off. Found at the first
//     malloc-family call, before any block is handed out;
//     A library that merely depends on libshaddr-heap and is preloaded comes after glibc in
//     that order: preload libshaddr-heap itself (the reason says so);
//   - memfd_create() or the reservation fails (seccomp, RLIMIT_NOFILE, RLIMIT_AS, ...).
//
// Limits
//   - A write by another parent thread *during* fork() (before it returns in the parent) may
//     or may not reach the child, page by page: the copy is not one atomic snapshot the way
//     the kernel's copy-on-write is.
//   - fork() costs a copy of the heap's resident data, where glibc's memory is copied on write
//     (docs/defaults.md has the cost). posix_spawn(), vfork(), system() and popen() run no fork
//     handlers and copy nothing. A raw clone()/_Fork() child without CLONE_VM shares the heap
//     with its parent until it execs. If the fork handler cannot make its pipe (no fds left), the
//     parent does not wait for the child's copy.
//   - realloc growing a block copies it where glibc may extend it in place or mremap it (a
//     heap file cannot move pages): once, into a growth block (heap_internal.h), then in place.
//   - A write by another thread to pages being withdrawn, during the withdraw's last step (the
//     copy of the pages written during the call, and the mremap), may be lost.
//   - memfd pages are shmem: not charged against strict overcommit (vm.overcommit_memory=2),
//     no transparent huge pages unless shmem_enabled allows them.
//   - The private jemalloc reads MALLOC_CONF like any jemalloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace shaddr::heap {

// SHADDR_HEAP_MIN's default (see above). libshaddr's selection assumes it: malloc'd buffers of
// this size and more are in the heap.
inline constexpr std::size_t kDefaultMinSize = 16 * 1024;

enum class Mode { off, automatic, mpi_alloc_only };

struct Status {
  bool on = false;          // the memfd heap exists and serves allocations
  Mode mode = Mode::off;    // SHADDR_HEAP as read
  const char *reason = "";  // why on or off, one line, valid for the life of the process
  int fd = -1;              // the memfd (MFD_CLOEXEC); -1 when off
  void *base = nullptr;     // start of the reserved range == offset 0 of the file
  std::size_t reserved = 0; // size of the reserved range (SHADDR_HEAP_MAX); map this much
  std::size_t min_size = 0; // malloc threshold (SHADDR_HEAP_MIN); 0 when malloc never routes
  std::size_t exhausted = 0; // times jemalloc asked for more than the range had left (those
                             // allocations went to the normal allocator)
};

// The withdrawn table: the first bytes of every heap file (so at base()), read by peers
// through their mapping. words[1] counts withdrawn pages (0: none, the common case: one load);
// bit p of the bitmap that starts at word kWithdrawnHeaderWords says page p of the range
// (file offset p << words[2]) is private to its owner now: not to be read through the file.
inline constexpr std::uint64_t kWithdrawnMagic = 0x7368616464724877ull;  // "shaddrHw"
inline constexpr std::size_t kWithdrawnHeaderWords = 4;  // magic, pages, lg page size, bits

// Bits lo..hi (inclusive, lo <= hi < 64) of a table word.
inline std::uint64_t withdrawn_bits(std::size_t lo, std::size_t hi) {
  return (hi == 63 ? ~std::uint64_t{0} : (std::uint64_t{2} << hi) - 1) & ~((std::uint64_t{1} << lo) - 1);
}

// Whether any byte of [off, off + len) of the heap file mapped at @file_map lies on a
// withdrawn page (heap.h above). len 0 is treated as 1.
inline bool range_withdrawn(const void *file_map, std::size_t off, std::size_t len) {
  const auto *w = static_cast<const std::uint64_t *>(file_map);
  if (__atomic_load_n(&w[1], __ATOMIC_ACQUIRE) == 0 || w[0] != kWithdrawnMagic) return false;
  const unsigned lg = static_cast<unsigned>(w[2]);
  const std::size_t first = off >> lg, last = (off + (len ? len : 1) - 1) >> lg;
  if (first >= w[3]) return false;
  const std::uint64_t *bits = w + kWithdrawnHeaderWords;
  for (std::size_t p = first; p <= last && p < w[3];) {
    const std::size_t word = p / 64, lo = p % 64;
    const std::size_t hi = last / 64 == word ? last % 64 : 63;
    if (__atomic_load_n(&bits[word], __ATOMIC_RELAXED) & withdrawn_bits(lo, hi)) return true;
    p = (word + 1) * 64;
  }
  return false;
}

// The heap's state; initialises it on first use (normally done at load).
Status status();
bool enabled();
int fd();
void *base();
std::size_t reserved_size();

// Offset in the heap file of [addr, addr + len) if all of it lies in the part of the heap
// handed out so far (below the file's size), else nullopt. len 0 is treated as 1.
std::optional<std::size_t> contains(const void *addr, std::size_t len);

// Allocation that comes from the heap whenever the heap is on (mpi-alloc-only included),
// whatever its size; from the normal allocator otherwise. Release with free() or
// shaddr::heap::release().
void *alloc(std::size_t size);
void release(void *p);

// A peer's side: maps the heap file @heap_fd (received over SCM_RIGHTS) whose owner reserved
// @reserved bytes (its reserved_size()), read-only unless @writable. The owner's heap address
// A is at map + (A - owner's base()). Pages the owner freed read as zero; reading beyond the
// owner's current file size raises SIGBUS (the owner's contains() keeps to the file). Returns
// nullptr with errno set on failure. Map once: the file grows under the mapping.
void *map_peer(int heap_fd, std::size_t reserved, bool writable = false);
void unmap_peer(void *map, std::size_t reserved);

// The heap file's current size (what a peer can read), and the bytes it holds in memory
// (st_blocks). For tests and statistics.
std::size_t file_size();
std::size_t file_resident();

// Returns every unused page of the heap to the system now (jemalloc's arena purge, which
// hole-punches), after giving back the blocks the calling thread's cache holds (up to 8 MiB
// each, its growth block and its last freed block below 1 MiB; other threads' caches go when
// those threads exit). Otherwise freed pages stay, as
// glibc keeps its heap's, until 1 GiB has been freed since the last purge and 10 s have passed.
void purge();

// How libshaddr finds the heap of its process without linking libshaddr-heap (which must come
// first in the symbol lookup order to be the malloc): dlsym(RTLD_DEFAULT, kApiSymbol), a
// function returning this table; no such symbol means no heap. An executable that links the
// heap's objects must export its dynamic symbols (-rdynamic) for the lookup to find it.
struct Api {
  unsigned version;  // kApiVersion
  Status (*status)();
  std::optional<std::size_t> (*contains)(const void *addr, std::size_t len);
  void *(*alloc)(std::size_t size);  // for MPI_Alloc_mem in an interposer
  void (*release)(void *p);          // for MPI_Free_mem
};
inline constexpr unsigned kApiVersion = 1;
inline constexpr const char kApiSymbol[] = "shaddr_heap_api_v1";

}  // namespace shaddr::heap

extern "C" const shaddr::heap::Api *shaddr_heap_api_v1();
