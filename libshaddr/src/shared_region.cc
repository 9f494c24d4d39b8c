// SPDX-License-Identifier: MIT
#include "shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <new>
#include <random>
#include <vector>

#include "backend.h"  // agree()

namespace shaddr {
namespace {

struct Share {
  pid_t pid;
  int fd;
  char shm_name[48];
};

enum class Method { kMemfd, kShmOpen };

// Rank 0's side: a descriptor of `bytes` (sparse) and, for kShmOpen, its name.
int make_object(Method how, size_t bytes, Share *mine) {
  if (how == Method::kMemfd) {
    mine->fd = memfd_create("shaddr-node", MFD_CLOEXEC);
  } else {
    std::snprintf(mine->shm_name, sizeof(mine->shm_name), "/shaddr-%d-%llx", getpid(),
                  static_cast<unsigned long long>(std::random_device{}()) << 32 ^
                      std::random_device{}());
    mine->fd = shm_open(mine->shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (mine->fd < 0) return -errno;
  if (ftruncate(mine->fd, static_cast<off_t>(bytes))) return -errno;
  return 0;
}

// The other ranks' side: a descriptor of rank 0's object.
int open_object(const Share &owner) {
  if (owner.shm_name[0]) return shm_open(owner.shm_name, O_RDWR | O_CLOEXEC, 0);
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", owner.pid, owner.fd);
  return open(path, O_RDWR | O_CLOEXEC);
}

}  // namespace

int SharedRegion::create(const shaddr_host &host, size_t bytes,
                         const std::function<void(void *)> &init,
                         std::unique_ptr<SharedRegion> *out, std::string *why) {
  std::unique_ptr<SharedRegion> region(new (std::nothrow) SharedRegion);
  int err = region ? 0 : -ENOMEM;
  if (int e = agree(host, err, why, "allocating a shared region")) return e;
  region->bytes_ = bytes;
  int agreed = 0;
  // A memfd needs no name, but peers reach it only if /proc/<pid>/fd of rank 0 is open to them
  // (hidepid, some LSMs and sandboxes refuse): then a named object, unlinked right away.
  for (Method how : {Method::kMemfd, Method::kShmOpen}) {
    Share mine{getpid(), -1, {}};
    err = host.rank == 0 ? make_object(how, bytes, &mine) : 0;
    if (int e = agree(host, err, why, "creating a shared region")) {
      if (mine.fd >= 0) close(mine.fd);  // rank 0 only
      if (mine.shm_name[0]) shm_unlink(mine.shm_name);
      agreed = e;
      continue;
    }
    std::vector<Share> all(host.size);
    if (int e = host.allgather(&mine, all.data(), sizeof(Share), host.ctx)) {
      *why = "allgather of the shared region's name failed";
      if (mine.fd >= 0) close(mine.fd);
      if (mine.shm_name[0]) shm_unlink(mine.shm_name);
      return e;
    }
    const Share &owner = all[0];
    const int fd = host.rank == 0 ? mine.fd : open_object(owner);
    err = fd < 0 ? -errno : 0;
    if (!err) {
      void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED)
        err = -errno;
      else
        region->base_ = p;
    }
    if (host.rank != 0 && fd >= 0) close(fd);
    if (!err && host.rank == 0 && init) init(region->base_);
    // After this everyone has it mapped (or has given up): rank 0's descriptor (which the
    // others opened through /proc) and the name can go.
    agreed = agree(host, err, why, "attaching a shared region");
    if (host.rank == 0 && fd >= 0) close(fd);
    if (host.rank == 0 && owner.shm_name[0]) shm_unlink(owner.shm_name);
    if (!agreed) {
      region->how_ = how == Method::kMemfd ? "memfd" : "shm_open";
      *out = std::move(region);
      return 0;
    }
    if (region->base_) munmap(region->base_, bytes);
    region->base_ = nullptr;
  }
  return agreed;
}

SharedRegion::~SharedRegion() {
  if (base_) munmap(base_, bytes_);
}

}  // namespace shaddr
