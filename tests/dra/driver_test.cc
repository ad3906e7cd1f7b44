// The driver's files: the per-claim CDI spec and checkpoint file, across retries and restarts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "dra/dra.h"
#include "dra/hgx_node.h"
#include "support/fixture_host.h"

namespace tessera::dra {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kUid = "9d0b7a1e-1111-4222-8333-944455556666";

class DriverFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    auto node = testing::DescribeHgxNode();
    ASSERT_TRUE(node.ok());
    node_ = *node;
    dir_ = fs::temp_directory_path() /
           ("dra-driver-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "cdi");
    fs::create_directories(dir_ / "plugin");
    config_.node_name = "node-a";
    config_.cdi_dir = (dir_ / "cdi").string();
    config_.plugin_dir = (dir_ / "plugin").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Driver> Make(std::vector<std::string>* dropped = nullptr) {
    auto driver = std::make_unique<Driver>(
        config_, node_,
        [this](const std::string& ns, const std::string& name) -> Result<std::string> {
          ++gets_;
          if (ns != "team" || name != "train") return NotFound("no such claim");
          return claim_;
        });
    auto loaded = driver->Load();
    EXPECT_TRUE(loaded.ok()) << loaded.error().message;
    if (loaded && dropped) *dropped = *loaded;
    return driver;
  }
  // Prepares ref_ with a driver that is gone again afterwards (a plugin that restarts).
  void PrepareWithADriverThatStops(PreparedClaim* prepared) {
    auto driver = Make();
    auto result = driver->Prepare(ref_);
    ASSERT_TRUE(result.ok()) << result.error().message;
    *prepared = *result;
  }
  void Allocate(const std::vector<std::string>& devices) {
    json results = json::array();
    for (const auto& d : devices)
      results.push_back(
          {{"request", "gpus"}, {"driver", "gpu.tessera.dev"}, {"pool", "node-a"}, {"device", d}});
    claim_ = json{{"metadata", {{"namespace", "team"}, {"name", "train"}, {"uid", kUid}}},
                  {"status", {{"allocation", {{"devices", {{"results", results}}}}}}}}
                 .dump();
  }
  std::string SpecPath() const { return ClaimSpecPath(config_.cdi_dir, kUid); }
  std::string ClaimFile() const {
    return PreparedClaimPath(config_.plugin_dir + "/prepared", kUid);
  }

  NodeDevices node_;
  fs::path dir_;
  DriverConfig config_;
  std::string claim_;
  int gets_ = 0;
  const ClaimRef ref_{"team", "train", kUid};
};

TEST_F(DriverFiles, PrepareWritesTheSpecAndRetriesAnswerTheSameWithoutAGet) {
  Allocate({node_.devices[0].name, node_.devices[1].name});
  auto driver = Make();
  auto first = driver->Prepare(ref_);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(gets_, 1);
  ASSERT_TRUE(fs::exists(SpecPath()));
  EXPECT_TRUE(cdi::CheckSpecText(*ReadWholeFile(SpecPath())).empty());
  auto again = driver->Prepare(ref_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(gets_, 1);
}

TEST_F(DriverFiles, ARetryAfterTheSpecVanishedWritesItAgain) {
  // After a reboot the CDI dir (tmpfs on real nodes) is empty while the checkpoint remains, and
  // kubelet prepares the claim again: the CDI ID it gets back must resolve.
  Allocate({node_.devices[0].name, node_.devices[1].name});
  std::string written;
  {
    auto driver = Make();
    ASSERT_TRUE(driver->Prepare(ref_).ok());
    written = *ReadWholeFile(SpecPath());
  }
  ASSERT_TRUE(fs::remove(SpecPath()));
  claim_ = "{}";  // answered from the checkpoint, without the claim
  auto restarted = Make();
  auto again = restarted->Prepare(ref_);
  ASSERT_TRUE(again.ok()) << again.error().message;
  ASSERT_TRUE(fs::exists(SpecPath()));
  EXPECT_EQ(*ReadWholeFile(SpecPath()), written);
}

TEST_F(DriverFiles, RefusedClaimWritesNothing) {
  Allocate({"gpu-0000-99-00-0"});
  auto driver = Make();
  EXPECT_FALSE(driver->Prepare(ref_).ok());
  EXPECT_FALSE(fs::exists(SpecPath()));
  EXPECT_TRUE(fs::is_empty(driver->PreparedDir()));
}

TEST_F(DriverFiles, RestartedDriverKnowsPreparedClaimsAndUnprepares) {
  Allocate({node_.devices[0].name});
  PreparedClaim prepared;
  ASSERT_NO_FATAL_FAILURE(PrepareWithADriverThatStops(&prepared));
  claim_ = "{}";  // the claim object is gone: neither call may need it now
  auto restarted = Make();
  auto again = restarted->Prepare(ref_);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(*again, prepared);
  ASSERT_TRUE(restarted->Unprepare(ref_).ok());
  EXPECT_FALSE(fs::exists(SpecPath()));
  EXPECT_FALSE(fs::exists(ClaimFile()));
  auto checkpoint = ReadPreparedClaims(restarted->PreparedDir(), nullptr);
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_TRUE(checkpoint->empty());
  // Unknown claims unprepare successfully (kubelet retries after a lost answer).
  EXPECT_TRUE(restarted->Unprepare(ClaimRef{"x", "y", "never-prepared"}).ok());
}

TEST_F(DriverFiles, ATornClaimFileIsDroppedOnStartAndTheClaimIsFetchedAgain) {
  // A prepare's file is not fsynced: a power loss may leave it empty or cut short.
  Allocate({node_.devices[0].name});
  PreparedClaim prepared;
  ASSERT_NO_FATAL_FAILURE(PrepareWithADriverThatStops(&prepared));
  std::string text = *ReadWholeFile(ClaimFile());
  ASSERT_TRUE(WriteFileAtomically(ClaimFile(), text.substr(0, text.size() / 2)).ok());
  std::vector<std::string> dropped;
  auto restarted = Make(&dropped);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_NE(dropped[0].find(ClaimFile()), std::string::npos) << dropped[0];
  EXPECT_FALSE(fs::exists(ClaimFile()));
  auto again = restarted->Prepare(ref_);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(*again, prepared);
  EXPECT_EQ(gets_, 2);
  EXPECT_TRUE(fs::exists(ClaimFile()));
}

TEST_F(DriverFiles, TheCheckpointOfAnEarlierVersionBecomesClaimFiles) {
  Allocate({node_.devices[0].name, node_.devices[1].name});
  PreparedClaim prepared;
  {
    auto driver = Make();
    auto result = driver->Prepare(ref_);
    ASSERT_TRUE(result.ok());
    prepared = *result;
  }
  // As an earlier version left it: every claim in <plugin-dir>/checkpoint.json.
  fs::remove_all(config_.plugin_dir + "/prepared");
  std::string legacy = config_.plugin_dir + "/checkpoint.json";
  ASSERT_TRUE(WriteCheckpoint(legacy, {{kUid, prepared}}).ok());
  claim_ = "{}";  // answered from the checkpoint, without the claim
  auto restarted = Make();
  EXPECT_FALSE(fs::exists(legacy));
  EXPECT_TRUE(fs::exists(ClaimFile()));
  auto again = restarted->Prepare(ref_);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(*again, prepared);
  EXPECT_EQ(gets_, 1);
}

TEST_F(DriverFiles, AUidThatCannotNameAFileIsRefusedWritingAndRemovingNothing) {
  Allocate({node_.devices[0].name});
  auto driver = Make();
  std::string victim = config_.plugin_dir + "/keep.json";
  ASSERT_TRUE(WriteFileAtomically(victim, "{}").ok());
  for (const char* uid : {"../keep", "a/b", ".hidden", ""}) {
    ClaimRef ref{"team", "train", uid};
    EXPECT_FALSE(driver->Prepare(ref).ok()) << uid;
    EXPECT_FALSE(driver->Unprepare(ref).ok()) << uid;
  }
  EXPECT_TRUE(fs::exists(victim));
  EXPECT_EQ(gets_, 0);
  EXPECT_TRUE(fs::is_empty(config_.cdi_dir));
  EXPECT_TRUE(fs::is_empty(driver->PreparedDir()));
}

TEST_F(DriverFiles, StateChangesReportWhetherThePublishedSetChanged) {
  auto driver = Make();
  EXPECT_EQ(driver->Published().size(), 8u);
  DeviceState state;
  state.unhealthy.insert(node_.devices[0].pci_address);
  EXPECT_TRUE(driver->SetState(state));
  EXPECT_EQ(driver->Published().size(), 7u);
  EXPECT_FALSE(driver->SetState(state));
  EXPECT_TRUE(driver->SetState({}));
  EXPECT_EQ(driver->Published().size(), 8u);
}

TEST_F(DriverFiles, HealthFollowsTheUnhealthySetButNotLeases) {
  auto driver = Make();
  HealthSnapshot start = driver->Health();
  ASSERT_EQ(start.devices.size(), 8u);
  for (const auto& device : start.devices)
    EXPECT_EQ(device.health, HealthStatus::kHealthy);
  // A lease blocks publishing but is no health change: the version stays.
  DeviceState leased;
  leased.leases[node_.devices[1].pci_address].state = deviceplugin::LeaseState::kQuarantined;
  driver->SetState(leased);
  EXPECT_EQ(driver->Health().version, start.version);
  DeviceState sick = leased;
  sick.unhealthy.insert(node_.devices[0].pci_address);
  driver->SetState(sick);
  HealthSnapshot after = driver->Health();
  EXPECT_NE(after.version, start.version);
  EXPECT_EQ(after.devices[0].device_name, node_.devices[0].name);
  EXPECT_EQ(after.devices[0].health, HealthStatus::kUnhealthy);
  EXPECT_GE(after.devices[0].changed_unix_seconds, start.devices[0].changed_unix_seconds);
  EXPECT_EQ(after.devices[1].health, HealthStatus::kHealthy);
  // A waiter on an old version returns at once.
  driver->WaitForHealthChange(start.version, std::chrono::hours(1));
}

}  // namespace
}  // namespace tessera::dra
