// MPS replicas in the resource manager, without sockets or daemons: config, naming, the refusal on
// MIG devices, and Allocate held back until the GPU's ready marker holds its config's hash.
#include <gtest/gtest.h>

#include <future>

#include "deviceplugin/deviceplugin.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"

namespace tessera::deviceplugin {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<ResourceManager> Manager(const std::string& fixture, const Config& config,
                                         const std::string& nvml = "") {
  inventory::ReadOptions options;
  options.root = testing::MaterializeHost(fixture);
  if (!nvml.empty()) options.nvml_library = nvml;
  auto inventory = inventory::ReadInventory(options);
  EXPECT_TRUE(inventory.ok());
  auto manager = ResourceManager::Create(*inventory, config);
  EXPECT_TRUE(manager.ok()) << manager.error().message;
  return manager.ok() ? std::move(*manager) : nullptr;
}

TEST(MpsConfig, ParsesNvidiasShapeAndTesserasDaemonOptions) {
  auto config = ParseConfig(R"(
sharing:
  mps:
    renameByDefault: true
    resources:
      - {name: nvidia.com/gpu, replicas: 4}
    root: /run/x/mps
    controlBinary: /opt/nvidia/bin/nvidia-cuda-mps-control
    shmSizeMiB: 128
    readyTimeoutMs: 5000
    checkIntervalMs: 500
    commandTimeoutMs: 2000
)");
  ASSERT_TRUE(config.ok()) << config.error().message;
  const MpsSharing& mps = config->sharing.mps;
  ASSERT_EQ(mps.resources.size(), 1u);
  EXPECT_EQ(mps.resources[0].replicas, 4);
  EXPECT_TRUE(mps.rename_by_default);
  EXPECT_EQ(mps.root, "/run/x/mps");
  EXPECT_EQ(mps.control_binary, "/opt/nvidia/bin/nvidia-cuda-mps-control");
  EXPECT_EQ(mps.shm_bytes, uint64_t{128} << 20);
  EXPECT_EQ(mps.ready_timeout_ms, 5000);
  EXPECT_EQ(mps.check_interval_ms, 500);
  EXPECT_EQ(mps.command_timeout_ms, 2000);
}

TEST(MpsConfig, ErrorsNameTheField) {
  struct Case {
    const char* yaml;
    const char* field;
  } cases[] = {
      {"sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}\n",
       "sharing.mps.resources[0].replicas"},
      {"sharing: {mps: {failRequestsGreaterThanOne: false}}\n",
       "sharing.mps.failRequestsGreaterThanOne: unknown field"},
      {"sharing: {mps: {root: relative}}\n", "sharing.mps.root"},
      {"sharing: {mps: {shmSizeMiB: 0}}\n", "sharing.mps.shmSizeMiB"},
      {"sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}, timeSlicing: "
       "{resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n",
       "both timeSlicing and mps"},
  };
  for (const auto& c : cases) {
    auto config = ParseConfig(c.yaml);
    ASSERT_FALSE(config.ok()) << c.yaml;
    EXPECT_NE(config.error().message.find(c.field), std::string::npos)
        << c.yaml << " -> " << config.error().message;
  }
}

TEST(MpsResources, AreRenamedSharedReplicasThatStayUnhealthyUntilTheirMarkerMatches) {
  Config config;
  config.sharing.mps.resources.push_back({"nvidia.com/gpu", 4, ""});
  config.sharing.mps.rename_by_default = true;
  config.sharing.mps.root = "/run/tessera/mps";
  auto manager = Manager("hgx-h100-dgx", config);
  ASSERT_TRUE(manager);
  const Resource* gpu = manager->FindResource("nvidia.com/gpu.shared");
  ASSERT_NE(gpu, nullptr);
  EXPECT_TRUE(gpu->mps);
  EXPECT_EQ(gpu->ids.size(), 32u);
  EXPECT_EQ(gpu->ids[0], manager->devices()[0].id + "::0");
  for (const auto& device : manager->List(*gpu, nullptr))
    EXPECT_FALSE(device.healthy);
  EXPECT_NE(manager->Health(0).Describe().find("not set up"), std::string::npos);

  const MpsLimits limits{uint64_t{20389} << 20, 25, "sha256:new"};
  EXPECT_TRUE(manager->SetMpsLimits(0, limits));
  manager->SetMpsState(0, "sha256:old", "");
  EXPECT_FALSE(manager->List(*gpu, nullptr)[0].healthy);
  EXPECT_NE(manager->Health(0).Describe().find("not ready under the current config"),
            std::string::npos);
  EXPECT_TRUE(manager->SetMpsState(0, "sha256:new", ""));
  EXPECT_TRUE(manager->List(*gpu, nullptr)[0].healthy);
  EXPECT_FALSE(manager->List(*gpu, nullptr)[4].healthy);  // GPU 1: still no daemon

  auto allocation = manager->Allocate(*gpu, {{gpu->ids[2]}});
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  const ContainerAllocation& out = (*allocation)[0];
  EXPECT_EQ(out.envs.at("CUDA_MPS_PIPE_DIRECTORY"), "/run/tessera/mps");
  EXPECT_EQ(out.envs.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=20389M");
  EXPECT_EQ(out.envs.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  ASSERT_EQ(out.mounts.size(), 2u);
  const std::string dir = "/run/tessera/mps/" + manager->devices()[0].id;
  EXPECT_EQ(out.mounts[0].host_path, dir + "/pipe");
  EXPECT_EQ(out.mounts[0].container_path, "/run/tessera/mps");
  EXPECT_TRUE(out.mounts[0].read_only);
  EXPECT_EQ(out.mounts[1].host_path, dir + "/shm");
  EXPECT_EQ(out.mounts[1].container_path, "/dev/shm");
  for (const auto& mount : out.mounts)
    EXPECT_EQ(mount.host_path.find("/tmp/nvidia-mps"), std::string::npos);
  EXPECT_EQ(out.cdi_devices, std::vector<std::string>{manager->devices()[0].cdi_name});

  // One replica per container, of one GPU.
  auto two = manager->Allocate(*gpu, {{gpu->ids[0], gpu->ids[1]}});
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.error().message.find("an MPS container takes one replica"), std::string::npos);
}

TEST(MpsResources, AllocateWaitsForTheMarkerAndThenAnswers) {
  Config config;
  config.sharing.mps.resources.push_back({"nvidia.com/gpu", 2, ""});
  config.sharing.mps.ready_timeout_ms = 60000;
  auto manager = Manager("hgx-h100-dgx", config);
  ASSERT_TRUE(manager);
  const Resource& gpu = manager->resources()[0];
  manager->SetMpsLimits(0, {uint64_t{40779} << 20, 50, "sha256:a"});
  auto answer =
      std::async(std::launch::async, [&] { return manager->Allocate(gpu, {{gpu.ids[0]}}); });
  // Not before the marker: the call is still waiting.
  EXPECT_EQ(answer.wait_for(300ms), std::future_status::timeout);
  manager->SetMpsState(0, "sha256:a", "");
  ASSERT_EQ(answer.wait_for(60s), std::future_status::ready);
  auto allocation = answer.get();
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  EXPECT_EQ((*allocation)[0].envs.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "50");
}

TEST(MpsResources, AllocateRefusesAfterTheTimeoutOrADaemonFault) {
  Config config;
  config.sharing.mps.resources.push_back({"nvidia.com/gpu", 2, ""});
  config.sharing.mps.ready_timeout_ms = 100;
  auto manager = Manager("hgx-h100-dgx", config);
  ASSERT_TRUE(manager);
  const Resource& gpu = manager->resources()[0];
  auto refused = manager->Allocate(gpu, {{gpu.ids[0]}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kUnavailable);
  manager->SetMpsLimits(0, {uint64_t{40779} << 20, 50, "sha256:a"});
  manager->SetMpsState(0, "", "MPS control daemon 77 of GPU-x is gone");
  refused = manager->Allocate(gpu, {{gpu.ids[0]}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("is gone"), std::string::npos);
}

TEST(MpsResources, AreRefusedForMigDevicesWithAMessage) {
  testing::FakeNvmlState nvml("h100-mig-1g");
  Config config;
  config.mig_strategy = MigStrategy::kSingle;
  config.sharing.mps.resources.push_back({"nvidia.com/gpu", 2, ""});
  inventory::ReadOptions options;
  options.root = testing::MaterializeHost("h100-mig-1g");
  options.nvml_library = FAKE_NVML;
  auto inventory = inventory::ReadInventory(options);
  ASSERT_TRUE(inventory.ok());
  auto manager = ResourceManager::Create(*inventory, config);
  ASSERT_FALSE(manager.ok());
  EXPECT_EQ(manager.error().category, ErrorCategory::kInvalidArgument);
  EXPECT_NE(manager.error().message.find("sharing using MPS is not supported for MIG devices"),
            std::string::npos)
      << manager.error().message;
}

}  // namespace
}  // namespace tessera::deviceplugin
