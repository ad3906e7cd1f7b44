// GPU faults end to end: the real tessera-device-plugin on a materialized HGX H100 host, the
// stand-in NVML delivering Xids from a file, kubelet emulated (device plugin registration and
// PodResources) and a stand-in reset command that records each reset.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "common/atomic_file.h"
#include "deviceplugin/kubelet_emulator.h"
#include "deviceplugin/plugin_process.h"
#include "podresources/podresources_kubelet.h"
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

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(sockets_);
    std::filesystem::create_directories(dirs_.path() + "/run");
    // The stand-in reset: records its arguments, as `nvidia-smi -r -i <uuid>` would take them.
    ASSERT_TRUE(
        WriteFileAtomically(reset_, "#!/bin/sh\necho \"$*\" >> " + resets_ + "\n", 0755).ok());
    ASSERT_TRUE(WriteFileAtomically(config_, std::string("health: {nvmlLibrary: ") + FAKE_NVML +
                                                 ", recoveryIntervalMs: 100}\n")
                    .ok());
    ASSERT_TRUE(WriteFileAtomically(events_, "").ok());
    ASSERT_TRUE(pods_.ok());
    kubelet_.Start();
  }

  void Launch(const std::string& log = "log") {
    ::setenv("TESSERA_FAKE_NVML_EVENTS", events_.c_str(), 1);
    plugin_ = std::make_unique<PluginProcess>(
        DevicePluginBinary(),
        std::vector<std::string>{
            "--root", host_.root(), "--socket-dir", sockets_, "--cdi-dir", dirs_.path() + "/cdi",
            "--lease-file", dirs_.path() + "/run/leases.json", "--config", config_,
            "--gpu-reset-command", reset_ + " -r -i {uuid}", "--pod-resources-socket",
            pods_.socket_path(), "--health-state-file", state_},
        dirs_.path() + "/" + log);
    ::unsetenv("TESSERA_FAKE_NVML_EVENTS");
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

  // The stand-in NVML delivers each line once, in order: a new event is a new line.
  void Xid(int gpu, int xid) {
    events_text_ += std::string(kHgxGpuPci[gpu]) + " " + std::to_string(xid) + "\n";
    ASSERT_TRUE(WriteFileAtomically(events_, events_text_).ok());
  }

  std::string Resets() const {
    auto text = ReadWholeFile(resets_);
    return text.ok() ? *text : "";
  }

  bool Logged(const std::string& text) {
    return WaitUntil([&] { return plugin_->Log().find(text) != std::string::npos; });
  }

  static podresources::PodDevices Pod(const std::string& name, int gpu) {
    return {"team-a", name, {{"main", kGpu, {HgxGpuUuid(gpu)}}}};
  }

  TempHost host_{"hgx-h100-dgx"};
  TempDir dirs_;
  std::string sockets_ = dirs_.path() + "/device-plugins";
  std::string config_ = dirs_.path() + "/config.yaml";
  std::string events_ = dirs_.path() + "/xid-events";
  std::string reset_ = dirs_.path() + "/nvidia-smi";
  std::string resets_ = dirs_.path() + "/resets";
  std::string state_ = dirs_.path() + "/state/gpu-health.json";
  std::string events_text_;
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
  EXPECT_EQ(Resets(), "");
  EXPECT_TRUE(client->WaitForList(HealthIs(3, "Unhealthy"), std::chrono::milliseconds(10)));

  // The Pod is gone: reset, verified, Healthy.
  pods_.SetPods({Pod("other", 5)});
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout)) << plugin_->Log();
  EXPECT_EQ(Resets(), "-r -i " + HgxGpuUuid(3) + "\n") << plugin_->Log();
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
  EXPECT_EQ(Resets(), "");
}

TEST_F(FaultTest, ARemapFailureStaysUnhealthyWithoutAResetAndAcrossARestart) {
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  Xid(6, 64);
  ASSERT_TRUE(client->WaitForList(HealthIs(6, "Unhealthy"), kEventTimeout)) << plugin_->Log();
  ASSERT_TRUE(Logged("row remap failure")) << plugin_->Log();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_TRUE(client->WaitForList(HealthIs(6, "Unhealthy"), std::chrono::milliseconds(10)));
  EXPECT_EQ(Resets(), "") << plugin_->Log();

  // A restarted plugin remembers it: Unhealthy from its first list, still never reset.
  EXPECT_EQ(plugin_->Stop(), 0) << plugin_->Log();
  client.reset();
  events_text_.clear();
  ASSERT_TRUE(WriteFileAtomically(events_, "").ok());
  Launch("log2");
  client = Connect();
  ASSERT_TRUE(client);
  auto list = client->WaitForList(
      [](const ListAndWatchResponse& l) { return l.devices_size() == 8; }, kEventTimeout);
  ASSERT_TRUE(list);
  EXPECT_EQ(HealthOf(*list, HgxGpuUuid(6)), "Unhealthy") << plugin_->Log();
  EXPECT_TRUE(Logged("Unhealthy since an earlier run")) << plugin_->Log();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(Resets(), "");
}

}  // namespace
}  // namespace tessera::testing
