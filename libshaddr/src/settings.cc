// SPDX-License-Identifier: MIT
#include "settings.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "hash.h"
#include "shaddr/settings.h"
#include "size_parse.h"

namespace shaddr {
namespace {

// SHADDR_TUNING_FILE: lines NAME=VALUE (# comments). Read at each lookup: settings are read
// when a communicator is created, not on a fast path.
std::string tuning_file_value(const char *name) {
  const char *path = std::getenv("SHADDR_TUNING_FILE");
  if (!path || !*path) return "";
  std::ifstream in(path);
  const std::string key = std::string(name) + "=";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return line.substr(key.size());
  return "";
}

bool iequals(std::string_view a, const char *b) {
  if (a.size() != std::strlen(b)) return false;
  for (size_t i = 0; i < a.size(); i++)
    if ((a[i] | 0x20) != b[i]) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// The n-th word of a space-separated list.
std::string_view word(const char *list, size_t n) {
  std::string_view all(list);
  for (size_t i = 0;; i++) {
    const size_t sp = all.find(' ');
    if (i == n) return all.substr(0, sp);
    if (sp == std::string_view::npos) return {};
    all.remove_prefix(sp + 1);
  }
}

const char *type_words(SettingType t) {
  switch (t) {
    case SettingType::kSize: return "a size (bytes: digits or 0x..., optional K, M, G or T)";
    case SettingType::kInt: return "an integer";
    case SettingType::kBool: return "a boolean (0/1, no/yes, false/true, off/on)";
    default: return "a value";
  }
}

// A value as the ranks' agreement shows it.
std::string show(const SettingDef &d, uint64_t v, bool set) {
  if (!set) return "unset";
  if (d.type == SettingType::kChoice) return std::string(word(d.choices, v));
  if (d.type == SettingType::kText) return "a different text";
  return std::to_string(v);
}

}  // namespace

const SettingDef *find_setting(std::string_view name) {
  for (const SettingDef &d : setting_defs())
    if (name == d.name) return &d;
  return nullptr;
}

int parse_setting(const SettingDef &def, std::string_view text, uint64_t *value,
                  std::string *why) {
  const std::string_view t = trim(text);
  auto refuse = [&](const std::string &expected) {
    *why = std::string(def.name) + "=" + std::string(text) + ": not " + expected;
    return -EINVAL;
  };
  switch (def.type) {
    case SettingType::kBool:
      if (t == "1" || iequals(t, "yes") || iequals(t, "true") || iequals(t, "on")) *value = 1;
      else if (t == "0" || iequals(t, "no") || iequals(t, "false") || iequals(t, "off"))
        *value = 0;
      else return refuse(type_words(def.type));
      return 0;
    case SettingType::kChoice:
      for (size_t i = 0; !word(def.choices, i).empty(); i++)
        if (t == word(def.choices, i)) {
          *value = i;
          return 0;
        }
      return refuse(std::string("one of: ") + def.choices);
    case SettingType::kText:
      if (def.check) {
        std::string bad;
        if (!def.check(t, value, &bad)) return 0;
        *why = std::string(def.name) + "=" + std::string(text) + ": " + bad;
        return -EINVAL;
      }
      [[fallthrough]];
    case SettingType::kDoc:
      *value = hash_bytes(t.data(), t.size());
      return 0;
    case SettingType::kSize:
    case SettingType::kInt:
      break;
  }
  uint64_t n = 0;
  switch (parse_size(t, &n, def.type == SettingType::kSize)) {
    case SizeError::kNone: break;
    case SizeError::kOverflow: return refuse("a size that fits 64 bits");
    default: return refuse(type_words(def.type));
  }
  if (n < def.lo || n > def.hi)
    return refuse("within " + std::to_string(def.lo) + " to " + std::to_string(def.hi));
  *value = n;
  return 0;
}

std::string setting_text(const SettingDef &def) {
  const char *e = std::getenv(def.name);
  if (e && *e) return e;
  return def.tunable ? tuning_file_value(def.name) : "";
}

bool SettingsReader::read(const char *name, SettingType want, uint64_t *value) {
  const SettingDef *d = find_setting(name);
  if (!d || (d->type != want && !(want == SettingType::kSize && d->type == SettingType::kInt))) {
    if (!err_) {
      err_ = -EINVAL;
      why_ = std::string(name) + ": not a declared setting of this type (libshaddr bug)";
    }
    return false;
  }
  const std::string text = setting_text(*d);
  if (text.empty()) return false;
  std::string why;
  if (int err = parse_setting(*d, text, value, &why)) {
    if (!err_) {
      err_ = err;
      why_ = why;
    }
    return false;
  }
  return true;
}

uint64_t SettingsReader::size(const char *name, uint64_t dflt) {
  uint64_t v;
  return read(name, SettingType::kSize, &v) ? v : dflt;
}

bool SettingsReader::flag(const char *name, bool dflt) {
  uint64_t v;
  return read(name, SettingType::kBool, &v) ? v != 0 : dflt;
}

int SettingsReader::choice(const char *name, int dflt) {
  uint64_t v;
  return read(name, SettingType::kChoice, &v) ? static_cast<int>(v) : dflt;
}

std::string SettingsReader::word(const char *name, const char *dflt) {
  uint64_t v;
  const SettingDef *d = find_setting(name);
  return read(name, SettingType::kChoice, &v) && d ? std::string(shaddr::word(d->choices, v))
                                                   : std::string(dflt);
}

std::string SettingsReader::text(const char *name, const char *dflt) {
  uint64_t v;
  const SettingDef *d = find_setting(name);
  return read(name, SettingType::kText, &v) && d ? setting_text(*d) : std::string(dflt);
}

bool SettingsReader::is_set(const char *name) {
  const SettingDef *d = find_setting(name);
  return d && !setting_text(*d).empty();
}

int agree_settings(SettingLayer layer, int rank, int size, AllgatherFn allgather, void *ctx,
                   std::string *why) {
  // Per rank: the index of the first setting of the layer that does not parse (or -1), then
  // for each `equal` setting whether it is set and its value.
  struct Entry {
    uint64_t value;
    uint64_t set;
  };
  std::vector<const SettingDef *> defs;
  for (const SettingDef &d : setting_defs())
    if (d.layer == layer) defs.push_back(&d);
  const size_t n = defs.size();
  std::vector<Entry> mine(n + 1, Entry{0, 0});
  int64_t bad = -1;
  std::string my_error;
  for (size_t i = 0; i < n; i++) {
    const std::string text = setting_text(*defs[i]);
    if (text.empty()) continue;
    uint64_t v = 0;
    std::string e;
    if (parse_setting(*defs[i], text, &v, &e)) {
      if (bad < 0) {
        bad = static_cast<int64_t>(i);
        my_error = e;
      }
      continue;
    }
    if (defs[i]->equal) mine[i + 1] = Entry{v, 1};
  }
  mine[0] = Entry{static_cast<uint64_t>(bad), 0};
  std::vector<Entry> all(mine.size() * static_cast<size_t>(size));
  if (int err = allgather(mine.data(), all.data(), mine.size() * sizeof(Entry), ctx)) {
    *why = "allgather of the settings failed";
    return err;
  }
  auto at = [&](int r, size_t i) -> const Entry & { return all[r * mine.size() + i]; };
  for (int r = 0; r < size; r++) {
    const int64_t b = static_cast<int64_t>(at(r, 0).value);
    if (b < 0 || static_cast<size_t>(b) >= n) continue;
    *why = r == rank ? my_error
                     : std::string(defs[b]->name) + " does not parse on node rank " +
                           std::to_string(r) + " (its error names the value)";
    return -EINVAL;
  }
  for (size_t i = 0; i < n; i++) {
    if (!defs[i]->equal) continue;
    for (int r = 1; r < size; r++) {
      const Entry &a = at(0, i + 1), &b = at(r, i + 1);
      if (a.set == b.set && a.value == b.value) continue;
      *why = std::string(defs[i]->name) + " must be equal on every rank, but it is " +
             show(*defs[i], a.value, a.set) + " on rank 0 and " +
             show(*defs[i], b.value, b.set) + " on rank " + std::to_string(r);
      return -EINVAL;
    }
  }
  return 0;
}

bool verbose() {
  static std::once_flag warned;
  const SettingDef *d = find_setting("SHADDR_VERBOSE");
  const std::string text = d ? setting_text(*d) : "";
  uint64_t v = 0;
  std::string why;
  if (d && !text.empty() && parse_setting(*d, text, &v, &why)) {
    std::call_once(warned, [&] {
      std::fprintf(stderr, "shaddr: %s; verbose output stays off\n", why.c_str());
    });
    return false;
  }
  return v != 0;
}

}  // namespace shaddr

extern "C" {

SHADDR_API int shaddr_verbose(void) { return shaddr::verbose() ? 1 : 0; }

SHADDR_API int shaddr_setting_describe(unsigned index, struct shaddr_setting_desc *out) {
  const auto defs = shaddr::setting_defs();
  if (!out) return -EINVAL;
  if (index >= defs.size()) return -ENOENT;
  const shaddr::SettingDef &d = defs[index];
  using shaddr::SettingLayer;
  using shaddr::SettingType;
  static const char *const kind_of_type[] = {"size", "integer", "boolean", "choice", "text", ""};
  out->name = d.name;
  out->kind = d.layer == SettingLayer::kOther ? d.kind
              : d.tunable                      ? "env / tuning file"
                                               : "env";
  out->type = kind_of_type[static_cast<int>(d.type)];
  out->choices = d.choices;
  out->min_value = d.lo;
  out->max_value = d.hi;
  out->default_value = d.dflt;
  out->scope = d.layer == SettingLayer::kOther ? ""
               : !d.equal                      ? "per rank"
               : d.layer == SettingLayer::kLibrary ? "equal on the node"
                                                   : "equal in the job";
  out->reader = d.layer == SettingLayer::kLibrary      ? "libshaddr"
                : d.layer == SettingLayer::kInterposer ? "interposer"
                                                       : "";
  out->doc = d.doc;
  return 0;
}

}  // extern "C"
