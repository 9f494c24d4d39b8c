// SPDX-License-Identifier: MIT
// A rank's children start without shaddr's preload (child_preload.h).
#include <cstdlib>
#include <string>
#include <string_view>

#include "child_preload.h"

namespace shaddr {
namespace {

bool is_shaddr_library(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  for (std::string_view lib : {"libshaddr-heap.so", "libshaddr-mpich.so", "libshaddr-openmpi.so"})
    if (base == lib) return true;
  return false;
}

}  // namespace

std::string preload_without_shaddr(std::string_view preload) {
  std::string out;
  while (!preload.empty()) {
    const size_t end = preload.find_first_of(": \t");
    const std::string_view entry = preload.substr(0, end);
    if (!entry.empty() && !is_shaddr_library(entry)) out.append(out.empty() ? "" : ":").append(entry);
    if (end == std::string_view::npos) break;
    preload.remove_prefix(end + 1);
  }
  return out;
}

void drop_preload_for_children(bool keep) {
  if (keep) return;
  const char *preload = std::getenv("LD_PRELOAD");
  if (!preload) return;
  const std::string kept = preload_without_shaddr(preload);
  if (kept != preload) setenv("LD_PRELOAD", kept.c_str(), 1);
}

}  // namespace shaddr
