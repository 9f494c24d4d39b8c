// SPDX-License-Identifier: MIT
// heap: a layer over the backend chosen as always (segment, window, cma, shm). A transfer whose
// peer range lies inside that peer's heap file (libshaddr/heap: the memory behind its malloc of
// SHADDR_HEAP_MIN bytes or more, and MPI_Alloc_mem), mapped here once by heap_share.cc, is a
// pointer into that mapping: no system call, no registration cache, no ptrace rights.
// Everything else (stack, static data, the program's own mmap, ranks whose heap is off) goes to
// the inner backend unchanged. Decided per transfer, by address: an owner's heap is used only
// if every peer maps it, so owner and readers agree on the path of every exposure.
//
// Pages the owner withdrew from its heap (a call such as mprotect or MADV_WIPEONFORK that
// shared memory would answer differently made them private: heap.h) are marked in the table at
// the start of its file; a transfer that touches one goes to the inner backend, on the owner's
// side (contains()) and here alike.
//
// Reads only: the peers' heaps are mapped read-only, so write() goes to the inner backend.
// A read beyond the file's size as last seen looks again (fstat) before it is taken for a heap
// read, so an address in the reserved range that the owner never handed out is not a SIGBUS
// here but the inner backend's error.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "../heap/heap.h"
#include "backend.h"
#include "heap_share.h"

namespace shaddr {
namespace {

// shm hands out offsets in its staging areas (below 1 TiB in all, backend_shm.cc): a heap
// below that could not be told from them.
constexpr uintptr_t kStagingOffsetLimit = uintptr_t(1) << 40;

class HeapBackend final : public Backend {
 public:
  HeapBackend(std::unique_ptr<Backend> inner, HeapShare share, int self)
      : inner_(std::move(inner)), share_(std::move(share)), self_(self),
        name_(std::string("heap+") + inner_->name()) {
    for (const PeerHeap &h : share_.heaps) stats_.peers += h.map && !h.own;
  }
  ~HeapBackend() override { release_heaps(&share_); }

  const char *name() const override { return name_.c_str(); }
  BackendKind kind() const override { return inner_->kind(); }

  int map(int peer, uintptr_t addr, size_t len, RegCache::Ref *ref) override {
    if (const char *p = in_heap(peer, addr, len); p && ref) {
      ref->ptr = const_cast<char *>(p);
      ref->entry = 0;
      count(peer, len);
      return 0;
    }
    return inner_->map(peer, addr, len, ref);
  }
  void unmap(int peer, const RegCache::Ref &ref) override {
    if (valid(peer)) {
      const PeerHeap &h = share_.heaps[peer];
      const char *p = static_cast<const char *>(ref.ptr);
      if (h.map && p >= h.map && p < h.map + h.reserved) return;  // a heap pointer: nothing held
    }
    inner_->unmap(peer, ref);
  }
  int read(int peer, uintptr_t addr, void *dst, size_t len) override {
    if (const char *p = len ? in_heap(peer, addr, len) : nullptr) {
      std::memcpy(dst, p, len);
      count(peer, len);
      return 0;
    }
    return inner_->read(peer, addr, dst, len);
  }
  int write(int peer, uintptr_t addr, const void *src, size_t len) override {
    return inner_->write(peer, addr, src, len);
  }
  const RegCacheStats *cache_stats(int peer) const override { return inner_->cache_stats(peer); }

  // A buffer in this rank's shared heap is read by the peers where it is: nothing to pin,
  // register or stage.
  int expose(const void *buf, size_t len, uintptr_t *remote) override {
    if (in_heap(self_, reinterpret_cast<uintptr_t>(buf), len)) {
      *remote = reinterpret_cast<uintptr_t>(buf);
      stats_.exposures++;
      return 0;
    }
    return inner_->expose(buf, len, remote);
  }
  void end_exposures() override { inner_->end_exposures(); }
  bool stages() const override { return inner_->stages(); }
  size_t max_mappings() const override { return inner_->max_mappings(); }
  const HeapStats *heap_stats() const override { return &stats_; }

 private:
  bool valid(int peer) const { return peer >= 0 && static_cast<size_t>(peer) < share_.heaps.size(); }

  // Where [addr, addr + len) of peer's address space is mapped here, if it lies in the peer's
  // shared heap file; else nullptr.
  const char *in_heap(int peer, uintptr_t addr, size_t len) {
    if (!valid(peer)) return nullptr;
    PeerHeap &h = share_.heaps[peer];
    if (!h.map || addr < h.base) return nullptr;
    const size_t off = addr - h.base, n = len ? len : 1;
    if (off >= h.reserved || n > h.reserved - off) return nullptr;
    if (off + n > h.readable) {  // the file grew since, or this is not a heap buffer
      struct stat sb;
      if (fstat(h.fd, &sb) != 0) return nullptr;
      h.readable = static_cast<size_t>(sb.st_size);
      if (off + n > h.readable) return nullptr;
    }
    // Pages the owner withdrew from its heap (heap.h) hold its data elsewhere now.
    if (heap::range_withdrawn(h.map, off, n)) return nullptr;
    return h.map + off;
  }
  void count(int peer, size_t len) {
    if (peer == self_) return;
    stats_.transfers++;
    stats_.bytes += len;
  }

  std::unique_ptr<Backend> inner_;
  HeapShare share_;
  int self_;
  std::string name_;
  HeapStats stats_;
};

}  // namespace

int add_heap_layer(const shaddr_host &host, std::unique_ptr<Backend> *be, std::string *note) {
  HeapShare share;
  const uintptr_t low = (*be)->stages() ? kStagingOffsetLimit : 0;
  if (int err = share_heaps(host, low, &share)) {
    *note = "heap: the exchange's allgather failed";
    return err;
  }
  *note = share.summary;
  if (share.shared == 0) return 0;
  *be = std::make_unique<HeapBackend>(std::move(*be), std::move(share), host.rank);
  return 0;
}

}  // namespace shaddr
