// SPDX-License-Identifier: MIT
#include "error.h"

#include <cstring>

#include "shaddr/shaddr.h"

namespace shaddr {
namespace {
thread_local std::string tls_last_error;
}

int fail(int err, const std::string &what) {
  tls_last_error = what + ": " + std::strerror(-err);
  return err;
}

void clear_error() { tls_last_error.clear(); }

const char *last_error() { return tls_last_error.c_str(); }

}  // namespace shaddr

extern "C" const char *shaddr_last_error(void) { return shaddr::last_error(); }
