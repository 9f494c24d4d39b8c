// SPDX-License-Identifier: MIT
// Randomised ioctl/mmap fuzzer for /dev/shaddr, run as root in the VM.
// Usage: shaddr_ioctl_fuzz [seconds=60] [seed=1]
// Mixes valid and invalid TRANSLATE/MAP/UNMAP/QUERY/REVOKE/SET_SLOT_SIZE calls, segment
// MAKE/GET/ATTACH/DETACH/RELEASE/REMOVE calls, random
// command numbers and pointers, window touches, exporter remaps, forks and killed peers.
// Passes if nothing crashes and every counter is back to zero at the end; the VM runner
// fails the run on any kernel warning.
#include <sys/syscall.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "shaddr_test_util.h"

using namespace shaddr_test;

namespace {

// write_ok: the window is known to show one of the fuzzer's buffers. Any other window may show
// the fuzzer's own stack, heap or libraries (TRANSLATE and MAKE take random ranges), so writing
// random bytes through it would crash the fuzzer itself, not test the module: only read those.
struct Window {
  uint64_t addr;
  uint64_t size;
  bool write_ok;
};

std::mt19937_64 rng;
uint64_t rnd(uint64_t n) { return n ? rng() % n : 0; }

std::vector<int> fds;
std::vector<uint64_t> handles;
std::vector<uint64_t> segids, apids;
std::vector<Window> windows;
std::vector<char *> buffers;  // 4 MiB each, 1 MiB aligned (inside 5 MiB mappings)
long ops = 0, successes = 0, translated = 0, mapped = 0, attached = 0;

void *random_pointer(void *good, size_t good_len) {
  switch (rnd(6)) {
    case 0: return nullptr;
    case 1: return reinterpret_cast<void *>(0xffff888000000000ull + rnd(1ull << 30));
    case 2: return reinterpret_cast<void *>(rnd(1ull << 47));
    case 3: return reinterpret_cast<void *>(~0ull - rnd(4096));
    default: {
      // A misaligned copy of the argument in an arena with room behind it: the kernel writes
      // a whole struct from there, which must not run over the fuzzer's own stack.
      // (At most half the arena is copied: op_translate passes a 4 MiB buffer as "good".)
      static char arena[8192];
      const size_t n = std::min(good_len, sizeof(arena) / 2);
      char *p = arena + rnd(n);
      memcpy(p, good, n);
      return p;
    }
  }
}

int pick_fd() { return fds.empty() ? -1 : fds[rnd(fds.size())]; }

uint64_t pick_handle() {
  if (handles.empty() || rnd(8) == 0) return rng();
  return handles[rnd(handles.size())];
}

uint32_t random_prot() {
  static const uint32_t p[] = {SHADDR_PROT_READ, SHADDR_PROT_READ | SHADDR_PROT_WRITE, 0,
                               SHADDR_PROT_WRITE, 0xffffffffu};
  return p[rnd(8) < 6 ? rnd(2) : 2 + rnd(3)];
}

void note(int r) {
  ops++;
  if (r >= 0) successes++;
}

void op_translate() {
  shaddr_translate t{};
  char *b = buffers[rnd(buffers.size())];
  t.va = rnd(10) ? reinterpret_cast<uint64_t>(b + rnd(4 * kMiB))
                 : reinterpret_cast<uint64_t>(random_pointer(b, 4 * kMiB));
  t.len = rnd(10) ? 1 + rnd(3 * kMiB) : rng();
  t.prot = random_prot();
  t.flags = rnd(10) ? 0 : rng();
  void *arg = rnd(20) ? static_cast<void *>(&t) : random_pointer(&t, sizeof(t));
  int r = xioctl(pick_fd(), SHADDR_IOC_TRANSLATE, arg);
  note(r);
  if (r == 0 && arg != &t) memcpy(&t, arg, sizeof(t));
  if (r == 0 && t.handle) {
    if (handles.size() >= 32) handles.erase(handles.begin());  // keep recent, mostly live
    handles.push_back(t.handle);
    translated++;
  }
}

void op_map() {
  if (windows.size() >= 4 && rnd(2)) {  // make room: slots are few
    munmap(reinterpret_cast<void *>(windows[0].addr), windows[0].size);
    windows.erase(windows.begin());
  }
  shaddr_map m{};
  m.handle = pick_handle();
  m.block = rnd(4) ? rnd(4) : rng();
  m.prot = random_prot();
  m.flags = rnd(10) ? 0 : rng();
  void *arg = rnd(20) ? static_cast<void *>(&m) : random_pointer(&m, sizeof(m));
  int r = xioctl(pick_fd(), SHADDR_IOC_MAP, arg);
  note(r);
  if (r == 0 && arg != &m) memcpy(&m, arg, sizeof(m));  // a misaligned copy was accepted
  if (r == 0 && m.addr) {
    windows.push_back({m.addr, m.size, false});
    mapped++;
  }
}

void op_unmap() {
  shaddr_unmap u{};
  if (!windows.empty() && rnd(3)) {
    u.addr = windows[rnd(windows.size())].addr;
  } else {
    u.addr = rng();
    u.slot = rnd(20);
    u.flags = rnd(3) == 0 ? SHADDR_UNMAP_BY_SLOT : (rnd(10) ? 0 : rng());
  }
  int r = xioctl(pick_fd(), SHADDR_IOC_UNMAP, &u);
  note(r);  // windows that vanished are dropped by prune_windows()
}

void op_touch() {
  if (windows.empty()) return;
  const Window &w = windows[rnd(windows.size())];
  volatile char *p = reinterpret_cast<volatile char *>(w.addr + rnd(w.size));
  (void)access_signal(p, w.write_ok && rnd(2), static_cast<char>(rng()));
  ops++;
}

void op_munmap_window() {
  if (windows.empty()) return;
  size_t i = rnd(windows.size());
  uint64_t len = rnd(4) ? windows[i].size : kPage;  // partial munmap must be refused
  int r = munmap(reinterpret_cast<void *>(windows[i].addr), len);
  note(r);
}

void op_remap_buffer() {
  char *b = buffers[rnd(buffers.size())];
  size_t off = rnd(4) * kMiB, len = (1 + rnd(2)) * kPage * (1 + rnd(64));
  if (off + len > 4 * kMiB) len = 4 * kMiB - off;
  switch (rnd(3)) {
    case 0: note(madvise(b + off, len, MADV_DONTNEED)); break;
    case 1:
      note(mmap(b + off, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                -1, 0) == MAP_FAILED ? -1 : 0);
      break;
    default: memset(b + off, static_cast<int>(rng()), len); ops++;
  }
}

template <typename T>
T pick(const std::vector<T> &v) {
  return v.empty() || rnd(8) == 0 ? static_cast<T>(rng()) : v[rnd(v.size())];
}

template <typename T>
void remember(std::vector<T> &v, T x) {
  if (v.size() >= 32) v.erase(v.begin());
  v.push_back(x);
}

// Segment commands: MAKE (often the whole address space), GET, ATTACH, DETACH, RELEASE, REMOVE.
void op_segment() {
  switch (rnd(7)) {
    case 0: {
      shaddr_make mk{};
      char *b = buffers[rnd(buffers.size())];
      if (rnd(3) == 0) {
        mk.va = 0;
        mk.size = ~0ull;
      } else {
        mk.va = reinterpret_cast<uint64_t>(b) + (rnd(4) ? rnd(1024) * kPage : rng());
        mk.size = rnd(4) ? (1 + rnd(1024)) * kPage : rng();
      }
      mk.mode = rnd(4) ? 0600 : rng();
      mk.flags = rnd(10) ? 0 : rng();
      int r = xioctl(pick_fd(), SHADDR_IOC_MAKE, &mk);
      note(r);
      if (r == 0) remember(segids, static_cast<uint64_t>(mk.segid));
      break;
    }
    case 1: {
      shaddr_get g{};
      g.segid = pick(segids);
      g.flags = rnd(4) ? 1 + rnd(2) : rng();
      g.pad = rnd(10) ? 0 : rng();
      int r = xioctl(pick_fd(), SHADDR_IOC_GET, &g);
      note(r);
      if (r == 0) remember(apids, static_cast<uint64_t>(g.apid));
      break;
    }
    case 2:
    case 3: {
      shaddr_attach a{};
      a.apid = pick(apids);
      int fd = pick_fd();
      bool of_buffer = false;
      if (rnd(2)) {  // a coherent chain on one file: MAKE, GET, then ATTACH below
        shaddr_make mk{};
        mk.va = reinterpret_cast<uint64_t>(buffers[rnd(3)]);
        mk.size = 4 * kMiB;
        shaddr_get g{};
        g.flags = 1 + rnd(2);
        if (xioctl(fd, SHADDR_IOC_MAKE, &mk) == 0) {
          remember(segids, static_cast<uint64_t>(mk.segid));
          g.segid = mk.segid;
          if (xioctl(fd, SHADDR_IOC_GET, &g) == 0) {
            remember(apids, static_cast<uint64_t>(g.apid));
            a.apid = g.apid;
            of_buffer = true;
          }
        }
      }
      a.offset = rnd(2) ? rnd(4 * kMiB) : reinterpret_cast<uint64_t>(buffers[rnd(3)]) + rnd(kMiB);
      a.size = rnd(8) ? 1 + rnd(kMiB) : rng();
      a.vaddr = rnd(4) ? 0 : rng();
      a.flags = rnd(6) ? 0 : rng() & 3;
      int r = xioctl(fd, SHADDR_IOC_ATTACH, &a);
      note(r);
      if (r == 0) {
        windows.push_back({a.addr & ~(kPage - 1),
                           ((a.addr & (kPage - 1)) + a.size + kPage - 1) & ~(kPage - 1),
                           of_buffer});
        attached++;
      }
      break;
    }
    case 4: {
      uint64_t addr = windows.empty() || rnd(4) == 0 ? rng() : windows[rnd(windows.size())].addr;
      note(xioctl(pick_fd(), SHADDR_IOC_DETACH, &addr));
      break;
    }
    case 5: {
      uint64_t id = pick(apids);
      note(xioctl(pick_fd(), SHADDR_IOC_RELEASE, &id));
      break;
    }
    default: {
      uint64_t id = pick(segids);
      note(xioctl(pick_fd(), SHADDR_IOC_REMOVE, &id));
    }
  }
}

void op_random_cmd() {
  char buf[1024];
  for (auto &c : buf) c = static_cast<char>(rng());
  unsigned long cmd = _IOC(rnd(4), rnd(8) ? 0xC6 : rnd(256), rnd(16), rnd(1024));
  note(xioctl(pick_fd(), cmd, random_pointer(buf, sizeof(buf) - 64)));
}

void op_misc() {
  switch (rnd(5)) {
    case 0: {
      shaddr_query q;
      note(xioctl(pick_fd(), SHADDR_IOC_QUERY, rnd(10) ? static_cast<void *>(&q)
                                                        : random_pointer(&q, 8)));
      break;
    }
    case 1: {
      uint64_t h = pick_handle();
      note(xioctl(pick_fd(), SHADDR_IOC_REVOKE, &h));
      break;
    }
    case 2: {
      static const uint64_t sizes[] = {kMiB, 16 * kMiB, 256 * kMiB, 0, 12345, 2 * kMiB};
      uint64_t s = sizes[rnd(6)];
      note(xioctl(pick_fd(), SHADDR_IOC_SET_SLOT_SIZE, &s));
      break;
    }
    case 3:
      if (fds.size() < 6) {
        int fd = open_dev();
        if (fd >= 0) fds.push_back(fd);
      } else if (!fds.empty()) {
        size_t i = rnd(fds.size());
        close(fds[i]);  // windows of this file stay valid (the VMA holds the file)
        fds.erase(fds.begin() + i);
      }
      ops++;
      break;
    default: {
      // A child that uses inherited files (EBADFD), then exits with windows revoked.
      uint64_t h = pick_handle();
      int status = run_in_child([&] {
        shaddr_map m{};
        m.handle = h;
        m.prot = SHADDR_PROT_READ;
        for (int fd : fds) (void)xioctl(fd, SHADDR_IOC_MAP, &m);
        int fd = open_dev();
        if (fd >= 0 && xioctl(fd, SHADDR_IOC_MAP, &m) == 0)
          (void)access_signal(reinterpret_cast<volatile char *>(m.addr));
        return 0;
      });
      if (!exited_ok(status)) {
        fprintf(stderr, "fuzz: child died unexpectedly (status %d)\n", status);
        exit(2);
      }
      ops++;
    }
  }
}

// Windows whose VMA disappeared (munmap, UNMAP on any file) are dropped from the list.
void prune_windows() {
  for (size_t i = 0; i < windows.size();) {
    unsigned char v;
    if (mincore(reinterpret_cast<void *>(windows[i].addr), kPage, &v) != 0 && errno == ENOMEM)
      windows.erase(windows.begin() + i);
    else
      i++;
  }
}

}  // namespace

int main(int argc, char **argv) {
  const int seconds = argc > 1 ? atoi(argv[1]) : 60;
  const uint64_t seed = argc > 2 ? strtoull(argv[2], nullptr, 0) : 1;
  rng.seed(seed);
  for (int i = 0; i < 3; i++) {
    char *raw = static_cast<char *>(mmap(nullptr, 5 * kMiB, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (raw == MAP_FAILED) return 3;
    char *b = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw) + kMiB - 1) & ~(kMiB - 1));
    memset(b, i + 1, 4 * kMiB);
    buffers.push_back(b);
  }
  for (int i = 0; i < 2; i++) fds.push_back(open_dev());
  if (fds[0] < 0) return 4;
  set_slot_size(fds[0], kMiB);

  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    for (int k = 0; k < 64; k++) {
      switch (rnd(12)) {
        case 10: case 11: op_segment(); break;
        case 0: case 1: op_translate(); break;
        case 2: case 3: op_map(); break;
        case 4: op_unmap(); break;
        case 5: op_touch(); break;
        case 6: op_munmap_window(); break;
        case 7: op_remap_buffer(); break;
        case 8: op_random_cmd(); break;
        default: op_misc();
      }
      if (fds.empty()) fds.push_back(open_dev());
      // After every operation: an entry whose window vanished must not be touched or munmapped
      // once something else reuses its address.
      prune_windows();
    }
  }

  for (const Window &w : windows) munmap(reinterpret_cast<void *>(w.addr), w.size);
  for (int fd : fds) close(fd);
  const long long exports = stat_value("exports") + stat_value("segments"),
                  wins = stat_value("windows") + stat_value("attachments"),
                  pinned = stat_value("pages_pinned");
  printf("fuzz: seed %llu, %d s, %ld operations, %ld succeeded (%ld translates, %ld maps, "
         "%ld attaches); exports+segments %lld windows+attachments %lld pinned %lld after "
         "cleanup\n",
         static_cast<unsigned long long>(seed), seconds, ops, successes, translated, mapped,
         attached, exports, wins, pinned);
  if (exports != 0 || wins != 0 || pinned != 0) {
    fprintf(stderr, "fuzz: FAIL: objects left behind\n");
    return 1;
  }
  printf("fuzz: PASS\n");
  return 0;
}
