// SPDX-License-Identifier: MIT
// Module skeleton tests, run as root inside the VM with shaddr.ko loaded (tools/shaddr-vm).
#include <fcntl.h>
#include <linux/shaddr.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "shaddr/shaddr.h"

namespace {

constexpr const char *kDev = "/dev/shaddr";
constexpr const char *kSysfs = "/sys/class/misc/shaddr";
constexpr uint64_t kKnownFeatures = SHADDR_FEAT_WINDOWS | SHADDR_FEAT_SEGMENTS |
                                    SHADDR_FEAT_HUGE_MAP | SHADDR_FEAT_READ_ONLY_PAGES;

long long read_stat(const std::string &name) {
  std::ifstream in(std::string(kSysfs) + "/stats/" + name);
  long long v = -1;
  in >> v;
  return v;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Returns -errno of the ioctl, or 0.
int ioctl_errno(int fd, unsigned long cmd, void *arg) {
  return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

}  // namespace

TEST(Module, DeviceNodeIsWorldAccessibleCharDevice) {
  struct stat st{};
  ASSERT_EQ(stat(kDev, &st), 0) << strerror(errno);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0666u);
  std::ifstream dev(std::string(kSysfs) + "/dev");
  unsigned maj = 0, min = 0;
  char colon = 0;
  dev >> maj >> colon >> min;
  EXPECT_EQ(major(st.st_rdev), maj);
  EXPECT_EQ(minor(st.st_rdev), min);
}

TEST(Module, VersionReportsHeaderAbiAndZeroesReserved) {
  Fd fd(open(kDev, O_RDWR | O_CLOEXEC));
  ASSERT_GE(fd.get(), 0) << strerror(errno);
  struct shaddr_version ver;
  memset(&ver, 0xff, sizeof(ver));
  ASSERT_EQ(ioctl_errno(fd.get(), SHADDR_IOC_VERSION, &ver), 0);
  EXPECT_EQ(ver.abi_major, static_cast<uint32_t>(SHADDR_ABI_MAJOR));
  EXPECT_EQ(ver.abi_minor, static_cast<uint32_t>(SHADDR_ABI_MINOR));
  EXPECT_EQ(ver.features & ~kKnownFeatures, 0u);
  EXPECT_EQ(ver.reserved[0], 0u);
  EXPECT_EQ(ver.reserved[1], 0u);
}

TEST(Module, VersionWorksOnReadOnlyOpen) {
  Fd fd(open(kDev, O_RDONLY | O_CLOEXEC));
  ASSERT_GE(fd.get(), 0) << strerror(errno);
  struct shaddr_version ver{};
  EXPECT_EQ(ioctl_errno(fd.get(), SHADDR_IOC_VERSION, &ver), 0);
}

TEST(Module, VersionRejectsBadPointersWithEFAULT) {
  Fd fd(open(kDev, O_RDWR | O_CLOEXEC));
  ASSERT_GE(fd.get(), 0);
  EXPECT_EQ(ioctl_errno(fd.get(), SHADDR_IOC_VERSION, nullptr), -EFAULT);
  // A kernel address (direct map) and a non-canonical one.
  EXPECT_EQ(ioctl_errno(fd.get(), SHADDR_IOC_VERSION,
                        reinterpret_cast<void *>(0xffff888000000000ull)),
            -EFAULT);
  EXPECT_EQ(ioctl_errno(fd.get(), SHADDR_IOC_VERSION,
                        reinterpret_cast<void *>(0x8000000000000000ull)),
            -EFAULT);
  // A read-only page, and a struct that runs off the end of a mapping.
  const long page = sysconf(_SC_PAGESIZE);
  void *ro = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_EQ(ioctl_errno(fd.get(), SHADDR_IOC_VERSION, ro), -EFAULT);
  char *two = static_cast<char *>(
      mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(two, MAP_FAILED);
  ASSERT_EQ(munmap(two + page, page), 0);
  EXPECT_EQ(ioctl_errno(fd.get(), SHADDR_IOC_VERSION, two + page - 8), -EFAULT);
  munmap(ro, page);
  munmap(two, page);
}

TEST(Module, UnknownOrMalformedCommandsAreENOTTY) {
  Fd fd(open(kDev, O_RDWR | O_CLOEXEC));
  ASSERT_GE(fd.get(), 0);
  char buf[256] = {};
  const unsigned long bad[] = {
      0,
      _IO(SHADDR_IOC_MAGIC, 0x00),                      // VERSION without size/direction
      _IOR(SHADDR_IOC_MAGIC, 0x00, uint32_t),            // VERSION with the wrong size
      _IOW(SHADDR_IOC_MAGIC, 0x00, struct shaddr_version),  // wrong direction
      _IOWR(SHADDR_IOC_MAGIC, 0x7f, struct shaddr_version), // unassigned number
      _IOR('x', 0x00, struct shaddr_version),            // another driver's magic
  };
  for (unsigned long cmd : bad) {
    EXPECT_EQ(ioctl_errno(fd.get(), cmd, buf), -ENOTTY) << std::hex << cmd;
  }
}

TEST(Module, CountersFollowOpenCloseAndErrors) {
  const long long files0 = read_stat("open_files");
  const long long errors0 = read_stat("ioctl_errors");
  const long long ioctls0 = read_stat("ioctls");
  ASSERT_GE(files0, 0);
  {
    Fd a(open(kDev, O_RDWR | O_CLOEXEC));
    Fd b(open(kDev, O_RDWR | O_CLOEXEC));
    ASSERT_GE(a.get(), 0);
    ASSERT_GE(b.get(), 0);
    EXPECT_EQ(read_stat("open_files"), files0 + 2);
    EXPECT_EQ(ioctl_errno(a.get(), 0, nullptr), -ENOTTY);
    struct shaddr_version ver{};
    EXPECT_EQ(ioctl_errno(b.get(), SHADDR_IOC_VERSION, &ver), 0);
  }
  EXPECT_EQ(read_stat("open_files"), files0);
  EXPECT_EQ(read_stat("ioctl_errors"), errors0 + 1);
  EXPECT_EQ(read_stat("ioctls"), ioctls0 + 2);
}

TEST(Module, UnprivilegedUserCanQueryVersion) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setgid(65534) || setuid(65534)) _exit(10);
    shaddr_module_info info{};
    _exit(shaddr_module_query(&info) == 0 && info.abi_major == SHADDR_ABI_MAJOR ? 0 : 11);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(Module, FilesInheritedByForkAndClosedByExitLeaveNothingOpen) {
  const long long files0 = read_stat("open_files");
  std::vector<int> fds;
  for (int i = 0; i < 64; i++) fds.push_back(open(kDev, O_RDWR));
  for (int fd : fds) ASSERT_GE(fd, 0);
  EXPECT_EQ(read_stat("open_files"), files0 + 64);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Same open file descriptions: a child's ioctl works, its exit releases nothing.
    struct shaddr_version ver{};
    _exit(ioctl(fds[0], SHADDR_IOC_VERSION, &ver) == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(read_stat("open_files"), files0 + 64);
  for (int fd : fds) close(fd);
  EXPECT_EQ(read_stat("open_files"), files0);
}

TEST(Module, ConcurrentVersionCallsFromThreads) {
  Fd fd(open(kDev, O_RDWR | O_CLOEXEC));
  ASSERT_GE(fd.get(), 0);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; i++) {
        struct shaddr_version ver{};
        if (ioctl(fd.get(), SHADDR_IOC_VERSION, &ver) || ver.abi_major != SHADDR_ABI_MAJOR)
          failures++;
      }
    });
  }
  for (auto &t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Module, LibraryQueryAgreesWithIoctl) {
  shaddr_module_info info{};
  ASSERT_EQ(shaddr_module_query(&info), 0) << shaddr_last_error();
  EXPECT_EQ(info.abi_major, static_cast<uint32_t>(SHADDR_ABI_MAJOR));
  EXPECT_EQ(info.abi_minor, static_cast<uint32_t>(SHADDR_ABI_MINOR));
  EXPECT_STREQ(shaddr_last_error(), "");
}
