// SPDX-License-Identifier: MIT
// Per-thread error reporting for the C API: every failing entry point records why.
#pragma once

#include <string>

namespace shaddr {

// Records "what: strerror(-err)" as the thread's last error and returns err (negative errno).
int fail(int err, const std::string &what);

// Clears the thread's last error (on entry to a C API call).
void clear_error();

const char *last_error();

}  // namespace shaddr
