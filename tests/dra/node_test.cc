// This node's devices and its ResourceSlice, on the materialized fixture hosts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dra/dra.h"
#include "support/fixture_host.h"

namespace tessera::dra {
namespace {

using nlohmann::json;

inventory::Inventory Read(const std::string& fixture) {
  inventory::ReadOptions options;
  options.root = testing::MaterializeHost(fixture);
  auto inv = inventory::ReadInventory(options);
  EXPECT_TRUE(inv.ok());
  return *inv;
}

NodeDevices Describe(const std::string& fixture, NodeOptions options = {}) {
  auto node = DescribeNode(Read(fixture), options);
  EXPECT_TRUE(node.ok()) << node.error().message;
  return *node;
}

TEST(DeviceName, IsADnsLabelFromThePciAddress) {
  EXPECT_EQ(DeviceNameFor("0000:18:00.0"), "gpu-0000-18-00-0");
  EXPECT_EQ(DeviceNameFor("0000:AB:00.1"), "gpu-0000-ab-00-1");
}

TEST(Node, HgxDriverHostPublishesEightGpusWithEdits) {
  auto node = Describe("hgx-h100-dgx");
  ASSERT_EQ(node.devices.size(), 8u);
  const NodeDevice& first = node.devices[0];
  EXPECT_EQ(first.name, DeviceNameFor(first.pci_address));
  EXPECT_EQ(first.type, "gpu");
  EXPECT_EQ(first.uuid, "GPU-5e4b7c10-3c2a-4d8e-9f10-a1b2c3d4e5f0");
  EXPECT_EQ(first.numa_node, 0);
  EXPECT_FALSE(first.driver_version.empty());
  // The GPU's own node only; nvidiactl and the driver files are shared edits.
  ASSERT_EQ(first.edits.device_nodes.size(), 1u);
  EXPECT_EQ(first.edits.device_nodes[0].path, "/dev/nvidia0");
  bool has_ctl = false;
  for (const auto& n : first.shared_edits.device_nodes)
    has_ctl = has_ctl || n.path == "/dev/nvidiactl";
  EXPECT_TRUE(has_ctl);
  EXPECT_FALSE(first.shared_edits.mounts.empty());
  EXPECT_EQ(node.Find(first.name), &node.devices[0]);
  EXPECT_EQ(node.Find("gpu-nope"), nullptr);
}

TEST(Node, VfioHostPublishesVfioDevicesWithTheirGroup) {
  auto node = Describe("hgx-h100-vfio");
  ASSERT_EQ(node.devices.size(), 8u);
  const NodeDevice& first = node.devices[0];
  EXPECT_EQ(first.type, "vfio");
  EXPECT_TRUE(first.uuid.empty());
  EXPECT_TRUE(first.driver_version.empty());
  ASSERT_FALSE(first.edits.device_nodes.empty());
  EXPECT_EQ(first.edits.device_nodes[0].path.rfind("/dev/vfio/", 0), 0u);
}

TEST(Node, RefusesDriModeAndHasNothingOnANoGpuHost) {
  NodeOptions options;
  options.mode = cdi::Mode::kDri;
  EXPECT_FALSE(DescribeNode(Read("no-gpu"), options).ok());
  EXPECT_TRUE(Describe("no-gpu").devices.empty());
}

TEST(Node, PartitionTableAddsModuleAndPartitions) {
  NodeOptions options;
  options.partitions = topology::HgxH100Table();
  auto node = Describe("hgx-h100-dgx");
  options.partitions->pci_addresses[3] = node.devices[0].pci_address;
  node = Describe("hgx-h100-dgx", options);
  ASSERT_TRUE(node.devices[0].nvlink_module);
  EXPECT_EQ(*node.devices[0].nvlink_module, 3);
  // Module 3 is in P0 {1..8}, P1 {1,2,3,4}, P3 {1,3} and its single P9.
  EXPECT_EQ(node.devices[0].partition_ids, (std::vector<uint32_t>{0, 1, 3, 9}));
  EXPECT_FALSE(node.devices[1].nvlink_module);
}

TEST(Slice, OnePoolPerNodeWithStandardAttributes) {
  auto node = Describe("hgx-h100-dgx");
  DeviceState state;
  SliceOptions options;
  options.node_name = "Node-A";
  options.generation = 7;
  json slice = json::parse(BuildResourceSlice(node, PublishedDevices(node, state), options, "42"));
  EXPECT_EQ(slice["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(slice["kind"], "ResourceSlice");
  EXPECT_EQ(slice["metadata"]["name"], "node-a-gpu.tessera.dev");
  EXPECT_EQ(slice["metadata"]["resourceVersion"], "42");
  EXPECT_EQ(slice["spec"]["driver"], "gpu.tessera.dev");
  EXPECT_EQ(slice["spec"]["nodeName"], "Node-A");
  EXPECT_EQ(slice["spec"]["pool"]["name"], "Node-A");
  EXPECT_EQ(slice["spec"]["pool"]["generation"], 7);
  EXPECT_EQ(slice["spec"]["pool"]["resourceSliceCount"], 1);
  ASSERT_EQ(slice["spec"]["devices"].size(), 8u);
  const json& attributes = slice["spec"]["devices"][0]["attributes"];
  EXPECT_EQ(attributes["resource.kubernetes.io/pciBusID"]["string"], node.devices[0].pci_address);
  EXPECT_EQ(attributes["uuid"]["string"], node.devices[0].uuid);
  EXPECT_EQ(attributes["type"]["string"], "gpu");
  EXPECT_EQ(attributes["numaNode"]["int"], 0);
  // Version attributes are semantic versions: no leading zeros, three parts.
  const std::string version = attributes["driverVersion"]["version"];
  EXPECT_EQ(std::count(version.begin(), version.end(), '.'), 2);
  EXPECT_EQ(version.find(".0"), std::string::npos) << version;
  EXPECT_TRUE(attributes.contains("productName"));
}

TEST(Slice, MemoryCapacityComesFromTheBoardIdAndIsOmittedWhenUnknown) {
  // H100 SXM5 80GB (10de:2330): its BAR1 is 128 GiB, the board has 80 GiB.
  auto hgx = Describe("hgx-h100-dgx");
  ASSERT_TRUE(hgx.devices[0].memory_bytes);
  EXPECT_EQ(*hgx.devices[0].memory_bytes, uint64_t{80} << 30);
  json slice = json::parse(BuildResourceSlice(hgx, PublishedDevices(hgx, {}), {}));
  EXPECT_EQ(slice["spec"]["devices"][0]["capacity"]["memory"]["value"], "80Gi");
  // The vfio-bound boards are the same hardware.
  auto vfio = Describe("hgx-h100-vfio");
  EXPECT_EQ(vfio.devices[0].memory_bytes, hgx.devices[0].memory_bytes);
  // A board whose ID does not fix its memory publishes no capacity at all.
  auto inventory = Read("hgx-h100-dgx");
  for (auto& device : inventory.devices) {
    if (device.device_id == 0x2330) device.device_id = 0x2335;
  }
  auto unknown = DescribeNode(inventory, {});
  ASSERT_TRUE(unknown.ok());
  ASSERT_EQ(unknown->devices.size(), 8u);
  EXPECT_FALSE(unknown->devices[0].memory_bytes);
  slice = json::parse(BuildResourceSlice(*unknown, PublishedDevices(*unknown, {}), {}));
  EXPECT_FALSE(slice["spec"]["devices"][0].contains("capacity"));
  EXPECT_EQ(KnownBoardMemory(0x1002, 0x2330), std::nullopt);  // the ID is NVIDIA's only
}

TEST(Slice, UnhealthyAndBlockedDevicesAreWithdrawnAndComeBack) {
  auto node = Describe("hgx-h100-dgx");
  DeviceState state;
  state.unhealthy.insert(node.devices[0].pci_address);
  state.leases[node.devices[1].pci_address].state = deviceplugin::LeaseState::kQuarantined;
  state.leases[node.devices[2].pci_address].state = deviceplugin::LeaseState::kChecking;
  state.leases[node.devices[3].pci_address].state = deviceplugin::LeaseState::kDraining;
  state.leases[node.devices[4].pci_address].state = deviceplugin::LeaseState::kActive;
  state.leases[node.devices[4].pci_address].claim = "some-claim";
  auto published = PublishedDevices(node, state);
  EXPECT_EQ(published, (std::vector<std::string>{node.devices[4].name, node.devices[5].name,
                                                 node.devices[6].name, node.devices[7].name}));
  state = {};
  EXPECT_EQ(PublishedDevices(node, state).size(), 8u);
}

}  // namespace
}  // namespace tessera::dra
