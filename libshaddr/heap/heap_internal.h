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

// jemalloc on the heap's arena. Each returns nullptr when the heap is off or full; none sets
// errno. align 0: default alignment.
void *engine_alloc(std::size_t size, std::size_t align, bool zero);
void *engine_realloc(void *p, std::size_t size);  // p in the heap
void engine_free(void *p);                         // p in the heap
std::size_t engine_usable_size(const void *p);     // p in the heap

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
