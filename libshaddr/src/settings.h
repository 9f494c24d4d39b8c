// SPDX-License-Identifier: MIT
// Every SHADDR_* setting, declared once (settings_table.cc): name, type, range, default, who
// reads it, whether it must be equal on every rank, and one line of documentation.
// docs/settings.md's settings table and `shaddr-info --settings` are printed from the
// declarations.
//
// One grammar for all of them (parse_setting):
//   size, integer  decimal or 0x hex; a size may end in K, M, G or T (binary: 1K = 1024);
//                  outside [lo, hi] or anything else after the number is refused
//   boolean        0/1, no/yes, false/true, off/on (any case)
//   choice         one of the declared words
//   text           anything (paths), or what the setting's own check accepts
// A value is taken from the environment, then (tunable settings only) from SHADDR_TUNING_FILE,
// else the reader's default. An empty variable counts as unset.
//
// Agreement: a setting marked `equal` decides a protocol, so ranks that disagree on it would
// hang or fail with a guess in the message. agree_settings() compares them (and every setting's
// parse error) between the ranks before anything depends on them, and refuses on every rank,
// naming the setting. libshaddr's own are agreed when a node communicator is created; the
// interposer's over all ranks at MPI_Init.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace shaddr {

enum class SettingType : uint8_t { kSize, kInt, kBool, kChoice, kText, kDoc };

// Who reads a setting; agree_settings() checks one layer at a time.
enum class SettingLayer : uint8_t {
  kLibrary,     // libshaddr (node communicators, backends)
  kInterposer,  // the PMPI interposer
  kOther,       // documented here, read by a tool, a test, the module or MPICH
};

struct SettingDef {
  const char *name;
  SettingType type;
  SettingLayer layer;
  bool equal;          // must be equal on every rank (node: kLibrary; job: kInterposer)
  bool tunable;        // may come from SHADDR_TUNING_FILE
  uint64_t lo, hi;     // range of kSize / kInt
  const char *choices;  // kChoice: the words, space-separated (value = index)
  const char *kind;     // kOther: the table's "kind" column (env, module parameter, ...)
  const char *dflt;     // the default as the table shows it
  const char *doc;
  // kText with a grammar of its own: 0 and *value (what the ranks agree on), or -EINVAL and
  // *why saying what is expected; nullptr: any text.
  int (*check)(std::string_view text, uint64_t *value, std::string *why);
};

std::span<const SettingDef> setting_defs();
// nullptr when @name is not declared.
const SettingDef *find_setting(std::string_view name);

// Parses @text by @def's type into *value (kBool 0/1, kChoice the index, kText a hash).
// 0, or -EINVAL with *why naming the variable, the value and what was expected.
int parse_setting(const SettingDef &def, std::string_view text, uint64_t *value,
                  std::string *why);

// The raw text of a setting: the environment, else the tuning file if tunable; "" when unset.
std::string setting_text(const SettingDef &def);

// Reads typed settings, keeping the first error. Every name must be declared (a programming
// error otherwise: reported as an error naming it).
class SettingsReader {
 public:
  uint64_t size(const char *name, uint64_t dflt);  // kSize, kInt
  bool flag(const char *name, bool dflt);          // kBool
  int choice(const char *name, int dflt);          // kChoice: index of the word
  std::string word(const char *name, const char *dflt);  // kChoice: the word
  std::string text(const char *name, const char *dflt);  // kText
  bool is_set(const char *name);                   // set in the environment or tuning file
  int error() const { return err_; }
  const std::string &why() const { return why_; }

 private:
  bool read(const char *name, SettingType want, uint64_t *value);
  int err_ = 0;
  std::string why_;
};

// One settings layer's agreement between the ranks of a group, through @allgather (as
// shaddr_host's). Collective. 0 on every rank, or -EINVAL on every rank with *why naming the
// first setting that does not parse on some rank, or that differs between ranks (with both
// values); another negative errno if the allgather failed.
using AllgatherFn = int (*)(const void *send, void *recv, size_t bytes, void *ctx);
int agree_settings(SettingLayer layer, int rank, int size, AllgatherFn allgather, void *ctx,
                   std::string *why);

// SHADDR_VERBOSE. A value that does not parse is reported once on stderr and counts as off.
bool verbose();

// The user's cache directory, where libshaddr keeps this machine's calibration:
// $XDG_CACHE_HOME (an absolute path), else $HOME/.cache; "" when neither is set.
std::string user_cache_dir();

}  // namespace shaddr
