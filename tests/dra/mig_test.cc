// MIG devices in the DRA node model and ResourceSlice: a MIG-enabled GPU is published as its
// slices (type mig, profile, parentUUID, uuid; capacity memory, multiprocessors, memorySlice<i>)
// with the CDI edits of the slice.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dra/dra.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"

namespace tessera::dra {
namespace {

using nlohmann::json;

NodeDevices Describe(const std::string& fixture) {
  testing::FakeNvmlState nvml(fixture);
  inventory::ReadOptions read;
  read.root = testing::MaterializeHost(fixture);
  read.nvml_library = FAKE_NVML;
  auto inv = inventory::ReadInventory(read);
  EXPECT_TRUE(inv.ok());
  auto node = DescribeNode(*inv, NodeOptions{});
  EXPECT_TRUE(node.ok()) << node.error().message;
  return node.ok() ? *node : NodeDevices{};
}

TEST(DraMig, AMigEnabledGpuIsPublishedAsItsSlices) {
  NodeDevices node = Describe("h100-mig-mixed");
  EXPECT_TRUE(node.warnings.empty()) << node.warnings.front();
  std::vector<std::string> names;
  for (const auto& d : node.devices)
    names.push_back(d.name + "/" + d.type);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "gpu-0000-18-00-0-mig-1-0/mig", "gpu-0000-18-00-0-mig-5-0/mig",
                       "gpu-0000-18-00-0-mig-13-0/mig", "gpu-0000-2a-00-0/gpu"}));
  const NodeDevice* slice = node.Find("gpu-0000-18-00-0-mig-5-0");
  ASSERT_NE(slice, nullptr);
  EXPECT_EQ(slice->profile, "2g.20gb");
  EXPECT_EQ(slice->uuid, "MIG-8e2c3d4b-0005-4000-8004-000000000000");
  EXPECT_EQ(slice->parent_uuid, "GPU-8e2c3d4b-1a5f-4b6c-8d7e-2f3a4b5c6d01");
  EXPECT_EQ(slice->memory_slices, (std::vector<uint32_t>{4, 5}));
  std::vector<std::string> nodes;
  for (const auto& n : slice->edits.device_nodes)
    nodes.push_back(n.path);
  EXPECT_EQ(nodes, (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap48",
                                             "/dev/nvidia-caps/nvidia-cap49", "/dev/nvidia0"}));
}

TEST(DraMig, TheSliceCarriesMigAttributesAndCapacities) {
  NodeDevices node = Describe("h100-mig-mixed");
  SliceOptions options;
  options.node_name = "node-a";
  json slice =
      json::parse(BuildResourceSlice(node, PublishedDevices(node, DeviceState{}), options, ""));
  const json* mig = nullptr;
  for (const auto& d : slice["spec"]["devices"])
    if (d["name"] == "gpu-0000-18-00-0-mig-1-0") mig = &d;
  ASSERT_NE(mig, nullptr) << slice.dump(2);
  EXPECT_EQ((*mig)["attributes"]["type"]["string"], "mig");
  EXPECT_EQ((*mig)["attributes"]["profile"]["string"], "3g.40gb");
  EXPECT_EQ((*mig)["attributes"]["parentUUID"]["string"],
            "GPU-8e2c3d4b-1a5f-4b6c-8d7e-2f3a4b5c6d01");
  EXPECT_EQ((*mig)["attributes"]["uuid"]["string"], "MIG-8e2c3d4b-0001-4000-8000-000000000000");
  EXPECT_EQ((*mig)["capacity"]["memory"]["value"], std::to_string(40192ull << 20));
  EXPECT_EQ((*mig)["capacity"]["multiprocessors"]["value"], "60");
  for (int s = 0; s < 4; ++s)
    EXPECT_EQ((*mig)["capacity"]["memorySlice" + std::to_string(s)]["value"], "1") << s;
  EXPECT_FALSE((*mig)["capacity"].contains("memorySlice4"));
  EXPECT_LE((*mig)["attributes"].size() + (*mig)["capacity"].size(), 32u);
}

TEST(DraMig, SlicesFollowTheirParentsHealth) {
  NodeDevices node = Describe("h100-mig-mixed");
  DeviceState state;
  state.unhealthy.insert("0000:18:00.0");
  EXPECT_EQ(PublishedDevices(node, state), std::vector<std::string>{"gpu-0000-2a-00-0"});
}

TEST(DraMig, AFaultOfOneGpuInstanceTaintsOnlyItsSlice) {
  NodeDevices node = Describe("h100-mig-mixed");
  DeviceState state;
  state.faults["0000:18:00.0"] = {"xid-94", TaintEffect::kNoExecute, 1700000000, 5, "contained"};
  // Every slice stays published; only the instance's slice carries the taint.
  EXPECT_EQ(PublishedDevices(node, state).size(), 4u);
  auto taints = DeviceTaints(node, state);
  ASSERT_EQ(taints.size(), 1u);
  EXPECT_EQ(taints.begin()->first, "gpu-0000-18-00-0-mig-5-0");
  EXPECT_EQ(taints.begin()->second.effect, TaintEffect::kNoExecute);
  EXPECT_NE(WhyUnavailable(*node.Find("gpu-0000-18-00-0-mig-5-0"), state, "uid"), "");
  EXPECT_EQ(WhyUnavailable(*node.Find("gpu-0000-18-00-0-mig-1-0"), state, "uid"), "");
  // A fault of the whole GPU taints every slice of it, and nothing on the other GPU.
  state.faults["0000:18:00.0"].gpu_instance_id.reset();
  taints = DeviceTaints(node, state);
  EXPECT_EQ(taints.size(), 3u);
  EXPECT_EQ(taints.count("gpu-0000-2a-00-0"), 0u);
  // A GPU published whole carries the fault of any of its instances.
  state.faults.clear();
  state.faults["0000:2a:00.0"] = {"xid-94", TaintEffect::kNoExecute, 1700000000, 3, "contained"};
  taints = DeviceTaints(node, state);
  ASSERT_EQ(taints.size(), 1u);
  EXPECT_EQ(taints.begin()->first, "gpu-0000-2a-00-0");
}

}  // namespace
}  // namespace tessera::dra
