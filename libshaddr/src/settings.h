// SPDX-License-Identifier: MIT
// SHADDR_* settings: the environment, then the tuning file (SHADDR_TUNING_FILE), then the
// default. README's settings table lists every name.
#pragma once

#include <cstddef>

namespace shaddr {

// A size: decimal or 0x..., optional K or M suffix. dflt when unset or empty.
size_t env_size(const char *name, size_t dflt);
// True if name is set in the environment or the tuning file.
bool configured(const char *name);
// SHADDR_VERBOSE set and not "0".
bool verbose();

}  // namespace shaddr
