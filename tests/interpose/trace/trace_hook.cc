// SPDX-License-Identifier: MIT
// The call recorder of the traced builds (tests/interpose/CMakeLists.txt: the interposer and
// libshaddr compiled with -finstrument-functions, for tests only). The compiler calls
// __cyg_profile_func_enter on entry to every function of those sources, inline ones too (with
// the address of their out-of-line copy), so the record is the whole path, headers included.
//
// Off unless SHADDR_TRACE_CALLS=<path> is set. Then it counts the entries into one function of
// this library, SHADDR_TRACE_ENTRY (default MPI_Bcast), and records every function the calling
// thread enters from its SHADDR_TRACE_CALL-th entry (default 3) up to the next one: one call's
// worth of code when the calls are alike. The record, each distinct function once with its
// offset in this library and how often it was entered, goes to <path>.<rank> (PMI_RANK or
// OMPI_COMM_WORLD_RANK, else the pid); tests/interpose/check-bcast-path names the functions
// with addr2line. Nothing here is compiled with the instrumentation, and nothing it calls is.
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define NOTRACE __attribute__((no_instrument_function))

namespace {

// Distinct functions of one window: about a hundred today; a full table is reported, not hidden.
constexpr int kBits = 12;
constexpr size_t kSlots = size_t{1} << kBits;
constexpr size_t kMaxUsed = kSlots * 3 / 4;

struct Slot {
  uintptr_t fn;
  uint64_t calls;
  uint32_t order;
};

struct Recorder {
  bool armed;      // set, and the entry function found
  bool recording;  // inside the window
  uintptr_t entry;
  long call;       // the entry's ordinal that opens the window
  long entries;    // entries into it so far
  pthread_t owner; // the thread that opened the window
  uintptr_t base;  // this library's load address
  size_t used;
  bool overflow;
  char path[4096];
  char object[4096];
  char entry_name[256];
  Slot slots[kSlots];
};

Recorder g;

NOTRACE void record(uintptr_t fn) {
  size_t i = static_cast<size_t>((fn >> 4) * 0x9e3779b97f4a7c15ull) >> (64 - kBits);
  for (;; i = (i + 1) & (kSlots - 1)) {
    Slot &s = g.slots[i];
    if (s.fn == fn) {
      s.calls++;
      return;
    }
    if (s.fn == 0) break;
  }
  if (g.used == kMaxUsed) {
    g.overflow = true;
    return;
  }
  g.slots[i] = Slot{fn, 1, static_cast<uint32_t>(g.used++)};
}

__attribute__((format(printf, 2, 3))) NOTRACE void put(int fd, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  for (int off = 0; n > 0 && off < n;) {
    const ssize_t w = write(fd, buf + off, static_cast<size_t>(n - off));
    if (w <= 0) return;
    off += static_cast<int>(w);
  }
}

// The record, first-entered first. Called once: when the window closes, else at exit.
NOTRACE void flush(bool complete) {
  g.armed = false;
  g.recording = false;
  const char *rank = std::getenv("PMI_RANK");
  if (!rank) rank = std::getenv("OMPI_COMM_WORLD_RANK");
  char file[4200];
  if (rank)
    std::snprintf(file, sizeof file, "%s.%s", g.path, rank);
  else
    std::snprintf(file, sizeof file, "%s.pid%d", g.path, static_cast<int>(getpid()));
  const int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "shaddr-trace: cannot write %s\n", file);
    return;
  }
  put(fd, "object %s\n", g.object);
  put(fd, "entry %s call %ld entries %ld complete %d overflow %d\n", g.entry_name, g.call,
      g.entries, complete ? 1 : 0, g.overflow ? 1 : 0);
  for (uint32_t k = 0; k < g.used; k++)
    for (const Slot &s : g.slots)
      if (s.fn && s.order == k) put(fd, "%zx %llu\n", static_cast<size_t>(s.fn - g.base),
                                    static_cast<unsigned long long>(s.calls));
  close(fd);
}

__attribute__((constructor)) NOTRACE void arm() {
  const char *path = std::getenv("SHADDR_TRACE_CALLS");
  if (!path || !*path) return;
  const char *name = std::getenv("SHADDR_TRACE_ENTRY");
  if (!name || !*name) name = "MPI_Bcast";
  const char *call = std::getenv("SHADDR_TRACE_CALL");
  g.call = call && *call ? std::atol(call) : 3;
  if (g.call < 1) {
    std::fprintf(stderr, "shaddr-trace: SHADDR_TRACE_CALL=%s: not a call's ordinal\n", call);
    return;
  }
  std::snprintf(g.path, sizeof g.path, "%s", path);
  std::snprintf(g.entry_name, sizeof g.entry_name, "%s", name);
  // The entry is looked up in this library itself, not the process's first definition.
  Dl_info self{};
  if (!dladdr(reinterpret_cast<void *>(&arm), &self) || !self.dli_fname) {
    std::fprintf(stderr, "shaddr-trace: dladdr failed on the recorder itself\n");
    return;
  }
  g.base = reinterpret_cast<uintptr_t>(self.dli_fbase);
  std::snprintf(g.object, sizeof g.object, "%s", self.dli_fname);
  void *handle = dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  void *entry = handle ? dlsym(handle, name) : nullptr;
  Dl_info where{};
  if (!entry || !dladdr(entry, &where) || where.dli_fbase != self.dli_fbase) {
    std::fprintf(stderr, "shaddr-trace: %s is not a function of %s: nothing traced\n", name,
                 self.dli_fname);
    return;
  }
  g.entry = reinterpret_cast<uintptr_t>(entry);
  g.armed = true;
}

// A window never closed (too few calls) still leaves its record, marked incomplete.
__attribute__((destructor)) NOTRACE void disarm() {
  if (g.armed) flush(false);
}

}  // namespace

extern "C" {

NOTRACE void __cyg_profile_func_enter(void *fn, void * /*call_site*/) {
  if (!g.armed) return;
  const auto f = reinterpret_cast<uintptr_t>(fn);
  if (f == g.entry) {
    ++g.entries;
    if (g.entries == g.call) {
      g.recording = true;
      g.owner = pthread_self();
    } else if (g.recording) {
      flush(true);
      return;
    }
  }
  if (g.recording && pthread_equal(g.owner, pthread_self())) record(f);
}

NOTRACE void __cyg_profile_func_exit(void * /*fn*/, void * /*call_site*/) {}

}  // extern "C"
