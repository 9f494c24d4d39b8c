// SPDX-License-Identifier: MIT
// A temporary file of given text for a test (a tuning file, a calibration), removed with the
// object.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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

}  // namespace shaddr
