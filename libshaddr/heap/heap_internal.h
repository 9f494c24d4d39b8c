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

}  // namespace shaddr::heap::detail
