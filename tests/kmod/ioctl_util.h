// SPDX-License-Identifier: MIT
// Raw /dev/shaddr calls shared by every module test (shaddr_test_util.h, security_util.h):
// -errno on failure, outputs zeroed unless the call succeeded. No GoogleTest, no allocation.
#pragma once

#include <linux/shaddr.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstdint>

namespace shaddr_ioctl {

// -errno of the ioctl, or its (non-negative) return value.
inline int xioctl(int fd, unsigned long cmd, void *arg) {
  int r = ioctl(fd, cmd, arg);
  return r < 0 ? -errno : r;
}

inline int seg_make(int fd, const void *va, uint64_t size, uint32_t mode, uint64_t *segid) {
  shaddr_make mk{};
  mk.va = reinterpret_cast<uint64_t>(va);
  mk.size = size;
  mk.mode = mode;
  int r = xioctl(fd, SHADDR_IOC_MAKE, &mk);
  *segid = r == 0 ? mk.segid : 0;
  return r;
}

inline int seg_get(int fd, uint64_t segid, uint32_t flags, uint64_t *apid) {
  shaddr_get g{};
  g.segid = segid;
  g.flags = flags;
  int r = xioctl(fd, SHADDR_IOC_GET, &g);
  *apid = r == 0 ? g.apid : 0;
  return r;
}

// ATTACH; *addr gets the attachment (nullptr on failure). vaddr and flags as in the uapi.
inline int seg_attach(int fd, uint64_t apid, uint64_t offset, uint64_t size, char **addr,
                      uint64_t vaddr = 0, uint32_t flags = 0) {
  shaddr_attach a{};
  a.apid = apid;
  a.offset = offset;
  a.size = size;
  a.vaddr = vaddr;
  a.flags = flags;
  int r = xioctl(fd, SHADDR_IOC_ATTACH, &a);
  *addr = r == 0 ? reinterpret_cast<char *>(a.addr) : nullptr;
  return r;
}

inline int seg_detach(int fd, const void *addr) {
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  return xioctl(fd, SHADDR_IOC_DETACH, &a);
}

// A command whose argument is one u64 (REMOVE, RELEASE, REVOKE).
inline int u64_cmd(int fd, unsigned long cmd, uint64_t v) { return xioctl(fd, cmd, &v); }

}  // namespace shaddr_ioctl
