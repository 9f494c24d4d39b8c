// SPDX-License-Identifier: MIT
// The device part of the C API on a machine without the module: precise errors, no crash.
#include <cerrno>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <linux/shaddr.h>

#include "shaddr/shaddr.h"

namespace {

class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name)) old_ = old, had_ = true;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char *name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace

TEST(Device, DefaultPathIsDevShaddr) {
  ScopedEnv env("SHADDR_DEVICE", nullptr);
  EXPECT_STREQ(shaddr_device_path(), "/dev/shaddr");
}

TEST(Device, PathFollowsEnvironment) {
  ScopedEnv env("SHADDR_DEVICE", "/tmp/some-device");
  EXPECT_STREQ(shaddr_device_path(), "/tmp/some-device");
}

TEST(Device, EmptyEnvironmentMeansDefault) {
  ScopedEnv env("SHADDR_DEVICE", "");
  EXPECT_STREQ(shaddr_device_path(), "/dev/shaddr");
}

TEST(Device, QueryRejectsNullInfo) {
  EXPECT_EQ(shaddr_module_query(nullptr), -EINVAL);
  EXPECT_NE(std::string(shaddr_last_error()).find("info is NULL"), std::string::npos);
}

TEST(Device, QueryWithoutModuleIsENOENTWithHint) {
  ScopedEnv env("SHADDR_DEVICE", "/nonexistent/shaddr");
  shaddr_module_info info{};
  EXPECT_EQ(shaddr_module_query(&info), -ENOENT);
  const std::string err = shaddr_last_error();
  EXPECT_NE(err.find("/nonexistent/shaddr"), std::string::npos) << err;
  EXPECT_NE(err.find("is the shaddr module loaded?"), std::string::npos) << err;
}

TEST(Device, QueryOnForeignDeviceIsENOTTY) {
  ScopedEnv env("SHADDR_DEVICE", "/dev/null");
  shaddr_module_info info{};
  EXPECT_EQ(shaddr_module_query(&info), -ENOTTY);
  EXPECT_NE(std::string(shaddr_last_error()).find("not a shaddr device"), std::string::npos);
}

TEST(Device, EachCallReplacesTheLastError) {
  EXPECT_EQ(shaddr_module_query(nullptr), -EINVAL);
  EXPECT_STRNE(shaddr_last_error(), "");
  ScopedEnv env("SHADDR_DEVICE", "/nonexistent/shaddr");
  shaddr_module_info info{};
  EXPECT_EQ(shaddr_module_query(&info), -ENOENT);
  EXPECT_EQ(std::string(shaddr_last_error()).find("info is NULL"), std::string::npos);
}

// The library speaks the ABI of the uapi header it is tested against.
TEST(Device, AbiMajorMatchesHeader) {
  EXPECT_EQ(shaddr_abi_major(), static_cast<uint32_t>(SHADDR_ABI_MAJOR));
}
