// SPDX-License-Identifier: MIT
// shaddr-window-bench: micro-benchmark of process windows (not a test).
// Reports MAP(+populate)+UNMAP cost for 1, 16 and 256 MiB blocks, and the bandwidth of
// copying out of a window as a ratio to a local memcpy of the same size, measured in the
// same run. Needs the module (run it with tools/shaddr-vm). Under TCG only the ratios mean
// anything.
#include <fcntl.h>
#include <getopt.h>
#include <linux/shaddr.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

char *aligned_alloc_touched(size_t size, size_t align) {
  char *raw = static_cast<char *>(mmap(nullptr, size + align, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (raw == MAP_FAILED) return nullptr;
  char *p = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw) + align - 1) & ~(align - 1));
  memset(p, 1, size);
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Segment attachment of 64 MiB of exporter memory backed by transparent huge pages vs by
// 4 KiB pages: the cost of the first touch of every page, and copy bandwidth afterwards.
int huge_vs_small(int reps) {
  constexpr size_t kLen = 64ul << 20, k2M = 2ul << 20;
  int fd = open("/dev/shaddr", O_RDWR | O_CLOEXEC);
  shaddr_version ver{};
  if (fd < 0 || ioctl(fd, SHADDR_IOC_VERSION, &ver)) return 1;
  printf("%-22s %16s %12s   (64 MiB segment attachment, this process exports)\n", "exporter pages",
         "first touch ms", "copy GB/s");
  char *dst = aligned_alloc_touched(kLen, 4096);
  for (int huge = 1; huge >= 0; huge--) {
    std::vector<double> touch_ms, bw;
    for (int r = 0; r < reps; r++) {
      char *raw = static_cast<char *>(mmap(nullptr, kLen + k2M, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      char *buf = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw) + k2M - 1) & ~(k2M - 1));
      madvise(buf, kLen, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
      memset(buf, 1, kLen);
      shaddr_make mk{};
      mk.va = reinterpret_cast<uint64_t>(buf);
      mk.size = kLen;
      mk.mode = 0600;
      shaddr_get g{};
      shaddr_attach a{};
      if (ioctl(fd, SHADDR_IOC_MAKE, &mk)) return 1;
      g.segid = mk.segid;
      g.flags = SHADDR_SEG_RDONLY;
      if (ioctl(fd, SHADDR_IOC_GET, &g)) return 1;
      a.apid = g.apid;
      a.size = kLen;
      auto t0 = Clock::now();
      if (ioctl(fd, SHADDR_IOC_ATTACH, &a)) return 1;
      const volatile char *p = reinterpret_cast<const char *>(a.addr);
      long sum = 0;
      for (size_t off = 0; off < kLen; off += 4096) sum += p[off];
      touch_ms.push_back(seconds_since(t0) * 1e3);
      if (sum != static_cast<long>(kLen / 4096)) return 2;
      t0 = Clock::now();
      memcpy(dst, reinterpret_cast<const void *>(a.addr), kLen);
      bw.push_back(kLen / seconds_since(t0) / 1e9);
      uint64_t addr = a.addr;
      ioctl(fd, SHADDR_IOC_DETACH, &addr);
      uint64_t segid = mk.segid;
      ioctl(fd, SHADDR_IOC_REMOVE, &segid);
      munmap(raw, kLen + k2M);
    }
    printf("%-22s %16.2f %12.2f\n",
           huge ? ((ver.features & SHADDR_FEAT_HUGE_MAP) ? "THP, 2 MiB PMDs" : "THP, 4 KiB PTEs")
                : "4 KiB pages",
           median(touch_ms), median(bw));
  }
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  static const option kLong[] = {{"help", no_argument, nullptr, 'h'}, {nullptr, 0, nullptr, 0}};
  const char *const kUsage =
      "usage: shaddr-window-bench [REPS]\n"
      "  map+unmap cost and window bandwidth against memcpy per slot size (needs /dev/shaddr);\n"
      "  REPS repetitions per size (default 5)\n";
  for (int c; (c = getopt_long(argc, argv, "h", kLong, nullptr)) != -1;) {
    std::fputs(kUsage, c == 'h' ? stdout : stderr);
    return c == 'h' ? 0 : 2;
  }
  int reps = 5;
  if (optind < argc) {
    char *end = nullptr;
    const long v = std::strtol(argv[optind], &end, 10);
    if (end == argv[optind] || *end || v < 1 || v > 1000000 || optind + 1 < argc) {
      std::fputs(kUsage, stderr);
      return 2;
    }
    reps = static_cast<int>(v);
  }
  const uint64_t sizes[] = {SHADDR_SLOT_1M, SHADDR_SLOT_16M, SHADDR_SLOT_256M};
  printf("%-10s %14s %14s %12s %12s %8s\n", "block", "map+unmap us", "us per MiB",
         "window GB/s", "memcpy GB/s", "ratio");
  for (uint64_t size : sizes) {
    int fd = open("/dev/shaddr", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      perror("open /dev/shaddr");
      return 1;
    }
    if (ioctl(fd, SHADDR_IOC_SET_SLOT_SIZE, &size)) {
      perror("SET_SLOT_SIZE");
      return 1;
    }
    // The exporter is a forked child holding a touched buffer.
    int up[2], down[2];
    if (pipe(up) || pipe(down)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
      char *buf = aligned_alloc_touched(size, size);
      shaddr_translate t{};
      t.va = reinterpret_cast<uint64_t>(buf);
      t.len = size;
      t.prot = SHADDR_PROT_READ | SHADDR_PROT_WRITE;
      int efd = open("/dev/shaddr", O_RDWR);
      if (!buf || ioctl(efd, SHADDR_IOC_SET_SLOT_SIZE, &size) ||
          ioctl(efd, SHADDR_IOC_TRANSLATE, &t))
        t.handle = 0;
      if (write(up[1], &t.handle, sizeof(t.handle)) != sizeof(t.handle)) _exit(1);
      char c;
      (void)!read(down[0], &c, 1);
      _exit(0);
    }
    uint64_t handle = 0;
    if (read(up[0], &handle, sizeof(handle)) != sizeof(handle) || !handle) {
      fprintf(stderr, "exporter failed\n");
      return 1;
    }
    std::vector<double> map_us, win_bw, local_bw;
    char *local_src = aligned_alloc_touched(size, 4096);
    char *dst = aligned_alloc_touched(size, 4096);
    for (int r = 0; r < reps; r++) {
      shaddr_map m{};
      m.handle = handle;
      m.prot = SHADDR_PROT_READ;
      auto t0 = Clock::now();
      if (ioctl(fd, SHADDR_IOC_MAP, &m)) {
        perror("MAP");
        return 1;
      }
      const double t_map = seconds_since(t0);
      t0 = Clock::now();
      memcpy(dst, reinterpret_cast<void *>(m.addr), size);
      win_bw.push_back(size / seconds_since(t0) / 1e9);
      t0 = Clock::now();
      shaddr_unmap u{};
      u.addr = m.addr;
      if (ioctl(fd, SHADDR_IOC_UNMAP, &u)) {
        perror("UNMAP");
        return 1;
      }
      map_us.push_back((t_map + seconds_since(t0)) * 1e6);
      t0 = Clock::now();
      memcpy(dst, local_src, size);
      local_bw.push_back(size / seconds_since(t0) / 1e9);
    }
    const double w = median(win_bw), l = median(local_bw), mu = median(map_us);
    printf("%-10s %14.0f %14.1f %12.2f %12.2f %8.2f\n",
           size == SHADDR_SLOT_1M ? "1 MiB" : size == SHADDR_SLOT_16M ? "16 MiB" : "256 MiB", mu,
           mu / (size >> 20), w, l, w / l);
    (void)!write(down[1], "q", 1);
    waitpid(pid, nullptr, 0);
    munmap(local_src, size);
    munmap(dst, size);
    close(fd);
  }
  printf("(median of %d; window GB/s copies out of a freshly mapped window, memcpy GB/s "
         "copies between two local buffers of the same size)\n\n",
         reps);
  return huge_vs_small(reps);
}
