// SPDX-License-Identifier: MIT
// shaddr-info: what the loaded shaddr module reports — ABI version, features, counters; and
// (--settings) every setting as libshaddr declares it; (--calibration-path) where this machine's
// calibration is read from.
#include <getopt.h>
#include <linux/shaddr.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shaddr/coll.h"
#include "shaddr/settings.h"
#include "shaddr/shaddr.h"

namespace {

constexpr const char *kStatsDir = "/sys/class/misc/" SHADDR_DEVICE_NAME "/stats";

void usage(FILE *out) {
  std::fprintf(out,
               "Usage: shaddr-info [--help] [--settings[=markdown]] [--calibration-path]\n"
               "Prints the shaddr kernel module's ABI version and features (from the\n"
               "SHADDR_IOC_VERSION ioctl on $SHADDR_DEVICE or /dev/shaddr) and its counters\n"
               "(%s/*). Exit status 0 if the module answered, 1 otherwise.\n"
               "--settings: every setting (name, kind, default, scope, meaning) instead, and\n"
               "the value this environment gives it; =markdown: docs/settings.md's table.\n"
               "--calibration-path: the file libshaddr reads this machine's calibration from\n"
               "(`off` when $SHADDR_CALIBRATION is off); tools/shaddr-model calibrate writes it.\n",
               kStatsDir);
}

std::string features_string(uint64_t f) {
  static const struct {
    uint64_t bit;
    const char *name;
  } names[] = {{SHADDR_FEAT_WINDOWS, "windows"},
               {SHADDR_FEAT_SEGMENTS, "segments"},
               {SHADDR_FEAT_HUGE_MAP, "huge-map"},
               {SHADDR_FEAT_READ_ONLY_PAGES, "read-only-pages"}};
  std::string s;
  for (const auto &n : names) {
    if (f & n.bit) {
      s += s.empty() ? "" : " ";
      s += n.name;
      f &= ~n.bit;
    }
  }
  if (f) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%sunknown:0x%llx", s.empty() ? "" : " ",
                  static_cast<unsigned long long>(f));
    s += buf;
  }
  return s.empty() ? "(none)" : s;
}

// 1048576 -> "1M": the exact binary suffix, as the settings' grammar reads it.
std::string human(uint64_t v, bool size) {
  if (v == UINT64_MAX) return "2^64-1";
  static const char suffix[] = "KMGT";
  int k = -1;
  while (size && v && v % 1024 == 0 && k < 3) {
    v /= 1024;
    k++;
  }
  return std::to_string(v) + (k >= 0 ? std::string(1, suffix[k]) : "");
}

std::string kind_of(const shaddr_setting_desc &d) {
  std::string kind = d.kind;
  if (*d.type) kind += std::string(", ") + d.type;
  const bool size = !std::strcmp(d.type, "size");
  if (size || !std::strcmp(d.type, "integer"))
    kind += " " + human(d.min_value, size) + "–" + human(d.max_value, size);
  if (*d.choices) {
    std::string words = d.choices;
    for (size_t p = 0; (p = words.find(' ', p)) != std::string::npos; p += 3)
      words.replace(p, 1, "`, `");
    kind += ": `" + words + "`";
  }
  return kind;
}

// The settings table: docs/settings.md's (markdown) or a plain listing with the values in force.
int print_settings(bool markdown) {
  shaddr_setting_desc d{};
  if (markdown) {
    std::printf("| setting | kind | default | scope | meaning |\n|---|---|---|---|---|\n");
    for (unsigned i = 0; shaddr_setting_describe(i, &d) == 0; i++) {
      const std::string kind = kind_of(d);
      std::printf("| `%s` | %s | %s | %s | %s |\n", d.name, kind.c_str(), d.default_value,
                  *d.scope ? d.scope : "—", d.doc);
    }
    return 0;
  }
  for (unsigned i = 0; shaddr_setting_describe(i, &d) == 0; i++) {
    const char *v = std::getenv(d.name);
    std::printf("%s\n  %s; default %s%s%s%s\n  %s\n", d.name, kind_of(d).c_str(),
                d.default_value, *d.scope ? "; " : "", d.scope,
                v ? (std::string("; set here to ") + v).c_str() : "", d.doc);
  }
  return 0;
}

// The calibration's path as libshaddr forms it, so that tools never derive the machine key.
int print_calibration_path() {
  const char *env = std::getenv("SHADDR_CALIBRATION");
  if (env && !std::strcmp(env, "off")) {
    std::printf("off\n");
    return 0;
  }
  std::string path(256, '\0');
  int n = shaddr_calibration_path(path.data(), path.size());
  if (n >= 0 && static_cast<size_t>(n) >= path.size()) {
    path.resize(static_cast<size_t>(n) + 1);
    n = shaddr_calibration_path(path.data(), path.size());
  }
  if (n < 0) {
    std::fprintf(stderr, "shaddr-info: no calibration path: %s\n", std::strerror(-n));
    return 1;
  }
  path.resize(static_cast<size_t>(n));
  std::printf("%s\n", path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  // --settings[=markdown]: the settings table, as text or as the docs' Markdown.
  static const option kLong[] = {{"settings", optional_argument, nullptr, 's'},
                                 {"calibration-path", no_argument, nullptr, 'c'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "h", kLong, nullptr)) != -1;) {
    if (c == 'h') {
      usage(stdout);
      return 0;
    }
    if (c == 'c') return print_calibration_path();
    if (c == 's' && !optarg) return print_settings(false);
    if (c == 's' && !std::strcmp(optarg, "markdown")) return print_settings(true);
    if (c == 's') std::fprintf(stderr, "shaddr-info: --settings=%s: not markdown\n", optarg);
    usage(stderr);
    return 2;
  }
  if (optind < argc) {
    std::fprintf(stderr, "shaddr-info: unknown argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }

  shaddr_module_info info{};
  int err = shaddr_module_query(&info);
  std::printf("device:      %s\n", shaddr_device_path());
  if (err && err != -EPROTO) {
    std::printf("module:      not usable: %s\n", shaddr_last_error());
    return 1;
  }
  std::printf("abi:         %u.%u (libshaddr speaks %u.x)%s\n", info.abi_major, info.abi_minor,
              shaddr_abi_major(), err ? "  MISMATCH" : "");
  std::printf("features:    %s\n", features_string(info.features).c_str());

  std::error_code ec;
  std::filesystem::directory_iterator it(kStatsDir, ec);
  if (ec) {
    std::printf("counters:    unavailable (%s: %s)\n", kStatsDir, ec.message().c_str());
  } else {
    std::printf("counters:    (%s)\n", kStatsDir);
    std::vector<std::filesystem::path> files;
    for (const auto &entry : it) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto &file : files) {
      std::ifstream in(file);
      std::string value;
      std::getline(in, value);
      std::printf("  %-24s %s\n", file.filename().c_str(), value.c_str());
    }
  }
  return err ? 1 : 0;
}
