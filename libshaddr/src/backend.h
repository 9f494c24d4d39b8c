// SPDX-License-Identifier: MIT
// Backends: how one rank reaches another rank's memory on the node. Two primitives — map a
// peer's range and return a pointer (where the backend can), and copy from/to a peer's range
// (always). Chosen collectively, so every rank of a node uses the same one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "regcache.h"
#include "shaddr/host.h"

namespace shaddr {

// What the heap layer (backend_heap.cc) did; shaddr_comm_stats' heap_* fields.
struct HeapStats {
  uint64_t transfers = 0;  // reads and mappings of peers' memory served from their heap files
  uint64_t bytes = 0;      // bytes of them
  uint64_t exposures = 0;  // this rank's buffers exposed from its heap (no inner exposure)
  uint64_t peers = 0;      // peers whose heap this rank maps
};

// How a backend reaches peers' memory; the heap layer (heap_stats() != nullptr) reports the
// backend under it.
enum class BackendKind : uint8_t { kSegment, kWindow, kCma, kShm };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char *name() const = 0;
  virtual BackendKind kind() const = 0;

  // A pointer to [addr, addr + len) of peer's address space, for reading only (the module's
  // backends map it read-only, so the peer's read-only memory is a valid source), held until
  // unmap(). -ENOTSUP if this backend only copies; -ENOSPC if the range cannot be mapped now
  // (every mapping in use, or it would need two windows): the caller copies with read()
  // instead.
  virtual int map(int peer, uintptr_t addr, size_t len, RegCache::Ref *ref);
  virtual void unmap(int peer, const RegCache::Ref &ref);

  // Copy len bytes from/to peer's address addr. 0 or a negative errno. Only write() asks for
  // write access to the peer's memory, and only where the peer itself may write.
  virtual int read(int peer, uintptr_t addr, void *dst, size_t len) = 0;
  virtual int write(int peer, uintptr_t addr, const void *src, size_t len) = 0;

  // The registration cache of a peer, if the backend maps.
  virtual const RegCacheStats *cache_stats(int peer) const;

  // Owner side: make [buf, buf + len) readable by peers for the current collective and return
  // in *remote the address peers pass to read()/map(). Backends that reach peers' memory
  // directly return buf itself (the default); shm copies the data into this rank's staging
  // area and returns its offset there, so the data must be final before expose() is called.
  // -ENOBUFS if the staging area is too small.
  virtual int expose(const void *buf, size_t len, uintptr_t *remote);
  // Owner side: the collective is over on every rank; exposures may be reused.
  virtual void end_exposures();
  // True if expose() copies (the algorithms then avoid exposing what they need not).
  virtual bool stages() const { return false; }
  // How many peer mappings it holds at once (window: its slots). An algorithm that reads every
  // peer in turn unmaps and maps on every read beyond this; a ring reads one peer instead.
  virtual size_t max_mappings() const { return SIZE_MAX; }
  // The heap layer's counters; nullptr for the other backends.
  virtual const HeapStats *heap_stats() const { return nullptr; }
};

// Each factory is collective over host: it returns 0 and the backend on every rank, or the same
// negative errno on every rank with *why saying what failed (and on which rank).
int make_segment_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *why);
int make_cma_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *why);
int make_window_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *why);
int make_shm_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *why);

// The heap layer: where some rank's heap (libshaddr/heap) is on and every peer maps it
// (heap_share.h), replaces *be by a backend that reads peers' heap buffers through those
// mappings and hands everything else to *be; else leaves *be. *note says what is on and why
// not elsewhere. Collective; 0, or the error of a failed allgather.
int add_heap_layer(const shaddr_host &host, std::unique_ptr<Backend> *be, std::string *note);

// SHADDR_BACKEND (segment, window, cma, shm, auto; default auto: the best that works here,
// in that order), then the heap layer over it. Collective.
// *reason says what was chosen and why the better ones were not, and where the heap is on.
int select_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *reason);

// Helpers for the factories: agree on success across the node.
int agree(const shaddr_host &host, int local_err, std::string *why, const char *what);

}  // namespace shaddr
