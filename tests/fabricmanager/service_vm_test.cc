// The Service VM for the HGX fixture hosts, validated by Debian's libvirt tools: the RelaxNG
// schemas (virt-xml-validate) and the test driver's parser (virsh -c test:///default define).
#include <gtest/gtest.h>

#include <fstream>

#include "fabricmanager/fixture_facts.h"
#include "fabricmanager/operator_tools.h"
#include "support/fixture_host.h"

namespace tessera::fabricmanager {
namespace {

using testing::RunCommand;

runtimes::HostFacts Facts(const std::string& fixture) {
  return testing::FixtureFacts(fixture);
}

// Validates the domain with both tools; returns the test driver's view of it (dumpxml).
std::string Validate(const ServiceVm& vm, const std::string& name) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/" + name + ".xml";
  std::ofstream(path) << vm.domain_xml;
  int status = -1;
  std::string out = RunCommand("virt-xml-validate " + path + " domain 2>&1", &status);
  EXPECT_EQ(status, 0) << out << vm.domain_xml;
  // One virsh process: the test driver keeps its domains in memory for that process only.
  std::string dump = RunCommand(
      "virsh -c test:///default 'define --validate " + path + "; dumpxml " + name + "' 2>&1",
      &status);
  EXPECT_EQ(status, 0) << dump;
  return dump;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

TEST(ServiceVm, VfioHostGroupsEveryNvswitchWithTheMemoryControllerInOneVm) {
  auto facts = Facts("hgx-h100-vfio");
  ServiceVmOptions options;
  options.fm_address = "192.168.122.40";
  auto vm = BuildServiceVm(facts.inventory, facts.group_members, options);
  ASSERT_TRUE(vm.ok()) << vm.error().message;
  // Group 4: the four NVSwitches and the PMC-Sierra 11f8:4128 management function; no GPU.
  EXPECT_EQ(vm->hostdevs, (std::vector<std::string>{"0000:03:00.1", "0000:05:00.0", "0000:06:00.0",
                                                    "0000:07:00.0", "0000:08:00.0"}));
  EXPECT_EQ(vm->nvswitches.size(), 4u);
  std::string dump = Validate(*vm, options.name);
  EXPECT_EQ(Count(dump, "<hostdev mode='subsystem' type='pci' managed='yes'>"), 5u) << dump;
  EXPECT_NE(dump.find("<address domain='0x0000' bus='0x03' slot='0x00' function='0x1'/>"),
            std::string::npos);
  EXPECT_EQ(dump.find("bus='0x18'"), std::string::npos) << "a GPU went to the Service VM";
  EXPECT_NE(dump.find("<pcihole64 unit='KiB'>1048576</pcihole64>"), std::string::npos) << dump;
  EXPECT_NE(dump.find("machine='q35'"), std::string::npos);
  EXPECT_NE(dump.find("<domain type='kvm'>"), std::string::npos);
  EXPECT_NE(dump.find("<interface type='network'>"), std::string::npos);
  // fabricmanager.cfg: shared NVSwitch mode, restarts, the API on the VM's address.
  auto cfg = ParseFabricManagerConfig(vm->fabricmanager_cfg);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_EQ(cfg->at("FABRIC_MODE"), "1");
  EXPECT_EQ(cfg->at("FABRIC_MODE_RESTART"), "1");
  EXPECT_EQ(cfg->at("FM_CMD_BIND_INTERFACE"), "192.168.122.40");
  EXPECT_EQ(cfg->at("FM_CMD_PORT_NUMBER"), "6666");
  EXPECT_FALSE(cfg->at("STATE_FILE_NAME").empty());
}

TEST(ServiceVm, DgxHostGivesOneGroupPerNvswitch) {
  auto facts = Facts("hgx-h100-dgx");
  ServiceVmOptions options;
  options.name = "fm-dgx";
  options.vcpus = 4;
  options.memory_mib = 8192;
  options.disk = "/srv/images/fm & friends.img";
  auto vm = BuildServiceVm(facts.inventory, facts.group_members, options);
  ASSERT_TRUE(vm.ok()) << vm.error().message;
  EXPECT_EQ(vm->hostdevs, (std::vector<std::string>{"0000:05:00.0", "0000:06:00.0", "0000:07:00.0",
                                                    "0000:08:00.0"}));
  std::string dump = Validate(*vm, "fm-dgx");
  EXPECT_EQ(Count(dump, "<hostdev mode='subsystem' type='pci' managed='yes'>"), 4u) << dump;
  EXPECT_NE(dump.find("<vcpu placement='static'>4</vcpu>"), std::string::npos);
  EXPECT_NE(dump.find("<memory unit='KiB'>8388608</memory>"), std::string::npos);
  EXPECT_NE(dump.find("fm &amp; friends.img"), std::string::npos);  // escaped, and raw format
  EXPECT_NE(dump.find("type='raw'"), std::string::npos);
}

inventory::Inventory Board(uint16_t gpu_device, bool with_switch, bool gpu_in_switch_group) {
  inventory::Inventory inv;
  inventory::PciDevice gpu;
  gpu.pci_address = "0000:18:00.0";
  gpu.vendor_id = 0x10de;
  gpu.device_id = gpu_device;
  gpu.class_code = 0x030200;
  gpu.model = gpu_device == 0x2901 ? "GB100 [B200]" : "GH100 [H100 SXM5 80GB]";
  gpu.iommu_group = gpu_in_switch_group ? 4 : 20;
  inv.devices.push_back(gpu);
  if (with_switch) {
    inventory::PciDevice nvswitch;
    nvswitch.pci_address = "0000:05:00.0";
    nvswitch.vendor_id = 0x10de;
    nvswitch.device_id = 0x22a3;
    nvswitch.class_code = 0x068000;
    nvswitch.kind = inventory::DeviceKind::kNvSwitch;
    nvswitch.iommu_group = 4;
    inv.devices.push_back(nvswitch);
  }
  inv.iommu_groups[20] = {20, {"0000:18:00.0"}};
  inv.iommu_groups[4] = {4, gpu_in_switch_group
                                ? std::vector<std::string>{"0000:05:00.0", "0000:18:00.0"}
                                : std::vector<std::string>{"0000:05:00.0"}};
  return inv;
}

TEST(ServiceVm, B200BoardsAreRefusedWithTheReason) {
  auto vm = BuildServiceVm(Board(0x2901, false, false), {}, {});
  ASSERT_FALSE(vm.ok());
  EXPECT_EQ(vm.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(vm.error().message.find("B200/B300 board, which has no NVSwitch PCI functions"),
            std::string::npos)
      << vm.error().message;
  auto none = BuildServiceVm(Board(0x2330, false, false), {}, {});
  EXPECT_NE(none.error().message.find("no NVSwitch (10de:22a3"), std::string::npos);
}

TEST(ServiceVm, NeverTakesAGpuNorWorksWithoutAnIommu) {
  auto shared = BuildServiceVm(Board(0x2330, true, true), {}, {});
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.error().message.find("IOMMU group 4 holds GPU 0000:18:00.0"), std::string::npos);
  auto inv = Board(0x2330, true, false);
  inv.devices[1].iommu_group.reset();
  EXPECT_NE(BuildServiceVm(inv, {}, {}).error().message.find("has no IOMMU group"),
            std::string::npos);
}

TEST(ServiceVm, OptionsAreChecked) {
  auto inv = Board(0x2330, true, false);
  for (auto change : std::vector<std::function<void(ServiceVmOptions&)>>{
           [](auto& o) { o.name = "bad name"; }, [](auto& o) { o.name = "<x>"; },
           [](auto& o) { o.vcpus = 0; }, [](auto& o) { o.memory_mib = 100; },
           [](auto& o) { o.disk = "relative.img"; }, [](auto& o) { o.fm_address = "fm.local"; },
           [](auto& o) { o.fm_address = "300.1.1.1"; }, [](auto& o) { o.network = "a'b"; }}) {
    ServiceVmOptions options;
    change(options);
    auto vm = BuildServiceVm(inv, {}, options);
    EXPECT_FALSE(vm.ok());
    if (!vm.ok()) {
      EXPECT_EQ(vm.error().category, ErrorCategory::kInvalidArgument);
    }
  }
}

TEST(FabricManagerConfig, ParsesKeyValueLinesAndNamesBadOnes) {
  auto cfg = ParseFabricManagerConfig("# comment\n\nFABRIC_MODE=1\r\n  LOG_LEVEL = 4 \nEMPTY=\n");
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_EQ(cfg->at("FABRIC_MODE"), "1");
  EXPECT_EQ(cfg->at("LOG_LEVEL"), "4");
  EXPECT_EQ(cfg->at("EMPTY"), "");
  EXPECT_EQ(ParseFabricManagerConfig("A=1\nnot a setting\n").error().message,
            "fabricmanager.cfg line 2: expected KEY=VALUE, got \"not a setting\"");
  EXPECT_NE(ParseFabricManagerConfig("A=1\nA=2\n").error().message.find("set twice"),
            std::string::npos);
  EXPECT_FALSE(ParseFabricManagerConfig("lower=1\n").ok());
  EXPECT_FALSE(ParseFabricManagerConfig(std::string(70000, '#')).ok());
}

}  // namespace
}  // namespace tessera::fabricmanager
