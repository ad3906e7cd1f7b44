// The libnvfm.so.1 adapter against the stand-in library (fake_nvfm.cc) and its shared state.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "fabricmanager/fabricmanager.h"
#include "support/fake_fabric_manager.h"
#include "support/wait.h"

namespace tessera::fabricmanager {
namespace {

using testing::FakeFabricManager;

class NvfmAdapter : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("FAKE_NVFM_MODE"); }

  static Result<std::unique_ptr<FabricManager>> Connect(const std::string& library,
                                                        const std::string& address,
                                                        unsigned deadline_ms = 10000) {
    NvfmOptions options;
    options.library = library;
    options.address = *ParseFabricAddress(address);
    options.timeout_ms = deadline_ms;
    return ConnectNvfm(options);
  }

  // After a hung call the library is not asked for one deadline: wait that out, so that the next
  // test (in this process when the binary runs alone) starts with a fabric manager that answers.
  void WaitForAnswers() {
    fm_.Set("hang", "none");
    EXPECT_TRUE(testing::WaitUntil(
        [&] { return Connect(FAKE_NVFM, "unix:/run/nvidia-fabricmanager/socket", 300).ok(); }));
  }

  std::unique_ptr<FabricManager> Fake() {
    auto manager = Connect(FAKE_NVFM, "unix:/run/nvidia-fabricmanager/socket");
    EXPECT_TRUE(manager.ok()) << manager.error().message;
    return manager.ok() ? std::move(*manager) : nullptr;
  }

  FakeFabricManager fm_{"unix:/run/nvidia-fabricmanager/socket"};
};

TEST_F(NvfmAdapter, MissingLibraryIsUnavailable) {
  auto manager = Connect("/nonexistent/libnvfm.so.1", "127.0.0.1");
  ASSERT_FALSE(manager.ok());
  EXPECT_EQ(manager.error().category, ErrorCategory::kUnavailable);
  EXPECT_NE(manager.error().message.find("dlopen /nonexistent/libnvfm.so.1"), std::string::npos)
      << manager.error().message;
}

TEST_F(NvfmAdapter, AFileThatIsNoLibraryIsUnavailable) {
  const std::string path = std::string(TESSERA_BINARY_DIR) + "/not-a-library.so.1";
  std::ofstream(path) << "not an ELF file\n";
  auto manager = Connect(path, "127.0.0.1");
  ASSERT_FALSE(manager.ok());
  EXPECT_EQ(manager.error().category, ErrorCategory::kUnavailable);
}

TEST_F(NvfmAdapter, MissingFunctionIsNamed) {
  auto manager = Connect(FAKE_NVFM_INCOMPLETE, "unix:/run/nvidia-fabricmanager/socket");
  ASSERT_FALSE(manager.ok());
  EXPECT_EQ(manager.error().category, ErrorCategory::kUnavailable);
  EXPECT_NE(manager.error().message.find("function fmActivateFabricPartition is missing"),
            std::string::npos)
      << manager.error().message;
}

TEST_F(NvfmAdapter, InitAndConnectFailuresCarryTheStatusAndItsMeaning) {
  setenv("FAKE_NVFM_MODE", "init-fails", 1);
  auto init = Connect(FAKE_NVFM, "unix:/run/nvidia-fabricmanager/socket");
  ASSERT_FALSE(init.ok());
  EXPECT_EQ(init.error().message, "fmLibInit: FM_ST_GENERIC_ERROR (-2)");
  unsetenv("FAKE_NVFM_MODE");
  auto elsewhere = Connect(FAKE_NVFM, "10.1.2.3:7777");  // nothing listens there
  ASSERT_FALSE(elsewhere.ok());
  EXPECT_EQ(elsewhere.error().category, ErrorCategory::kUnavailable);
  EXPECT_EQ(elsewhere.error().message,
            "fmConnect 10.1.2.3:7777: FM_ST_CONNECTION_NOT_VALID (-9): the connection to the "
            "fabric manager is gone (it stopped or restarted)");
}

TEST_F(NvfmAdapter, ConnectsWithV2AndFallsBackToV1) {
  ASSERT_NE(Fake(), nullptr);
  auto connects = fm_.Succeeded("fmConnect");
  ASSERT_EQ(connects.size(), 1u);
  EXPECT_EQ(connects[0].argument, "v2:unix:/run/nvidia-fabricmanager/socket");

  fm_.Set("connect", "v1");  // an older fabric manager
  auto old = Fake();
  ASSERT_NE(old, nullptr);
  EXPECT_NE(old->Describe().find("(connect v1)"), std::string::npos) << old->Describe();
  auto calls = fm_.Calls();
  ASSERT_GE(calls.size(), 3u);
  EXPECT_EQ(calls[calls.size() - 2].rc, -6);  // v2 refused with FM_ST_VERSION_MISMATCH
  EXPECT_EQ(calls.back().argument, "v1:unix:/run/nvidia-fabricmanager/socket");
  EXPECT_TRUE(old->ListPartitions().ok());

  fm_.Set("connect", "v2");
  EXPECT_NE(Fake()->Describe().find("(connect v2)"), std::string::npos);
}

TEST_F(NvfmAdapter, TcpAddressesGoOutAsIpv4AndPort) {
  fm_.Set("address", "127.0.0.1:7000");
  auto named = Connect(FAKE_NVFM, "localhost:7000");
  ASSERT_TRUE(named.ok()) << named.error().message;
  EXPECT_EQ(fm_.Succeeded("fmConnect").back().argument, "v2:127.0.0.1:7000");
}

TEST_F(NvfmAdapter, H100ReportsModulesWithoutBusIds) {
  auto manager = Fake();
  ASSERT_NE(manager, nullptr);
  auto listed = manager->ListPartitions();
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  ASSERT_EQ(listed->size(), 15u);
  const SupportedPartition& pair = (*listed)[3];
  EXPECT_EQ(pair.id, 3u);
  EXPECT_EQ(pair.modules(), (std::vector<int>{1, 3}));
  EXPECT_EQ(pair.gpus[0].pci_address, "");  // 00000000:00:00.0: zeroed
  EXPECT_EQ(pair.gpus[0].uuid, "");
  EXPECT_EQ(pair.nvlinks(), 36);
  EXPECT_EQ((*listed)[7].nvlinks(), 0);  // single-GPU partitions have NVLink off

  fm_.Set("bus_ids", "real");  // an older board reports them
  listed = manager->ListPartitions();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ((*listed)[3].gpus[0].pci_address, "0000:2a:00.0");
  EXPECT_EQ((*listed)[3].gpus[1].uuid, "GPU-00000003-fake");
}

TEST_F(NvfmAdapter, ErrorsNameTheCodeItsMeaningAndTheOverlap) {
  auto manager = Fake();
  ASSERT_NE(manager, nullptr);
  ASSERT_TRUE(manager->Activate(3).ok());
  EXPECT_EQ(fm_.Active(), (std::vector<int>{3}));
  auto in_use = manager->Activate(1);
  ASSERT_FALSE(in_use.ok());
  EXPECT_EQ(in_use.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_EQ(in_use.error().message,
            "fmActivateFabricPartition(1): FM_ST_IN_USE (-7): an overlapping partition is active "
            "(active: partition 3 {1,3})");
  auto again = manager->Activate(3);
  EXPECT_NE(again.error().message.find("partition 3 {1,3} (itself)"), std::string::npos);
  auto unknown = manager->Activate(99);
  EXPECT_EQ(unknown.error().category, ErrorCategory::kInvalidArgument);
  auto inactive = manager->Deactivate(4);
  ASSERT_FALSE(inactive.ok());
  EXPECT_EQ(inactive.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(inactive.error().message.find("the partition is not active"), std::string::npos);
  ASSERT_TRUE(manager->Deactivate(3).ok());

  fm_.Set("fail_activate", "-10");
  auto nvlink = manager->Activate(2);
  EXPECT_EQ(nvlink.error().message,
            "fmActivateFabricPartition(2): FM_ST_NVLINK_ERROR (-10): NVLink training failed for "
            "the partition's GPUs");
  fm_.Set("fail_activate", "0");

  fm_.Set("mode", "not-shared");
  auto bare = manager->Activate(2);
  EXPECT_NE(bare.error().message.find("FM_ST_NOT_SUPPORTED (-3): the fabric manager is not in "
                                      "shared NVSwitch mode (FABRIC_MODE=1"),
            std::string::npos)
      << bare.error().message;
}

TEST_F(NvfmAdapter, ARestartedFabricManagerWantsTheActiveListFirst) {
  auto manager = Fake();
  ASSERT_NE(manager, nullptr);
  ASSERT_TRUE(manager->Activate(5).ok());
  fm_.Restart();
  // The old connection is gone.
  EXPECT_NE(manager->ListPartitions().error().message.find("FM_ST_CONNECTION_NOT_VALID"),
            std::string::npos);
  auto fresh = Fake();
  ASSERT_NE(fresh, nullptr);
  auto waiting = fresh->ListPartitions();
  ASSERT_FALSE(waiting.ok());
  EXPECT_EQ(waiting.error().category, ErrorCategory::kUnavailable);
  EXPECT_NE(waiting.error().message.find("FM_ST_NOT_CONFIGURED (-8): the fabric manager is still "
                                         "initialising, or restarted and waits for the active "
                                         "partition list"),
            std::string::npos)
      << waiting.error().message;
  EXPECT_FALSE(fresh->Activate(6).ok());
  ASSERT_TRUE(fresh->SetActivatedPartitions({5}).ok());
  auto listed = fresh->ListPartitions();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE((*listed)[5].active);
  EXPECT_EQ(fm_.Get("mode"), "shared");
  // An empty list is sendable, and overlapping ones are refused whole.
  ASSERT_TRUE(fresh->SetActivatedPartitions({}).ok());
  EXPECT_TRUE(fm_.Active().empty());
  EXPECT_FALSE(fresh->SetActivatedPartitions({1, 3}).ok());
  std::vector<uint32_t> too_many(65, 7);
  EXPECT_EQ(fresh->SetActivatedPartitions(too_many).error().category,
            ErrorCategory::kInvalidArgument);
}

TEST_F(NvfmAdapter, NotToldWithin60SecondsItExits) {
  auto manager = Fake();
  fm_.Restart();
  fm_.Set("restart_at", std::to_string(testing::BootTimeMs() - 61000));
  auto gone = Connect(FAKE_NVFM, "unix:/run/nvidia-fabricmanager/socket");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(fm_.Get("mode"), "exited");
}

using Clock = std::chrono::steady_clock;

long long MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

TEST_F(NvfmAdapter, AHungCallFailsAtItsDeadlineAndItsConnectionIsNotUsedAgain) {
  auto manager = Connect(FAKE_NVFM, "unix:/run/nvidia-fabricmanager/socket", 300);
  ASSERT_TRUE(manager.ok()) << manager.error().message;
  fm_.Set("hang", "activate");
  const auto start = Clock::now();
  auto activated = (*manager)->Activate(3);
  const long long waited = MsSince(start);
  ASSERT_FALSE(activated.ok());
  EXPECT_TRUE(IsNoAnswer(activated.error())) << activated.error().message;
  EXPECT_EQ(activated.error().category, ErrorCategory::kUnavailable);
  EXPECT_EQ(
      activated.error().message.rfind("fmActivateFabricPartition(3): no answer within 300 ms", 0),
      0u)
      << activated.error().message;
  EXPECT_GE(waited, 300);
  EXPECT_LT(waited, 300 + 30000) << "the caller waited for the hung call, not its deadline";
  // That connection is done with; a fresh one within the deadline is not even tried.
  auto listed = (*manager)->ListPartitions();
  ASSERT_FALSE(listed.ok());
  EXPECT_TRUE(IsNoAnswer(listed.error())) << listed.error().message;
  const size_t connects = fm_.Calls().size();
  auto again = Connect(FAKE_NVFM, "unix:/run/nvidia-fabricmanager/socket", 300);
  if (!again.ok()) {  // (a loaded machine may have let the 300 ms pass already)
    EXPECT_TRUE(IsNoAnswer(again.error())) << again.error().message;
    EXPECT_NE(again.error().message.find("not sent: fmActivateFabricPartition(3): no answer"),
              std::string::npos)
        << again.error().message;
    EXPECT_EQ(fm_.Calls().size(), connects);
  }
  // Released, the hung call answers TIMEOUT with no effect, and the fabric manager is asked
  // again once the deadline has passed.
  WaitForAnswers();
  EXPECT_TRUE(fm_.Active().empty());
  auto hung = fm_.Calls();
  EXPECT_TRUE(std::any_of(hung.begin(), hung.end(), [](const testing::FabricCall& call) {
    return call.call == "fmActivateFabricPartition" && call.argument == "hang";
  }));
}

TEST_F(NvfmAdapter, AHungConnectFailsAtItsDeadline) {
  fm_.Set("hang", "connect");
  const auto start = Clock::now();
  auto manager = Connect(FAKE_NVFM, "unix:/run/nvidia-fabricmanager/socket", 300);
  const long long waited = MsSince(start);
  ASSERT_FALSE(manager.ok());
  EXPECT_TRUE(IsNoAnswer(manager.error())) << manager.error().message;
  EXPECT_EQ(manager.error().message.rfind(
                "fmConnect unix:/run/nvidia-fabricmanager/socket: no answer within 300 ms", 0),
            0u)
      << manager.error().message;
  EXPECT_LT(waited, 300 + 30000);
  WaitForAnswers();
}

TEST_F(NvfmAdapter, DuplicateActiveIdsAreNotSent) {
  auto manager = Fake();
  ASSERT_NE(manager, nullptr);
  fm_.Restart();
  auto fresh = Fake();
  ASSERT_NE(fresh, nullptr);
  auto sent = fresh->SetActivatedPartitions({1, 1, 1});
  ASSERT_FALSE(sent.ok());
  EXPECT_EQ(sent.error().category, ErrorCategory::kInvalidArgument);
  for (const auto& call : fm_.Calls())
    EXPECT_NE(call.call, "fmSetActivatedFabricPartitions");
}

}  // namespace
}  // namespace tessera::fabricmanager
