// Between the heap engine (heap.cc: settings, memfd, jemalloc arena, fork) and the malloc
// family (malloc.cc: routing). Not installed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace shaddr::heap::detail {

// Read on every malloc/free without a lock; written once, before any heap pointer exists.
// g_route_min: malloc-family requests of this many bytes or more go to the heap
// (SIZE_MAX: none). [g_base, g_base + g_size): the reserved range (size 0: no heap).
extern std::atomic<std::size_t> g_route_min;
extern std::atomic<std::uintptr_t> g_base;
extern std::atomic<std::size_t> g_size;

inline bool in_heap(const void *p) {
  return reinterpret_cast<std::uintptr_t>(p) - g_base.load(std::memory_order_relaxed) <
         g_size.load(std::memory_order_relaxed);
}

// The allocator behind this malloc family when the heap does not take a request: glibc's
// (nullptr), or the one the program brings after libshaddr-heap in the lookup order (a
// libjemalloc it links, a preloaded tcmalloc): then the heap is off and every call goes there.
struct NextAllocator {
  void *(*malloc)(std::size_t);
  void (*free)(void *);
  void *(*calloc)(std::size_t, std::size_t);
  void *(*realloc)(void *, std::size_t);
  void *(*memalign)(std::size_t, std::size_t);
  std::size_t (*usable_size)(void *);
};
extern std::atomic<const NextAllocator *> g_next;
// glibc's malloc_usable_size when g_next is nullptr (this library defines the name; looked up
// behind it with g_next).
extern std::atomic<std::size_t (*)(void *)> g_libc_usable_size;

// Whether the heap has started: g_next is published (release) before it is set. The malloc
// family starts the heap at its first call, so that it knows which allocator to use before it
// hands out any block (a library's constructor may allocate before this library's runs).
// start() returns at once in the thread that is starting the heap (its own allocations while
// it looks the allocators up go to glibc); another thread waits until g_next is known.
extern std::atomic<bool> g_started;
void start();
inline void started() {
  if (__builtin_expect(!g_started.load(std::memory_order_acquire), 0)) start();
}

// jemalloc on the heap's arena. Each returns nullptr when the heap is off or full; none sets
// errno. align 0: default alignment.
void *engine_alloc(std::size_t size, std::size_t align, bool zero);
void *engine_realloc(void *p, std::size_t size);  // p in the heap
// Resizes p (in the heap) where it is to at least size bytes, and up to size + extra if
// there is room; false if not even size fits there (p unchanged).
bool engine_grow_in_place(void *p, std::size_t size, std::size_t extra);
void engine_free(void *p);                         // p in the heap
void engine_free_sized(void *p, std::size_t usable);  // the same, @usable its usable size
// Growth blocks, for realloc (malloc.cc): glibc grows a block in place at the top of its heap,
// so a buffer doubled from 16 KiB to 64 MiB is never copied. A heap block cannot take its
// neighbour's file pages, and jemalloc grows one in place only when the next extent is free
// (rarely: thread caches hold the neighbours). So a block that must move to grow moves once,
// into a growth block: grow_block_size() bytes (64 MiB, at most 1/64 of the range), whose pages
// cost nothing until written. Freed, it waits in a one-block cache of the freeing thread (as
// glibc's top keeps its pages) for that thread's next growing buffer, without the arena, or
// for its next new block below 1 MiB (engine_lend_grow_block), which then never moves.
std::size_t grow_block_size();           // 0: none (heap off)
void *engine_grow_block(std::size_t n);  // nullptr if n does not fit one, or too many exist
// If @p (in the heap, @usable bytes) is a growth block: keeps it in this thread's cache, or
// frees it if the cache is full, and returns true.
bool engine_release_grow_block(void *p, std::size_t usable);
// Growth block @p was resized in place to @n bytes (realloc): the most of it in use so far.
void engine_grow_block_resized(void *p, std::size_t n);
// A new allocation of @n bytes (malloc) starts in this thread's cached growth block, as glibc
// places it at the top of its heap, where it can grow without a copy; nullptr unless one is
// cached, it was never grown past 1 MiB (so that a block lent and kept holds at most that much
// resident memory), n is no more, and at most half of the growth blocks allowed exist (the
// others stay for growing buffers).
void *engine_lend_grow_block(std::size_t n);
// The thread's slot: the last block below 1 MiB it freed, for its next allocation of about
// that size (heap.cc says why). take: the block if it holds @n bytes and is at most one size
// class more, else nullptr; put: keeps @p (@usable bytes) there, giving the previous one to
// the arena, or false (too large, or no slot).
void *engine_slot_take(std::size_t n);
bool engine_slot_put(void *p, std::size_t usable);
// @n bytes of heap blocks were freed: now and then, the arena's free pages go back (heap.cc).
void note_freed(std::size_t n);
std::size_t engine_usable_size(const void *p);     // p in the heap

// Pages a program withdrew from the heap (memops.cc, heap.h "Private-anonymous semantics"):
// their count in this process (0: none, the fast paths' one load).
extern std::atomic<std::size_t> g_withdrawn;

// The heap's page lock (heap.cc's g.mu): memops.cc classifies a range and acts on it (punch,
// withdraw, the kernel's call) in one critical section, so that no other thread withdraws or
// gives back its pages in between. Never held across a jemalloc call.
void lock_pages();
void unlock_pages();
struct PagesLock {
  PagesLock() { lock_pages(); }
  ~PagesLock() { unlock_pages(); }
  PagesLock(const PagesLock &) = delete;
  PagesLock &operator=(const PagesLock &) = delete;
};

// The kernel's own calls, for this library's code (it defines madvise and mremap itself).
int raw_madvise(void *addr, std::size_t len, int advice);
void *raw_mremap(void *old, std::size_t old_len, std::size_t new_len, int flags, void *new_addr);

// What the pages of an address range are: not the heap's file (outside the range handed out,
// the table, or the heap off or private to a fork child), the heap's shared file pages, or
// withdrawn ones (private anonymous memory now).
enum class Pages { other, shared, withdrawn };
// The kind of the page at @a (page aligned), and the end of its run of that kind, at most @e.
std::uintptr_t page_run(std::uintptr_t a, std::uintptr_t e, Pages *kind);
// Hole-punches [a, e) of the heap file (page aligned): zeros here and in peers' mappings.
bool punch_range(std::uintptr_t a, std::uintptr_t e);
// Moves the shared pages of [a, e) (page aligned) out of the heap: private anonymous memory
// with the same bytes in their place (mlock()ed where they were), the file's copy punched,
// marked withdrawn. false with errno (ENOMEM) if that could not be done; pages done so far
// stay withdrawn. Called with the PagesLock held.
bool withdraw_range(std::uintptr_t a, std::uintptr_t e);
// Gives the withdrawn pages within [a, e) back to the heap: the file mapped again (zeros).
// Takes the PagesLock only if a page of the range is withdrawn.
void restore_range(std::uintptr_t a, std::uintptr_t e);
// Whether [p, p + len) of the heap holds a withdrawn page (lock-free: the table's bits).
bool block_withdrawn(const void *p, std::size_t len);

// The settings grammar of libshaddr's registry (libshaddr/src/settings.h), without malloc:
// surrounding blanks ignored; a size is digits (0x hex, a leading 0 octal, as strtoull) and at
// most one K, M, G or T (binary, any case), within [lo, hi]; a choice one of the
// space-separated words; a boolean 0/1, no/yes, false/true, off/on (any case). The unit
// test HeapSettings.GrammarIsTheRegistrys compares them with parse_setting().
bool parse_size_setting(const char *text, std::uint64_t lo, std::uint64_t hi, std::uint64_t *out);
int parse_choice_setting(const char *text, const char *words);  // the word's index, or -1
int parse_bool_setting(const char *text);                        // 0, 1, or -1
// What settings_table.cc declares for them (the test checks the two agree).
inline constexpr const char *kHeapModes = "auto off mpi-alloc-only";
inline constexpr std::uint64_t kHeapMinLo = 0, kHeapMinHi = UINT64_MAX;
inline constexpr std::uint64_t kHeapMaxLo = std::uint64_t{2} << 20, kHeapMaxHi = std::uint64_t{64} << 40;

}  // namespace shaddr::heap::detail
