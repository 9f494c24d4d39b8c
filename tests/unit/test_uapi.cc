// SPDX-License-Identifier: MIT
// The uapi header is an ABI: its layout and ioctl numbers must never change by accident.
#include <linux/shaddr.h>

#include <cstddef>

#include <gtest/gtest.h>

TEST(Uapi, VersionStructLayoutIsFixed) {
  EXPECT_EQ(sizeof(struct shaddr_version), 32u);
  EXPECT_EQ(offsetof(struct shaddr_version, abi_major), 0u);
  EXPECT_EQ(offsetof(struct shaddr_version, abi_minor), 4u);
  EXPECT_EQ(offsetof(struct shaddr_version, features), 8u);
  EXPECT_EQ(offsetof(struct shaddr_version, reserved), 16u);
  EXPECT_EQ(alignof(struct shaddr_version), 8u);
}

TEST(Uapi, VersionIoctlNumberEncodesDirectionTypeAndSize) {
  EXPECT_EQ(_IOC_DIR(SHADDR_IOC_VERSION), static_cast<unsigned>(_IOC_READ));
  EXPECT_EQ(_IOC_TYPE(SHADDR_IOC_VERSION), static_cast<unsigned>(SHADDR_IOC_MAGIC));
  EXPECT_EQ(_IOC_NR(SHADDR_IOC_VERSION), 0u);
  EXPECT_EQ(_IOC_SIZE(SHADDR_IOC_VERSION), sizeof(struct shaddr_version));
}

TEST(Uapi, FeatureBitsAreDistinct) {
  const unsigned long long bits[] = {SHADDR_FEAT_WINDOWS, SHADDR_FEAT_SEGMENTS,
                                     SHADDR_FEAT_HUGE_MAP};
  unsigned long long seen = 0;
  for (auto b : bits) {
    EXPECT_EQ(__builtin_popcountll(b), 1);
    EXPECT_EQ(seen & b, 0u);
    seen |= b;
  }
}
