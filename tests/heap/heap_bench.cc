// Cost of the heap against glibc: run once with SHADDR_HEAP=off (glibc behind the heap's
// malloc wrapper) and once with the heap on, and compare.
//   malloc+free pairs per size (nothing touched, and with every page written), and the time
//   of fork() + the child's _exit + waitpid with 1 GiB of live heap written.
// Not a test: prints numbers. shaddr_heap_bench [fork-MiB]
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "heap.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void escape(void *p) { asm volatile("" : : "r"(p) : "memory"); }

double pair_ns(std::size_t n, bool touch, int iters) {
  for (int i = 0; i < 10; ++i) std::free(std::malloc(n));  // warm up
  double t0 = now();
  for (int i = 0; i < iters; ++i) {
    char *p = static_cast<char *>(std::malloc(n));
    if (touch)
      for (std::size_t j = 0; j < n; j += 4096) p[j] = static_cast<char>(i);
    escape(p);
    std::free(p);
  }
  return (now() - t0) / iters * 1e9;
}

}  // namespace

int main(int argc, char **argv) {
  std::size_t fork_mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
  shaddr::heap::Status s = shaddr::heap::status();
  std::printf("heap: %s\n", s.reason);
  std::printf("%10s %16s %16s\n", "size", "malloc+free ns", "+write pages ns");
  for (std::size_t n : {std::size_t{32}, std::size_t{4096}, std::size_t{65536}, std::size_t{262144},
                        std::size_t{1} << 20, std::size_t{4} << 20, std::size_t{64} << 20}) {
    int iters = n >= (std::size_t{64} << 20) ? 50 : n >= (std::size_t{1} << 20) ? 2000 : 200000;
    double a = pair_ns(n, false, iters), b = pair_ns(n, true, iters / 10 ? iters / 10 : 1);
    std::printf("%10zu %16.1f %16.1f\n", n, a, b);
  }
  if (fork_mib) {
    std::size_t n = fork_mib << 20;
    char *big = static_cast<char *>(std::malloc(n));
    std::memset(big, 1, n);
    double best = 1e9;
    for (int r = 0; r < 5; ++r) {
      double t0 = now();
      pid_t pid = fork();
      if (pid == 0) _exit(big[n / 2] == 1 ? 0 : 1);
      int st;
      waitpid(pid, &st, 0);
      double t = now() - t0;
      if (t < best) best = t;
    }
    std::printf("fork+exit+wait with %zu MiB written: best of 5 %.1f ms (in heap: %d)\n", fork_mib,
                best * 1e3, shaddr::heap::contains(big, 1).has_value());
    std::free(big);
  }
  return 0;
}
