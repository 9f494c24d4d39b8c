// SPDX-License-Identifier: MIT
#include "device.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "error.h"
#include "shaddr/shaddr.h"

namespace shaddr {

Device::Device() {
  fd_ = ::open(shaddr_device_path(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0) fd_ = -errno;
}

Device::~Device() {
  if (fd_ >= 0) ::close(fd_);
}

Device::Device(Device &&other) noexcept : fd_(other.fd_) { other.fd_ = -EBADF; }

Device &Device::operator=(Device &&other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -EBADF;
  }
  return *this;
}

int Device::call(unsigned long cmd, void *arg) const {
  if (::ioctl(fd_, cmd, arg) < 0) return -errno;
  return 0;
}

int Device::version(struct shaddr_version *out) const { return call(SHADDR_IOC_VERSION, out); }

}  // namespace shaddr

extern "C" {

const char *shaddr_device_path(void) {
  // SHADDR_DEVICE (settings_table.cc): the environment's own string stays valid.
  const char *env = std::getenv("SHADDR_DEVICE");
  return env && *env ? env : "/dev/" SHADDR_DEVICE_NAME;
}

uint32_t shaddr_abi_major(void) { return SHADDR_ABI_MAJOR; }

int shaddr_module_query(struct shaddr_module_info *info) {
  using shaddr::fail;
  shaddr::clear_error();
  if (!info) return fail(-EINVAL, "shaddr_module_query: info is NULL");
  const std::string path = shaddr_device_path();
  shaddr::Device dev;
  if (!dev.ok()) {
    const char *hint = dev.error() == -ENOENT ? " (is the shaddr module loaded?)" : "";
    return fail(dev.error(), "open " + path + hint);
  }
  struct shaddr_version ver = {};
  if (int err = dev.version(&ver); err) {
    return fail(err, "SHADDR_IOC_VERSION on " + path +
                         (err == -ENOTTY ? " (not a shaddr device)" : ""));
  }
  info->abi_major = ver.abi_major;
  info->abi_minor = ver.abi_minor;
  info->features = ver.features;
  if (ver.abi_major != SHADDR_ABI_MAJOR) {
    return fail(-EPROTO, "module ABI " + std::to_string(ver.abi_major) +
                             " but libshaddr speaks ABI " + std::to_string(SHADDR_ABI_MAJOR));
  }
  return 0;
}

}  // extern "C"
