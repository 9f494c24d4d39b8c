// SPDX-License-Identifier: MIT
// MPI_Alloc_mem and MPI_Free_mem: memory from the shared heap whenever it is on (with
// SHADDR_HEAP=mpi-alloc-only, only MPI_Alloc_mem's), so peers read it in place. The heap is
// libshaddr-heap.so, preloaded by shaddr-run; absent, MPI's own allocation. Not exported as
// PMPI_*: the heap's memory is the interposer's to give, the MPI's own calls take theirs.
#include <dlfcn.h>
#include <mpi.h>

#include <cstddef>

#include "heap.h"

namespace {

// libshaddr-heap's table, looked up once (nullptr: not loaded).
const shaddr::heap::Api *heap_api() {
  static const shaddr::heap::Api *api = [] {
    using Fn = const shaddr::heap::Api *(*)();
    auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, shaddr::heap::kApiSymbol));
    const shaddr::heap::Api *a = fn ? fn() : nullptr;
    return a && a->version == shaddr::heap::kApiVersion ? a : nullptr;
  }();
  return api;
}

}  // namespace

// The MPI_* definitions are this library's interface (MPICH's mpi.h does not mark them
// visible, and the library is built with hidden visibility).
#pragma GCC visibility push(default)
extern "C" {

int MPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr) {
  const shaddr::heap::Api *api = heap_api();
  if (!api || size < 0 || !api->status().on) return PMPI_Alloc_mem(size, info, baseptr);
  void *p = api->alloc(size ? static_cast<size_t>(size) : 1);
  if (!p) return PMPI_Alloc_mem(size, info, baseptr);  // heap full: MPI's memory, still valid
  *static_cast<void **>(baseptr) = p;
  return MPI_SUCCESS;
}

int MPI_Free_mem(void *base) {
  const shaddr::heap::Api *api = heap_api();
  if (api && base && api->contains(base, 1)) {
    api->release(base);
    return MPI_SUCCESS;
  }
  return PMPI_Free_mem(base);
}

}  // extern "C"
#pragma GCC visibility pop
