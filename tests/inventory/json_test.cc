#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "inventory/inventory.h"
#include "support/fixture_host.h"

namespace tessera::inventory {
namespace {

Inventory ReadFixture(const std::string& name) {
  ReadOptions options;
  options.root = testing::MaterializeHost(name);
  auto inventory = ReadInventory(options);
  EXPECT_TRUE(inventory.ok());
  return *inventory;
}

TEST(InventoryJson, FollowsTheDocumentedSchema) {
  auto doc = nlohmann::json::parse(ToJson(ReadFixture("hgx-h100-dgx")));
  EXPECT_EQ(doc["schema_version"], 1);
  ASSERT_EQ(doc["devices"].size(), 12u);
  const auto& gpu = doc["devices"][4];
  EXPECT_EQ(gpu["pci_address"], "0000:18:00.0");
  EXPECT_EQ(gpu["vendor_id"], "10de");
  EXPECT_EQ(gpu["device_id"], "2330");
  EXPECT_EQ(gpu["class_code"], "030200");
  EXPECT_EQ(gpu["kind"], "gpu");
  EXPECT_EQ(gpu["driver"], "nvidia");
  EXPECT_TRUE(gpu["iommu_group"].is_number());
  EXPECT_EQ(gpu["numa_node"], 0);
  EXPECT_EQ(gpu["bars"][1]["size"], uint64_t{128} << 30);
  EXPECT_EQ(gpu["device_nodes"][0]["path"], "/dev/nvidia0");
  EXPECT_EQ(gpu["device_nodes"][0]["major"], 195);
  EXPECT_EQ(gpu["upstream_bridges"].size(), 3u);
  EXPECT_TRUE(gpu["warnings"].is_array());
  EXPECT_EQ(doc["devices"][0]["kind"], "nvswitch");
  EXPECT_EQ(doc["iommu_groups"][std::to_string(gpu["iommu_group"].get<int>())][0], "0000:18:00.0");
  EXPECT_EQ(doc["nvidia_driver"]["version"], "580.65.06");
  EXPECT_EQ(doc["nvidia_driver"]["binaries"][0], "/usr/bin/nvidia-smi");
  EXPECT_EQ(doc["nvidia_driver"]["ipc_sockets"].size(), 2u);
}

TEST(InventoryJson, DriverIsNullWhenNoneAndNvidiaDriverNullWithoutNvidia) {
  auto doc = nlohmann::json::parse(ToJson(ReadFixture("amd-gpu")));
  EXPECT_TRUE(doc["nvidia_driver"].is_null());
  auto vfio = nlohmann::json::parse(ToJson(ReadFixture("hgx-h100-vfio")));
  EXPECT_EQ(vfio["devices"][0]["kind"], "companion");
}

TEST(InventoryJson, RoundTripsEveryFixture) {
  for (const char* name :
       {"hgx-h100-dgx", "hgx-h100-vfio", "workstation-intel-nvidia", "amd-gpu", "no-gpu"}) {
    std::string first = ToJson(ReadFixture(name));
    auto parsed = FromJson(first);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.error().message;
    EXPECT_EQ(ToJson(*parsed), first) << name;
  }
}

TEST(InventoryJson, RejectsBadFieldsByName) {
  auto doc = nlohmann::json::parse(ToJson(ReadFixture("hgx-h100-dgx")));
  auto expect_error = [](nlohmann::json d, const std::string& field) {
    auto result = FromJson(d.dump());
    ASSERT_FALSE(result.ok()) << field;
    EXPECT_NE(result.error().message.find(field), std::string::npos) << result.error().message;
  };
  auto bad = doc;
  bad["devices"][2]["vendor_id"] = "0x10de";
  expect_error(bad, "devices[2].vendor_id");
  bad = doc;
  bad["devices"][1]["kind"] = "toaster";
  expect_error(bad, "devices[1].kind");
  bad = doc;
  bad["devices"][0].erase("numa_node");
  expect_error(bad, "devices[0].numa_node");
  bad = doc;
  bad["schema_version"] = 7;
  expect_error(bad, "schema_version");
  bad = doc;
  bad["devices"][4]["device_nodes"][0]["major"] = "195";
  expect_error(bad, "devices[4].device_nodes[0].major");
  EXPECT_FALSE(FromJson("{").ok());
}

TEST(InventoryCli, JsonOutputMatchesTheLibrary) {
  std::string root = testing::MaterializeHost("workstation-intel-nvidia");
  int status = -1;
  std::string out = testing::RunCommand(
      testing::TesseraBinary() + " inventory --root " + root + " --format json", &status);
  EXPECT_EQ(status, 0);
  ReadOptions options;
  options.root = root;
  EXPECT_EQ(out, ToJson(*ReadInventory(options)) + "\n");
}

TEST(InventoryCli, TableNamesDevicesAndBadRootExitsNonZero) {
  std::string root = testing::MaterializeHost("amd-gpu");
  int status = -1;
  std::string out =
      testing::RunCommand(testing::TesseraBinary() + " inventory --root " + root, &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(out.find("0000:03:00.0"), std::string::npos);
  EXPECT_NE(out.find("/dev/kfd"), std::string::npos);
  testing::RunCommand(testing::TesseraBinary() + " inventory --root /nonexistent 2>/dev/null",
                      &status);
  EXPECT_EQ(status, 2);
  testing::RunCommand(testing::TesseraBinary() + " inventory --format xml 2>/dev/null", &status);
  EXPECT_NE(status, 0);
}

}  // namespace
}  // namespace tessera::inventory
