// MIG strategies of the device plugin on the MIG fixture hosts, with MIG facts from the
// stand-in NVML: resource names, device IDs, Allocate in every output mode, health per slice.
#include "deviceplugin/mig_resources.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "deviceplugin/deviceplugin.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"

namespace tessera::deviceplugin {
namespace {

using testing::FakeNvmlState;

// UUIDs of the mixed fixture's slices (tests/fixtures/hosts/h100-mig-mixed.nvml).
const char* k3g = "MIG-8e2c3d4b-0001-4000-8000-000000000000";
const char* k2g = "MIG-8e2c3d4b-0005-4000-8004-000000000000";
const char* k1g = "MIG-8e2c3d4b-000d-4000-8006-000000000000";

inventory::Inventory Read(const std::string& root, const std::string& fixture) {
  FakeNvmlState nvml(fixture);
  inventory::ReadOptions options;
  options.root = root;
  options.nvml_library = FAKE_NVML;
  auto inv = inventory::ReadInventory(options);
  EXPECT_TRUE(inv.ok());
  return *inv;
}

Result<std::unique_ptr<ResourceManager>> Manager(const std::string& fixture, MigStrategy strategy,
                                                 Config config = {}) {
  config.mig_strategy = strategy;
  return ResourceManager::Create(Read(testing::MaterializeHost(fixture), fixture), config);
}

std::vector<std::string> Names(const ResourceManager& manager) {
  std::vector<std::string> names;
  for (const auto& r : manager.resources())
    names.push_back(r.name + "=" + std::to_string(r.ids.size()));
  return names;
}

TEST(MigStrategy, ParsesFromConfigAndEnvironment) {
  auto config = ParseConfig("version: v1\nmigStrategy: mixed\n");
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->mig_strategy, MigStrategy::kMixed);
  EXPECT_EQ(ParseConfig("").value().mig_strategy, MigStrategy::kNone);
  auto bad = ParseConfig("migStrategy: both\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("want none, single or mixed"), std::string::npos);
  Config env;
  ASSERT_TRUE(ApplyEnvironment({{"TESSERA_DP_MIG_STRATEGY", "single"}}, &env).ok());
  EXPECT_EQ(env.mig_strategy, MigStrategy::kSingle);
}

TEST(MigStrategy, PlusInAProfileIsWrittenAsADot) {
  EXPECT_EQ(MigResourceName("1g.10gb+me"), "nvidia.com/mig-1g.10gb.me");
  EXPECT_EQ(MigResourceName("3g.40gb"), "nvidia.com/mig-3g.40gb");
}

TEST(MigStrategy, NoneAdvertisesWholeGpusOnly) {
  auto manager = Manager("h100-mig-mixed", MigStrategy::kNone);
  ASSERT_TRUE(manager.ok()) << manager.error().message;
  EXPECT_EQ(Names(**manager), (std::vector<std::string>{"nvidia.com/gpu=2"}));
}

TEST(MigStrategy, MixedAdvertisesOneResourcePerProfileAndMigOffGpusWhole) {
  auto manager = Manager("h100-mig-mixed", MigStrategy::kMixed);
  ASSERT_TRUE(manager.ok()) << manager.error().message;
  EXPECT_EQ(Names(**manager),
            (std::vector<std::string>{"nvidia.com/gpu=1", "nvidia.com/mig-1g.10gb=1",
                                      "nvidia.com/mig-2g.20gb=1", "nvidia.com/mig-3g.40gb=1"}));
  EXPECT_EQ((*manager)->FindResource("nvidia.com/mig-2g.20gb")->ids, std::vector<std::string>{k2g});
  EXPECT_EQ((*manager)->FindResource("nvidia.com/mig-3g.40gb")->ids, std::vector<std::string>{k3g});
  EXPECT_EQ((*manager)->FindResource("nvidia.com/gpu")->ids,
            std::vector<std::string>{"GPU-8e2c3d4b-1a5f-4b6c-8d7e-2f3a4b5c6d02"});
  EXPECT_TRUE((*manager)->warnings().empty()) << (*manager)->warnings().front();
}

TEST(MigStrategy, SingleServesEverySliceOfOneProfileAsGpu) {
  auto manager = Manager("h100-mig-1g", MigStrategy::kSingle);
  ASSERT_TRUE(manager.ok()) << manager.error().message;
  EXPECT_EQ(Names(**manager), (std::vector<std::string>{"nvidia.com/gpu=7"}));
  for (const auto& id : (*manager)->resources()[0].ids)
    EXPECT_EQ(id.rfind("MIG-", 0), 0u) << id;
}

TEST(MigStrategy, SingleRefusesAMixedLayoutNamingTheMixedStrategy) {
  auto manager = Manager("h100-mig-mixed", MigStrategy::kSingle);
  ASSERT_FALSE(manager.ok());
  EXPECT_EQ(manager.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(manager.error().message.find("1g.10gb, 2g.20gb, 3g.40gb"), std::string::npos)
      << manager.error().message;
  EXPECT_NE(manager.error().message.find("migStrategy mixed"), std::string::npos);
}

TEST(MigAllocate, EveryOutputModeGivesTheSliceAndNothingElse) {
  Config config;
  config.device_list_strategy = {ListStrategy::kCdiCri, ListStrategy::kCdiAnnotations,
                                 ListStrategy::kDeviceSpecs, ListStrategy::kEnvvar};
  auto manager = Manager("h100-mig-mixed", MigStrategy::kMixed, config);
  ASSERT_TRUE(manager.ok()) << manager.error().message;
  const Resource* slice = (*manager)->FindResource("nvidia.com/mig-2g.20gb");
  ASSERT_NE(slice, nullptr);
  auto allocation = (*manager)->Allocate(*slice, {{k2g}});
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  const ContainerAllocation& out = (*allocation)[0];
  EXPECT_EQ(out.cdi_devices, std::vector<std::string>{std::string("nvidia.com/gpu=") + k2g});
  EXPECT_EQ(out.envs.at("NVIDIA_VISIBLE_DEVICES"), k2g);
  bool annotated = std::any_of(out.annotations.begin(), out.annotations.end(), [](const auto& a) {
    return a.first.rfind("cdi.k8s.io/", 0) == 0 && a.second == std::string("nvidia.com/gpu=") + k2g;
  });
  EXPECT_TRUE(annotated);
  std::vector<std::string> per_gpu;
  for (const auto& d : out.devices) {
    if (d.container_path.rfind("/dev/nvidia-caps/", 0) == 0 ||
        (d.container_path.rfind("/dev/nvidia", 0) == 0 &&
         std::isdigit(static_cast<unsigned char>(d.container_path.back())) &&
         d.container_path.find("uvm") == std::string::npos)) {
      per_gpu.push_back(d.container_path);
    }
  }
  std::sort(per_gpu.begin(), per_gpu.end());
  EXPECT_EQ(per_gpu, (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap48",
                                               "/dev/nvidia-caps/nvidia-cap49", "/dev/nvidia0"}));
}

TEST(MigHealth, ASliceLosesItsCapabilityNodeAloneAndAllSlicesFollowTheirParent) {
  testing::TempHost host("h100-mig-mixed");
  Config config;
  config.mig_strategy = MigStrategy::kMixed;
  auto manager = ResourceManager::Create(Read(host.root(), "h100-mig-mixed"), config);
  ASSERT_TRUE(manager.ok()) << manager.error().message;
  auto& m = **manager;
  auto healthy = [&](const char* resource) {
    return m.List(*m.FindResource(resource), nullptr).at(0).healthy;
  };
  ASSERT_EQ(::unlink((host.root() + "/dev/nvidia-caps/nvidia-cap49").c_str()), 0);
  EXPECT_TRUE(m.SetPresence(ProbePresence(m.devices())));
  EXPECT_FALSE(healthy("nvidia.com/mig-2g.20gb"));
  EXPECT_TRUE(healthy("nvidia.com/mig-1g.10gb"));
  EXPECT_TRUE(healthy("nvidia.com/gpu"));

  // A fault contained to one GPU instance takes that instance's slice alone.
  const PhysicalDevice* slice = nullptr;
  for (const auto& device : m.devices())
    if (device.mig && device.model.find("3g.40gb") != std::string::npos) slice = &device;
  ASSERT_TRUE(slice);
  EXPECT_FALSE(slice->parent_uuid.empty());
  EXPECT_TRUE(m.SetFault("0000:18:00.0", slice->gpu_instance_id, "gpu-fault: Xid 94"));
  EXPECT_FALSE(healthy("nvidia.com/mig-3g.40gb"));
  EXPECT_TRUE(healthy("nvidia.com/mig-1g.10gb"));
  ASSERT_EQ(m.AdvertisedIds("0000:18:00.0", slice->gpu_instance_id).size(), 1u);
  EXPECT_EQ(m.AdvertisedIds("0000:18:00.0", slice->gpu_instance_id)[0].first,
            "nvidia.com/mig-3g.40gb");
  // Kubelet knows each slice by its MIG UUID (GPU instance 13 holds the 1g.10gb slice).
  EXPECT_EQ(m.AdvertisedIds("0000:18:00.0", 13),
            (std::vector<std::pair<std::string, std::string>>{{"nvidia.com/mig-1g.10gb", k1g}}));
  EXPECT_TRUE(m.ClearFault("0000:18:00.0"));

  // A fault of the parent GPU takes every slice of it, not the other GPU.
  EXPECT_TRUE(m.SetFault("0000:18:00.0", health::kWholeGpu, "gpu-fault: Xid 79"));
  EXPECT_FALSE(healthy("nvidia.com/mig-1g.10gb"));
  EXPECT_FALSE(healthy("nvidia.com/mig-3g.40gb"));
  EXPECT_TRUE(healthy("nvidia.com/gpu"));

  // So does a blocking lease on the parent.
  auto other = ResourceManager::Create(Read(host.root(), "h100-mig-mixed"), config);
  ASSERT_TRUE(other.ok());
  LeaseMap leases;
  leases["0000:18:00.0"].state = LeaseState::kQuarantined;
  EXPECT_TRUE((*other)->SetLeases(leases));
  EXPECT_FALSE(
      (*other)->List(*(*other)->FindResource("nvidia.com/mig-3g.40gb"), nullptr)[0].healthy);
  EXPECT_TRUE((*other)->List(*(*other)->FindResource("nvidia.com/gpu"), nullptr)[0].healthy);
}

}  // namespace
}  // namespace tessera::deviceplugin
