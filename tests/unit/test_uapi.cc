// SPDX-License-Identifier: MIT
// The uapi header (kmod/include/uapi/linux/shaddr.h) is an ABI: every struct's size, alignment
// and member offsets, every ioctl number and every constant is pinned here, so that a change
// fails a test naming what changed. The header is also read as text, so that a struct, member,
// ioctl or constant added there without a row here fails too: adding one is adding a row.
#include <linux/shaddr.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace {

// A struct's layout or one member's place in it; member is empty for the struct's own row.
struct Layout {
  const char *type, *member;
  size_t size, align_or_offset;                // as compiled from the header
  size_t pinned_size, pinned_align_or_offset;  // as pinned here
};

#define STRUCT(T, SIZE, ALIGN) {#T, "", sizeof(struct T), alignof(struct T), SIZE, ALIGN}
#define MEMBER(T, M, OFFSET, SIZE) \
  {#T, #M, sizeof(((struct T *)nullptr)->M), offsetof(struct T, M), SIZE, OFFSET}

const Layout kLayouts[] = {
  STRUCT(shaddr_version, 32, 8),
  MEMBER(shaddr_version, abi_major, 0, 4),
  MEMBER(shaddr_version, abi_minor, 4, 4),
  MEMBER(shaddr_version, features, 8, 8),
  MEMBER(shaddr_version, reserved, 16, 16),
  STRUCT(shaddr_translate, 56, 8),
  MEMBER(shaddr_translate, va, 0, 8),
  MEMBER(shaddr_translate, len, 8, 8),
  MEMBER(shaddr_translate, prot, 16, 4),
  MEMBER(shaddr_translate, flags, 20, 4),
  MEMBER(shaddr_translate, handle, 24, 8),
  MEMBER(shaddr_translate, base, 32, 8),
  MEMBER(shaddr_translate, block_size, 40, 8),
  MEMBER(shaddr_translate, nr_blocks, 48, 4),
  MEMBER(shaddr_translate, pad, 52, 4),
  STRUCT(shaddr_map, 40, 8),
  MEMBER(shaddr_map, handle, 0, 8),
  MEMBER(shaddr_map, block, 8, 4),
  MEMBER(shaddr_map, prot, 12, 4),
  MEMBER(shaddr_map, addr, 16, 8),
  MEMBER(shaddr_map, size, 24, 8),
  MEMBER(shaddr_map, slot, 32, 4),
  MEMBER(shaddr_map, flags, 36, 4),
  STRUCT(shaddr_unmap, 16, 8),
  MEMBER(shaddr_unmap, addr, 0, 8),
  MEMBER(shaddr_unmap, slot, 8, 4),
  MEMBER(shaddr_unmap, flags, 12, 4),
  STRUCT(shaddr_slot_info, 48, 8),
  MEMBER(shaddr_slot_info, state, 0, 4),
  MEMBER(shaddr_slot_info, prot, 4, 4),
  MEMBER(shaddr_slot_info, peer, 8, 4),
  MEMBER(shaddr_slot_info, pad, 12, 4),
  MEMBER(shaddr_slot_info, handle, 16, 8),
  MEMBER(shaddr_slot_info, addr, 24, 8),
  MEMBER(shaddr_slot_info, block, 32, 8),
  MEMBER(shaddr_slot_info, size, 40, 8),
  STRUCT(shaddr_query, 784, 8),
  MEMBER(shaddr_query, nr_slots, 0, 4),
  MEMBER(shaddr_query, nr_mapped, 4, 4),
  MEMBER(shaddr_query, slot_size, 8, 8),
  MEMBER(shaddr_query, slots, 16, 768),
  STRUCT(shaddr_make, 32, 8),
  MEMBER(shaddr_make, va, 0, 8),
  MEMBER(shaddr_make, size, 8, 8),
  MEMBER(shaddr_make, mode, 16, 4),
  MEMBER(shaddr_make, flags, 20, 4),
  MEMBER(shaddr_make, segid, 24, 8),
  STRUCT(shaddr_get, 24, 8),
  MEMBER(shaddr_get, segid, 0, 8),
  MEMBER(shaddr_get, flags, 8, 4),
  MEMBER(shaddr_get, pad, 12, 4),
  MEMBER(shaddr_get, apid, 16, 8),
  STRUCT(shaddr_attach, 48, 8),
  MEMBER(shaddr_attach, apid, 0, 8),
  MEMBER(shaddr_attach, offset, 8, 8),
  MEMBER(shaddr_attach, size, 16, 8),
  MEMBER(shaddr_attach, vaddr, 24, 8),
  MEMBER(shaddr_attach, flags, 32, 4),
  MEMBER(shaddr_attach, pad, 36, 4),
  MEMBER(shaddr_attach, addr, 40, 8),
};

// An ioctl number, pinned by its parts so that a failure says which part moved.
struct Ioctl {
  const char *name;
  unsigned long number;
  unsigned pinned_dir, pinned_nr, pinned_size;
};

#define IOCTL(N, DIR, NR, SIZE) {#N, N, DIR, NR, SIZE}

const Ioctl kIoctls[] = {
  IOCTL(SHADDR_IOC_VERSION, _IOC_READ, 0x00, 32),
  IOCTL(SHADDR_IOC_TRANSLATE, _IOC_READ | _IOC_WRITE, 0x01, 56),
  IOCTL(SHADDR_IOC_REVOKE, _IOC_WRITE, 0x02, 8),
  IOCTL(SHADDR_IOC_MAP, _IOC_READ | _IOC_WRITE, 0x03, 40),
  IOCTL(SHADDR_IOC_UNMAP, _IOC_WRITE, 0x04, 16),
  IOCTL(SHADDR_IOC_QUERY, _IOC_READ, 0x05, 784),
  IOCTL(SHADDR_IOC_SET_SLOT_SIZE, _IOC_WRITE, 0x06, 8),
  IOCTL(SHADDR_IOC_MAKE, _IOC_READ | _IOC_WRITE, 0x10, 32),
  IOCTL(SHADDR_IOC_REMOVE, _IOC_WRITE, 0x11, 8),
  IOCTL(SHADDR_IOC_GET, _IOC_READ | _IOC_WRITE, 0x12, 24),
  IOCTL(SHADDR_IOC_RELEASE, _IOC_WRITE, 0x13, 8),
  IOCTL(SHADDR_IOC_ATTACH, _IOC_READ | _IOC_WRITE, 0x14, 48),
  IOCTL(SHADDR_IOC_DETACH, _IOC_WRITE, 0x15, 8),
};

struct Constant {
  const char *name;
  unsigned long long value, pinned;
};

#define CONSTANT(N, V) {#N, static_cast<unsigned long long>(N), V}

const Constant kConstants[] = {
  CONSTANT(SHADDR_ABI_MAJOR, 0x1),
  CONSTANT(SHADDR_ABI_MINOR, 0x2),
  CONSTANT(SHADDR_FEAT_WINDOWS, 0x1),
  CONSTANT(SHADDR_FEAT_SEGMENTS, 0x2),
  CONSTANT(SHADDR_FEAT_HUGE_MAP, 0x4),
  CONSTANT(SHADDR_FEAT_READ_ONLY_PAGES, 0x8),
  CONSTANT(SHADDR_IOC_MAGIC, 0xc6),
  CONSTANT(SHADDR_PROT_READ, 0x1),
  CONSTANT(SHADDR_PROT_WRITE, 0x2),
  CONSTANT(SHADDR_SLOT_1M, 0x100000),
  CONSTANT(SHADDR_SLOT_16M, 0x1000000),
  CONSTANT(SHADDR_SLOT_256M, 0x10000000),
  CONSTANT(SHADDR_MAX_SLOTS, 0x10),
  CONSTANT(SHADDR_UNMAP_BY_SLOT, 0x1),
  CONSTANT(SHADDR_SLOT_FREE, 0x0),
  CONSTANT(SHADDR_SLOT_MAPPED, 0x1),
  CONSTANT(SHADDR_SLOT_DEAD, 0x2),
  CONSTANT(SHADDR_SEG_RDONLY, 0x1),
  CONSTANT(SHADDR_SEG_RDWR, 0x2),
  CONSTANT(SHADDR_ATTACH_FIXED, 0x1),
};

TEST(Uapi, StructSizesAndAlignmentsArePinned) {
  for (const Layout &l : kLayouts) {
    if (*l.member) continue;
    EXPECT_EQ(l.size, l.pinned_size) << "sizeof(struct " << l.type << ") changed";
    EXPECT_EQ(l.align_or_offset, l.pinned_align_or_offset)
        << "alignof(struct " << l.type << ") changed";
  }
}

TEST(Uapi, MemberOffsetsAndSizesArePinned) {
  for (const Layout &l : kLayouts) {
    if (!*l.member) continue;
    EXPECT_EQ(l.align_or_offset, l.pinned_align_or_offset)
        << "offset of " << l.type << "." << l.member << " changed";
    EXPECT_EQ(l.size, l.pinned_size) << "size of " << l.type << "." << l.member << " changed";
  }
}

TEST(Uapi, IoctlNumbersArePinned) {
  std::set<unsigned long> seen;
  for (const Ioctl &i : kIoctls) {
    EXPECT_EQ(_IOC_TYPE(i.number), 0xC6u) << i.name << ": ioctl type (magic) changed";
    EXPECT_EQ(_IOC_DIR(i.number), i.pinned_dir) << i.name << ": direction changed";
    EXPECT_EQ(_IOC_NR(i.number), i.pinned_nr) << i.name << ": number changed";
    EXPECT_EQ(_IOC_SIZE(i.number), i.pinned_size) << i.name << ": argument size changed";
    EXPECT_EQ(i.number, static_cast<unsigned long>(
                            _IOC(i.pinned_dir, 0xC6, i.pinned_nr, i.pinned_size)))
        << i.name;
    EXPECT_TRUE(seen.insert(_IOC_NR(i.number)).second) << i.name << ": number used twice";
  }
}

TEST(Uapi, ConstantsArePinned) {
  for (const Constant &c : kConstants)
    EXPECT_EQ(c.value, c.pinned) << c.name << " changed";
  EXPECT_STREQ(SHADDR_DEVICE_NAME, "shaddr");
}

TEST(Uapi, FeatureBitsAreDistinct) {
  const unsigned long long bits[] = {SHADDR_FEAT_WINDOWS, SHADDR_FEAT_SEGMENTS,
                                     SHADDR_FEAT_HUGE_MAP, SHADDR_FEAT_READ_ONLY_PAGES};
  unsigned long long seen = 0;
  for (auto b : bits) {
    EXPECT_EQ(__builtin_popcountll(b), 1);
    EXPECT_EQ(seen & b, 0u);
    seen |= b;
  }
}

std::string header_text() {
  std::ifstream in(SHADDR_UAPI_HEADER);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every name the header declares has its row: nothing in the ABI is left unpinned.
TEST(Uapi, EveryDeclarationOfTheHeaderHasARow) {
  const std::string h = header_text();
  ASSERT_FALSE(h.empty()) << "cannot read " << SHADDR_UAPI_HEADER;

  std::set<std::string> rows, declared;
  for (const Layout &l : kLayouts) rows.insert(std::string(l.type) + "." + l.member);
  const std::regex struct_re(R"(\nstruct (shaddr_\w+) \{\n([^}]*)\n\};)");
  const std::regex member_re(R"(\n\s*(?:struct \w+|__[us](?:8|16|32|64))\s+(\w+)(?:\[[^\]]*\])?;)");
  for (std::sregex_iterator s(h.begin(), h.end(), struct_re), end; s != end; ++s) {
    const std::string type = (*s)[1], body = "\n" + (*s)[2].str();
    declared.insert(type + ".");
    for (std::sregex_iterator m(body.begin(), body.end(), member_re); m != end; ++m)
      declared.insert(type + "." + (*m)[1].str());
  }
  for (const std::string &d : declared)
    EXPECT_TRUE(rows.count(d)) << d << " (struct or member) has no row in kLayouts";
  for (const std::string &r : rows)
    EXPECT_TRUE(declared.count(r)) << r << " is pinned but the header no longer declares it";

  std::set<std::string> ioctls, constants;
  for (const Ioctl &i : kIoctls) ioctls.insert(i.name);
  for (const Constant &c : kConstants) constants.insert(c.name);
  constants.insert("SHADDR_DEVICE_NAME");
  const std::regex define_re(R"(\n#define (SHADDR_\w+)\s+(\S))");
  size_t n_ioctls = 0;
  for (std::sregex_iterator d(h.begin(), h.end(), define_re), end; d != end; ++d) {
    const std::string name = (*d)[1];
    if (h.compare((*d).position(2), 3, "_IO") == 0) {
      n_ioctls++;
      EXPECT_TRUE(ioctls.count(name)) << name << " (ioctl) has no row in kIoctls";
    } else {
      EXPECT_TRUE(constants.count(name)) << name << " (constant) has no row in kConstants";
    }
  }
  EXPECT_EQ(n_ioctls, std::size(kIoctls)) << "the header declares " << n_ioctls
                                          << " ioctls, kIoctls pins " << std::size(kIoctls);
  EXPECT_GE(declared.size(), 9u) << "the header's structs were not found: has its style changed?";
}

}  // namespace
