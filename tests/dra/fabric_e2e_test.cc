// Shared NVSwitch mode with DRA: the real tessera-dra-plugin with --fabric-manager, the kubelet
// emulator, and the stand-in fabric manager. Prepare activates the claim's partition before the
// claim is handed out, unprepare deactivates it, and a claim that is not exactly one partition is
// refused with nothing activated.
#include "dra/plugin_fixture.h"
#include "support/fake_fabric_manager.h"
#include "support/fake_nvml_state.h"

namespace tessera::dra {
namespace {

using namespace e2e;

const std::string kSocket = "unix:/run/nvidia-fabricmanager/socket";

class DraFabric : public DraPlugin {
 protected:
  void StartFabricPlugin() {
    StartPlugin("",
                {"--fabric-manager", kSocket, "--nvfm-library", FAKE_NVFM, "--nvml", FAKE_NVML});
  }
  testing::FakeFabricManager fm_{kSocket};
  testing::FakeNvmlState nvml_{"hgx-h100-dgx"};
};

// The fixture's GPUs in PCI order have module IDs 3, 1, 4, 2, 7, 5, 8, 6 (its .nvml).
TEST_F(DraFabric, PrepareActivatesUnprepareDeactivatesAndOddSetsAreRefused) {
  StartFabricPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  // Devices 0 and 1: modules {1,3}, partition 3.
  ClaimRef pair = CreateClaim("pair", {0, 1});
  auto prepared = kubelet.Prepare({pair});
  ASSERT_EQ(prepared[pair.uid].error, "") << plugin_->Log();
  EXPECT_EQ(fm_.Active(), (std::vector<int>{3}));
  EXPECT_TRUE(SpecExists(pair));
  // The activation came before the answer that hands the claim out (one call, one activation).
  EXPECT_EQ(fm_.Succeeded("fmActivateFabricPartition").size(), 1u);

  // Devices 0 and 3: modules {2,3}, no partition; three GPUs: no partition of that size.
  ClaimRef odd = CreateClaim("odd", {0, 3});
  ClaimRef three = CreateClaim("three", {4, 5, 6});
  auto refused = kubelet.Prepare({odd, three});
  EXPECT_NE(refused[odd.uid].error.find("claim team/odd: GPUs {2,3} are not one fabric partition "
                                        "(partitions have 1, 2, 4 or 8 GPUs"),
            std::string::npos)
      << refused[odd.uid].error;
  EXPECT_NE(refused[three.uid].error.find("partitions have 1, 2, 4 or 8 GPUs"), std::string::npos)
      << refused[three.uid].error;
  EXPECT_FALSE(SpecExists(odd));
  EXPECT_FALSE(SpecExists(three));
  EXPECT_EQ(fm_.Active(), (std::vector<int>{3}));
  EXPECT_EQ(fm_.Succeeded("fmActivateFabricPartition").size(), 1u);

  auto done = kubelet.Unprepare({pair});
  EXPECT_EQ(done[pair.uid], "");
  EXPECT_TRUE(fm_.Active().empty());
  EXPECT_FALSE(SpecExists(pair));
}

TEST_F(DraFabric, PreparedClaimsKeepTheirPartitionsAcrossRestartsOfBoth) {
  StartFabricPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  ClaimRef half = CreateClaim("half", {4, 5, 6, 7});  // modules 5..8: partition 2
  ASSERT_EQ(kubelet.Prepare({half})[half.uid].error, "") << plugin_->Log();
  EXPECT_EQ(fm_.Active(), (std::vector<int>{2}));

  // The fabric manager restarts under the running plugin: the watch sends the list.
  fm_.Restart();
  ASSERT_TRUE(WaitUntil([&] { return fm_.Get("mode") == "shared"; })) << plugin_->Log();
  EXPECT_EQ(fm_.Active(), (std::vector<int>{2}));

  // The plugin stops and the fabric manager restarts while it is down.
  plugin_->Stop();
  fm_.Restart();
  StartFabricPlugin();
  // First contact sends the held list; the reconcile keeps it.
  DraKubelet again(Registry(), "gpu.tessera.dev");
  Register(again);
  ASSERT_TRUE(WaitUntil([&] { return fm_.Get("mode") == "shared"; })) << plugin_->Log();
  EXPECT_EQ(fm_.Active(), (std::vector<int>{2}));
  EXPECT_EQ(again.Prepare({half})[half.uid].error, "");
  EXPECT_EQ(again.Unprepare({half})[half.uid], "");
  EXPECT_TRUE(fm_.Active().empty());
}

}  // namespace
}  // namespace tessera::dra
