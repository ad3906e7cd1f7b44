// BuildSpecs on inventories written out by hand: every mode's naming, edits and versions.
#include <gtest/gtest.h>

#include <algorithm>

#include "cdi/cdi.h"

namespace tessera::cdi {
namespace {

using inventory::DeviceKind;
using inventory::Inventory;
using inventory::PciDevice;

inventory::DeviceNode Node(std::string path, uint32_t major, uint32_t minor) {
  return {std::move(path), major, minor, 'c', true};
}

PciDevice Gpu(std::string address, std::string driver, int group) {
  PciDevice gpu;
  gpu.pci_address = std::move(address);
  gpu.vendor_id = 0x10de;
  gpu.device_id = 0x2330;
  gpu.class_code = 0x030200;
  gpu.kind = DeviceKind::kGpu;
  gpu.driver = std::move(driver);
  gpu.iommu_group = group;
  return gpu;
}

// Two H100s on the nvidia driver, one with a UUID, under a fixture root.
Inventory DriverHost() {
  Inventory inv;
  inv.root = "/tmp/hgx";
  auto a = Gpu("0000:18:00.0", "nvidia", 10);
  a.gpu_uuid = "GPU-11111111-2222-3333-4444-555555555555";
  a.nvidia_minor = 0;
  a.device_nodes = {Node("/dev/nvidia0", 195, 0)};
  auto b = Gpu("0000:2a:00.0", "nvidia", 11);
  b.nvidia_minor = 1;
  b.device_nodes = {Node("/dev/nvidia1", 195, 1)};
  inv.devices = {a, b};
  inv.shared_device_nodes = {{"nvidiactl", Node("/dev/nvidiactl", 195, 255)},
                             {"nvidia-uvm", Node("/dev/nvidia-uvm", 508, 0)},
                             {"nvidia-uvm-tools", Node("/dev/nvidia-uvm-tools", 508, 1)}};
  inventory::NvidiaDriver driver;
  driver.version = "580.65.06";
  driver.libraries = {{"/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", "libcuda.so.1",
                       "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "x86_64"}};
  driver.binaries = {"/usr/bin/nvidia-smi"};
  driver.firmware = {"/lib/firmware/nvidia/580.65.06/gsp_ga10x.bin"};
  driver.ipc_sockets = {"/run/nvidia-persistenced/socket"};
  inv.nvidia_driver = driver;
  return inv;
}

const Device* Find(const Spec& spec, const std::string& name) {
  for (const auto& device : spec.devices) {
    if (device.name == name) return &device;
  }
  return nullptr;
}

const Spec& SpecOfKind(const BuildResult& built, const std::string& kind) {
  for (const auto& spec : built.specs) {
    if (spec.kind == kind) return spec;
  }
  static const Spec none;
  ADD_FAILURE() << "no spec of kind " << kind;
  return none;
}

std::vector<std::string> Names(const Spec& spec) {
  std::vector<std::string> names;
  for (const auto& device : spec.devices)
    names.push_back(device.name);
  return names;
}

TEST(DriverMode, NamesEachGpuByIndexAndStableIdPlusAll) {
  auto built = BuildSpecs(DriverHost(), {});
  ASSERT_TRUE(built.ok()) << built.error().message;
  ASSERT_EQ(built->specs.size(), 1u);
  const Spec& spec = built->specs[0];
  EXPECT_EQ(spec.kind, "nvidia.com/gpu");
  EXPECT_EQ(spec.version, "0.5.0");  // names start with a digit, nodes carry hostPath
  EXPECT_EQ(Names(spec),
            (std::vector<std::string>{"0", "1", "0000:2a:00.0",
                                      "GPU-11111111-2222-3333-4444-555555555555", "all"}));
  const Device* zero = Find(spec, "0");
  ASSERT_EQ(zero->container_edits.device_nodes.size(), 1u);
  EXPECT_EQ(zero->container_edits.device_nodes[0],
            (DeviceNode{"/dev/nvidia0", "/tmp/hgx/dev/nvidia0", "c", 195, 0}));
  EXPECT_EQ(Find(spec, "GPU-11111111-2222-3333-4444-555555555555")->container_edits,
            zero->container_edits);
  EXPECT_EQ(Find(spec, "0000:2a:00.0")->container_edits, Find(spec, "1")->container_edits);
  EXPECT_EQ(Find(spec, "all")->container_edits.device_nodes.size(), 2u);
}

TEST(DriverMode, SharesControlNodesAndMountsDriverFilesReadOnly) {
  auto built = BuildSpecs(DriverHost(), {});
  ASSERT_TRUE(built.ok());
  const auto& edits = built->specs[0].container_edits;
  std::vector<std::string> nodes;
  for (const auto& node : edits.device_nodes)
    nodes.push_back(node.path);
  EXPECT_EQ(nodes, (std::vector<std::string>{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                             "/dev/nvidiactl"}));
  EXPECT_EQ(edits.device_nodes[0].major, 508);
  std::vector<std::string> targets;
  for (const auto& mount : edits.mounts) {
    targets.push_back(mount.container_path);
    EXPECT_EQ(mount.options, (std::vector<std::string>{"ro", "nosuid", "nodev", "bind"}));
    EXPECT_EQ(mount.host_path.rfind("/tmp/hgx/", 0), 0u) << mount.host_path;
  }
  EXPECT_EQ(targets,
            (std::vector<std::string>{"/lib/firmware/nvidia/580.65.06/gsp_ga10x.bin",
                                      "/run/nvidia-persistenced/socket", "/usr/bin/nvidia-smi",
                                      "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                      "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06"}));
  // The SONAME path is a bind of the real library file.
  EXPECT_EQ(edits.mounts[3].host_path, "/tmp/hgx/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06");
  EXPECT_EQ(edits.env, (std::vector<std::string>{"NVIDIA_VISIBLE_DEVICES=void"}));
}

TEST(DriverMode, LibrariesOffTheLoadersOwnDirectoriesAreNamedInLdLibraryPath) {
  auto inv = DriverHost();
  // A driver mounted under /usr/local/nvidia: a container's loader has no cache entry for it.
  inv.nvidia_driver->libraries = {
      {"/usr/local/nvidia/lib64/libcuda.so.580.65.06", "libcuda.so.1",
       "/usr/local/nvidia/lib64/libcuda.so.1", "x86_64"},
      {"/usr/local/nvidia/lib64/libnvidia-ml.so.580.65.06", "libnvidia-ml.so.1",
       "/usr/local/nvidia/lib64/libnvidia-ml.so.1", "x86_64"},
      {"/usr/local/nvidia/lib/libcuda.so.580.65.06", "libcuda.so.1",
       "/usr/local/nvidia/lib/libcuda.so.1", "i386"},
      {"/usr/lib/x86_64-linux-gnu/libnvidia-egl-gbm.so.580.65.06", "", "", "x86_64"}};
  auto built = BuildSpecs(inv, {});
  ASSERT_TRUE(built.ok());
  const auto& env = built->specs[0].container_edits.env;
  EXPECT_NE(std::find(env.begin(), env.end(),
                      "LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib"),
            env.end());
  // Where every library is in a directory the loader searches anyway, nothing is added.
  EXPECT_EQ(BuildSpecs(DriverHost(), {})->specs[0].container_edits.env,
            (std::vector<std::string>{"NVIDIA_VISIBLE_DEVICES=void"}));
}

TEST(DriverMode, OnTheRealRootNodesNeedNoHostPath) {
  auto inv = DriverHost();
  inv.root = "/";
  auto built = BuildSpecs(inv, {});
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(Find(built->specs[0], "0")->container_edits.device_nodes[0].host_path, "");
  EXPECT_EQ(built->specs[0].container_edits.mounts[0].host_path,
            built->specs[0].container_edits.mounts[0].container_path);
}

TEST(DriverMode, LeavesOutAGpuWhoseNodeIsMissingAndSaysSo) {
  auto inv = DriverHost();
  inv.devices[1].device_nodes[0].exists = false;
  auto built = BuildSpecs(inv, {});
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(Names(built->specs[0]),
            (std::vector<std::string>{"0", "GPU-11111111-2222-3333-4444-555555555555", "all"}));
  ASSERT_EQ(built->warnings.size(), 1u);
  EXPECT_NE(built->warnings[0].find("0000:2a:00.0"), std::string::npos);
}

TEST(DriverMode, OutputIsDeterministicAndSorted) {
  auto inv = DriverHost();
  auto first = BuildSpecs(inv, {});
  std::reverse(inv.shared_device_nodes.begin(), inv.shared_device_nodes.end());
  std::reverse(inv.nvidia_driver->binaries.begin(), inv.nvidia_driver->binaries.end());
  auto second = BuildSpecs(inv, {});
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(ToJson(first->specs[0]), ToJson(second->specs[0]));
}

TEST(DriverMode, KindOverrideRenamesTheSpec) {
  BuildOptions options;
  options.mode = Mode::kDriver;
  options.gpu_kind = "tessera-test.example/gpu";
  auto built = BuildSpecs(DriverHost(), options);
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(built->specs[0].kind, "tessera-test.example/gpu");
  EXPECT_EQ(SpecFileName(built->specs[0], Format::kJson), "tessera-test.example-gpu.json");
  options.gpu_kind = "bad kind";
  EXPECT_FALSE(BuildSpecs(DriverHost(), options).ok());
}

// Four GPUs on vfio-pci: two alone in their groups, two sharing group 30; NVSwitches with their
// memory controller in one group.
Inventory VfioHost() {
  Inventory inv;
  inv.root = "/tmp/vfio";
  auto a = Gpu("0000:18:00.0", "vfio-pci", 20);
  a.device_nodes = {Node("/dev/vfio/20", 242, 0), Node("/dev/vfio/devices/vfio0", 511, 0)};
  auto b = Gpu("0000:2a:00.0", "vfio-pci", 21);
  b.device_nodes = {Node("/dev/vfio/21", 242, 1), Node("/dev/vfio/devices/vfio1", 511, 1)};
  auto c = Gpu("0000:3a:00.0", "vfio-pci", 30);
  c.device_nodes = {Node("/dev/vfio/30", 242, 2), Node("/dev/vfio/devices/vfio2", 511, 2)};
  auto d = Gpu("0000:3b:00.0", "vfio-pci", 30);
  d.device_nodes = {Node("/dev/vfio/30", 242, 2), Node("/dev/vfio/devices/vfio3", 511, 3)};
  PciDevice sw1 = Gpu("0000:05:00.0", "vfio-pci", 40);
  sw1.kind = DeviceKind::kNvSwitch;
  sw1.class_code = 0x068000;
  sw1.device_nodes = {Node("/dev/vfio/40", 242, 3)};
  PciDevice sw2 = sw1;
  sw2.pci_address = "0000:06:00.0";
  PciDevice mc = sw1;
  mc.pci_address = "0000:07:00.0";
  mc.vendor_id = 0x11f8;
  mc.kind = DeviceKind::kCompanion;
  inv.devices = {sw1, sw2, mc, a, b, c, d};
  inv.iommu_groups[20] = {20, {"0000:18:00.0"}};
  inv.iommu_groups[21] = {21, {"0000:2a:00.0"}};
  inv.iommu_groups[30] = {30, {"0000:3a:00.0", "0000:3b:00.0"}};
  inv.iommu_groups[40] = {40, {"0000:05:00.0", "0000:06:00.0", "0000:07:00.0"}};
  inv.shared_device_nodes = {{"vfio", Node("/dev/vfio/vfio", 10, 196)},
                             {"iommufd", Node("/dev/iommu", 10, 123)}};
  return inv;
}

TEST(VfioMode, OneDevicePerIommuGroupNamedAfterTheGroupWhenShared) {
  auto built = BuildSpecs(VfioHost(), {});
  ASSERT_TRUE(built.ok()) << built.error().message;
  ASSERT_EQ(built->specs.size(), 2u);
  const Spec& gpus = SpecOfKind(*built, "nvidia.com/pgpu");
  EXPECT_EQ(Names(gpus), (std::vector<std::string>{"0", "1", "2", "0000:18:00.0", "0000:2a:00.0",
                                                   "iommu-group-30", "all"}));
  const Device* shared = Find(gpus, "iommu-group-30");
  ASSERT_EQ(shared->container_edits.device_nodes.size(), 1u);
  EXPECT_EQ(shared->container_edits.device_nodes[0],
            (DeviceNode{"/dev/vfio/30", "/tmp/vfio/dev/vfio/30", "c", 242, 2}));
  EXPECT_EQ(Find(gpus, "2")->container_edits, shared->container_edits);
  ASSERT_EQ(gpus.container_edits.device_nodes.size(), 1u);
  EXPECT_EQ(gpus.container_edits.device_nodes[0].path, "/dev/vfio/vfio");
  EXPECT_EQ(Find(gpus, "all")->container_edits.device_nodes.size(), 3u);

  const Spec& switches = SpecOfKind(*built, "nvidia.com/nvswitch");
  EXPECT_EQ(Names(switches), (std::vector<std::string>{"0", "iommu-group-40", "all"}));
}

TEST(VfioMode, IommufdUsesDeviceCdevsOfEveryGroupMember) {
  BuildOptions options;
  options.mode = Mode::kVfio;
  options.iommufd = true;
  auto built = BuildSpecs(VfioHost(), options);
  ASSERT_TRUE(built.ok());
  const Spec& gpus = SpecOfKind(*built, "nvidia.com/pgpu");
  const Device* shared = Find(gpus, "iommu-group-30");
  ASSERT_EQ(shared->container_edits.device_nodes.size(), 2u);
  EXPECT_EQ(shared->container_edits.device_nodes[0].path, "/dev/vfio/devices/vfio2");
  EXPECT_EQ(shared->container_edits.device_nodes[1].path, "/dev/vfio/devices/vfio3");
  EXPECT_EQ(gpus.container_edits.device_nodes.at(0).path, "/dev/iommu");
}

TEST(VfioMode, WarnsWhenAGroupMemberIsBoundToAnotherDriver) {
  auto inv = VfioHost();
  inv.devices[2].driver = "some-driver";  // the memory controller
  auto built = BuildSpecs(inv, {});
  ASSERT_TRUE(built.ok());
  bool warned = std::any_of(built->warnings.begin(), built->warnings.end(), [](const auto& w) {
    return w.find("0000:07:00.0 is bound to some-driver") != std::string::npos;
  });
  EXPECT_TRUE(warned);
}

Inventory WorkstationHost() {
  Inventory inv;
  inv.root = "/";
  PciDevice intel = Gpu("0000:00:02.0", "i915", 1);
  intel.vendor_id = 0x8086;
  intel.device_nodes = {Node("/dev/dri/card0", 226, 0), Node("/dev/dri/renderD128", 226, 128)};
  PciDevice amd = Gpu("0000:03:00.0", "amdgpu", 12);
  amd.vendor_id = 0x1002;
  amd.device_nodes = {Node("/dev/dri/card1", 226, 1), Node("/dev/dri/renderD129", 226, 129)};
  PciDevice nvidia = Gpu("0000:01:00.0", "nvidia", 2);
  nvidia.nvidia_minor = 0;
  nvidia.device_nodes = {Node("/dev/nvidia0", 195, 0), Node("/dev/dri/card2", 226, 2),
                         Node("/dev/dri/renderD130", 226, 130)};
  inv.devices = {intel, nvidia, amd};
  inv.shared_device_nodes = {{"kfd", Node("/dev/kfd", 235, 0)},
                             {"nvidiactl", Node("/dev/nvidiactl", 195, 255)}};
  return inv;
}

TEST(AutoMode, PicksTheModePerDeviceAndWritesOneSpecPerKind) {
  auto built = BuildSpecs(WorkstationHost(), {});
  ASSERT_TRUE(built.ok()) << built.error().message;
  std::vector<std::string> kinds;
  for (const auto& spec : built->specs)
    kinds.push_back(spec.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"amd.com/gpu", "intel.com/gpu", "nvidia.com/gpu"}));
  const Spec& amd = built->specs[0];
  EXPECT_EQ(Names(amd), (std::vector<std::string>{"0", "0000:03:00.0", "all"}));
  EXPECT_EQ(amd.container_edits.device_nodes.at(0).path, "/dev/kfd");
  EXPECT_EQ(Find(amd, "0")->container_edits.device_nodes.size(), 2u);
  EXPECT_TRUE(built->specs[1].container_edits.device_nodes.empty());  // no kfd for Intel
  // The NVIDIA GPU is in driver mode: its DRM nodes travel with /dev/nvidia0.
  EXPECT_EQ(Find(built->specs[2], "0")->container_edits.device_nodes.size(), 3u);
  for (const auto& spec : built->specs)
    EXPECT_TRUE(ValidateSpec(spec).empty());
}

TEST(DriMode, CoversNvidiaGraphicsByItsDrmNodesOnly) {
  BuildOptions options;
  options.mode = Mode::kDri;
  auto built = BuildSpecs(WorkstationHost(), options);
  ASSERT_TRUE(built.ok());
  ASSERT_EQ(built->specs.size(), 3u);
  const auto& nodes = Find(built->specs[2], "0")->container_edits.device_nodes;
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].path, "/dev/dri/card2");
  EXPECT_EQ(built->specs[2].version, "0.5.0");
}

TEST(AutoMode, KindOverrideNeedsExactlyOneGpuSpec) {
  BuildOptions options;
  options.gpu_kind = "tessera-test.example/gpu";
  auto built = BuildSpecs(WorkstationHost(), options);
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.error().message.find("choose --mode"), std::string::npos);
}

TEST(AutoMode, AHostWithoutGpusGivesNoSpecs) {
  Inventory inv;
  inv.root = "/";
  auto built = BuildSpecs(inv, {});
  ASSERT_TRUE(built.ok());
  EXPECT_TRUE(built->specs.empty());
}

}  // namespace
}  // namespace tessera::cdi
