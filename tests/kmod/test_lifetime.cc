// SPDX-License-Identifier: MIT
// Lifetime regression tests of issue 21, run as root in the VM (shaddr_kmod_lifetime_tests).
//
// Defect1.*  mremap() of a window or attachment (the same-size move unlinked and freed it while
//            its VMA stayed mapped): every flavour must fail and leave it fully intact.
// Defect2.*  a plain mmap() of the device racing MAP/ATTACH in another thread (it picked up the
//            window being created): must always fail.
// Defect3.*  overlapping invalidations (two exporter threads' MADV_DONTNEED, REVOKE racing
//            MADV_DONTNEED, exporter exit under two importers): no importer may read or write a
//            page the exporter no longer maps.
// Defect4.*  a huge ATTACH (1 TiB: ENOMEM and no kernel WARNING) and SIGKILL of a 128 GiB
//            ATTACH (dies within ~2 s).
// Lifetime.* the exporter's own mremap flavours and fork followed exactly, and every counter back
//            to 0 after every kind of teardown.
//
// Each scenario runs in a forked child (alarm()-bounded; the parent kills it on timeout), so that
// an oops in one does not take the others with it. Every test fails if the kernel log gains a
// line of memory corruption, a BUG or a WARNING (read from /dev/kmsg), or if a live counter is
// not back to 0 at its end. Importer reads are judged by the invariant of lifetime_util.h.
#include <linux/mempolicy.h>
#include <pthread.h>
#include <sys/prctl.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "lifetime_util.h"

using namespace shaddr_test;
using namespace shaddr_lifetime;

namespace {

constexpr uint32_t kRO = SHADDR_PROT_READ;
constexpr uint32_t kRW = SHADDR_PROT_READ | SHADDR_PROT_WRITE;
constexpr size_t kBlock = kMiB;              // slot size the tests choose
constexpr size_t kBlockPages = kBlock / kPage;

std::string join(const std::vector<std::string> &v) {
  std::string s;
  for (const auto &l : v) s += "\n    " + l;
  return s;
}

// Runs body() in a forked child bounded by alarm(timeout_s). The child's failed expectations
// are printed by gtest there; the parent fails unless the child exits 0 in time.
void in_child(int timeout_s, const std::function<void()> &body) {
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << strerror(errno);
  if (pid == 0) {
    alarm(timeout_s);
    install_probe_handlers();
    body();
    fflush(stdout);
    fflush(stderr);
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  if (!wait_child(pid, timeout_s + 5, &status)) {
    const bool reaped = kill_and_reap(pid, 10);
    ADD_FAILURE() << "the test's child did not finish within " << timeout_s + 5 << " s"
                  << (reaped ? "" : " and could not be killed (stuck in the kernel)");
    return;
  }
  EXPECT_TRUE(exited_ok(status)) << "the test's child " << describe_status(status)
                                 << (died_of(status, SIGALRM) ? " (its time limit)" : "");
}

class Lifetime : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access("/dev/shaddr", R_OK | W_OK), 0) << "module not loaded: " << strerror(errno);
    ASSERT_TRUE(kmsg_.available()) << "cannot read /dev/kmsg: " << strerror(errno);
    install_probe_handlers();
  }
  void TearDown() override {
    EXPECT_EQ(wait_counters_zero(10), "") << "live counters not back to 0";
    const auto bad = kmsg_.bad_lines();
    EXPECT_TRUE(bad.empty()) << "kernel log during the test:" << join(bad);
  }
  KmsgWatch kmsg_;
};

class Defect1 : public Lifetime {};
class Defect2 : public Lifetime {};
class Defect3 : public Lifetime {};
class Defect4 : public Lifetime {};

// One mapping of a block of the caller's own buffer: a window (TRANSLATE + MAP) or an
// attachment (MAKE + GET + ATTACH) of the same kind of buffer.
struct Mapping {
  int fd = -1;
  bool attachment = false;
  uint64_t id = 0;    // handle or segid
  uint64_t apid = 0;  // attachments
  char *addr = nullptr;
  const char *counter() const { return attachment ? "attachments" : "windows"; }
  int withdraw() const {  // REVOKE or REMOVE
    return seg_u64_cmd(fd, attachment ? SHADDR_IOC_REMOVE : SHADDR_IOC_REVOKE, id);
  }
};

// Exports buf (kBlock bytes) on fd and maps it RW (or RO) as a window or an attachment.
void make_mapping(int fd, char *buf, bool attachment, uint32_t prot, Mapping *m) {
  m->fd = fd;
  m->attachment = attachment;
  if (!attachment) {
    shaddr_translate t;
    ASSERT_EQ(translate(fd, buf, kBlock, kRW, &t), 0);
    m->id = t.handle;
    shaddr_map mm;
    ASSERT_EQ(map(fd, t.handle, 0, prot, &mm), 0);
    m->addr = reinterpret_cast<char *>(mm.addr);
  } else {
    ASSERT_EQ(seg_make(fd, buf, kBlock, 0600, &m->id), 0);
    ASSERT_EQ(seg_get(fd, m->id, prot == kRW ? SHADDR_SEG_RDWR : SHADDR_SEG_RDONLY, &m->apid),
              0);
    ASSERT_EQ(seg_attach(fd, m->apid, 0, kBlock, &m->addr), 0);
  }
}

// ======================================================================= defect 1: mremap

// The same-size move of issue 21: EINVAL, and the window must survive whole.
void same_size_move(bool attachment) {
  const int fd = open_dev();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(set_slot_size(fd, kBlock), 0);
  char *buf = map_aligned(kBlock, 2 * kMiB);
  ASSERT_NE(buf, nullptr);
  const uint16_t mg = magic_for(11);
  write_tags(buf, kBlockPages, mg, 1);
  Mapping m;
  ASSERT_NO_FATAL_FAILURE(make_mapping(fd, buf, attachment, kRW, &m));
  ASSERT_EQ(stat_value(m.counter()), 1);
  Sweep s = sweep(m.addr, kBlockPages, mg, 0, 1, 1, false);
  ASSERT_EQ(s.bad, 0u) << s.first_bad;

  char *dst = reserve_aligned(kBlock, 2 * kMiB);
  ASSERT_NE(dst, nullptr);
  void *r = mremap(m.addr, kBlock, kBlock, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
  const int err = errno;
  EXPECT_EQ(r, MAP_FAILED) << "the same-size move of the mapping succeeded";
  if (r != MAP_FAILED) return;  // nothing below makes sense; the child exits with the failure
  EXPECT_TRUE(err == EINVAL || err == EFAULT || err == ENOMEM) << strerror(err);
  EXPECT_EQ(stat_value(m.counter()), 1) << "a failed mremap released the " << m.counter();

  // Still mapped at its address, coherent both ways.
  s = sweep(m.addr, kBlockPages, mg, 0, 1, 1, false);
  EXPECT_EQ(s.bad, 0u) << "after the failed move: " << s.first_bad;
  EXPECT_EQ(probe_write(word_rw(m.addr, 3, kScratchWord), 0x5157), 0);
  EXPECT_EQ(*word(buf, 3, kScratchWord), 0x5157u) << "a write through it missed the exporter";

  // The exporter unmaps its buffer: SIGBUS everywhere (its pages are freed now).
  ASSERT_EQ(munmap(buf, kBlock), 0);
  s = sweep(m.addr, kBlockPages, mg, 0, 1, 1, true);
  EXPECT_EQ(s.bad + s.ok, 0u) << "after the exporter's munmap, " << s.ok + s.bad << " of "
                              << 2 * kBlockPages << " reads did not raise SIGBUS; first: "
                              << s.first_bad;
  // ... and maps fresh memory there: the mapping shows it (or SIGBUS), never the freed pages.
  ASSERT_EQ(mmap(buf, kBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0),
            buf);
  write_tags(buf, kBlockPages, mg, 2);
  s = sweep(m.addr, kBlockPages, mg, 0, 2, 2, true);
  EXPECT_EQ(s.bad, 0u) << s.bad << " bad reads after the exporter's munmap+mmap; first: "
                       << s.first_bad;

  // REVOKE/REMOVE: SIGBUS from then on.
  ASSERT_EQ(m.withdraw(), 0);
  s = sweep(m.addr, kBlockPages, mg, 0, 2, 2, true);
  EXPECT_EQ(s.ok + s.bad, 0u) << s.ok + s.bad << " reads succeeded after REVOKE/REMOVE; first: "
                              << s.first_bad;
  EXPECT_EQ(stat_value(m.counter()), 1);

  // A later munmap/DETACH cleans it up (on the old module: general protection fault in
  // __list_del_entry_valid <- shaddr_window_unlink <- shaddr_window_vm_close).
  if (attachment) {
    EXPECT_EQ(seg_detach(fd, m.addr), 0);
  } else {
    EXPECT_EQ(munmap(m.addr, kBlock), 0);
  }
  EXPECT_EQ(stat_value(m.counter()), 0);
  munmap(dst, kBlock);
  munmap(buf, kBlock);
  close(fd);
}

TEST_F(Defect1, WindowSameSizeMoveFailsAndKeepsTheWindow) {
  in_child(60, [] { same_size_move(false); });
}

TEST_F(Defect1, AttachmentSameSizeMoveFailsAndKeepsTheAttachment) {
  in_child(60, [] { same_size_move(true); });
}

// Every other flavour of mremap, splits and mprotect, on a window and an attachment.
void every_mremap_flavour(bool attachment) {
  const int fd = open_dev();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(set_slot_size(fd, kBlock), 0);
  char *buf = map_aligned(kBlock, 2 * kMiB);
  ASSERT_NE(buf, nullptr);
  const uint16_t mg = magic_for(12);
  uint32_t gen = 1;
  write_tags(buf, kBlockPages, mg, gen);
  Mapping m;
  ASSERT_NO_FATAL_FAILURE(make_mapping(fd, buf, attachment, kRW, &m));
  char *w = m.addr;
  char *dst = reserve_aligned(4 * kBlock, 2 * kMiB);
  ASSERT_NE(dst, nullptr);

  struct Flavour {
    const char *name;
    std::function<void *()> call;
    bool may_be_noop;  // returning the same address unchanged is allowed
  };
  const size_t n = kBlock;
  const std::vector<Flavour> flavours = {
      {"same-size MAYMOVE|FIXED move", [&] { return mremap(w, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, dst); }, false},
      {"same-size MAYMOVE|FIXED move of the second half",
       [&] { return mremap(w + n / 2, n / 2, n / 2, MREMAP_MAYMOVE | MREMAP_FIXED, dst); }, false},
      {"grow in place", [&] { return mremap(w, n, 2 * n, 0); }, false},
      {"grow with MAYMOVE", [&] { return mremap(w, n, 2 * n, MREMAP_MAYMOVE); }, false},
      {"grow to a FIXED address", [&] { return mremap(w, n, 2 * n, MREMAP_MAYMOVE | MREMAP_FIXED, dst); }, false},
      {"shrink in place", [&] { return mremap(w, n, n / 2, 0); }, false},
      {"shrink to a FIXED address", [&] { return mremap(w, n, n / 2, MREMAP_MAYMOVE | MREMAP_FIXED, dst); }, false},
      {"MREMAP_DONTUNMAP", [&] { return mremap(w, n, n, MREMAP_MAYMOVE | MREMAP_DONTUNMAP); }, false},
      {"MREMAP_DONTUNMAP to a FIXED address",
       [&] { return mremap(w, n, n, MREMAP_MAYMOVE | MREMAP_DONTUNMAP | MREMAP_FIXED, dst); }, false},
      {"same size, no flags", [&] { return mremap(w, n, n, 0); }, true},
      {"same size, MAYMOVE", [&] { return mremap(w, n, n, MREMAP_MAYMOVE); }, true},
  };
  for (const auto &f : flavours) {
    SCOPED_TRACE(f.name);
    void *r = f.call();
    if (!(f.may_be_noop && r == w)) {
      EXPECT_EQ(r, MAP_FAILED) << "mremap succeeded: " << r;
      if (r != MAP_FAILED && r != w) munmap(r, 2 * n);
    }
    EXPECT_EQ(stat_value(m.counter()), 1);
    Sweep s = sweep(w, kBlockPages, mg, 0, gen, gen, false);
    EXPECT_EQ(s.bad, 0u) << s.first_bad;
    // The exporter's next generation shows through it at once.
    write_tags(buf, kBlockPages, mg, ++gen);
    s = sweep(w, kBlockPages, mg, 0, gen, gen, false);
    EXPECT_EQ(s.bad, 0u) << s.first_bad;
    if (::testing::Test::HasFatalFailure()) return;
  }

  // A split (partial munmap or mprotect) fails with EINVAL; whole-VMA mprotect works.
  errno = 0;
  EXPECT_EQ(munmap(w + kPage, kPage), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(mprotect(w, kPage, PROT_READ), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(mprotect(w, n, PROT_READ), 0) << strerror(errno);
  EXPECT_EQ(probe_write(word_rw(w, 1, kScratchWord), 1), SIGSEGV);
  EXPECT_EQ(mprotect(w, n, PROT_READ | PROT_WRITE), 0) << strerror(errno);
  EXPECT_EQ(probe_write(word_rw(w, 1, kScratchWord), 2), 0);
  EXPECT_EQ(*word(buf, 1, kScratchWord), 2u);
  EXPECT_EQ(stat_value(m.counter()), 1);

  // A read-only mapping cannot be made writable.
  Mapping ro;
  char *buf2 = map_aligned(kBlock, 2 * kMiB);
  ASSERT_NE(buf2, nullptr);
  ASSERT_NO_FATAL_FAILURE(make_mapping(fd, buf2, attachment, kRO, &ro));
  errno = 0;
  EXPECT_EQ(mprotect(ro.addr, n, PROT_READ | PROT_WRITE), -1);
  EXPECT_EQ(errno, EACCES);

  ASSERT_EQ(m.withdraw(), 0);
  Sweep s = sweep(w, kBlockPages, mg, 0, gen, gen, true);
  EXPECT_EQ(s.ok + s.bad, 0u) << "reads after REVOKE/REMOVE: " << s.first_bad;
  EXPECT_EQ(munmap(w, n), 0);
  EXPECT_EQ(munmap(ro.addr, n), 0);
  EXPECT_EQ(stat_value(m.counter()), 0);
  munmap(dst, 4 * kBlock);
  munmap(buf, kBlock);
  munmap(buf2, kBlock);
  close(fd);
}

TEST_F(Defect1, EveryMremapFlavourOfAWindowFailsAndKeepsIt) {
  in_child(60, [] { every_mremap_flavour(false); });
}

TEST_F(Defect1, EveryMremapFlavourOfAnAttachmentFailsAndKeepsIt) {
  in_child(60, [] { every_mremap_flavour(true); });
}

// ======================================================================= defect 2: plain mmap

// One thread loops MAP (or ATTACH) / touch / UNMAP (or DETACH) on fd; another thread of the
// same process loops plain mmap() of fd at the offsets MAP would use. No plain mmap may succeed,
// and no valid MAP may fail.
void plain_mmap_race(bool attachment) {
  const int fd = open_dev();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(set_slot_size(fd, kBlock), 0);
  char *buf = map_aligned(kBlock, 2 * kMiB);
  ASSERT_NE(buf, nullptr);
  const uint16_t mg = magic_for(21);
  write_tags(buf, kBlockPages, mg, 1);
  uint64_t id = 0, apid = 0;
  if (attachment) {
    ASSERT_EQ(seg_make(fd, buf, kBlock, 0600, &id), 0);
    ASSERT_EQ(seg_get(fd, id, SHADDR_SEG_RDWR, &apid), 0);
  } else {
    shaddr_translate t;
    ASSERT_EQ(translate(fd, buf, kBlock, kRW, &t), 0);
    id = t.handle;
  }

  constexpr long kMaxCreates = 2500;
  const double deadline = now_s() + 10;
  std::atomic<bool> stop{false};
  std::atomic<long> creates{0}, create_errors{0}, tries{0}, bad_reads{0};
  std::atomic<int> first_errno{0};
  std::mutex mu;
  std::vector<char *> stolen;

  std::thread creator([&] {
    for (long i = 0; i < kMaxCreates && !stop && now_s() < deadline; i++) {
      char *addr = nullptr;
      int r;
      if (attachment) {
        r = seg_attach(fd, apid, 0, kBlock, &addr);
      } else {
        shaddr_map mm;
        r = map(fd, id, 0, kRW, &mm);
        addr = reinterpret_cast<char *>(mm.addr);
      }
      if (r) {
        int zero = 0;
        first_errno.compare_exchange_strong(zero, -r);
        create_errors++;
        continue;
      }
      creates++;
      uint64_t v = 0;
      if (probe_read(word(addr, 0), &v) || v != tag(mg, 1, 0)) bad_reads++;
      if (attachment ? seg_detach(fd, addr) : unmap_addr(fd, reinterpret_cast<uint64_t>(addr)))
        create_errors++;
    }
    stop = true;
  });
  std::thread plain([&] {
    // File offsets of the windows MAP creates here (window id * 2^40 + the source's offset in
    // 2 MiB, which is 0), and a few others; all flags that could make a window.
    static const uint64_t offsets[] = {0, 0, 1ull << 40, 0, 2ull << 40, 0, kPage, 0};
    static const int prots[] = {PROT_READ | PROT_WRITE, PROT_READ, PROT_READ | PROT_WRITE,
                                PROT_NONE};
    static const int flags[] = {MAP_SHARED, MAP_SHARED, MAP_SHARED, MAP_PRIVATE};
    for (unsigned k = 0; !stop; k++) {
      void *p = mmap(nullptr, kBlock, prots[k % 4], flags[(k / 4) % 4], fd,
                     offsets[(k / 16) % 8] + (k % 3 == 0 ? 0 : 0));
      tries++;
      if (p != MAP_FAILED) {
        std::lock_guard<std::mutex> g(mu);
        stolen.push_back(static_cast<char *>(p));
        stop = true;
      }
    }
  });
  creator.join();
  plain.join();
  printf("  %s: %ld creates, %ld plain mmap() tries\n", attachment ? "ATTACH" : "MAP",
         creates.load(), tries.load());
  EXPECT_TRUE(stolen.empty()) << "a plain mmap() of /dev/shaddr succeeded (after " << tries
                              << " tries, " << creates << " " << (attachment ? "ATTACH" : "MAP")
                              << "s)";
  EXPECT_EQ(create_errors.load(), 0) << "first error: " << strerror(first_errno.load());
  EXPECT_EQ(bad_reads.load(), 0) << "reads through fresh mappings that were wrong";
  EXPECT_GT(creates.load(), 100) << "too few rounds to mean anything";

  // What a stolen mapping shows once the export is withdrawn and the pages are freed (the
  // issue saw freed or reused pages): it must raise SIGBUS, if it exists at all.
  ASSERT_EQ(seg_u64_cmd(fd, attachment ? SHADDR_IOC_REMOVE : SHADDR_IOC_REVOKE, id), 0);
  ASSERT_EQ(munmap(buf, kBlock), 0);
  for (char *p : stolen) {
    Sweep s = sweep(p, kBlockPages, mg, 0, 1, 1, true);
    EXPECT_EQ(s.ok + s.bad, 0u) << "the stolen mapping still reads after REVOKE and munmap: "
                                << s.ok << " tagged, " << s.bad << " others, first: "
                                << s.first_bad;
    munmap(p, kBlock);
  }
  if (attachment) {
    EXPECT_EQ(seg_u64_cmd(fd, SHADDR_IOC_RELEASE, apid), 0);
  }
  close(fd);
}

TEST_F(Defect2, PlainMmapRacingMapIsRefused) {
  in_child(60, [] { plain_mmap_race(false); });
}

TEST_F(Defect2, PlainMmapRacingAttachIsRefused) {
  in_child(60, [] { plain_mmap_race(true); });
}

TEST_F(Defect2, PlainMmapOfEveryKindIsRefused) {
  in_child(30, [] {
    const int fd = open_dev();
    ASSERT_GE(fd, 0);
    const int rdonly = open("/dev/shaddr", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(rdonly, 0);
    int successes = 0;
    for (int f : {fd, rdonly})
      for (uint64_t off : {0ull, 1ull << 40, 5ull << 40, 4096ull, 1ull << 46})
        for (int prot : {PROT_NONE, PROT_READ, PROT_READ | PROT_WRITE, PROT_EXEC})
          for (int flags : {MAP_SHARED, MAP_PRIVATE, MAP_SHARED | MAP_POPULATE,
                            MAP_SHARED_VALIDATE, MAP_PRIVATE | MAP_NORESERVE})
            for (size_t len : {kPage, kBlock, 16 * kBlock}) {
              errno = 0;
              void *p = mmap(nullptr, len, prot, flags, f, off);
              if (p != MAP_FAILED) {
                successes++;
                ADD_FAILURE() << "mmap(len " << len << ", prot " << prot << ", flags " << flags
                              << ", offset " << off << ") succeeded";
                munmap(p, len);
              } else if (errno != EINVAL && !(f == rdonly && errno == EACCES)) {
                ADD_FAILURE() << "mmap(len " << len << ", prot " << prot << ", flags " << flags
                              << ", offset " << off << "): " << strerror(errno);
              }
              if (successes > 5) return;
            }
    close(rdonly);
    close(fd);
  });
}

// ======================================================================= defect 3: invalidations

// State shared between the exporter process, the importer's readers and the test.
struct Ctl {
  std::atomic<uint32_t> started{0}, done{0};  // generations (see lifetime_util.h)
  std::atomic<uint64_t> handle{0};
  std::atomic<uint32_t> round{0};            // the exporter's round under way
  std::atomic<uint32_t> withdrawn_round{0};  // last round whose REVOKE has returned
  std::atomic<uint32_t> exited_round{0};     // last round whose exporter was reaped
  std::atomic<uint32_t> mapped_round{0};     // importer: this round's window is populated
  std::atomic<uint32_t> finished_round{0};   // importer: done with this round
  std::atomic<uint64_t> sweeps{0};
  std::atomic<uint64_t> maps[2]{};
  std::atomic<uint32_t> acked[2]{};
  std::atomic<uint64_t> bad_rounds{0};  // bit r-1: round r had a violation
  std::atomic<uint64_t> bad_reads{0}, good_reads{0}, sigbus_reads{0};
  std::atomic<int> stop{0};
  std::atomic<int> exporter_error{0};
  char first_bad[256]{};
  std::atomic<int> first_bad_claimed{0};

  void violation(uint32_t round, const std::string &what) {
    bad_reads++;
    if (round >= 1 && round <= 64) bad_rounds |= 1ull << (round - 1);
    if (first_bad_claimed.exchange(1) == 0)
      snprintf(first_bad, sizeof(first_bad), "round %u: %s", round, what.c_str());
  }
};

int popcount(uint64_t v) { return __builtin_popcountll(v); }

// Reads every page of the window once, judging each read against the exporter's state, and
// writes a scratch word where the read succeeded (a write to a freed page shows as
// "pagealloc: memory corruption" on a poisoned kernel). withdrawn(): REVOKE/exit has returned,
// so every read must raise SIGBUS.
void judge_sweep(Ctl *c, char *win, uint16_t mg, uint32_t round, bool writable,
                 const std::function<bool()> &withdrawn) {
  for (size_t p = 0; p < kBlockPages; p++) {
    const bool gone = withdrawn();
    const uint32_t d = c->done.load();
    uint64_t v = 0;
    const int sig = probe_read(word(win, p), &v);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const uint32_t s = c->started.load();
    if (sig == SIGBUS) {
      c->sigbus_reads++;
      continue;
    }
    if (sig) {
      c->violation(round, "page " + std::to_string(p) + ": signal " + std::to_string(sig));
      continue;
    }
    if (gone) {
      c->violation(round, "page " + std::to_string(p) + " read " + hex(v) +
                              " after the exporter's REVOKE/exit had returned");
      continue;
    }
    const std::string why = judge(v, mg, static_cast<uint32_t>(p), d, s);
    if (!why.empty()) {
      c->violation(round, "page " + std::to_string(p) + ": " + why);
      continue;
    }
    c->good_reads++;
    if (writable) probe_write(word_rw(win, p, kScratchWord), tag(0x5c5c, round, p));
  }
  c->sweeps++;
}

// Readers: `n` threads sweeping whatever window *cur points at (nullptr: pause) until stop.
class Readers {
 public:
  Readers(Ctl *c, uint16_t mg, int n, std::function<bool(uint32_t)> withdrawn)
      : c_(c), mg_(mg), withdrawn_(std::move(withdrawn)) {
    for (int i = 0; i < n; i++) threads_.emplace_back([this] { run(); });
  }
  ~Readers() { stop(); }
  void stop() {
    stop_ = true;
    for (auto &t : threads_)
      if (t.joinable()) t.join();
  }
  // Points the readers at `win` of `round` (nullptr: no window); returns once no reader uses
  // the previous one.
  void set(char *win, uint32_t round) {
    cur_round_ = round;
    cur_ = win;
    const uint64_t gen = ++gen_;
    wait_until([&] { return quiesced(gen); }, 30);
  }

 private:
  bool quiesced(uint64_t gen) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto v : seen_)
      if (v < gen) return false;
    return seen_.size() == threads_.size();
  }
  void run() {
    size_t me;
    {
      std::lock_guard<std::mutex> g(mu_);
      me = seen_.size();
      seen_.push_back(0);
    }
    while (!stop_) {
      const uint64_t gen = gen_.load();
      char *win = cur_.load();
      const uint32_t round = cur_round_.load();
      {
        std::lock_guard<std::mutex> g(mu_);
        seen_[me] = gen;
      }
      if (!win) {
        sched_yield();
        continue;
      }
      if (gen != gen_.load()) continue;
      judge_sweep(c_, win, mg_, round, true, [&] { return withdrawn_(round); });
    }
    std::lock_guard<std::mutex> g(mu_);
    seen_[me] = ~0ull;
  }
  Ctl *c_;
  uint16_t mg_;
  std::function<bool(uint32_t)> withdrawn_;
  std::atomic<bool> stop_{false};
  std::atomic<char *> cur_{nullptr};
  std::atomic<uint32_t> cur_round_{0};
  std::atomic<uint64_t> gen_{0};
  std::mutex mu_;
  std::vector<uint64_t> seen_;
  std::vector<std::thread> threads_;
};

// A spin barrier for the exporter's threads: they start their invalidations together.
struct Go {
  std::atomic<uint32_t> go{0}, acked{0};
  void run(int nthreads, uint32_t round) {
    acked = 0;
    go = round;
    wait_until([&] { return acked.load() == static_cast<uint32_t>(nthreads); }, 60);
  }
};

void report_rounds(Ctl *c, int rounds, const char *what) {
  printf("  %s: %d rounds, %llu sweeps, %llu good reads, %llu SIGBUS, %llu bad reads in %d "
         "rounds\n",
         what, rounds, (unsigned long long)c->sweeps.load(),
         (unsigned long long)c->good_reads.load(), (unsigned long long)c->sigbus_reads.load(),
         (unsigned long long)c->bad_reads.load(), popcount(c->bad_rounds.load()));
  EXPECT_EQ(c->bad_rounds.load(), 0u)
      << popcount(c->bad_rounds.load()) << " of " << rounds << " rounds read pages the exporter "
      << "no longer mapped (" << c->bad_reads << " reads); first: " << c->first_bad;
}

// Two exporter threads MADV_DONTNEED the same range at once, `rounds` times, while two reader
// threads of the importer sweep the window.
TEST_F(Defect3, TwoExporterThreadsDontneedTheSameRange) {
  in_child(120, [] {
    constexpr int kRounds = 40;
    Ctl *c = shared_new<Ctl>();
    const uint16_t mg = magic_for(31);
    const pid_t exporter = fork();
    ASSERT_GE(exporter, 0);
    if (exporter == 0) {
      alarm(110);
      const int fd = open_dev();
      char *buf = map_aligned(kBlock, 2 * kMiB);
      if (fd < 0 || !buf || set_slot_size(fd, kBlock)) _exit(10);
      madvise(buf, kBlock, MADV_NOHUGEPAGE);
      write_tags(buf, kBlockPages, mg, 1);
      c->started = c->done = 1;
      shaddr_translate t;
      if (translate(fd, buf, kBlock, kRW, &t)) _exit(11);
      c->handle = t.handle;
      Go go;
      std::atomic<bool> quit{false};
      std::vector<std::thread> th;
      for (int i = 0; i < 2; i++)
        th.emplace_back([&] {
          for (uint32_t seen = 0; !quit;) {
            const uint32_t r = go.go.load();
            if (r == seen) {
              sched_yield();
              continue;
            }
            seen = r;
            if (madvise(buf, kBlock, MADV_DONTNEED)) c->exporter_error = errno;
            go.acked++;
          }
        });
      for (uint32_t r = 1; r <= kRounds && !c->stop; r++) {
        // Let the importer fault every page back in, so that there is something to zap.
        const uint64_t sw = c->sweeps.load();
        wait_until([&] { return c->sweeps.load() >= sw + 2 || c->stop; }, 20);
        c->round = r;
        c->started = r + 1;
        go.run(2, r);
        write_tags(buf, kBlockPages, mg, r + 1);
        c->done = r + 1;
      }
      quit = true;
      for (auto &x : th) x.join();
      c->finished_round = kRounds;
      wait_until([&] { return c->stop.load() != 0; }, 60);
      _exit(0);
    }
    const int fd = open_dev();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(wait_until([&] { return c->handle.load() != 0; }, 20));
    shaddr_map m;
    ASSERT_EQ(map(fd, c->handle, 0, kRW, &m), 0);
    {
      Readers readers(c, mg, 2, [c](uint32_t) { return false; });
      readers.set(reinterpret_cast<char *>(m.addr), 0);
      EXPECT_TRUE(wait_until([&] { return c->finished_round.load() == kRounds; }, 100))
          << "the exporter did not finish its rounds";
      readers.set(nullptr, 0);
    }
    EXPECT_EQ(unmap_addr(fd, m.addr), 0);
    c->stop = 1;
    int status = 0;
    EXPECT_TRUE(wait_child(exporter, 20, &status) && exited_ok(status))
        << "exporter " << describe_status(status);
    EXPECT_EQ(c->exporter_error.load(), 0) << strerror(c->exporter_error.load());
    report_rounds(c, kRounds, "two threads' MADV_DONTNEED");
    close(fd);
  });
}

// One exporter thread REVOKEs the handle while another MADV_DONTNEEDs the block, `rounds` times
// with a fresh handle each; the importer's readers must never read a freed page, and nothing
// at all once REVOKE has returned.
TEST_F(Defect3, RevokeRacingDontneed) {
  in_child(120, [] {
    constexpr int kRounds = 32;
    Ctl *c = shared_new<Ctl>();
    const uint16_t mg = magic_for(32);
    const pid_t exporter = fork();
    ASSERT_GE(exporter, 0);
    if (exporter == 0) {
      alarm(110);
      const int fd = open_dev();
      char *buf = map_aligned(kBlock, 2 * kMiB);
      if (fd < 0 || !buf || set_slot_size(fd, kBlock)) _exit(10);
      madvise(buf, kBlock, MADV_NOHUGEPAGE);
      write_tags(buf, kBlockPages, mg, 1);
      c->started = c->done = 1;
      Go go;
      std::atomic<bool> quit{false};
      std::atomic<uint64_t> handle{0};
      std::thread dontneed([&] {
        for (uint32_t seen = 0; !quit;) {
          const uint32_t r = go.go.load();
          if (r == seen) {
            sched_yield();
            continue;
          }
          seen = r;
          if (madvise(buf, kBlock, MADV_DONTNEED)) c->exporter_error = errno;
          go.acked++;
        }
      });
      std::thread revoke([&] {
        for (uint32_t seen = 0; !quit;) {
          const uint32_t r = go.go.load();
          if (r == seen) {
            sched_yield();
            continue;
          }
          seen = r;
          if (seg_u64_cmd(fd, SHADDR_IOC_REVOKE, handle)) c->exporter_error = 1000;
          go.acked++;
        }
      });
      for (uint32_t r = 1; r <= kRounds && !c->stop; r++) {
        shaddr_translate t;
        if (translate(fd, buf, kBlock, kRW, &t)) {
          c->exporter_error = 1001;
          break;
        }
        handle = t.handle;
        c->handle = t.handle;
        c->round = r;
        if (!wait_until([&] { return c->mapped_round.load() == r || c->stop; }, 20)) break;
        c->started = r + 1;
        go.run(2, r);
        c->withdrawn_round = r;
        write_tags(buf, kBlockPages, mg, r + 1);
        c->done = r + 1;
        if (!wait_until([&] { return c->finished_round.load() == r || c->stop; }, 20)) break;
      }
      quit = true;
      dontneed.join();
      revoke.join();
      wait_until([&] { return c->stop.load() != 0; }, 60);
      _exit(0);
    }
    const int fd = open_dev();
    ASSERT_GE(fd, 0);
    ASSERT_EQ(set_slot_size(fd, kBlock), 0);
    int rounds_done = 0;
    {
      Readers readers(c, mg, 2, [c](uint32_t round) { return c->withdrawn_round.load() >= round; });
      for (uint32_t r = 1; r <= kRounds; r++) {
        if (!wait_until([&] { return c->round.load() == r; }, 20)) {
          ADD_FAILURE() << "the exporter did not start round " << r;
          break;
        }
        shaddr_map m;
        const int rc = map(fd, c->handle, 0, kRW, &m);
        EXPECT_EQ(rc, 0) << "MAP in round " << r << ": " << strerror(-rc);
        if (rc) break;
        readers.set(reinterpret_cast<char *>(m.addr), r);
        const uint64_t sw = c->sweeps.load();
        wait_until([&] { return c->sweeps.load() >= sw + 2; }, 20);
        c->mapped_round = r;
        // Keep reading through the race and a few sweeps after it.
        wait_until([&] { return c->done.load() == r + 1; }, 30);
        const uint64_t sw2 = c->sweeps.load();
        wait_until([&] { return c->sweeps.load() >= sw2 + 2; }, 20);
        readers.set(nullptr, r);
        EXPECT_EQ(unmap_addr(fd, m.addr), 0);
        c->finished_round = r;
        rounds_done++;
      }
    }
    c->stop = 1;
    int status = 0;
    EXPECT_TRUE(wait_child(exporter, 20, &status) && exited_ok(status))
        << "exporter " << describe_status(status);
    EXPECT_EQ(c->exporter_error.load(), 0);
    EXPECT_EQ(rounds_done, kRounds);
    report_rounds(c, kRounds, "REVOKE racing MADV_DONTNEED");
    close(fd);
  });
}

// An exporter exits while two importer processes loop MAP / read / write / UNMAP on its
// handle; `rounds` exporters in turn. Reads must be the exporter's data or SIGBUS, SIGBUS only
// once it was reaped, and the importers' writes must never land in freed pages.
TEST_F(Defect3, ExporterExitUnderTwoImporters) {
  in_child(150, [] {
    constexpr int kRounds = 16;
    Ctl *c = shared_new<Ctl>();
    const uint64_t seed = 0x21;
    printf("  seed %llu\n", (unsigned long long)seed);
    Rng rng(seed);
    pid_t importers[2];
    for (int i = 0; i < 2; i++) {
      importers[i] = fork();
      ASSERT_GE(importers[i], 0);
      if (importers[i] == 0) {
        alarm(140);
        const int fd = open_dev();
        if (fd < 0 || set_slot_size(fd, kBlock)) _exit(10);
        uint32_t acked = 0;
        while (!c->stop) {
          const uint32_t r = c->round.load();
          if (r == acked || r == 0) {
            sched_yield();
            continue;
          }
          const uint64_t h = c->handle.load();
          const uint16_t mg = magic_for(100 + r);
          const bool exited_before = c->exited_round.load() >= r;
          shaddr_map m;
          const int rc = map(fd, h, 0, kRW, &m);
          if (rc == -ENOENT) {
            if (exited_before || c->exited_round.load() >= r) c->acked[i] = acked = r;
            continue;
          }
          if (rc) {
            c->violation(r, "MAP: " + std::string(strerror(-rc)));
            c->acked[i] = acked = r;
            continue;
          }
          if (exited_before) c->violation(r, "MAP succeeded after the exporter was reaped");
          c->maps[i]++;
          judge_sweep(c, reinterpret_cast<char *>(m.addr), mg, r, true,
                      [&] { return c->exited_round.load() >= r; });
          if (unmap_addr(fd, m.addr)) c->violation(r, "UNMAP failed");
        }
        _exit(0);
      }
    }
    for (uint32_t r = 1; r <= kRounds; r++) {
      const uint16_t mg = magic_for(100 + r);
      c->handle = 0;
      const pid_t exporter = fork();
      ASSERT_GE(exporter, 0);
      if (exporter == 0) {
        alarm(60);
        const int fd = open_dev();
        char *buf = map_aligned(kBlock, 2 * kMiB);
        if (fd < 0 || !buf || set_slot_size(fd, kBlock)) _exit(10);
        write_tags(buf, kBlockPages, mg, 1);
        shaddr_translate t;
        if (translate(fd, buf, kBlock, kRW, &t)) _exit(11);
        c->handle = t.handle;
        wait_until([&] { return c->mapped_round.load() == r; }, 30);
        _exit(0);  // with the handle mapped by the importers, and the file open
      }
      ASSERT_TRUE(wait_until([&] { return c->handle.load() != 0; }, 20));
      c->started = c->done = 1;
      c->round = r;
      const uint64_t m0 = c->maps[0], m1 = c->maps[1];
      wait_until([&] { return c->maps[0] > m0 && c->maps[1] > m1; }, 20);
      sleep_ms(static_cast<double>(rng.below(20)));
      c->mapped_round = r;  // the exporter exits now
      int status = 0;
      EXPECT_TRUE(wait_child(exporter, 30, &status) && exited_ok(status))
          << "exporter of round " << r << " " << describe_status(status);
      c->exited_round = r;
      EXPECT_TRUE(wait_until([&] { return c->acked[0] == r && c->acked[1] == r; }, 30))
          << "an importer did not see the handle of round " << r << " go";
    }
    c->stop = 1;
    for (pid_t p : importers) {
      int status = 0;
      EXPECT_TRUE(wait_child(p, 30, &status) && exited_ok(status))
          << "importer " << describe_status(status);
    }
    printf("  maps %llu + %llu\n", (unsigned long long)c->maps[0].load(),
           (unsigned long long)c->maps[1].load());
    report_rounds(c, kRounds, "exporter exit under two importers");
  });
}

// ======================================================================= defect 4: huge ATTACH

// An unprivileged process attaches its own whole-address-space segment: 1 TiB beyond the
// per-file budget is ENOMEM, more than 1 TiB at once EINVAL, neither with a kernel WARNING
// (the fixture reads the kernel log).
TEST_F(Defect4, HugeAttachFailsCleanly) {
  in_child(60, [] {
    ASSERT_TRUE(become_nobody());
    const int fd = open_dev();
    ASSERT_GE(fd, 0) << strerror(errno);
    uint64_t segid, apid;
    ASSERT_EQ(seg_make(fd, nullptr, ~0ull, 0600, &segid), 0);
    ASSERT_EQ(seg_get(fd, segid, SHADDR_SEG_RDWR, &apid), 0);
    constexpr uint64_t kTiB = 1ull << 40;
    constexpr uint64_t kFar = 16 * kTiB;  // nothing mapped there
    char *a = nullptr;
    EXPECT_EQ(seg_attach(fd, apid, kFar, kTiB + kPage, &a), -EINVAL);
    // 1 TiB alone: within max_attach_mib (1 TiB): success without populating the range, or
    // ENOMEM; never a WARNING.
    const double t0 = now_s();
    int r = seg_attach(fd, apid, kFar, kTiB, &a);
    EXPECT_TRUE(r == 0 || r == -ENOMEM) << strerror(-r);
    EXPECT_LT(now_s() - t0, 10.0) << "a 1 TiB ATTACH of an unmapped range took long";
    if (r == 0) {
      EXPECT_EQ(stat_value("attachments"), 1);
      EXPECT_EQ(seg_detach(fd, a), 0);
    }
    // 1 MiB attached, then 1 TiB more is beyond the budget: ENOMEM.
    char *small = nullptr;
    AlignedBuffer mine(kMiB, kMiB);
    ASSERT_EQ(seg_attach(fd, apid, reinterpret_cast<uint64_t>(mine.data()), kMiB, &small), 0);
    EXPECT_EQ(seg_attach(fd, apid, kFar, kTiB, &a), -ENOMEM);
    EXPECT_EQ(seg_attach(fd, apid, kFar, kTiB - kPage, &a), -ENOMEM);
    EXPECT_EQ(stat_value("attachments"), 1);
    EXPECT_EQ(seg_detach(fd, small), 0);
    EXPECT_EQ(seg_u64_cmd(fd, SHADDR_IOC_REMOVE, segid), 0);
    close(fd);
  });
}

// A process inside a 128 GiB ATTACH (a mapped, untouched range: the populate loop walks it) is
// SIGKILLed: it must be gone within ~2 s.
TEST_F(Defect4, SigkillEndsA128GiBAttachQuickly) {
  Pipe up;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(600);  // the old module: minutes
    if (!become_nobody()) _exit(10);
    constexpr size_t kSize = 128ull << 30;
    char *big = map_aligned(kSize, 2 * kMiB);
    if (!big) _exit(11);
    const int fd = open_dev();
    uint64_t segid, apid;
    if (fd < 0 || seg_make(fd, big, kSize, 0600, &segid) ||
        seg_get(fd, segid, SHADDR_SEG_RDWR, &apid))
      _exit(12);
    up.put('R');
    char *a = nullptr;
    const int r = seg_attach(fd, apid, 0, kSize, &a);
    up.put(r == 0 ? 'D' : 'E');
    pause();
    _exit(0);
  }
  EXPECT_EQ(up.get<char>(), 'R');
  // Wait until it is inside the ioctl (nr 16), then give it a moment in the populate loop.
  const bool in_ioctl = wait_until([&] { return current_syscall(pid) == SYS_ioctl; }, 5);
  sleep_ms(300);
  const bool still_in = current_syscall(pid) == SYS_ioctl;
  const double t0 = now_s();
  int status = 0;
  kill(pid, SIGKILL);
  const bool reaped = wait_child(pid, 20, &status);
  const double took = now_s() - t0;
  printf("  SIGKILL %s the ATTACH: reaped after %.2f s\n",
         still_in ? "inside" : (in_ioctl ? "after" : "around"), took);
  EXPECT_TRUE(reaped) << "still alive 20 s after SIGKILL (stuck in the ATTACH ioctl)";
  if (!reaped) {
    kill_and_reap(pid, 600);  // the old module: let it finish, or the unload fails
    return;
  }
  EXPECT_TRUE(died_of(status, SIGKILL)) << describe_status(status);
  EXPECT_LT(took, 2.5) << "SIGKILL took " << took << " s to end the ATTACH";
}

// ======================================================================= lifetime

// The exporter moves, shrinks, grows and DONTUNMAPs its buffer under a window and an
// attachment: both show exactly what the exporter maps at each step (SIGBUS for holes).
TEST_F(Lifetime, ExporterMremapFlavoursAreFollowed) {
  in_child(60, [] {
    const int fd = open_dev();
    ASSERT_GE(fd, 0);
    ASSERT_EQ(set_slot_size(fd, kBlock), 0);
    char *buf = map_aligned(kBlock, 2 * kMiB);
    ASSERT_NE(buf, nullptr);
    char *away = reserve_aligned(kBlock, 2 * kMiB);
    ASSERT_NE(away, nullptr);
    const uint16_t mg = magic_for(41);
    uint32_t gen = 1;
    write_tags(buf, kBlockPages, mg, gen);
    Mapping win, att;
    ASSERT_NO_FATAL_FAILURE(make_mapping(fd, buf, false, kRW, &win));
    ASSERT_NO_FATAL_FAILURE(make_mapping(fd, buf, true, kRW, &att));
    const size_t half = kBlockPages / 2;

    // Both must read generation `g` in pages [from, to), zeros (if zeros) or SIGBUS (if hole).
    auto expect = [&](const char *step, uint32_t g, size_t from, size_t to, bool hole,
                      bool zeros) {
      for (const Mapping *m : {&win, &att}) {
        for (size_t p = from; p < to; p++) {
          uint64_t v = 0;
          const int sig = probe_read(word(m->addr, p), &v);
          std::string bad;
          if (hole) {
            if (sig != SIGBUS) bad = sig ? "signal " + std::to_string(sig) : "read " + hex(v);
          } else if (sig) {
            bad = "signal " + std::to_string(sig);
          } else if (zeros ? v != 0 : v != tag(mg, g, static_cast<uint32_t>(p))) {
            bad = judge(v, mg, static_cast<uint32_t>(p), g, g);
            if (bad.empty()) bad = "read " + hex(v);
          }
          if (!bad.empty()) {
            ADD_FAILURE() << step << ": " << m->counter() << " page " << p << ": " << bad
                          << (hole ? " (expected SIGBUS)" : zeros ? " (expected zeros)" : "");
            break;
          }
        }
      }
    };
    auto rewrite = [&](const char *step) {
      write_tags(buf, kBlockPages, mg, ++gen);
      expect(step, gen, 0, kBlockPages, false, false);
    };
    expect("start", gen, 0, kBlockPages, false, false);

    // 1. Move away (the old address is a hole), then fresh memory at the old address.
    ASSERT_EQ(mremap(buf, kBlock, kBlock, MREMAP_MAYMOVE | MREMAP_FIXED, away), away);
    expect("moved away", gen, 0, kBlockPages, true, false);
    ASSERT_EQ(mmap(buf, kBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0),
              buf);
    expect("fresh memory", gen, 0, kBlockPages, false, true);
    rewrite("fresh memory written");
    // 2. Move away and back: the same pages (the moved generation) again.
    ASSERT_EQ(mremap(buf, kBlock, kBlock, MREMAP_MAYMOVE | MREMAP_FIXED, away), away);
    ASSERT_EQ(mremap(away, kBlock, kBlock, MREMAP_MAYMOVE | MREMAP_FIXED, buf), buf);
    expect("moved back", gen, 0, kBlockPages, false, false);
    // 3. MREMAP_DONTUNMAP: the old range stays, empty.
    void *moved = mremap(buf, kBlock, kBlock, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
    ASSERT_NE(moved, MAP_FAILED) << strerror(errno);
    expect("DONTUNMAP", gen, 0, kBlockPages, false, true);
    munmap(moved, kBlock);
    rewrite("after DONTUNMAP, written");
    // 4. Shrink to half (the tail is a hole), grow back in place (the tail reads zeros).
    ASSERT_EQ(mremap(buf, kBlock, kBlock / 2, 0), buf);
    expect("shrunk: head", gen, 0, half, false, false);
    expect("shrunk: tail", gen, half, kBlockPages, true, false);
    ASSERT_EQ(mremap(buf, kBlock / 2, kBlock, 0), buf) << strerror(errno);
    expect("grown: head", gen, 0, half, false, false);
    expect("grown: tail", gen, half, kBlockPages, false, true);
    rewrite("grown, written");
    // 5. Move the middle quarter away (splits the exporter's VMA) and back.
    char *mid = buf + kBlock / 4;
    ASSERT_EQ(mremap(mid, kBlock / 4, kBlock / 4, MREMAP_MAYMOVE | MREMAP_FIXED, away), away);
    expect("middle moved: head", gen, 0, kBlockPages / 4, false, false);
    expect("middle moved: middle", gen, kBlockPages / 4, half, true, false);
    expect("middle moved: tail", gen, half, kBlockPages, false, false);
    ASSERT_EQ(mremap(away, kBlock / 4, kBlock / 4, MREMAP_MAYMOVE | MREMAP_FIXED, mid), mid);
    expect("middle back", gen, 0, kBlockPages, false, false);
    // 6. mprotect: read-only and back; windows keep showing the same pages.
    ASSERT_EQ(mprotect(buf, kBlock, PROT_READ), 0);
    expect("exporter read-only", gen, 0, kBlockPages, false, false);
    ASSERT_EQ(mprotect(buf, kBlock, PROT_READ | PROT_WRITE), 0);
    rewrite("exporter writable again");

    EXPECT_EQ(munmap(win.addr, kBlock), 0);
    EXPECT_EQ(seg_detach(fd, att.addr), 0);
    munmap(buf, kBlock);
    munmap(away, kBlock);
    close(fd);
  });
}

// The exporter forks; its child writes its copy of every page and exits: the importer (another
// process) keeps seeing the parent's pages only, before and after the parent's next write.
TEST_F(Lifetime, ExporterForkNeverShowsTheChildsCopy) {
  in_child(60, [] {
    Pipe down, up;
    const uint16_t mg = magic_for(42);
    const pid_t exporter = fork();
    ASSERT_GE(exporter, 0);
    if (exporter == 0) {
      alarm(50);
      const int fd = open_dev();
      char *buf = map_aligned(kBlock, 2 * kMiB);
      if (fd < 0 || !buf || set_slot_size(fd, kBlock)) _exit(10);
      write_tags(buf, kBlockPages, mg, 1);
      shaddr_translate t;
      if (translate(fd, buf, kBlock, kRW, &t)) _exit(11);
      up.put(t.handle);
      for (;;) {
        const char cmd = down.get<char>();
        if (cmd == 'f') {
          const pid_t child = fork();
          if (child == 0) {
            write_tags(buf, kBlockPages, magic_for(43), 7);  // its own copy
            shaddr_translate t2;
            _exit(translate(fd, buf, kBlock, kRW, &t2) == -EBADFD ? 0 : 1);
          }
          int st = 0;
          waitpid(child, &st, 0);
          up.put(static_cast<char>(exited_ok(st) ? 'k' : 'x'));
        } else if (cmd == 'w') {
          write_tags(buf, kBlockPages, mg, 2);
          up.put('k');
        } else {
          _exit(0);
        }
      }
    }
    const uint64_t h = up.get<uint64_t>();
    const int fd = open_dev();
    ASSERT_GE(fd, 0);
    shaddr_map m;
    ASSERT_EQ(map(fd, h, 0, kRW, &m), 0);
    char *w = reinterpret_cast<char *>(m.addr);
    Sweep s = sweep(w, kBlockPages, mg, 0, 1, 1, false);
    EXPECT_EQ(s.bad, 0u) << "before the fork: " << s.first_bad;
    down.put('f');
    EXPECT_EQ(up.get<char>(), 'k') << "the exporter's child could use the inherited file";
    s = sweep(w, kBlockPages, mg, 0, 1, 1, false);
    EXPECT_EQ(s.bad, 0u) << "after the child wrote its copy: " << s.first_bad;
    // A write through the window goes to the parent's page.
    EXPECT_EQ(probe_write(word_rw(w, 9, kScratchWord), 0x77), 0);
    down.put('w');
    EXPECT_EQ(up.get<char>(), 'k');
    s = sweep(w, kBlockPages, mg, 0, 2, 2, false);
    EXPECT_EQ(s.bad, 0u) << "after the parent's write: " << s.first_bad;
    down.put('q');
    int status = 0;
    EXPECT_TRUE(wait_child(exporter, 20, &status) && exited_ok(status));
    s = sweep(w, kBlockPages, mg, 0, 2, 2, true);
    EXPECT_EQ(s.ok + s.bad, 0u) << "reads after the exporter was reaped: " << s.first_bad;
    EXPECT_EQ(unmap_addr(fd, m.addr), 0);
    close(fd);
  });
}

// Every way a process can leave with windows and attachments mapped, in both roles, brings
// every counter back to 0.
TEST_F(Lifetime, CountersReturnToZeroAfterEveryTeardown) {
  // exporter_end: 0 exit, 1 SIGKILL, 2 close its file then exit, 3 REVOKE/REMOVE then exit;
  // importer_end: 0 exit with everything mapped, 1 SIGKILL, 2 close its file first (the
  // mappings keep it) then exit, 3 munmap, 4 UNMAP/DETACH, 5 RELEASE of the apid, 6 a fork
  // holds the inherited file past the importer's exit.
  for (int exporter_end = 0; exporter_end < 4; exporter_end++) {
    for (int importer_end = 0; importer_end < 7; importer_end++) {
      SCOPED_TRACE("exporter end " + std::to_string(exporter_end) + ", importer end " +
                   std::to_string(importer_end));
      Pipe e_up, e_down, i_up, i_down;
      const pid_t exporter = fork();
      ASSERT_GE(exporter, 0);
      if (exporter == 0) {
        alarm(30);
        int fd = open_dev();
        char *buf = map_aligned(2 * kBlock, 2 * kMiB);
        if (fd < 0 || !buf || set_slot_size(fd, kBlock)) _exit(10);
        write_tags(buf, 2 * kBlockPages, magic_for(44), 1);
        shaddr_translate t;
        uint64_t segid;
        if (translate(fd, buf, 2 * kBlock, kRW, &t) || seg_make(fd, buf, 2 * kBlock, 0600, &segid))
          _exit(11);
        e_up.put(t.handle);
        e_up.put(segid);
        e_down.get<char>();
        if (exporter_end == 2) close(fd);
        if (exporter_end == 3) {
          seg_u64_cmd(fd, SHADDR_IOC_REVOKE, t.handle);
          seg_u64_cmd(fd, SHADDR_IOC_REMOVE, segid);
        }
        e_up.put('k');
        e_down.get<char>();
        _exit(0);
      }
      const uint64_t handle = e_up.get<uint64_t>(), segid = e_up.get<uint64_t>();
      const pid_t importer = fork();
      ASSERT_GE(importer, 0);
      if (importer == 0) {
        alarm(30);
        install_probe_handlers();
        const int fd = open_dev();
        if (fd < 0 || set_slot_size(fd, kBlock)) _exit(10);
        shaddr_map m0, m1;
        uint64_t apid;
        char *a0, *a1;
        if (map(fd, handle, 0, kRW, &m0) || map(fd, handle, 1, kRO, &m1) ||
            seg_get(fd, segid, SHADDR_SEG_RDWR, &apid) ||
            seg_attach(fd, apid, 0, 2 * kBlock, &a0) || seg_attach(fd, apid, kPage, 10, &a1))
          _exit(11);
        uint64_t v;
        if (probe_read(word(reinterpret_cast<void *>(m1.addr), 5), &v) || probe_read(word(a0, 300), &v))
          _exit(12);
        i_up.put('m');
        i_down.get<char>();
        switch (importer_end) {
          case 2:
            close(fd);
            break;
          case 3:
            munmap(reinterpret_cast<void *>(m0.addr), kBlock);
            munmap(reinterpret_cast<void *>(m1.addr), kBlock);
            munmap(a0, 2 * kBlock);
            munmap(reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(a1) & ~(kPage - 1)), kPage);
            break;
          case 4:
            if (unmap_addr(fd, m0.addr) || unmap_addr(fd, m1.addr) || seg_detach(fd, a0) ||
                seg_detach(fd, a1))
              _exit(13);
            break;
          case 5:
            if (seg_u64_cmd(fd, SHADDR_IOC_RELEASE, apid)) _exit(14);
            if (probe_read(word(a0, 0), &v) != SIGSEGV) _exit(15);
            break;
          case 6:
            if (fork() == 0) {
              sleep_ms(200);  // outlives its parent, holding the inherited file
              _exit(0);
            }
            break;
        }
        i_up.put('k');
        i_down.get<char>();
        _exit(0);
      }
      EXPECT_EQ(i_up.get<char>(), 'm');
      e_down.put('g');
      EXPECT_EQ(e_up.get<char>(), 'k');
      i_down.put('g');
      EXPECT_EQ(i_up.get<char>(), 'k');
      int st = 0;
      if (exporter_end == 1) {
        EXPECT_TRUE(kill_and_reap(exporter, 10));
      } else {
        e_down.put('q');
        EXPECT_TRUE(wait_child(exporter, 10, &st) && exited_ok(st)) << describe_status(st);
      }
      if (importer_end == 1) {
        EXPECT_TRUE(kill_and_reap(importer, 10));
      } else {
        i_down.put('q');
        EXPECT_TRUE(wait_child(importer, 10, &st) && exited_ok(st)) << describe_status(st);
      }
      EXPECT_EQ(wait_counters_zero(5), "");
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace
