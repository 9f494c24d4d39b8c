// SPDX-License-Identifier: MIT
// Time-bounded race and lifetime stress of /dev/shaddr, run as root in the VM.
// Usage: shaddr_race_stress [seconds=60] [seed]   ($SHADDR_RACE_SECONDS, $SHADDR_RACE_SEED,
//        $SHADDR_RACE_SKIP=mremap,plain leaves parts out; see g_skip_mremap)
//
// Exporter processes (kExporters at a time, replaced when they end) each export a 2 MiB buffer
// as a window handle (two 1 MiB blocks), a segment of it and a segment of their whole address
// space, and change it round after round, often from several threads at once: MADV_DONTNEED
// from three threads, munmap+mmap, mremap (move away and fresh, away and back, DONTUNMAP,
// shrink and grow, a split of the middle), REVOKE / REMOVE / close racing MADV_DONTNEED, fork
// (the child writes its copy), page migration, mprotect; and end by exit (sometimes while
// threads invalidate), by closing their files, or by the supervisor's SIGKILL.
// Importer processes (kImporters, several threads, each with its own file besides a shared
// one) MAP/UNMAP windows and GET/ATTACH/DETACH/RELEASE attachments of the same handles, read
// and write through them, try every mremap flavour, splits and mprotect on them, close and
// reopen files with mappings left on them, fork, mmap the device directly, and exit or are
// killed with everything mapped.
// Every importer read is judged by the invariant of lifetime_util.h: the exporter's current (or,
// while a change is under way, the previous) generation at that address, or SIGBUS; never
// anything else, and nothing but SIGBUS once REVOKE/REMOVE/close returned or the exporter was
// reaped. At the end every live counter must be back to 0 and the kernel log clean.
// Exit status 0 only then; one summary line says what ran.
#include <linux/mempolicy.h>
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <functional>
#include <thread>
#include <vector>

#include "lifetime_util.h"

using namespace shaddr_test;
using namespace shaddr_lifetime;

namespace {

constexpr int kExporters = 2;
constexpr int kImporters = 3;
constexpr int kImporterThreads = 3;
constexpr size_t kBlock = kMiB;
constexpr size_t kBuf = 2 * kBlock;
constexpr size_t kBufPages = kBuf / kPage;
constexpr uint16_t kChildMagic = 0x0f0f;  // what an exporter's fork child writes (never valid)
constexpr int kDeadRing = 16;

enum Op {
  kDontneed3,
  kMunmapMmap,
  kMoveAwayFresh,
  kMoveAwayBack,
  kDontunmap,
  kShrinkGrow,
  kSplitMiddle,
  kRevokeRace,
  kRemoveRace,
  kCloseRace,
  kFork,
  kMigrate,
  kMprotect,
  kNumOps
};
const char *const kOpNames[kNumOps] = {"dontneed3", "munmap+mmap", "move+fresh", "move+back",
                                       "dontunmap", "shrink+grow", "split",     "revoke||dontneed",
                                       "remove||dontneed", "close||dontneed", "fork", "migrate",
                                       "mprotect"};

// One exporter slot, in memory shared by every process.
struct ExpRec {
  std::atomic<uint64_t> seq{0};  // seqlock over epoch, handle, segid, whole, base
  std::atomic<uint32_t> epoch{0};
  std::atomic<uint64_t> handle{0}, segid{0}, whole{0}, base{0};
  std::atomic<uint32_t> gone{0};  // last epoch of this slot whose process was reaped
  std::atomic<uint32_t> started{0}, done{0};
  std::atomic<uint64_t> dead[kDeadRing]{};  // ids whose REVOKE/REMOVE/close returned
  std::atomic<uint32_t> dead_next{0};
  std::atomic<int> op{-1};
  std::atomic<int> pid{0};

  void mark_dead(uint64_t id) { dead[dead_next++ % kDeadRing] = id; }
  bool is_dead(uint64_t id) const {
    for (const auto &d : dead)
      if (d.load() == id) return true;
    return false;
  }
  template <typename F>
  void publish(F f) {
    seq++;
    f();
    seq++;
  }
};

struct Snapshot {
  uint32_t epoch;
  uint64_t handle, segid, whole, base;
};

struct Shared {
  std::atomic<int> stop{0};
  ExpRec exp[kExporters];
  // What ran.
  std::atomic<uint64_t> rounds{0}, ops[kNumOps]{}, exporters{0}, importers{0}, kills{0};
  std::atomic<uint64_t> maps{0}, attaches{0}, create_refused{0}, sweeps{0}, reads{0},
      sigbus{0}, writes{0}, vma_ops{0}, plain_mmaps{0}, forks{0}, reopens{0}, leaks{0};
  // MAP/GET refused with EPERM: every process is root, so only an exporter on its way out
  // (the module's ptrace-attach check on a task without its mm) explains it; counted apart.
  std::atomic<uint64_t> eperm{0};
  // What went wrong.
  std::atomic<uint64_t> violations{0}, errors{0};
  std::atomic<uint32_t> nmsg{0};
  char msg[10][256]{};

  void report(std::atomic<uint64_t> &counter, const char *fmt, ...) {
    counter++;
    const uint32_t i = nmsg++;
    if (i >= 10) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg[i], sizeof(msg[i]), fmt, ap);
    va_end(ap);
  }
};

Shared *g;
double g_end;  // when the run ends (CLOCK_MONOTONIC)
// $SHADDR_RACE_SKIP: comma-separated parts to leave out, to look at one class of bug at a time
// (on a module that oopses on the others first): "mremap" (importers' moves of their
// mappings), "plain" (plain mmap of the device).
bool g_skip_mremap = false, g_skip_plain = false;

bool stopping() { return g->stop.load(std::memory_order_relaxed) != 0; }

Snapshot snapshot(const ExpRec &r) {
  for (;;) {
    const uint64_t s1 = r.seq.load();
    if (s1 & 1) {
      sched_yield();
      continue;
    }
    Snapshot s{r.epoch.load(), r.handle.load(), r.segid.load(), r.whole.load(), r.base.load()};
    if (r.seq.load() == s1) return s;
  }
}

// Runs fns at once, each on its own thread, after a spin barrier.
void parallel(const std::vector<std::function<void()>> &fns) {
  std::atomic<size_t> ready{0};
  std::vector<std::thread> th;
  for (const auto &f : fns)
    th.emplace_back([&] {
      ready++;
      while (ready.load() < fns.size()) {
      }
      f();
    });
  for (auto &t : th) t.join();
}

// ======================================================================= exporter

class Exporter {
 public:
  Exporter(int slot, uint32_t epoch, uint64_t seed)
      : r_(g->exp[slot]), epoch_(epoch), mg_(magic_for(epoch)), rng_(seed) {}

  int run() {
    numa_ = access("/sys/devices/system/node/node1", F_OK) == 0;
    fd_a_ = open_dev();
    fd_b_ = open_dev();
    buf_ = map_aligned(kBuf, 2 * kMiB);
    away_ = reserve_aligned(kBuf, 2 * kMiB);
    if (fd_a_ < 0 || fd_b_ < 0 || !buf_ || !away_ || set_slot_size(fd_a_, kBlock)) return 10;
    madvise(buf_, kBuf, rng_.chance(50) ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    write_tags(buf_, kBufPages, mg_, 1);
    r_.started = 1;
    r_.done = 1;
    shaddr_translate t;
    uint64_t segid, whole;
    if (translate(fd_a_, buf_, kBuf, kRW(), &t) || seg_make(fd_b_, buf_, kBuf, 0600, &segid) ||
        seg_make(fd_b_, nullptr, ~0ull, 0600, &whole))
      return 11;
    handle_ = t.handle;
    segid_ = segid;
    whole_ = whole;
    r_.publish([&] {
      r_.epoch = epoch_;
      r_.handle = handle_;
      r_.segid = segid_;
      r_.whole = whole_;
      r_.base = reinterpret_cast<uint64_t>(buf_);
    });

    const int life = 8 + static_cast<int>(rng_.below(40));
    for (int round = 0; round < life && !stopping(); round++) {
      const uint32_t gen = r_.done.load() + 1;
      r_.started = gen;
      const Op op = static_cast<Op>(rng_.below(kNumOps));
      r_.op = op;
      if (!do_op(op)) return 20 + op;
      write_tags(buf_, kBufPages, mg_, gen);
      r_.done = gen;
      r_.op = -1;
      g->ops[op]++;
      g->rounds++;
      sleep_ms(static_cast<double>(rng_.below(3)));
    }
    // The end: exit under invalidating threads, after closing the files, or plainly. A change
    // that never completes: zeros are the exporter's content from now on.
    r_.started = r_.done.load() + 1;
    switch (rng_.below(3)) {
      case 0: {
        for (int i = 0; i < 2; i++)
          std::thread([this] {
            for (;;) madvise(buf_, kBuf, MADV_DONTNEED);
          }).detach();
        sleep_ms(1);
        break;
      }
      case 1:
        close(fd_a_);
        r_.mark_dead(handle_);
        close(fd_b_);
        r_.mark_dead(segid_);
        r_.mark_dead(whole_);
        break;
      default:
        break;
    }
    return 0;
  }

 private:
  static constexpr uint32_t kRW() { return SHADDR_PROT_READ | SHADDR_PROT_WRITE; }

  bool remap_fresh(char *at, size_t len) {
    return mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                0) == at;
  }
  bool rereserve_away() {
    return mmap(away_, kBuf, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
                -1, 0) == away_;
  }
  void dontneed(size_t off, size_t len) { madvise(buf_ + off, len, MADV_DONTNEED); }
  size_t random_range(size_t *len) {
    const size_t first = rng_.below(kBufPages), n = 1 + rng_.below(kBufPages - first);
    *len = n * kPage;
    return first * kPage;
  }
  void republish_handle() {
    shaddr_translate t;
    if (translate(fd_a_, buf_, kBuf, kRW(), &t)) {
      g->report(g->errors, "exporter: TRANSLATE: %s", strerror(errno));
      return;
    }
    handle_ = t.handle;
    r_.publish([&] { r_.handle = handle_; });
  }

  bool do_op(Op op) {
    size_t len1, len2;
    const size_t off1 = random_range(&len1), off2 = random_range(&len2);
    switch (op) {
      case kDontneed3:
        parallel({[&] { dontneed(0, kBuf); }, [&] { dontneed(0, kBuf); },
                  [&] { dontneed(off1, len1); }});
        return true;
      case kMunmapMmap:
        return munmap(buf_, kBuf) == 0 && remap_fresh(buf_, kBuf);
      case kMoveAwayFresh:
        return sys_mremap(buf_, kBuf, kBuf, MREMAP_MAYMOVE | MREMAP_FIXED, away_) == away_ &&
               remap_fresh(buf_, kBuf) && rereserve_away();
      case kMoveAwayBack:
        return sys_mremap(buf_, kBuf, kBuf, MREMAP_MAYMOVE | MREMAP_FIXED, away_) == away_ &&
               sys_mremap(away_, kBuf, kBuf, MREMAP_MAYMOVE | MREMAP_FIXED, buf_) == buf_ &&
               rereserve_away();
      case kDontunmap:
        return sys_mremap(buf_, kBuf, kBuf, MREMAP_MAYMOVE | MREMAP_DONTUNMAP | MREMAP_FIXED,
                      away_) == away_ &&
               rereserve_away();
      case kShrinkGrow: {
        const size_t keep = (1 + rng_.below(kBufPages - 1)) * kPage;
        if (sys_mremap(buf_, kBuf, keep, 0) != buf_) return false;
        if (sys_mremap(buf_, keep, kBuf, 0) == buf_) return true;
        return remap_fresh(buf_ + keep, kBuf - keep);
      }
      case kSplitMiddle: {
        char *mid = buf_ + off1;
        if (off1 + len1 > kBuf) return false;
        return sys_mremap(mid, len1, len1, MREMAP_MAYMOVE | MREMAP_FIXED, away_) == away_ &&
               sys_mremap(away_, len1, len1, MREMAP_MAYMOVE | MREMAP_FIXED, mid) == mid &&
               rereserve_away();
      }
      case kRevokeRace: {
        const uint64_t h = handle_;
        int rc = 0;
        parallel({[&] { rc = seg_u64_cmd(fd_a_, SHADDR_IOC_REVOKE, h); },
                  [&] { dontneed(0, kBuf); }, [&] { dontneed(off2, len2); }});
        if (rc) g->report(g->errors, "exporter: REVOKE: %s", strerror(-rc));
        r_.mark_dead(h);
        republish_handle();
        return true;
      }
      case kRemoveRace: {
        const bool whole = rng_.chance(30);
        const uint64_t id = whole ? whole_ : segid_;
        int rc = 0;
        parallel({[&] { rc = seg_u64_cmd(fd_b_, SHADDR_IOC_REMOVE, id); },
                  [&] { dontneed(0, kBuf); }});
        if (rc) g->report(g->errors, "exporter: REMOVE: %s", strerror(-rc));
        r_.mark_dead(id);
        uint64_t n;
        if (whole ? seg_make(fd_b_, nullptr, ~0ull, 0600, &n)
                  : seg_make(fd_b_, buf_, kBuf, 0600, &n)) {
          g->report(g->errors, "exporter: MAKE: %s", strerror(errno));
          return true;
        }
        (whole ? whole_ : segid_) = n;
        r_.publish([&] {
          r_.segid = segid_;
          r_.whole = whole_;
        });
        return true;
      }
      case kCloseRace: {
        const uint64_t h = handle_;
        parallel({[&] { close(fd_a_); }, [&] { dontneed(0, kBuf); }});
        r_.mark_dead(h);
        fd_a_ = open_dev();
        if (fd_a_ < 0 || set_slot_size(fd_a_, kBlock)) return false;
        republish_handle();
        return true;
      }
      case kFork: {
        pid_t child = -1;
        parallel({[&] {
                    child = fork();
                    if (child == 0) {
                      shaddr_translate t;
                      const bool refused = translate(fd_a_, buf_, kBuf, kRW(), &t) == -EBADFD;
                      close(fd_a_);
                      close(fd_b_);
                      write_tags(buf_, kBufPages, kChildMagic, 1);  // its own copy only
                      _exit(refused ? 0 : 3);
                    }
                  },
                  [&] { dontneed(0, kBuf / 2); }});
        if (child < 0) return false;
        int st = 0;
        if (!wait_child(child, 30, &st)) return false;
        if (!exited_ok(st))
          g->report(g->errors, "exporter's fork child: %s (inherited file not refused?)",
                    describe_status(st).c_str());
        return true;
      }
      case kMigrate: {
        if (!numa_) {
          dontneed(off1, len1);
          return true;
        }
        std::vector<void *> pages(kBufPages);
        std::vector<int> nodes(kBufPages), status(kBufPages);
        const int target = static_cast<int>(rng_.below(2));
        for (size_t i = 0; i < kBufPages; i++) {
          pages[i] = buf_ + i * kPage;
          nodes[i] = target;
        }
        parallel({[&] {
                    syscall(SYS_move_pages, 0, kBufPages, pages.data(), nodes.data(),
                            status.data(), MPOL_MF_MOVE);
                  },
                  [&] { dontneed(kBuf / 2, kBuf / 2); }});
        return true;
      }
      case kMprotect:
        if (mprotect(buf_, kBuf, PROT_READ)) return false;
        dontneed(off1, len1);
        return mprotect(buf_, kBuf, PROT_READ | PROT_WRITE) == 0;
      case kNumOps:
        break;
    }
    return false;
  }

  ExpRec &r_;
  uint32_t epoch_;
  uint16_t mg_;
  Rng rng_;
  bool numa_ = false;
  int fd_a_ = -1, fd_b_ = -1;
  char *buf_ = nullptr, *away_ = nullptr;
  uint64_t handle_ = 0, segid_ = 0, whole_ = 0;
};

// ======================================================================= importer

// One window or attachment an importer thread holds.
struct Held {
  int slot;
  uint32_t epoch;
  uint16_t magic;
  uint64_t id;       // handle or segid it came from
  uint64_t apid;     // attachments
  int fd;
  bool attachment;
  bool writable;
  char *addr;        // page-aligned start
  size_t npages;
  uint32_t first_page;  // exporter page index of page 0
};

class Importer {
 public:
  Importer(uint64_t seed) : seed_(seed) {}

  int run() {
    install_probe_handlers();
    Rng rng(seed_);
    shared_fd_ = open_dev();
    if (shared_fd_ < 0 || set_slot_size(shared_fd_, kBlock)) return 10;
    const double life_end = now_s() + 2 + static_cast<double>(rng.below(7000)) / 1000;
    std::vector<std::thread> th;
    for (int i = 0; i < kImporterThreads; i++)
      th.emplace_back([this, s = rng.next()] { worker(s); });
    th.emplace_back([this, s = rng.next()] { chaos(s); });
    while (!stopping() && now_s() < life_end) sleep_ms(10);
    if (!stopping() && rng.chance(50)) _exit(0);  // exit_group with everything mapped
    quit_ = true;
    for (auto &t : th) t.join();
    return 0;
  }

 private:
  bool over() const { return quit_.load() || stopping(); }

  // Judges one read of page p of h (see lifetime_util.h) and writes its scratch word.
  void check_page(const Held &h, size_t p, Rng &rng) {
    const ExpRec &r = g->exp[h.slot];
    const bool reaped = r.gone.load() >= h.epoch, withdrawn = r.is_dead(h.id);
    const bool dead = reaped || withdrawn;
    const uint32_t d = r.done.load();
    uint64_t v = 0;
    const int sig = probe_read(word(h.addr, p), &v);
    full_fence();
    const uint32_t s = r.started.load();
    const bool gone_after = r.gone.load() >= h.epoch;
    const uint32_t epoch_after = r.epoch.load();
    g->reads++;
    const uint32_t page = h.first_page + static_cast<uint32_t>(p);
    if (sig == SIGBUS) {
      g->sigbus++;
      return;
    }
    if (sig) {
      g->report(g->violations, "%s page %u: signal %d on a mapping that should be there",
                h.attachment ? "attachment" : "window", page, sig);
      return;
    }
    if (dead) {
      g->report(g->violations, "%s %s page %u read %s after %s (epoch %u, exporter op %d)",
                h.writable ? "RW" : "RO", h.attachment ? "attachment" : "window", page,
                hex(v).c_str(),
                reaped ? "its exporter was reaped"
                       : "its exporter's REVOKE/REMOVE/close returned",
                h.epoch, r.op.load());
      return;
    }
    std::string why;
    if (gone_after || epoch_after != h.epoch) {
      // The exporter was reaped during the read: its data or zeros, at the right page.
      if (!(v == 0 || (tag_magic(v) == h.magic && tag_page(v) == page)))
        why = judge(v, h.magic, page, 0, 0);
    } else {
      why = judge(v, h.magic, page, d, s);
    }
    if (!why.empty()) {
      const int op = r.op.load();
      g->report(g->violations, "%s page %u (exporter epoch %u, op %s): %s",
                h.attachment ? "attachment" : "window", page, h.epoch,
                op >= 0 && op < kNumOps ? kOpNames[op] : "none", why.c_str());
      return;
    }
    if (h.writable && rng.chance(50)) {
      probe_write(word_rw(h.addr, p, kScratchWord), tag(0x5c5c, 0, page));
      g->writes++;
    }
  }

  void sweep_held(const Held &h, Rng &rng) {
    for (size_t p = 0; p < h.npages; p++) check_page(h, p, rng);
    g->sweeps++;
  }

  // A VMA operation on a held mapping that must fail (or, for whole mprotect, work) and leave
  // it intact. False if the mapping is gone (reported).
  bool vma_op(Held &h, Rng &rng, char **spot) {
    const size_t len = h.npages * kPage;
    g->vma_ops++;
    void *r = MAP_FAILED;
    const char *what = nullptr;
    // Targets of FIXED moves: our own reserved spot (a failed FIXED mremap unmaps the target
    // first, so re-reserve it without clobbering whatever another thread mapped meanwhile).
    auto rereserve = [&] {
      if (mmap(*spot, 2 * kBuf, PROT_NONE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_NORESERVE, -1,
               0) != *spot) {
        char *n = reserve_aligned(2 * kBuf, 2 * kMiB);
        if (n) *spot = n;
      }
    };
    unsigned pick = static_cast<unsigned>(rng.below(9));
    if (g_skip_mremap && pick <= 5) pick = 7 + pick % 2;
    switch (pick) {
      case 0:
        what = "same-size MAYMOVE|FIXED move";
        r = sys_mremap(h.addr, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, *spot);
        rereserve();
        break;
      case 1:
        what = "grow in place";
        r = sys_mremap(h.addr, len, len + kPage, 0);
        break;
      case 2:
        what = "grow MAYMOVE";
        r = sys_mremap(h.addr, len, 2 * len, MREMAP_MAYMOVE);
        break;
      case 3:
        if (h.npages < 2) return true;
        what = "shrink";
        r = sys_mremap(h.addr, len, len - kPage, 0);
        break;
      case 4:
        what = "DONTUNMAP";
        r = sys_mremap(h.addr, len, len, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
        break;
      case 5:
        if (h.npages < 2) return true;
        what = "move of the tail";
        r = sys_mremap(h.addr + kPage, len - kPage, len - kPage, MREMAP_MAYMOVE | MREMAP_FIXED,
                   *spot);
        rereserve();
        break;
      case 6:
        if (h.npages < 2) return true;
        if (munmap(h.addr + kPage, kPage) == 0) {
          g->report(g->violations, "partial munmap of a %s succeeded",
                    h.attachment ? "attachment" : "window");
          return false;
        }
        return true;
      case 7:
        if (mprotect(h.addr, len, PROT_READ)) {
          g->report(g->errors, "mprotect(PROT_READ) of a whole %s: %s",
                    h.attachment ? "attachment" : "window", strerror(errno));
          return true;
        }
        if (h.writable && mprotect(h.addr, len, PROT_READ | PROT_WRITE))
          g->report(g->errors, "mprotect back to RW: %s", strerror(errno));
        if (!h.writable && mprotect(h.addr, len, PROT_READ | PROT_WRITE) == 0)
          g->report(g->violations, "a read-only %s was made writable",
                    h.attachment ? "attachment" : "window");
        return true;
      default:
        madvise(h.addr, len, MADV_DONTNEED);  // whatever it says, reads go on
        return true;
    }
    if (r != MAP_FAILED && r != h.addr) {
      g->report(g->violations, "mremap (%s) of a %s succeeded", what,
                h.attachment ? "attachment" : "window");
      munmap(r, 2 * len);
      return false;
    }
    return true;
  }

  // Creates a window or attachment of exporter slot i; false if refused (legitimately).
  bool create(Rng &rng, int fd, Held *h) {
    h->slot = static_cast<int>(rng.below(kExporters));
    const ExpRec &r = g->exp[h->slot];
    const Snapshot s = snapshot(r);
    if (s.epoch == 0) return false;
    h->epoch = s.epoch;
    h->magic = magic_for(s.epoch);
    h->fd = fd;
    h->writable = rng.chance(70);
    h->apid = 0;
    if (rng.chance(50)) {
      h->attachment = false;
      h->id = s.handle;
      const bool dead = r.is_dead(s.handle);
      const uint32_t block = static_cast<uint32_t>(rng.below(2));
      shaddr_map m;
      const int rc = map(fd, s.handle, block,
                         h->writable ? SHADDR_PROT_READ | SHADDR_PROT_WRITE : SHADDR_PROT_READ, &m);
      if (rc) {
        if (rc == -EPERM)
          g->eperm++;
        else if (rc != -ENOENT && rc != -ENOSPC)
          g->report(g->errors, "MAP: %s", strerror(-rc));
        g->create_refused++;
        return false;
      }
      if (dead)
        g->report(g->violations, "MAP of a handle whose REVOKE had returned succeeded");
      h->addr = reinterpret_cast<char *>(m.addr);
      h->npages = m.size / kPage;
      h->first_page = block * static_cast<uint32_t>(kBlockPages());
      g->maps++;
      return true;
    }
    h->attachment = true;
    const bool whole = rng.chance(30);
    h->id = whole ? s.whole : s.segid;
    const int rc = seg_get(fd, h->id, h->writable ? SHADDR_SEG_RDWR : SHADDR_SEG_RDONLY, &h->apid);
    if (rc) {
      if (rc == -EPERM)
        g->eperm++;
      else if (rc != -ENOENT)
        g->report(g->errors, "GET: %s", strerror(-rc));
      g->create_refused++;
      return false;
    }
    const size_t first = rng.below(kBufPages), n = 1 + rng.below(kBufPages - first);
    const uint64_t in = rng.chance(20) ? 1 + rng.below(kPage - 1) : 0;  // unaligned offset
    const uint64_t off = (whole ? s.base : 0) + first * kPage + in;
    char *a = nullptr;
    const int rc2 = seg_attach(fd, h->apid, off, n * kPage - in, &a);
    if (rc2) {
      if (rc2 != -ENOENT) g->report(g->errors, "ATTACH: %s", strerror(-rc2));
      seg_u64_cmd(fd, SHADDR_IOC_RELEASE, h->apid);
      g->create_refused++;
      return false;
    }
    h->addr = a - in;
    h->npages = n;
    h->first_page = static_cast<uint32_t>(first);
    g->attaches++;
    return true;
  }
  static constexpr size_t kBlockPages() { return kBlock / kPage; }

  // Tears a mapping down in one of the ways there are.
  void destroy(Held &h, Rng &rng) {
    const size_t len = h.npages * kPage;
    int rc = 0;
    const char *how = "";
    switch (rng.below(3)) {
      case 0:
        how = "munmap";
        rc = munmap(h.addr, len) ? -errno : 0;
        break;
      case 1:
        if (h.attachment) {
          how = "DETACH";
          rc = seg_detach(h.fd, h.addr + rng.below(len));
        } else {
          how = "UNMAP";
          rc = unmap_addr(h.fd, reinterpret_cast<uint64_t>(h.addr));
        }
        break;
      default:
        if (h.attachment) {
          how = "RELEASE";
          rc = seg_u64_cmd(h.fd, SHADDR_IOC_RELEASE, h.apid);
          h.apid = 0;
        } else {
          how = "UNMAP by slot";
          shaddr_query q;
          rc = xioctl(h.fd, SHADDR_IOC_QUERY, &q);
          if (rc == 0) {
            rc = -ENOENT;
            for (uint32_t i = 0; i < q.nr_slots; i++)
              if (q.slots[i].addr == reinterpret_cast<uint64_t>(h.addr)) {
                shaddr_unmap u{};
                u.flags = SHADDR_UNMAP_BY_SLOT;
                u.slot = i;
                rc = xioctl(h.fd, SHADDR_IOC_UNMAP, &u);
              }
          }
        }
        break;
    }
    if (rc) g->report(g->errors, "%s of a %s: %s", how, h.attachment ? "attachment" : "window",
                      strerror(-rc));
    if (h.apid) {
      const int r2 = seg_u64_cmd(h.fd, SHADDR_IOC_RELEASE, h.apid);
      if (r2) g->report(g->errors, "RELEASE: %s", strerror(-r2));
    }
  }

  void worker(uint64_t seed) {
    Rng rng(seed);
    int own = open_dev();
    char *spot = reserve_aligned(2 * kBuf, 2 * kMiB);
    if (own < 0 || set_slot_size(own, kBlock) || !spot) {
      g->report(g->errors, "importer: open: %s", strerror(errno));
      return;
    }
    int leaked = 0;
    while (!over()) {
      Held h;
      const int fd = rng.chance(50) ? shared_fd_ : own;
      if (!create(rng, fd, &h)) {
        sleep_ms(rng.chance(50) ? 1 : 0);
        continue;
      }
      bool alive = true;
      const int rounds = 1 + static_cast<int>(rng.below(4));
      for (int i = 0; i < rounds && alive && !over(); i++) {
        sweep_held(h, rng);
        if (rng.chance(30)) alive = vma_op(h, rng, &spot);
      }
      if (!alive) continue;
      if (fd == own && leaked < 2 && rng.chance(10)) {
        leaked++;  // left for close/exit to clean up
        g->leaks++;
      } else {
        destroy(h, rng);
      }
      if (rng.chance(5)) {  // a new file; the old one lives on in its mappings
        close(own);
        own = open_dev();
        if (own < 0 || set_slot_size(own, kBlock)) {
          g->report(g->errors, "importer: reopen: %s", strerror(errno));
          return;
        }
        leaked = 0;
        g->reopens++;
      }
    }
  }

  // Plain mmap of the device, QUERY and fork, racing the workers' MAPs on the shared file.
  void chaos(uint64_t seed) {
    Rng rng(seed);
    static const uint64_t offsets[] = {0, 1ull << 40, 2ull << 40, 3ull << 40, 4096};
    static const int prots[] = {PROT_READ, PROT_READ | PROT_WRITE, PROT_NONE};
    static const int flags[] = {MAP_SHARED, MAP_SHARED, MAP_PRIVATE};
    while (!over()) {
      for (int i = 0; i < 50 && !g_skip_plain; i++) {
        const size_t len = rng.chance(80) ? kBlock : kPage * (1 + rng.below(512));
        void *p = mmap(nullptr, len, prots[rng.below(3)], flags[rng.below(3)], shared_fd_,
                       offsets[rng.below(5)] + (rng.chance(50) ? 0 : kMiB));
        g->plain_mmaps++;
        if (p != MAP_FAILED) {
          g->report(g->violations, "a plain mmap() of /dev/shaddr succeeded");
          munmap(p, len);
        }
      }
      shaddr_query q;
      if (xioctl(shared_fd_, SHADDR_IOC_QUERY, &q))
        g->report(g->errors, "QUERY: %s", strerror(errno));
      if (rng.chance(20)) {
        const pid_t c = fork();
        if (c == 0) {
          shaddr_map m;
          const int rc = map(shared_fd_, snapshot(g->exp[0]).handle, 0, SHADDR_PROT_READ, &m);
          _exit(rc == -EBADFD ? 0 : 1);
        }
        if (c > 0) {
          int st = 0;
          if (!wait_child(c, 20, &st) || !exited_ok(st))
            g->report(g->errors, "importer's fork child: %s (inherited file not refused?)",
                      describe_status(st).c_str());
          g->forks++;
        }
      }
      sleep_ms(static_cast<double>(rng.below(3)));
    }
  }

  uint64_t seed_;
  int shared_fd_ = -1;
  std::atomic<bool> quit_{false};
};

// ======================================================================= supervisor

struct Child {
  pid_t pid = 0;
  bool exporter = false;
  int slot = 0;
  uint32_t epoch = 0;
  bool killed = false;
};

}  // namespace

int main(int argc, char **argv) {
  const char *env_s = getenv("SHADDR_RACE_SECONDS");
  const char *env_seed = getenv("SHADDR_RACE_SEED");
  const double seconds = argc > 1 ? atof(argv[1]) : env_s ? atof(env_s) : 60;
  uint64_t seed = argc > 2 ? strtoull(argv[2], nullptr, 0)
                           : env_seed ? strtoull(env_seed, nullptr, 0)
                                      : static_cast<uint64_t>(time(nullptr));
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (const char *skip = getenv("SHADDR_RACE_SKIP")) {
    g_skip_mremap = strstr(skip, "mremap") != nullptr;
    g_skip_plain = strstr(skip, "plain") != nullptr;
    printf("leaving out:%s%s\n", g_skip_mremap ? " mremap of mappings" : "",
           g_skip_plain ? " plain mmap of the device" : "");
  }
  printf("shaddr_race_stress: %.0f s, seed %" PRIu64 " (rerun: shaddr_race_stress %.0f %" PRIu64
         ")\n",
         seconds, seed, seconds, seed);
  if (access("/dev/shaddr", R_OK | W_OK) != 0) {
    printf("FAIL: /dev/shaddr: %s (module not loaded?)\n", strerror(errno));
    return 2;
  }
  KmsgWatch kmsg;
  const std::string before = wait_counters_zero(5);
  if (!before.empty()) {
    printf("FAIL: counters not at 0 before the run: %s\n", before.c_str());
    return 2;
  }
  prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphaned grandchildren come back to us
  g = shared_new<Shared>();
  Rng rng(seed);
  const double t0 = now_s();
  g_end = t0 + seconds;
  uint32_t next_epoch = 1;
  std::vector<Child> children;
  int unexpected = 0;

  auto spawn_exporter = [&](int slot) {
    Child c{0, true, slot, next_epoch++, false};
    const uint64_t s = rng.next();
    c.pid = fork();
    if (c.pid == 0) {
      alarm(static_cast<unsigned>(seconds) + 120);
      Exporter e(slot, c.epoch, s);
      _exit(e.run());
    }
    g->exp[slot].pid = c.pid;
    g->exporters++;
    children.push_back(c);
  };
  auto spawn_importer = [&] {
    Child c;
    const uint64_t s = rng.next();
    c.pid = fork();
    if (c.pid == 0) {
      alarm(static_cast<unsigned>(seconds) + 120);
      Importer i(s);
      _exit(i.run());
    }
    g->importers++;
    children.push_back(c);
  };
  // A child ended: note why, and for an exporter, that its epoch is gone (reads must SIGBUS).
  auto ended = [&](size_t idx, int status) {
    Child c = children[idx];
    children.erase(children.begin() + static_cast<long>(idx));
    if (c.exporter) g->exp[c.slot].gone = c.epoch;
    const bool ok = exited_ok(status) || (c.killed && died_of(status, SIGKILL));
    if (!ok) {
      unexpected++;
      g->report(g->errors, "%s pid %d %s", c.exporter ? "exporter" : "importer", c.pid,
                describe_status(status).c_str());
    }
    if (now_s() < g_end - 1 && !stopping()) {
      if (c.exporter)
        spawn_exporter(c.slot);
      else
        spawn_importer();
    }
  };

  for (int i = 0; i < kExporters; i++) spawn_exporter(i);
  for (int i = 0; i < kImporters; i++) spawn_importer();
  double next_kill = now_s() + 1 + static_cast<double>(rng.below(2000)) / 1000;
  while (now_s() < g_end) {
    int status;
    const pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      for (size_t i = 0; i < children.size(); i++)
        if (children[i].pid == p) {
          ended(i, status);
          break;
        }
      continue;  // (or an orphaned grandchild, reaped)
    }
    if (now_s() > next_kill && !children.empty()) {
      Child &c = children[rng.below(children.size())];
      if (!c.killed) {
        kill(c.pid, SIGKILL);
        c.killed = true;
        g->kills++;
      }
      next_kill = now_s() + 0.5 + static_cast<double>(rng.below(2500)) / 1000;
    }
    sleep_ms(5);
  }
  g->stop = 1;
  // Everyone finishes their round and leaves; then SIGKILL, then give up on the stuck.
  const double grace = now_s() + 30;
  int stuck = 0;
  while (!children.empty()) {
    int status;
    const pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      for (size_t i = 0; i < children.size(); i++)
        if (children[i].pid == p) {
          ended(i, status);
          break;
        }
      continue;
    }
    if (now_s() > grace) {
      for (auto &c : children) {
        g->report(g->errors, "%s pid %d did not stop in 30 s", c.exporter ? "exporter" : "importer",
                  c.pid);
        unexpected++;
        c.killed = true;
        kill(c.pid, SIGKILL);
      }
      for (size_t i = 0; i < children.size();) {
        int st;
        if (wait_child(children[i].pid, 10, &st)) {
          children.erase(children.begin() + static_cast<long>(i));
        } else {
          stuck++;
          i++;
        }
      }
      break;
    }
    sleep_ms(5);
  }
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  const std::string counters = stuck ? "not checked: children stuck" : wait_counters_zero(15);
  std::vector<std::string> klog = kmsg.bad_lines();
  const double took = now_s() - t0;

  std::string ops;
  for (int i = 0; i < kNumOps; i++)
    ops += std::string(i ? " " : "") + kOpNames[i] + "=" + std::to_string(g->ops[i].load());
  printf("exporter ops: %s\n", ops.c_str());
  for (uint32_t i = 0; i < std::min<uint32_t>(g->nmsg.load(), 10); i++)
    printf("  %s\n", g->msg[i]);
  for (const auto &l : klog) printf("  kernel: %s\n", l.c_str());
  if (!counters.empty()) printf("  counters not back to 0: %s\n", counters.c_str());
  const bool pass = g->violations == 0 && g->errors == 0 && unexpected == 0 && stuck == 0 &&
                    counters.empty() && klog.empty();
  printf("%s: race_stress %.0f s seed %" PRIu64 ": %" PRIu64 " exporters (%" PRIu64
         " rounds), %" PRIu64 " importers, %" PRIu64 " kills; %" PRIu64 " MAPs, %" PRIu64
         " ATTACHes, %" PRIu64 " refused (%" PRIu64 " EPERM); %" PRIu64 " reads (%" PRIu64 " SIGBUS), %" PRIu64
         " writes, %" PRIu64 " VMA ops, %" PRIu64 " plain mmaps, %" PRIu64 " forks, %" PRIu64
         " reopens, %" PRIu64 " leaked; %" PRIu64 " violations, %" PRIu64
         " errors, %zu kernel-log lines, counters %s\n",
         pass ? "PASS" : "FAIL", took, seed, g->exporters.load(), g->rounds.load(),
         g->importers.load(), g->kills.load(), g->maps.load(), g->attaches.load(),
         g->create_refused.load(), g->eperm.load(), g->reads.load(), g->sigbus.load(), g->writes.load(),
         g->vma_ops.load(), g->plain_mmaps.load(), g->forks.load(), g->reopens.load(),
         g->leaks.load(), g->violations.load(), g->errors.load(), klog.size(),
         counters.empty() ? "0" : counters.c_str());
  return pass ? 0 : 1;
}
