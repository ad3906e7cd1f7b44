// Builds nothing itself: runs the C consumer (c_api_program.c, linked against libtessera.so)
// on a fixture host and checks what it printed.
#include <gtest/gtest.h>

#include "support/fixture_host.h"

namespace {

TEST(CApi, CProgramReadsTheWorkstationFixture) {
  std::string root = tessera::testing::MaterializeHost("workstation-intel-nvidia");
  int status = -1;
  std::string out = tessera::testing::RunCommand(
      std::string(TESSERA_BINARY_DIR) + "/tests/inventory/c_api_program " + root, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("0000:00:02.0 8086:a780 kind=0 driver=i915 group=0 numa=-1 nodes=2 "
                     "/dev/dri/card0=226:0 /dev/dri/renderD128=226:128"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("0000:01:00.0 10de:2684 kind=0 driver=nvidia group=1 numa=-1 nodes=3"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("driver 580.65.06"), std::string::npos) << out;
}

TEST(CApi, CProgramOnAHostWithoutNvidiaReportsNotFound) {
  std::string root = tessera::testing::MaterializeHost("amd-gpu");
  int status = -1;
  std::string out = tessera::testing::RunCommand(
      std::string(TESSERA_BINARY_DIR) + "/tests/inventory/c_api_program " + root, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("driver not found"), std::string::npos) << out;
}

}  // namespace
