// SPDX-License-Identifier: MIT
// An open /dev/shaddr: the one place the library issues ioctls to the kernel module.
#pragma once

#include <linux/shaddr.h>

namespace shaddr {

class Device {
 public:
  // Opens the device node; check ok() / error() afterwards.
  Device();
  ~Device();
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;
  Device(Device &&other) noexcept;
  Device &operator=(Device &&other) noexcept;

  bool ok() const { return fd_ >= 0; }
  int error() const { return fd_ >= 0 ? 0 : fd_; }  // negative errno of the failed open
  int fd() const { return fd_; }

  // SHADDR_IOC_VERSION; returns 0 or a negative errno.
  int version(struct shaddr_version *out) const;

  // Any ioctl of <linux/shaddr.h>; returns 0 or a negative errno.
  int call(unsigned long cmd, void *arg) const;

 private:
  int fd_;
};

}  // namespace shaddr
