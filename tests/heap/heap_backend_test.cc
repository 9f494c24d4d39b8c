// The heap layer of libshaddr's backends (backend_heap.cc, heap_share.cc) across forked ranks.
// This binary is linked with the heap's objects (its malloc is the heap's, on in every rank: a
// fork child gets a heap file of its own) and exports its symbols, so libshaddr finds the heap
// as it finds a preloaded one. Checked: peers' heap buffers are read through the mapping
// (counted) and everything else through the inner backend, data right both ways; a process
// that is not a rank, or a rank's pid under another uid, gets nothing from the socket; with
// ptrace refused (Yama's ptrace_scope=1, or as simulated here) cma is refused and heap works;
// the heap's settings grammar is the registry's.
#include <dlfcn.h>
#include <linux/capability.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend.h"
#include "bootstrap.h"
#include "comm.h"
#include "heap.h"
#include "heap_internal.h"
#include "heap_share.h"
#include "settings.h"
#include "shaddr/coll.h"

using namespace shaddr;

namespace {

constexpr size_t kHeapBytes = (1u << 20) + 3;  // malloc'd: in the heap (>= SHADDR_HEAP_MIN)
constexpr size_t kSmall = 3000;                // stack, static and mmap buffers

unsigned char pattern(int rank, int which, size_t i) {
  return static_cast<unsigned char>(rank * 37 + which * 11 + i * 13 + 5);
}

#define CHECK_OR(code, cond, ...)                                              \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "rank %d: %s:%d: ", h.rank, __FILE__, __LINE__);    \
      std::fprintf(stderr, __VA_ARGS__);                                       \
      std::fprintf(stderr, "\n");                                              \
      return code;                                                             \
    }                                                                          \
  } while (0)

unsigned char g_static[kSmall];

class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char *name_;
};

// Every rank: one heap buffer and three that are not (stack, static, mmap); each exposed,
// each peer's read with read() and with map(). Heap reads must be counted as heap transfers,
// the others must not; the data must be right either way.
int exchange(const shaddr_host &h, const char *want_name) {
  std::unique_ptr<Backend> be;
  std::string reason;
  CHECK_OR(10, select_backend(h, &be, &reason) == 0, "select_backend: %s", reason.c_str());
  CHECK_OR(11, std::string(be->name()) == want_name, "backend %s, not %s (%s)", be->name(),
           want_name, reason.c_str());
  const std::string on = "heap on " + std::to_string(h.size) + " of " + std::to_string(h.size);
  CHECK_OR(12, reason.find(on) != std::string::npos, "reason: %s", reason.c_str());
  const HeapStats *hs = be->heap_stats();
  CHECK_OR(13, hs && hs->peers == static_cast<uint64_t>(h.size - 1), "heap peers");

  unsigned char stack_buf[kSmall];
  auto *heap_buf = static_cast<unsigned char *>(std::malloc(kHeapBytes));
  auto *mapped = static_cast<unsigned char *>(
      mmap(nullptr, kSmall, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  CHECK_OR(14, heap_buf && heap::contains(heap_buf, kHeapBytes), "malloc not in the heap");
  CHECK_OR(15, mapped != MAP_FAILED, "mmap");
  unsigned char *bufs[4] = {heap_buf, stack_buf, g_static, mapped};
  const size_t lens[4] = {kHeapBytes, kSmall, kSmall, kSmall};
  std::vector<uint64_t> mine(4);
  for (int b = 0; b < 4; b++) {
    for (size_t i = 0; i < lens[b]; i++) bufs[b][i] = pattern(h.rank, b, i);
    uintptr_t remote = 0;
    CHECK_OR(16, be->expose(bufs[b], lens[b], &remote) == 0, "expose %d", b);
    mine[b] = remote;
  }
  CHECK_OR(17, mine[0] == reinterpret_cast<uintptr_t>(heap_buf) && hs->exposures == 1,
           "a heap buffer is exposed as itself, without the inner backend");
  std::vector<uint64_t> all(4 * h.size);
  CHECK_OR(18, h.allgather(mine.data(), all.data(), 4 * sizeof(uint64_t), h.ctx) == 0, "ag");

  std::vector<unsigned char> got(kHeapBytes);
  for (int p = 0; p < h.size; p++) {
    if (p == h.rank) continue;
    for (int b = 0; b < 4; b++) {
      const uint64_t before = hs->transfers;
      std::memset(got.data(), 0, lens[b]);
      int err = be->read(p, all[4 * p + b], got.data(), lens[b]);
      CHECK_OR(20, err == 0, "read rank %d buffer %d: %s", p, b, std::strerror(-err));
      for (size_t i = 0; i < lens[b]; i++)
        CHECK_OR(21, got[i] == pattern(p, b, i), "rank %d buffer %d byte %zu", p, b, i);
      CHECK_OR(22, hs->transfers == before + (b == 0), "buffer %d: heap transfers %llu -> %llu",
               b, (unsigned long long)before, (unsigned long long)hs->transfers);
      RegCache::Ref ref;
      err = be->map(p, all[4 * p + b] + 1, lens[b] - 1, &ref);
      if (b == 0) {
        CHECK_OR(23, err == 0 && hs->transfers == before + 2, "map of a heap buffer");
        CHECK_OR(24, std::memcmp(ref.ptr, got.data() + 1, lens[b] - 1) == 0, "mapped data");
        be->unmap(p, ref);
      } else if (err == 0) {
        CHECK_OR(25, std::memcmp(ref.ptr, got.data() + 1, lens[b] - 1) == 0, "mapped data");
        be->unmap(p, ref);
      } else {
        CHECK_OR(26, err == -ENOTSUP || err == -ENOSPC, "map: %s", std::strerror(-err));
      }
      CHECK_OR(27, hs->transfers == before + 2 * (b == 0), "non-heap buffers are not counted");
    }
    // In the peer's reserved range but past its file: not a heap read (no SIGBUS), the inner
    // backend's error.
    const uint64_t past = reinterpret_cast<uintptr_t>(heap::base()) + heap::reserved_size() - 4096;
    const uint64_t before = hs->transfers;
    CHECK_OR(28, be->read(p, past, got.data(), 64) != 0 && hs->transfers == before,
             "a read past the peer's heap file");
  }
  CHECK_OR(29, hs->bytes == static_cast<uint64_t>(h.size - 1) * (2 * kHeapBytes - 1), "bytes");
  // Nobody frees before everyone has read.
  int dummy = 0;
  std::vector<int> sink(h.size);
  CHECK_OR(30, h.allgather(&dummy, sink.data(), sizeof dummy, h.ctx) == 0, "ag");
  be->end_exposures();
  std::free(heap_buf);
  munmap(mapped, kSmall);
  return 0;
}

bool heap_on() { return heap::enabled(); }

TEST(HeapLayer, PeersHeapBuffersByPointerTheRestByTheInnerBackend) {
  ASSERT_TRUE(heap_on()) << heap::status().reason;
  for (const char *inner : {"cma", "shm"}) {
    ScopedEnv env("SHADDR_BACKEND", inner);
    const std::string name = std::string("heap+") + inner;
    for (int n : {2, 3}) {
      EXPECT_EQ(run_forked(n, [&](const shaddr_host &h) { return exchange(h, name.c_str()); }), 0)
          << inner << ", " << n << " ranks";
    }
  }
}

TEST(HeapLayer, CommunicatorSaysWhatIsOn) {
  ASSERT_TRUE(heap_on()) << heap::status().reason;
  ScopedEnv env("SHADDR_BACKEND", "cma");
  EXPECT_EQ(run_forked(2, [](const shaddr_host &h) {
              shaddr_comm_t *c = nullptr;
              CHECK_OR(1, shaddr_comm_create(&h, &c) == 0, "create: %s", shaddr_last_error());
              CHECK_OR(2, std::string(shaddr_comm_backend(c)) == "heap+cma", "backend %s",
                       shaddr_comm_backend(c));
              const std::string why = from_handle(c)->backend_reason();
              CHECK_OR(3, why.find("heap+cma: heap on 2 of 2 ranks, everything else by cma") == 0,
                       "reason: %s", why.c_str());
              // A Bcast and an Allgather from heap buffers: peers read them through the heap.
              const size_t n = 256 << 10;
              auto *buf = static_cast<unsigned char *>(std::malloc(n));
              auto *all = static_cast<unsigned char *>(std::malloc(2 * n));
              for (size_t i = 0; i < n; i++) buf[i] = h.rank == 0 ? pattern(0, 9, i) : 0;
              CHECK_OR(4, shaddr_bcast(c, buf, n, 0) == 0, "bcast: %s", shaddr_last_error());
              for (size_t i = 0; i < n; i++) CHECK_OR(5, buf[i] == pattern(0, 9, i), "byte %zu", i);
              for (size_t i = 0; i < n; i++) buf[i] = pattern(h.rank, 8, i);
              CHECK_OR(6, shaddr_allgather(c, buf, n, all) == 0, "allgather");
              for (int r = 0; r < 2; r++)
                for (size_t i = 0; i < n; i++)
                  CHECK_OR(7, all[r * n + i] == pattern(r, 8, i), "block %d byte %zu", r, i);
              const HeapStats *hs = from_handle(c)->backend().heap_stats();
              CHECK_OR(8, hs && hs->transfers > 0 && hs->bytes >= n, "heap transfers %llu",
                       hs ? (unsigned long long)hs->transfers : 0ull);
              std::free(buf);
              std::free(all);
              CHECK_OR(9, shaddr_comm_free(c) == 0, "free");
              return 0;
            }),
            0);
}

// This process's address space in bytes (VmSize).
size_t vm_size() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::strtoull(line.c_str() + 7, nullptr, 10) << 10;
  return 0;
}

TEST(HeapLayer, AHeapNotEveryPeerMapsIsNotUsedByAnyone) {
  ASSERT_TRUE(heap_on()) << heap::status().reason;
  ScopedEnv env("SHADDR_BACKEND", "cma");
  EXPECT_EQ(run_forked(2, [](const shaddr_host &h) {
              if (h.rank == 1) {  // no room to map rank 0's heap
                rlimit as{vm_size() + (size_t(256) << 20), RLIM_INFINITY};
                CHECK_OR(1, setrlimit(RLIMIT_AS, &as) == 0, "setrlimit");
              }
              std::unique_ptr<Backend> be;
              std::string reason;
              CHECK_OR(2, select_backend(h, &be, &reason) == 0, "%s", reason.c_str());
              CHECK_OR(3, std::string(be->name()) == "heap+cma", "%s", be->name());
              CHECK_OR(4, reason.find("heap on 1 of 2 ranks; 1 not shared: rank 1 could not map "
                                      "rank 0's") != std::string::npos,
                       "%s", reason.c_str());
              if (h.rank == 1) CHECK_OR(5, reason.find("mmap of") != std::string::npos, "%s", reason.c_str());
              auto *buf = static_cast<unsigned char *>(std::malloc(kHeapBytes));
              for (size_t i = 0; i < kHeapBytes; i++) buf[i] = pattern(h.rank, 0, i);
              uintptr_t remote = 0;
              CHECK_OR(6, be->expose(buf, kHeapBytes, &remote) == 0, "expose");
              const HeapStats *hs = be->heap_stats();
              // Rank 1's heap is shared (rank 0 maps it), rank 0's is not.
              CHECK_OR(7, hs->exposures == (h.rank == 1 ? 1u : 0u), "exposures %llu",
                       (unsigned long long)hs->exposures);
              uint64_t all[2];
              uint64_t mine = remote;
              CHECK_OR(8, h.allgather(&mine, all, sizeof mine, h.ctx) == 0, "ag");
              std::vector<unsigned char> got(kHeapBytes);
              const int peer = 1 - h.rank;
              CHECK_OR(9, be->read(peer, all[peer], got.data(), kHeapBytes) == 0, "read");
              for (size_t i = 0; i < kHeapBytes; i++)
                CHECK_OR(10, got[i] == pattern(peer, 0, i), "byte %zu", i);
              CHECK_OR(11, hs->transfers == (h.rank == 0 ? 1u : 0u), "transfers %llu",
                       (unsigned long long)hs->transfers);
              CHECK_OR(12, h.allgather(&mine, all, sizeof mine, h.ctx) == 0, "ag");
              std::free(buf);
              return 0;
            }),
            0);
}

// --- the socket: only this communicator's ranks, under this uid, get the heap file ---

// Connects to @token and reads: 0 if the server closed without sending anything (no fd).
int stranger(const HeapToken &token, int ready_fd) {
  int fd = -1;
  if (heap_connect(token, &fd)) return 1;
  char c = 1;
  if (write(ready_fd, &c, 1) != 1) return 2;
  char buf[64];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  iovec iov{buf, sizeof buf};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 20000) != 1) return 3;
  const ssize_t n = recvmsg(fd, &mh, 0);
  if (n != 0 || mh.msg_controllen != 0) return 4;  // data or a descriptor came
  return 0;
}

int exit_code(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(HeapShare, StrangersGetNothing) {
  ASSERT_TRUE(heap_on()) << heap::status().reason;
  const heap::Status st = heap::status();
  auto *buf = static_cast<unsigned char *>(std::malloc(kHeapBytes));
  for (size_t i = 0; i < kHeapBytes; i++) buf[i] = pattern(0, 3, i);
  const uint64_t offset = *heap::contains(buf, kHeapBytes);
  HeapToken token;
  int lfd = -1;
  ASSERT_EQ(heap_listen(8, &token, &lfd), 0);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);

  // 1. A process that is not a rank.
  pid_t s1 = fork();
  if (s1 == 0) _exit(stranger(token, ready[1]));
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  // 2. A rank's pid, but another user's: it switches uid before connecting (needs root).
  const bool root = geteuid() == 0;
  pid_t s2 = -1;
  if (root) {
    s2 = fork();
    if (s2 == 0) _exit(setresuid(65534, 65534, 65534) ? 9 : stranger(token, ready[1]));
    ASSERT_EQ(read(ready[0], &c, 1), 1);
  }
  // 3. The rank: gets the file and reads the buffer through its own mapping.
  const pid_t me = getpid();
  pid_t rank = fork();
  if (rank == 0) {
    int fd = -1, hfd = -1;
    HeapOffer offer{};
    std::string why;
    if (heap_connect(token, &fd) || heap_receive(fd, me, 20000, &offer, &hfd, &why)) _exit(1);
    if (offer.base != reinterpret_cast<uintptr_t>(st.base) || offer.reserved != st.reserved) _exit(2);
    auto *m = static_cast<unsigned char *>(heap::map_peer(hfd, offer.reserved));
    if (!m) _exit(3);
    for (size_t i = 0; i < kHeapBytes; i++)
      if (m[offset + i] != pattern(0, 3, i)) _exit(4);
    _exit(0);
  }
  std::vector<pid_t> expect{rank};
  if (s2 > 0) expect.push_back(s2);  // its pid is expected; its uid is not ours
  int strangers = 0;
  const HeapOffer offer{kHeapOfferMagic, 0, reinterpret_cast<uintptr_t>(st.base), st.reserved};
  const int served = heap_serve(lfd, expect, offer, st.fd, 1000, &strangers);
  close(lfd);
  EXPECT_EQ(served, 1);
  EXPECT_EQ(strangers, root ? 2 : 1);
  EXPECT_EQ(exit_code(s1), 0) << "a stranger got something";
  if (root) {
    EXPECT_EQ(exit_code(s2), 0) << "another uid got something";
  }
  EXPECT_EQ(exit_code(rank), 0) << "the rank did not get the heap";
  close(ready[0]);
  close(ready[1]);
  std::free(buf);
}

TEST(HeapShare, ReceiverChecksTheSendersCredentials) {
  ASSERT_TRUE(heap_on()) << heap::status().reason;
  HeapToken token;
  int lfd = -1, fd = -1, hfd = -1;
  ASSERT_EQ(heap_listen(2, &token, &lfd), 0);
  ASSERT_EQ(heap_connect(token, &fd), 0);
  HeapOffer offer{};
  std::string why;
  // Expecting the offer from another pid than the listener's: refused before reading.
  EXPECT_EQ(heap_receive(fd, getpid() + 1, 1000, &offer, &hfd, &why), -EPERM);
  EXPECT_NE(why.find("not that rank"), std::string::npos) << why;
  // The right pid, but the listener closes without an offer.
  close(lfd);
  EXPECT_NE(heap_receive(fd, getpid(), 1000, &offer, &hfd, &why), 0);
  EXPECT_EQ(hfd, -1);
  close(fd);
}

// --- ptrace refused: Yama's ptrace_scope=1 where it exists, else simulated ---

// Drops CAP_SYS_PTRACE (root passes ptrace checks with it) and makes this process
// non-dumpable: process_vm_readv of it then fails with EPERM, as under Yama's scope 1.
bool refuse_ptrace() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &hdr, data)) return false;
  data[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  data[CAP_SYS_PTRACE / 32].permitted &= ~(1u << (CAP_SYS_PTRACE % 32));
  return syscall(SYS_capset, &hdr, data) == 0 && prctl(PR_SET_DUMPABLE, 0) == 0;
}

TEST(HeapLayer, WorksWherePtraceIsRefused) {
  ASSERT_TRUE(heap_on()) << heap::status().reason;
  std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
  int scope = -1;
  if (!(yama >> scope))
    std::printf("[ note     ] no Yama here (/proc/sys/kernel/yama/ptrace_scope is missing): "
                "ptrace refusal simulated with PR_SET_DUMPABLE 0 and without CAP_SYS_PTRACE\n");
  else
    std::printf("[ note     ] Yama ptrace_scope=%d; ptrace refusal simulated on top\n", scope);
  // In a child: rank 0 of run_forked is the calling process, which loses rights for good.
  pid_t pid = fork();
  if (pid == 0) {
    if (!refuse_ptrace()) _exit(50);
    setenv("SHADDR_BACKEND", "cma", 1);
    int rc = run_forked(2, [](const shaddr_host &h) {
      std::unique_ptr<Backend> be;
      std::string reason;
      const int err = select_backend(h, &be, &reason);
      CHECK_OR(1, err == -EPERM, "cma was not refused: %d, %s", err, reason.c_str());
      CHECK_OR(2, reason.find("process_vm_readv") != std::string::npos, "%s", reason.c_str());
      return 0;
    });
    if (rc) _exit(rc);
    setenv("SHADDR_BACKEND", "auto", 1);
    _exit(run_forked(2, [](const shaddr_host &h) { return exchange(h, "heap+shm"); }));
  }
  EXPECT_EQ(exit_code(pid), 0);
}

// --- settings ---

TEST(HeapSettings, GrammarIsTheRegistrys) {
  const SettingDef *mode = find_setting("SHADDR_HEAP"), *min = find_setting("SHADDR_HEAP_MIN"),
                   *max = find_setting("SHADDR_HEAP_MAX"), *verbose = find_setting("SHADDR_VERBOSE");
  ASSERT_TRUE(mode && min && max && verbose);
  EXPECT_STREQ(mode->choices, heap::detail::kHeapModes);
  EXPECT_EQ(min->lo, heap::detail::kHeapMinLo);
  EXPECT_EQ(min->hi, heap::detail::kHeapMinHi);
  EXPECT_EQ(max->lo, heap::detail::kHeapMaxLo);
  EXPECT_EQ(max->hi, heap::detail::kHeapMaxHi);
  EXPECT_FALSE(mode->equal || min->equal || max->equal);
  const char *sizes[] = {"0", "1", "64K", "64k", " 2M ", "1G", "1T", "64T", "65T", "0x1000",
                         "010", "1KiB", "1kb", "K", "", "-1", "+1", "1.5M", "99999999999999999999",
                         "16777216T", "2m", "1M\t", "1 M", "2097151", "2097152"};
  for (const SettingDef *d : {min, max}) {
    for (const char *s : sizes) {
      uint64_t a = 0, b = 0;
      std::string why;
      const bool registry = parse_setting(*d, s, &a, &why) == 0;
      const bool heap = heap::detail::parse_size_setting(s, d->lo, d->hi, &b);
      EXPECT_EQ(heap, registry) << d->name << "=" << s;
      if (heap && registry) {
        EXPECT_EQ(a, b) << d->name << "=" << s;
      }
    }
  }
  for (const char *s : {"auto", "off", "mpi-alloc-only", " off ", "Off", "yes", "", "auto off"}) {
    uint64_t a = 0;
    std::string why;
    const int registry = parse_setting(*mode, s, &a, &why) == 0 ? static_cast<int>(a) : -1;
    EXPECT_EQ(heap::detail::parse_choice_setting(s, heap::detail::kHeapModes), registry) << s;
  }
  for (const char *s : {"1", "0", "yes", "No", "TRUE", "off", " on", "2", "", "y"}) {
    uint64_t a = 0;
    std::string why;
    const int registry = parse_setting(*verbose, s, &a, &why) == 0 ? static_cast<int>(a) : -1;
    EXPECT_EQ(heap::detail::parse_bool_setting(s), registry) << s;
  }
}

}  // namespace

namespace {

// What libshaddr and an interposer's MPI_Alloc_mem use: the table found by dlsym.
TEST(HeapApi, FoundByDlsymAndAllocatesInTheHeap) {
  using Fn = const heap::Api *(*)();
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, heap::kApiSymbol));
  ASSERT_NE(fn, nullptr) << "the executable must export its symbols (ENABLE_EXPORTS)";
  const heap::Api *api = fn();
  ASSERT_EQ(api->version, heap::kApiVersion);
  ASSERT_TRUE(api->status().on) << api->status().reason;
  void *p = api->alloc(100);  // below SHADDR_HEAP_MIN, in the heap all the same
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(api->contains(p, 100).has_value());
  api->release(p);
}

}  // namespace
