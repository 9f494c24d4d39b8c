// SPDX-License-Identifier: MIT
// The settings registry: one grammar, declared ranges, and agreement between ranks (a setting
// that decides the protocol and differs between ranks is refused by every rank, naming it).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "bootstrap.h"
#include "child_preload.h"
#include "settings.h"
#include "shaddr/coll.h"
#include "shaddr/settings.h"

namespace shaddr {
namespace {

// Parses text as setting name; returns the errno and leaves the value/why for the caller.
int parse(const char *name, const char *text, uint64_t *v, std::string *why) {
  const SettingDef *d = find_setting(name);
  EXPECT_NE(d, nullptr) << name;
  return d ? parse_setting(*d, text, v, why) : -ENOENT;
}

uint64_t ok(const char *name, const char *text) {
  uint64_t v = 0;
  std::string why;
  EXPECT_EQ(parse(name, text, &v, &why), 0) << name << "=" << text << ": " << why;
  return v;
}

std::string refused(const char *name, const char *text) {
  uint64_t v = 0;
  std::string why;
  EXPECT_EQ(parse(name, text, &v, &why), -EINVAL) << name << "=" << text << " was accepted";
  EXPECT_NE(why.find(name), std::string::npos) << "the error names the variable: " << why;
  return why;
}

TEST(Settings, SizesTakeBinarySuffixes) {
  EXPECT_EQ(ok("SHADDR_CHUNK", "4096"), 4096u);
  EXPECT_EQ(ok("SHADDR_CHUNK", "256K"), 262144u);
  EXPECT_EQ(ok("SHADDR_CHUNK", "256k"), 262144u);
  EXPECT_EQ(ok("SHADDR_CHUNK", "0x10000"), 65536u);
  EXPECT_EQ(ok("SHADDR_CHUNK", "1G"), 1u << 30);
  EXPECT_EQ(ok("SHADDR_INTERPOSE_SEGMENT", "256K"), 262144u);  // was dropped by its own parser
  EXPECT_EQ(ok("SHADDR_BCAST_STREAMS_MIN", "16G"), 16ull << 30);  // was silently 16
  EXPECT_EQ(ok("SHADDR_BCAST_STREAMS_MIN", " 8M "), 8u << 20);
  EXPECT_EQ(ok("SHADDR_CHUNK", "256KiB"), 262144u);  // the tools' spelling, one grammar
}

TEST(Settings, GarbageAndOutOfRangeAreRefusedNamingTheVariable) {
  refused("SHADDR_CHUNK", "abc");
  refused("SHADDR_CHUNK", "12abc");
  refused("SHADDR_CHUNK", "1KB");
  refused("SHADDR_CHUNK", "-4096");
  refused("SHADDR_CHUNK", "1K");  // below 4K
  refused("SHADDR_CHUNK", "2G");  // above 1G
  EXPECT_NE(refused("SHADDR_CHUNK", "2G").find("within"), std::string::npos);
  refused("SHADDR_BCAST_STREAMS_MIN", "99999999999999999999");
  refused("SHADDR_BCAST_STREAMS_MIN", "17179869184T");  // overflows 64 bits
  refused("SHADDR_BCAST_STREAMS", "4K");                // an integer takes no suffix
  refused("SHADDR_BCAST_STREAMS", "4KiB");
  refused("SHADDR_BCAST_STREAMS", "0");
  refused("SHADDR_SLOT_MAX", "16385");
}

TEST(Settings, BooleansHaveOneMeaning) {
  for (const char *on : {"1", "yes", "YES", "true", "On"}) EXPECT_EQ(ok("SHADDR_VERBOSE", on), 1u);
  for (const char *off : {"0", "no", "false", "OFF"}) EXPECT_EQ(ok("SHADDR_VERBOSE", off), 0u);
  refused("SHADDR_VERBOSE", "2");
  refused("SHADDR_VERBOSE", "y");
}

TEST(Settings, ChoicesAreTheDeclaredWords) {
  EXPECT_EQ(ok("SHADDR_BACKEND", "auto"), 0u);
  EXPECT_EQ(ok("SHADDR_BACKEND", "shm"), 4u);
  EXPECT_NE(refused("SHADDR_BACKEND", "xpmem").find("auto segment window cma shm"),
            std::string::npos);
  EXPECT_EQ(ok("SHADDR_ALLGATHER_RING", "auto"), 2u);
  refused("SHADDR_WAIT", "busy");
}

TEST(Settings, ReaderKeepsTheFirstErrorAndFallsBackToTheDefault) {
  setenv("SHADDR_CHUNK", "lots", 1);
  setenv("SHADDR_REDUCE_UNIT", "4K", 1);
  SettingsReader in;
  EXPECT_EQ(in.size("SHADDR_CHUNK", 123), 123u);
  EXPECT_EQ(in.size("SHADDR_REDUCE_UNIT", 1), 4096u);
  EXPECT_EQ(in.error(), -EINVAL);
  EXPECT_NE(in.why().find("SHADDR_CHUNK=lots"), std::string::npos) << in.why();
  unsetenv("SHADDR_CHUNK");
  unsetenv("SHADDR_REDUCE_UNIT");
  SettingsReader undeclared;
  undeclared.size("SHADDR_NO_SUCH_SETTING", 0);
  EXPECT_EQ(undeclared.error(), -EINVAL);
}

TEST(Settings, EveryDeclarationIsComplete) {
  shaddr_setting_desc d{};
  unsigned n = 0;
  for (; shaddr_setting_describe(n, &d) == 0; n++) {
    EXPECT_TRUE(d.name && *d.name && d.kind && *d.kind && d.doc && *d.doc && d.default_value)
        << n;
    EXPECT_EQ(find_setting(d.name), &setting_defs()[n]) << d.name << " is declared twice";
    if (!std::strcmp(d.type, "size") || !std::strcmp(d.type, "integer")) {
      EXPECT_LE(d.min_value, d.max_value) << d.name;
    }
  }
  EXPECT_EQ(n, setting_defs().size());
  EXPECT_EQ(shaddr_setting_describe(n, &d), -ENOENT);
  EXPECT_EQ(shaddr_setting_describe(0, nullptr), -EINVAL);
}

// Node communicators over forked ranks, where rank 1 gets its own environment (as a per-rank
// wrapper script would give it). Returns 0 if every rank saw what it expected.
int create_with(const char *name, const char *rank1_value, int want_err, const char *want_why) {
  return run_forked(3, [=](const shaddr_host &h) {
    setenv("SHADDR_BACKEND", "shm", 1);
    if (h.rank == 1) setenv(name, rank1_value, 1);
    shaddr_comm_t *c = nullptr;
    const int err = shaddr_comm_create(&h, &c);
    const std::string why = shaddr_last_error();
    if (err != want_err) {
      std::fprintf(stderr, "rank %d: %s=%s on rank 1: create returned %d, want %d (%s)\n",
                   h.rank, name, rank1_value, err, want_err, why.c_str());
      return 1;
    }
    if (err == 0) return shaddr_comm_free(c) ? 2 : 0;
    if (why.find(want_why) == std::string::npos) {
      std::fprintf(stderr, "rank %d: error \"%s\" lacks \"%s\"\n", h.rank, why.c_str(), want_why);
      return 3;
    }
    return 0;
  });
}

TEST(Settings, NodeEqualMismatchIsRefusedOnEveryRank) {
  // Bcast FIFO and chunk set on some ranks only: ranks would wait in different protocols.
  EXPECT_EQ(create_with("SHADDR_BCAST_FIFO_MAX", "1024", -EINVAL, "SHADDR_BCAST_FIFO_MAX"), 0);
  EXPECT_EQ(create_with("SHADDR_CHUNK", "64K", -EINVAL, "SHADDR_CHUNK must be equal"), 0);
  EXPECT_EQ(create_with("SHADDR_BACKEND", "cma", -EINVAL, "shm on rank 0 and cma on rank 1"), 0);
  EXPECT_EQ(create_with("SHADDR_TOPOLOGY", "numa", -EINVAL, "SHADDR_TOPOLOGY must be equal"), 0);
}

TEST(Settings, GarbageOnOneRankFailsEveryRank) {
  EXPECT_EQ(create_with("SHADDR_SLOT_MAX", "lots", -EINVAL, "SHADDR_SLOT_MAX"), 0);
  EXPECT_EQ(create_with("SHADDR_WAIT", "busy", -EINVAL, "SHADDR_WAIT"), 0);  // per rank, checked
  EXPECT_EQ(create_with("SHADDR_TOPOLOGY", "numa,cores", -EINVAL, "SHADDR_TOPOLOGY"), 0);
}

TEST(Settings, PerRankSettingsMayDiffer) {
  EXPECT_EQ(create_with("SHADDR_WAIT", "spin", 0, ""), 0);
  EXPECT_EQ(create_with("SHADDR_WAIT_SLEEP_MAX", "50", 0, ""), 0);
}

// A rank's children start without shaddr's libraries (docs/heap.md, "Children are not ranks"):
// the others stay, in their order, whatever ld.so's separators were.
TEST(ChildPreload, DropsShaddrsLibrariesOnly) {
  EXPECT_EQ(preload_without_shaddr("/b/libshaddr/heap/libshaddr-heap.so:/b/libshaddr/interpose/"
                                   "libshaddr-mpich.so"), "");
  EXPECT_EQ(preload_without_shaddr("/x/libshaddr-heap.so:/usr/lib/libfoo.so /y/libshaddr-openmpi.so"
                                   "\tlibbar.so"), "/usr/lib/libfoo.so:libbar.so");
  EXPECT_EQ(preload_without_shaddr("libfoo.so::libshaddr-heap.so.bak"), "libfoo.so:libshaddr-heap.so.bak");
  EXPECT_EQ(preload_without_shaddr(""), "");
}

TEST(ChildPreload, AtMpiInitUnlessKept) {
  const char *was = getenv("LD_PRELOAD");
  const std::string saved = was ? was : "";
  setenv("LD_PRELOAD", "/b/libshaddr-heap.so:/b/libshaddr-mpich.so:/lib/libx.so", 1);
  drop_preload_for_children(false);
  EXPECT_STREQ(getenv("LD_PRELOAD"), "/lib/libx.so");
  setenv("LD_PRELOAD", "/b/libshaddr-heap.so", 1);
  drop_preload_for_children(true);  // SHADDR_PRELOAD_CHILDREN=1
  EXPECT_STREQ(getenv("LD_PRELOAD"), "/b/libshaddr-heap.so");
  if (was)
    setenv("LD_PRELOAD", saved.c_str(), 1);
  else
    unsetenv("LD_PRELOAD");
}

}  // namespace
}  // namespace shaddr
