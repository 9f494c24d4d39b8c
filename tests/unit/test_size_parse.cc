// SPDX-License-Identifier: MIT
// The one size grammar (size_parse.h) that settings, the heap and the tools read.
#include "size_parse.h"

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

namespace shaddr {
namespace {

struct Good {
  const char *text;
  uint64_t value;
};

const Good kGood[] = {
    {"0", 0},
    {"4096", 4096},
    {"  4096\t", 4096},
    {"4096\r\n", 4096},
    {"0x1000", 4096},
    {"0X1f", 31},
    {"010", 8},  // a leading 0 is octal, as strtoull's base 0 read the settings before
    {"1k", 1024},
    {"1K", 1024},
    {"1KiB", 1024},
    {"1kib", 1024},
    {"64M", 64ull << 20},
    {"64MiB", 64ull << 20},
    {"2g", 2ull << 30},
    {"2GiB", 2ull << 30},
    {"1T", 1ull << 40},
    {"1TiB", 1ull << 40},
    {"0x10K", 16ull << 10},
    {"18446744073709551615", UINT64_MAX},
    {"0xffffffffffffffff", UINT64_MAX},
    {"16777215T", 16777215ull << 40},
};

TEST(SizeParse, AcceptsEveryForm) {
  for (const Good &g : kGood) {
    uint64_t v = 12345;
    EXPECT_EQ(parse_size(g.text, &v), SizeError::kNone) << '"' << g.text << '"';
    EXPECT_EQ(v, g.value) << '"' << g.text << '"';
  }
}

struct Bad {
  const char *text;
  SizeError error;
};

const Bad kBad[] = {
    {"", SizeError::kEmpty},
    {"   ", SizeError::kEmpty},
    {"-1", SizeError::kSign},
    {"+1", SizeError::kSign},
    {" -1K", SizeError::kSign},
    {"K", SizeError::kJunk},
    {"KiB", SizeError::kJunk},
    {"0x", SizeError::kJunk},
    {"1.5M", SizeError::kJunk},
    {"1 K", SizeError::kJunk},
    {"1KB", SizeError::kJunk},
    {"1Ki", SizeError::kJunk},
    {"1KiBx", SizeError::kJunk},
    {"1MM", SizeError::kJunk},
    {"1P", SizeError::kJunk},
    {"08", SizeError::kJunk},
    {"12abc", SizeError::kJunk},
    {"1e6", SizeError::kJunk},
    {"18446744073709551616", SizeError::kOverflow},
    {"0x10000000000000000", SizeError::kOverflow},
    {"16777216T", SizeError::kOverflow},
    {"17179869184G", SizeError::kOverflow},
    {"99999999999999999999999K", SizeError::kOverflow},
};

TEST(SizeParse, RefusesJunkSignsAndOverflowAndLeavesTheOutputAlone) {
  for (const Bad &b : kBad) {
    uint64_t v = 12345;
    EXPECT_EQ(parse_size(b.text, &v), b.error) << '"' << b.text << '"';
    EXPECT_EQ(v, 12345u) << '"' << b.text << '"';
  }
}

TEST(SizeParse, ACountTakesNoSuffix) {
  uint64_t v = 0;
  EXPECT_EQ(parse_size("0x20", &v, false), SizeError::kNone);
  EXPECT_EQ(v, 32u);
  EXPECT_EQ(parse_size("1K", &v, false), SizeError::kJunk);
  EXPECT_EQ(parse_size("1KiB", &v, false), SizeError::kJunk);
}

TEST(SizeParse, EveryErrorHasText) {
  for (SizeError e : {SizeError::kEmpty, SizeError::kSign, SizeError::kJunk,
                      SizeError::kOverflow})
    EXPECT_STRNE(size_error_text(e), "?");
}

// Usable where no allocation may happen (the heap's first malloc) and at compile time.
static_assert([] {
  uint64_t v = 0;
  return parse_size("2MiB", &v) == SizeError::kNone && v == (2u << 20);
}());

}  // namespace
}  // namespace shaddr
