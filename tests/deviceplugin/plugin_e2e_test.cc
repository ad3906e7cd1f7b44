// End to end: the real tessera-device-plugin process on a materialized HGX H100 host, driven by
// the in-repo kubelet emulator over real unix sockets.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cdi/cdi.h"
#include "common/atomic_file.h"
#include "deviceplugin/kubelet_emulator.h"
#include "deviceplugin/plugin_process.h"
#include "support/fixture_host.h"
#include "support/hgx_gpus.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using namespace std::chrono_literals;
using v1beta1::ListAndWatchResponse;

const char* kGpu = "nvidia.com/gpu";
const char* kEndpoint = "tessera-nvidia-com-gpu.sock";

// One plugin process on a private copy of the HGX host, with its own socket, CDI and lease dirs.
class PluginTest : public ::testing::Test {
 protected:
  void Launch(const std::string& config_yaml = "", std::vector<std::string> extra = {}) {
    sockets_ = dirs_.path() + "/device-plugins";
    cdi_ = dirs_.path() + "/cdi";
    leases_ = dirs_.path() + "/run/leases.json";
    std::filesystem::create_directories(sockets_);
    std::filesystem::create_directories(dirs_.path() + "/run");
    config_ = dirs_.path() + "/config.yaml";
    // NVML is absent on test machines; name a path that cannot load so the test never depends
    // on what the host has.
    bool own_health = config_yaml.find("health:") != std::string::npos;
    WriteConfig(
        (own_health ? "" : "health:\n  nvmlLibrary: " + dirs_.path() + "/no-libnvidia-ml.so.1\n") +
        config_yaml);
    kubelet_ = std::make_unique<KubeletEmulator>(sockets_);
    kubelet_->Start();
    // GPU faults: a private health file, no PodResources, and a stand-in reset (never the
    // host's nvidia-smi) that records what it was asked once the test lets it (reset_go_).
    resets_ = dirs_.path() + "/resets";
    reset_go_ = dirs_.path() + "/reset-go";
    std::string reset = dirs_.path() + "/nvidia-smi";
    ASSERT_TRUE(WriteFileAtomically(reset,
                                    "#!/bin/sh\nwhile [ ! -e " + reset_go_ +
                                        " ]; do sleep 0.05; done\necho \"$*\" >> " + resets_ + "\n",
                                    0755)
                    .ok());
    std::vector<std::string> args = {"--root",
                                     host_.root(),
                                     "--socket-dir",
                                     sockets_,
                                     "--cdi-dir",
                                     cdi_,
                                     "--lease-file",
                                     leases_,
                                     "--config",
                                     config_,
                                     "--health-state-file",
                                     dirs_.path() + "/gpu-health.json",
                                     "--pod-resources-socket",
                                     "none",
                                     "--gpu-reset-command",
                                     reset + " -r -i {uuid}"};
    args.insert(args.end(), extra.begin(), extra.end());
    plugin_ = std::make_unique<PluginProcess>(DevicePluginBinary(), args, dirs_.path() + "/log");
  }

  void WriteConfig(const std::string& yaml) {
    ASSERT_TRUE(WriteFileAtomically(config_, yaml).ok());
  }

  // Waits for the n-th registration of `resource` and dials it, following ListAndWatch.
  std::unique_ptr<PluginClient> Connect(const std::string& resource = kGpu, int n = 1) {
    auto registration = kubelet_->WaitForRegistration(resource, n, kEventTimeout);
    if (!registration) {
      ADD_FAILURE() << "no registration " << n << " of " << resource << "; log:\n"
                    << plugin_->Log();
      return nullptr;
    }
    auto client = std::make_unique<PluginClient>(sockets_ + "/" + registration->endpoint());
    client->Watch();
    return client;
  }

  void WriteLeases(const std::string& json) {
    ASSERT_TRUE(WriteFileAtomically(leases_, json).ok());
  }

  TempHost host_{"hgx-h100-dgx"};
  TempDir dirs_;
  std::string sockets_, cdi_, leases_, config_, resets_, reset_go_;
  std::unique_ptr<KubeletEmulator> kubelet_;
  std::unique_ptr<PluginProcess> plugin_;
};

TEST_F(PluginTest, RegistersAndAdvertisesEightHealthyGpusWithNuma) {
  Launch();
  auto registration = kubelet_->WaitForRegistration(kGpu, 1, kEventTimeout);
  ASSERT_TRUE(registration) << plugin_->Log();
  EXPECT_EQ(registration->version(), "v1beta1");
  EXPECT_EQ(registration->endpoint(), kEndpoint);
  EXPECT_TRUE(registration->options().get_preferred_allocation_available());
  EXPECT_FALSE(registration->options().pre_start_required());
  // The socket is served before Register is sent.
  struct stat st;
  ASSERT_EQ(::stat((sockets_ + "/" + kEndpoint).c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));

  auto client = Connect();
  auto list = client->WaitForList(AllHealthy, kEventTimeout);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->devices_size(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(list->devices(i).id(), HgxGpuUuid(i));
    ASSERT_EQ(list->devices(i).topology().nodes_size(), 1);
    EXPECT_EQ(list->devices(i).topology().nodes(0).id(), i < 4 ? 0 : 1);
  }
  grpc::ClientContext context;
  v1beta1::Empty empty;
  v1beta1::DevicePluginOptions options;
  ASSERT_TRUE(client->stub().GetDevicePluginOptions(&context, empty, &options).ok());
  EXPECT_TRUE(options.get_preferred_allocation_available());
  // Only GPUs on the nvidia driver: NVSwitches belong to the host's fabric manager.
  EXPECT_EQ(kubelet_->RegistrationCount("nvidia.com/nvswitch"), 0);
}

TEST_F(PluginTest, AllocateCdiCriNamesDevicesOfTheWrittenSpec) {
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(client->Allocate({{HgxGpuUuid(0), HgxGpuUuid(5)}, {HgxGpuUuid(2)}}, &response).ok());
  ASSERT_EQ(response.container_responses_size(), 2);
  const auto& first = response.container_responses(0);
  ASSERT_EQ(first.cdi_devices_size(), 2);
  EXPECT_EQ(first.cdi_devices(0).name(), "nvidia.com/gpu=" + HgxGpuUuid(0));
  EXPECT_EQ(first.cdi_devices(1).name(), "nvidia.com/gpu=" + HgxGpuUuid(5));
  EXPECT_EQ(first.devices_size(), 0);  // cdi-cri alone: no classic device specs
  EXPECT_TRUE(first.envs().empty());
  EXPECT_EQ(response.container_responses(1).cdi_devices(0).name(),
            "nvidia.com/gpu=" + HgxGpuUuid(2));

  // The names exist in the spec the plugin wrote, and the spec passes the strict validator.
  auto text = ReadWholeFile(cdi_ + "/nvidia.com-gpu.json");
  ASSERT_TRUE(text.ok()) << plugin_->Log();
  EXPECT_TRUE(cdi::CheckSpecText(*text).empty());
  auto parsed = cdi::ParseSpec(*text);
  EXPECT_EQ(parsed.spec.kind, "nvidia.com/gpu");
  bool found = false;
  for (const auto& device : parsed.spec.devices)
    found = found || device.name == HgxGpuUuid(5);
  EXPECT_TRUE(found);
}

TEST_F(PluginTest, AllocateCdiAnnotations) {
  Launch("deviceListStrategy: [cdi-annotations]\n");
  auto client = Connect();
  ASSERT_TRUE(client);
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(client->Allocate({{HgxGpuUuid(1), HgxGpuUuid(3)}}, &response).ok());
  const auto& container = response.container_responses(0);
  EXPECT_EQ(container.cdi_devices_size(), 0);
  ASSERT_EQ(container.annotations().size(), 1u);
  const auto& [key, value] = *container.annotations().begin();
  EXPECT_EQ(key.rfind("cdi.k8s.io/tessera_", 0), 0u) << key;
  EXPECT_EQ(value, "nvidia.com/gpu=" + HgxGpuUuid(1) + ",nvidia.com/gpu=" + HgxGpuUuid(3));
}

TEST_F(PluginTest, AllocateDeviceSpecsForContainerdWithoutCdi) {
  Launch("deviceListStrategy: device-specs\n");
  auto client = Connect();
  ASSERT_TRUE(client);
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(client->Allocate({{HgxGpuUuid(3)}}, &response).ok());
  const auto& container = response.container_responses(0);
  EXPECT_EQ(container.cdi_devices_size(), 0);
  std::map<std::string, std::string> devices;
  for (const auto& d : container.devices()) {
    devices[d.container_path()] = d.host_path();
    EXPECT_EQ(d.permissions(), "rw");
  }
  EXPECT_EQ(devices["/dev/nvidia3"], host_.root() + "/dev/nvidia3");
  EXPECT_EQ(devices["/dev/nvidiactl"], host_.root() + "/dev/nvidiactl");
  EXPECT_TRUE(devices.count("/dev/nvidia-uvm"));
  EXPECT_FALSE(devices.count("/dev/nvidia0"));  // only the allocated GPU
  bool libcuda = false;
  for (const auto& m : container.mounts()) {
    if (m.container_path() == "/usr/lib/x86_64-linux-gnu/libcuda.so.1") {
      libcuda = true;
      EXPECT_TRUE(m.read_only());
      EXPECT_EQ(m.host_path(), host_.root() + "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06");
    }
  }
  EXPECT_TRUE(libcuda);
}

TEST_F(PluginTest, AllocateEnvvar) {
  Launch("deviceListStrategy: [envvar]\n");
  auto client = Connect();
  ASSERT_TRUE(client);
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(client->Allocate({{HgxGpuUuid(6), HgxGpuUuid(7)}}, &response).ok());
  const auto& envs = response.container_responses(0).envs();
  ASSERT_TRUE(envs.count("NVIDIA_VISIBLE_DEVICES"));
  EXPECT_EQ(envs.at("NVIDIA_VISIBLE_DEVICES"), HgxGpuUuid(6) + "," + HgxGpuUuid(7));
  EXPECT_EQ(response.container_responses(0).devices_size(), 0);
}

TEST_F(PluginTest, AllModesAtOnceFromTheEnvironmentFlagOverridesTheFile) {
  // The file asks for envvar only; the flag wins.
  Launch("deviceListStrategy: [envvar]\n",
         {"--device-list-strategy", "cdi-cri,cdi-annotations,device-specs,envvar"});
  auto client = Connect();
  ASSERT_TRUE(client);
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(client->Allocate({{HgxGpuUuid(4)}}, &response).ok());
  const auto& c = response.container_responses(0);
  EXPECT_EQ(c.cdi_devices_size(), 1);
  EXPECT_EQ(c.annotations().size(), 1u);
  EXPECT_GT(c.devices_size(), 0);
  EXPECT_EQ(c.envs().at("NVIDIA_VISIBLE_DEVICES"), HgxGpuUuid(4));
}

TEST_F(PluginTest, BadIdsAreInvalidArgumentNamingTheId) {
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  v1beta1::AllocateResponse response;
  grpc::Status status = client->Allocate({{HgxGpuUuid(0), "GPU-does-not-exist"}}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("GPU-does-not-exist"), std::string::npos)
      << status.error_message();
  std::vector<std::string> chosen;
  status = client->Preferred({HgxGpuUuid(0), "0000:ff:00.0"}, {}, 1, &chosen);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("0000:ff:00.0"), std::string::npos);
}

TEST_F(PluginTest, AMegabyteDeviceIdIsQuotedAsAnExcerptAndTheChannelStaysUsable) {
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  // gRPC carries the status in trailers: the whole ID there would exceed kubelet's metadata
  // limit and fail every later call on the channel, its ListAndWatch stream included.
  const std::string huge = "GPU-" + std::string(1 << 20, 'x');
  v1beta1::AllocateResponse response;
  grpc::Status status = client->Allocate({{huge}}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("GPU-xxxx"), std::string::npos) << status.error_message();
  EXPECT_NE(status.error_message().find("...\" is not a device of nvidia.com/gpu"),
            std::string::npos)
      << status.error_message();
  EXPECT_LT(status.error_message().size(), 200u);
  std::vector<std::string> chosen;
  status = client->Preferred({HgxGpuUuid(0), huge}, {}, 1, &chosen);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(status.error_message().size(), 200u);

  // The same channel: the next Allocate works, and its ListAndWatch stream still delivers.
  status = client->Allocate({{HgxGpuUuid(0)}}, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.container_responses_size(), 1);
  WriteLeases(std::string(R"({"version":1,"gpus":{")") + kHgxGpuPci[3] +
              R"(":{"state":"quarantined"}}})");
  EXPECT_TRUE(client->WaitForList(
      [](const ListAndWatchResponse& l) { return HealthOf(l, HgxGpuUuid(3)) == "Unhealthy"; },
      kEventTimeout))
      << plugin_->Log();
  EXPECT_FALSE(client->stream_ended());
  // Nor does the log carry the ID whole.
  EXPECT_EQ(plugin_->Log().find(std::string(1000, 'x')), std::string::npos);
}

TEST_F(PluginTest, ReplicasRenamedSharedAndNeverRepeatedInOutputs) {
  Launch(
      "sharing:\n"
      "  timeSlicing:\n"
      "    renameByDefault: true\n"
      "    resources:\n"
      "      - name: nvidia.com/gpu\n"
      "        replicas: 4\n");
  auto client = Connect("nvidia.com/gpu.shared");
  ASSERT_TRUE(client);
  auto list = client->WaitForList(AllHealthy, kEventTimeout);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->devices_size(), 32);
  EXPECT_EQ(list->devices(0).id(), HgxGpuUuid(0) + "::0");
  EXPECT_EQ(list->devices(3).id(), HgxGpuUuid(0) + "::3");
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(
      client
          ->Allocate({{HgxGpuUuid(1) + "::0", HgxGpuUuid(1) + "::2", HgxGpuUuid(2) + "::1"}},
                     &response)
          .ok());
  const auto& c = response.container_responses(0);
  ASSERT_EQ(c.cdi_devices_size(), 2);  // GPU 1 once, GPU 2 once
  EXPECT_EQ(c.cdi_devices(0).name(), "nvidia.com/gpu=" + HgxGpuUuid(1));
  EXPECT_EQ(c.cdi_devices(1).name(), "nvidia.com/gpu=" + HgxGpuUuid(2));

  // distributed: two replicas come from two different GPUs, avoiding the busiest.
  std::vector<std::string> available;
  for (const auto& d : list->devices()) {
    // GPU 0 has replicas ::0 and ::1 in use.
    if (d.id() != HgxGpuUuid(0) + "::0" && d.id() != HgxGpuUuid(0) + "::1")
      available.push_back(d.id());
  }
  std::vector<std::string> chosen;
  ASSERT_TRUE(client->Preferred(available, {}, 2, &chosen).ok());
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_EQ(chosen[0], HgxGpuUuid(1) + "::0");
  EXPECT_EQ(chosen[1], HgxGpuUuid(2) + "::0");
}

TEST_F(PluginTest, FailRequestsGreaterThanOneRefusesTwoReplicas) {
  Launch(
      "allocationPolicy: packed\n"
      "sharing:\n"
      "  timeSlicing:\n"
      "    failRequestsGreaterThanOne: true\n"
      "    resources:\n"
      "      - {name: nvidia.com/gpu, replicas: 2}\n");
  auto client = Connect();  // not renamed
  ASSERT_TRUE(client);
  v1beta1::AllocateResponse response;
  grpc::Status status =
      client->Allocate({{HgxGpuUuid(1) + "::0", HgxGpuUuid(2) + "::1"}}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("failRequestsGreaterThanOne"), std::string::npos);
  EXPECT_TRUE(client->Allocate({{HgxGpuUuid(1) + "::1"}}, &response).ok());
  // packed: the GPU with a replica already in use gets the next one.
  std::vector<std::string> available;
  for (int i = 0; i < 8; ++i) {
    for (int n = 0; n < 2; ++n) {
      if (!(i == 5 && n == 0)) available.push_back(HgxGpuUuid(i) + "::" + std::to_string(n));
    }
  }
  std::vector<std::string> chosen;
  ASSERT_TRUE(client->Preferred(available, {}, 1, &chosen).ok());
  EXPECT_EQ(chosen, std::vector<std::string>{HgxGpuUuid(5) + "::1"});
}

std::vector<std::string> AllIds() {
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i)
    ids.push_back(HgxGpuUuid(i));
  return ids;
}

TEST_F(PluginTest, PreferredSetsFollowPciSwitchesWithoutATable) {
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  std::vector<std::string> chosen;
  // GPUs sit in pairs behind PCIe switches: must include GPU 2 -> its switch partner GPU 3.
  ASSERT_TRUE(client->Preferred(AllIds(), {HgxGpuUuid(2)}, 2, &chosen).ok());
  std::sort(chosen.begin(), chosen.end());
  EXPECT_EQ(chosen, (std::vector<std::string>{HgxGpuUuid(2), HgxGpuUuid(3)}));
  // Four: one NUMA node.
  grpc::Status status = client->Preferred(AllIds(), {HgxGpuUuid(5)}, 4, &chosen);
  ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  std::sort(chosen.begin(), chosen.end());
  EXPECT_EQ(chosen,
            (std::vector<std::string>{HgxGpuUuid(4), HgxGpuUuid(5), HgxGpuUuid(6), HgxGpuUuid(7)}));
}

TEST_F(PluginTest, PreferredSetsAreWholeFabricPartitionsWithATable) {
  // Module IDs are not PCI order: module m is the GPU on bus kBus[m].
  Launch(
      "topology:\n"
      "  partitionTable: hgx-h100-8gpu\n"
      "  modules: {1: '0000:3a:00.0', 2: '0000:5d:00.0', 3: '0000:18:00.0', 4: '0000:2a:00.0',\n"
      "            5: '0000:db:00.0', 6: '0000:ba:00.0', 7: '0000:ab:00.0', 8: '0000:9a:00.0'}\n");
  auto client = Connect();
  ASSERT_TRUE(client);
  std::vector<std::string> chosen;
  // Pair partitions are {1,3} {2,4} {5,7} {6,8}: module 1 (3a = GPU 2) pairs with module 3
  // (18 = GPU 0), not with its PCIe switch partner.
  ASSERT_TRUE(client->Preferred(AllIds(), {HgxGpuUuid(2)}, 2, &chosen).ok());
  std::sort(chosen.begin(), chosen.end());
  EXPECT_EQ(chosen, (std::vector<std::string>{HgxGpuUuid(0), HgxGpuUuid(2)}));
  // With module 3 (GPU 0) gone, a 4-GPU request gets partition {5,6,7,8}.
  std::vector<std::string> available = AllIds();
  available.erase(available.begin());
  ASSERT_TRUE(client->Preferred(available, {}, 4, &chosen).ok());
  std::sort(chosen.begin(), chosen.end());
  EXPECT_EQ(chosen,
            (std::vector<std::string>{HgxGpuUuid(4), HgxGpuUuid(5), HgxGpuUuid(6), HgxGpuUuid(7)}));
}

TEST_F(PluginTest, RemovedDeviceNodeIsUnhealthyAndRecovers) {
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  std::string node = host_.root() + "/dev/nvidia3";
  std::string aside = host_.root() + "/nvidia3.removed";
  ASSERT_EQ(std::rename(node.c_str(), aside.c_str()), 0);
  auto list = client->WaitForList(
      [](const ListAndWatchResponse& l) { return HealthOf(l, HgxGpuUuid(3)) == "Unhealthy"; },
      kEventTimeout);
  ASSERT_TRUE(list) << "not Unhealthy";
  EXPECT_EQ(HealthOf(*list, HgxGpuUuid(2)), "Healthy");
  v1beta1::AllocateResponse response;
  grpc::Status status = client->Allocate({{HgxGpuUuid(3)}}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find(HgxGpuUuid(3)), std::string::npos);

  ASSERT_EQ(std::rename(aside.c_str(), node.c_str()), 0);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout)) << "not Healthy again";
  EXPECT_TRUE(client->Allocate({{HgxGpuUuid(3)}}, &response).ok());
}

TEST_F(PluginTest, RemovedSysfsEntryIsUnhealthyAndRecovers) {
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  // A hot-unplug removes the device from /sys/bus/pci/devices.
  std::string entry = host_.root() + "/sys/bus/pci/devices/" + kHgxGpuPci[6];
  std::string aside = host_.root() + "/sys/bus/pci/unplugged-" + kHgxGpuPci[6];
  ASSERT_EQ(std::rename(entry.c_str(), aside.c_str()), 0);
  auto list = client->WaitForList(
      [](const ListAndWatchResponse& l) { return HealthOf(l, HgxGpuUuid(6)) == "Unhealthy"; },
      kEventTimeout);
  ASSERT_TRUE(list) << "not Unhealthy";
  ASSERT_EQ(std::rename(aside.c_str(), entry.c_str()), 0);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout)) << "not Healthy again";
}

TEST_F(PluginTest, QuarantinedLeaseIsUnhealthyAndRefused) {
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  WriteLeases(std::string(R"({"version":1,"gpus":{")") + kHgxGpuPci[1] +
              R"(":{"state":"quarantined","reason":"ECC errors","tenancy":"t1"},")" +
              kHgxGpuPci[2] + R"(":{"state":"active","tenancy":"t2"}}})");
  auto list = client->WaitForList(
      [](const ListAndWatchResponse& l) { return HealthOf(l, HgxGpuUuid(1)) == "Unhealthy"; },
      kEventTimeout);
  ASSERT_TRUE(list);
  EXPECT_EQ(HealthOf(*list, HgxGpuUuid(2)), "Healthy");  // active leases do not block
  v1beta1::AllocateResponse response;
  grpc::Status status = client->Allocate({{HgxGpuUuid(1)}}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find(HgxGpuUuid(1)), std::string::npos);
  EXPECT_NE(status.error_message().find("quarantined"), std::string::npos);

  // A file that does not parse keeps the last good leases: the GPU is not handed out again.
  WriteLeases("{\"version\":1,\"gpus\":");
  ASSERT_TRUE(WaitUntil([&] {
    return plugin_->Log().find("lease file ignored") != std::string::npos;
  })) << plugin_->Log();
  EXPECT_FALSE(client->Allocate({{HgxGpuUuid(1)}}, &response).ok());
  EXPECT_NE(plugin_->Log().find("lease file ignored"), std::string::npos);

  // Checking also blocks; back to free recovers.
  WriteLeases(std::string(R"({"version":1,"gpus":{")") + kHgxGpuPci[1] +
              R"(":{"state":"checking"}}})");
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(client->Allocate({{HgxGpuUuid(1)}}, &response).ok());
  WriteLeases(std::string(R"({"version":1,"gpus":{")") + kHgxGpuPci[1] + R"(":{"state":"free"}}})");
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  EXPECT_TRUE(client->Allocate({{HgxGpuUuid(1)}}, &response).ok());
}

TEST_F(PluginTest, KubeletRestartWipesSocketDirAndPluginReregisters) {
  Launch();
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  // What kubelet does on start: stop serving, delete every file in the socket dir, serve again.
  kubelet_->Stop();
  for (const auto& entry : std::filesystem::directory_iterator(sockets_))
    std::filesystem::remove(entry.path());
  // The plugin recreates its own socket even before kubelet is back.
  EXPECT_TRUE(WaitUntil([&] { return std::filesystem::exists(sockets_ + "/" + kEndpoint); }))
      << plugin_->Log();
  kubelet_->Start();
  auto again = kubelet_->WaitForRegistration(kGpu, 2, kEventTimeout);
  ASSERT_TRUE(again) << "no re-registration; log:\n" << plugin_->Log();
  EXPECT_EQ(again->endpoint(), kEndpoint);
  auto fresh = std::make_unique<PluginClient>(sockets_ + "/" + kEndpoint);
  fresh->Watch();
  auto list = fresh->WaitForList(AllHealthy, kEventTimeout);
  ASSERT_TRUE(list);
  EXPECT_EQ(list->devices_size(), 8);
}

TEST_F(PluginTest, SocketDirRemovedAndRecreatedIsWatchedAgain) {
  Launch();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 1, kEventTimeout));
  kubelet_->Stop();
  std::filesystem::remove_all(sockets_);
  // The plugin serves again (recreating the dir), and a kubelet that comes back is answered.
  EXPECT_TRUE(WaitUntil([&] { return std::filesystem::exists(sockets_ + "/" + kEndpoint); }))
      << plugin_->Log();
  std::filesystem::create_directories(sockets_);
  kubelet_->Start();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 2, kEventTimeout)) << plugin_->Log();
  auto client = std::make_unique<PluginClient>(sockets_ + "/" + kEndpoint);
  client->Watch();
  EXPECT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
}

TEST_F(PluginTest, OwnSocketDeletedIsRecreatedAndRegisteredAgain) {
  Launch();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 1, kEventTimeout));
  std::filesystem::remove(sockets_ + "/" + kEndpoint);
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 2, 2s)) << plugin_->Log();
  EXPECT_TRUE(std::filesystem::exists(sockets_ + "/" + kEndpoint));
}

TEST_F(PluginTest, SighupReloadsTheConfig) {
  Launch();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 1, kEventTimeout));
  WriteConfig(
      "health: {nvmlLibrary: /nonexistent/libnvidia-ml.so.1}\n"
      "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: nvidia.com/gpu, "
      "replicas: 3}]}}\n");
  plugin_->Signal(SIGHUP);
  auto client = Connect("nvidia.com/gpu.shared");
  ASSERT_TRUE(client);
  auto list = client->WaitForList(
      [](const ListAndWatchResponse& l) { return l.devices_size() == 24; }, kEventTimeout);
  EXPECT_TRUE(list);
  // A broken config on SIGHUP keeps the running one.
  WriteConfig("bogus: 1\n");
  plugin_->Signal(SIGHUP);
  EXPECT_TRUE(WaitUntil([&] {
    return plugin_->Log().find("config not reloaded") != std::string::npos;
  })) << plugin_->Log();
  EXPECT_EQ(plugin_->Stop(), 0);
}

TEST_F(PluginTest, WithoutNvmlHealthStillWorksAndTheStubLibraryIsRefused) {
  // The fixture's libnvidia-ml.so.1 is a real ELF with the right SONAME but no NVML symbols.
  Launch("", {});
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 1, kEventTimeout));
  EXPECT_NE(plugin_->Log().find("NVML Xid events off: health watch: dlopen"), std::string::npos)
      << plugin_->Log();
  plugin_->Stop();
  WriteConfig("health: {nvmlLibrary: " + host_.root() +
              "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1}\n");
  plugin_ = std::make_unique<PluginProcess>(
      DevicePluginBinary(),
      std::vector<std::string>{"--root", host_.root(), "--socket-dir", sockets_, "--cdi-dir", cdi_,
                               "--lease-file", leases_, "--config", config_},
      dirs_.path() + "/log2");
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 2, kEventTimeout)) << plugin_->Log();
  EXPECT_NE(plugin_->Log().find("NVML Xid events off"), std::string::npos) << plugin_->Log();
  auto client = std::make_unique<PluginClient>(sockets_ + "/" + kEndpoint);
  client->Watch();
  EXPECT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
}

TEST_F(PluginTest, CriticalXidFromNvmlIsUnhealthyApplicationXidIsNot) {
  // A stand-in libnvidia-ml.so.1 with NVML's ABI delivers the Xids listed in a file.
  std::string events = dirs_.path() + "/xid-events";
  ::setenv("TESSERA_FAKE_NVML_EVENTS", events.c_str(), 1);
  Launch(std::string("health: {nvmlLibrary: ") + FAKE_NVML + "}\n");
  ::unsetenv("TESSERA_FAKE_NVML_EVENTS");
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->WaitForList(AllHealthy, kEventTimeout));
  EXPECT_EQ(plugin_->Log().find("NVML Xid events off"), std::string::npos) << plugin_->Log();

  ASSERT_TRUE(WriteFileAtomically(events, std::string(kHgxGpuPci[3]) + " 13\n").ok());
  std::this_thread::sleep_for(500ms);  // an application error: nothing changes
  EXPECT_FALSE(client->WaitForList(
      [](const ListAndWatchResponse& l) { return HealthOf(l, HgxGpuUuid(3)) == "Unhealthy"; },
      10ms));

  ASSERT_TRUE(
      WriteFileAtomically(events, std::string(kHgxGpuPci[3]) + " 13\n" + kHgxGpuPci[3] + " 79\n")
          .ok());
  ASSERT_TRUE(client->WaitForList(
      [](const ListAndWatchResponse& l) { return HealthOf(l, HgxGpuUuid(3)) == "Unhealthy"; },
      kEventTimeout))
      << "critical Xid not Unhealthy; log:\n"
      << plugin_->Log();
  v1beta1::AllocateResponse response;
  grpc::Status status = client->Allocate({{HgxGpuUuid(3)}}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("Xid 79"), std::string::npos) << status.error_message();

  // The plugin resets the GPU (no Pod, no process holds it) and verifies it: healthy again,
  // and not before the reset is done.
  ASSERT_TRUE(WaitUntil([&] { return plugin_->Log().find("resetting") != std::string::npos; }))
      << plugin_->Log();
  EXPECT_TRUE(client->WaitForList(
      [](const ListAndWatchResponse& l) { return HealthOf(l, HgxGpuUuid(3)) == "Unhealthy"; },
      10ms));
  ASSERT_TRUE(WriteFileAtomically(reset_go_, "").ok());
  EXPECT_TRUE(client->WaitForList(AllHealthy, kEventTimeout)) << plugin_->Log();
  auto resets = ReadWholeFile(resets_);
  ASSERT_TRUE(resets.ok()) << plugin_->Log();
  EXPECT_EQ(*resets, "-r -i " + HgxGpuUuid(3) + "\n");
}

TEST(TesseraCommand, DevicePluginExecsThePluginBinary) {
  int status = 0;
  std::string out = RunCommand(TesseraBinary() + " device-plugin --version 2>&1", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("tessera-device-plugin"), std::string::npos) << out;
  // And the light binary does not link gRPC.
  std::string ldd = RunCommand("ldd " + TesseraBinary());
  EXPECT_EQ(ldd.find("grpc"), std::string::npos) << ldd;
}

TEST(TesseraCommand, BadConfigExitsWithUsageError) {
  TempDir dir;
  std::string config = dir.path() + "/c.yaml";
  ASSERT_TRUE(
      WriteFileAtomically(config, "sharing: {timeSlicing: {resources: [{name: x, replicas: 1}]}}\n")
          .ok());
  int status = 0;
  std::string out = RunCommand(
      DevicePluginBinary() + " --config " + config + " --socket-dir " + dir.path() + " 2>&1",
      &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("replicas"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::testing
