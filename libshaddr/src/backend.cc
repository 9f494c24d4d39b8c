// SPDX-License-Identifier: MIT
#include "backend.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "settings.h"

namespace shaddr {

int Backend::map(int, uintptr_t, size_t, RegCache::Ref *) { return -ENOTSUP; }
void Backend::unmap(int, const RegCache::Ref &) {}
const RegCacheStats *Backend::cache_stats(int) const { return nullptr; }
int Backend::expose(const void *buf, size_t, uintptr_t *remote) {
  *remote = reinterpret_cast<uintptr_t>(buf);
  return 0;
}
void Backend::end_exposures() {}

int agree(const shaddr_host &host, int local_err, std::string *why, const char *what) {
  std::vector<int> all(host.size);
  int err = host.allgather(&local_err, all.data(), sizeof(int), host.ctx);
  if (err) {
    *why = std::string(what) + ": allgather failed: " + std::strerror(-err);
    return err;
  }
  for (int r = 0; r < host.size; r++) {
    if (all[r]) {
      *why = std::string(what) + " failed on rank " + std::to_string(r) + ": " +
             std::strerror(-all[r]);
      return all[r];
    }
  }
  return 0;
}

namespace {

struct Candidate {
  const char *name;
  int (*make)(const shaddr_host &, std::unique_ptr<Backend> *, std::string *);
  const char *merit;
};

// Best first: segments map whole peer address spaces (no slot limit), windows map a few blocks
// at a time, CMA copies with a system call per transfer, shm copies twice.
constexpr Candidate kCandidates[] = {
    {"segment", make_segment_backend, "single-copy mappings of peers' whole address spaces"},
    {"window", make_window_backend, "single-copy mappings through a few window slots"},
    {"cma", make_cma_backend, "single copy by process_vm_readv"},
    {"shm", make_shm_backend, "copy in and out of shared staging"},
};

}  // namespace

namespace {

int select_inner(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *reason) {
  SettingsReader in;
  const std::string want = in.word("SHADDR_BACKEND", "auto");
  if (in.error()) {
    *reason = in.why();
    return in.error();
  }
  std::string why;
  if (want != "auto") {
    for (const Candidate &c : kCandidates) {
      if (want != c.name) continue;
      int err = c.make(host, out, &why);
      *reason = err ? "SHADDR_BACKEND=" + want + ": " + why : want + " (SHADDR_BACKEND)";
      return err;
    }
    *reason = "SHADDR_BACKEND=" + want + ": no such backend (libshaddr bug)";
    return -EINVAL;
  }
  std::string not_chosen;
  int err = -ENOENT;
  for (const Candidate &c : kCandidates) {
    err = c.make(host, out, &why);
    if (!err) {
      *reason = std::string(c.name) + " (best available: " + c.merit + ")";
      if (!not_chosen.empty()) *reason += "; not usable here: " + not_chosen;
      return 0;
    }
    not_chosen += (not_chosen.empty() ? "" : "; ") + std::string(c.name) + " (" + why + ")";
  }
  *reason = "no backend: " + not_chosen;
  return err;
}

}  // namespace

int select_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *reason) {
  if (int err = select_inner(host, out, reason)) return err;
  std::string note;
  if (int err = add_heap_layer(host, out, &note)) {
    *reason = note;
    out->reset();
    return err;
  }
  const std::string inner = *reason;
  if ((*out)->heap_stats())
    *reason = std::string((*out)->name()) + ": " + note + ", everything else by " + inner;
  else
    *reason = inner + "; " + note;
  return 0;
}

}  // namespace shaddr
