// SPDX-License-Identifier: MIT
#include "error.h"

#include <cstring>

#include "shaddr/shaddr.h"

namespace shaddr {
namespace {
thread_local std::string tls_last_error;
}

namespace detail {
constinit thread_local bool t_error_set = false;
void clear_error_text() {
  tls_last_error.clear();
  t_error_set = false;
}
}  // namespace detail

int fail(int err, const std::string &what) {
  tls_last_error = what + ": " + std::strerror(-err);
  detail::t_error_set = true;
  return err;
}

const char *last_error() { return tls_last_error.c_str(); }

}  // namespace shaddr

extern "C" const char *shaddr_last_error(void) { return shaddr::last_error(); }
