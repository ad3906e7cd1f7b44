// End to end on a Windows node's inputs: the real tessera-device-plugin process started with a
// DirectX host snapshot, driven by the kubelet emulator over real unix sockets. The same server
// as on Linux; only discovery and the Allocate outputs differ.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <thread>

#include "common/atomic_file.h"
#include "deviceplugin/kubelet_emulator.h"
#include "deviceplugin/plugin_process.h"
#include "support/fixture_host.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using namespace std::chrono_literals;
using v1beta1::ListAndWatchResponse;

const char* kDisplay = "directx.microsoft.com/display";
const char* kCompute = "directx.microsoft.com/compute";

std::string Snapshot(const std::string& name) {
  return std::string(TESSERA_FIXTURES_DIR) + "/windows/" + name;
}

class WindowsPluginTest : public ::testing::Test {
 protected:
  void Launch(const std::string& snapshot, std::vector<std::string> extra = {}) {
    sockets_ = dirs_.path() + "/device-plugins";
    std::filesystem::create_directories(sockets_);
    kubelet_ = std::make_unique<KubeletEmulator>(sockets_);
    kubelet_->Start();
    std::vector<std::string> args = {
        "--windows-snapshot", Snapshot(snapshot),    "--socket-dir", sockets_,
        "--cdi-dir",          dirs_.path() + "/cdi", "--lease-file", dirs_.path() + "/leases.json"};
    args.insert(args.end(), extra.begin(), extra.end());
    plugin_ = std::make_unique<PluginProcess>(DevicePluginBinary(), args, dirs_.path() + "/log");
  }

  std::unique_ptr<PluginClient> Connect(const std::string& resource) {
    auto registration = kubelet_->WaitForRegistration(resource, 1, kEventTimeout);
    if (!registration) {
      ADD_FAILURE() << "no registration of " << resource << "; log:\n" << plugin_->Log();
      return nullptr;
    }
    EXPECT_EQ(registration->version(), "v1beta1");
    auto client = std::make_unique<PluginClient>(sockets_ + "/" + registration->endpoint());
    client->Watch();
    return client;
  }

  TempDir dirs_;
  std::string sockets_;
  std::unique_ptr<KubeletEmulator> kubelet_;
  std::unique_ptr<PluginProcess> plugin_;
};

TEST_F(WindowsPluginTest, AdvertisesDisplayAdaptersByLocationPathAndAllocatesDeviceSpecsAndMounts) {
  Launch("ws2022-aws-4xt4.json");
  auto client = Connect(kDisplay);
  ASSERT_TRUE(client);
  auto list = client->WaitForList(
      [](const ListAndWatchResponse& l) { return l.devices_size() == 4; }, kEventTimeout);
  ASSERT_TRUE(list) << plugin_->Log();
  std::set<std::string> ids;
  for (const auto& device : list->devices()) {
    EXPECT_EQ(device.health(), "Healthy");
    ids.insert(device.id());
  }
  EXPECT_EQ(ids, (std::set<std::string>{"PCIROOT(0)#PCI(1B00)", "PCIROOT(0)#PCI(1C00)",
                                        "PCIROOT(0)#PCI(1D00)", "PCIROOT(0)#PCI(1E00)"}));

  v1beta1::AllocateResponse response;
  ASSERT_TRUE(client->Allocate({{"PCIROOT(0)#PCI(1E00)"}}, &response).ok());
  ASSERT_EQ(response.container_responses_size(), 1);
  const auto& container = response.container_responses(0);
  ASSERT_EQ(container.devices_size(), 1);
  // containerd requires the empty container path and permissions for Windows devices.
  EXPECT_EQ(container.devices(0).host_path(), "vpci-location-path://PCIROOT(0)#PCI(1E00)");
  EXPECT_EQ(container.devices(0).container_path(), "");
  EXPECT_EQ(container.devices(0).permissions(), "");
  EXPECT_EQ(container.cdi_devices_size(), 0);
  ASSERT_GT(container.mounts_size(), 0);
  bool smi = false;
  for (const auto& mount : container.mounts()) {
    EXPECT_TRUE(mount.read_only()) << mount.container_path();
    EXPECT_EQ(mount.host_path().rfind("C:\\Windows\\System32\\DriverStore\\", 0), 0u)
        << mount.host_path();
    if (mount.container_path() == "C:\\Windows\\System32\\nvidia-smi.exe") smi = true;
  }
  EXPECT_TRUE(smi) << "the NVIDIA vendor file nvidia-smi.exe is mounted";
  EXPECT_EQ(kubelet_->RegistrationCount(kCompute), 0);

  grpc::Status bad = client->Allocate({{"PCIROOT(0)#PCI(9900)"}}, &response);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("PCIROOT(0)#PCI(9900)"), std::string::npos)
      << bad.error_message();
}

TEST_F(WindowsPluginTest, ComputeOnlyAdaptersAreTheirOwnResourceAndReplicasShareOneDeviceSpec) {
  Launch("mcdm-compute-only.json", {"--windows-replicas", "2"});
  auto client = Connect(kCompute);
  ASSERT_TRUE(client);
  auto list = client->WaitForList(
      [](const ListAndWatchResponse& l) { return l.devices_size() == 4; }, kEventTimeout);
  ASSERT_TRUE(list) << plugin_->Log();
  const std::string adapter = "PCIROOT(1)#PCI(0100)#PCI(0000)#PCI(0000)#PCI(0000)";
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(client->Allocate({{adapter + "::0", adapter + "::1"}}, &response).ok())
      << plugin_->Log();
  ASSERT_EQ(response.container_responses_size(), 1);
  ASSERT_EQ(response.container_responses(0).devices_size(), 1);
  EXPECT_EQ(response.container_responses(0).devices(0).host_path(),
            "vpci-location-path://" + adapter);
}

TEST_F(WindowsPluginTest, HyperVIsolationServesDismountedGpusOnePerContainer) {
  Launch("ws2022-dda-t4.json", {"--windows-isolation", "hyperv"});
  auto client = Connect("tessera.dev/hyperv-gpu");
  ASSERT_TRUE(client);
  auto list = client->WaitForList(
      [](const ListAndWatchResponse& l) { return l.devices_size() == 1; }, kEventTimeout);
  ASSERT_TRUE(list) << plugin_->Log();
  EXPECT_EQ(list->devices(0).id(), "PCIROOT(0)#PCI(0300)#PCI(0000)");
  EXPECT_EQ(list->devices(0).health(), "Healthy");

  v1beta1::AllocateResponse response;
  ASSERT_TRUE(client->Allocate({{"PCIROOT(0)#PCI(0300)#PCI(0000)"}}, &response).ok())
      << plugin_->Log();
  ASSERT_EQ(response.container_responses_size(), 1);
  const auto& container = response.container_responses(0);
  ASSERT_EQ(container.devices_size(), 1);
  EXPECT_EQ(container.devices(0).host_path(),
            "vpci-instance-id://PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&0018");
  EXPECT_EQ(container.devices(0).container_path(), "");
  EXPECT_EQ(container.devices(0).permissions(), "");
  // The driver reaches the utility VM through the pod's kerneldrivers annotation, not a mount.
  EXPECT_EQ(container.mounts_size(), 0);
  EXPECT_EQ(kubelet_->RegistrationCount(kDisplay), 0);
}

TEST_F(WindowsPluginTest, HyperVIsolationRefusesReplicas) {
  sockets_ = dirs_.path() + "/device-plugins";
  std::filesystem::create_directories(sockets_);
  PluginProcess plugin(DevicePluginBinary(),
                       {"--windows-snapshot", Snapshot("ws2022-dda-t4.json"), "--windows-isolation",
                        "hyperv", "--windows-replicas", "2", "--socket-dir", sockets_},
                       dirs_.path() + "/log");
  EXPECT_TRUE(WaitUntil([&] { return plugin.Log().find("replicas") != std::string::npos; }));
  EXPECT_NE(plugin.Stop(), 0);
  EXPECT_NE(plugin.Log().find("goes whole to one container"), std::string::npos) << plugin.Log();
}

TEST_F(WindowsPluginTest, ASnapshotThatDoesNotParseStopsThePluginWithTheFileNamed) {
  std::string bad = dirs_.path() + "/bad.json";
  ASSERT_TRUE(WriteFileAtomically(bad, "{not json").ok());
  sockets_ = dirs_.path() + "/device-plugins";
  std::filesystem::create_directories(sockets_);
  PluginProcess plugin(DevicePluginBinary(), {"--windows-snapshot", bad, "--socket-dir", sockets_},
                       dirs_.path() + "/log");
  EXPECT_TRUE(WaitUntil([&] { return plugin.Log().find("bad.json") != std::string::npos; }));
  int status = plugin.Stop();
  EXPECT_NE(status, 0);
  EXPECT_NE(plugin.Log().find("bad.json"), std::string::npos) << plugin.Log();
}

}  // namespace
}  // namespace tessera::testing
