// SPDX-License-Identifier: MIT
// Test helpers for the model and plan tests: a temporary file of given text (a tuning file, a
// calibration), removed with the object, and a node communicator on forked ranks.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap.h"
#include "shaddr/coll.h"

namespace shaddr {

struct TextFile {
  std::string path;
  explicit TextFile(const std::string &text) {
    char tmpl[] = "/tmp/shaddr-test.XXXXXX";
    const int fd = mkstemp(tmpl);
    path = tmpl;
    FILE *f = fdopen(fd, "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  ~TextFile() { unlink(path.c_str()); }
  TextFile(const TextFile &) = delete;
  TextFile &operator=(const TextFile &) = delete;
};

// Runs fn on n forked ranks over @backend (heap off) with @env set first (rank 0 is this
// process: the variables are removed again afterwards), and @before(rank) run on each rank
// before its communicator is made.
inline int on_ranks(int n, const char *backend, const std::vector<std::pair<std::string, std::string>> &env,
             const std::function<int(shaddr_comm_t *, int)> &fn,
             const std::function<void(int)> &before = {}) {
  const int rc = run_forked(n, [&](const shaddr_host &h) {
    setenv("SHADDR_BACKEND", backend, 1);
    setenv("SHADDR_HEAP", "off", 1);
    for (const auto &[k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    if (before) before(h.rank);
    shaddr_comm_t *c = nullptr;
    if (shaddr_comm_create(&h, &c)) {
      std::fprintf(stderr, "create: %s\n", shaddr_last_error());
      return 100;
    }
    const int rc = fn(c, h.rank);
    shaddr_comm_free(c);
    return rc;
  });
  for (const auto &[k, v] : env) unsetenv(k.c_str());
  return rc;
}

}  // namespace shaddr
