// End to end with MIG: the real tessera-device-plugin on the mixed H100 MIG fixture, MIG facts
// from the stand-in NVML, driven by the kubelet emulator over real unix sockets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "common/atomic_file.h"
#include "deviceplugin/kubelet_emulator.h"
#include "deviceplugin/plugin_process.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

const char* k2g = "MIG-8e2c3d4b-0005-4000-8004-000000000000";
const char* k1g = "MIG-8e2c3d4b-000d-4000-8006-000000000000";

class MigPluginTest : public ::testing::Test {
 protected:
  void Launch(const std::string& strategy, const std::string& extra_yaml = "") {
    sockets_ = dirs_.path() + "/device-plugins";
    std::filesystem::create_directories(sockets_);
    std::string config = dirs_.path() + "/config.yaml";
    ASSERT_TRUE(WriteFileAtomically(config, "migStrategy: " + strategy +
                                                "\nhealth:\n  nvmlLibrary: " FAKE_NVML "\n" +
                                                extra_yaml)
                    .ok());
    kubelet_ = std::make_unique<KubeletEmulator>(sockets_);
    kubelet_->Start();
    plugin_ = std::make_unique<PluginProcess>(
        DevicePluginBinary(),
        std::vector<std::string>{
            "--root", host_.root(), "--socket-dir", sockets_, "--cdi-dir", dirs_.path() + "/cdi",
            "--lease-file", dirs_.path() + "/leases.json", "--config", config,
            "--health-state-file", dirs_.path() + "/gpu-health.json", "--pod-resources-socket",
            "none", "--gpu-reset-command", std::string(FAKE_NVIDIA_SMI) + " -r -i {uuid}"},
        dirs_.path() + "/log");
  }
  std::unique_ptr<PluginClient> Connect(const std::string& resource) {
    auto registration = kubelet_->WaitForRegistration(resource, 1, kEventTimeout);
    if (!registration) {
      ADD_FAILURE() << "no registration of " << resource << "; log:\n" << plugin_->Log();
      return nullptr;
    }
    auto client = std::make_unique<PluginClient>(sockets_ + "/" + registration->endpoint());
    client->Watch();
    return client;
  }

  FakeNvmlState nvml_{"h100-mig-mixed"};  // inherited by the plugin process
  FakeNvmlFaults faults_;                 // so are its scripted faults and the resets' log
  TempHost host_{"h100-mig-mixed"};
  TempDir dirs_;
  std::string sockets_;
  std::unique_ptr<KubeletEmulator> kubelet_;
  std::unique_ptr<PluginProcess> plugin_;
};

TEST_F(MigPluginTest, MixedServesEachProfileAndAllocatesTheSliceInEveryMode) {
  Launch("mixed", "deviceListStrategy: [cdi-cri, device-specs, envvar]\n");
  for (const char* resource :
       {"nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu"})
    ASSERT_TRUE(kubelet_->WaitForRegistration(resource, 1, kEventTimeout)) << resource;
  auto client = Connect("nvidia.com/mig-2g.20gb");
  ASSERT_TRUE(client);
  auto list = client->WaitForList(
      [](const auto& l) { return l.devices_size() == 1 && HealthOf(l, k2g) == "Healthy"; },
      kEventTimeout);
  ASSERT_TRUE(list) << plugin_->Log();

  v1beta1::AllocateResponse response;
  ASSERT_TRUE(client->Allocate({{k2g}}, &response).ok());
  const auto& container = response.container_responses(0);
  ASSERT_EQ(container.cdi_devices_size(), 1);
  EXPECT_EQ(container.cdi_devices(0).name(), std::string("nvidia.com/gpu=") + k2g);
  EXPECT_EQ(container.envs().at("NVIDIA_VISIBLE_DEVICES"), k2g);
  std::set<std::string> paths;
  for (const auto& d : container.devices())
    paths.insert(d.container_path());
  EXPECT_TRUE(paths.count("/dev/nvidia0"));
  EXPECT_TRUE(paths.count("/dev/nvidia-caps/nvidia-cap48"));
  EXPECT_TRUE(paths.count("/dev/nvidia-caps/nvidia-cap49"));
  EXPECT_FALSE(paths.count("/dev/nvidia1"));
  EXPECT_FALSE(paths.count("/dev/nvidia-caps/nvidia-cap121"));
}

TEST_F(MigPluginTest, ASliceWhoseCapabilityNodeGoesTurnsUnhealthyAlone) {
  Launch("mixed");
  auto slice = Connect("nvidia.com/mig-1g.10gb");
  auto other = Connect("nvidia.com/mig-2g.20gb");
  ASSERT_TRUE(slice && other);
  ASSERT_TRUE(slice->WaitForList([](const auto& l) { return HealthOf(l, k1g) == "Healthy"; },
                                 kEventTimeout));
  ASSERT_EQ(::unlink((host_.root() + "/dev/nvidia-caps/nvidia-cap121").c_str()), 0);
  EXPECT_TRUE(slice->WaitForList([](const auto& l) { return HealthOf(l, k1g) == "Unhealthy"; },
                                 kEventTimeout))
      << plugin_->Log();
  auto latest =
      other->WaitForList([](const auto& l) { return l.devices_size() == 1; }, kEventTimeout);
  ASSERT_TRUE(latest);
  EXPECT_EQ(HealthOf(*latest, k2g), "Healthy");
}

TEST_F(MigPluginTest, AFaultContainedToOneGpuInstanceTakesItsSliceAloneUntilTheReset) {
  Launch("mixed", "  recoveryIntervalMs: 100\n");  // inside health:
  auto faulty = Connect("nvidia.com/mig-2g.20gb");
  auto other = Connect("nvidia.com/mig-1g.10gb");
  ASSERT_TRUE(faulty && other);
  ASSERT_TRUE(faulty->WaitForList([](const auto& l) { return HealthOf(l, k2g) == "Healthy"; },
                                  kEventTimeout));
  // Xid 94 names GPU instance 5, the 2g.20gb slice's.
  faults_.AddEvent("0000:18:00.0 94 gi=5 ci=0");
  ASSERT_TRUE(faulty->WaitForList([](const auto& l) { return HealthOf(l, k2g) == "Unhealthy"; },
                                  kEventTimeout))
      << plugin_->Log();
  EXPECT_TRUE(other->WaitForList([](const auto& l) { return HealthOf(l, k1g) == "Healthy"; },
                                 std::chrono::milliseconds(10)));
  EXPECT_TRUE(WaitUntil([&] {
    return plugin_->Log().find("(GPU instance 5)") != std::string::npos;
  })) << plugin_->Log();
  // No Pod, no process: the whole GPU is reset (by its UUID), verified, and the slice is back.
  ASSERT_TRUE(faulty->WaitForList([](const auto& l) { return HealthOf(l, k2g) == "Healthy"; },
                                  kEventTimeout))
      << plugin_->Log();
  EXPECT_EQ(faults_.ResetLog(),
            "reset GPU-8e2c3d4b-1a5f-4b6c-8d7e-2f3a4b5c6d01 0000:18:00.0 -> 0\n")
      << plugin_->Log();
}

TEST_F(MigPluginTest, SingleRefusesTheMixedLayoutWithAClearMessage) {
  Launch("single");
  EXPECT_TRUE(WaitUntil([&] {
    return plugin_->Log().find("migStrategy single needs one MIG profile") != std::string::npos;
  })) << plugin_->Log();
  EXPECT_NE(plugin_->Stop(), 0);  // it exits on its own with a failure status
}

}  // namespace
}  // namespace tessera::testing
