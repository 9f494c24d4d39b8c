// SPDX-License-Identifier: MIT
// segment: every rank exports its whole address space as one shaddr segment (as MPI libraries
// do with XPMEM) and attaches peers' ranges on demand, through a registration cache per peer.
// Single copy, no help from the peer. Reads go through read-only attachments (an RDONLY access
// id), so a peer's read-only memory (.rodata, mprotect'ed or read-only file mappings) is a
// valid source; write() alone attaches read-write, through an RDWR access id got on its first
// use. The two access ids are the cache's keys: an entry serves only the access it was made for.
#include <cerrno>
#include <cstring>
#include <vector>

#include "backend.h"
#include "device.h"

namespace shaddr {
namespace {

// Attachments are cached in 2 MiB-aligned pieces: few attaches, and PMD-friendly.
constexpr size_t kGranularity = 2ul << 20;
constexpr size_t kEntriesPerPeer = 256;

class SegmentBackend final : public Backend {
 public:
  SegmentBackend(Device dev, uint64_t segid) : dev_(std::move(dev)), segid_(segid) {}
  ~SegmentBackend() override {
    caches_.clear();  // detaches everything
    for (const std::vector<uint64_t> &apids : apids_)
      for (uint64_t apid : apids)
        if (apid) dev_.call(SHADDR_IOC_RELEASE, &apid);
    dev_.call(SHADDR_IOC_REMOVE, &segid_);
  }
  const char *name() const override { return "segment"; }
  BackendKind kind() const override { return BackendKind::kSegment; }

  int connect(const std::vector<uint64_t> &segids, int self) {
    segids_ = segids;
    for (std::vector<uint64_t> &apids : apids_) apids.assign(segids.size(), 0);
    self_ = self;
    for (size_t r = 0; r < segids.size(); r++) {
      if (static_cast<int>(r) == self) continue;  // own memory needs no mapping
      uint64_t apid;
      if (int err = access(static_cast<int>(r), kRead, &apid)) return err;
    }
    for (size_t r = 0; r < segids.size(); r++) {
      RegCache::Limits lim;
      lim.granularity = kGranularity;
      lim.max_entries = kEntriesPerPeer;
      caches_.push_back(std::make_unique<RegCache>(
          lim,
          [this](uint64_t apid, uintptr_t base, size_t len, void **local) {
            shaddr_attach a{};
            a.apid = apid;
            a.offset = base;
            a.size = len;
            int err = dev_.call(SHADDR_IOC_ATTACH, &a);
            if (err == -EINVAL && base + len > base) err = -EFAULT;  // past the peer's space
            *local = reinterpret_cast<void *>(a.addr);
            return err;
          },
          [this](uint64_t, uintptr_t, size_t, void *local) {
            uint64_t addr = reinterpret_cast<uintptr_t>(local);
            dev_.call(SHADDR_IOC_DETACH, &addr);
          }));
    }
    return 0;
  }

  int map(int peer, uintptr_t addr, size_t len, RegCache::Ref *ref) override {
    return map_for(kRead, peer, addr, len, ref);
  }
  void unmap(int peer, const RegCache::Ref &ref) override {
    if (peer >= 0 && peer < static_cast<int>(caches_.size()) && peer != self_)
      caches_[peer]->release(ref);
  }
  const RegCacheStats *cache_stats(int peer) const override {
    if (peer < 0 || peer >= static_cast<int>(caches_.size())) return nullptr;
    return &caches_[peer]->stats();
  }

  int read(int peer, uintptr_t addr, void *dst, size_t len) override {
    RegCache::Ref ref;
    if (int err = map_for(kRead, peer, addr, len, &ref)) return err;
    std::memcpy(dst, ref.ptr, len);
    unmap(peer, ref);
    return 0;
  }
  int write(int peer, uintptr_t addr, const void *src, size_t len) override {
    RegCache::Ref ref;
    if (int err = map_for(kWrite, peer, addr, len, &ref)) return err;
    std::memcpy(ref.ptr, src, len);
    unmap(peer, ref);
    return 0;
  }

 private:
  enum Access { kRead, kWrite };

  // The access id of peer's segment for `how`, got on first use.
  int access(int peer, Access how, uint64_t *apid) {
    uint64_t &id = apids_[how][peer];
    if (!id) {
      shaddr_get g{};
      g.segid = segids_[peer];
      g.flags = how == kWrite ? SHADDR_SEG_RDWR : SHADDR_SEG_RDONLY;
      if (int err = dev_.call(SHADDR_IOC_GET, &g)) return err;
      id = g.apid;
    }
    *apid = id;
    return 0;
  }

  int map_for(Access how, int peer, uintptr_t addr, size_t len, RegCache::Ref *ref) {
    if (peer < 0 || peer >= static_cast<int>(caches_.size()) || !ref) return -EINVAL;
    if (peer == self_) {
      ref->ptr = reinterpret_cast<void *>(addr);
      ref->entry = 0;
      return 0;
    }
    uint64_t apid;
    if (int err = access(peer, how, &apid)) return err;
    return caches_[peer]->acquire(apid, addr, len, ref);
  }

  Device dev_;
  uint64_t segid_;
  int self_ = -1;
  std::vector<uint64_t> segids_;
  std::vector<uint64_t> apids_[2];  // [Access][peer]; 0 until got
  std::vector<std::unique_ptr<RegCache>> caches_;
};

}  // namespace

int make_segment_backend(const shaddr_host &host, std::unique_ptr<Backend> *out,
                         std::string *why) {
  Device dev;
  int err = dev.error();
  shaddr_version ver{};
  shaddr_make mk{};
  if (!err) err = dev.version(&ver);
  if (!err && (ver.abi_major != SHADDR_ABI_MAJOR || !(ver.features & SHADDR_FEAT_SEGMENTS)))
    err = -EPROTO;
  if (!err) {
    mk.va = 0;
    mk.size = ~0ull;
    mk.mode = 0600;  // same user only; the module also applies the ptrace-attach rule
    err = dev.call(SHADDR_IOC_MAKE, &mk);
  }
  if (int e = agree(host, err, why, "the shaddr module (open /dev/shaddr, segments, MAKE)"))
    return e;

  std::vector<uint64_t> segids(host.size);
  if (int e = host.allgather(&mk.segid, segids.data(), sizeof(uint64_t), host.ctx)) {
    *why = "allgather of segids failed";
    return e;
  }
  auto seg = std::make_unique<SegmentBackend>(std::move(dev), mk.segid);
  err = seg->connect(segids, host.rank);
  if (int e = agree(host, err, why, "GET of a peer's segment")) return e;
  *out = std::move(seg);
  return 0;
}

}  // namespace shaddr
