// Tests of libshaddr-heap's semantics, those users rely on (docs/heap.md). This binary is
// linked with the heap's objects, so its own malloc is the heap's; settings that must differ
// (modes, a tiny SHADDR_HEAP_MAX, memfd refusal, LD_PRELOAD, a program's own allocator) run
// in helper processes (heap_helper.cc, heap_plain.c).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "heap.h"
#include "heap_util.h"

namespace heap = shaddr::heap;

extern char **environ;
extern "C" void *__libc_malloc(std::size_t);

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

bool in_heap(const void *p) { return heap::contains(p, 1).has_value(); }

// A child that died early must fail a test, not kill it with SIGPIPE.
const bool g_no_sigpipe = std::signal(SIGPIPE, SIG_IGN) != SIG_ERR;

// Memory glibc handed out before this malloc family was in charge (the heap starts at its
// first call, so this is what a library got from glibc directly, or before libshaddr-heap was
// relocated): a preinit_array function runs before every constructor of the executable.
void *g_early = nullptr;
void allocate_early() {
  g_early = __libc_malloc(MiB);
  if (g_early) std::memset(g_early, 0x5e, MiB);
}
__attribute__((section(".preinit_array"), used)) void (*g_preinit)() = allocate_early;

#define REQUIRE_HEAP()                                                  \
  do {                                                                  \
    if (kSanitizer) GTEST_SKIP() << "sanitizer build: the heap is off"; \
    ASSERT_TRUE(heap::enabled()) << heap::status().reason;              \
  } while (0)

#ifdef SHADDR_HEAP_SANITIZER
constexpr bool kSanitizer = true;
#else
constexpr bool kSanitizer = false;
#endif

// A helper process: argv, extra environment (SHADDR_* cleared first), something to do in the
// child before exec. Returns exit status and merged stdout/stderr.
struct Proc {
  int status = -1;
  std::string out;
  bool ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

Proc run(std::vector<std::string> args, std::vector<std::string> env,
         const std::function<void()> &in_child = {}, int keep_fd = -1) {
  for (char **e = environ; *e; ++e)
    if (std::strncmp(*e, "SHADDR_HEAP", 11) && std::strncmp(*e, "SHADDR_VERBOSE", 14) &&
        std::strncmp(*e, "LD_PRELOAD", 10))
      env.emplace_back(*e);
  std::vector<char *> av, ev;
  for (auto &a : args) av.push_back(a.data());
  av.push_back(nullptr);
  for (auto &e : env) ev.push_back(e.data());
  ev.push_back(nullptr);
  int p[2];
  Proc r;
  if (pipe2(p, O_CLOEXEC) != 0) return r;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    dup2(p[1], 2);
    if (keep_fd >= 0) fcntl(keep_fd, F_SETFD, 0);
    if (in_child) in_child();
    execve(av[0], av.data(), ev.data());
    _exit(127);
  }
  close(p[1]);
  char buf[4096];
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR);)
    if (n > 0) r.out.append(buf, static_cast<std::size_t>(n));
  close(p[0]);
  waitpid(pid, &r.status, 0);
  return r;
}

// Keeps the compiler from dropping stores to memory that is freed next.
void escape(void *p) { asm volatile("" : : "r"(p) : "memory"); }

bool all_bytes(const void *p, std::size_t n, unsigned char v) {
  auto *c = static_cast<const unsigned char *>(p);
  for (std::size_t i = 0; i < n; ++i)
    if (c[i] != v) return false;
  return true;
}

std::size_t shmem_rss() {  // RssShmem of this process, bytes
  FILE *f = std::fopen("/proc/self/status", "r");
  char line[256];
  std::size_t kb = 0;
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "RssShmem: %zu kB", &kb) == 1) break;
  if (f) std::fclose(f);
  return kb * KiB;
}

TEST(HeapStatus, OnWithAMemfdAtAnAlignedRange) {
  if (kSanitizer) {
    EXPECT_FALSE(heap::enabled());
    EXPECT_NE(std::strstr(heap::status().reason, "sanitizer"), nullptr) << heap::status().reason;
    return;
  }
  heap::Status s = heap::status();
  ASSERT_TRUE(s.on) << s.reason;
  EXPECT_EQ(std::strncmp(s.reason, "on:", 3), 0) << s.reason;
  EXPECT_EQ(s.mode, heap::Mode::automatic);
  EXPECT_EQ(s.min_size, heap::kDefaultMinSize);
  char link[64], target[256] = "";
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", s.fd);
  ASSERT_GT(readlink(link, target, sizeof target - 1), 0);
  EXPECT_NE(std::strstr(target, "memfd:shaddr-heap"), nullptr) << target;
  EXPECT_EQ(fcntl(s.fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s.base) % (2 * MiB), 0u);
  std::size_t ram = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  std::size_t want = std::min<std::size_t>(ram, std::size_t{64} << 30) & ~(2 * MiB - 1);
  EXPECT_EQ(s.reserved, want);
}

TEST(HeapRouting, BySizeAndMpiAllocAlways) {
  REQUIRE_HEAP();
  const std::size_t min = heap::kDefaultMinSize;
  void *big = std::malloc(min), *small = std::malloc(min - 1), *tiny = heap::alloc(8);
  char *arr = new char[MiB];
  EXPECT_TRUE(in_heap(big));
  EXPECT_FALSE(in_heap(small));
  EXPECT_TRUE(in_heap(tiny));
  EXPECT_TRUE(in_heap(arr));
  auto off = heap::contains(big, min);
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ(*off, static_cast<std::size_t>(static_cast<char *>(big) - static_cast<char *>(heap::base())));
  EXPECT_LE(*off + min, heap::file_size());
  EXPECT_FALSE(heap::contains(big, heap::reserved_size()).has_value());  // runs past the file
  int on_stack = 0;
  EXPECT_FALSE(in_heap(&on_stack));
  std::free(big);
  std::free(small);
  heap::release(tiny);
  delete[] arr;
}

TEST(HeapCalloc, ZeroesReusedMemory) {
  REQUIRE_HEAP();
  const std::size_t sizes[] = {64 * KiB, 100 * KiB, MiB, 3 * MiB + 5};
  for (int round = 0; round < 50; ++round)
    for (std::size_t n : sizes) {
      void *p = std::malloc(n);
      ASSERT_TRUE(in_heap(p));
      std::memset(p, 0xa5, n);
      escape(p);
      std::free(p);
      void *q = std::calloc(1, n);
      ASSERT_TRUE(in_heap(q));
      ASSERT_TRUE(all_bytes(q, n, 0)) << "round " << round << " size " << n;
      std::memset(q, 0x5a, n);
      escape(q);
      std::free(q);
    }
  errno = 0;
  volatile std::size_t huge = SIZE_MAX / 2;
  EXPECT_EQ(std::calloc(huge, 4), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

void fill(void *p, std::size_t n, std::uint32_t seed) {
  auto *c = static_cast<unsigned char *>(p);
  for (std::size_t i = 0; i < n; ++i) c[i] = pattern(seed, i);
}
bool check(const void *p, std::size_t n, std::uint32_t seed) {
  auto *c = static_cast<const unsigned char *>(p);
  for (std::size_t i = 0; i < n; ++i)
    if (c[i] != pattern(seed, i)) return false;
  return true;
}

TEST(HeapRealloc, AcrossTheThresholdBothWaysKeepsTheData) {
  REQUIRE_HEAP();
  void *p = std::malloc(100);
  fill(p, 100, 1);
  p = std::realloc(p, MiB);  // up, into the heap
  ASSERT_TRUE(in_heap(p));
  ASSERT_TRUE(check(p, 100, 1));
  fill(p, MiB, 2);
  p = std::realloc(p, 200 * KiB);  // within
  ASSERT_TRUE(in_heap(p));
  ASSERT_TRUE(check(p, 200 * KiB, 2));
  p = std::realloc(p, 1000);  // down, out of it
  ASSERT_FALSE(in_heap(p));
  ASSERT_TRUE(check(p, 1000, 2));
  p = std::realloc(p, 5 * MiB);
  ASSERT_TRUE(in_heap(p));
  ASSERT_TRUE(check(p, 1000, 2));
  fill(p, 5 * MiB, 3);
  p = std::realloc(p, 64 * MiB);  // grows in place or moves
  ASSERT_TRUE(check(p, 5 * MiB, 3));
  void *q = std::realloc(nullptr, MiB);
  EXPECT_TRUE(in_heap(q));
  EXPECT_EQ(std::realloc(q, 0), nullptr);  // glibc: frees
  void *r = reallocarray(nullptr, 1024, 1024);
  EXPECT_TRUE(in_heap(r));
  errno = 0;
  volatile std::size_t too_many = SIZE_MAX / 2;
  // Through a pointer: GCC knows reallocarray frees r and would warn about the free below,
  // but a failed reallocarray leaves r allocated.
  void *(*volatile ra)(void *, std::size_t, std::size_t) = reallocarray;
  void *same = ra(r, too_many, 3);
  EXPECT_EQ(same, nullptr);
  EXPECT_EQ(errno, ENOMEM);
  std::free(same ? same : r);
  std::free(p);
}

// Doubles *@p (@n bytes, filled from @seed) by realloc up to @upto bytes, checking the bytes at
// every step: how many times it moved, or -1 if a realloc failed or lost bytes.
int double_by_realloc(unsigned char **p, std::size_t n, std::size_t upto, std::uint32_t seed) {
  int moves = 0;
  for (; n < upto; n *= 2) {
    auto *q = static_cast<unsigned char *>(std::realloc(*p, 2 * n));
    if (!q || !check(q, n, seed)) return -1;
    moves += q != *p;
    fill(q, 2 * n, seed);
    *p = q;
  }
  return moves;
}

// A buffer doubled by realloc from 64 KiB to 32 MiB moves once, into a growth block, and then
// grows in place, as glibc's top of heap does; freed, that block waits for the thread's next
// growing buffer. The bytes follow at every step.
TEST(HeapRealloc, AGrowingBufferMovesOnceThenGrowsInPlace) {
  REQUIRE_HEAP();
  void *first = nullptr;
  for (int round = 0; round < 3; round++) {
    auto *p = static_cast<unsigned char *>(std::malloc(64 * KiB));
    fill(p, 64 * KiB, 7);
    EXPECT_EQ(double_by_realloc(&p, 64 * KiB, 32 * MiB, 7), 1) << "round " << round;
    EXPECT_TRUE(in_heap(p));
    if (round == 0) first = p;
    EXPECT_EQ(p, first) << "round " << round << ": the thread's growth block again";
    std::free(p);
  }
  heap::purge();  // gives the cached block back, as the thread caches' blocks
}

// Two growing buffers at once: the second needs a growth block of its own, and freeing both
// gives one back to the arena (the thread keeps one). Many rounds must not use up the number
// of growth blocks the range allows.
TEST(HeapRealloc, GrowthBlocksFreedToTheArenaAreCountedBack) {
  REQUIRE_HEAP();
  for (int round = 0; round < 100; round++) {
    void *p = std::realloc(std::malloc(64 * KiB), 256 * KiB);
    void *q = std::realloc(std::malloc(64 * KiB), 256 * KiB);
    ASSERT_TRUE(p && q);
    EXPECT_GE(malloc_usable_size(p), 32 * MiB) << "round " << round;
    EXPECT_GE(malloc_usable_size(q), 32 * MiB) << "round " << round;
    std::free(p);
    std::free(q);
  }
  heap::purge();
}

// A thread that grew a buffer keeps its growth block; its next new block up to 1 MiB starts
// there (as glibc's next block starts at its top), so a buffer doubled from a small size never moves.
// A block once grown past 1 MiB is not lent to a new allocation: kept, it would hold those pages.
TEST(HeapRealloc, ANewSmallBufferStartsInTheThreadsGrowthBlock) {
  REQUIRE_HEAP();
  heap::purge();
  void *block = nullptr;
  for (int round = 0; round < 3; round++) {
    auto *p = static_cast<unsigned char *>(std::malloc(64 * KiB));
    ASSERT_NE(p, nullptr);
    if (round > 0) {
      EXPECT_EQ(p, block) << "round " << round << ": starts in the growth block";
    }
    fill(p, 64 * KiB, 9);
    EXPECT_EQ(double_by_realloc(&p, 64 * KiB, 1 * MiB, 9), round == 0 ? 1 : 0) << "round " << round;
    block = p;
    std::free(p);
  }
  void *big = std::realloc(std::malloc(64 * KiB), 4 * MiB);  // the same block, now past 1 MiB
  ASSERT_EQ(big, block);
  std::free(big);
  void *p = std::malloc(64 * KiB);
  EXPECT_NE(p, block) << "a block grown past 1 MiB is not lent";
  EXPECT_LT(malloc_usable_size(p), 1 * MiB);
  std::free(p);
  heap::purge();
}

// Lent blocks that a program keeps must not take every growth block: a growing buffer still
// gets one after many were lent and kept.
TEST(HeapRealloc, LentBlocksKeptLeaveGrowthBlocksForGrowingBuffers) {
  REQUIRE_HEAP();
  heap::purge();
  std::vector<void *> kept;
  for (int round = 0; round < 200; round++) {
    std::free(std::realloc(std::malloc(64 * KiB), 256 * KiB));
    kept.push_back(std::malloc(64 * KiB));
    ASSERT_NE(kept.back(), nullptr);
  }
  void *p = std::realloc(std::malloc(64 * KiB), 256 * KiB);
  ASSERT_NE(p, nullptr);
  EXPECT_GE(malloc_usable_size(p), 32 * MiB) << "still a growth block";
  std::free(p);
  for (void *k : kept) std::free(k);
  heap::purge();
}

TEST(HeapAlign, EveryFunctionEveryAlignment) {
  REQUIRE_HEAP();
  const std::size_t sizes[] = {1, 1000, 64 * KiB, MiB + 1};
  for (std::size_t align = sizeof(void *); align <= (std::size_t{1} << 26); align <<= 1)
    for (std::size_t n : sizes) {
      void *p = nullptr;
      ASSERT_EQ(posix_memalign(&p, align, n), 0);
      void *q = aligned_alloc(align, n);
      void *r = memalign(align, n);
      for (void *x : {p, q, r}) {
        ASSERT_NE(x, nullptr);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(x) % align, 0u) << align << " " << n;
        EXPECT_EQ(in_heap(x), n >= 64 * KiB) << align << " " << n;
        EXPECT_GE(malloc_usable_size(x), n);
        std::memset(x, 0x11, n);
        std::free(x);
      }
    }
  void *g = nullptr;  // a 1 GiB alignment, in the heap
  ASSERT_EQ(posix_memalign(&g, std::size_t{1} << 30, MiB), 0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(g) % (std::size_t{1} << 30), 0u);
  EXPECT_TRUE(in_heap(g));
  std::free(g);
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void *v = valloc(MiB), *pv = pvalloc(MiB + 1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v) % page, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pv) % page, 0u);
  EXPECT_GE(malloc_usable_size(pv), MiB + page);
  EXPECT_TRUE(in_heap(v) && in_heap(pv));
  std::free(v);
  std::free(pv);
  void *m = memalign(48, MiB);  // glibc rounds up to a power of two
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(m) % 64, 0u);
  std::free(m);
  void *bad = nullptr;
  EXPECT_EQ(posix_memalign(&bad, 3 * sizeof(void *), MiB), EINVAL);
  EXPECT_EQ(posix_memalign(&bad, 4, MiB), EINVAL);
  errno = 0;
  EXPECT_EQ(aligned_alloc(3, MiB), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(HeapUsableSize, CoversTheRequestInAndOutOfTheHeap) {
  REQUIRE_HEAP();
  for (std::size_t n : {std::size_t{1}, std::size_t{100}, 64 * KiB - 1, 64 * KiB, 70 * KiB, 3 * MiB}) {
    void *p = std::malloc(n);
    std::size_t u = malloc_usable_size(p);
    EXPECT_GE(u, n);
    std::memset(p, 0x22, u);  // all of it is ours
    std::free(p);
  }
  EXPECT_EQ(malloc_usable_size(nullptr), 0u);
}

TEST(HeapFree, OfMemoryAllocatedBeforeTheHeapExisted) {
  REQUIRE_HEAP();
  ASSERT_NE(g_early, nullptr);
  EXPECT_FALSE(in_heap(g_early)) << "the preinit allocation came from the heap: test is void";
  EXPECT_GE(malloc_usable_size(g_early), MiB);
  void *p = std::realloc(g_early, 2 * MiB);  // moves into the heap, data kept
  g_early = nullptr;
  EXPECT_TRUE(in_heap(p));
  EXPECT_TRUE(all_bytes(p, MiB, 0x5e));
  std::free(p);
  void *g = __libc_malloc(3 * MiB);  // glibc's, whatever the heap thinks
  EXPECT_FALSE(in_heap(g));
  std::free(g);
}

TEST(HeapThreads, ManyThreadsAllocateReallocAndFreeAcrossTheThreshold) {
  REQUIRE_HEAP();
  const std::size_t sizes[] = {16, 1000, 60 * KiB, 64 * KiB, 65 * KiB, 200 * KiB, MiB, 3 * MiB};
  constexpr int kThreads = 8, kIters = 2000, kSlots = 64;
  std::atomic<void *> exchange[kSlots] = {};  // handed between threads, freed by another
  std::atomic<int> corrupt{0}, in_heap_count{0};
  auto stamp = [](unsigned char *p, std::size_t n, unsigned char v) {
    p[0] = v;
    p[n / 2] = v;
    p[n - 1] = v;
  };
  auto stamped = [](const unsigned char *p, std::size_t n, unsigned char v) {
    return p[0] == v && p[n / 2] == v && p[n - 1] == v;
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
      for (int i = 0; i < kIters; ++i) {
        std::size_t n = sizes[rng() % std::size(sizes)];
        unsigned char v = static_cast<unsigned char>(t * 31 + i);
        auto *p = static_cast<unsigned char *>(rng() % 4 ? std::malloc(n) : std::calloc(n, 1));
        if (!p) { corrupt++; return; }
        if (in_heap(p)) in_heap_count++;
        stamp(p, n, v);
        std::size_t m = sizes[rng() % std::size(sizes)];
        auto *q = static_cast<unsigned char *>(std::realloc(p, m));
        if (!q || q[0] != v || (m >= n && (q[n / 2] != v || q[n - 1] != v))) corrupt++;
        stamp(q, m, v);
        // Hand it over: the slot's previous block, someone else's, is checked and freed here.
        auto *old = static_cast<unsigned char *>(exchange[rng() % kSlots].exchange(q));
        if (old) {
          std::size_t u = malloc_usable_size(old);
          if (u == 0) corrupt++;
          std::free(old);
        }
        (void)stamped;
      }
    });
  for (auto &t : ts) t.join();
  for (auto &s : exchange) std::free(s.exchange(nullptr));
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_GT(in_heap_count.load(), kThreads * kIters / 4);
}

// Child side of the fork tests: 0 when fine, else a code saying what went wrong.
int wait_child(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(HeapFork, NeitherSideSeesTheOthersLaterWrites) {
  REQUIRE_HEAP();
  auto *p = static_cast<volatile char *>(std::malloc(MiB));
  ASSERT_TRUE(in_heap(const_cast<char *>(p)));
  std::memset(const_cast<char *>(p), 'P', MiB);
  struct stat parent_file{};
  ASSERT_EQ(fstat(heap::fd(), &parent_file), 0);
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  char c;
  if (pid == 0) {
    close(to_child[1]);  // so that either side's death is an end of file, not a hang
    close(to_parent[0]);
    struct stat own{};
    if (!heap::enabled() || fstat(heap::fd(), &own) != 0) _exit(2);
    if (own.st_ino == parent_file.st_ino) _exit(3);  // still the parent's file
    if (!all_bytes(const_cast<char *>(p), MiB, 'P')) _exit(4);
    if (read(to_child[0], &c, 1) != 1) _exit(5);  // the parent has written p[1]
    if (p[1] != 'P') _exit(6);                    // ... and the child must not see it
    p[0] = 'C';
    // The child's heap works on its own file.
    void *q = std::malloc(8 * MiB);
    if (!in_heap(q)) _exit(7);
    std::memset(q, 'c', 8 * MiB);
    std::free(q);
    if (write(to_parent[1], "w", 1) != 1) _exit(8);
    _exit(0);
  }
  close(to_child[0]);
  close(to_parent[1]);
  p[1] = 'Q';
  EXPECT_EQ(write(to_child[1], "w", 1), 1);
  EXPECT_EQ(read(to_parent[0], &c, 1), 1);  // the child has written p[0]
  EXPECT_EQ(p[0], 'P');
  EXPECT_EQ(wait_child(pid), 0);
  EXPECT_TRUE(all_bytes(const_cast<char *>(p) + 2, MiB - 2, 'P'));
  close(to_child[1]);
  close(to_parent[0]);
  std::free(const_cast<char *>(p));
}

// Another parent thread writes a heap counter all the time. After fork() returns, the child's
// counter must never move, must not be newer than what the parent saw when fork returned, and
// the parent's writes after that must stay invisible to the child.
TEST(HeapFork, WriterThreadDuringFork) {
  REQUIRE_HEAP();
  auto *cell = static_cast<std::atomic<std::uint64_t> *>(std::malloc(MiB));
  ASSERT_TRUE(in_heap(cell));
  new (cell) std::atomic<std::uint64_t>(0);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop.load(std::memory_order_relaxed)) cell->fetch_add(1, std::memory_order_relaxed);
  });
  for (int round = 0; round < 10; ++round) {
    while (cell->load() < 1000u * (round + 1)) {
    }
    int go[2], report[2];
    ASSERT_EQ(pipe(go), 0);
    ASSERT_EQ(pipe(report), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(go[1]);
      close(report[0]);
      std::uint64_t v0 = cell->load();
      char c;
      if (write(report[1], &v0, sizeof v0) != sizeof v0 || read(go[0], &c, 1) != 1) _exit(2);
      _exit(cell->load() == v0 ? 0 : 1);
    }
    std::uint64_t at_return = cell->load(), v0 = 0;
    close(go[0]);
    close(report[1]);
    EXPECT_EQ(read(report[0], &v0, sizeof v0), static_cast<ssize_t>(sizeof v0));
    EXPECT_LE(v0, at_return) << "the child saw a write made after fork() returned";
    while (cell->load() < at_return + 100000) {
    }
    EXPECT_EQ(write(go[1], "g", 1), 1);
    EXPECT_EQ(wait_child(pid), 0) << "the child saw the parent's writes after fork (round " << round << ")";
    close(go[1]);
    close(report[0]);
  }
  stop = true;
  writer.join();
  std::free(cell);
}

// fork while other threads allocate and free in the heap: no deadlock, both sides' heaps work.
TEST(HeapFork, WhileOtherThreadsAllocate) {
  REQUIRE_HEAP();
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&, t] {
      std::size_t n = (t + 1) * 300 * KiB;
      while (!stop.load(std::memory_order_relaxed)) {
        void *p = std::malloc(n);
        std::memset(p, t, n);
        void *q = std::realloc(p, n / 4);
        std::free(q);
      }
    });
  for (int i = 0; i < 20; ++i) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int j = 0; j < 50; ++j) {
        void *p = std::malloc(MiB * (j % 4 + 1));
        if (!in_heap(p)) _exit(1);
        std::memset(p, j, MiB);
        std::free(p);
      }
      _exit(0);
    }
    EXPECT_EQ(wait_child(pid), 0) << "fork " << i;
  }
  stop = true;
  for (auto &t : ts) t.join();
}

TEST(HeapForkExec, NothingCrossesExec) {
  REQUIRE_HEAP();
  void *p = std::malloc(MiB);  // a live heap
  std::memset(p, 1, MiB);
  // The helper's own heap is off: any memfd:shaddr-heap it has came across exec.
  Proc r = run({HEAP_HELPER, "nofds"}, {"SHADDR_HEAP=off"});
  EXPECT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("leaked=0"), std::string::npos) << r.out;
  // Control: with its own heap on, the same check sees it (so it can fail).
  Proc on = run({HEAP_HELPER, "nofds"}, {});
  EXPECT_NE(on.out.find("leaked=2"), std::string::npos) << on.out;  // its fd and its mapping
  std::free(p);
}

TEST(HeapPurge, FreedPagesLeaveTheFileAndRss) {
  REQUIRE_HEAP();
  heap::purge();
  std::size_t file0 = heap::file_resident(), rss0 = shmem_rss();
  const std::size_t n = 64 * MiB;
  void *p = std::malloc(n);
  ASSERT_TRUE(in_heap(p));
  std::memset(p, 0x77, n);
  escape(p);
  std::size_t file1 = heap::file_resident(), rss1 = shmem_rss();
  EXPECT_GE(file1, file0 + n - MiB);
  EXPECT_GE(rss1, rss0 + n - MiB);
  std::free(p);
  heap::purge();
  std::size_t file2 = heap::file_resident(), rss2 = shmem_rss();
  EXPECT_LE(file2 + n - 4 * MiB, file1) << "st_blocks did not drop: no hole punched";
  EXPECT_LE(rss2 + n - 4 * MiB, rss1) << "RssShmem did not drop";
  void *q = std::malloc(n);  // punched pages read back as zero (and calloc knows it)
  EXPECT_TRUE(all_bytes(q, n, 0));
  std::free(q);
}

// The heap's thread caches (blocks up to 8 MiB, so that such a malloc+free pair does not take
// jemalloc's extent path) hold freed blocks: a thread's goes back when the thread exits, the
// caller's own with purge(), and then their pages leave the file like any other.
TEST(HeapPurge, ThreadCachesGiveBackWhatTheyHold) {
  REQUIRE_HEAP();
  constexpr std::size_t kSizes[] = {64 * KiB, 48 * KiB, 40 * KiB, 32 * KiB};
  constexpr int kBlocks = 400;  // 14 MiB, far more than the caches keep
  auto churn = [&] {
    std::vector<void *> held;
    for (int round = 0; round < 4; round++) {
      for (int i = 0; i < kBlocks; i++) {
        void *p = heap::alloc(kSizes[i % 4]);  // MPI_Alloc_mem's way in: whatever SHADDR_HEAP_MIN
        ASSERT_TRUE(in_heap(p));
        std::memset(p, 0x5a, kSizes[i % 4]);
        held.push_back(p);
      }
      for (void *p : held) heap::release(p);
      held.clear();
    }
  };
  heap::purge();
  const std::size_t file0 = heap::file_resident();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) threads.emplace_back(churn);
  for (std::thread &t : threads) t.join();
  churn();
  heap::purge();
  EXPECT_LE(heap::file_resident(), file0 + 2 * MiB)
      << "blocks freed by exited threads or held in this thread's cache kept their pages";
}

bool send_fd(int sock, int fd, const PeerMsg &m) {
  char ctl[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{const_cast<PeerMsg *>(&m), sizeof m};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  cmsghdr *c = CMSG_FIRSTHDR(&h);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &h, 0) == static_cast<ssize_t>(sizeof m);
}

// A second process receives the heap's fd over SCM_RIGHTS, maps it, and reads what this
// process wrote at heap address A at offset A - base, also data written after it mapped.
TEST(HeapPeer, ReadsOurHeapThroughThePassedFd) {
  REQUIRE_HEAP();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const std::size_t n = 4 * MiB + 123;
  auto *a = static_cast<unsigned char *>(std::malloc(n));
  fill(a, n, 11);
  auto off = heap::contains(a, n);
  ASSERT_TRUE(off.has_value());
  std::thread parent_side([&] {
    PeerMsg m{*off, n, heap::reserved_size(), 11, 0};
    char verdict = 0;
    if (!send_fd(sv[0], heap::fd(), m) || read(sv[0], &verdict, 1) != 1) return;
    EXPECT_EQ(verdict, 'y');
    fill(a, n, 12);  // after the peer mapped: it must see these too
    m.seed = 12;
    if (write(sv[0], &m, sizeof m) != sizeof m || read(sv[0], &verdict, 1) != 1) return;
    EXPECT_EQ(verdict, 'y');
    m.seed = 0;
    EXPECT_EQ(write(sv[0], &m, sizeof m), static_cast<ssize_t>(sizeof m));
  });
  Proc r = run({HEAP_HELPER, "peer", std::to_string(sv[1])}, {"SHADDR_HEAP=off"}, {}, sv[1]);
  close(sv[1]);
  parent_side.join();
  close(sv[0]);
  EXPECT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("round 1: offset " + std::to_string(*off) + ", 0 bad bytes"), std::string::npos) << r.out;
  std::free(a);
}

// madvise(MADV_DONTNEED) on heap memory reads back zeros, here and in a peer's mapping of the
// file (map_peer(), as libshaddr maps a peer's heap), and the pages leave the file.
TEST(HeapPrivate, DontneedZeroesHereAndInAPeersMapping) {
  REQUIRE_HEAP();
  const std::size_t n = 4 * MiB;
  auto *a = static_cast<unsigned char *>(std::malloc(n + 4096));
  auto *p = reinterpret_cast<unsigned char *>((reinterpret_cast<std::uintptr_t>(a) + 4095) & ~std::uintptr_t{4095});
  ASSERT_TRUE(in_heap(p));
  const heap::Status st = heap::status();
  auto *peer = static_cast<const unsigned char *>(heap::map_peer(st.fd, st.reserved));
  ASSERT_NE(peer, nullptr);
  const std::size_t off = *heap::contains(p, n);
  std::memset(p, 0x3c, n);
  ASSERT_TRUE(all_bytes(peer + off, n, 0x3c));
  const std::size_t resident = heap::file_resident();
  ASSERT_EQ(madvise(p, n, MADV_DONTNEED), 0);
  // Before anyone reads them: a read fault on a shared file mapping puts a page back.
  EXPECT_LE(heap::file_resident() + n, resident + 4096) << "the pages stayed in the file";
  EXPECT_TRUE(all_bytes(p, n, 0));
  EXPECT_TRUE(all_bytes(peer + off, n, 0));
  EXPECT_TRUE(heap::contains(p, n).has_value()) << "still shared";
  std::memset(p, 0x3d, n);  // written again: both see it
  EXPECT_TRUE(all_bytes(peer + off, n, 0x3d));
  ASSERT_EQ(madvise(p, n, MADV_FREE), 0);
  EXPECT_TRUE(all_bytes(p, n, 0));
  EXPECT_TRUE(all_bytes(peer + off, n, 0));
  heap::unmap_peer(const_cast<unsigned char *>(peer), st.reserved);
  std::free(a);
}

// A call that shared memory answers differently (MADV_WIPEONFORK, mprotect) withdraws the
// pages: same bytes here in private memory, no longer in the file nor offered to peers (the
// table they read says so); freeing the block gives the pages back to the heap.
TEST(HeapPrivate, WithdrawnPagesAreNotSharedUntilTheirBlockIsFreed) {
  REQUIRE_HEAP();
  const heap::Status st = heap::status();
  auto *peer = static_cast<const unsigned char *>(heap::map_peer(st.fd, st.reserved));
  ASSERT_NE(peer, nullptr);
  for (int how = 0; how < 2; how++) {
    const std::size_t n = 1 * MiB;
    void *v = nullptr;
    ASSERT_EQ(posix_memalign(&v, 4096, n), 0);
    auto *p = static_cast<unsigned char *>(v);
    const std::size_t off = *heap::contains(p, n);
    std::memset(p, 0x44, n);
    EXPECT_FALSE(heap::range_withdrawn(peer, off, n));
    if (how == 0)
      ASSERT_EQ(madvise(p + 4096, 8192, MADV_WIPEONFORK), 0);
    else
      ASSERT_EQ(mprotect(p + 4096, 8192, PROT_READ), 0);
    EXPECT_TRUE(all_bytes(p, n, 0x44)) << how;
    EXPECT_FALSE(heap::contains(p, n).has_value()) << how;
    EXPECT_FALSE(heap::contains(p + 4096, 1).has_value()) << how;
    EXPECT_TRUE(heap::contains(p, 4096).has_value()) << how << ": only the pages named";
    EXPECT_TRUE(heap::range_withdrawn(peer, off, n)) << how;
    EXPECT_TRUE(heap::range_withdrawn(peer, off + 4096 + 8191, 1)) << how;
    EXPECT_FALSE(heap::range_withdrawn(peer, off + 3 * 4096, n - 3 * 4096)) << how;
    EXPECT_TRUE(all_bytes(peer + off + 4096, 8192, 0)) << how << ": the file's copy is gone";
    std::free(p);
    EXPECT_FALSE(heap::range_withdrawn(peer, off, n)) << how << ": back in the heap";
    void *q = std::malloc(n);  // the heap hands the pages out again, writable and shared
    std::memset(q, 0x45, n);
    EXPECT_TRUE(heap::contains(q, n).has_value());
    std::free(q);
  }
  heap::unmap_peer(const_cast<unsigned char *>(peer), st.reserved);
}

// The same for a malloc'd block that does not start on a page (jemalloc starts large blocks up
// to 8 MiB at a random cache line of their first page): freed, its pages are the heap's again.
TEST(HeapPrivate, WithdrawnPagesOfAnUnalignedBlockComeBackWhenItIsFreed) {
  REQUIRE_HEAP();
  heap::purge();  // no growth block cached to lend (those start on a page)
  const heap::Status st = heap::status();
  auto *peer = static_cast<const unsigned char *>(heap::map_peer(st.fd, st.reserved));
  ASSERT_NE(peer, nullptr);
  const std::size_t n = 256 * KiB;
  auto *p = static_cast<unsigned char *>(std::malloc(n));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x46, n);
  // The block's first whole page and the next: wherever the block starts, they are its own.
  auto *page = reinterpret_cast<unsigned char *>((reinterpret_cast<std::uintptr_t>(p) + 4095) & ~std::uintptr_t{4095});
  const std::size_t off = *heap::contains(page, 8192);
  ASSERT_EQ(madvise(page, 8192, MADV_WIPEONFORK), 0);
  EXPECT_TRUE(heap::range_withdrawn(peer, off, 8192));
  std::free(p);
  EXPECT_FALSE(heap::range_withdrawn(peer, off, 8192)) << "back in the heap";
  heap::purge();
  heap::unmap_peer(const_cast<unsigned char *>(peer), st.reserved);
}

// A purge racing a reader: the peer's mapping shows each byte as written or as zero (the
// punched page), never anything else, and zeros once the owner stopped.
TEST(HeapPrivate, APeerReadingWhileTheOwnerPurgesSeesTheBytesOrZeros) {
  REQUIRE_HEAP();
  const heap::Status st = heap::status();
  auto *peer = static_cast<const unsigned char *>(heap::map_peer(st.fd, st.reserved));
  ASSERT_NE(peer, nullptr);
  const std::size_t n = 2 * MiB;
  void *v = nullptr;
  ASSERT_EQ(posix_memalign(&v, 4096, n), 0);
  auto *p = static_cast<unsigned char *>(v);
  const std::size_t off = *heap::contains(p, n);
  std::atomic<bool> stop{false};
  std::atomic<long> bad{0}, reads{0};
  std::thread reader([&] {
    while (!stop.load()) {
      for (std::size_t i = 0; i < n; i += 512) {
        const unsigned char c = peer[off + i];
        if (c != 0 && c != 0x71) bad++;
      }
      reads++;
    }
  });
  for (int round = 0; round < 60; round++) {
    std::memset(p, 0x71, n);
    ASSERT_EQ(madvise(p, n, round % 2 ? MADV_DONTNEED : MADV_FREE), 0);
  }
  while (reads.load() < 3) std::this_thread::yield();
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(all_bytes(peer + off, n, 0));
  heap::unmap_peer(const_cast<unsigned char *>(peer), st.reserved);
  std::free(p);
}

// madvise(MADV_DONTNEED) racing another thread's withdraw of the same pages (MADV_DONTFORK):
// whichever comes first, the bytes read zero afterwards. (madvise classified the pages without
// the lock: the withdraw's copy could take the old bytes after the punch, and keep them.)
TEST(HeapPrivate, DontneedRacingAWithdrawStillZeroes) {
  REQUIRE_HEAP();
  const std::size_t n = MiB;
  int kept = 0;
  for (int round = 0; round < 60; round++) {
    void *v = nullptr;
    ASSERT_EQ(posix_memalign(&v, 4096, n), 0);
    std::memset(v, 0x5b, n);
    std::atomic<int> ready{0};
    std::thread other([&] {
      ready++;
      while (ready.load() < 2) {
      }
      EXPECT_EQ(madvise(v, n, MADV_DONTFORK), 0);
    });
    ready++;
    while (ready.load() < 2) {
    }
    ASSERT_EQ(madvise(v, n, MADV_DONTNEED), 0);
    other.join();
    kept += !all_bytes(v, n, 0);
    std::free(v);
  }
  EXPECT_EQ(kept, 0) << "rounds where MADV_DONTNEED left bytes";
}

// A write by another thread while the pages are being withdrawn is kept: the range is mapped
// privately first (writes go to private copies), the file copied, then the written pages.
// (The copy used to be taken from the file while the program kept writing to it: a write to a
// page already copied was lost.) The writer writes once, well before the withdraw can finish.
TEST(HeapPrivate, AWriteDuringTheWithdrawIsKept) {
  REQUIRE_HEAP();
  const std::size_t n = 64 * MiB;
  void *v = nullptr;
  ASSERT_EQ(posix_memalign(&v, 4096, n), 0);
  auto *p = static_cast<volatile unsigned char *>(v);
  std::memset(v, 0x21, n);
  using clock = std::chrono::steady_clock;
  std::atomic<bool> go{false};
  clock::time_point wrote;
  std::thread writer([&] {
    while (!go.load()) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    p[0] = 0x99;  // the first page: the one a front-to-back copy takes first
    p[n - 1] = 0x98;
    wrote = clock::now();
  });
  go = true;
  ASSERT_EQ(madvise(v, n, MADV_DONTFORK), 0);
  const clock::time_point done = clock::now();
  writer.join();
  EXPECT_FALSE(heap::contains(v, n).has_value()) << "withdrawn";
  if (done - wrote < std::chrono::milliseconds(2))
    GTEST_SKIP() << "the withdraw ended too soon after the write to tell";
  EXPECT_EQ(p[0], 0x99);
  EXPECT_EQ(p[n - 1], 0x98);
  EXPECT_EQ(p[1], 0x21);
  std::free(v);
}

// free() keeps errno (POSIX.1-2024, glibc 2.33), also when giving a block's withdrawn pages
// back fails (here: the heap's descriptor closed under it, in a fork child).
TEST(HeapFree, KeepsErrno) {
  REQUIRE_HEAP();
  const std::size_t n = MiB;
  void *v = nullptr;
  ASSERT_EQ(posix_memalign(&v, 4096, n), 0);
  std::memset(v, 1, n);
  errno = 4321;
  std::free(std::malloc(n));
  EXPECT_EQ(errno, 4321);
  pid_t pid = fork();
  if (pid == 0) {
    if (mprotect(v, n, PROT_READ) != 0 || mprotect(v, n, PROT_READ | PROT_WRITE) != 0) _exit(2);
    if (heap::contains(v, n).has_value()) _exit(3);  // not withdrawn: test is void
    close(heap::fd());
    errno = 4321;
    std::free(v);
    _exit(errno == 4321 ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  std::free(v);
}

TEST(HeapSettings, ModesAndThreshold) {
  if (kSanitizer) GTEST_SKIP();
  Proc off = run({HEAP_HELPER, "status"}, {"SHADDR_HEAP=off"});
  EXPECT_NE(off.out.find("on=0\nreason=off: SHADDR_HEAP=off"), std::string::npos) << off.out;
  EXPECT_NE(off.out.find("malloc_1024K_in_heap=0"), std::string::npos) << off.out;
  EXPECT_NE(off.out.find("alloc_in_heap=0"), std::string::npos) << off.out;
  Proc mpi = run({HEAP_HELPER, "status"}, {"SHADDR_HEAP=mpi-alloc-only"});
  EXPECT_NE(mpi.out.find("on=1"), std::string::npos) << mpi.out;
  EXPECT_NE(mpi.out.find("malloc_1024K_in_heap=0"), std::string::npos) << mpi.out;
  EXPECT_NE(mpi.out.find("alloc_in_heap=1"), std::string::npos) << mpi.out;
  Proc min = run({HEAP_HELPER, "status"}, {"SHADDR_HEAP_MIN=1M"});
  EXPECT_NE(min.out.find("min=1048576\n"), std::string::npos) << min.out;
  EXPECT_NE(min.out.find("malloc_512K_in_heap=0\nmalloc_1024K_in_heap=1"), std::string::npos) << min.out;
  Proc bad = run({HEAP_HELPER, "status"}, {"SHADDR_HEAP=yes"});
  EXPECT_NE(bad.out.find("on=0\nreason=off: SHADDR_HEAP=yes is not auto, off or mpi-alloc-only"),
            std::string::npos) << bad.out;
  Proc badmin = run({HEAP_HELPER, "status"}, {"SHADDR_HEAP_MIN=lots"});
  EXPECT_NE(badmin.out.find("SHADDR_HEAP_MIN=lots is not a size"), std::string::npos) << badmin.out;
  for (const Proc &p : {off, mpi, min, bad, badmin}) EXPECT_TRUE(p.ok()) << p.out;
}

TEST(HeapSettings, VerboseSaysOnceWhatIsOn) {
  if (kSanitizer) GTEST_SKIP();
  Proc r = run({HEAP_HELPER, "status"}, {"SHADDR_VERBOSE=1"});
  std::size_t first = r.out.find("shaddr heap: on: memfd fd");
  EXPECT_NE(first, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("shaddr heap:", first + 1), std::string::npos) << r.out;
  Proc quiet = run({HEAP_HELPER, "status"}, {});
  EXPECT_EQ(quiet.out.find("shaddr heap:"), std::string::npos) << quiet.out;
}

TEST(HeapExhaustion, BeyondSHADDR_HEAP_MAXFallsBackToTheNormalAllocator) {
  if (kSanitizer) GTEST_SKIP();
  Proc r = run({HEAP_HELPER, "exhaust"}, {"SHADDR_HEAP_MAX=16M"});
  EXPECT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("reuse_in_heap=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("intact=1"), std::string::npos) << r.out;
}

// memfd_create refused by a seccomp filter (EPERM): the heap says why and steps aside.
void refuse_memfd_or_exit() {
  if (!refuse_memfd()) _exit(126);
}

TEST(HeapRefusal, NoMemfdMeansTheNormalAllocatorWithAReason) {
  if (kSanitizer) GTEST_SKIP();
  Proc r = run({HEAP_HELPER, "status"}, {"SHADDR_VERBOSE=1"}, refuse_memfd_or_exit);
  EXPECT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("shaddr heap: off: memfd_create failed (Operation not permitted)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("on=0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("malloc_1024K_in_heap=0"), std::string::npos) << r.out;
}

// A fork child that cannot make a memfd of its own moves its copy into private anonymous
// memory: still neither side sees the other's writes, and its heap says it is off, and why.
TEST(HeapRefusal, ForkChildWithoutAMemfdGetsAPrivateCopy) {
  if (kSanitizer) GTEST_SKIP();
  Proc r = run({HEAP_HELPER, "fork-nomemfd"}, {});
  EXPECT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("child: off in this fork child: no memfd for its private copy (Operation not permitted)"),
            std::string::npos) << r.out;
}

TEST(HeapRefusal, NoAddressSpaceForTheRange) {
  if (kSanitizer) GTEST_SKIP();
  Proc r = run({HEAP_HELPER, "status"}, {"SHADDR_HEAP_MAX=64G"}, [] {
    rlimit rl{std::size_t{4} << 30, std::size_t{4} << 30};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(126);
  });
  EXPECT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("reason=off: cannot reserve SHADDR_HEAP_MAX=68719476736 bytes"), std::string::npos)
      << r.out;
}

// Under a finite RLIMIT_AS the default range takes a quarter of it, and the program can still
// map most of the rest.
TEST(HeapRefusal, AnAddressSpaceLimitShrinksTheDefaultRange) {
  if (kSanitizer) GTEST_SKIP();
  Proc r = run({HEAP_HELPER, "status"}, {}, [] {
    rlimit rl{std::size_t{8} << 30, std::size_t{8} << 30};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(126);
  });
  EXPECT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("on=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reserved=2147483648\n"), std::string::npos) << r.out;
}

TEST(HeapPreload, AProgramThatKnowsNothingOfShaddr) {
  if (kSanitizer) GTEST_SKIP();
  Proc plain = run({HEAP_PLAIN}, {});
  EXPECT_NE(plain.out.find("in_heap=0"), std::string::npos) << plain.out;  // control
  Proc pre = run({HEAP_PLAIN}, {std::string("LD_PRELOAD=") + HEAP_SO});
  EXPECT_TRUE(pre.ok()) << pre.out;
  EXPECT_NE(pre.out.find("in_heap=1"), std::string::npos) << pre.out;
  // Its first malloc, in a preinit_array function (before any constructor): the heap
  // starts inside that call.
  EXPECT_NE(pre.out.find("first_in_heap=1"), std::string::npos) << pre.out;
}

// dlsym(RTLD_DEFAULT, "malloc") answers the program's own PLT stub when the program is not
// position-independent and takes malloc's address (Debian's python3): the heap stepped aside
// there, though the stub calls the preloaded malloc.
TEST(HeapPreload, ANonPieProgramTakingMallocsAddressGetsTheHeap) {
  if (kSanitizer) GTEST_SKIP();
  Proc r = run({HEAP_PLAIN_NOPIE}, {std::string("LD_PRELOAD=") + HEAP_SO, "SHADDR_VERBOSE=1"});
  EXPECT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("in_heap=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shaddr heap: on"), std::string::npos) << r.out;
}

TEST(HeapPreload, AProgramWithItsOwnAllocatorKeepsIt) {
  if (kSanitizer) GTEST_SKIP();
  Proc r = run({HEAP_OWN_MALLOC}, {std::string("LD_PRELOAD=") + HEAP_SO, "SHADDR_VERBOSE=1"});
  EXPECT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("in_heap=0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shaddr heap: off: the program brings its own malloc"), std::string::npos) << r.out;
}

// Private anonymous memory's rules (madvise(2), mprotect(2), mremap(2), mbind, fork) hold for
// malloc'd memory in the heap as on glibc's: every line of heap_private.c's report is the same
// (a heap size and a glibc size each: 4 KiB stays with glibc at the default SHADDR_HEAP_MIN).
void expect_same_report(const char *program, const std::vector<std::string> &sizes) {
  std::vector<std::string> args{program};
  args.insert(args.end(), sizes.begin(), sizes.end());
  Proc stock = run(args, {});
  ASSERT_TRUE(stock.ok()) << stock.out;
  Proc heap = run(args, {std::string("LD_PRELOAD=") + HEAP_SO, "SHADDR_HEAP_MIN=16K"});
  ASSERT_TRUE(heap.ok()) << heap.out;
  EXPECT_EQ(stock.out, heap.out);
}

TEST(HeapPrivate, MadviseMprotectMremapMbindAndForkAsOnGlibc) {
  if (kSanitizer) GTEST_SKIP();
  Proc verbose = run({HEAP_PLAIN}, {std::string("LD_PRELOAD=") + HEAP_SO, "SHADDR_VERBOSE=1"});
  ASSERT_NE(verbose.out.find("in_heap=1"), std::string::npos) << verbose.out;  // the heap is on
  expect_same_report(HEAP_PRIVATE, {"4K", "64K", "1M", "8M"});
}

// A program linked with libjemalloc: jemalloc comes after the preloaded heap in the lookup
// order and keeps every allocation (the heap says so); its extended API mixed with free()
// and friends works, and the report is jemalloc's own.
TEST(HeapPreload, AProgramLinkedWithJemallocKeepsIt) {
  if (kSanitizer) GTEST_SKIP();
  Proc r = run({HEAP_JEMALLOC}, {std::string("LD_PRELOAD=") + HEAP_SO, "SHADDR_VERBOSE=1"});
  EXPECT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("heap_jemalloc: ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shaddr heap: off: the program brings its own malloc (libjemalloc"),
            std::string::npos) << r.out;
  expect_same_report(HEAP_PRIVATE_JEMALLOC, {"64K", "8M"});
}

// The interposer will bring libshaddr-heap in: as a dependency of a preloaded library it comes
// after libc in the lookup order, and the heap must say so rather than pretend.
TEST(HeapPreload, AsADependencyOfAPreloadedLibraryItSaysWhyItIsOff) {
  if (kSanitizer) GTEST_SKIP();
  Proc r = run({HEAP_PLAIN}, {std::string("LD_PRELOAD=") + HEAP_DEP_SO, "SHADDR_VERBOSE=1"});
  EXPECT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("in_heap=0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("libshaddr-heap must be in LD_PRELOAD itself"), std::string::npos) << r.out;
  Proc both = run({HEAP_PLAIN}, {std::string("LD_PRELOAD=") + HEAP_SO + " " + HEAP_DEP_SO});
  EXPECT_NE(both.out.find("in_heap=1"), std::string::npos) << both.out;
}

}  // namespace
