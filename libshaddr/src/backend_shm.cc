// SPDX-License-Identifier: MIT
// shm: copy-in/copy-out through staging areas in one region shared by the node, for machines
// where neither the module nor CMA can be used. expose() copies the owner's final data into its
// staging area; readers map (a plain pointer, no system call) or copy straight out of it. Two
// copies per transfer, as MPI's own shared-memory path, but with the collectives' pipelining and
// no help from the owner after it staged. Writes into a peer's memory are not possible.
// Each rank's staging area prefers the NUMA node the rank is bound inside (docs/topology.md,
// "Placement"): it writes the area once per exposure, and its node's readers read it.
#include <cerrno>
#include <cstring>
#include <vector>

#include "backend.h"
#include "placement.h"
#include "settings.h"
#include "shared_region.h"

namespace shaddr {
namespace {

constexpr size_t kDefaultStaging = size_t(256) << 20;
constexpr size_t kAlign = 64;  // exposures start on cache lines; offset 0 is never handed out

class ShmBackend final : public Backend {
 public:
  ShmBackend(std::unique_ptr<SharedRegion> region, int self, int size, size_t staging)
      : region_(std::move(region)), self_(self), size_(size), staging_(staging) {}
  const char *name() const override { return "shm"; }
  BackendKind kind() const override { return BackendKind::kShm; }
  bool stages() const override { return true; }

  int map(int peer, uintptr_t addr, size_t len, RegCache::Ref *ref) override {
    if (peer < 0 || peer >= size_ || !ref || !len) return -EINVAL;
    if (addr > staging_ || len > staging_ - addr) return -EFAULT;  // not an exposure
    ref->ptr = area(peer) + addr;
    ref->entry = 0;
    return 0;
  }
  int read(int peer, uintptr_t addr, void *dst, size_t len) override {
    RegCache::Ref ref;
    if (!len) return peer < 0 || peer >= size_ ? -EINVAL : 0;
    if (int err = map(peer, addr, len, &ref)) return err;
    std::memcpy(dst, ref.ptr, len);
    return 0;
  }
  int write(int peer, uintptr_t, const void *, size_t) override {
    return peer < 0 || peer >= size_ ? -EINVAL : -ENOTSUP;
  }

  int expose(const void *buf, size_t len, uintptr_t *remote) override {
    const size_t at = (used_ + kAlign - 1) / kAlign * kAlign;
    if (at > staging_ || len > staging_ - at) return -ENOBUFS;
    std::memcpy(area(self_) + at, buf, len);
    *remote = at;
    used_ = at + len;
    return 0;
  }
  void end_exposures() override { used_ = kAlign; }

 private:
  char *area(int r) const {
    return static_cast<char *>(region_->base()) + static_cast<size_t>(r) * staging_;
  }
  std::unique_ptr<SharedRegion> region_;
  int self_, size_;
  size_t staging_;
  size_t used_ = kAlign;
};

}  // namespace

int make_shm_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *why) {
  SettingsReader in;
  size_t staging = in.size("SHADDR_SHM_STAGING", kDefaultStaging);
  if (in.error()) {
    *why = in.why();
    return in.error();
  }
  staging = (staging + 4095) / 4096 * 4096;
  // The region's layout depends on it: every rank must use the same size.
  std::vector<size_t> all(host.size);
  if (int err = host.allgather(&staging, all.data(), sizeof(staging), host.ctx)) {
    *why = "allgather of SHADDR_SHM_STAGING failed";
    return err;
  }
  int err = 0;
  for (size_t s : all)
    if (s != staging) err = -EINVAL;
  if (staging < 4096 || staging > (size_t(1) << 40) / static_cast<size_t>(host.size))
    err = -EINVAL;
  if (int e = agree(host, err, why, "SHADDR_SHM_STAGING (equal on every rank, 4 KiB to 1 TiB in all)"))
    return e;
  std::unique_ptr<SharedRegion> region;
  if (int e = SharedRegion::create(host, staging * host.size, nullptr, &region, why)) return e;
  // Before the owner's first exposure touches it. A failure only leaves its pages to first
  // touch, by the owner, which lands on the same node while the rank stays bound.
  if (const int node = own_numa_node(); node >= 0)
    (void)prefer_numa_node(static_cast<char *>(region->base()) + host.rank * staging, staging,
                           node);
  *out = std::make_unique<ShmBackend>(std::move(region), host.rank, host.size, staging);
  return 0;
}

}  // namespace shaddr
