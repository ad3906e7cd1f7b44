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

TEST(CApi, CProgramListsMigDevicesWithTheirCapabilityNodes) {
  std::string root = tessera::testing::MaterializeHost("h100-mig-mixed");
  int status = -1;
  std::string out = tessera::testing::RunCommand(
      std::string(TESSERA_BINARY_DIR) + "/tests/inventory/c_api_program " + root, &status);
  ASSERT_EQ(status, 0) << out;
  // A fixture root gets no NVML: mode unknown, profile unknown, nodes from procfs.
  EXPECT_NE(out.find("mig 0000:18:00.0 current=-1 pending=-1 devices=3"), std::string::npos) << out;
  EXPECT_NE(out.find("mig-device 2 gi=13 ci=0 profile= id=-1 "
                     "gi-node=/dev/nvidia-caps/nvidia-cap120=509:120 "
                     "ci-node=/dev/nvidia-caps/nvidia-cap121=509:121"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("mig 0000:2a:00.0"), std::string::npos) << out;
}

}  // namespace
