// SPDX-License-Identifier: MIT
// window: the module's process windows, as on Blue Gene/P's CNK. Each rank TRANSLATEs its whole
// address space once (one handle, the exporter's translation cached for the communicator's
// life); a reader MAPs the peer's block holding a range into one of its few slots (module
// parameter max_slots, default 3). Slots belong to the process, not to a peer, so one
// registration cache keyed by the peer's handle serves every peer: a hit costs nothing, a miss
// costs a MAP (and, when the slots are full, an UNMAP of the least recently used window no
// transfer holds). A range that crosses a block boundary cannot be one window: map() says
// -ENOSPC and the caller uses read(), which maps block by block. Reads map windows read-only,
// so a peer's read-only memory is a valid source; write() alone maps read-write. The cache's
// key carries the access (kWriteKey on the handle), so an entry serves only the access it was
// mapped for.
#include <cerrno>
#include <cstring>
#include <vector>

#include "backend.h"
#include "device.h"
#include "settings.h"

namespace shaddr {
namespace {

// Handles have bit 63 clear (uapi): in a cache key it marks a read-write window.
constexpr uint64_t kWriteKey = uint64_t{1} << 63;

struct Export {
  uint64_t handle;
  uint64_t base;
  uint64_t block;
  uint64_t nr_blocks;
};

class WindowBackend final : public Backend {
 public:
  WindowBackend(Device dev, const Export &mine) : dev_(std::move(dev)), mine_(mine) {}
  ~WindowBackend() override {
    cache_.reset();  // unmaps every window
    dev_.call(SHADDR_IOC_REVOKE, &mine_.handle);
  }
  const char *name() const override { return "window"; }
  BackendKind kind() const override { return BackendKind::kWindow; }
  size_t max_mappings() const override { return nr_slots_; }

  int connect(std::vector<Export> peers, int self, unsigned nr_slots) {
    peers_ = std::move(peers);
    self_ = self;
    nr_slots_ = nr_slots;
    RegCache::Limits lim;
    lim.granularity = mine_.block;
    lim.max_entries = nr_slots;
    cache_ = std::make_unique<RegCache>(
        lim,
        [this](uint64_t key, uintptr_t base, size_t len, void **local) {
          // base is block-aligned and len one block (map() refuses straddles).
          const Export *e = by_handle(key & ~kWriteKey);
          if (!e || len != e->block || base < e->base) return -EINVAL;
          shaddr_map m{};
          m.handle = e->handle;
          m.block = static_cast<uint32_t>((base - e->base) / e->block);
          m.prot = SHADDR_PROT_READ | (key & kWriteKey ? SHADDR_PROT_WRITE : 0);
          if ((base - e->base) / e->block >= e->nr_blocks) return -EFAULT;
          int err = dev_.call(SHADDR_IOC_MAP, &m);
          *local = reinterpret_cast<void *>(m.addr);
          return err;
        },
        [this](uint64_t, uintptr_t, size_t, void *local) {
          shaddr_unmap u{};
          u.addr = reinterpret_cast<uintptr_t>(local);
          dev_.call(SHADDR_IOC_UNMAP, &u);
        });
    return 0;
  }

  int map(int peer, uintptr_t addr, size_t len, RegCache::Ref *ref) override {
    return map_for(false, peer, addr, len, ref);
  }
  void unmap(int peer, const RegCache::Ref &ref) override {
    if (peer != self_ && ref.entry) cache_->release(ref);
  }
  const RegCacheStats *cache_stats(int peer) const override {
    if (peer < 0 || peer >= static_cast<int>(peers_.size())) return nullptr;
    return &cache_->stats();  // one cache for all peers
  }

  int read(int peer, uintptr_t addr, void *dst, size_t len) override {
    return transfer(peer, addr, static_cast<char *>(dst), len, false);
  }
  int write(int peer, uintptr_t addr, const void *src, size_t len) override {
    return transfer(peer, addr, static_cast<char *>(const_cast<void *>(src)), len, true);
  }

 private:
  int map_for(bool write, int peer, uintptr_t addr, size_t len, RegCache::Ref *ref) {
    if (peer < 0 || peer >= static_cast<int>(peers_.size()) || !ref || !len) return -EINVAL;
    if (peer == self_) {
      ref->ptr = reinterpret_cast<void *>(addr);
      ref->entry = 0;
      return 0;
    }
    const Export &e = peers_[peer];
    if (addr < e.base || addr + len < addr) return -EFAULT;
    if ((addr - e.base) % e.block + len > e.block) return -ENOSPC;  // two windows' worth
    return cache_->acquire(e.handle | (write ? kWriteKey : 0), addr, len, ref);
  }

  const Export *by_handle(uint64_t handle) const {
    for (const Export &e : peers_)
      if (e.handle == handle) return &e;
    return nullptr;
  }

  // Block by block through the cache: each piece is one window.
  int transfer(int peer, uintptr_t addr, char *local, size_t len, bool to_peer) {
    if (peer < 0 || peer >= static_cast<int>(peers_.size())) return -EINVAL;
    const uint64_t block = peers_[peer].block;
    while (len) {
      const size_t room = block - (addr - peers_[peer].base) % block;
      const size_t n = len < room ? len : room;
      RegCache::Ref ref;
      if (int err = map_for(to_peer, peer, addr, n, &ref)) return err;
      if (to_peer)
        std::memcpy(ref.ptr, local, n);
      else
        std::memcpy(local, ref.ptr, n);
      unmap(peer, ref);
      addr += n;
      local += n;
      len -= n;
    }
    return 0;
  }

  Device dev_;
  Export mine_;
  int self_ = -1;
  unsigned nr_slots_ = 1;
  std::vector<Export> peers_;
  std::unique_ptr<RegCache> cache_;
};

// SHADDR_WINDOW_SLOT: 1M, 16M or 256M (bytes or with a suffix); 0 = the module's default.
int slot_size_from_env(uint64_t *size) {
  SettingsReader in;
  *size = in.size("SHADDR_WINDOW_SLOT", 0);
  if (in.error()) return in.error();
  if (*size == 0 || *size == SHADDR_SLOT_1M || *size == SHADDR_SLOT_16M ||
      *size == SHADDR_SLOT_256M)
    return 0;
  return -EINVAL;
}

}  // namespace

int make_window_backend(const shaddr_host &host, std::unique_ptr<Backend> *out,
                        std::string *why) {
  Device dev;
  int err = dev.error();
  shaddr_version ver{};
  shaddr_query q{};
  uint64_t slot = 0;
  Export mine{};
  if (!err) err = dev.version(&ver);
  if (!err && (ver.abi_major != SHADDR_ABI_MAJOR || !(ver.features & SHADDR_FEAT_WINDOWS)))
    err = -EPROTO;
  if (!err) err = slot_size_from_env(&slot);
  if (!err && slot) err = dev.call(SHADDR_IOC_SET_SLOT_SIZE, &slot);
  if (!err) {
    // The whole (4-level) user address space: every buffer of this process, one handle.
    shaddr_translate t{};
    dev.call(SHADDR_IOC_QUERY, &q);
    t.va = 0;
    t.len = (uint64_t(1) << 47) - q.slot_size;
    t.prot = SHADDR_PROT_READ | SHADDR_PROT_WRITE;
    err = q.slot_size ? dev.call(SHADDR_IOC_TRANSLATE, &t) : -EPROTO;
    mine = {t.handle, t.base, t.block_size, t.nr_blocks};
  }
  if (int e = agree(host, err, why,
                    "the shaddr module (open /dev/shaddr, windows, SHADDR_WINDOW_SLOT, TRANSLATE)"))
    return e;
  std::vector<Export> all(host.size);
  if (int e = host.allgather(&mine, all.data(), sizeof(Export), host.ctx)) {
    *why = "allgather of window handles failed";
    return e;
  }
  // The cache rounds to this rank's block size; a peer's windows are its block size.
  err = 0;
  for (const Export &e : all)
    if (e.block != mine.block) err = -EINVAL;
  if (int e = agree(host, err, why, "equal window slot sizes (SHADDR_WINDOW_SLOT)")) return e;
  auto win = std::make_unique<WindowBackend>(std::move(dev), mine);
  win->connect(std::move(all), host.rank, q.nr_slots ? q.nr_slots : 1);
  *out = std::move(win);
  return 0;
}

}  // namespace shaddr
