// SPDX-License-Identifier: MIT
// libxpmem: XPMEM's public API over /dev/shaddr's segment ioctls.
#include "xpmem.h"

#include <fcntl.h>
#include <linux/shaddr.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>

#define XPMEM_API extern "C" __attribute__((visibility("default")))

namespace {

std::mutex g_lock;
int g_fd = -1;
pid_t g_owner = 0;

const char *device_path() {
  const char *env = std::getenv("SHADDR_DEVICE");
  return env && *env ? env : "/dev/" SHADDR_DEVICE_NAME;
}

// The device file of this process. A shaddr file belongs to the address space that opened
// it, so a child after fork() opens its own.
int device_fd() {
  std::lock_guard<std::mutex> guard(g_lock);
  const pid_t self = getpid();
  if (g_fd >= 0 && g_owner == self) return g_fd;
  if (g_fd >= 0) close(g_fd);  // inherited from the parent: ours is a new one
  g_fd = open(device_path(), O_RDWR | O_CLOEXEC);
  g_owner = self;
  return g_fd;  // -1 with errno from open()
}

// ioctl with XPMEM's convention: 0, or -1 with errno.
int call(unsigned long cmd, void *arg) {
  int fd = device_fd();
  if (fd < 0) return -1;
  return ioctl(fd, cmd, arg) < 0 ? -1 : 0;
}

}  // namespace

XPMEM_API int xpmem_version(void) {
  shaddr_version ver{};
  if (call(SHADDR_IOC_VERSION, &ver)) return -1;
  if (ver.abi_major != SHADDR_ABI_MAJOR || !(ver.features & SHADDR_FEAT_SEGMENTS)) {
    errno = EPROTO;
    return -1;
  }
  return XPMEM_CURRENT_VERSION;
}

XPMEM_API xpmem_segid_t xpmem_make(void *vaddr, size_t size, int permit_type,
                                   void *permit_value) {
  const uintptr_t mode = reinterpret_cast<uintptr_t>(permit_value);
  if (permit_type != XPMEM_PERMIT_MODE || mode > 0777) {
    errno = EINVAL;
    return -1;
  }
  shaddr_make mk{};
  mk.va = reinterpret_cast<uintptr_t>(vaddr);
  mk.size = size;
  mk.mode = static_cast<uint32_t>(mode);
  if (call(SHADDR_IOC_MAKE, &mk)) return -1;
  return static_cast<xpmem_segid_t>(mk.segid);
}

XPMEM_API int xpmem_remove(xpmem_segid_t segid) {
  uint64_t id = static_cast<uint64_t>(segid);
  return call(SHADDR_IOC_REMOVE, &id);
}

XPMEM_API xpmem_apid_t xpmem_get(xpmem_segid_t segid, int flags, int /*permit_type*/,
                                 void * /*permit_value*/) {
  if (segid <= 0) {
    errno = EINVAL;
    return -1;
  }
  shaddr_get g{};
  g.segid = static_cast<uint64_t>(segid);
  g.flags = static_cast<uint32_t>(flags);
  if (call(SHADDR_IOC_GET, &g)) return -1;
  return static_cast<xpmem_apid_t>(g.apid);
}

XPMEM_API int xpmem_release(xpmem_apid_t apid) {
  uint64_t id = static_cast<uint64_t>(apid);
  return call(SHADDR_IOC_RELEASE, &id);
}

XPMEM_API void *xpmem_attach(struct xpmem_addr addr, size_t size, void *vaddr) {
  if (addr.apid <= 0 || addr.offset < 0) {
    errno = EINVAL;
    return reinterpret_cast<void *>(-1);
  }
  shaddr_attach a{};
  a.apid = static_cast<uint64_t>(addr.apid);
  a.offset = static_cast<uint64_t>(addr.offset);
  a.size = size;
  a.vaddr = reinterpret_cast<uintptr_t>(vaddr);
  a.flags = vaddr ? SHADDR_ATTACH_FIXED : 0;
  if (call(SHADDR_IOC_ATTACH, &a)) return reinterpret_cast<void *>(-1);
  return reinterpret_cast<void *>(a.addr);
}

XPMEM_API int xpmem_detach(void *vaddr) {
  uint64_t a = reinterpret_cast<uintptr_t>(vaddr);
  return call(SHADDR_IOC_DETACH, &a);
}
