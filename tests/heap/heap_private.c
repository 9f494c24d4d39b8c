/* What a program sees of its malloc'd memory through madvise, mprotect, mremap, mlock, mbind and
 * fork, printed one line per check, so that a run under libshaddr-heap can be compared line by
 * line with a run on glibc's malloc (tests/heap/heap_test.cc, HeapPrivate): private anonymous
 * memory's semantics (madvise(2), mprotect(2), mremap(2)). Knows nothing of shaddr.
 * Usage: shaddr_heap_private [SIZE...] (default: 4K 64K 1M 8M 32M) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <numaif.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#define MADV_GUARD_REMOVE 103
#endif

static int g_pipe[2];

/* What the bytes of [p, p + n) are: every one the pattern, every one zero, each one or the other,
 * or something else. */
static const char *content(const unsigned char *p, size_t n, unsigned char pat) {
  int zero = 0, kept = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] == 0) zero = 1;
    else if (p[i] == pat) kept = 1;
    else return "other";
  }
  return zero && kept ? "zeros+kept" : zero ? "zeros" : "kept";
}

/* Whether the kernel can read (write) the pages: EFAULT if not, with no signal. */
static int readable(const void *p, size_t n) {
  for (size_t i = 0; i < n; i += 4096) {
    char c;
    if (write(g_pipe[1], (const char *)p + i, 1) != 1) return 0;
    if (read(g_pipe[0], &c, 1) != 1) abort();
  }
  return 1;
}
/* Each page's first byte goes through a pipe and back into place: the same bytes, or EFAULT. */
static int writable(void *p, size_t n) {
  for (size_t i = 0; i < n; i += 4096) {
    char *b = (char *)p + i, c;
    if (write(g_pipe[1], b, 1) != 1) return 0;
    if (read(g_pipe[0], b, 1) != 1) {
      if (read(g_pipe[0], &c, 1) != 1) abort();
      return 0;
    }
  }
  return 1;
}

/* How much of [p, p + n) is mlock()ed: /proc/self/smaps's VmFlags "lo" of its mappings. */
static const char *locked(const void *p, size_t n) {
  FILE *f = fopen("/proc/self/smaps", "r");
  char line[512];
  uintptr_t a = (uintptr_t)p, e = a + n, lo = 0, hi = 0;
  size_t bytes = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long x, y;
    if (sscanf(line, "%lx-%lx ", &x, &y) == 2) {
      lo = x, hi = y;
    } else if (!strncmp(line, "VmFlags:", 8) && strstr(line, " lo ") && hi > a && lo < e) {
      bytes += (hi < e ? hi : e) - (lo > a ? lo : a);
    }
  }
  if (f) fclose(f);
  return bytes == 0 ? "none" : bytes >= ((n + 4095) & ~(size_t)4095) ? "all" : "part";
}

static size_t g_size;
static void say(const char *what, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  printf("%zu %s: %s\n", g_size, what, buf);
  fflush(stdout);
}

static const char *rc(int r) {
  static char buf[32];
  if (r == 0) return "0";
  snprintf(buf, sizeof buf, "-1 %s", strerrorname_np(errno));
  return buf;
}

/* A child's view of [p, p + n): readable, and if so what it holds. */
static void child_view(const char *what, unsigned char *p, size_t n, unsigned char pat) {
  int fds[2];
  if (pipe(fds)) abort();
  pid_t pid = fork();
  if (pid == 0) {
    char line[128];
    int r = readable(p, n);
    snprintf(line, sizeof line, "readable %d, %s", r, r ? content(p, n, pat) : "-");
    if (write(fds[1], line, strlen(line) + 1) < 0) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  char line[128] = "";
  ssize_t got = read(fds[0], line, sizeof line - 1);
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  say(what, "child: %s (exit %d)", got > 0 ? line : "nothing", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static unsigned char *fresh(size_t n, unsigned char pat) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, n)) abort();
  memset(p, pat, n);
  return p;
}

static void checks(size_t n) {
  g_size = n;
  unsigned char *p;

  int r;
  p = fresh(n, 0xab);
  r = madvise(p, n, MADV_DONTNEED);
  say("MADV_DONTNEED", "%s, %s", rc(r), content(p, n, 0xab));
  memset(p, 0xcd, n);
  say("write after MADV_DONTNEED", "%s", content(p, n, 0xcd));
  free(p);

  p = fresh(n, 0xab);
  r = madvise(p, n, MADV_FREE);
  const char *c = content(p, n, 0xab);
  /* Private memory may keep the bytes until the kernel reclaims them: zeros or the old bytes. */
  say("MADV_FREE", "%s, %s", rc(r), strcmp(c, "other") ? "zeros or kept" : c);
  free(p);

  p = fresh(n, 0xab);
  r = madvise(p, n / 2, MADV_DONTNEED);
  say("MADV_DONTNEED first half", "%s, %s, second half %s", rc(r), content(p, n / 2, 0xab),
      content(p + n / 2, n - n / 2, 0xab));
  free(p);

  p = fresh(n, 0xab);
  r = madvise(p, n, MADV_REMOVE);
  /* Refused on private memory (the bytes stay); on shared memory it punches (zeros). */
  say("MADV_REMOVE", "%s", (r == 0 && !strcmp(content(p, n, 0xab), "zeros")) ||
                               (r != 0 && !strcmp(content(p, n, 0xab), "kept"))
                           ? "zeros if it succeeds, else kept"
                           : "wrong");
  free(p);

  p = fresh(n, 0xab);
  say("MADV_WIPEONFORK", "%s", rc(madvise(p, n, MADV_WIPEONFORK)));
  child_view("after MADV_WIPEONFORK", p, n, 0xab);
  say("parent after MADV_WIPEONFORK", "%s", content(p, n, 0xab));
  say("MADV_KEEPONFORK", "%s", rc(madvise(p, n, MADV_KEEPONFORK)));
  child_view("after MADV_KEEPONFORK", p, n, 0xab);
  free(p);

  p = fresh(n, 0xab);
  say("MADV_DONTFORK", "%s", rc(madvise(p, n, MADV_DONTFORK)));
  child_view("after MADV_DONTFORK", p, n, 0xab);
  say("MADV_DOFORK", "%s", rc(madvise(p, n, MADV_DOFORK)));
  child_view("after MADV_DOFORK", p, n, 0xab);
  free(p);

  /* Copy on write: neither side sees the other's writes after fork(). */
  p = fresh(n, 0xab);
  int go[2], done[2];
  if (pipe(go) || pipe(done)) abort();
  pid_t pid = fork();
  if (pid == 0) {
    char x;
    memset(p, 0x11, n);
    if (write(done[1], "x", 1) != 1 || read(go[0], &x, 1) != 1) _exit(3);
    _exit(strcmp(content(p, n, 0x11), "kept") ? 1 : 0);  /* the parent's 0x22 must not show */
  }
  char x;
  if (read(done[0], &x, 1) != 1) abort();
  say("copy on write, parent after child's write", "%s", content(p, n, 0xab));
  memset(p, 0x22, n);
  if (write(go[1], "x", 1) != 1) abort();
  int st;
  waitpid(pid, &st, 0);
  say("copy on write, child after parent's write", "exit %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  close(go[0]), close(go[1]), close(done[0]), close(done[1]);
  free(p);

  p = fresh(n, 0xab);
  r = mprotect(p, n, PROT_READ);
  say("mprotect PROT_READ", "%s, readable %d, writable %d", rc(r), readable(p, n), writable(p, n));
  child_view("after mprotect PROT_READ", p, n, 0xab);
  r = mprotect(p, n, PROT_NONE);
  say("mprotect PROT_NONE", "%s, readable %d", rc(r), readable(p, n));
  r = mprotect(p, n, PROT_READ | PROT_WRITE);
  say("mprotect back", "%s, %s", rc(r), content(p, n, 0xab));
  free(p);

  p = fresh(n, 0xab);
  r = pkey_mprotect(p, n, PROT_READ, -1);
  say("pkey_mprotect PROT_READ", "%s, writable %d", rc(r), writable(p, n));
  child_view("after pkey_mprotect", p, n, 0xab);
  r = pkey_mprotect(p, n, PROT_READ | PROT_WRITE, -1);
  say("pkey_mprotect back", "%s, %s", rc(r), content(p, n, 0xab));
  free(p);

  p = fresh(n, 0xab);
  say("mlock", "%s", rc(mlock(p, n)));
  r = madvise(p, n, MADV_DONTNEED);
  say("MADV_DONTNEED on locked pages", "%s, %s", rc(r), content(p, n, 0xab));
  r = madvise(p, n, MADV_FREE);
  say("MADV_FREE on locked pages", "%s, %s", rc(r), content(p, n, 0xab));
  say("munlock", "%s", rc(munlock(p, n)));
  free(p);

  /* Pages stay locked through calls that change their mapping (the heap's withdraw). */
  p = fresh(n, 0xab);
  if (mlock(p, n)) abort();
  r = mprotect(p, n, PROT_READ);
  say("mprotect PROT_READ on locked pages", "%s, locked %s", rc(r), locked(p, n));
  r = mprotect(p, n, PROT_READ | PROT_WRITE);
  say("mprotect back", "%s, locked %s, %s", rc(r), locked(p, n), content(p, n, 0xab));
  r = madvise(p + n / 2, n - n / 2, MADV_DONTFORK);
  say("MADV_DONTFORK on locked pages", "%s, locked %s", rc(r), locked(p, n));
  r = madvise(p + n / 2, n - n / 2, MADV_DOFORK);
  say("MADV_DOFORK", "%s", rc(r));
  r = munlock(p, n);
  say("munlock", "%s, locked %s", rc(r), locked(p, n));
  free(p);

  p = fresh(n, 0xab);
  static const int hints[] = {MADV_NORMAL, MADV_RANDOM, MADV_SEQUENTIAL, MADV_WILLNEED,
                              MADV_MERGEABLE, MADV_UNMERGEABLE, MADV_HUGEPAGE, MADV_NOHUGEPAGE,
                              MADV_DONTDUMP, MADV_DODUMP, MADV_COLD, MADV_PAGEOUT,
                              MADV_POPULATE_READ, MADV_POPULATE_WRITE, MADV_COLLAPSE};
  for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++) {
    char what[32];
    snprintf(what, sizeof what, "madvise %d", hints[i]);
    r = madvise(p, n, hints[i]);
    say(what, "%s, %s", rc(r), content(p, n, 0xab));
  }
  say("madvise 12345", "%s", rc(madvise(p, n, 12345)));
  say("madvise unaligned", "%s", rc(madvise(p + 1, n - 1, MADV_DONTNEED)));
  say("after them", "%s", content(p, n, 0xab));
  child_view("after the hints", p, n, 0xab);
  free(p);

  p = fresh(n, 0xab);
  r = madvise(p, n, MADV_GUARD_INSTALL);
  say("MADV_GUARD_INSTALL", "%s, readable %d", rc(r), readable(p, n));
  if (r == 0) child_view("after MADV_GUARD_INSTALL", p, n, 0xab);
  int r2 = madvise(p, n, MADV_GUARD_REMOVE);
  say("MADV_GUARD_REMOVE", "%s, %s", rc(r2), r == 0 ? content(p, n, 0xab) : "-");
  free(p);

  p = fresh(n, 0xab);
  unsigned long nodes = 1;
  r = (int)mbind(p, n, MPOL_BIND, &nodes, 8 * sizeof nodes, MPOL_MF_MOVE | MPOL_MF_STRICT);
  say("mbind MPOL_BIND node 0", "%s, %s", rc(r), content(p, n, 0xab));
  child_view("after mbind", p, n, 0xab);
  free(p);

  p = fresh(n, 0xab);
  unsigned char *q = mremap(p, n, n, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
  /* Whether a malloc'd block can be moved depends on how the allocator mapped it: either way,
   * private memory's rules (moved bytes kept, the old range empty), or refused with nothing moved. */
  const char *old = content(p, n, 0xab);
  say("mremap MREMAP_DONTUNMAP", "%s",
      (q != MAP_FAILED && !strcmp(content(q, n, 0xab), "kept") && !strcmp(old, "zeros")) ||
              (q == MAP_FAILED && !strcmp(old, "kept"))
          ? "moved with the old range empty, or refused"
          : "wrong");
  if (q != MAP_FAILED) munmap(q, n);
  memset(p, 0xab, n);
  free(p);

  /* Reused after the calls above: malloc'd memory is read-write and holds what is written. */
  p = fresh(n, 0x5a);
  say("fresh block", "readable %d, writable %d, %s", readable(p, n), writable(p, n), content(p, n, 0x5a));
  child_view("fresh block", p, n, 0x5a);
  free(p);
}

static size_t parse_size(const char *s) {
  char *end;
  size_t v = strtoull(s, &end, 0);
  if (*end == 'K') v <<= 10;
  if (*end == 'M') v <<= 20;
  return v;
}

int main(int argc, char **argv) {
  if (pipe(g_pipe)) return 2;
  static const size_t sizes[] = {4096, 64 << 10, 1 << 20, 8 << 20, 32 << 20};
  if (argc > 1)
    for (int i = 1; i < argc; i++) checks(parse_size(argv[i]));
  else
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) checks(sizes[i]);
  return 0;
}
