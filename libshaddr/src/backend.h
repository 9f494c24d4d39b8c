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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char *name() const = 0;

  // A pointer to [addr, addr + len) of peer's address space, held until unmap(). -ENOTSUP if
  // this backend only copies; -ENOSPC if the range cannot be mapped now (every mapping in use,
  // or it would need two windows): the caller copies with read() instead.
  virtual int map(int peer, uintptr_t addr, size_t len, RegCache::Ref *ref);
  virtual void unmap(int peer, const RegCache::Ref &ref);

  // Copy len bytes from/to peer's address addr. 0 or a negative errno.
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
};

// Each factory is collective over host: it returns 0 and the backend on every rank, or the same
// negative errno on every rank with *why saying what failed (and on which rank).
int make_segment_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *why);
int make_cma_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *why);
int make_window_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *why);
int make_shm_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *why);

// SHADDR_BACKEND (segment, window, cma, shm, auto; default auto: the best that works here,
// in that order). Collective.
// *reason says what was chosen and why the better ones were not.
int select_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *reason);

// Helpers for the factories: agree on success across the node.
int agree(const shaddr_host &host, int local_err, std::string *why, const char *what);

}  // namespace shaddr
