// SPDX-License-Identifier: MIT
#include "bootstrap.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace shaddr {
namespace {

// Star topology: rank 0 holds one socket per child; a child holds one to rank 0.
struct Star {
  int rank = 0;
  int size = 1;
  std::vector<int> socks;  // rank 0: socks[r] for r >= 1; child: socks[0]
};

int send_all(int fd, const void *buf, size_t len) {
  const char *p = static_cast<const char *>(buf);
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -EPIPE;
    p += n;
    len -= n;
  }
  return 0;
}

int recv_all(int fd, void *buf, size_t len) {
  char *p = static_cast<char *>(buf);
  while (len) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -EPIPE;
    p += n;
    len -= n;
  }
  return 0;
}

int star_allgather(const void *send, void *recv, size_t bytes, void *ctx) {
  Star *s = static_cast<Star *>(ctx);
  char *out = static_cast<char *>(recv);
  const size_t total = bytes * s->size;
  if (s->rank == 0) {
    if (bytes) memmove(out, send, bytes);
    for (int r = 1; r < s->size; r++)
      if (int err = recv_all(s->socks[r], out + r * bytes, bytes)) return err;
    for (int r = 1; r < s->size; r++)
      if (int err = send_all(s->socks[r], out, total)) return err;
    return 0;
  }
  if (int err = send_all(s->socks[0], send, bytes)) return err;
  return recv_all(s->socks[0], out, total);
}

int star_barrier(void *ctx) {
  Star *s = static_cast<Star *>(ctx);
  char one = 0;
  std::vector<char> all(s->size);
  return star_allgather(&one, all.data(), 1, ctx);
}

}  // namespace

int run_forked(int n, const std::function<int(const shaddr_host &)> &fn) {
  if (n < 1) return -EINVAL;
  std::vector<int> parent_ends(n, -1);
  std::vector<pid_t> kids;
  for (int r = 1; r < n; r++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return -errno;
    pid_t pid = fork();
    if (pid < 0) return -errno;
    if (pid == 0) {
      close(sv[0]);
      for (int q = 1; q < r; q++) close(parent_ends[q]);
      Star star{r, n, {sv[1]}};
      shaddr_host host{r, n, star_allgather, star_barrier, &star};
      int rc = fn(host);
      close(sv[1]);
      _exit(rc & 0xff ? rc & 0xff : (rc ? 1 : 0));
    }
    close(sv[1]);
    parent_ends[r] = sv[0];
    kids.push_back(pid);
  }
  Star star{0, n, parent_ends};
  shaddr_host host{0, n, star_allgather, star_barrier, &star};
  int result = fn(host);
  for (int r = 1; r < n; r++) close(parent_ends[r]);
  for (pid_t pid : kids) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (!result && rc) result = rc;
  }
  return result;
}

}  // namespace shaddr
