// SPDX-License-Identifier: MIT
// The one grammar for a size in bytes, read by the settings (SHADDR_* sizes), the heap's
// LD_PRELOAD library and the tools' command lines. Header-only and allocation-free: the heap
// parses its settings inside malloc's first call, with its own jemalloc not yet set up.
//
//   size   := blanks number [suffix] blanks
//   number := decimal digits | 0x hex digits | 0 octal digits   (as strtoull with base 0)
//   suffix := K | M | G | T, either case, optionally followed by "iB" (KiB = K = 1024)
//
// No sign, no fraction, nothing after the suffix; a value beyond 64 bits is refused.
#ifndef SHADDR_SIZE_PARSE_H
#define SHADDR_SIZE_PARSE_H

#include <cstdint>
#include <string_view>

namespace shaddr {

enum class SizeError { kNone, kEmpty, kSign, kJunk, kOverflow };

constexpr const char *size_error_text(SizeError e) {
  switch (e) {
    case SizeError::kNone: return "ok";
    case SizeError::kEmpty: return "empty";
    case SizeError::kSign: return "a sign (sizes are unsigned)";
    case SizeError::kJunk: return "not digits with an optional K, M, G or T suffix";
    case SizeError::kOverflow: return "beyond 64 bits";
  }
  return "?";
}

constexpr const char *kSizeGrammar =
    "bytes: digits or 0x..., optional K, M, G or T (or KiB, MiB, GiB, TiB)";

// allow_suffix=false reads a plain count (an integer setting): the same digits, no suffix.
constexpr SizeError parse_size(std::string_view text, std::uint64_t *out,
                               bool allow_suffix = true) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  if (text.empty()) return SizeError::kEmpty;
  if (text[0] == '-' || text[0] == '+') return SizeError::kSign;

  unsigned base = 10;
  std::size_t i = 0;
  if (text.size() >= 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    i = 2;
  } else if (text[0] == '0') {
    base = 8;
  }
  auto digit = [base](char c) -> int {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    return d >= 0 && static_cast<unsigned>(d) < base ? d : -1;
  };
  const std::size_t first = i;
  std::uint64_t n = 0;
  bool overflow = false;
  for (; i < text.size() && digit(text[i]) >= 0; i++) {
    const auto d = static_cast<std::uint64_t>(digit(text[i]));
    if (n > (UINT64_MAX - d) / base) overflow = true;
    n = n * base + d;
  }
  if (i == first) return SizeError::kJunk;  // "0x" alone, or a suffix without digits

  unsigned shift = 0;
  if (i < text.size()) {
    if (!allow_suffix) return SizeError::kJunk;
    constexpr std::string_view kSuffixes = "KMGT";
    const std::size_t k = kSuffixes.find(static_cast<char>(text[i] & ~0x20));
    if (k == std::string_view::npos) return SizeError::kJunk;
    shift = 10 * static_cast<unsigned>(k + 1);
    i++;
    const std::string_view rest = text.substr(i);
    if (rest == "iB" || rest == "ib" || rest == "IB" || rest == "Ib") i += 2;
    if (i != text.size()) return SizeError::kJunk;
  }
  if (overflow || (shift && n > (UINT64_MAX >> shift))) return SizeError::kOverflow;
  *out = n << shift;
  return SizeError::kNone;
}

}  // namespace shaddr

#endif  // SHADDR_SIZE_PARSE_H
