// Helper processes for the heap tests, linked with libshaddr-heap's objects. Each command
// prints key=value lines and exits 0 when what it checks holds:
//   status          the heap's state, and where a 1 MiB malloc and an alloc(64) land
//   exhaust         SHADDR_HEAP_MAX small: allocations beyond it still succeed (outside),
//                   data stays intact, freed heap memory is used again
//   nofds           no memfd:shaddr-heap among this process's fds and mappings (prints leaked=N)
//   peer FD         receive a heap fd over the socket FD (SCM_RIGHTS), map it, check buffers
//   fork-nomemfd    fork after memfd_create was forbidden: the child's private copy of the heap
//                   is anonymous memory, and neither side sees the other's writes
#include <malloc.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <string>
#include <vector>

#include "heap.h"
#include "heap_util.h"

namespace heap = shaddr::heap;

namespace {

bool in_heap(const void *p) { return heap::contains(p, 1).has_value(); }

int cmd_status() {
  heap::Status s = heap::status();
  std::printf("on=%d\nreason=%s\nmin=%zu\nreserved=%zu\n", s.on, s.reason, s.min_size, s.reserved);
  for (std::size_t n : {std::size_t{512} << 10, std::size_t{1} << 20}) {
    void *p = std::malloc(n);
    std::memset(p, 1, n);
    std::printf("malloc_%zuK_in_heap=%d\n", n >> 10, in_heap(p));
    std::free(p);
  }
  void *a = heap::alloc(64);
  std::printf("alloc_in_heap=%d\n", in_heap(a));
  heap::release(a);
  return 0;
}

int cmd_exhaust() {
  heap::Status s = heap::status();
  if (!s.on) {
    std::printf("heap off: %s\n", s.reason);
    return 1;
  }
  const std::size_t block = 1 << 20, total = 3 * s.reserved;
  std::vector<unsigned char *> blocks;
  std::size_t inside = 0, outside = 0;
  for (std::size_t got = 0; got < total; got += block) {
    auto *p = static_cast<unsigned char *>(std::malloc(block));
    if (!p) {
      std::printf("malloc failed after %zu bytes\n", got);
      return 1;
    }
    std::memset(p, pattern(static_cast<std::uint32_t>(blocks.size()), 0), block);
    (in_heap(p) ? inside : outside)++;
    blocks.push_back(p);
  }
  // One allocation larger than the whole range, and MPI_Alloc_mem-style ones, still succeed.
  auto *huge = static_cast<unsigned char *>(std::malloc(2 * s.reserved));
  void *mpi = heap::alloc(block);
  bool ok = huge && mpi && !in_heap(huge);
  if (huge) std::memset(huge, 3, 2 * s.reserved);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    for (std::size_t j = 0; j < block; j += 4096)
      if (blocks[i][j] != pattern(static_cast<std::uint32_t>(i), 0)) ok = false;
  for (auto *p : blocks) std::free(p);
  std::free(huge);
  heap::release(mpi);
  void *again = std::malloc(block);
  std::size_t exhausted = heap::status().exhausted;
  std::printf("inside=%zu\noutside=%zu\nreuse_in_heap=%d\nintact=%d\nexhausted=%zu\n", inside,
              outside, in_heap(again), ok, exhausted);
  std::free(again);
  return ok && inside > 0 && outside > 0 && exhausted > 0 ? 0 : 1;
}

int cmd_nofds() {
  int leaked = 0;
  if (DIR *d = opendir("/proc/self/fd")) {
    while (dirent *e = readdir(d)) {
      char path[300], target[300];
      std::snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
      ssize_t n = readlink(path, target, sizeof target - 1);
      if (n > 0) {
        target[n] = 0;
        if (std::strstr(target, "memfd:shaddr-heap")) ++leaked;
      }
    }
    closedir(d);
  }
  if (FILE *f = std::fopen("/proc/self/maps", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f))
      if (std::strstr(line, "memfd:shaddr-heap")) ++leaked;
    std::fclose(f);
  }
  std::printf("leaked=%d\n", leaked);
  return leaked ? 1 : 0;
}

int recv_fd(int sock, PeerMsg *m) {
  char ctl[CMSG_SPACE(sizeof(int))];
  iovec iov{m, sizeof *m};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  if (recvmsg(sock, &h, MSG_CMSG_CLOEXEC) != static_cast<ssize_t>(sizeof *m)) return -1;
  cmsghdr *c = CMSG_FIRSTHDR(&h);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

// The peer: maps the whole range read-only once, then checks every buffer it is told of.
int cmd_peer(int sock) {
  PeerMsg m{};
  int fd = recv_fd(sock, &m);
  if (fd < 0) {
    std::printf("no fd received\n");
    return 1;
  }
  auto *view = static_cast<unsigned char *>(heap::map_peer(fd, m.reserved));
  if (!view) {
    std::printf("mmap failed\n");
    return 1;
  }
  int rounds = 0;
  while (m.seed) {
    std::uint64_t bad = 0;
    for (std::uint64_t i = 0; i < m.len; ++i) bad += view[m.offset + i] != pattern(m.seed, i);
    char verdict = bad ? 'n' : 'y';
    std::printf("round %d: offset %llu, %llu bad bytes\n", rounds++, (unsigned long long)m.offset,
                (unsigned long long)bad);
    if (write(sock, &verdict, 1) != 1 || read(sock, &m, sizeof m) != static_cast<ssize_t>(sizeof m)) return 1;
  }
  heap::unmap_peer(view, m.reserved);
  return 0;
}

int cmd_fork_nomemfd() {
  if (!heap::enabled()) return 1;
  auto *p = static_cast<volatile char *>(std::malloc(1 << 20));
  if (!in_heap(const_cast<char *>(p))) return 2;
  std::memset(const_cast<char *>(p), 'P', 1 << 20);
  int to_child[2], to_parent[2];
  if (!refuse_memfd() || pipe(to_child) || pipe(to_parent)) return 3;
  pid_t pid = fork();
  if (pid < 0) return 4;
  char c;
  if (pid == 0) {
    close(to_child[1]);  // so that either side's death is an end of file, not a hang
    close(to_parent[0]);
    heap::Status s = heap::status();
    std::printf("child: %s\n", s.reason);
    if (s.on || heap::contains(const_cast<char *>(p), 1)) _exit(10);
    for (int i = 0; i < (1 << 20); ++i)
      if (p[i] != 'P') _exit(11);
    if (read(to_child[0], &c, 1) != 1 || p[1] != 'P') _exit(12);  // the parent wrote 'Q'
    p[0] = 'C';
    void *q = std::malloc(8 << 20);  // the child's heap still allocates (privately)
    if (!q || malloc_usable_size(q) < (8u << 20)) _exit(13);
    std::memset(q, 'c', 8 << 20);
    std::free(q);
    if (write(to_parent[1], "w", 1) != 1) _exit(14);
    _exit(0);
  }
  close(to_child[0]);
  close(to_parent[1]);
  p[1] = 'Q';
  if (write(to_child[1], "w", 1) != 1 || read(to_parent[0], &c, 1) != 1) {
    waitpid(pid, nullptr, 0);
    std::printf("parent: the child died early\n");
    return 5;
  }
  int st = 0;
  waitpid(pid, &st, 0);
  std::printf("parent: p[0]=%c child exit %d\n", p[0], WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return p[0] == 'P' && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 6;
}

}  // namespace

int main(int argc, char **argv) {
  std::string cmd = argc > 1 ? argv[1] : "";
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  if (cmd == "status") return cmd_status();
  if (cmd == "exhaust") return cmd_exhaust();
  if (cmd == "nofds") return cmd_nofds();
  if (cmd == "peer" && argc > 2) return cmd_peer(std::atoi(argv[2]));
  if (cmd == "fork-nomemfd") return cmd_fork_nomemfd();
  std::fprintf(stderr, "usage: %s status|exhaust|nofds|peer FD|fork-nomemfd\n", argv[0]);
  return 2;
}
