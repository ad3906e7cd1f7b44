// End to end, MPS replicas: the real tessera-device-plugin on a materialized HGX H100 host with the
// stand-in NVML and the stand-in nvidia-cuda-mps-control, driven by the kubelet emulator.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <future>

#include "common/atomic_file.h"
#include "deviceplugin/kubelet_emulator.h"
#include "deviceplugin/plugin_process.h"
#include "mps/mps.h"
#include "support/fake_mps.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "support/hgx_gpus.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using namespace std::chrono_literals;
using v1beta1::ListAndWatchResponse;

const char* kShared = "nvidia.com/gpu.shared";

class MpsPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 8; ++i)
      nvml_.Append(std::string("gpu ") + kHgxGpuPci[i] + " board=h100-80gb uuid=" + HgxGpuUuid(i));
    mps_ = std::make_unique<FakeMps>();
    root_ = dirs_.path() + "/mps";
    mps_->Watch(root_ + "/{uuid}/ready");
  }
  void TearDown() override {
    if (plugin_) plugin_->Stop();
    // The daemons outlive the plugin on purpose; the test's own go here.
    for (int i = 0; i < 8; ++i) {
      auto paths = mps::PathsFor(root_, HgxGpuUuid(i));
      if (paths) (void)mps::UnmountShm(paths->shm);
      if (paths) (void)mps::UnmountShm(paths->pipe);
      auto pid = ReadPid(i);
      if (pid > 0) ::kill(pid, SIGKILL);
    }
  }

  pid_t ReadPid(int gpu) {
    // The plugin's own record of the daemon it started, never the pid file a client could write.
    auto text = ReadWholeFile(root_ + "/" + HgxGpuUuid(gpu) + "/daemon.state");
    auto state = text ? mps::ParseDaemonState(*text) : std::nullopt;
    return state ? static_cast<pid_t>(state->pid) : -1;
  }

  std::string Config(int replicas) {
    return "health:\n  nvmlLibrary: " + std::string(FAKE_NVML) +
           "\nsharing:\n  mps:\n    renameByDefault: true\n    root: " + root_ +
           "\n    controlBinary: " + FakeMps::Binary() +
           "\n    shmSizeMiB: 4\n    readyTimeoutMs: 60000\n    checkIntervalMs: 200"
           "\n    commandTimeoutMs: 2000\n    resources:\n      - {name: nvidia.com/gpu, "
           "replicas: " +
           std::to_string(replicas) + "}\n";
  }

  void Launch(const std::string& config_yaml) {
    sockets_ = dirs_.path() + "/device-plugins";
    std::filesystem::create_directories(sockets_);
    std::filesystem::create_directories(dirs_.path() + "/run");
    config_ = dirs_.path() + "/config.yaml";
    ASSERT_TRUE(WriteFileAtomically(config_, config_yaml).ok());
    kubelet_ = std::make_unique<KubeletEmulator>(sockets_);
    kubelet_->Start();
    plugin_ = std::make_unique<PluginProcess>(
        DevicePluginBinary(),
        std::vector<std::string>{"--root", host_.root(), "--socket-dir", sockets_, "--cdi-dir",
                                 dirs_.path() + "/cdi", "--lease-file",
                                 dirs_.path() + "/run/leases.json", "--config", config_},
        dirs_.path() + "/log");
  }

  std::unique_ptr<PluginClient> Connect(int n = 1) {
    auto registration = kubelet_->WaitForRegistration(kShared, n, kEventTimeout);
    if (!registration) {
      ADD_FAILURE() << "no registration " << n << " of " << kShared << "; log:\n" << plugin_->Log();
      return nullptr;
    }
    auto client = std::make_unique<PluginClient>(sockets_ + "/" + registration->endpoint());
    client->Watch();
    return client;
  }

  FakeNvmlState nvml_{""};
  std::unique_ptr<FakeMps> mps_;
  TempHost host_{"hgx-h100-dgx"};
  TempDir dirs_;
  std::string root_, sockets_, config_;
  std::unique_ptr<KubeletEmulator> kubelet_;
  std::unique_ptr<PluginProcess> plugin_;
};

TEST_F(MpsPluginTest, NoAllocateAnswersBeforeTheDaemonIsReadyThenItCarriesTheLimits) {
  mps_->SetStartDelayMs(HgxGpuUuid(0), 1500);  // GPU 0's daemon starts slowly
  Launch(Config(4));
  auto client = Connect();
  ASSERT_TRUE(client);
  const std::string marker = root_ + "/" + HgxGpuUuid(0) + "/ready";
  // Asked while GPU 0's daemon is still coming up: the answer waits for its marker.
  auto answer = std::async(std::launch::async, [&] {
    v1beta1::AllocateResponse response;
    grpc::Status status = client->Allocate({{HgxGpuUuid(0) + "::1"}}, &response);
    const bool marker_there = !mps::ReadReadyMarker(*mps::PathsFor(root_, HgxGpuUuid(0))).empty();
    return std::tuple{status, response, marker_there};
  });
  auto [status, response, marker_there] = answer.get();
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << plugin_->Log();
  EXPECT_TRUE(marker_there);
  EXPECT_FALSE(mps_->Lines(HgxGpuUuid(0) + " -f (slow start)").empty()) << mps_->Transcript();
  ASSERT_EQ(response.container_responses_size(), 1);
  const auto& container = response.container_responses(0);
  EXPECT_EQ(container.envs().at("CUDA_MPS_PIPE_DIRECTORY"), "/run/tessera/mps");
  // 81559 MiB over 4 replicas, rounded down; 100 % over 4.
  EXPECT_EQ(container.envs().at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=20389M");
  EXPECT_EQ(container.envs().at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  ASSERT_EQ(container.mounts_size(), 2);
  EXPECT_EQ(container.mounts(0).host_path(), root_ + "/" + HgxGpuUuid(0) + "/pipe");
  EXPECT_TRUE(container.mounts(0).read_only());  // a client connects there, never writes
  EXPECT_EQ(container.mounts(1).container_path(), "/dev/shm");
  ASSERT_EQ(container.cdi_devices_size(), 1);
  EXPECT_EQ(container.cdi_devices(0).name(), "nvidia.com/gpu=" + HgxGpuUuid(0));
  // The daemon got the same limits before its marker: compute mode, -f, limits.
  const auto limit =
      mps_->Lines(HgxGpuUuid(0) + " cmd set_default_device_pinned_mem_limit 0 20389M");
  ASSERT_EQ(limit.size(), 1u) << mps_->Transcript();
  EXPECT_NE(limit[0].find("[watch absent]"), std::string::npos);
  EXPECT_EQ(mps_->ComputeMode(kHgxGpuPci[0]), 3);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
}

TEST_F(MpsPluginTest, AConfigChangeHoldsAllocateUntilTheNewLimitsAreReady) {
  Launch(Config(4));
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout)) << plugin_->Log();
  const std::string old_hash = mps::ReadReadyMarker(*mps::PathsFor(root_, HgxGpuUuid(3)));
  ASSERT_FALSE(old_hash.empty());
  const pid_t daemon = ReadPid(3);

  ASSERT_TRUE(WriteFileAtomically(config_, Config(2)).ok());
  plugin_->Signal(SIGHUP);
  auto renewed = Connect(2);
  ASSERT_TRUE(renewed);
  v1beta1::AllocateResponse response;
  grpc::Status status = renewed->Allocate({{HgxGpuUuid(3) + "::1"}}, &response);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << plugin_->Log();
  // Never the old limits: the answer came after the marker held the new config's hash.
  const auto& envs = response.container_responses(0).envs();
  EXPECT_EQ(envs.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=40779M");
  EXPECT_EQ(envs.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "50");
  const std::string new_hash = mps::ReadReadyMarker(*mps::PathsFor(root_, HgxGpuUuid(3)));
  EXPECT_NE(new_hash, old_hash);
  EXPECT_FALSE(new_hash.empty());
  // The same daemon (its clients keep their server), given the new limits with no marker there.
  EXPECT_EQ(ReadPid(3), daemon);
  EXPECT_EQ(mps_->Lines(HgxGpuUuid(3) + " -f").size(), 1u);
  const auto limit = mps_->Lines(HgxGpuUuid(3) + " cmd set_default_active_thread_percentage 50");
  ASSERT_EQ(limit.size(), 1u) << mps_->Transcript();
  EXPECT_NE(limit[0].find("[watch absent]"), std::string::npos) << limit[0];
}

TEST_F(MpsPluginTest, ADeadDaemonTakesItsReplicasOutUntilItIsBackWithItsLimits) {
  Launch(Config(2));
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout)) << plugin_->Log();
  mps_->SetBehaviour(HgxGpuUuid(5), "exit");
  auto list = client->WaitForList(
      [](const ListAndWatchResponse& l) {
        return HealthOf(l, HgxGpuUuid(5) + "::0") == "Unhealthy";
      },
      kEventTimeout);
  ASSERT_TRUE(list) << plugin_->Log();
  EXPECT_EQ(HealthOf(*list, HgxGpuUuid(4) + "::0"), "Healthy");
  mps_->SetBehaviour(HgxGpuUuid(5), "");
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout)) << plugin_->Log();
  EXPECT_EQ(mps_->Lines(HgxGpuUuid(5) + " -f").size(), 2u) << mps_->Transcript();
  EXPECT_EQ(mps_->Lines(HgxGpuUuid(5) + " cmd set_default_device_pinned_mem_limit").size(), 2u);
}

TEST_F(MpsPluginTest, MpsOnMigDevicesStopsThePluginWithAMessage) {
  TempHost mig{"h100-mig-1g"};
  FakeNvmlState state("h100-mig-1g");
  sockets_ = dirs_.path() + "/device-plugins";
  std::filesystem::create_directories(sockets_);
  config_ = dirs_.path() + "/config.yaml";
  ASSERT_TRUE(WriteFileAtomically(config_, "migStrategy: single\n" + Config(2)).ok());
  PluginProcess plugin(DevicePluginBinary(),
                       {"--root", mig.root(), "--socket-dir", sockets_, "--cdi-dir",
                        dirs_.path() + "/cdi", "--config", config_},
                       dirs_.path() + "/mig.log");
  ASSERT_TRUE(WaitUntil([&] {
    return plugin.Log().find("sharing using MPS is not supported for MIG devices") !=
           std::string::npos;
  })) << plugin.Log();
  EXPECT_EQ(plugin.Stop(), 2) << plugin.Log();  // exited by itself, a config error
  EXPECT_TRUE(mps_->Lines(" -f").empty());
}

}  // namespace
}  // namespace tessera::testing
