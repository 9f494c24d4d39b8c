// SPDX-License-Identifier: MIT
#include "backend.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

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

int select_backend(const shaddr_host &host, std::unique_ptr<Backend> *out, std::string *reason) {
  const char *env = std::getenv("SHADDR_BACKEND");
  const std::string want = env && *env ? env : "auto";
  std::string why;
  int err;
  if (want == "segment") {
    err = make_segment_backend(host, out, &why);
    *reason = err ? "SHADDR_BACKEND=segment: " + why : "segment (SHADDR_BACKEND)";
    return err;
  }
  if (want == "cma") {
    err = make_cma_backend(host, out, &why);
    *reason = err ? "SHADDR_BACKEND=cma: " + why : "cma (SHADDR_BACKEND)";
    return err;
  }
  if (want == "window" || want == "shm") {
    *reason = "SHADDR_BACKEND=" + want + ": this backend is not implemented yet";
    return -ENOSYS;
  }
  if (want != "auto") {
    *reason = "SHADDR_BACKEND=" + want + ": unknown (segment, cma or auto)";
    return -EINVAL;
  }
  err = make_segment_backend(host, out, &why);
  if (!err) {
    *reason = "segment (best available: single-copy mappings of peers' memory)";
    return 0;
  }
  std::string segment_why = why;
  err = make_cma_backend(host, out, &why);
  if (!err) {
    *reason = "cma (segment unavailable: " + segment_why + ")";
    return 0;
  }
  *reason = "no backend: segment unavailable (" + segment_why + "); cma unavailable (" + why + ")";
  return err;
}

}  // namespace shaddr
