// SPDX-License-Identifier: MIT
#include "nodeblock.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>

#include "backend.h"  // agree()

namespace shaddr {
namespace {

constexpr uint64_t kMagic = 0x5348414444524e42ull;  // "SHADDRNB"

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

size_t total_bytes(int n, const NodeBlockConfig &c) {
  const size_t fifo = round_up(Fifo::bytes_for(c.fifo_slots, c.fifo_payload), 128);
  return 128 + n * (sizeof(RankArea) + sizeof(MsgCounter)) + fifo * (1 + n) +
         round_up(static_cast<size_t>(n) * 2 * c.reduce_slot_bytes, 128);
}

struct Share {
  pid_t pid;
  int fd;
  char shm_name[48];
};

}  // namespace

void NodeBlock::layout(char *base, bool init) {
  const size_t fifo = round_up(Fifo::bytes_for(cfg_.fifo_slots, cfg_.fifo_payload), 128);
  char *p = base + 128;
  areas_ = reinterpret_cast<RankArea *>(p);
  p += size_ * sizeof(RankArea);
  counters_ = reinterpret_cast<MsgCounter *>(p);
  p += size_ * sizeof(MsgCounter);
  bcast_ = std::make_unique<Fifo>(p, cfg_.fifo_slots, cfg_.fifo_payload);
  p += fifo;
  for (int r = 0; r < size_; r++, p += fifo)
    p2p_.push_back(std::make_unique<Fifo>(p, cfg_.fifo_slots, cfg_.fifo_payload));
  reduce_ = p;
  if (!init) return;
  for (int r = 0; r < size_; r++) {
    new (&areas_[r]) RankArea{};
    new (&counters_[r]) MsgCounter{};
  }
  bcast_->init();
  for (auto &f : p2p_) f->init();
  std::memcpy(base, &kMagic, sizeof(kMagic));
}

int NodeBlock::create(const shaddr_host &host, const NodeBlockConfig &cfg,
                      std::unique_ptr<NodeBlock> *out, std::string *why) {
  std::unique_ptr<NodeBlock> nb(new NodeBlock);
  nb->rank_ = host.rank;
  nb->size_ = host.size;
  nb->cfg_ = cfg;
  nb->bytes_ = total_bytes(host.size, cfg);

  // Rank 0 makes the segment.
  Share mine{getpid(), -1, {}};
  int err = 0;
  if (host.rank == 0) {
    mine.fd = memfd_create("shaddr-node", MFD_CLOEXEC);
    if (mine.fd < 0) {
      std::snprintf(mine.shm_name, sizeof(mine.shm_name), "/shaddr-%d-%llx", getpid(),
                    static_cast<unsigned long long>(std::random_device{}()));
      mine.fd = shm_open(mine.shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (mine.fd < 0 || ftruncate(mine.fd, nb->bytes_)) err = -errno;
  }
  if (int e = agree(host, err, why, "creating the node control block")) return e;
  std::vector<Share> all(host.size);
  if (int e = host.allgather(&mine, all.data(), sizeof(Share), host.ctx)) return e;
  const Share &owner = all[0];

  // Everyone maps it: rank 0 its own fd, the others through /proc (or by name).
  int fd = host.rank == 0 ? mine.fd : -1;
  nb->how_ = owner.shm_name[0] ? "shm_open" : "memfd";
  if (host.rank != 0) {
    if (owner.shm_name[0]) {
      fd = shm_open(owner.shm_name, O_RDWR | O_CLOEXEC, 0);
    } else {
      char path[64];
      std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", owner.pid, owner.fd);
      fd = open(path, O_RDWR | O_CLOEXEC);
    }
  }
  err = fd < 0 ? -errno : 0;
  if (!err) {
    nb->map_ = mmap(nullptr, nb->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (nb->map_ == MAP_FAILED) {
      nb->map_ = nullptr;
      err = -errno;
    }
  }
  if (host.rank != 0 && fd >= 0) close(fd);
  if (host.rank == 0 && !err) nb->layout(static_cast<char *>(nb->map_), true);
  // After this, everyone has it mapped: rank 0's descriptor and the name (if any) can go.
  int agreed = agree(host, err, why, "attaching the node control block");
  if (host.rank == 0) {
    if (fd >= 0) close(fd);
    if (owner.shm_name[0]) shm_unlink(owner.shm_name);
  }
  if (agreed) return agreed;
  if (host.rank != 0) {
    uint64_t magic;
    std::memcpy(&magic, nb->map_, sizeof(magic));
    if (magic != kMagic) err = -EPROTO;
    else nb->layout(static_cast<char *>(nb->map_), false);
  }
  if (int e = agree(host, err, why, "checking the node control block")) return e;
  *out = std::move(nb);
  return 0;
}

NodeBlock::~NodeBlock() {
  if (map_) munmap(map_, bytes_);
}

}  // namespace shaddr
