// The heap engine: settings, the memfd and its reserved range, the jemalloc arena whose extent
// hooks live on that range, and fork. See heap.h for the design.
//
// Locking: g.mu guards the bump pointer (g.bump), the growth of the mapping and the fork
// pipe. The extent hooks run with jemalloc's arena locks held and take g.mu only inside
// hook_alloc, never the other way round. Fork handlers are registered before jemalloc's (its
// constructor is stripped, and init() registers ours before its first jemalloc call), so in
// fork's prepare phase jemalloc locks its mutexes first and ours last, and in the parent and
// the child ours run first: the child copies the heap before jemalloc's child handler
// re-initialises the arena's mutexes (which live in the heap file), and the parent does not
// let jemalloc unlock (nor return from fork) until the child's copy is done.
//
// Nothing here allocates with malloc: the hooks, the fork handlers and the copy use system
// calls and stack buffers only.
#include "heap.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <jemalloc/jemalloc.h>  // extent_hooks_t, MALLOCX_* (its public names are renamed)
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "heap_internal.h"
#include "../src/size_parse.h"  // header-only: no link with libshaddr

extern "C" {
// jemalloc's API under the names prefix_jemalloc.cmake gives it.
void *shaddr_je_mallocx(size_t size, int flags);
void *shaddr_je_rallocx(void *p, size_t size, int flags);
void shaddr_je_dallocx(void *p, int flags);
size_t shaddr_je_sallocx(const void *p, int flags);
int shaddr_je_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
// Options of this private jemalloc:
//  - thread caches up to 64 KiB: without them every allocation of 16 KiB or more (a "large"
//    one to jemalloc) takes the arena's extent path, several times slower (docs/defaults.md).
//    Everything this jemalloc allocates comes from the heap's arena, so a cached block is
//    always heap memory;
//  - a single automatic arena (only the heap's explicit arena is ever used);
//  - extents retained and reused, dirty pages purged (hole-punched) about a second after they
//    were freed, no lazy (muzzy) stage: MADV_FREE means nothing to a shared file mapping.
__attribute__((visibility("hidden"))) const char *shaddr_je_malloc_conf =
    "tcache:true,tcache_max:65536,narenas:1,background_thread:false,retain:true,"
    "dirty_decay_ms:1000,muzzy_decay_ms:0";
// The malloc this library defines (malloc.cc), to tell whether the program uses it.
void *shaddr_heap_malloc(size_t size);
}

#if defined(SHADDR_HEAP_SANITIZER) || defined(__SANITIZE_ADDRESS__) || \
    defined(__SANITIZE_THREAD__)
#define HEAP_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define HEAP_UNDER_SANITIZER 1
#endif
#endif

namespace shaddr::heap {
namespace detail {
std::atomic<std::size_t> g_route_min{SIZE_MAX};
std::atomic<std::uintptr_t> g_base{0};
std::atomic<std::size_t> g_size{0};

namespace {
// [*b, *e) of text without the blanks around it.
void trimmed(const char *text, const char **b, const char **e) {
  const char *s = text, *t = text + std::strlen(text);
  while (*s == ' ' || *s == '\t') ++s;
  while (t > s && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r')) --t;
  *b = s;
  *e = t;
}
bool same_word(const char *b, const char *e, const char *w, std::size_t wlen, bool any_case) {
  if ((std::size_t)(e - b) != wlen) return false;
  for (std::size_t i = 0; i < wlen; i++)
    if (any_case ? (b[i] | 0x20) != w[i] : b[i] != w[i]) return false;
  return true;
}
}  // namespace

bool parse_size_setting(const char *text, std::uint64_t lo, std::uint64_t hi, std::uint64_t *out) {
  std::uint64_t n = 0;
  if (shaddr::parse_size(text, &n) != shaddr::SizeError::kNone || n < lo || n > hi) return false;
  *out = n;
  return true;
}

int parse_choice_setting(const char *text, const char *words) {
  const char *b, *e;
  trimmed(text, &b, &e);
  for (int i = 0; *words; i++) {
    const char *sp = std::strchr(words, ' ');
    std::size_t len = sp ? (std::size_t)(sp - words) : std::strlen(words);
    if (same_word(b, e, words, len, false)) return i;
    words += len + (sp ? 1 : 0);
  }
  return -1;
}

int parse_bool_setting(const char *text) {
  const char *b, *e;
  trimmed(text, &b, &e);
  for (const char *w : {"1", "yes", "true", "on"})
    if (same_word(b, e, w, std::strlen(w), true)) return 1;
  for (const char *w : {"0", "no", "false", "off"})
    if (same_word(b, e, w, std::strlen(w), true)) return 0;
  return -1;
}
}  // namespace detail

namespace {

using detail::g_base;
using detail::g_route_min;
using detail::g_size;

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;
constexpr std::size_t kRangeAlign = 2 * MiB;   // base alignment (room for huge pages)
constexpr std::size_t kGrowStep = 32 * MiB;    // the file and its mapping grow by this much
constexpr std::size_t kDefaultMaxCap = 64 * GiB;
constexpr std::size_t kRetainGrowCap = 128 * MiB;  // largest extent jemalloc asks for beyond a request

enum Phase { kUninit, kIniting, kOn, kOff };

struct Heap {
  std::atomic<int> phase{kUninit};
  Mode mode = Mode::off;
  std::size_t min = 0;
  std::uintptr_t base = 0;
  std::size_t max = 0;
  std::atomic<int> fd{-1};
  bool anonymous = false;  // a fork child that could not make a memfd: private, not shareable
  unsigned arena = 0;
  int flags = 0;  // MALLOCX_ARENA(arena)
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  std::uintptr_t bump = 0;                 // extents below this were handed to jemalloc
  std::atomic<std::uintptr_t> mapped_end{0};  // the file is mapped (and sized) up to here
  bool forking = false;                    // between our prepare and parent/child handlers
  int fork_pipe[2] = {-1, -1};             // the child says "copied" on it
  std::atomic<std::size_t> full{0};        // extent requests refused: range exhausted
  char reason[320] = "";
};
constinit Heap g;  // constant-initialised: malloc may run before any constructor

void set_reason(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void set_reason(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(g.reason, sizeof g.reason, fmt, ap);
  va_end(ap);
}

const char *errstr(int e) {
  const char *s = strerrordesc_np(e);  // never allocates, unlike strerror()
  return s ? s : "unknown error";
}

std::uintptr_t align_up(std::uintptr_t v, std::size_t a) { return (v + a - 1) & ~(std::uintptr_t)(a - 1); }

// ---- settings ---------------------------------------------------------------------------

struct Config {
  Mode mode = Mode::automatic;
  std::size_t min = kDefaultMinSize;  // SHADDR_HEAP_MIN (see heap.h)
  std::size_t max = 0;
  bool verbose = false;
  char error[160] = "";  // non-empty: a setting did not parse; the heap stays off
};

// min(RAM, 64 GiB) (heap.h says why), and at most a quarter of a finite RLIMIT_AS: the
// reservation counts against that limit, and must not take the program's own mappings away.
std::size_t default_max() {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  std::size_t ram = pages > 0 && psz > 0 ? (std::size_t)pages * (std::size_t)psz : kDefaultMaxCap;
  std::size_t m = ram < kDefaultMaxCap ? ram : kDefaultMaxCap;
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY && as.rlim_cur / 4 < m)
    m = as.rlim_cur / 4;
  m &= ~(kRangeAlign - 1);
  return m ? m : kRangeAlign;
}

// The one place the heap reads its settings: SHADDR_HEAP, SHADDR_HEAP_MIN, SHADDR_HEAP_MAX,
// SHADDR_VERBOSE. They are declared in libshaddr's settings registry (settings_table.cc:
// docs/settings.md's table, shaddr-info --settings) and parsed here by the registry's grammar
// (detail::parse_*_setting below), because this runs inside the first malloc, where the
// registry's reader, which allocates, cannot.
Config config_from_env() {
  Config c;
  const char *mode = std::getenv("SHADDR_HEAP");
  const char *min = std::getenv("SHADDR_HEAP_MIN");
  const char *max = std::getenv("SHADDR_HEAP_MAX");
  const char *verbose = std::getenv("SHADDR_VERBOSE");
  c.verbose = verbose && *verbose && detail::parse_bool_setting(verbose) == 1;
  const int m = mode && *mode ? detail::parse_choice_setting(mode, detail::kHeapModes) : 0;
  if (m < 0) {
    std::snprintf(c.error, sizeof c.error,
                  "SHADDR_HEAP=%.40s is not auto, off or mpi-alloc-only", mode);
    c.mode = Mode::off;
  } else {
    c.mode = m == 1 ? Mode::off : m == 2 ? Mode::mpi_alloc_only : Mode::automatic;
  }
  std::uint64_t v = 0;
  if (min && *min) {
    if (detail::parse_size_setting(min, detail::kHeapMinLo, detail::kHeapMinHi, &v))
      c.min = v;
    else
      std::snprintf(c.error, sizeof c.error,
                    "SHADDR_HEAP_MIN=%.40s is not a size (bytes, K, M, G, T)", min);
  }
  c.max = default_max();
  if (max && *max) {
    if (detail::parse_size_setting(max, detail::kHeapMaxLo, detail::kHeapMaxHi, &v))
      c.max = align_up(v, kRangeAlign);
    else
      std::snprintf(c.error, sizeof c.error,
                    "SHADDR_HEAP_MAX=%.40s is not a size between 2M and 64T", max);
  }
  return c;
}

// ---- the range and the file -------------------------------------------------------------

// Makes [base, end) mapped from the file (or anonymous memory, in a child that has no
// memfd). Called with g.mu held.
bool map_up_to(std::uintptr_t end) {
  std::uintptr_t mapped = g.mapped_end.load(std::memory_order_relaxed);
  if (end <= mapped) return true;
  std::uintptr_t new_end = align_up(end, kGrowStep);
  if (new_end > g.base + g.max) new_end = g.base + g.max;
  void *at = reinterpret_cast<void *>(mapped);
  std::size_t len = new_end - mapped;
  void *p;
  if (g.anonymous) {
    p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
             -1, 0);
  } else {
    int fd = g.fd.load(std::memory_order_relaxed);
    if (ftruncate(fd, (off_t)(new_end - g.base)) != 0) return false;
    p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)(mapped - g.base));
  }
  if (p == MAP_FAILED) return false;
  g.mapped_end.store(new_end, std::memory_order_release);
  return true;
}

bool punch(void *addr, std::size_t len) {
  if (g.anonymous) return madvise(addr, len, MADV_DONTNEED) != 0;
  return fallocate(g.fd.load(std::memory_order_relaxed), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                   (off_t)(reinterpret_cast<std::uintptr_t>(addr) - g.base), (off_t)len) != 0;
}

// ---- jemalloc extent hooks (return false for success, as jemalloc wants) -----------------

// Extents are carved from the bottom of the range and never given back (dalloc opts out), so
// jemalloc retains and reuses them, and a new extent is file space no one has written: zero.
void *hook_alloc(extent_hooks_t *, void *new_addr, size_t size, size_t alignment, bool *zero,
                 bool *commit, unsigned) {
  void *r = nullptr;
  pthread_mutex_lock(&g.mu);
  std::uintptr_t start = new_addr ? reinterpret_cast<std::uintptr_t>(new_addr) : align_up(g.bump, alignment);
  std::uintptr_t end = g.base + g.max;
  bool fits = start >= g.bump && start <= end && size <= end - start &&
              (!new_addr || start == g.bump);
  if (fits && map_up_to(start + size)) {
    g.bump = start + size;
    r = reinterpret_cast<void *>(start);
  } else if (!new_addr) {
    g.full.fetch_add(1, std::memory_order_relaxed);
  }
  pthread_mutex_unlock(&g.mu);
  if (r) {
    *zero = true;
    *commit = true;
  }
  return r;
}

bool hook_dalloc(extent_hooks_t *, void *, size_t, bool, unsigned) { return true; }

void hook_destroy(extent_hooks_t *, void *addr, size_t size, bool, unsigned) { punch(addr, size); }

// The whole range is always mapped read-write: there is nothing to commit, and decommit is
// declined, so jemalloc purges instead.
bool hook_commit(extent_hooks_t *, void *, size_t, size_t, size_t, unsigned) { return false; }
bool hook_decommit(extent_hooks_t *, void *, size_t, size_t, size_t, unsigned) { return true; }

// Forced purge: the pages leave the file (the next touch reads zeros), RSS drops, and every
// peer's mapping of them goes too.
bool hook_purge_forced(extent_hooks_t *, void *addr, size_t, size_t offset, size_t length, unsigned) {
  return punch(static_cast<char *>(addr) + offset, length);
}

bool hook_split(extent_hooks_t *, void *, size_t, size_t, size_t, bool, unsigned) { return false; }
bool hook_merge(extent_hooks_t *, void *, size_t, void *, size_t, bool, unsigned) { return false; }

extent_hooks_t g_hooks = {
    hook_alloc,   hook_dalloc,        hook_destroy,
    hook_commit,  hook_decommit,      nullptr /* purge_lazy: no MADV_FREE on shared files */,
    hook_purge_forced, hook_split,    hook_merge,
};

// ---- fork -------------------------------------------------------------------------------

// Copies the data of [0, len) of @src (skipping holes) into @dst, a file or (dst_fd < 0)
// memory at @dst_mem.
bool copy_heap(int src, int dst_fd, char *dst_mem, std::size_t len) {
  off_t pos = 0;
  while ((std::size_t)pos < len) {
    off_t data = lseek(src, pos, SEEK_DATA);
    if (data < 0) return errno == ENXIO;  // no data beyond pos
    if ((std::size_t)data >= len) break;
    off_t hole = lseek(src, data, SEEK_HOLE);
    if (hole < 0) return false;
    if ((std::size_t)hole > len) hole = (off_t)len;
    if (dst_fd >= 0 && lseek(dst_fd, data, SEEK_SET) != data) return false;
    for (off_t in = data; in < hole;) {
      ssize_t n;
      if (dst_fd >= 0) {
        // sendfile: faster than copy_file_range or a memcpy between mappings
        // (docs/defaults.md).
        n = sendfile(dst_fd, src, &in, (std::size_t)(hole - in));
        if (n < 0 && errno != EINTR) {  // no in-kernel copy: through a buffer
          char buf[64 * 1024];
          n = pread(src, buf, sizeof buf < (std::size_t)(hole - in) ? sizeof buf : (std::size_t)(hole - in), in);
          if (n > 0 && pwrite(dst_fd, buf, (std::size_t)n, in) != n) return false;
          if (n > 0 && lseek(dst_fd, in + n, SEEK_SET) != in + n) return false;
          if (n > 0) in += n;
        }
      } else {
        n = pread(src, dst_mem + in, (std::size_t)(hole - in), in);
        if (n > 0) in += n;
      }
      if (n == 0) return false;
      if (n < 0 && errno != EINTR) return false;
    }
    pos = hole;
  }
  return true;
}

void say(const char *s) {
  ssize_t r = write(2, s, std::strlen(s));
  (void)r;
}

// In the child, before anything else runs: the mapping still shows the parent's file.
// Give the child a file of its own with the same contents, mapped at the same place.
void child_private_copy() {
  std::size_t len = g.mapped_end.load(std::memory_order_relaxed) - g.base;
  int old = g.fd.load(std::memory_order_relaxed);
  int nfd = memfd_create("shaddr-heap", MFD_CLOEXEC);
  if (nfd >= 0 && ftruncate(nfd, (off_t)len) == 0 && copy_heap(old, nfd, nullptr, len) &&
      (len == 0 || mmap(reinterpret_cast<void *>(g.base), len, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_FIXED, nfd, 0) != MAP_FAILED)) {
    close(old);
    g.fd.store(nfd, std::memory_order_relaxed);
    return;
  }
  int e = errno;
  if (nfd >= 0) close(nfd);
  // No memfd: private anonymous memory, moved into place in one step.
  void *tmp = len ? mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : nullptr;
  if (len == 0 || (tmp != MAP_FAILED && copy_heap(old, -1, static_cast<char *>(tmp), len) &&
                   mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
                          reinterpret_cast<void *>(g.base)) != MAP_FAILED)) {
    close(old);
    g.fd.store(-1, std::memory_order_relaxed);
    g.anonymous = true;
    set_reason("off in this fork child: no memfd for its private copy (%s); its heap is private "
               "anonymous memory", errstr(e));
    return;
  }
  say("shaddr heap: fork child cannot make a private copy of the heap; aborting rather than "
      "sharing memory with the parent\n");
  abort();
}

void fork_prepare() {
  if (g.phase.load(std::memory_order_acquire) != kOn || g.anonymous) return;
  int e = errno;
  pthread_mutex_lock(&g.mu);
  g.forking = true;
  if (pipe2(g.fork_pipe, O_CLOEXEC) != 0) g.fork_pipe[0] = g.fork_pipe[1] = -1;
  errno = e;
}

void fork_parent() {
  if (!g.forking) return;
  int e = errno;
  g.forking = false;
  if (g.fork_pipe[1] >= 0) {
    close(g.fork_pipe[1]);
    char c;
    while (read(g.fork_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }  // a byte: copied; end of file: the child is gone (or fork failed)
    close(g.fork_pipe[0]);
  }
  pthread_mutex_unlock(&g.mu);
  errno = e;
}

void fork_child() {
  if (!g.forking) return;
  int e = errno;
  g.forking = false;
  child_private_copy();
  if (g.fork_pipe[1] >= 0) {
    char c = 1;
    ssize_t r = write(g.fork_pipe[1], &c, 1);
    (void)r;
    close(g.fork_pipe[1]);
    close(g.fork_pipe[0]);
  }
  g.mu = PTHREAD_MUTEX_INITIALIZER;
  errno = e;
}

// ---- start ------------------------------------------------------------------------------

#ifndef HEAP_UNDER_SANITIZER
// The malloc that a call through the program's own PLT reaches: the first object after the
// executable, in the global lookup order (the link map's: preloads, then dependencies), that
// defines it; nullptr if none can be told.
void *first_malloc_after_program() {
  void *self = dlopen(nullptr, RTLD_LAZY | RTLD_NOLOAD);
  struct link_map *lm = nullptr;
  if (!self || dlinfo(self, RTLD_DI_LINKMAP, &lm) != 0 || !lm) return nullptr;
  void *found = nullptr;
  for (lm = lm->l_next; lm && !found; lm = lm->l_next) {
    if (!lm->l_name || !*lm->l_name) continue;  // the vDSO
    void *h = dlopen(lm->l_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) continue;
    void *s = dlsym(h, "malloc");  // this object's, or one of its dependencies'
    Dl_info di{};
    if (s && dladdr(s, &di) && di.dli_fname && !std::strcmp(di.dli_fname, lm->l_name)) found = s;
    dlclose(h);
  }
  dlclose(self);
  return found;
}
#endif

bool program_uses_our_malloc() {
#ifdef HEAP_UNDER_SANITIZER
  return false;
#else
  void *m = dlsym(RTLD_DEFAULT, "malloc");
  if (m == reinterpret_cast<void *>(&shaddr_heap_malloc)) return true;
  // A program built without -fPIE that takes malloc's address (Debian's python3) has a
  // "canonical PLT entry": its symbol table lists malloc undefined but at its PLT stub's
  // address, which dlsym answers. Calls through the stub reach the malloc of the lookup order.
  Dl_info di{};
  void *sym_entry = nullptr;  // dladdr1 stores a const ElfW(Sym) * there
  if (m && dladdr1(m, &di, &sym_entry, RTLD_DL_SYMENT) && sym_entry &&
      static_cast<const ElfW(Sym) *>(sym_entry)->st_shndx == SHN_UNDEF &&
      first_malloc_after_program() == reinterpret_cast<void *>(&shaddr_heap_malloc))
    return true;
  const char *where = m && di.dli_fname && *di.dli_fname ? di.dli_fname : "the program";
  const char *slash = std::strrchr(where, '/');
  if (!std::strncmp(slash ? slash + 1 : where, "libc.so", 7))
    set_reason("off: glibc's malloc comes before libshaddr-heap's in the symbol lookup order: "
               "libshaddr-heap must be in LD_PRELOAD itself (or linked into the executable), not "
               "a dependency of a preloaded library");
  else
    set_reason("off: the program brings its own malloc (%.200s), so the heap steps aside", where);
  return false;
#endif
}

bool set_arena_size(const char *what, std::size_t v) {
  char name[64];
  std::snprintf(name, sizeof name, "arena.%u.%s", g.arena, what);
  return shaddr_je_mallctl(name, nullptr, nullptr, &v, sizeof v) == 0;
}

bool start(const Config &c) {
  g.mode = c.mode;
  g.min = c.min;
  if (c.error[0]) {
    set_reason("off: %s", c.error);
    return false;
  }
#ifdef HEAP_UNDER_SANITIZER
  set_reason("off: built with a sanitizer (SHADDR_SANITIZE), whose allocator stays in charge");
  return false;
#endif
  if (c.mode == Mode::off) {
    set_reason("off: SHADDR_HEAP=off");
    return false;
  }
  if (!program_uses_our_malloc()) return false;
  int fd = memfd_create("shaddr-heap", MFD_CLOEXEC);
  if (fd < 0) {
    set_reason("off: memfd_create failed (%s); everything runs on the normal allocator", errstr(errno));
    return false;
  }
  std::size_t span = c.max + kRangeAlign;
  void *r = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) {
    set_reason("off: cannot reserve SHADDR_HEAP_MAX=%zu bytes of address space (%s)", c.max, errstr(errno));
    close(fd);
    return false;
  }
  std::uintptr_t lo = reinterpret_cast<std::uintptr_t>(r), base = align_up(lo, kRangeAlign);
  if (base > lo) munmap(r, base - lo);
  if (lo + span > base + c.max) munmap(reinterpret_cast<void *>(base + c.max), lo + span - base - c.max);
  g.fd.store(fd, std::memory_order_relaxed);
  g.base = g.bump = base;
  g.max = c.max;
  g.mapped_end.store(base, std::memory_order_relaxed);

  // The arena: all of its extents, and its metadata, from hook_alloc.
  extent_hooks_t *hooks = &g_hooks;
  unsigned arena = 0;
  size_t sz = sizeof arena;
  if (shaddr_je_mallctl("arenas.create", &arena, &sz, &hooks, sizeof hooks) != 0) {
    set_reason("off: jemalloc could not create the heap's arena in %zu bytes (SHADDR_HEAP_MAX too small?)",
               c.max);
    munmap(reinterpret_cast<void *>(base), c.max);
    close(fd);
    g.fd.store(-1, std::memory_order_relaxed);
    return false;
  }
  g.arena = arena;
  g.flags = MALLOCX_ARENA(arena);
  // Bound the extra jemalloc asks for when it grows, so the last bytes of a full range stay
  // usable.
  std::size_t grow = c.max / 16;
  grow = grow < kRetainGrowCap ? grow : kRetainGrowCap;
  set_arena_size("retain_grow_limit", grow > kRangeAlign ? grow : kRangeAlign);

  g_base.store(base, std::memory_order_relaxed);
  g_size.store(c.max, std::memory_order_relaxed);
  g_route_min.store(c.mode == Mode::automatic ? (c.min ? c.min : 1) : SIZE_MAX, std::memory_order_relaxed);
  if (c.mode == Mode::automatic)
    set_reason("on: memfd fd %d, %zu MiB reserved at %p, malloc of %zu bytes or more and "
               "MPI_Alloc_mem", fd, c.max / MiB, reinterpret_cast<void *>(base), c.min);
  else
    set_reason("on: memfd fd %d, %zu MiB reserved at %p, MPI_Alloc_mem only (SHADDR_HEAP=mpi-alloc-only)",
               fd, c.max / MiB, reinterpret_cast<void *>(base));
  return true;
}

void init() {
  int expect = kUninit;
  if (!g.phase.compare_exchange_strong(expect, kIniting, std::memory_order_acq_rel)) return;
  int e = errno;
  // Before jemalloc's first call, so that our handlers are registered before jemalloc's.
  bool handlers = pthread_atfork(fork_prepare, fork_parent, fork_child) == 0;
  Config c = config_from_env();
  bool on = handlers ? start(c) : (set_reason("off: pthread_atfork failed"), false);
  g.phase.store(on ? kOn : kOff, std::memory_order_release);
  if (c.verbose) {
    char line[400];
    std::snprintf(line, sizeof line, "shaddr heap: %s\n", g.reason);
    say(line);
  }
  errno = e;
}

void ensure_init() {
  if (g.phase.load(std::memory_order_acquire) == kUninit) init();
  while (g.phase.load(std::memory_order_acquire) == kIniting) sched_yield();
}

__attribute__((constructor(101))) void heap_load() { init(); }

bool is_on() { return g.phase.load(std::memory_order_acquire) == kOn; }

}  // namespace

// ---- engine (malloc.cc) -----------------------------------------------------------------

namespace detail {

void *engine_alloc(std::size_t size, std::size_t align, bool zero) {
  if (!is_on()) return nullptr;
  int flags = g.flags | (zero ? MALLOCX_ZERO : 0) |
              (align > 1 ? MALLOCX_LG_ALIGN(__builtin_ctzl(align)) : 0);
  int e = errno;
  void *p = shaddr_je_mallocx(size ? size : 1, flags);
  errno = e;
  return p;
}

void *engine_realloc(void *p, std::size_t size) {
  int e = errno;
  void *q = shaddr_je_rallocx(p, size ? size : 1, g.flags);
  errno = e;
  return q;
}

void engine_free(void *p) { shaddr_je_dallocx(p, 0); }

std::size_t engine_usable_size(const void *p) { return shaddr_je_sallocx(p, 0); }

}  // namespace detail

// ---- public API -------------------------------------------------------------------------

#define HEAP_API __attribute__((visibility("default")))

HEAP_API Status status() {
  ensure_init();
  Status s;
  s.on = is_on() && !g.anonymous;
  s.mode = g.mode;
  s.reason = g.reason;
  if (s.on) {
    s.fd = g.fd.load(std::memory_order_relaxed);
    s.base = reinterpret_cast<void *>(g.base);
    s.reserved = g.max;
    s.min_size = g.mode == Mode::automatic ? g.min : 0;
    s.exhausted = g.full.load(std::memory_order_relaxed);
  }
  return s;
}

HEAP_API bool enabled() { return status().on; }
HEAP_API int fd() { return status().fd; }
HEAP_API void *base() { return status().base; }
HEAP_API std::size_t reserved_size() { return status().reserved; }

HEAP_API std::optional<std::size_t> contains(const void *addr, std::size_t len) {
  if (!is_on() || g.anonymous) return std::nullopt;
  std::uintptr_t a = reinterpret_cast<std::uintptr_t>(addr);
  std::uintptr_t end = g.mapped_end.load(std::memory_order_acquire);
  if (len == 0) len = 1;
  if (a < g.base || a >= end || len > end - a) return std::nullopt;
  return a - g.base;
}

HEAP_API void *alloc(std::size_t size) {
  ensure_init();
  if (void *p = detail::engine_alloc(size, 0, false)) return p;
  return std::malloc(size);
}

HEAP_API void release(void *p) { std::free(p); }

HEAP_API void *map_peer(int heap_fd, std::size_t reserved, bool writable) {
  void *m = mmap(nullptr, reserved, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED | MAP_NORESERVE,
                 heap_fd, 0);
  return m == MAP_FAILED ? nullptr : m;
}

HEAP_API void unmap_peer(void *map, std::size_t reserved) {
  if (map) munmap(map, reserved);
}

HEAP_API std::size_t file_size() {
  struct stat st;
  int f = fd();
  return f >= 0 && fstat(f, &st) == 0 ? (std::size_t)st.st_size : 0;
}

HEAP_API std::size_t file_resident() {
  struct stat st;
  int f = fd();
  return f >= 0 && fstat(f, &st) == 0 ? (std::size_t)st.st_blocks * 512 : 0;
}

HEAP_API void purge() {
  if (!is_on()) return;
  // This thread's cached blocks first, so that their pages can go too (another thread's cache
  // is given back when that thread exits, or bit by bit as it allocates).
  shaddr_je_mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
  char name[64];
  std::snprintf(name, sizeof name, "arena.%u.purge", g.arena);
  shaddr_je_mallctl(name, nullptr, nullptr, nullptr, 0);
}

}  // namespace shaddr::heap

extern "C" HEAP_API const shaddr::heap::Api *shaddr_heap_api_v1() {
  static constexpr shaddr::heap::Api api{shaddr::heap::kApiVersion, shaddr::heap::status,
                                         shaddr::heap::contains, shaddr::heap::alloc,
                                         shaddr::heap::release};
  return &api;
}
