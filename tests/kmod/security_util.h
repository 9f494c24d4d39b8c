// SPDX-License-Identifier: MIT
// Helpers for the module's security tests (test_creds.cc, the setuid helper and the threaded
// fuzzer ioctl_fuzz.cc): identities, capabilities, signal-safe probes that work in any thread,
// fd passing over unix sockets, bounded forked actors, and the module's counters.
// Nothing here allocates after fork, so the functions are usable in a child of a multithreaded
// process; nothing here needs GoogleTest.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/shaddr.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "ioctl_util.h"

namespace shaddr_sec {

constexpr size_t kMiB = 1ul << 20;
constexpr size_t kPage = 4096;
constexpr uint32_t kRO = SHADDR_PROT_READ;
constexpr uint32_t kRW = SHADDR_PROT_READ | SHADDR_PROT_WRITE;

// The counters that must all be 0 when no process uses the module (contract item 8).
inline constexpr const char *kLiveCounters[] = {"exports",      "segments",    "windows",
                                                 "attachments", "pages_pinned", "open_files"};

constexpr long long kNoCounter = LLONG_MIN;

// A counter of /sys/class/misc/shaddr/stats/, or kNoCounter. Plain syscalls: usable after fork.
inline long long stat_value(const char *name) {
  char path[128], buf[64];
  snprintf(path, sizeof(path), "/sys/class/misc/shaddr/stats/%s", name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kNoCounter;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return kNoCounter;
  buf[n] = 0;
  return strtoll(buf, nullptr, 10);
}

inline double now_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Waits up to `seconds` for every live counter to read 0 (teardown of an exited process's mm can
// finish on a workqueue a moment after it was reaped). Returns true if they did; else writes
// "name=value ..." of the non-zero ones into `why`.
inline bool wait_counters_zero(double seconds, char *why, size_t why_len) {
  const double end = now_seconds() + seconds;
  for (;;) {
    bool zero = true;
    size_t off = 0;
    if (why_len) why[0] = 0;
    for (const char *c : kLiveCounters) {
      long long v = stat_value(c);
      if (v != 0) {
        zero = false;
        if (off < why_len && v == kNoCounter)
          off += snprintf(why + off, why_len - off, "%s%s unreadable", off ? " " : "", c);
        else if (off < why_len)
          off += snprintf(why + off, why_len - off, "%s%s=%lld", off ? " " : "", c, v);
      }
    }
    if (zero) return true;
    if (now_seconds() > end) return false;
    usleep(20000);
  }
}

using shaddr_ioctl::seg_attach;
using shaddr_ioctl::seg_detach;
using shaddr_ioctl::seg_get;
using shaddr_ioctl::seg_make;
using shaddr_ioctl::u64_cmd;
using shaddr_ioctl::xioctl;

inline int open_dev(int flags = O_RDWR | O_CLOEXEC) {
  int fd = open("/dev/shaddr", flags);
  return fd < 0 ? -errno : fd;
}

inline int set_slot_size(int fd, uint64_t size) { return xioctl(fd, SHADDR_IOC_SET_SLOT_SIZE, &size); }

inline int translate(int fd, const void *va, uint64_t len, uint32_t prot, uint64_t *handle) {
  shaddr_translate t{};
  t.va = reinterpret_cast<uint64_t>(va);
  t.len = len;
  t.prot = prot;
  int r = xioctl(fd, SHADDR_IOC_TRANSLATE, &t);
  *handle = r == 0 ? t.handle : 0;
  return r;
}

// MAP block `block` of `handle`; *addr gets the window (nullptr on failure).
inline int map_window(int fd, uint64_t handle, uint32_t block, uint32_t prot, char **addr,
                      uint64_t *size = nullptr) {
  shaddr_map m{};
  m.handle = handle;
  m.block = block;
  m.prot = prot;
  int r = xioctl(fd, SHADDR_IOC_MAP, &m);
  *addr = r == 0 ? reinterpret_cast<char *>(m.addr) : nullptr;
  if (size) *size = r == 0 ? m.size : 0;
  return r;
}

inline int unmap_window(int fd, const void *addr) {
  shaddr_unmap u{};
  u.addr = reinterpret_cast<uint64_t>(addr);
  return xioctl(fd, SHADDR_IOC_UNMAP, &u);
}


// An anonymous mapping of `size` bytes at an `align`-aligned address (the rest of the
// over-sized reservation is unmapped), filled with `fill`. nullptr on failure.
inline char *aligned_map(size_t size, size_t align, int fill) {
  char *raw = static_cast<char *>(mmap(nullptr, size + align, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (raw == MAP_FAILED) return nullptr;
  char *p = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw) + align - 1) & ~(align - 1));
  if (p > raw) munmap(raw, p - raw);
  munmap(p + size, raw + size + align - (p + size));
  memset(p, fill, size);
  return p;
}

// ---- Probes -----------------------------------------------------------------------------
// A touch of memory that may raise SIGBUS or SIGSEGV, safe in any thread (the jump buffer is
// per thread) and in a forked child. A fault outside a probe is not caught: the handler
// restores the default action and the faulting instruction kills the process, as it should.

namespace detail {
inline thread_local sigjmp_buf probe_env;
inline thread_local volatile sig_atomic_t probe_active;
inline void probe_handler(int sig, siginfo_t *, void *) {
  if (probe_active) {
    probe_active = 0;
    siglongjmp(probe_env, sig);
  }
  signal(sig, SIG_DFL);  // not ours: let it kill the process
}
}  // namespace detail

inline void install_probe_handlers() {
  struct sigaction sa {};
  sa.sa_sigaction = detail::probe_handler;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, nullptr);
  sigaction(SIGSEGV, &sa, nullptr);
}

enum class Touch { kRead, kWrite, kPreserve };

// Touches *p and returns 0, or the signal it raised (SIGBUS, SIGSEGV). kRead reads a byte into
// *out; kWrite stores `value`; kPreserve is a write access that cannot change memory (an
// atomic OR of 0): it faults like a write but is harmless wherever the address points.
// install_probe_handlers() must have been called in this process.
inline int probe(volatile char *p, Touch how, char value = 0, char *out = nullptr) {
  detail::probe_active = 1;
  int sig = sigsetjmp(detail::probe_env, 1);
  if (sig == 0) {
    switch (how) {
      case Touch::kRead: {
        char v = *p;
        if (out) *out = v;
        break;
      }
      case Touch::kWrite: *p = value; break;
      case Touch::kPreserve: asm volatile("lock orb $0, %0" : "+m"(*p) : : "memory"); break;
    }
    detail::probe_active = 0;
  }
  return sig;
}

// Reads [p, p + len) through probes, comparing with `want`. Returns 0 if every byte matched,
// a signal number if one was raised, or -1 at the first mismatch (*bad gets its offset).
inline int probe_compare(const char *p, size_t len, char want, size_t *bad = nullptr,
                         size_t step = kPage) {
  for (size_t off = 0; off < len; off += step) {
    char v = 0;
    int sig = probe(const_cast<volatile char *>(p + off), Touch::kRead, 0, &v);
    if (sig) return sig;
    if (v != want) {
      if (bad) *bad = off;
      return -1;
    }
  }
  return 0;
}

// ---- Identities -------------------------------------------------------------------------

struct Ids {
  uid_t ruid, euid, suid;
  gid_t rgid, egid, sgid;
  std::vector<gid_t> groups;
};

inline Ids user_ids(uid_t uid, gid_t gid, std::initializer_list<gid_t> groups = {}) {
  return Ids{uid, uid, uid, gid, gid, gid, std::vector<gid_t>(groups)};
}

// Switches this (root) process to `ids`: supplementary groups, then gids, then uids.
// Returns 0 or -errno. Call it in a forked child only.
inline int become(const Ids &ids) {
  if (setgroups(ids.groups.size(), ids.groups.empty() ? nullptr : ids.groups.data())) return -errno;
  if (setresgid(ids.rgid, ids.egid, ids.sgid)) return -errno;
  if (setresuid(ids.ruid, ids.euid, ids.suid)) return -errno;
  return 0;
}

inline uint64_t cap_bit(int cap) { return 1ull << cap; }

// Sets this process's effective and permitted capability sets to `caps` (a mask of cap_bit()s)
// and clears the inheritable set. Returns 0 or -errno.
inline int set_caps(uint64_t caps) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  data[0].effective = data[0].permitted = static_cast<uint32_t>(caps);
  data[1].effective = data[1].permitted = static_cast<uint32_t>(caps >> 32);
  return syscall(SYS_capset, &hdr, data) ? -errno : 0;
}

// Becomes `ids` while keeping exactly the capabilities in `caps` (root children only).
inline int become_with_caps(const Ids &ids, uint64_t caps) {
  if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)) return -errno;
  int r = become(ids);
  if (r) return r;
  return set_caps(caps);
}

// Writes `text` to /proc/self/<file> (uid_map, gid_map, setgroups). Returns 0 or -errno.
inline int write_proc_self(const char *file, const char *text) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/%s", file);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = write(fd, text, strlen(text));
  int r = n == static_cast<ssize_t>(strlen(text)) ? 0 : -errno;
  close(fd);
  return r;
}

// Enters a new user namespace in which this process's (outer) uid and gid appear as `inner_uid`
// and `inner_gid` (e.g. 0 for "root inside", or the same ids). Returns 0 or -errno.
inline int enter_user_ns(uid_t inner_uid, gid_t inner_gid) {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER)) return -errno;
  char map[64];
  snprintf(map, sizeof(map), "%u %u 1\n", inner_uid, uid);
  if (int r = write_proc_self("uid_map", map)) return r;
  if (int r = write_proc_self("setgroups", "deny")) return r;
  snprintf(map, sizeof(map), "%u %u 1\n", inner_gid, gid);
  return write_proc_self("gid_map", map);
}

// True if this process (as uid 60000, a probe in a forked child) may create a user namespace.
inline bool unprivileged_userns_works() {
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    if (become(user_ids(60000, 60000))) _exit(2);
    _exit(unshare(CLONE_NEWUSER) ? 1 : 0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The VM runner runs the command chrooted into its overlay root, and the kernel refuses
// CLONE_NEWUSER to a chrooted process (EPERM, even to root). This moves the calling root process
// into a private mount namespace whose root mount *is* the overlay (mounted over the namespace's
// own root), so that it and its children are no longer "chrooted". Nothing outside this process
// tree changes. Returns 0, or -errno of the step that failed.
inline int leave_chroot_for_userns() {
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof(cwd))) return -errno;
  if (unshare(CLONE_NEWNS)) return -errno;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr)) return -errno;
  int rootfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) return -errno;
  char tmp[] = "/run/shaddr-nsXXXXXX";
  if (!mkdtemp(tmp)) return -errno;
  int r = 0;
  if (chdir("/") || chroot(tmp)) r = -errno;  // the cwd is now outside the root...
  for (int i = 0; r == 0 && i < 64; i++)
    if (chdir("..")) r = -errno;               // ...so ".." climbs to the real root
  if (r == 0 && chroot(".")) r = -errno;
  if (r == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr)) r = -errno;
  char src[64];
  snprintf(src, sizeof(src), "/proc/self/fd/%d", rootfd);
  if (r == 0 && mount(src, "/", nullptr, MS_MOVE, nullptr)) r = -errno;
  if (r == 0 && (fchdir(rootfd) || chroot("."))) r = -errno;
  if (r == 0 && chdir(cwd)) r = -errno;
  close(rootfd);
  rmdir(tmp);
  return r;
}

// ---- Unix sockets and fd passing ---------------------------------------------------------

// Sends `fd` (and one byte) over the unix socket `sock`. Returns 0 or -errno.
inline int send_fd(int sock, int fd, int flags = MSG_NOSIGNAL) {
  char byte = 'F';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
  memset(ctl, 0, sizeof(ctl));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl;
  msg.msg_controllen = sizeof(ctl);
  cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(sock, &msg, flags) == 1 ? 0 : -errno;
}

// Receives an fd sent by send_fd(); returns it, or -errno (-EAGAIN with MSG_DONTWAIT and
// nothing queued, -EBADMSG if the message carried no fd).
inline int recv_fd(int sock, int flags = 0) {
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl;
  msg.msg_controllen = sizeof(ctl);
  ssize_t n = recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  if (n < 0) return -errno;
  int fd = -EBADMSG;
  for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < nfds; i++) {
      int got;
      memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fd < 0)
        fd = got;
      else
        close(got);  // only one was sent; never leak extras
    }
  }
  return fd;
}

// A bidirectional stream socket pair: end 0 for the parent, end 1 for a forked child. Reads
// wait at most `timeout_ms`, so a test never hangs on a dead or stuck peer.
class Channel {
 public:
  Channel() {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds_)) abort();
  }
  ~Channel() {
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }
  Channel(const Channel &) = delete;
  Channel &operator=(const Channel &) = delete;

  // Called in the child after fork (side 1) or in the parent (side 0): close the other end.
  void become_side(int side) {
    side_ = side;
    close(fds_[1 - side]);
    fds_[1 - side] = -1;
  }
  int fd() const { return fds_[side_]; }

  bool send_bytes(const void *p, size_t n) {
    const char *c = static_cast<const char *>(p);
    while (n) {
      ssize_t w = ::send(fd(), c, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      c += w;
      n -= w;
    }
    return true;
  }
  bool recv_bytes(void *p, size_t n, int timeout_ms) {
    char *c = static_cast<char *>(p);
    const double end = now_seconds() + timeout_ms / 1000.0;
    while (n) {
      int left = static_cast<int>((end - now_seconds()) * 1000);
      if (left <= 0) return false;
      pollfd pfd{fd(), POLLIN, 0};
      int pr = poll(&pfd, 1, left);
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0) return false;
      ssize_t r = ::recv(fd(), c, n, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      c += r;
      n -= r;
    }
    return true;
  }
  template <typename T>
  bool send(const T &v) {
    return send_bytes(&v, sizeof(v));
  }
  template <typename T>
  bool recv(T *v, int timeout_ms = 30000) {
    return recv_bytes(v, sizeof(*v), timeout_ms);
  }
  bool send_fd(int fd) { return shaddr_sec::send_fd(this->fd(), fd) == 0; }
  int recv_fd(int timeout_ms = 30000) {
    pollfd pfd{fd(), POLLIN, 0};
    if (poll(&pfd, 1, timeout_ms) <= 0) return -ETIMEDOUT;
    return shaddr_sec::recv_fd(fd());
  }

 private:
  int fds_[2] = {-1, -1};
  int side_ = 0;
};

// A forked actor with a Channel to the parent. The child runs fn(channel) under alarm(), so
// an actor that hangs dies of SIGALRM (which the test reports) instead of stalling the test.
class Actor {
 public:
  static constexpr unsigned kAlarmSeconds = 120;

  template <typename Fn>
  explicit Actor(Fn fn) {
    fflush(nullptr);
    pid_ = fork();
    if (pid_ < 0) abort();
    if (pid_ == 0) {
      ch_.become_side(1);
      alarm(kAlarmSeconds);
      install_probe_handlers();
      _exit(fn(ch_));
    }
    ch_.become_side(0);
  }
  ~Actor() { kill_and_wait(); }
  Actor(const Actor &) = delete;
  Actor &operator=(const Actor &) = delete;

  Channel &ch() { return ch_; }
  pid_t pid() const { return pid_; }

  // Waits up to `seconds` for the child; returns its wait status, or -1 (then it is killed).
  int wait(double seconds = 30) {
    if (pid_ <= 0) return status_;
    const double end = now_seconds() + seconds;
    for (;;) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return status_ = status;
      }
      if (r < 0 && errno != EINTR) return -1;
      if (now_seconds() > end) {
        kill_and_wait();
        return status_ = -1;
      }
      usleep(2000);
    }
  }
  void kill_and_wait() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
  }

 private:
  Channel ch_;
  pid_t pid_ = -1;
  int status_ = -1;
};

// "exited 3", "killed by SIGALRM", "timed out" for messages.
inline const char *describe_status(int status, char *buf, size_t len) {
  if (status == -1)
    snprintf(buf, len, "timed out (killed)");
  else if (WIFEXITED(status))
    snprintf(buf, len, "exited %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    snprintf(buf, len, "status 0x%x", status);
  return buf;
}

// ---- The setuid/user-namespace helper (setuid_helper.cc) and the tests that exec it ---------

// What an exporter tells the test: its handle, segment ids, buffer and pid, or err != 0.
struct ExportInfo {
  int32_t err;
  int32_t pid;
  int32_t translate_rw;  // what TRANSLATE with SHADDR_PROT_WRITE answered
  int32_t pad;
  uint64_t handle;
  uint64_t segids[4];
  uint64_t addr;
  uint64_t size;
};

// The setuid helper's report after exec: its ids, what the inherited (pre-exec) device file
// answered, whether the secret buffer sits at the old buffer's address, and the new exports.
struct HelperReport {
  int32_t err;
  int32_t ruid, euid, suid;
  int32_t rgid, egid, sgid;
  int32_t dumpable;
  int32_t old_translate;  // TRANSLATE on the pre-exec file
  int32_t old_query;      // QUERY on the pre-exec file
  int32_t old_query_leak; // 1 if that QUERY showed any slot of the old image
  int32_t secret_at_old_addr;
  uint64_t handle, segid;
};

constexpr char kSecret = 'S';

}  // namespace shaddr_sec
