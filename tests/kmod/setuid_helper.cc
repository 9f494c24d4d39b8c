// SPDX-License-Identifier: MIT
// Helper of test_creds.cc, exec'd by an exporter in the middle of a test:
//   shaddr_setuid_helper setuid-exporter CHFD OLDFD ADDR DROP
//     run setuid or setgid root (installed 04755 or 02755 root:root by the test): reports its
//     ids, what the device
//     file opened before the exec answers, maps a secret buffer at the old buffer's address ADDR
//     (hex), optionally drops every id back to the real uid (DROP=1; the process stays
//     non-dumpable), exports the secret (TRANSLATE, MAKE mode 0666) and reports.
//   shaddr_setuid_helper ns-exporter CHFD FILL NONDUMPABLE
//     exec'd inside a user namespace, so its address space belongs to that namespace: exports a
//     1 MiB buffer of FILL (a character), optionally turns non-dumpable, reports an ExportInfo.
// Both then wait for one byte on the channel (the test's "quit") and exit 0; they exit 3+ on a
// set-up failure. The alarm() of the exec'ing actor survives exec and bounds the wait.
#include "security_util.h"

using namespace shaddr_sec;

namespace {

bool send_all(int fd, const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= w;
  }
  return true;
}

void wait_quit(int ch) {
  char c;
  while (read(ch, &c, 1) < 0 && errno == EINTR) {
  }
}

int setuid_exporter(int ch, int oldfd, uintptr_t addr, bool drop) {
  HelperReport rep{};
  uid_t r, e, s;
  getresuid(&r, &e, &s);
  rep.ruid = r;
  rep.euid = e;
  rep.suid = s;
  gid_t rg, eg, sg;
  getresgid(&rg, &eg, &sg);
  rep.rgid = rg;
  rep.egid = eg;
  rep.sgid = sg;
  rep.dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);

  // The secret, at the address where the exporter's buffer was before the exec.
  char *secret = static_cast<char *>(mmap(reinterpret_cast<void *>(addr), kMiB,
                                          PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0));
  rep.secret_at_old_addr = secret == reinterpret_cast<char *>(addr);
  if (secret == MAP_FAILED) secret = aligned_map(kMiB, kMiB, kSecret);
  if (!secret) return 3;
  memset(secret, kSecret, kMiB);

  uint64_t h;
  rep.old_translate = translate(oldfd, secret, kMiB, kRW, &h);
  if (rep.old_translate == 0) rep.err = 10;  // must never export the new image
  shaddr_query q{};
  rep.old_query = xioctl(oldfd, SHADDR_IOC_QUERY, &q);
  if (rep.old_query == 0)
    for (const auto &slot : q.slots)
      if (slot.handle || slot.addr || slot.peer) rep.old_query_leak = 1;

  if (drop) {  // every id back to the real ones (setgroups only where allowed: setuid root)
    if (geteuid() == 0 && setgroups(0, nullptr)) return 4;
    if (setresgid(rg, rg, rg) || setresuid(r, r, r)) return 4;
  }
  int fd = open_dev(O_RDWR | O_CLOEXEC);
  if (fd < 0) return 5;
  if (set_slot_size(fd, kMiB)) return 6;
  if (translate(fd, secret, kMiB, kRW, &rep.handle)) rep.err = 11;
  if (seg_make(fd, secret, kMiB, 0666, &rep.segid)) rep.err = 12;
  if (!send_all(ch, &rep, sizeof(rep))) return 7;
  wait_quit(ch);
  return 0;
}

int ns_exporter(int ch, char fill, bool nondumpable) {
  ExportInfo info{};
  info.pid = getpid();
  char *buf = aligned_map(kMiB, kMiB, fill);
  int fd = open_dev(O_RDWR | O_CLOEXEC);
  if (!buf || fd < 0 || set_slot_size(fd, kMiB)) {
    info.err = 3;
  } else {
    info.addr = reinterpret_cast<uint64_t>(buf);
    info.size = kMiB;
    if (translate(fd, buf, kMiB, kRW, &info.handle)) info.err = 4;
    if (seg_make(fd, buf, kMiB, 0666, &info.segids[0])) info.err = 5;
    if (nondumpable && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) info.err = 6;
  }
  if (!send_all(ch, &info, sizeof(info))) return 7;
  wait_quit(ch);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "setuid-exporter") == 0)
    return setuid_exporter(atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], nullptr, 16),
                           atoi(argv[5]) != 0);
  if (argc == 5 && strcmp(argv[1], "ns-exporter") == 0)
    return ns_exporter(atoi(argv[2]), argv[3][0], atoi(argv[4]) != 0);
  fprintf(stderr, "usage: %s setuid-exporter CHFD OLDFD ADDR DROP | ns-exporter CHFD FILL ND\n",
          argv[0]);
  return 2;
}
