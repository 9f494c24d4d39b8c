// SPDX-License-Identifier: MIT
// Lifetime regression tests of the module's mappings, run as root in the VM
// (shaddr_kmod_lifetime_tests).
//
// MremapOfAMapping.*  sys_mremap() of a window or attachment (a same-size move once unlinked and
//            freed it while its VMA stayed mapped): every flavour must fail and leave it intact.
// PlainMmap.*  a plain mmap() of the device, also racing MAP/ATTACH in another thread (it once
//            picked up the window being created): must always fail.
// Invalidation.*  overlapping invalidations (two exporter threads' MADV_DONTNEED, REVOKE racing
//            MADV_DONTNEED, exporter exit under two importers): no importer may read or write a
//            page the exporter no longer maps.
// HugeAttach.*  a huge ATTACH (1 TiB: ENOMEM and no kernel WARNING) and SIGKILL of a 128 GiB
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

// Time factor of a slow kernel: SHADDR_TEST_SLOWDOWN, which lifetime.cmake sets for the debug
// kernel (KASAN, lockdep and page poisoning under TCG), so that its races run as many rounds
// and its time limits mean the same.
double slowdown() {
  const char *e = getenv("SHADDR_TEST_SLOWDOWN");
  const double f = e ? atof(e) : 1;
  return f >= 1 ? f : 1;
}

// A liveness bound of `s` seconds on a release kernel, stretched by the slowdown: the bounds
// catch a hung kernel, and the debug kernel's signals, faults and exits all take longer.
double bound_s(double s) { return s * slowdown(); }
void alarm_s(double s) { alarm(static_cast<unsigned>(bound_s(s))); }

// Runs body() in a forked child bounded by alarm(timeout_s x slowdown()). The child's failed expectations
// are printed by gtest there; the parent fails unless the child exits 0 in time.
void in_child(int timeout_s, const std::function<void()> &body) {
  timeout_s = static_cast<int>(bound_s(timeout_s));
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
  // Wait for it; after an oops a child may hang in the kernel for good: give it 3 s then.
  KmsgWatch oops;
  const double end = now_s() + timeout_s + 5;
  double oops_at = 0;
  int status = 0;
  bool reaped = false;
  while (!(reaped = wait_child(pid, 0.5, &status)) && now_s() < end) {
    if (!oops_at)
      for (const auto &l : oops.new_lines())
        if (l.find("Oops") != std::string::npos || l.find("general protection") != std::string::npos ||
            l.find("BUG:") != std::string::npos || l.find("kernel BUG") != std::string::npos)
          oops_at = now_s();
    if (oops_at && now_s() > oops_at + 3) break;
  }
  if (!reaped) {
    const bool killed = kill_and_reap(pid, bound_s(oops_at ? 3 : 10));
    ADD_FAILURE() << "the test's child did not finish"
                  << (oops_at ? " after a kernel oops" : " in time")
                  << (killed ? "" : " and could not be killed (stuck in the kernel)");
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
    EXPECT_EQ(wait_counters_zero(bound_s(10)), "") << "live counters not back to 0";
    const auto bad = kmsg_.bad_lines();
    EXPECT_TRUE(bad.empty()) << "kernel log during the test:" << join(bad);
  }
  KmsgWatch kmsg_;
};

class MremapOfAMapping : public Lifetime {};
class PlainMmap : public Lifetime {};
class Invalidation : public Lifetime {};
class HugeAttach : public Lifetime {};

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

// ======================================================================= mremap of a mapping

// A same-size move (MREMAP_MAYMOVE|MREMAP_FIXED to a new address) must fail, and the mapping
// survive whole.
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
  void *r = sys_mremap(m.addr, kBlock, kBlock, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
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

TEST_F(MremapOfAMapping, WindowSameSizeMoveFailsAndKeepsTheWindow) {
  in_child(60, [] { same_size_move(false); });
}

TEST_F(MremapOfAMapping, AttachmentSameSizeMoveFailsAndKeepsTheAttachment) {
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
      {"same-size MAYMOVE|FIXED move", [&] { return sys_mremap(w, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, dst); }, false},
      {"same-size MAYMOVE|FIXED move of the second half",
       [&] { return sys_mremap(w + n / 2, n / 2, n / 2, MREMAP_MAYMOVE | MREMAP_FIXED, dst); }, false},
      {"grow in place", [&] { return sys_mremap(w, n, 2 * n, 0); }, false},
      {"grow with MAYMOVE", [&] { return sys_mremap(w, n, 2 * n, MREMAP_MAYMOVE); }, false},
      {"grow to a FIXED address", [&] { return sys_mremap(w, n, 2 * n, MREMAP_MAYMOVE | MREMAP_FIXED, dst); }, false},
      {"shrink in place", [&] { return sys_mremap(w, n, n / 2, 0); }, false},
      {"shrink to a FIXED address", [&] { return sys_mremap(w, n, n / 2, MREMAP_MAYMOVE | MREMAP_FIXED, dst); }, false},
      {"MREMAP_DONTUNMAP", [&] { return sys_mremap(w, n, n, MREMAP_MAYMOVE | MREMAP_DONTUNMAP); }, false},
      {"MREMAP_DONTUNMAP to a FIXED address",
       [&] { return sys_mremap(w, n, n, MREMAP_MAYMOVE | MREMAP_DONTUNMAP | MREMAP_FIXED, dst); }, false},
      {"same size, no flags", [&] { return sys_mremap(w, n, n, 0); }, true},
      {"same size, MAYMOVE", [&] { return sys_mremap(w, n, n, MREMAP_MAYMOVE); }, true},
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

TEST_F(MremapOfAMapping, EveryMremapFlavourOfAWindowFailsAndKeepsIt) {
  in_child(60, [] { every_mremap_flavour(false); });
}

TEST_F(MremapOfAMapping, EveryMremapFlavourOfAnAttachmentFailsAndKeepsIt) {
  in_child(60, [] { every_mremap_flavour(true); });
}

// ======================================================================= plain mmap

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

  // 10 s of racing, longer (up to 10 s x slowdown more) until kMinCreates: a loaded host slows
  // the guest down, and fewer rounds than that mean nothing.
  constexpr long kMaxCreates = 2500, kMinCreates = 50;
  const double deadline = now_s() + 10, hard_deadline = deadline + 10 * slowdown();
  std::atomic<bool> stop{false};
  std::atomic<long> creates{0}, create_errors{0}, tries{0}, bad_reads{0};
  std::atomic<int> first_errno{0};
  std::mutex mu;
  std::vector<char *> stolen;

  std::thread creator([&] {
    for (long i = 0; i < kMaxCreates && !stop; i++) {
      const double t = now_s();
      if (t >= hard_deadline || (t >= deadline && creates > kMinCreates)) break;
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
  EXPECT_GT(creates.load(), kMinCreates) << "too few rounds to mean anything";

  // What a stolen mapping shows once the export is withdrawn and the pages are freed (before
  // the fix it saw freed or reused pages): it must raise SIGBUS, if it exists at all.
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

TEST_F(PlainMmap, RacingMapIsRefused) {
  in_child(60, [] { plain_mmap_race(false); });
}

TEST_F(PlainMmap, RacingAttachIsRefused) {
  in_child(60, [] { plain_mmap_race(true); });
}

TEST_F(PlainMmap, OfEveryKindIsRefused) {
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
              } else if (errno != EINVAL && !(f == rdonly && errno == EACCES) &&
                         !(prot == PROT_EXEC && errno == EPERM)) {  // (a noexec /dev)
                ADD_FAILURE() << "mmap(len " << len << ", prot " << prot << ", flags " << flags
                              << ", offset " << off << "): " << strerror(errno);
              }
              if (successes > 5) return;
            }
    close(rdonly);
    close(fd);
  });
}

// ======================================================================= invalidations

// State shared between the exporter process, the importer's readers and the test.
struct Ctl {
  static constexpr uint32_t kMaxRounds = 1024;
  std::atomic<uint32_t> started{0}, done{0};  // generations (see lifetime_util.h)
  std::atomic<uint64_t> handle{0};
  std::atomic<uint32_t> round{0};            // the exporter's round under way
  std::atomic<uint32_t> rounds_run{0};       // exporter: rounds completed (when it stops)
  std::atomic<uint32_t> withdrawn_round{0};  // last round whose REVOKE has returned
  std::atomic<uint32_t> exited_round{0};     // last round whose exporter was reaped
  std::atomic<uint32_t> mapped_round{0};     // importer: this round's window is populated
  std::atomic<uint32_t> finished_round{0};   // importer: done with this round
  std::atomic<uint64_t> sweeps{0};
  std::atomic<uint64_t> maps[2]{};
  std::atomic<uint32_t> acked[2]{};
  // Where each importer is, for the message when one does not ack (string literals: the
  // forked processes share the binary's addresses), and its mapper thread's last MAP result.
  std::atomic<const char *> importer_at[2]{};
  std::atomic<int> mapper_rc[2]{};
  std::atomic<uint64_t> bad_bits[kMaxRounds / 64]{};  // bit r: round r had a violation
  std::atomic<uint64_t> bad_reads{0}, good_reads{0}, sigbus_reads{0};
  std::atomic<int> stop{0};
  std::atomic<int> exporter_error{0};
  char first_bad[256]{};
  std::atomic<int> first_bad_claimed{0};

  void violation(uint32_t round, const std::string &what) {
    bad_reads++;
    bad_bits[(round % kMaxRounds) / 64] |= 1ull << (round % 64);
    if (first_bad_claimed.exchange(1) == 0)
      snprintf(first_bad, sizeof(first_bad), "round %u: %s", round, what.c_str());
  }
  int bad_rounds() const {
    int n = 0;
    for (const auto &b : bad_bits) n += __builtin_popcountll(b.load());
    return n;
  }
};

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
    full_fence();
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
}

// Readers: `n` threads sweeping, pass after pass, the windows set() gives them (none: pause).
// c->sweeps counts passes over all of them.
class Readers {
 public:
  Readers(Ctl *c, uint16_t mg, int n, std::function<bool(uint32_t)> withdrawn)
      : c_(c), mg_(mg), withdrawn_(std::move(withdrawn)), seen_(n) {
    for (int i = 0; i < n; i++) threads_.emplace_back([this, i] { run(i); });
  }
  ~Readers() { stop(); }
  void stop() {
    stop_ = true;
    for (auto &t : threads_)
      if (t.joinable()) t.join();
  }
  // Points the readers at `wins` of `round`; returns once no reader uses the previous ones.
  void set(const std::vector<char *> &wins, uint32_t round) {
    uint64_t gen;
    {
      std::lock_guard<std::mutex> g(mu_);
      wins_ = wins;
      round_ = round;
      gen = ++gen_;
    }
    wait_until(
        [&] {
          for (auto &v : seen_)
            if (v.load() < gen) return false;
          return true;
        },
        30);
  }

 private:
  void run(int me) {
    std::vector<char *> wins;
    while (!stop_) {
      uint32_t round;
      {
        std::lock_guard<std::mutex> g(mu_);
        wins = wins_;
        round = round_;
        seen_[me] = gen_;
      }
      if (wins.empty()) {
        sleep_ms(0.2);
        continue;
      }
      // Round 0: the exporter's rounds go on under the same windows; blame the current one.
      for (char *w : wins)
        judge_sweep(c_, w, mg_, round ? round : c_->round.load(), true,
                    [&] { return withdrawn_(round); });
      c_->sweeps++;
    }
    seen_[me] = ~0ull;
  }
  Ctl *c_;
  uint16_t mg_;
  std::function<bool(uint32_t)> withdrawn_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<char *> wins_;
  uint32_t round_ = 0;
  uint64_t gen_ = 0;
  std::vector<std::atomic<uint64_t>> seen_;
  std::vector<std::thread> threads_;
};

// The importer's windows of one block: `nfds` files with every slot (3) each, so that an
// invalidation has many windows to zap and the zap takes long.
struct ManyWindows {
  std::vector<int> fds;
  std::vector<shaddr_map> maps;
  explicit ManyWindows(int nfds) {
    for (int i = 0; i < nfds; i++) {
      fds.push_back(open_dev());
      if (fds.back() < 0 || set_slot_size(fds.back(), kBlock)) ADD_FAILURE() << "open";
    }
  }
  ~ManyWindows() {
    for (int fd : fds) close(fd);
  }
  // Maps block 0 of h into every slot; returns the first error (or 0).
  int map_all(uint64_t h) {
    for (int fd : fds)
      for (int slot = 0; slot < 3; slot++) {
        shaddr_map m;
        const int rc = map(fd, h, 0, kRW, &m);
        if (rc) return rc;
        maps.push_back(m);
      }
    return 0;
  }
  std::vector<char *> addrs() const {
    std::vector<char *> v;
    for (const auto &m : maps) v.push_back(reinterpret_cast<char *>(m.addr));
    return v;
  }
  int unmap_all() {
    int bad = 0;
    for (size_t i = 0; i < maps.size(); i++)
      if (unmap_addr(fds[i / 3], maps[i].addr)) bad++;
    maps.clear();
    return bad;
  }
};

// The exporter's helper threads: each runs its action when the round number changes, after a
// per-thread spin (the phase), so that successive rounds try different overlaps.
class Helpers {
 public:
  using Action = std::function<void(uint32_t round)>;
  explicit Helpers(std::vector<Action> actions) : actions_(std::move(actions)) {
    for (size_t i = 0; i < actions_.size(); i++) threads_.emplace_back([this, i] { run(i); });
  }
  ~Helpers() {
    quit_ = true;
    go_ = ~0u;
    go_.notify_all();
    for (auto &t : threads_) t.join();
  }
  // Runs every action once for `round` (thread i spins phase[i] loops first); returns when all
  // have returned.
  void round(uint32_t r, const std::vector<unsigned> &phase) {
    for (size_t i = 0; i < actions_.size() && i < 4; i++) phase_[i] = phase[i];
    acked_ = 0;
    go_ = r;
    go_.notify_all();
    wait_until([&] { return acked_.load() == actions_.size(); }, bound_s(60));
  }

 private:
  void run(size_t i) {
    for (uint32_t seen = 0; !quit_;) {
      go_.wait(seen);  // (a futex: idle helpers leave the CPUs to the readers)
      if (quit_) return;
      const uint32_t r = go_.load();
      if (r == seen) continue;
      seen = r;
      for (unsigned k = 0, n = phase_[i].load(); k < n; k++) asm volatile("" ::: "memory");
      actions_[i](r);
      acked_++;
    }
  }
  std::vector<Action> actions_;
  std::atomic<unsigned> phase_[4]{};
  std::atomic<bool> quit_{false};
  std::atomic<uint32_t> go_{0};
  std::atomic<size_t> acked_{0};
  std::vector<std::thread> threads_;
};

void report_rounds(Ctl *c, uint32_t rounds, const char *what) {
  printf("  %s: %u rounds, %llu sweeps, %llu good reads, %llu SIGBUS, %llu bad reads in %d "
         "rounds\n",
         what, rounds, (unsigned long long)c->sweeps.load(),
         (unsigned long long)c->good_reads.load(), (unsigned long long)c->sigbus_reads.load(),
         (unsigned long long)c->bad_reads.load(), c->bad_rounds());
  EXPECT_EQ(c->bad_rounds(), 0) << c->bad_rounds() << " of " << rounds
                                << " rounds read pages the exporter no longer mapped ("
                                << c->bad_reads << " reads); first: " << c->first_bad;
}

// How long each Invalidation test races (TCG seconds on a release kernel).
constexpr double kRaceSeconds = 8;
double race_seconds() { return kRaceSeconds * slowdown(); }

// When a race loop stops: at race_seconds(), or, while fewer than the rounds the test needs to
// mean anything have run, up to seven times that (a loaded host slows the guest down, and on
// the debug kernel an exporter's exit alone takes seconds).
class RaceClock {
 public:
  explicit RaceClock(uint32_t min_rounds)
      : end_(now_s() + race_seconds()), hard_end_(end_ + 6 * race_seconds()), min_rounds_(min_rounds) {}
  // Whether round r (from 1) is to run.
  bool go_on(uint32_t r) const {
    const double t = now_s();
    return t < end_ || (r <= min_rounds_ && t < hard_end_);
  }

 private:
  double end_, hard_end_;
  uint32_t min_rounds_;
};
// The rounds each test needs to mean anything.
constexpr uint32_t kMinDontneedRounds = 10, kMinRevokeRounds = 5, kMinExitRounds = 5;
// Files the importer maps the block through (3 windows each), and reader threads.
constexpr int kImporterFds = 2;
constexpr int kReaders = 2;

// Two exporter threads MADV_DONTNEED the same range at once, round after round (with a varying
// phase between them), while three reader threads of the importer sweep the window.
TEST_F(Invalidation, TwoExporterThreadsDontneedTheSameRange) {
  in_child(120, [] {
    Ctl *c = shared_new<Ctl>();
    const uint16_t mg = magic_for(31);
    const uint64_t seed = 0x3a;
    printf("  seed %llu\n", (unsigned long long)seed);
    const pid_t exporter = fork();
    ASSERT_GE(exporter, 0);
    if (exporter == 0) {
      alarm_s(110);
      Rng rng(seed);
      const int fd = open_dev();
      char *buf = map_aligned(kBlock, 2 * kMiB);
      if (fd < 0 || !buf || set_slot_size(fd, kBlock)) _exit(10);
      madvise(buf, kBlock, MADV_NOHUGEPAGE);
      write_tags(buf, kBlockPages, mg, 1);
      c->started = c->done = 1;
      shaddr_translate t;
      if (translate(fd, buf, kBlock, kRW, &t)) _exit(11);
      c->handle = t.handle;
      auto dontneed = [&](uint32_t) {
        if (madvise(buf, kBlock, MADV_DONTNEED)) c->exporter_error = errno;
      };
      Helpers helpers({dontneed, dontneed});
      const RaceClock clock(kMinDontneedRounds);
      uint32_t r = 1;
      for (; r < Ctl::kMaxRounds && clock.go_on(r) && !c->stop; r++) {
        // Let the importer fault every page back in, so that there is something to zap.
        const uint64_t sw = c->sweeps.load();
        wait_until([&] { return c->sweeps.load() >= sw + 2 || c->stop; }, bound_s(20));
        c->round = r;
        c->started = r + 1;
        const unsigned lag = static_cast<unsigned>(rng.below(4) * rng.below(2000));
        helpers.round(r, rng.chance(50) ? std::vector<unsigned>{0, lag}
                                        : std::vector<unsigned>{lag, 0});
        write_tags(buf, kBlockPages, mg, r + 1);
        c->done = r + 1;
      }
      c->rounds_run = r - 1;
      wait_until([&] { return c->stop.load() != 0; }, bound_s(60));
      _exit(0);
    }
    ASSERT_TRUE(wait_until([&] { return c->handle.load() != 0; }, bound_s(20)));
    ManyWindows wins(kImporterFds);
    ASSERT_EQ(wins.map_all(c->handle), 0);
    {
      Readers readers(c, mg, kReaders, [](uint32_t) { return false; });
      readers.set(wins.addrs(), 0);
      EXPECT_TRUE(wait_until([&] { return c->rounds_run.load() != 0; }, bound_s(100)))
          << "the exporter did not finish its rounds";
      readers.set({}, 0);
    }
    EXPECT_EQ(wins.unmap_all(), 0);
    c->stop = 1;
    int status = 0;
    EXPECT_TRUE(wait_child(exporter, bound_s(20), &status) && exited_ok(status))
        << "exporter " << describe_status(status);
    EXPECT_EQ(c->exporter_error.load(), 0) << strerror(c->exporter_error.load());
    EXPECT_GE(c->rounds_run.load(), kMinDontneedRounds) << "too few rounds to mean anything";
    report_rounds(c, c->rounds_run, "two threads' MADV_DONTNEED");
  });
}

// One exporter thread REVOKEs the handle while another MADV_DONTNEEDs the block, round after
// round with a fresh handle each; the importer's readers must never read a freed page, and
// nothing at all once REVOKE has returned.
TEST_F(Invalidation, RevokeRacingDontneed) {
  in_child(120, [] {
    Ctl *c = shared_new<Ctl>();
    const uint16_t mg = magic_for(32);
    const uint64_t seed = 0x3b;
    printf("  seed %llu\n", (unsigned long long)seed);
    const pid_t exporter = fork();
    ASSERT_GE(exporter, 0);
    if (exporter == 0) {
      alarm_s(110);
      Rng rng(seed);
      const int fd = open_dev();
      char *buf = map_aligned(kBlock, 2 * kMiB);
      if (fd < 0 || !buf || set_slot_size(fd, kBlock)) _exit(10);
      madvise(buf, kBlock, MADV_NOHUGEPAGE);
      write_tags(buf, kBlockPages, mg, 1);
      c->started = c->done = 1;
      std::atomic<uint64_t> handle{0};
      Helpers helpers({[&](uint32_t) {
                         if (madvise(buf, kBlock, MADV_DONTNEED)) c->exporter_error = errno;
                       },
                       [&](uint32_t) {
                         if (seg_u64_cmd(fd, SHADDR_IOC_REVOKE, handle)) c->exporter_error = 1000;
                       }});
      const RaceClock clock(kMinRevokeRounds);
      uint32_t r = 1;
      for (; r < Ctl::kMaxRounds && clock.go_on(r) && !c->stop; r++) {
        shaddr_translate t;
        if (translate(fd, buf, kBlock, kRW, &t)) {
          c->exporter_error = 1001;
          break;
        }
        handle = t.handle;
        c->handle = t.handle;
        c->round = r;
        if (!wait_until([&] { return c->mapped_round.load() == r || c->stop; }, bound_s(20))) break;
        c->started = r + 1;
        const unsigned lag = static_cast<unsigned>(rng.below(4) * rng.below(2000));
        helpers.round(r, rng.chance(50) ? std::vector<unsigned>{0, lag}
                                        : std::vector<unsigned>{lag, 0});
        c->withdrawn_round = r;
        write_tags(buf, kBlockPages, mg, r + 1);
        c->done = r + 1;
        if (!wait_until([&] { return c->finished_round.load() == r || c->stop; }, bound_s(20))) break;
      }
      c->rounds_run = r - 1;
      c->round = ~0u;
      wait_until([&] { return c->stop.load() != 0; }, bound_s(60));
      _exit(0);
    }
    ManyWindows wins(kImporterFds / 2);  // (each round maps them anew)
    uint32_t rounds_done = 0;
    {
      Readers readers(c, mg, kReaders,
                      [c](uint32_t round) { return c->withdrawn_round.load() >= round; });
      for (uint32_t r = 1;; r++) {
        if (!wait_until([&] { return c->round.load() >= r; }, bound_s(20))) {
          ADD_FAILURE() << "the exporter did not start round " << r;
          break;
        }
        if (c->round.load() == ~0u) break;
        const int rc = wins.map_all(c->handle);
        EXPECT_EQ(rc, 0) << "MAP in round " << r << ": " << strerror(-rc);
        if (rc) break;
        readers.set(wins.addrs(), r);  // (MAP populated them)
        const uint64_t sw = c->sweeps.load();
        wait_until([&] { return c->sweeps.load() >= sw + 1; }, bound_s(20));
        c->mapped_round = r;
        // Keep reading through the race and a few sweeps after it.
        wait_until([&] { return c->done.load() == r + 1; }, bound_s(30));
        const uint64_t sw2 = c->sweeps.load();
        wait_until([&] { return c->sweeps.load() >= sw2 + 1; }, bound_s(20));
        readers.set({}, r);
        EXPECT_EQ(wins.unmap_all(), 0);
        c->finished_round = r;
        rounds_done++;
      }
    }
    c->stop = 1;
    int status = 0;
    EXPECT_TRUE(wait_child(exporter, bound_s(20), &status) && exited_ok(status))
        << "exporter " << describe_status(status);
    EXPECT_EQ(c->exporter_error.load(), 0);
    EXPECT_EQ(rounds_done, c->rounds_run.load());
    EXPECT_GE(rounds_done, kMinRevokeRounds) << "too few rounds to mean anything";
    report_rounds(c, rounds_done, "REVOKE racing MADV_DONTNEED");
  });
}

// An exporter exits (in odd rounds while a thread of it loops MADV_DONTNEED) while two importer
// processes loop MAP / read / write / UNMAP on its handle; one exporter per round. Reads must be
// the exporter's data or SIGBUS, SIGBUS only once it was reaped, and the importers' writes must
// never land in freed pages.
TEST_F(Invalidation, ExporterExitUnderTwoImporters) {
  in_child(150, [] {
    Ctl *c = shared_new<Ctl>();
    const uint64_t seed = 0x21;
    printf("  seed %llu\n", (unsigned long long)seed);
    Rng rng(seed);
    pid_t importers[2];
    for (int i = 0; i < 2; i++) {
      importers[i] = fork();
      ASSERT_GE(importers[i], 0);
      if (importers[i] == 0) {
        alarm_s(140);
        // A mapper thread loops MAP/UNMAP of three windows (its populate holds the exporter's
        // mm, so the exporter's exit may leave the teardown to it); the main thread maps three
        // windows per round and sweeps them until it has seen the exporter reaped.
        std::atomic<uint32_t> mapper_done{0};
        std::thread mapper([&] {
          ManyWindows wins(1);
          for (uint32_t done = 0; !c->stop;) {
            const uint32_t r = c->round.load();
            if (r == done || r == 0) {
              sleep_ms(0.1);
              continue;
            }
            const bool exited_before = c->exited_round.load() >= r;
            const int rc = wins.map_all(c->handle.load());
            c->mapper_rc[i] = rc;
            if (rc == 0) c->maps[i]++;
            if (rc == 0 && exited_before)
              c->violation(r, "MAP succeeded after the exporter was reaped");
            if (rc && rc != -ENOENT) c->violation(r, "MAP: " + std::string(strerror(-rc)));
            if (wins.unmap_all()) c->violation(r, "UNMAP failed");
            if (rc == -ENOENT && exited_before) mapper_done = done = r;
          }
        });
        ManyWindows wins(1);
        for (uint32_t acked = 0; !c->stop;) {
          const uint32_t r = c->round.load();
          if (r == acked || r == 0) {
            sleep_ms(0.1);
            continue;
          }
          const uint16_t mg = magic_for(100 + r);
          auto exited = [&] { return c->exited_round.load() >= r; };
          c->importer_at[i] = "in MAP";
          const int rc = wins.map_all(c->handle.load());
          if (rc && rc != -ENOENT) c->violation(r, "MAP: " + std::string(strerror(-rc)));
          if (rc == 0) {
            // Until one whole sweep began after the exporter was reaped.
            for (bool last = false; !last && !c->stop;) {
              c->importer_at[i] = exited() ? "sweeping after the reap" : "sweeping";
              last = exited();
              for (char *w : wins.addrs()) judge_sweep(c, w, mg, r, true, exited);
            }
          }
          c->importer_at[i] = "in UNMAP";
          if (wins.unmap_all()) c->violation(r, "UNMAP failed");
          c->importer_at[i] = "waiting for the reap";
          if (!wait_until([&] { return exited() || c->stop; }, bound_s(30))) break;
          c->importer_at[i] = "waiting for its mapper thread's ENOENT";
          wait_until([&] { return mapper_done.load() == r || c->stop; }, bound_s(30));
          c->acked[i] = acked = r;
        }
        mapper.join();
        _exit(0);
      }
    }
    const RaceClock clock(kMinExitRounds);
    uint32_t r = 1;
    for (; r < Ctl::kMaxRounds && clock.go_on(r); r++) {
      const uint16_t mg = magic_for(100 + r);
      c->handle = 0;
      const pid_t exporter = fork();
      ASSERT_GE(exporter, 0);
      if (exporter == 0) {
        alarm_s(60);
        const int fd = open_dev();
        char *buf = map_aligned(kBlock, 2 * kMiB);
        if (fd < 0 || !buf || set_slot_size(fd, kBlock)) _exit(10);
        if (r % 4 < 2) madvise(buf, kBlock, MADV_NOHUGEPAGE);
        write_tags(buf, kBlockPages, mg, 1);
        shaddr_translate t;
        if (translate(fd, buf, kBlock, kRW, &t)) _exit(11);
        c->handle = t.handle;
        wait_until([&] { return c->mapped_round.load() == r; }, bound_s(30));
        if (r % 2)
          std::thread([&] {
            for (;;) madvise(buf, kBlock, MADV_DONTNEED);
          }).detach();
        _exit(0);  // with the handle mapped by the importers, and the file open
      }
      ASSERT_TRUE(wait_until([&] { return c->handle.load() != 0; }, bound_s(20)));
      c->started = 1;
      c->done = 1;
      // Odd rounds: the exporter's DONTNEED thread zeroes its pages while it exits.
      if (r % 2) c->started = 2;
      c->round = r;
      const uint64_t m0 = c->maps[0], m1 = c->maps[1];
      wait_until([&] { return c->maps[0] > m0 && c->maps[1] > m1; }, bound_s(20));
      sleep_ms(static_cast<double>(rng.below(10)));
      c->mapped_round = r;  // the exporter exits now
      int status = 0;
      EXPECT_TRUE(wait_child(exporter, bound_s(30), &status) && exited_ok(status))
          << "exporter of round " << r << " " << describe_status(status);
      c->exited_round = r;
      auto at = [&](int i) {
        const char *where = c->importer_at[i].load();
        return std::string(where ? where : "not started") + " (its mapper's last MAP " +
               std::to_string(c->mapper_rc[i].load()) + ")";
      };
      EXPECT_TRUE(wait_until([&] { return c->acked[0] == r && c->acked[1] == r; }, bound_s(30)))
          << "an importer did not see the handle of round " << r << " go: importer 0 " << at(0)
          << ", importer 1 " << at(1) << ", " << c->sigbus_reads << " SIGBUS so far"
          << "\n  importer 0:" << describe_tasks(importers[0])
          << "\n  importer 1:" << describe_tasks(importers[1]);
      if (::testing::Test::HasFailure()) break;
    }
    c->stop = 1;
    for (pid_t p : importers) {
      int status = 0;
      EXPECT_TRUE(wait_child(p, bound_s(30), &status) && exited_ok(status))
          << "importer " << describe_status(status);
    }
    printf("  maps %llu + %llu\n", (unsigned long long)c->maps[0].load(),
           (unsigned long long)c->maps[1].load());
    EXPECT_GE(r - 1, kMinExitRounds) << "too few rounds to mean anything";
    report_rounds(c, r - 1, "exporter exit under two importers");
  });
}

// ======================================================================= huge ATTACH

// An unprivileged process attaches its own whole-address-space segment: 1 TiB beyond the
// per-file budget is ENOMEM, more than 1 TiB at once EINVAL, neither with a kernel WARNING
// (the fixture reads the kernel log).
TEST_F(HugeAttach, OneTebibyteFailsCleanly) {
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
    EXPECT_EQ(stat_value("attachments"), 1);
    EXPECT_EQ(seg_detach(fd, small), 0);
    EXPECT_EQ(seg_u64_cmd(fd, SHADDR_IOC_REMOVE, segid), 0);
    close(fd);
  });
}

// A process inside a 128 GiB ATTACH of its own range (256 MiB of it present, the rest mapped
// but untouched: the old populate loop walked it page by page for minutes) is SIGKILLed: it
// must be gone within ~2 s.
TEST_F(HugeAttach, SigkillEndsA128GiBAttachQuickly) {
  int up[2];
  ASSERT_EQ(pipe2(up, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(600);  // the old module: minutes
    if (!become_nobody()) _exit(10);
    constexpr size_t kSize = 128ull << 30;
    char *big = map_aligned(kSize, 2 * kMiB);
    if (!big) _exit(11);
    // Its first 256 MiB present in 4 KiB pages: a populate that maps them takes a while.
    madvise(big, 256 * kMiB, MADV_NOHUGEPAGE);
    memset(big, 1, 256 * kMiB);
    const int fd = open_dev();
    uint64_t segid, apid;
    if (fd < 0 || seg_make(fd, big, kSize, 0600, &segid) ||
        seg_get(fd, segid, SHADDR_SEG_RDWR, &apid))
      _exit(12);
    if (write(up[1], "R", 1) != 1) _exit(13);
    char *a = nullptr;
    const int r = seg_attach(fd, apid, 0, kSize, &a);
    if (write(up[1], r == 0 ? "D" : "E", 1) != 1) _exit(14);
    pause();
    _exit(0);
  }
  close(up[1]);
  char c = 0;
  EXPECT_EQ(read(up[0], &c, 1), 1);
  EXPECT_EQ(c, 'R');
  // Give it a moment in the populate loop; is it still inside the ATTACH then?
  sleep_ms(100);
  pollfd pfd{up[0], POLLIN, 0};
  const bool still_in = poll(&pfd, 1, 0) == 0;
  const double t0 = now_s();
  int status = 0;
  kill(pid, SIGKILL);
  const bool reaped = wait_child(pid, bound_s(20), &status);
  const double took = now_s() - t0;
  close(up[0]);
  printf("  SIGKILL %s the ATTACH: %s after %.2f s\n",
         still_in ? "inside" : "after", reaped ? "reaped" : "still alive", took);
  EXPECT_TRUE(reaped) << "still alive 20 s after SIGKILL (stuck in the ATTACH ioctl)";
  if (!reaped) {
    kill_and_reap(pid, 600);  // the old module: let it finish, or the unload fails
    return;
  }
  EXPECT_TRUE(died_of(status, SIGKILL)) << describe_status(status);
  EXPECT_LT(took, 2.5 * slowdown()) << "SIGKILL took " << took << " s to end the ATTACH";
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
                      bool zeros, bool sigbus_ok = false) {
      for (const Mapping *m : {&win, &att}) {
        for (size_t p = from; p < to; p++) {
          uint64_t v = 0;
          const int sig = probe_read(word(m->addr, p), &v);
          std::string bad;
          if (sig == SIGBUS && sigbus_ok) continue;
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
    ASSERT_EQ(sys_mremap(buf, kBlock, kBlock, MREMAP_MAYMOVE | MREMAP_FIXED, away), away);
    expect("moved away", gen, 0, kBlockPages, true, false);
    ASSERT_EQ(mmap(buf, kBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0),
              buf);
    expect("fresh memory", gen, 0, kBlockPages, false, true);
    rewrite("fresh memory written");
    // 2. Move away and back: the same pages (the moved generation) again.
    ASSERT_EQ(sys_mremap(buf, kBlock, kBlock, MREMAP_MAYMOVE | MREMAP_FIXED, away), away);
    ASSERT_EQ(sys_mremap(away, kBlock, kBlock, MREMAP_MAYMOVE | MREMAP_FIXED, buf), buf);
    expect("moved back", gen, 0, kBlockPages, false, false);
    // 3. MREMAP_DONTUNMAP: the old range stays, empty.
    void *moved = sys_mremap(buf, kBlock, kBlock, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
    ASSERT_NE(moved, MAP_FAILED) << strerror(errno);
    expect("DONTUNMAP", gen, 0, kBlockPages, false, true);
    munmap(moved, kBlock);
    rewrite("after DONTUNMAP, written");
    // 4. Shrink to half (the tail is a hole), grow back in place (the tail reads zeros).
    ASSERT_EQ(sys_mremap(buf, kBlock, kBlock / 2, 0), buf);
    expect("shrunk: head", gen, 0, half, false, false);
    expect("shrunk: tail", gen, half, kBlockPages, true, false);
    ASSERT_EQ(sys_mremap(buf, kBlock / 2, kBlock, 0), buf) << strerror(errno);
    expect("grown: head", gen, 0, half, false, false);
    expect("grown: tail", gen, half, kBlockPages, false, true);
    rewrite("grown, written");
    // 5. Move the middle quarter away (splits the exporter's VMA) and back.
    char *mid = buf + kBlock / 4;
    ASSERT_EQ(sys_mremap(mid, kBlock / 4, kBlock / 4, MREMAP_MAYMOVE | MREMAP_FIXED, away), away);
    expect("middle moved: head", gen, 0, kBlockPages / 4, false, false);
    expect("middle moved: middle", gen, kBlockPages / 4, half, true, false);
    expect("middle moved: tail", gen, half, kBlockPages, false, false);
    ASSERT_EQ(sys_mremap(away, kBlock / 4, kBlock / 4, MREMAP_MAYMOVE | MREMAP_FIXED, mid), mid);
    expect("middle back", gen, 0, kBlockPages, false, false);
    // 6. mprotect: read-only and back; the same pages (mapped read-only into a writable
    // mapping since ABI 1.2; before, SIGBUS).
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
      alarm_s(50);
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
    EXPECT_TRUE(wait_child(exporter, bound_s(20), &status) && exited_ok(status));
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
        alarm_s(30);
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
        alarm_s(30);
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
        EXPECT_TRUE(kill_and_reap(exporter, bound_s(10)));
      } else {
        e_down.put('q');
        EXPECT_TRUE(wait_child(exporter, bound_s(10), &st) && exited_ok(st)) << describe_status(st);
      }
      if (importer_end == 1) {
        EXPECT_TRUE(kill_and_reap(importer, bound_s(10)));
      } else {
        i_down.put('q');
        EXPECT_TRUE(wait_child(importer, bound_s(10), &st) && exited_ok(st)) << describe_status(st);
      }
      EXPECT_EQ(wait_counters_zero(bound_s(5)), "");
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace
