// SPDX-License-Identifier: MIT
// The heap files' exchange between node peers (heap_share.h).
#include "heap_share.h"

#include <dlfcn.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "../heap/heap.h"
#include "wait.h"

namespace shaddr {
namespace {

// What each rank tells the others first.
struct HeapInfo {
  int32_t pid;
  int32_t on;  // offers its heap
  uint64_t base;
  uint64_t reserved;
  HeapToken token;
  char reason[112];  // why the heap is off (or not offered) here
};

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd &&o) noexcept : fd_(o.release()) {}
  Fd &operator=(Fd &&o) noexcept {
    reset(o.release());
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int f = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = f;
  }

 private:
  int fd_ = -1;
};

int64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Waits for @events on @fd until @deadline (now_ms()). 0, -ETIMEDOUT or -errno.
int wait_for(int fd, short events, int64_t deadline) {
  for (;;) {
    const int64_t left = deadline - now_ms();
    if (left <= 0) return -ETIMEDOUT;
    pollfd p{fd, events, 0};
    // The host's progress between short polls: a rank may wait here while others need its MPI.
    const int64_t slice = progress_set() ? 1 : 1000;
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, slice)));
    if (n == 0) progress_now();
    if (n > 0) return 0;
    if (n < 0 && errno != EINTR) return -errno;
  }
}

socklen_t address_of(const HeapToken &token, sockaddr_un *sa) {
  std::memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  char name[64];
  int len = std::snprintf(name, sizeof name, "shaddr-heap-");
  for (unsigned char b : token.bytes) len += std::snprintf(name + len, sizeof name - len, "%02x", b);
  std::memcpy(sa->sun_path + 1, name, static_cast<size_t>(len));  // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
}

bool peer_cred(int fd, ucred *cred) {
  socklen_t len = sizeof *cred;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) == 0 && len == sizeof *cred;
}

// The heap of this process, if libshaddr-heap is loaded (heap.h, Api).
const heap::Api *loaded_heap() {
  using Fn = const heap::Api *(*)();
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, heap::kApiSymbol));
  const heap::Api *api = fn ? fn() : nullptr;
  return api && api->version == heap::kApiVersion ? api : nullptr;
}

void set_reason(HeapInfo *info, const std::string &why) {
  std::snprintf(info->reason, sizeof info->reason, "%s", why.c_str());
}

bool bit(const std::vector<uint8_t> &bits, size_t i) { return bits[i / 8] >> (i % 8) & 1; }
void set_bit(std::vector<uint8_t> &bits, size_t i) { bits[i / 8] |= uint8_t(1u << (i % 8)); }

// Collective: each rank's row of n bits, gathered into n rows.
int allgather_bits(const shaddr_host &host, const std::vector<uint8_t> &mine,
                   std::vector<uint8_t> *all) {
  all->assign(mine.size() * host.size, 0);
  return host.allgather(mine.data(), all->data(), mine.size(), host.ctx);
}

}  // namespace

int heap_listen(int backlog, HeapToken *token, int *listen_fd) {
  Fd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (s.get() < 0) return -errno;
  for (int attempt = 0;; attempt++) {
    if (getrandom(token->bytes, sizeof token->bytes, 0) != sizeof token->bytes) return -EIO;
    sockaddr_un sa;
    const socklen_t len = address_of(*token, &sa);
    if (bind(s.get(), reinterpret_cast<sockaddr *>(&sa), len) == 0) break;
    if (errno != EADDRINUSE || attempt == 3) return -errno;
  }
  if (listen(s.get(), backlog) != 0) return -errno;
  *listen_fd = s.release();
  return 0;
}

int heap_connect(const HeapToken &token, int *fd) {
  Fd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (s.get() < 0) return -errno;
  sockaddr_un sa;
  const socklen_t len = address_of(token, &sa);
  // A unix stream connect completes as soon as the listener's backlog holds it, or fails
  // (EAGAIN: backlog full); it never waits for accept().
  if (connect(s.get(), reinterpret_cast<sockaddr *>(&sa), len) != 0) return -errno;
  *fd = s.release();
  return 0;
}

int HeapServer::poll_once() {
  const uid_t me = geteuid();
  for (;;) {
    if (done_ == expect_.size()) return 0;
    Fd c(accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (c.get() < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return -errno;
    }
    ucred cred{};
    size_t who = expect_.size();
    if (peer_cred(c.get(), &cred) && cred.uid == me)
      for (size_t i = 0; i < expect_.size(); i++)
        if (expect_[i] == cred.pid && !served_[i]) who = i;
    if (who == expect_.size()) {  // a stranger (or a rank twice): closed, nothing sent
      strangers_++;
      continue;
    }
    HeapOffer msg = offer_;
    iovec iov{&msg, sizeof msg};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &heap_fd_, sizeof(int));
    // A fresh unix socket takes the 32 bytes at once; MSG_DONTWAIT keeps a full one from
    // blocking us.
    if (sendmsg(c.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(sizeof msg)) {
      served_[who] = true;
      done_++;
    }
  }
}

int HeapServer::serve(int timeout_ms) {
  const int64_t deadline = now_ms() + timeout_ms;
  while (done_ < expect_.size()) {
    if (poll_once() < 0) break;
    if (done_ == expect_.size()) break;
    if (wait_for(listen_fd_, POLLIN, deadline)) break;
  }
  return static_cast<int>(done_);
}

void HeapServer::expect_only(const std::vector<pid_t> &pids) {
  for (size_t i = 0; i < expect_.size(); i++) {
    if (served_[i]) continue;
    bool still = false;
    for (pid_t p : pids) still = still || p == expect_[i];
    if (!still) {  // it will not come: counted as done so that serve() does not wait for it
      served_[i] = true;
      done_++;
    }
  }
}

int heap_serve(int listen_fd, const std::vector<pid_t> &expect, const HeapOffer &offer,
               int heap_fd, int timeout_ms, int *strangers) {
  HeapServer server(listen_fd, expect, offer, heap_fd);
  const int served = server.serve(timeout_ms);
  *strangers = server.strangers();
  return served;
}

int heap_receive(int fd, pid_t owner, int timeout_ms, HeapOffer *offer, int *heap_fd,
                 std::string *why) {
  const int64_t deadline = now_ms() + timeout_ms;
  ucred cred{};
  if (!peer_cred(fd, &cred) || cred.pid != owner || cred.uid != geteuid()) {
    *why = "the socket's owner is not that rank (pid " + std::to_string(cred.pid) + ", uid " +
           std::to_string(cred.uid) + ")";
    return -EPERM;
  }
  for (;;) {
    HeapOffer msg{};
    iovec iov{&msg, sizeof msg};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (int err = wait_for(fd, POLLIN, deadline)) {
        *why = "no offer from the owner within the deadline";
        return err;
      }
      continue;
    }
    // Whatever descriptors came, take them, so none leaks.
    int got = -1, extra = 0;
    for (cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&mh) : nullptr; cm; cm = CMSG_NXTHDR(&mh, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
      const size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; i++) {
        int f;
        std::memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
        if (got < 0) got = f;
        else close(f), extra++;
      }
    }
    Fd file(got);
    if (n < 0) {
      *why = std::string("recvmsg: ") + std::strerror(errno);
      return -errno;
    }
    if (n != static_cast<ssize_t>(sizeof msg) || (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) ||
        got < 0 || extra || msg.magic != kHeapOfferMagic) {
      *why = n == 0 ? "the owner closed the connection without an offer"
                    : "a malformed offer (or no descriptor: out of file descriptors?)";
      return n == 0 ? -ECONNRESET : -EPROTO;
    }
    *offer = msg;
    *heap_fd = file.release();
    return 0;
  }
}

void release_heaps(HeapShare *share) {
  for (PeerHeap &h : share->heaps) {
    if (!h.own && h.map) munmap(h.map, h.reserved);
    if (!h.own && h.fd >= 0) close(h.fd);
    h = PeerHeap{};
  }
}

int share_heaps(const shaddr_host &host, uintptr_t low_limit, HeapShare *out) {
  const int n = host.size, me = host.rank;
  out->heaps.assign(n, PeerHeap{});
  out->on = out->shared = 0;
  out->summary.clear();

  // 1. This rank's heap, and its listener.
  HeapInfo mine{};
  mine.pid = getpid();
  const heap::Api *api = loaded_heap();
  heap::Status st;
  if (api) st = api->status();
  Fd listener;
  if (!api) {
    set_reason(&mine, "libshaddr-heap is not loaded (shaddr-run preloads it)");
  } else if (!st.on) {
    set_reason(&mine, st.reason);
  } else if (reinterpret_cast<uintptr_t>(st.base) < low_limit) {
    set_reason(&mine, "its range starts below the inner backend's staging offsets");
  } else {
    int lfd = -1;
    // Room for every rank and for many strangers: a full backlog refuses the ranks' connects
    // (EAGAIN) until this rank accepts; the kernel caps it at net.core.somaxconn.
    if (int err = heap_listen(std::max(4 * n, 1024), &mine.token, &lfd)) {
      set_reason(&mine, std::string("no socket to pass it on: ") + std::strerror(-err));
    } else {
      listener.reset(lfd);
      mine.on = 1;
      mine.base = reinterpret_cast<uintptr_t>(st.base);
      mine.reserved = st.reserved;
    }
  }
  // 2.
  std::vector<HeapInfo> info(n);
  if (int err = host.allgather(&mine, info.data(), sizeof mine, host.ctx)) return err;
  for (const HeapInfo &i : info) out->on += i.on != 0;
  auto describe_off = [&] {
    std::string s;
    int listed = 0, off = 0;
    for (int r = 0; r < n; r++) {
      if (info[r].on) continue;
      if (listed++ < 3)
        s += std::string(off ? "; " : "") + "rank " + std::to_string(r) + ": " +
             std::string(info[r].reason, strnlen(info[r].reason, sizeof info[r].reason));
      off++;
    }
    if (listed > 3) s += "; " + std::to_string(listed - 3) + " more";
    return s;
  };
  if (out->on == 0 || n == 1) {
    out->summary = n == 1 ? "heap not needed (one rank)"
                          : "heap off on every rank (" + describe_off() + ")";
    return 0;
  }

  // 3. Connect to every other rank that offers, while serving the ranks that connect here
  // and dropping anyone else at once, so that strangers filling this rank's backlog cannot
  // keep the ranks out: a connect refused for a full backlog (EAGAIN) is tried again until
  // the deadline. 4. Tell everyone whom this rank reached.
  const size_t row = (static_cast<size_t>(n) + 7) / 8;
  std::vector<Fd> conn(n);
  std::vector<uint8_t> connected(row, 0), all;
  const HeapOffer offer{kHeapOfferMagic, static_cast<uint64_t>(me), mine.base, mine.reserved};
  std::vector<pid_t> peers;
  for (int r = 0; r < n; r++)
    if (r != me) peers.push_back(info[r].pid);
  HeapServer server(mine.on ? listener.get() : -1, mine.on ? peers : std::vector<pid_t>{},
                    offer, st.fd);
  std::vector<int> pending;
  for (int r = 0; r < n; r++)
    if (r != me && info[r].on) pending.push_back(r);
  // Until this rank reached every peer and every peer reached it: a rank that left for the
  // allgather would no longer drain its backlog, and a peer's connect could wait for ever.
  const int64_t deadline = now_ms() + kShareTimeoutMs;
  while (!pending.empty() || (mine.on && !server.all_served() && now_ms() < deadline)) {
    std::vector<int> again;
    for (int r : pending) {
      int fd = -1;
      const int err = heap_connect(info[r].token, &fd);
      if (err == 0) {
        conn[r].reset(fd);
        set_bit(connected, r);
      } else if (err == -EAGAIN && now_ms() < deadline) {
        again.push_back(r);
      }
    }
    pending.swap(again);
    if (mine.on) server.poll_once();
    if (!pending.empty() || (mine.on && !server.all_served())) {
      progress_now();
      usleep(100);
    }
  }
  if (int err = allgather_bits(host, connected, &all)) return err;

  // 5. Serve the ranks that connected to this one and were not served yet, then close the
  // listener.
  if (mine.on) {
    std::vector<pid_t> expect;
    for (int r = 0; r < n; r++)
      if (r != me && bit(all, r * row * 8 + me)) expect.push_back(info[r].pid);
    server.expect_only(expect);
    server.serve(kShareTimeoutMs);
    listener.reset();
  }

  // 6. Receive and map each peer's heap.
  std::vector<uint8_t> mapped(row, 0);
  std::string first_failure;
  for (int r = 0; r < n; r++) {
    if (r == me || conn[r].get() < 0) continue;
    HeapOffer offer{};
    int hfd = -1;
    std::string why;
    int err = heap_receive(conn[r].get(), info[r].pid, kShareTimeoutMs, &offer, &hfd, &why);
    conn[r].reset();
    Fd file(hfd);
    struct stat sb{};
    if (!err && (offer.rank != static_cast<uint64_t>(r) || offer.base != info[r].base ||
                 offer.reserved != info[r].reserved)) {
      err = -EPROTO;
      why = "its offer does not match what it announced";
    }
    if (!err && (fstat(file.get(), &sb) != 0 || !S_ISREG(sb.st_mode) ||
                 static_cast<uint64_t>(sb.st_size) > offer.reserved)) {
      err = -EPROTO;
      why = "what it sent is not its heap file";
    }
    void *m = MAP_FAILED;
    if (!err) {
      m = mmap(nullptr, offer.reserved, PROT_READ, MAP_SHARED | MAP_NORESERVE, file.get(), 0);
      if (m == MAP_FAILED) {
        err = -errno;
        why = std::string("mmap of ") + std::to_string(offer.reserved) + " bytes: " +
              std::strerror(errno);
      }
    }
    if (err) {
      if (first_failure.empty())
        first_failure = "rank " + std::to_string(me) + " could not map rank " +
                        std::to_string(r) + "'s heap: " + why;
      continue;
    }
    PeerHeap &h = out->heaps[r];
    h.base = offer.base;
    h.reserved = offer.reserved;
    h.map = static_cast<char *>(m);
    h.fd = file.release();
    h.readable = static_cast<size_t>(sb.st_size);
    set_bit(mapped, r);
  }

  // 7. Shared: every peer mapped it.
  if (int err = allgather_bits(host, mapped, &all)) {
    release_heaps(out);
    return err;
  }
  std::vector<bool> shared(n, false);
  int not_mapped_by = -1, not_mapped_owner = -1;
  for (int o = 0; o < n; o++) {
    if (!info[o].on) continue;
    bool everyone = true;
    for (int r = 0; r < n && everyone; r++)
      if (r != o && !bit(all, r * row * 8 + o)) {
        everyone = false;
        if (not_mapped_by < 0) not_mapped_by = r, not_mapped_owner = o;
      }
    shared[o] = everyone;
    out->shared += everyone;
  }
  for (int r = 0; r < n; r++) {
    PeerHeap &h = out->heaps[r];
    if (r == me && shared[r]) {
      h.base = mine.base;
      h.reserved = mine.reserved;
      h.map = reinterpret_cast<char *>(mine.base);
      h.fd = st.fd;
      h.own = true;
      struct stat sb{};
      h.readable = fstat(st.fd, &sb) == 0 ? static_cast<size_t>(sb.st_size) : 0;
    } else if (r != me && !shared[r] && h.map) {
      munmap(h.map, h.reserved);
      close(h.fd);
      h = PeerHeap{};
    }
  }
  out->summary = "heap on " + std::to_string(out->shared) + " of " + std::to_string(n) + " ranks";
  if (out->on < n) out->summary += " (off on " + describe_off() + ")";
  if (out->shared < out->on)
    out->summary += "; " + std::to_string(out->on - out->shared) +
                    " not shared: rank " + std::to_string(not_mapped_by) +
                    " could not map rank " + std::to_string(not_mapped_owner) + "'s" +
                    (not_mapped_by == me && !first_failure.empty() ? " (" + first_failure + ")"
                                                                   : "");
  return 0;
}

}  // namespace shaddr
