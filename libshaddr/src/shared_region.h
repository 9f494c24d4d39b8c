// SPDX-License-Identifier: MIT
// A memory region shared by the ranks of a node: rank 0 creates it, everyone maps it, and the
// descriptor and any name are dropped as soon as all have it mapped, so nothing is left in
// /dev/shm when a rank crashes. Used by the node control block and by the shm backend's staging.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "shaddr/host.h"

namespace shaddr {

class SharedRegion {
 public:
  // Collective. init(base) runs on rank 0 after it maps the region and before any other rank
  // returns. Tries an anonymous memfd (peers open it through /proc/<pid>/fd), then a randomly
  // named POSIX shm object if some rank could not open the memfd. 0 or the same negative errno
  // on every rank; *why says what failed and where.
  static int create(const shaddr_host &host, size_t bytes,
                    const std::function<void(void *)> &init, std::unique_ptr<SharedRegion> *out,
                    std::string *why);
  ~SharedRegion();
  SharedRegion(const SharedRegion &) = delete;
  SharedRegion &operator=(const SharedRegion &) = delete;

  void *base() const { return base_; }
  size_t bytes() const { return bytes_; }
  const char *how() const { return how_; }  // "memfd" or "shm_open"

 private:
  SharedRegion() = default;
  void *base_ = nullptr;
  size_t bytes_ = 0;
  const char *how_ = "";
};

}  // namespace shaddr
