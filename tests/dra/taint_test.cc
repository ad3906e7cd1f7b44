// A faulted GPU in the ResourceSlice: published with the gpu.tessera.dev/fault taint
// (resource.k8s.io/v1 devices[].taints[]) until it is back in service, refused to new claims,
// and reported unhealthy to kubelet's health stream.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dra/dra.h"
#include "dra/hgx_node.h"

namespace tessera::dra {
namespace {

using nlohmann::json;

constexpr int64_t kFaultTime = 1795000000;  // 2026-11-18T11:06:40Z

class DraTaints : public ::testing::Test {
 protected:
  void SetUp() override {
    auto node = testing::DescribeHgxNode();
    ASSERT_TRUE(node.ok());
    node_ = *node;
    options_.node_name = "node-a";
  }
  json Slice(const DeviceState& state) const {
    return json::parse(BuildResourceSlice(node_, PublishedDevices(node_, state), options_, "",
                                          DeviceTaints(node_, state)));
  }
  const std::string& Pci(size_t i) const { return node_.devices[i].pci_address; }

  NodeDevices node_;
  SliceOptions options_;
};

TEST_F(DraTaints, AFaultedGpuStaysPublishedWithItsTaint) {
  DeviceState state;
  state.faults[Pci(3)] = {"xid-79", TaintEffect::kNoExecute, kFaultTime, std::nullopt,
                          "gpu-fault: Xid 79 (GPU has fallen off the bus) on " + Pci(3)};
  json slice = Slice(state);
  const json& devices = slice["spec"]["devices"];
  ASSERT_EQ(devices.size(), 8u);
  EXPECT_EQ(devices[3]["name"], node_.devices[3].name);
  EXPECT_EQ(devices[3]["taints"], json::parse(R"([{"key":"gpu.tessera.dev/fault","value":"xid-79",
      "effect":"NoExecute","timeAdded":"2026-11-18T11:06:40Z"}])"));
  for (size_t i = 0; i < devices.size(); ++i) {
    EXPECT_EQ(devices[i].contains("taints"), i == 3) << i;
  }
  // Published, but no new claim is prepared on it.
  EXPECT_EQ(WhyUnavailable(node_.devices[3], state), "");
  std::string why = WhyUnavailable(node_.devices[3], state, "claim-uid");
  EXPECT_NE(why.find("xid-79"), std::string::npos) << why;
  EXPECT_NE(why.find("fallen off the bus"), std::string::npos) << why;
  EXPECT_EQ(WhyUnavailable(node_.devices[2], state, "claim-uid"), "");
}

TEST_F(DraTaints, ADrainIsNoScheduleAndAVanishedGpuIsStillWithdrawn) {
  DeviceState state;
  state.faults[Pci(1)] = {"recovery-action", TaintEffect::kNoSchedule, kFaultTime, std::nullopt,
                          "drain and reset"};
  state.unhealthy.insert(Pci(2));
  json slice = Slice(state);
  const json& devices = slice["spec"]["devices"];
  ASSERT_EQ(devices.size(), 7u);
  EXPECT_EQ(devices[1]["taints"][0]["effect"], "NoSchedule");
  for (const auto& device : devices)
    EXPECT_NE(device["name"], node_.devices[2].name);
}

TEST_F(DraTaints, TheDriverReportsTheFaultAsHealthAndTheTaintAsAChange) {
  DriverConfig config;
  config.node_name = "node-a";
  Driver driver(config, node_, [](const std::string&, const std::string&) -> Result<std::string> {
    return NotFound("none");
  });
  auto health_of = [&](size_t i) {
    for (const auto& device : driver.Health().devices)
      if (device.device_name == node_.devices[i].name) return device.health;
    return HealthStatus::kUnknown;
  };
  EXPECT_EQ(health_of(4), HealthStatus::kHealthy);
  uint64_t version = driver.Health().version;
  DeviceState state;
  state.faults[Pci(4)] = {"xid-48", TaintEffect::kNoExecute, kFaultTime, std::nullopt, "ecc"};
  // The devices published stay the same; the taint is a change all the same.
  EXPECT_TRUE(driver.SetState(state));
  EXPECT_EQ(driver.Published().size(), 8u);
  EXPECT_EQ(driver.Taints().size(), 1u);
  EXPECT_EQ(health_of(4), HealthStatus::kUnhealthy);
  EXPECT_EQ(health_of(5), HealthStatus::kHealthy);
  EXPECT_GT(driver.Health().version, version);
  EXPECT_FALSE(driver.SetState(state));  // nothing new
  EXPECT_TRUE(driver.SetState(DeviceState{}));
  EXPECT_TRUE(driver.Taints().empty());
  EXPECT_EQ(health_of(4), HealthStatus::kHealthy);
}

TEST_F(DraTaints, ASliceWithTaintsHoldsAtMost64Devices) {
  NodeDevices many;
  for (int i = 0; i < 100; ++i) {
    NodeDevice device;
    device.pci_address = "0000:" + std::to_string(10 + i) + ":00.0";
    device.name = DeviceNameFor(device.pci_address);
    device.type = "gpu";
    many.devices.push_back(device);
  }
  DeviceState state;
  EXPECT_EQ(PublishedDevices(many, state).size(), 100u);
  state.faults[many.devices[0].pci_address] = {"xid-79", TaintEffect::kNoExecute, kFaultTime,
                                               std::nullopt, "lost"};
  EXPECT_EQ(PublishedDevices(many, state).size(), kMaxTaintedSliceDevices);
  EXPECT_EQ(DeviceTaints(many, state).size(), 1u);
}

}  // namespace
}  // namespace tessera::dra
