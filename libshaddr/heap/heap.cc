// The heap engine: settings, the memfd and its reserved range, the jemalloc arena whose extent
// hooks live on that range, and fork. See heap.h for the design.
//
// Locking: g.mu guards the bump pointer (g.bump), the growth of the mapping, the fork pipe,
// and the withdrawing and restoring of pages (memops.cc; the table's bits are atomic, so
// readers take no lock). The extent hooks run with jemalloc's arena locks held and take g.mu only inside
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
#include <sys/syscall.h>
#include <time.h>
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
size_t shaddr_je_xallocx(void *p, size_t size, size_t extra, int flags);
void shaddr_je_dallocx(void *p, int flags);
void shaddr_je_sdallocx(void *p, size_t size, int flags);
size_t shaddr_je_sallocx(const void *p, int flags);
int shaddr_je_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
// Options of this private jemalloc:
//  - thread caches up to 8 MiB (jemalloc's limit): a block freed and allocated again by the
//    same thread, as glibc's arenas do, keeps its pages and takes no lock. Everything this
//    jemalloc allocates comes from the heap's arenas, so a cached block is always heap memory;
//  - a single automatic arena (only the heap's explicit arenas are ever used);
//  - no "oversize" threshold (0 turns it off): by default jemalloc purges a freed extent of
//    8 MiB or more at once, so each allocation of that size faulted all its pages in again
//    (31 ms per 8 MiB malloc+write+free round against glibc's 0.2 ms);
//  - extents retained and reused; freed pages kept, as glibc keeps the free memory of its
//    heap, not purged by jemalloc's decay: its decay purged pages within the first seconds of
//    a process whatever the decay time, and every page then faulted in again (a 16 MiB
//    malloc+write+free round 75 us, 126 us when it purged). The heap purges instead when
//    1 GiB was freed since its last purge and 10 s have passed (note_freed()); purge() at
//    once. No lazy (muzzy) stage: MADV_FREE means nothing to a shared file mapping.
__attribute__((visibility("hidden"))) const char *shaddr_je_malloc_conf =
    "tcache:true,tcache_max:8388608,narenas:1,background_thread:false,retain:true,"
    "oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:0";
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
std::atomic<std::size_t> g_withdrawn{0};
std::atomic<const NextAllocator *> g_next{nullptr};
std::atomic<std::size_t (*)(void *)> g_libc_usable_size{nullptr};
std::atomic<bool> g_started{false};
extern pthread_key_t g_grow_key;
void init_grow_blocks(std::size_t range);
void drop_grow_block(void *p);
void drop_slot(void *);

// The kernel's calls themselves: this library defines madvise and mremap (memops.cc), and its
// own calls must not come back through them.
int raw_madvise(void *addr, std::size_t len, int advice) {
  return static_cast<int>(syscall(SYS_madvise, addr, len, advice));
}
void *raw_mremap(void *old, std::size_t old_len, std::size_t new_len, int flags, void *new_addr) {
  return reinterpret_cast<void *>(syscall(SYS_mremap, old, old_len, new_len, flags, new_addr));
}

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
using detail::raw_madvise;
using detail::raw_mremap;

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;
constexpr std::size_t kRangeAlign = 2 * MiB;   // base alignment (room for huge pages)
constexpr std::size_t kGrowStep = 32 * MiB;    // the file and its mapping grow by this much
constexpr std::size_t kDefaultMaxCap = 64 * GiB;
constexpr std::size_t kRetainGrowCap = 128 * MiB;  // largest extent jemalloc asks for beyond a request
constexpr std::size_t kPurgeAfterBytes = 1 * GiB;  // note_freed(): freed since the last purge
constexpr std::int64_t kPurgeEverySeconds = 10;    // and at most this often
constexpr std::size_t kFreedFlushBytes = 64 * MiB;  // a thread's frees counted together
constexpr std::size_t kGrowBlockMax = 64 * MiB;     // heap_internal.h, growth blocks
constexpr std::size_t kTcacheMax = 8 * MiB;         // tcache_max in shaddr_je_malloc_conf
// A growth block is lent to a new allocation (engine_lend_grow_block) only while at most this
// much of it was ever asked for: what a block lent and then kept can hold resident.
constexpr std::size_t kLendMost = 1 * MiB;
constexpr std::size_t kSlotMax = 1 * MiB;  // a thread's slot holds a block below this (engine_slot_put)

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
  std::uintptr_t data = 0;                 // first byte after the withdrawn table
  std::uint64_t *table = nullptr;          // the withdrawn table (heap.h), at base
  unsigned lg_page = 12;
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

// Calls @line(text, len) for each line (ended by @sep) of the file at @path, read with system
// calls into a stack buffer (no malloc here); a line longer than the buffer comes in pieces.
template <class F>
bool for_each_line(const char *path, F line, char sep = '\n') {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  std::size_t have = 0;
  for (;;) {
    const ssize_t r = read(fd, buf + have, sizeof buf - have);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    have += (std::size_t)r;
    char *s = buf;
    for (char *nl; (nl = static_cast<char *>(std::memchr(s, sep, (std::size_t)(buf + have - s))));
         s = nl + 1)
      line(s, (std::size_t)(nl - s));
    have = (std::size_t)(buf + have - s);
    if (have == sizeof buf) {
      line(buf, have);
      have = 0;
    } else {
      std::memmove(buf, s, have);
    }
  }
  if (have) line(buf, have);
  close(fd);
  return true;
}

bool starts_with(const char *s, std::size_t n, const char *prefix) {
  const std::size_t k = std::strlen(prefix);
  return n >= k && !std::memcmp(s, prefix, k);
}


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
// getenv(@name), or, while environ is not set yet (a malloc in a preinit_array function runs
// before libc's initialisation), the value in /proc/self/environ, copied to @buf.
const char *env(const char *name, char (&buf)[128]) {
  if (environ) return std::getenv(name);
  const std::size_t k = std::strlen(name);
  const char *found = nullptr;
  for_each_line("/proc/self/environ", [&](const char *s, std::size_t n) {
    if (n <= k || s[k] != '=' || std::memcmp(s, name, k)) return;
    const std::size_t v = std::min(n - k - 1, sizeof buf - 1);
    std::memcpy(buf, s + k + 1, v);
    buf[v] = '\0';
    found = buf;
  }, '\0');
  return found;
}

Config config_from_env() {
  Config c;
  char buf[4][128];
  const char *mode = env("SHADDR_HEAP", buf[0]);
  const char *min = env("SHADDR_HEAP_MIN", buf[1]);
  const char *max = env("SHADDR_HEAP_MAX", buf[2]);
  const char *verbose = env("SHADDR_VERBOSE", buf[3]);
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
  if (g.anonymous) return raw_madvise(addr, len, MADV_DONTNEED) != 0;
  return fallocate(g.fd.load(std::memory_order_relaxed), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                   (off_t)(reinterpret_cast<std::uintptr_t>(addr) - g.base), (off_t)len) != 0;
}

// ---- the withdrawn table (heap.h) --------------------------------------------------------

std::uint64_t *table_bits() { return g.table + kWithdrawnHeaderWords; }

bool page_withdrawn(std::size_t page) {
  return __atomic_load_n(&table_bits()[page / 64], __ATOMIC_RELAXED) >> (page % 64) & 1;
}

// The first page in [page, end) whose bit is not @bit (end if none).
std::size_t run_end(std::size_t page, std::size_t end, bool bit) {
  while (page < end) {
    std::uint64_t w = __atomic_load_n(&table_bits()[page / 64], __ATOMIC_RELAXED);
    if (bit) w = ~w;
    w &= ~std::uint64_t{0} << (page % 64);  // bits below page do not count
    if (w) return std::min<std::size_t>(end, page / 64 * 64 + (std::size_t)__builtin_ctzll(w));
    page = (page / 64 + 1) * 64;
  }
  return end;
}

// Sets (or clears) the bits of pages [first, end) and the counts. Called with g.mu held.
void mark(std::size_t first, std::size_t end, bool withdrawn) {
  std::int64_t changed = 0;
  for (std::size_t p = first; p < end;) {
    std::size_t hi = std::min<std::size_t>(end, (p / 64 + 1) * 64);
    const std::uint64_t mask = withdrawn_bits(p % 64, (hi - 1) % 64);
    std::uint64_t *w = &table_bits()[p / 64];
    std::uint64_t old = withdrawn ? __atomic_fetch_or(w, mask, __ATOMIC_RELAXED)
                                  : __atomic_fetch_and(w, ~mask, __ATOMIC_RELAXED);
    changed += __builtin_popcountll((withdrawn ? ~old : old) & mask);
    p = hi;
  }
  if (!changed) return;
  if (withdrawn) {
    detail::g_withdrawn.fetch_add((std::size_t)changed, std::memory_order_relaxed);
    __atomic_fetch_add(&g.table[1], (std::uint64_t)changed, __ATOMIC_RELEASE);
  } else {
    detail::g_withdrawn.fetch_sub((std::size_t)changed, std::memory_order_relaxed);
    __atomic_fetch_sub(&g.table[1], (std::uint64_t)changed, __ATOMIC_RELEASE);
  }
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
  if (r) detail::restore_range(start, start + size);  // pages a program withdrew beyond its blocks
  if (r) {
    *zero = true;
    *commit = true;
  }
  return r;
}

bool hook_dalloc(extent_hooks_t *, void *, size_t, bool, unsigned) { return true; }

void hook_destroy(extent_hooks_t *, void *addr, size_t size, bool, unsigned) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  detail::restore_range(a, a + size);
  punch(addr, size);
}

// The whole range is always mapped read-write: there is nothing to commit, and decommit is
// declined, so jemalloc purges instead.
bool hook_commit(extent_hooks_t *, void *, size_t, size_t, size_t, unsigned) { return false; }
bool hook_decommit(extent_hooks_t *, void *, size_t, size_t, size_t, unsigned) { return true; }

// Forced purge: the pages leave the file (the next touch reads zeros), RSS drops, and every
// peer's mapping of them goes too.
// Withdrawn pages (memops.cc) get the file back first: purged pages must read as zeros.
bool hook_purge_forced(extent_hooks_t *, void *addr, size_t, size_t offset, size_t length, unsigned) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr) + offset;
  detail::restore_range(a, a + length);
  return punch(reinterpret_cast<void *>(a), length);
}

bool hook_split(extent_hooks_t *, void *, size_t, size_t, size_t, bool, unsigned) { return false; }
bool hook_merge(extent_hooks_t *, void *, size_t, void *, size_t, bool, unsigned) { return false; }

extent_hooks_t g_hooks = {
    hook_alloc,   hook_dalloc,        hook_destroy,
    hook_commit,  hook_decommit,      nullptr /* purge_lazy: no MADV_FREE on shared files */,
    hook_purge_forced, hook_split,    hook_merge,
};

// ---- fork -------------------------------------------------------------------------------

// Copies the data of file offsets [from, len) of @src (holes skipped: they stay as the
// destination has them) into @dst_fd at the same offsets or (dst_fd < 0) into memory at
// @dst_mem, which stands for offset @from.
bool copy_heap(int src, int dst_fd, char *dst_mem, std::size_t len, std::size_t from = 0) {
  off_t pos = (off_t)from;
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
        n = pread(src, dst_mem + (in - (off_t)from), (std::size_t)(hole - in), in);
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

// ---- withdrawing pages (detail::withdraw_range) ------------------------------------------

// The parts of a range that are mlock()ed (VM_LOCKED): a withdraw puts new pages there, which
// the kernel does not lock, so it locks them again.
struct LockedSpans {
  static constexpr int kMax = 16;  // beyond: the last span grows to cover the rest
  std::uintptr_t a[kMax], e[kMax];
  int n = 0;
};

// /proc/self/smaps's "lo" flag for the mappings within [a, e); read only when
// /proc/self/status counts locked memory at all (VmLck), as smaps walks every mapping.
void find_locked(std::uintptr_t a, std::uintptr_t e, LockedSpans *out) {
  bool any = false;
  for_each_line("/proc/self/status", [&](const char *s, std::size_t n) {
    if (starts_with(s, n, "VmLck:"))
      for (std::size_t i = 6; i < n; i++) any |= s[i] >= '1' && s[i] <= '9';
  });
  if (!any) return;
  std::uintptr_t lo = 0, hi = 0;
  for_each_line("/proc/self/smaps", [&](const char *s, std::size_t n) {
    if (n && ((s[0] >= '0' && s[0] <= '9') || (s[0] >= 'a' && s[0] <= 'f'))) {  // "lo-hi perms ..."
      char *dash;
      lo = std::strtoull(s, &dash, 16);
      hi = *dash == '-' ? std::strtoull(dash + 1, nullptr, 16) : lo;
      return;
    }
    if (!starts_with(s, n, "VmFlags:") || hi <= a || lo >= e) return;
    bool locked = false;
    for (std::size_t i = 8; i + 2 <= n; i += 3) locked |= s[i + 1] == 'l' && s[i + 2] == 'o';
    if (!locked) return;
    const std::uintptr_t from = lo > a ? lo : a, to = hi < e ? hi : e;
    if (out->n && out->e[out->n - 1] == from)
      out->e[out->n - 1] = to;
    else if (out->n == LockedSpans::kMax)
      out->e[out->n - 1] = to;
    else
      out->a[out->n] = from, out->e[out->n++] = to;
  });
}

void relock(const LockedSpans &locked, std::uintptr_t a, std::uintptr_t e) {
  for (int i = 0; i < locked.n; i++) {
    const std::uintptr_t from = locked.a[i] > a ? locked.a[i] : a, to = locked.e[i] < e ? locked.e[i] : e;
    if (from < to) mlock(reinterpret_cast<void *>(from), to - from);
  }
}

// The pages of [at, at + len), a private mapping of the heap file, that were written since it
// was mapped (anonymous copies now, or swapped out: /proc/self/pagemap's bits 61-63), copied
// to @dst. false if pagemap cannot be read.
bool copy_written(const char *at, char *dst, std::size_t len) {
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const std::size_t ps = std::size_t{1} << g.lg_page, pages = len >> g.lg_page;
  const std::size_t first = reinterpret_cast<std::uintptr_t>(at) >> g.lg_page;
  std::uint64_t ent[512];
  bool ok = true;
  for (std::size_t i = 0; i < pages && ok;) {
    const std::size_t want = std::min<std::size_t>(pages - i, sizeof ent / sizeof ent[0]);
    const ssize_t r = pread(fd, ent, want * 8, (off_t)((first + i) * 8));
    if (r <= 0 || r % 8) {
      ok = false;
      break;
    }
    for (std::size_t j = 0; j < (std::size_t)r / 8; j++) {
      const bool present = ent[j] >> 63 & 1, swapped = ent[j] >> 62 & 1, file = ent[j] >> 61 & 1;
      if ((present && !file) || swapped) std::memcpy(dst + (i + j) * ps, at + (i + j) * ps, ps);
    }
    i += (std::size_t)r / 8;
  }
  close(fd);
  return ok;
}

// In the child, before anything else runs: the mapping still shows the parent's file.
// Give the child a file of its own with the same contents, mapped at the same place.
// Puts the child's copy in place over [base, base + len): @fd's pages mapped, or (fd < 0) the
// same range of @tmp moved there. Withdrawn pages (memops.cc) are left as they are: they are
// private memory, which fork() already gave the child as the kernel does (copy on write,
// MADV_WIPEONFORK, MADV_DONTFORK, protections).
bool place_copy(int fd, char *tmp, std::size_t len) {
  const std::size_t pages = len >> g.lg_page;
  for (std::size_t p = 0; p < pages;) {
    if (detail::g_withdrawn.load(std::memory_order_relaxed) && page_withdrawn(p)) {
      p = run_end(p, pages, true);
      continue;
    }
    const std::size_t q = detail::g_withdrawn.load(std::memory_order_relaxed) ? run_end(p, pages, false) : pages;
    const std::size_t off = p << g.lg_page, n = (q - p) << g.lg_page;
    void *at = reinterpret_cast<void *>(g.base + off);
    if (fd >= 0 ? mmap(at, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)off) == MAP_FAILED
                : raw_mremap(tmp + off, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED)
      return false;
    p = q;
  }
  return true;
}

void child_private_copy() {
  std::size_t len = g.mapped_end.load(std::memory_order_relaxed) - g.base;
  int old = g.fd.load(std::memory_order_relaxed);
  int nfd = memfd_create("shaddr-heap", MFD_CLOEXEC);
  if (nfd >= 0 && ftruncate(nfd, (off_t)len) == 0 && copy_heap(old, nfd, nullptr, len) &&
      place_copy(nfd, nullptr, len)) {
    close(old);
    g.fd.store(nfd, std::memory_order_relaxed);
    return;
  }
  int e = errno;
  if (nfd >= 0) close(nfd);
  // No memfd: private anonymous memory, moved into place in one step.
  void *tmp = len ? mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : nullptr;
  if (len == 0 || (tmp != MAP_FAILED && copy_heap(old, -1, static_cast<char *>(tmp), len) &&
                   place_copy(-1, static_cast<char *>(tmp), len))) {
    if (len) munmap(tmp, len);  // what was not moved: the withdrawn pages' holes
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

// Whether the object at @path is glibc's libc.so.
[[maybe_unused]] bool is_libc(const char *path) {
  const char *slash = std::strrchr(path, '/');
  return !std::strncmp(slash ? slash + 1 : path, "libc.so", 7);
}

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
  if (is_libc(where))
    set_reason("off: glibc's malloc comes before libshaddr-heap's in the symbol lookup order: "
               "libshaddr-heap must be in LD_PRELOAD itself (or linked into the executable), not "
               "a dependency of a preloaded library");
  else
    set_reason("off: the program brings its own malloc (%.200s), so the heap steps aside", where);
  return false;
#endif
}

// An allocator the program brings after this library in the lookup order (a libjemalloc it
// links, a tcmalloc preloaded after us): its malloc family, or nullptr when the next malloc is
// glibc's. Its memory must go back to it: had this library sent everything else to glibc, a
// block from its extended API (mallocx) freed with free() would reach glibc's free.
// Looked up before anything here allocates, so that nothing this library routes to it was
// taken from glibc.
const detail::NextAllocator *next_allocator(const char **who) {
#ifdef HEAP_UNDER_SANITIZER
  (void)who;
  return nullptr;
#else
  void *m = dlsym(RTLD_NEXT, "malloc");
  auto usable = reinterpret_cast<std::size_t (*)(void *)>(dlsym(RTLD_NEXT, "malloc_usable_size"));
  Dl_info di{};
  if (!m || !dladdr(m, &di) || !di.dli_fname) return nullptr;
  if (is_libc(di.dli_fname)) {
    detail::g_libc_usable_size.store(usable, std::memory_order_relaxed);  // before g_started
    return nullptr;
  }
  static detail::NextAllocator next;
  next.malloc = reinterpret_cast<void *(*)(std::size_t)>(m);
  next.free = reinterpret_cast<void (*)(void *)>(dlsym(RTLD_NEXT, "free"));
  next.calloc = reinterpret_cast<void *(*)(std::size_t, std::size_t)>(dlsym(RTLD_NEXT, "calloc"));
  next.realloc = reinterpret_cast<void *(*)(void *, std::size_t)>(dlsym(RTLD_NEXT, "realloc"));
  next.memalign = reinterpret_cast<void *(*)(std::size_t, std::size_t)>(dlsym(RTLD_NEXT, "memalign"));
  next.usable_size = usable;
  if (!next.free || !next.calloc || !next.realloc || !next.memalign || !next.usable_size) return nullptr;
  const char *slash = std::strrchr(di.dli_fname, '/');
  *who = slash ? slash + 1 : di.dli_fname;
  return &next;
#endif
}

bool set_arena_size(unsigned arena, const char *what, std::size_t v) {
  char name[64];
  std::snprintf(name, sizeof name, "arena.%u.%s", arena, what);
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
  // The withdrawn table at the start of the file, the allocator's extents after it.
  const std::size_t psz = (std::size_t)sysconf(_SC_PAGESIZE);
  g.lg_page = (unsigned)__builtin_ctzl(psz);
  const std::size_t pages = c.max >> g.lg_page;
  const std::size_t table = align_up((kWithdrawnHeaderWords + (pages + 63) / 64) * 8, psz);
  if (table >= c.max || !map_up_to(base + table)) {
    set_reason("off: cannot map the heap's first %zu bytes (%s)", table, errstr(errno));
    munmap(reinterpret_cast<void *>(base), c.max);
    close(fd);
    g.fd.store(-1, std::memory_order_relaxed);
    return false;
  }
  g.table = reinterpret_cast<std::uint64_t *>(base);
  g.table[0] = kWithdrawnMagic;
  g.table[2] = g.lg_page;
  g.table[3] = pages;
  g.data = g.bump = base + table;

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
  set_arena_size(arena, "retain_grow_limit", grow > kRangeAlign ? grow : kRangeAlign);

  detail::init_grow_blocks(c.max);
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

// The thread that runs init(): its own allocations meanwhile (dlsym's) go to glibc.
__thread bool t_starting __attribute__((tls_model("initial-exec"))) = false;

void init() {
  int expect = kUninit;
  if (!g.phase.compare_exchange_strong(expect, kIniting, std::memory_order_acq_rel)) return;
  t_starting = true;
  int e = errno;
  const char *who = "";
  const detail::NextAllocator *next = next_allocator(&who);
  detail::g_next.store(next, std::memory_order_release);
  detail::g_started.store(true, std::memory_order_release);  // after g_next: started() acquires
  // Before jemalloc's first call, so that our handlers are registered before jemalloc's.
  bool handlers = pthread_atfork(fork_prepare, fork_parent, fork_child) == 0;
  Config c = config_from_env();
  bool on = false;
  if (next)
    set_reason("off: the program brings its own malloc (%.200s, after libshaddr-heap in the "
               "lookup order), which keeps every allocation", who);
  else
    on = handlers ? start(c) : (set_reason("off: pthread_atfork failed"), false);
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

void start() {
  init();
  if (t_starting) return;
  // Another thread is looking the allocators up (only possible before the first malloc has
  // returned, i.e. when threads exist before it): its answer decides where this block goes.
  while (!g_started.load(std::memory_order_acquire)) sched_yield();
}

void lock_pages() { pthread_mutex_lock(&g.mu); }
void unlock_pages() { pthread_mutex_unlock(&g.mu); }

void *engine_alloc(std::size_t size, std::size_t align, bool zero) {
  if (!is_on()) return nullptr;
  // Beyond the thread caches, page aligned as glibc's: otherwise jemalloc starts each such
  // block at a random cache line of its first page (its build's cache_oblivious, not a
  // setting), so a block that came back from the arena put a program's first bytes of each
  // page on other cache lines than its last round did (a malloc + write per page + free round
  // of 16 MiB: 3x glibc's time). Cached blocks keep their place; an aligned request would
  // bypass the cache.
  if (size > kTcacheMax && align < (std::size_t{1} << g.lg_page)) align = std::size_t{1} << g.lg_page;
  int flags = g.flags | (zero ? MALLOCX_ZERO : 0) |
              (align > 1 ? MALLOCX_LG_ALIGN(__builtin_ctzl(align)) : 0);
  int e = errno;
  void *p = shaddr_je_mallocx(size ? size : 1, flags);
  errno = e;
  return p;
}

// Past the thread cache: the block left behind goes back to the arena, where it merges with
// its free neighbours, instead of staying in the cache as an allocated island that keeps the
// next growth from happening in place (a realloc doubling 16 KiB to 16 MiB moved and copied
// several times per round, 9 ms against glibc's 0.1 ms).
void *engine_realloc(void *p, std::size_t size) {
  int e = errno;
  void *q = shaddr_je_rallocx(p, size ? size : 1, g.flags | MALLOCX_TCACHE_NONE);
  errno = e;
  return q;
}

bool engine_grow_in_place(void *p, std::size_t size, std::size_t extra) {
  int e = errno;
  std::size_t got = shaddr_je_xallocx(p, size, extra, g.flags);
  errno = e;
  return got >= size;
}

void engine_free(void *p) { shaddr_je_dallocx(p, 0); }
void engine_free_sized(void *p, std::size_t usable) { shaddr_je_sdallocx(p, usable, 0); }

// The thread's last freed block below kSlotMax (its slot): handed to its next allocation of
// a size within the same jemalloc size class or the one below, without jemalloc. jemalloc's
// own thread cache costs more per call for these "large" blocks (no fast path, and its
// bookkeeping events every 64 KiB allocated: every fourth malloc of 16 KiB); glibc's malloc and
// free of 16 KiB take half the time. One block per thread: what glibc keeps anyway.
pthread_key_t g_slot_key;  // for its destructor only: the thread's slot back to the arena
static std::atomic<bool> g_slot_on{false};
__thread void *t_slot __attribute__((tls_model("initial-exec"))) = nullptr;
__thread std::size_t t_slot_size __attribute__((tls_model("initial-exec"))) = 0;
__thread bool t_slot_keyed __attribute__((tls_model("initial-exec"))) = false;

void drop_slot(void *) {
  if (!t_slot) return;
  engine_free_sized(t_slot, t_slot_size);
  note_freed(t_slot_size);
  t_slot = nullptr;
}

void *engine_slot_take(std::size_t n) {
  void *p = t_slot;
  // Within one size class: jemalloc's classes are a quarter of a power of two apart.
  if (!p || t_slot_size < n || t_slot_size - n > n / 4) return nullptr;
  t_slot = nullptr;
  return p;
}

bool engine_slot_put(void *p, std::size_t usable) {
  if (usable >= kSlotMax) return false;
  if (!t_slot_keyed) {  // once per thread: so that its exit gives the slot back
    if (!g_slot_on.load(std::memory_order_acquire) || pthread_setspecific(g_slot_key, &t_slot) != 0)
      return false;
    t_slot_keyed = true;
  }
  drop_slot(nullptr);
  t_slot = p;
  t_slot_size = usable;
  return true;
}

pthread_key_t g_grow_key;  // the thread's cached growth block (its destructor frees it)
static std::atomic<std::size_t> g_grow_size{0};  // set once the key exists
static std::atomic<std::size_t> g_grow_live{0};  // growth blocks made and not freed to the arena
static std::size_t g_grow_cap = 0;               // at most this many: the range stays for the rest

// How far this thread's growth blocks were grown, which bounds the pages of them that can be
// resident (lending, below): the block it took last and the most it was asked to hold, and
// that of the block in its cache (SIZE_MAX: none cached, or not known: another thread grew it).
struct Taken {
  void *block;
  std::size_t most;
};
__thread Taken t_taken __attribute__((tls_model("initial-exec"))) = {nullptr, 0};
__thread std::size_t t_cached_most __attribute__((tls_model("initial-exec"))) = SIZE_MAX;

void drop_grow_block(void *p) {
  if (!p) return;
  engine_free(p);
  std::size_t n = g_grow_live.load(std::memory_order_relaxed);
  while (n && !g_grow_live.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
  }
}

// At start(): 64 MiB, or 1/64 of a smaller range; at most 1/16 of the range in such blocks.
void init_grow_blocks(std::size_t range) {
  std::size_t size = kGrowBlockMax;
  while (size > kRangeAlign && size > range / 64) size /= 2;
  if (pthread_key_create(&g_slot_key, drop_slot) == 0) g_slot_on.store(true, std::memory_order_release);
  if (pthread_key_create(&g_grow_key, drop_grow_block) != 0) return;
  g_grow_cap = std::max<std::size_t>(1, range / 16 / size);
  g_grow_size.store(size, std::memory_order_release);
}

std::size_t grow_block_size() { return g_grow_size.load(std::memory_order_acquire); }

// The thread's cached block, taken for a buffer of @n bytes (nullptr if none).
static void *take_cached(std::size_t n) {
  void *b = pthread_getspecific(g_grow_key);
  if (!b) return nullptr;
  pthread_setspecific(g_grow_key, nullptr);
  t_taken = {b, std::max(n, t_cached_most)};
  t_cached_most = SIZE_MAX;
  return b;
}

void *engine_grow_block(std::size_t n) {
  const std::size_t size = grow_block_size();
  if (!size || n > size) return nullptr;
  if (void *b = take_cached(n)) return b;
  if (g_grow_live.fetch_add(1, std::memory_order_relaxed) >= g_grow_cap) {
    g_grow_live.fetch_sub(1, std::memory_order_relaxed);
    return nullptr;
  }
  void *b = engine_alloc(size, 0, false);
  if (!b) g_grow_live.fetch_sub(1, std::memory_order_relaxed);
  t_taken = {b, n};
  return b;
}

void *engine_lend_grow_block(std::size_t n) {
  // The first test is one thread-local load: nothing cached (or not lendable) is the rule.
  if (t_cached_most > kLendMost || n > kLendMost ||
      g_grow_live.load(std::memory_order_relaxed) > g_grow_cap / 2)
    return nullptr;
  return take_cached(n);
}

void engine_grow_block_resized(void *p, std::size_t n) {
  if (p == t_taken.block && n > t_taken.most) t_taken.most = n;
}

bool engine_release_grow_block(void *p, std::size_t usable) {
  const std::size_t size = grow_block_size();
  if (!size || usable != size) return false;
  const std::size_t most = p == t_taken.block ? t_taken.most : SIZE_MAX;
  if (p == t_taken.block) t_taken.block = nullptr;
  if (pthread_getspecific(g_grow_key) || pthread_setspecific(g_grow_key, p) != 0)
    drop_grow_block(p);
  else
    t_cached_most = most;
  return true;
}

void note_freed(std::size_t n) {
  // Counted per thread first, so that frees on several threads do not share a cache line.
  static __thread std::size_t mine __attribute__((tls_model("initial-exec"))) = 0;
  if ((mine += n) < kFreedFlushBytes) return;
  n = mine;
  mine = 0;
  static std::atomic<std::size_t> freed{0};
  static std::atomic<std::int64_t> last_s{0};
  if (freed.fetch_add(n, std::memory_order_relaxed) + n < kPurgeAfterBytes) return;
  freed.store(0, std::memory_order_relaxed);
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  std::int64_t last = last_s.load(std::memory_order_relaxed);
  if (last == 0) {  // the clock starts at the first 1 GiB freed
    last_s.compare_exchange_strong(last, ts.tv_sec, std::memory_order_relaxed);
    return;
  }
  if (ts.tv_sec - last < kPurgeEverySeconds ||
      !last_s.compare_exchange_strong(last, ts.tv_sec, std::memory_order_relaxed))
    return;
  char name[64];
  std::snprintf(name, sizeof name, "arena.%u.purge", g.arena);
  int e = errno;
  shaddr_je_mallctl(name, nullptr, nullptr, nullptr, 0);
  errno = e;
}

std::size_t engine_usable_size(const void *p) { return shaddr_je_sallocx(p, 0); }

std::uintptr_t page_run(std::uintptr_t a, std::uintptr_t e, Pages *kind) {
  const std::uintptr_t lo = g.data, hi = g.mapped_end.load(std::memory_order_acquire);
  if (!is_on() || g.anonymous || a >= hi || e <= lo) {
    *kind = Pages::other;
    return e;
  }
  if (a < lo) {
    *kind = Pages::other;
    return lo;
  }
  const std::size_t page = (a - g.base) >> g.lg_page;
  const std::size_t last = (std::min(e, hi) - g.base + (std::size_t{1} << g.lg_page) - 1) >> g.lg_page;
  const bool w = detail::g_withdrawn.load(std::memory_order_relaxed) && page_withdrawn(page);
  *kind = w ? Pages::withdrawn : Pages::shared;
  const std::uintptr_t end = g.base + (run_end(page, last, w) << g.lg_page);
  return std::min(end, e);
}

bool punch_range(std::uintptr_t a, std::uintptr_t e) { return !punch(reinterpret_cast<void *>(a), e - a); }

bool withdraw_range(std::uintptr_t a, std::uintptr_t e) {
  bool ok = true;
  const std::uintptr_t hi = g.mapped_end.load(std::memory_order_relaxed);
  a = a < g.data ? g.data : a;
  e = e > hi ? hi : e;
  if (a >= e) return true;
  const int fd = g.fd.load(std::memory_order_relaxed);
  LockedSpans locked;
  find_locked(a, e, &locked);
  for (std::size_t p = (a - g.base) >> g.lg_page, end = (e - g.base) >> g.lg_page; p < end;) {
    if (page_withdrawn(p)) {
      p = run_end(p, end, true);
      continue;
    }
    const std::size_t q = run_end(p, end, false);
    const std::size_t off = p << g.lg_page, len = (q - p) << g.lg_page;
    char *at = reinterpret_cast<char *>(g.base + off);
    void *tmp = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (tmp == MAP_FAILED) {
      ok = false;
      break;
    }
    mark(p, q, true);  // peers stop reading the file's copy first
    // 1. The file mapped privately over the range, in one step: every byte reads the same, and
    //    from now on a write (this thread's or another's) goes to a private copy of its page,
    //    so the file's bytes stay as they are.
    if (mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, (off_t)off) == MAP_FAILED) {
      mark(p, q, false);
      munmap(tmp, len);
      ok = false;
      break;
    }
    // 2. Those bytes into anonymous memory (holes stay zero), 3. then the pages written since
    //    step 1 from the range itself, 4. and that memory moved into place: only a write made
    //    during steps 3-4 can be lost.
    char *t = static_cast<char *>(tmp);
    if (!copy_heap(fd, -1, t, off + len, off) || !copy_written(at, t, len)) std::memcpy(t, at, len);
    if (raw_mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
      // Still withdrawn, as the private file mapping (complete): its file pages must stay.
      munmap(tmp, len);
      ok = false;
      break;
    }
    punch(at, len);  // the file's copy goes: a peer still mapping it reads zeros
    relock(locked, reinterpret_cast<std::uintptr_t>(at), reinterpret_cast<std::uintptr_t>(at) + len);
    p = q;
  }
  if (!ok) errno = ENOMEM;
  return ok;
}

void restore_range(std::uintptr_t a, std::uintptr_t e) {
  const std::uintptr_t hi = g.mapped_end.load(std::memory_order_acquire);
  const std::size_t psz = std::size_t{1} << g.lg_page;
  a = a < g.data ? g.data : a;
  e = e > hi ? hi : e;
  if (a >= e || !block_withdrawn(reinterpret_cast<void *>(a), e - a)) return;
  pthread_mutex_lock(&g.mu);
  const int fd = g.fd.load(std::memory_order_relaxed);
  for (std::size_t p = (a - g.base + psz - 1) >> g.lg_page, end = (e - g.base) >> g.lg_page; a < e && p < end;) {
    if (!page_withdrawn(p)) {
      p = run_end(p, end, false);
      continue;
    }
    const std::size_t q = run_end(p, end, true);
    const std::size_t off = p << g.lg_page, len = (q - p) << g.lg_page;
    void *at = reinterpret_cast<void *>(g.base + off);
    // The file again (a hole there: zeros); failing that, fresh private zeros that stay withdrawn.
    punch(at, len);
    const int anon = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE;
    if (g.anonymous ? mmap(at, len, PROT_READ | PROT_WRITE, anon, -1, 0) != MAP_FAILED
                    : mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)off) != MAP_FAILED)
      mark(p, q, false);
    else
      mmap(at, len, PROT_READ | PROT_WRITE, anon, -1, 0);
    p = q;
  }
  pthread_mutex_unlock(&g.mu);
}

bool block_withdrawn(const void *p, std::size_t len) {
  return g_withdrawn.load(std::memory_order_relaxed) &&
         range_withdrawn(g.table, reinterpret_cast<std::uintptr_t>(p) - g.base, len);
}

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
  if (detail::g_withdrawn.load(std::memory_order_relaxed) && range_withdrawn(g.table, a - g.base, len))
    return std::nullopt;
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
  if (detail::grow_block_size()) {
    detail::drop_grow_block(pthread_getspecific(detail::g_grow_key));
    pthread_setspecific(detail::g_grow_key, nullptr);
    detail::t_cached_most = SIZE_MAX;
  }
  detail::drop_slot(nullptr);
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
