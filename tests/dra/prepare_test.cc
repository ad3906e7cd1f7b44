// Reading a ResourceClaim, deciding whether it may be prepared here, and its per-claim CDI spec.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dra/dra.h"
#include "dra/hgx_node.h"
#include "support/fixture_host.h"

namespace tessera::dra {
namespace {

using nlohmann::json;

constexpr const char* kUid = "4f1c2e3a-0b6d-4c1e-9a7f-1d2e3f405162";

// A claim as the API server returns it, allocated to `devices` of our driver in pool "node-a".
std::string ClaimJson(const std::vector<std::string>& devices, const std::string& uid = kUid,
                      bool allocated = true) {
  json results = json::array();
  for (const auto& device : devices) {
    results.push_back({{"request", "gpus"},
                       {"driver", "gpu.tessera.dev"},
                       {"pool", "node-a"},
                       {"device", device},
                       {"adminAccess", nullptr}});
  }
  json claim = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceClaim"},
                {"metadata", {{"namespace", "team"}, {"name", "train"}, {"uid", uid}}},
                {"spec", {{"devices", {{"requests", json::array()}}}}}};
  if (allocated) {
    claim["status"] = {{"allocation", {{"devices", {{"results", results}}}}},
                       {"reservedFor", json::array()}};
  }
  return claim.dump();
}

class Prepare : public ::testing::Test {
 protected:
  void SetUp() override {
    auto node = testing::DescribeHgxNode();
    ASSERT_TRUE(node.ok());
    node_ = *node;
    context_.pool = "node-a";
    context_.node = &node_;
    context_.state = &state_;
  }

  Result<PreparedClaim> Plan(const std::string& claim_json, const std::string& uid = kUid) {
    auto claim = ParseResourceClaim(claim_json);
    EXPECT_TRUE(claim.ok()) << claim.error().message;
    return PlanPrepare(ClaimRef{"team", "train", uid}, *claim, context_);
  }
  std::string Name(size_t i) const { return node_.devices[i].name; }

  NodeDevices node_;
  DeviceState state_;
  PrepareContext context_;
};

TEST(ClaimJson, ReadsMetadataAndOurResults) {
  auto claim = ParseResourceClaim(ClaimJson({"gpu-0000-18-00-0"}));
  ASSERT_TRUE(claim.ok()) << claim.error().message;
  EXPECT_EQ(claim->namespace_name, "team");
  EXPECT_EQ(claim->uid, kUid);
  EXPECT_TRUE(claim->allocated);
  ASSERT_EQ(claim->results.size(), 1u);
  EXPECT_EQ(claim->results[0],
            (AllocationResult{"gpus", "gpu.tessera.dev", "node-a", "gpu-0000-18-00-0"}));
  auto pending = ParseResourceClaim(ClaimJson({}, kUid, /*allocated=*/false));
  ASSERT_TRUE(pending.ok());
  EXPECT_FALSE(pending->allocated);
}

TEST(ClaimJson, RefusesBadInputWithoutEchoingIt) {
  EXPECT_FALSE(ParseResourceClaim("not json").ok());
  EXPECT_FALSE(ParseResourceClaim("[]").ok());
  EXPECT_FALSE(ParseResourceClaim(R"({"metadata":{"name":"a","namespace":"b"}})").ok());
  auto wrong_type = ParseResourceClaim(
      R"({"metadata":{"name":"a","namespace":"b","uid":"c"},"status":{"allocation":{"devices":{"results":{}}}}})");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.error().message.find("results"), std::string::npos);
  std::string long_uid(5000, 'x');
  auto long_value = ParseResourceClaim(ClaimJson({}, long_uid));
  ASSERT_FALSE(long_value.ok());
  EXPECT_LT(long_value.error().message.size(), 200u);
  std::vector<std::string> many(kMaxResults + 1, "gpu-0000-18-00-0");
  EXPECT_FALSE(ParseResourceClaim(ClaimJson(many)).ok());
  std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_FALSE(ParseResourceClaim(deep).ok());
}

TEST_F(Prepare, OneTwoAndEightGpus) {
  for (size_t count : {1u, 2u, 8u}) {
    std::vector<std::string> devices;
    for (size_t i = 0; i < count; ++i)
      devices.push_back(Name(i));
    auto prepared = Plan(ClaimJson(devices));
    ASSERT_TRUE(prepared.ok()) << prepared.error().message;
    ASSERT_EQ(prepared->devices.size(), count);
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ(prepared->devices[i].device_name, Name(i));
      EXPECT_EQ(prepared->devices[i].pool_name, "node-a");
      EXPECT_EQ(prepared->devices[i].request_names, std::vector<std::string>{"gpus"});
      EXPECT_EQ(
          prepared->devices[i].cdi_device_ids,
          std::vector<std::string>{"gpu.tessera.dev/claim=" + std::string(kUid) + "-" + Name(i)});
    }
  }
}

TEST_F(Prepare, RefusesReplacedUnallocatedForeignAndBlocked) {
  auto replaced = Plan(ClaimJson({Name(0)}, "other-uid"));
  ASSERT_FALSE(replaced.ok());
  EXPECT_NE(replaced.error().message.find("UID"), std::string::npos);
  auto pending = Plan(ClaimJson({}, kUid, /*allocated=*/false));
  ASSERT_FALSE(pending.ok());
  EXPECT_NE(pending.error().message.find("not allocated"), std::string::npos);
  auto foreign = Plan(ClaimJson({"gpu-0000-99-00-0"}));
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.error().message.find("not published"), std::string::npos);
  state_.leases[node_.devices[1].pci_address].state = deviceplugin::LeaseState::kQuarantined;
  auto quarantined = Plan(ClaimJson({Name(0), Name(1)}));
  ASSERT_FALSE(quarantined.ok());
  EXPECT_NE(quarantined.error().message.find("quarantined"), std::string::npos);
  state_.unhealthy.insert(node_.devices[2].pci_address);
  EXPECT_FALSE(Plan(ClaimJson({Name(2)})).ok());
}

TEST_F(Prepare, LeasePinnedToAnotherClaimRefusesButItsOwnClaimPasses) {
  auto& lease = state_.leases[node_.devices[0].pci_address];
  lease.state = deviceplugin::LeaseState::kReserved;
  lease.claim = "someone-else";
  auto other = Plan(ClaimJson({Name(0)}));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message.find("another claim"), std::string::npos);
  lease.claim = kUid;
  EXPECT_TRUE(Plan(ClaimJson({Name(0)})).ok());
}

TEST_F(Prepare, OtherDriversAndPoolsAreNotOurs) {
  json claim = json::parse(ClaimJson({Name(0)}));
  auto& results = claim["status"]["allocation"]["devices"]["results"];
  results.push_back(
      {{"request", "nic"}, {"driver", "nic.example.com"}, {"pool", "node-a"}, {"device", "eth0"}});
  results.push_back({{"request", "gpus"},
                     {"driver", "gpu.tessera.dev"},
                     {"pool", "node-b"},
                     {"device", Name(1)}});
  auto prepared = Plan(claim.dump());
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  ASSERT_EQ(prepared->devices.size(), 1u);
  EXPECT_EQ(prepared->devices[0].device_name, Name(0));
  // A claim with nothing of ours on this node is refused rather than answered empty.
  results.erase(results.begin());
  EXPECT_FALSE(Plan(claim.dump()).ok());
}

TEST_F(Prepare, ClaimSpecHasOneDevicePerGpuAndSharedEditsOnce) {
  auto prepared = Plan(ClaimJson({Name(0), Name(3)}));
  ASSERT_TRUE(prepared.ok());
  auto spec = BuildClaimSpec(*prepared, node_);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->kind, "gpu.tessera.dev/claim");
  ASSERT_EQ(spec->devices.size(), 2u);
  EXPECT_EQ(spec->devices[0].name, std::string(kUid) + "-" + Name(0));
  ASSERT_EQ(spec->devices[1].container_edits.device_nodes.size(), 1u);
  EXPECT_EQ(spec->devices[1].container_edits.device_nodes[0].path, "/dev/nvidia3");
  size_t ctl = 0;
  for (const auto& node : spec->container_edits.device_nodes)
    ctl += node.path == "/dev/nvidiactl";
  EXPECT_EQ(ctl, 1u);
  // The UID starts with a digit: CDI 0.5.0 is the lowest version allowing such device names.
  EXPECT_EQ(spec->version, cdi::MinimumVersion(*spec));
  EXPECT_TRUE(cdi::CheckSpecText(cdi::ToJson(*spec)).empty());
  EXPECT_EQ(ClaimSpecPath("/var/run/cdi", kUid),
            "/var/run/cdi/gpu.tessera.dev-claim_" + std::string(kUid) + ".json");
}

}  // namespace
}  // namespace tessera::dra
