// GPU faults end to end: the real tessera-device-plugin on a materialized HGX H100 host, the
// stand-in NVML delivering scripted faults (Xids, fault state), kubelet emulated (device plugin
// registration and PodResources) and the stand-in nvidia-smi, which records each reset and
// refuses one while another process holds NVML, as the real one does.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "common/atomic_file.h"
#include "deviceplugin/kubelet_emulator.h"
#include "deviceplugin/plugin_process.h"
#include "podresources/podresources_kubelet.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "support/hgx_gpus.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using v1beta1::ListAndWatchResponse;

const char* kGpu = "nvidia.com/gpu";

auto HealthIs(int gpu, const std::string& health) {
  return [gpu, health](const ListAndWatchResponse& list) {
    return HealthOf(list, HgxGpuUuid(gpu)) == health;
  };
}

// The stand-in nvidia-smi's line for a reset of HGX GPU `gpu` by UUID that exited with `status`.
std::string ResetLine(int gpu, int status = 0) {
  return "reset " + HgxGpuUuid(gpu) + " " + kHgxGpuPci[gpu] + " -> " + std::to_string(status);
}

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(sockets_);
    std::filesystem::create_directories(dirs_.path() + "/run");
    ASSERT_TRUE(WriteFileAtomically(config_, std::string("health: {nvmlLibrary: ") + FAKE_NVML +
                                                 ", recoveryIntervalMs: 100}\n")
                    .ok());
    SetFaults({});
    ASSERT_TRUE(pods_.ok());
    kubelet_.Start();
  }

  // The fault state: every GPU under its UUID (what the reset names), `extra` after some.
  void SetFaults(const std::map<int, std::string>& extra) {
    std::string text;
    for (int gpu = 0; gpu < 8; ++gpu) {
      text += std::string(kHgxGpuPci[gpu]) + " uuid=" + HgxGpuUuid(gpu);
      if (extra.count(gpu)) text += " " + extra.at(gpu);
      text += "\n";
    }
    nvml_.SetFaults(text);
  }

  void Launch(const std::string& log = "log",
              const std::string& reset = std::string(FAKE_NVIDIA_SMI) + " -r -i {uuid}") {
    plugin_ = std::make_unique<PluginProcess>(
        DevicePluginBinary(),
        std::vector<std::string>{"--root", host_.root(), "--socket-dir", sockets_, "--cdi-dir",
                                 dirs_.path() + "/cdi", "--lease-file",
                                 dirs_.path() + "/run/leases.json", "--config", config_,
                                 "--gpu-reset-command", reset, "--pod-resources-socket",
                                 pods_.socket_path(), "--health-state-file", state_},
        dirs_.path() + "/" + log);
    ++launches_;
  }

  std::unique_ptr<PluginClient> Connect() {
    if (!kubelet_.WaitForRegistration(kGpu, launches_, kEventTimeout)) {
      ADD_FAILURE() << "no registration; log:\n" << plugin_->Log();
      return nullptr;
    }
    auto client = std::make_unique<PluginClient>(sockets_ + "/tessera-nvidia-com-gpu.sock");
    client->Watch();
    return client;
  }

  void Xid(int gpu, int xid) {
    nvml_.AddEvent(std::string(kHgxGpuPci[gpu]) + " " + std::to_string(xid));
  }

  bool Logged(const std::string& text) {
    return WaitUntil([&] { return plugin_->Log().find(text) != std::string::npos; });
  }

  static podresources::PodDevices Pod(const std::string& name, int gpu) {
    return {"team-a", name, {{"main", kGpu, {HgxGpuUuid(gpu)}}}};
  }

  FakeNvmlFaults nvml_;  // its environment reaches the plugin
  TempHost host_{"hgx-h100-dgx"};
  TempDir dirs_;
  std::string sockets_ = dirs_.path() + "/device-plugins";
  std::string config_ = dirs_.path() + "/config.yaml";
  std::string state_ = dirs_.path() + "/state/gpu-health.json";
  PodResourcesKubelet pods_{dirs_.path() + "/pod-resources.sock"};
  KubeletEmulator kubelet_{sockets_};
  std::unique_ptr<PluginProcess> plugin_;
  int launches_ = 0;
};

TEST_F(FaultTest, FallenOffTheBusIsUnhealthyNamesItsPodsAndComesBackOnlyAfterTheReset) {
  pods_.SetPods({Pod("trainer", 3), Pod("other", 5)});
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout)) << plugin_->Log();

  Xid(3, 79);
  auto list = client->WaitForList(HealthIs(3, "Unhealthy"), kEventTimeout);
  ASSERT_TRUE(list) << plugin_->Log();
  for (int gpu : {0, 1, 2, 4, 5, 6, 7})
    EXPECT_EQ(HealthOf(*list, HgxGpuUuid(gpu)), "Healthy") << gpu;
  // The log names the fault and the Pod that holds the GPU, and no other Pod.
  ASSERT_TRUE(Logged("Xid 79 (GPU has fallen off the bus) on " + std::string(kHgxGpuPci[3])))
      << plugin_->Log();
  EXPECT_TRUE(Logged("Pods holding it: team-a/trainer")) << plugin_->Log();
  EXPECT_EQ(plugin_->Log().find("team-a/other"), std::string::npos) << plugin_->Log();
  v1beta1::AllocateResponse response;
  grpc::Status status = client->Allocate({{HgxGpuUuid(3)}}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("Xid 79"), std::string::npos) << status.error_message();

  // While the Pod holds the GPU it is not reset, and stays Unhealthy (recovery looks every
  // 100 ms: ten rounds at least).
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(nvml_.ResetLog(), "");
  EXPECT_TRUE(client->WaitForList(HealthIs(3, "Unhealthy"), std::chrono::milliseconds(10)));

  // The Pod is gone: reset (the plugin let go of NVML: not refused), verified, Healthy.
  pods_.SetPods({Pod("other", 5)});
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout)) << plugin_->Log();
  EXPECT_EQ(nvml_.ResetLog(), ResetLine(3) + "\n") << plugin_->Log();
  EXPECT_TRUE(client->Allocate({{HgxGpuUuid(3)}}, &response).ok());
  auto state = ReadWholeFile(state_);
  ASSERT_TRUE(state.ok());
  EXPECT_NE(state->find("\"step\": \"healthy\""), std::string::npos) << *state;
  EXPECT_NE(state->find("\"xid\": 79"), std::string::npos) << *state;
}

TEST_F(FaultTest, AnApplicationXidLeavesTheGpuHealthy) {
  pods_.SetPods({Pod("buggy", 2)});
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  Xid(2, 13);
  ASSERT_TRUE(Logged("Xid 13 (graphics engine exception) on " + std::string(kHgxGpuPci[2])))
      << plugin_->Log();
  EXPECT_TRUE(Logged("the GPU stays in service; Pods on it: team-a/buggy")) << plugin_->Log();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(client->WaitForList(AllHealthy, std::chrono::milliseconds(10)));
  EXPECT_EQ(nvml_.ResetLog(), "");
}

TEST_F(FaultTest, ARemapFailureStaysUnhealthyWithoutAResetAndAcrossARestart) {
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  SetFaults({{6, "remap_failure=1"}});  // seen on the monitor's next read of NVML state
  ASSERT_TRUE(client->WaitForList(HealthIs(6, "Unhealthy"), kEventTimeout)) << plugin_->Log();
  ASSERT_TRUE(Logged("row remap failure on " + std::string(kHgxGpuPci[6]))) << plugin_->Log();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_TRUE(client->WaitForList(HealthIs(6, "Unhealthy"), std::chrono::milliseconds(10)));
  EXPECT_EQ(nvml_.ResetLog(), "") << plugin_->Log();

  // A restarted plugin remembers it from its health file (NVML no longer says so): Unhealthy
  // from its first list, still never reset.
  EXPECT_EQ(plugin_->Stop(), 0) << plugin_->Log();
  client.reset();
  SetFaults({});
  Launch("log2");
  client = Connect();
  ASSERT_TRUE(client);
  auto list = client->WaitForList(
      [](const ListAndWatchResponse& l) { return l.devices_size() == 8; }, kEventTimeout);
  ASSERT_TRUE(list);
  EXPECT_EQ(HealthOf(*list, HgxGpuUuid(6)), "Unhealthy") << plugin_->Log();
  EXPECT_TRUE(Logged("Unhealthy since an earlier run")) << plugin_->Log();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(nvml_.ResetLog(), "");
}

TEST_F(FaultTest, AGpuWhoseResetKeepsFailingStaysOutAfterThreeAttempts) {
  SetFaults({{1, "reset_fail=3"}});
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  Xid(1, 48);
  ASSERT_TRUE(Logged("stays out of service")) << plugin_->Log();
  const std::string failed = ResetLine(1, 3) + "\n";
  EXPECT_EQ(nvml_.ResetLog(), failed + failed + failed) << plugin_->Log();
  EXPECT_TRUE(client->WaitForList(HealthIs(1, "Unhealthy"), std::chrono::milliseconds(10)));
}

TEST_F(FaultTest, WithoutAResetCommandAFaultedGpuStaysOut) {
  Launch("log", "none");
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  Xid(4, 79);
  ASSERT_TRUE(Logged("stays out of service")) << plugin_->Log();
  EXPECT_TRUE(Logged("no reset command is set")) << plugin_->Log();
  EXPECT_TRUE(client->WaitForList(HealthIs(4, "Unhealthy"), kEventTimeout));
  EXPECT_EQ(nvml_.ResetLog(), "");
}

}  // namespace
}  // namespace tessera::testing
