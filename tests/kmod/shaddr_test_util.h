// SPDX-License-Identifier: MIT
// Helpers for the module tests: raw ioctls, aligned buffers, counters, forked peers.
#pragma once

#include <fcntl.h>
#include <linux/shaddr.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "ioctl_util.h"

namespace shaddr_test {

constexpr size_t kMiB = 1ul << 20;
constexpr size_t kPage = 4096;

inline long long stat_value(const std::string &name) {
  std::ifstream in("/sys/class/misc/shaddr/stats/" + name);
  long long v = -1;
  in >> v;
  return v;
}

using shaddr_ioctl::xioctl;

inline int open_dev() { return open("/dev/shaddr", O_RDWR | O_CLOEXEC); }

inline int set_slot_size(int fd, uint64_t size) {
  return xioctl(fd, SHADDR_IOC_SET_SLOT_SIZE, &size);
}

inline int translate(int fd, const void *va, size_t len, uint32_t prot, shaddr_translate *out) {
  *out = {};
  out->va = reinterpret_cast<uint64_t>(va);
  out->len = len;
  out->prot = prot;
  return xioctl(fd, SHADDR_IOC_TRANSLATE, out);
}

inline int map(int fd, uint64_t handle, uint32_t block, uint32_t prot, shaddr_map *out) {
  *out = {};
  out->handle = handle;
  out->block = block;
  out->prot = prot;
  return xioctl(fd, SHADDR_IOC_MAP, out);
}

inline int unmap_addr(int fd, uint64_t addr) {
  shaddr_unmap u{};
  u.addr = addr;
  return xioctl(fd, SHADDR_IOC_UNMAP, &u);
}

// An anonymous mapping of `size` bytes aligned to `align`, touched or not.
class AlignedBuffer {
 public:
  AlignedBuffer(size_t size, size_t align, bool touch = true) : size_(size) {
    raw_size_ = size + align;
    raw_ = static_cast<char *>(
        mmap(nullptr, raw_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (raw_ == MAP_FAILED) abort();
    uintptr_t p = (reinterpret_cast<uintptr_t>(raw_) + align - 1) & ~(align - 1);
    data_ = reinterpret_cast<char *>(p);
    if (touch) memset(data_, 0, size);
  }
  ~AlignedBuffer() {
    if (raw_) munmap(raw_, raw_size_);
  }
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;
  char *data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char *raw_ = nullptr;
  char *data_ = nullptr;
  size_t raw_size_ = 0;
  size_t size_;
};

// Touches *p (a read, or a write of `value` if write) in this process and returns the
// signal it raised: 0, SIGBUS or SIGSEGV. Windows are not inherited across fork, so
// death tests (which fork) cannot probe them.
namespace detail {
inline sigjmp_buf probe_env;
inline void probe_handler(int sig) { siglongjmp(probe_env, sig); }
}  // namespace detail

inline int access_signal(volatile char *p, bool write = false, char value = 0) {
  struct sigaction sa {}, old_bus{}, old_segv{};
  sa.sa_handler = detail::probe_handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &old_bus);
  sigaction(SIGSEGV, &sa, &old_segv);
  int sig = sigsetjmp(detail::probe_env, 1);
  if (sig == 0) {
    if (write)
      *p = value;
    else
      (void)*p;
  }
  sigaction(SIGBUS, &old_bus, nullptr);
  sigaction(SIGSEGV, &old_segv, nullptr);
  return sig;
}

// Runs fn() in a forked child and returns its wait status.
inline int run_in_child(const std::function<int()> &fn) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(fn());
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

inline bool died_of(int status, int sig) { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
inline bool exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// A forked peer process that exports a buffer and then obeys one-byte commands.
class Pipe {
 public:
  Pipe() {
    if (pipe2(fds_, O_CLOEXEC)) abort();
  }
  ~Pipe() {
    close(fds_[0]);
    close(fds_[1]);
  }
  template <typename T>
  void put(const T &v) {
    if (write(fds_[1], &v, sizeof(v)) != sizeof(v)) abort();
  }
  template <typename T>
  T get() {
    T v{};
    size_t got = 0;
    while (got < sizeof(v)) {
      ssize_t r = read(fds_[0], reinterpret_cast<char *>(&v) + got, sizeof(v) - got);
      if (r <= 0) abort();
      got += r;
    }
    return v;
  }

 private:
  int fds_[2];
};

}  // namespace shaddr_test

namespace shaddr_test {

using shaddr_ioctl::seg_attach;
using shaddr_ioctl::seg_detach;
using shaddr_ioctl::seg_get;
using shaddr_ioctl::seg_make;
inline int seg_u64_cmd(int fd, unsigned long cmd, uint64_t id) {
  return shaddr_ioctl::u64_cmd(fd, cmd, id);
}

}  // namespace shaddr_test

#include <gtest/gtest.h>

namespace shaddr_test {

// A test with its own open /dev/shaddr that must leave no export, segment, window, attachment
// or pinned page behind.
class ModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_ = open_dev();
    ASSERT_GE(fd_, 0) << strerror(errno);
  }
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
    for (const char *c : {"exports", "segments", "windows", "attachments", "pages_pinned"})
      EXPECT_EQ(stat_value(c), 0) << c;
  }
  int fd_ = -1;
};

}  // namespace shaddr_test
