// SPDX-License-Identifier: MIT
// Per-thread error reporting for the C API: every failing entry point records why.
#pragma once

#include <string>

namespace shaddr {

// Records "what: strerror(-err)" as the thread's last error and returns err (negative errno).
int fail(int err, const std::string &what);

namespace detail {
extern constinit thread_local bool t_error_set;  // the thread's last error is not empty
void clear_error_text();
}  // namespace detail

// Clears the thread's last error (on entry to a C API call): inline, and a test of a flag
// where the last call did not fail.
inline void clear_error() {
  if (detail::t_error_set) detail::clear_error_text();
}

const char *last_error();

}  // namespace shaddr
