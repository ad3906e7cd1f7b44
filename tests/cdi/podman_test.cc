// Specs from `tessera cdi generate` in real containers: podman 4.3 + runc inject what the spec
// says, and busybox inside the container reports the device nodes, env and mounts it got.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "cdi/cdi.h"
#include "inventory/inventory.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "support/podman_harness.h"

namespace tessera::cdi {
namespace {

namespace fs = std::filesystem;
using tessera::testing::InstalledSpec;
using tessera::testing::MaterializeHost;
using tessera::testing::Podman;
using tessera::testing::RunArgv;
using tessera::testing::TempDir;
using tessera::testing::TesseraBinary;
using tessera::testing::UniqueTestKind;

// What busybox `stat -c '%F %t:%T'` prints for a character device (major:minor in hex).
std::string CharDevice(uint32_t major, uint32_t minor) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "character special file %x:%x", major, minor);
  return buffer;
}

const inventory::DeviceNode& Shared(const inventory::Inventory& inv, const std::string& role) {
  for (const auto& shared : inv.shared_device_nodes) {
    if (shared.role == role) return shared.node;
  }
  ADD_FAILURE() << "fixture has no " << role << " node";
  static const inventory::DeviceNode none;
  return none;
}

inventory::Inventory Read(const std::string& root) {
  inventory::ReadOptions options;
  options.root = root;
  auto inv = inventory::ReadInventory(options);
  EXPECT_TRUE(inv.ok());
  return inv.ok() ? std::move(*inv) : inventory::Inventory{};
}

// Generates specs with the tessera binary into a scratch dir, then installs each one where
// podman reads specs; removed again when the object goes away.
class GeneratedSpecs {
 public:
  GeneratedSpecs(const std::string& root, const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {TesseraBinary(), "cdi",          "generate", "--root", root,
                                     "--output-dir",  scratch_.path()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto generated = RunArgv(argv);
    EXPECT_EQ(generated.status, 0) << generated.output;
    for (const auto& entry : fs::directory_iterator(scratch_.path())) {
      auto text = ReadWholeFile(entry.path());
      installed_.push_back(std::make_unique<InstalledSpec>(text, entry.path().filename().string()));
      EXPECT_TRUE(installed_.back()->ok()) << installed_.back()->path();
    }
  }
  size_t size() const { return installed_.size(); }

 private:
  static std::string ReadWholeFile(const fs::path& path) {
    std::string text;
    if (FILE* file = std::fopen(path.c_str(), "r")) {
      char buffer[4096];
      size_t n;
      while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0)
        text.append(buffer, n);
      std::fclose(file);
    }
    return text;
  }
  TempDir scratch_;
  std::vector<std::unique_ptr<InstalledSpec>> installed_;
};

class PodmanCdi : public ::testing::Test {
 protected:
  void SetUp() override {
    const Podman& podman = Podman::Get();
    ASSERT_TRUE(podman.ready()) << podman.setup_error();
  }
  std::string RunIn(const std::vector<std::string>& devices, const std::string& script) {
    std::vector<std::string> args;
    for (const auto& device : devices)
      args.insert(args.end(), {"--device", device});
    auto result = Podman::Get().RunShell(args, script);
    EXPECT_EQ(result.status, 0) << result.output;
    return result.output;
  }
};

void ExpectLine(const std::string& output, const std::string& line) {
  EXPECT_NE(("\n" + output).find("\n" + line + "\n"), std::string::npos)
      << "missing line \"" << line << "\" in:\n"
      << output;
}

TEST_F(PodmanCdi, DriverModeGivesOneGpuItsNodeTheControlNodesEnvAndReadOnlyDriverFiles) {
  std::string root = MaterializeHost("hgx-h100-dgx");
  auto inv = Read(root);
  std::string kind = UniqueTestKind();
  GeneratedSpecs specs(root, {"--mode", "driver", "--kind", kind});
  ASSERT_EQ(specs.size(), 1u);

  std::string out = RunIn({kind + "=0"},
                          "for n in /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm "
                          "/dev/nvidia-uvm-tools; do echo \"$n $(stat -c '%F %t:%T' $n)\"; done; "
                          "ls /dev/nvidia1 >/dev/null 2>&1 || echo 'no /dev/nvidia1'; "
                          "echo \"env $NVIDIA_VISIBLE_DEVICES\"; "
                          "grep -E ' /usr/lib/x86_64-linux-gnu/libcuda.so.1 | /usr/bin/nvidia-smi "
                          "' /proc/mounts | cut -d' ' -f2,4 | cut -d, -f1-3 | sort; "
                          "test -S /run/nvidia-persistenced/socket && echo socket; "
                          "test -f /lib/firmware/nvidia/580.65.06/gsp_ga10x.bin && echo firmware; "
                          "(echo x > /usr/bin/nvidia-smi) 2>/dev/null || echo read-only");
  ExpectLine(out, "/dev/nvidia0 " + CharDevice(195, 0));
  ExpectLine(out, "/dev/nvidiactl " + CharDevice(195, 255));
  const auto& uvm = Shared(inv, "nvidia-uvm");
  ExpectLine(out, "/dev/nvidia-uvm " + CharDevice(uvm.major, uvm.minor));
  const auto& uvm_tools = Shared(inv, "nvidia-uvm-tools");
  ExpectLine(out, "/dev/nvidia-uvm-tools " + CharDevice(uvm_tools.major, uvm_tools.minor));
  ExpectLine(out, "no /dev/nvidia1");
  ExpectLine(out, "env void");
  ExpectLine(out, "/usr/bin/nvidia-smi ro,nosuid,nodev");
  ExpectLine(out, "/usr/lib/x86_64-linux-gnu/libcuda.so.1 ro,nosuid,nodev");
  ExpectLine(out, "socket");
  ExpectLine(out, "firmware");
  ExpectLine(out, "read-only");
}

TEST_F(PodmanCdi, DriverModeAllAndUuidNamesSelectTheRightGpus) {
  std::string root = MaterializeHost("hgx-h100-dgx");
  auto inv = Read(root);
  std::string kind = UniqueTestKind();
  GeneratedSpecs specs(root, {"--mode", "driver", "--kind", kind});

  std::string all = RunIn({kind + "=all"},
                          "for n in /dev/nvidia[0-9]*; do echo \"$n $(stat -c '%F %t:%T' $n)\"; "
                          "done");
  auto gpus = inv.Gpus();
  ASSERT_EQ(gpus.size(), 8u);
  for (const auto* gpu : gpus) {
    ASSERT_TRUE(gpu->nvidia_minor.has_value());
    int minor = *gpu->nvidia_minor;
    ExpectLine(all, "/dev/nvidia" + std::to_string(minor) + " " + CharDevice(195, minor));
  }

  // The fourth GPU by UUID, plus GPU 6 by index: exactly those two nodes.
  ASSERT_TRUE(gpus[3]->gpu_uuid.has_value());
  std::string two =
      RunIn({kind + "=" + *gpus[3]->gpu_uuid, kind + "=6"}, "ls /dev | grep -E '^nvidia[0-9]+$'");
  EXPECT_EQ(two, "nvidia" + std::to_string(*gpus[3]->nvidia_minor) + "\nnvidia" +
                     std::to_string(*gpus[6]->nvidia_minor) + "\n");
}

// The MIG device "0:1" of the mixed H100 fixture is its 2g.20gb slice: GPU instance 5, whose
// capability minors are 48 (GI) and 49 (CI). Names and UUIDs come from the stand-in NVML.
TEST_F(PodmanCdi, AMigDeviceGivesExactlyTheParentNodeAndItsTwoCapabilityNodes) {
  std::string root = MaterializeHost("h100-mig-mixed");
  tessera::testing::FakeNvmlState nvml("h100-mig-mixed");
  std::string kind = UniqueTestKind();
  GeneratedSpecs specs(root, {"--mode", "driver", "--kind", kind, "--nvml", FAKE_NVML});
  ASSERT_EQ(specs.size(), 1u);

  const std::string list =
      "for n in /dev/nvidia[0-9]* /dev/nvidia-caps/*; do [ -e \"$n\" ] && "
      "echo \"$n $(stat -c '%F %t:%T' $n)\"; done; true";
  std::string by_index = RunIn({kind + "=0:1"}, list);
  EXPECT_EQ(by_index, "/dev/nvidia0 " + CharDevice(195, 0) + "\n" +
                          "/dev/nvidia-caps/nvidia-cap48 " + CharDevice(509, 48) + "\n" +
                          "/dev/nvidia-caps/nvidia-cap49 " + CharDevice(509, 49) + "\n");

  // The same slice by its MIG UUID, as NVML reports it.
  std::string uuid = "MIG-8e2c3d4b-0005-4000-8004-000000000000";
  EXPECT_EQ(RunIn({kind + "=" + uuid}, list), by_index);

  // The 1g.10gb slice (GPU instance 13: minors 120 and 121) with the whole second GPU.
  std::string two = RunIn({kind + "=0:2", kind + "=1"}, list);
  EXPECT_EQ(two, "/dev/nvidia0 " + CharDevice(195, 0) + "\n" + "/dev/nvidia1 " +
                     CharDevice(195, 1) + "\n" + "/dev/nvidia-caps/nvidia-cap120 " +
                     CharDevice(509, 120) + "\n" + "/dev/nvidia-caps/nvidia-cap121 " +
                     CharDevice(509, 121) + "\n");
}

TEST_F(PodmanCdi, VfioModeGivesTheGroupNodeWithTheFixturesVfioMajor) {
  std::string root = MaterializeHost("hgx-h100-vfio");
  auto inv = Read(root);
  std::string kind = UniqueTestKind("pgpu");
  std::string switch_kind = UniqueTestKind("nvswitch");
  GeneratedSpecs specs(root, {"--mode", "vfio", "--kind", kind, "--nvswitch-kind", switch_kind});
  ASSERT_EQ(specs.size(), 2u);

  // The vfio major as the fixture's /proc/devices lists it.
  std::string devices = RunArgv({"cat", root + "/proc/devices"}).output;
  auto at = devices.find(" vfio\n");
  ASSERT_NE(at, std::string::npos) << devices;
  uint32_t vfio_major = std::stoul(devices.substr(devices.rfind('\n', at) + 1));
  const auto& container = Shared(inv, "vfio");

  auto gpus = inv.Gpus();
  ASSERT_FALSE(gpus.empty());
  ASSERT_TRUE(gpus[0]->iommu_group.has_value());
  std::string group = std::to_string(*gpus[0]->iommu_group);
  std::string out =
      RunIn({kind + "=0"}, "for n in /dev/vfio/*; do echo \"$n $(stat -c '%F %t:%T' $n)\"; done");
  uint32_t group_minor = 0;
  for (const auto& node : gpus[0]->device_nodes) {
    if (node.path == "/dev/vfio/" + group) group_minor = node.minor;
  }
  ExpectLine(out, "/dev/vfio/" + group + " " + CharDevice(vfio_major, group_minor));
  ExpectLine(out, "/dev/vfio/vfio " + CharDevice(container.major, container.minor));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;

  // All GPUs: one group node per GPU (each H100 has its own group on this board).
  std::string all = RunIn({kind + "=all"}, "ls /dev/vfio | grep -v vfio | wc -l");
  EXPECT_EQ(all, std::to_string(gpus.size()) + "\n");

  // The NVSwitches and their memory controller share one group: one device named after it.
  std::string switches = RunIn({switch_kind + "=0"}, "ls /dev/vfio");
  int switch_group = -1;
  for (const auto& device : inv.devices) {
    if (device.kind == inventory::DeviceKind::kNvSwitch && device.iommu_group) {
      switch_group = *device.iommu_group;
    }
  }
  ASSERT_GE(switch_group, 0);
  EXPECT_EQ(switches, std::to_string(switch_group) + "\nvfio\n");
  std::string by_group =
      RunIn({switch_kind + "=iommu-group-" + std::to_string(switch_group)}, "ls /dev/vfio");
  EXPECT_EQ(by_group, switches);
}

TEST_F(PodmanCdi, DriModeGivesAmdRenderNodesAndKfd) {
  std::string root = MaterializeHost("amd-gpu");
  auto inv = Read(root);
  std::string kind = UniqueTestKind("amd");
  GeneratedSpecs specs(root, {"--mode", "dri", "--kind", kind});
  ASSERT_EQ(specs.size(), 1u);
  std::string out = RunIn({kind + "=0"},
                          "for n in /dev/dri/* /dev/kfd; do echo \"$n $(stat -c '%F %t:%T' $n)\"; "
                          "done");
  auto gpus = inv.Gpus();
  ASSERT_FALSE(gpus.empty());
  for (const auto& node : gpus[0]->device_nodes) {
    if (node.path.rfind("/dev/dri/", 0) == 0) {
      ExpectLine(out, node.path + " " + CharDevice(node.major, node.minor));
    }
  }
  const auto& kfd = Shared(inv, "kfd");
  ExpectLine(out, "/dev/kfd " + CharDevice(kfd.major, kfd.minor));
}

}  // namespace
}  // namespace tessera::cdi
