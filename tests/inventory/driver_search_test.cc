// Driver files found as the host's dynamic loader and shell find them: on the VM fixture the
// driver is a mount under /usr/local/nvidia whose libraries an ld.so.conf.d file names but
// ld.so.cache lacks (it was built before the mount), and whose programs are on PATH only.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "inventory/inventory.h"
#include "inventory/parsers.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"

namespace tessera::inventory {
namespace {

constexpr const char* kLibDir = "/usr/local/nvidia/lib64";

Inventory Read(const std::string& root, const std::string& library_path,
               const std::string& program_path) {
  ReadOptions options;
  options.root = root;
  options.library_path = library_path;
  options.program_path = program_path;
  auto inventory = ReadInventory(options);
  EXPECT_TRUE(inventory.ok()) << inventory.error().message;
  return inventory.ok() ? *inventory : Inventory{};
}

TEST(LocalNvidiaVmHost, FindsTheLibrariesLdSoConfNamesThoughTheCacheLacksThem) {
  Inventory inv =
      Read(testing::MaterializeHost("vm-h100-local-nvidia"), "", "/usr/local/nvidia/bin:/usr/bin");
  ASSERT_EQ(inv.Gpus().size(), 1u);
  const PciDevice& gpu = *inv.Gpus().front();
  EXPECT_EQ(gpu.pci_address, "0000:00:05.0");
  EXPECT_EQ(gpu.product_name.value_or(""), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpu.gpu_uuid.value_or(""), "GPU-0b5c2a9e-7d41-4f63-8e2a-5c9d1f3b7a60");
  EXPECT_FALSE(gpu.iommu_group.has_value());  // no vIOMMU in the VM
  EXPECT_TRUE(inv.warnings.empty()) << inv.warnings.front();

  ASSERT_TRUE(inv.nvidia_driver.has_value());
  const NvidiaDriver& driver = *inv.nvidia_driver;
  EXPECT_EQ(driver.version, "580.65.06");
  ASSERT_EQ(driver.libraries.size(), 14u);  // libnvidia-egl-wayland.so.1.1.13 is not the driver's
  for (const auto& library : driver.libraries) {
    EXPECT_EQ(library.path.rfind(std::string(kLibDir) + "/", 0), 0u) << library.path;
    EXPECT_EQ(library.arch, "x86_64") << library.path;
  }
  auto cuda = std::find_if(driver.libraries.begin(), driver.libraries.end(),
                           [](const DriverLibrary& l) { return l.soname == "libcuda.so.1"; });
  ASSERT_NE(cuda, driver.libraries.end());
  EXPECT_EQ(cuda->path, std::string(kLibDir) + "/libcuda.so.580.65.06");
  EXPECT_EQ(cuda->soname_link, std::string(kLibDir) + "/libcuda.so.1");
  // A library whose SONAME is its file name has no separate link.
  auto gpucomp = std::find_if(driver.libraries.begin(), driver.libraries.end(), [](const auto& l) {
    return l.path == std::string(kLibDir) + "/libnvidia-gpucomp.so.580.65.06";
  });
  ASSERT_NE(gpucomp, driver.libraries.end());
  EXPECT_EQ(gpucomp->soname_link, "");

  // Programs as a shell finds them: through PATH.
  EXPECT_NE(
      std::find(driver.binaries.begin(), driver.binaries.end(), "/usr/local/nvidia/bin/nvidia-smi"),
      driver.binaries.end());
  EXPECT_EQ(driver.binaries.size(), 5u);
}

TEST(LocalNvidiaVmHost, WithoutTheConfigFileOnlyLdLibraryPathLeadsToTheLibraries) {
  testing::TempHost host("vm-h100-local-nvidia");
  std::filesystem::remove(host.root() + "/etc/ld.so.conf.d/000-nvidia.conf");
  // The loader would not find them either: neither cached nor in a directory it searches.
  Inventory unseen = Read(host.root(), "", "");
  ASSERT_TRUE(unseen.nvidia_driver.has_value());
  EXPECT_TRUE(unseen.nvidia_driver->libraries.empty());
  EXPECT_TRUE(unseen.nvidia_driver->binaries.empty());  // /usr/local/nvidia/bin is not on PATH

  // LD_LIBRARY_PATH as a process there has it (relative and empty elements mean nothing here).
  Inventory found = Read(host.root(), std::string("lib64::") + kLibDir + "/", "");
  ASSERT_TRUE(found.nvidia_driver.has_value());
  EXPECT_EQ(found.nvidia_driver->libraries.size(), 14u);
}

TEST(LocalNvidiaVmHost, NvmlGivesTheBoardsMemoryAndMigModeAndIsOnlyRead) {
  testing::FakeNvmlState nvml("vm-h100-local-nvidia");
  ReadOptions options;
  options.root = testing::MaterializeHost("vm-h100-local-nvidia");
  options.nvml_library = FAKE_NVML;
  auto inv = ReadInventory(options);
  ASSERT_TRUE(inv.ok()) << inv.error().message;
  ASSERT_EQ(inv->Gpus().size(), 1u);
  const PciDevice& gpu = *inv->Gpus().front();
  EXPECT_EQ(gpu.memory_bytes.value_or(0), 81559ull << 20);  // nvidia-smi: 81559 MiB
  EXPECT_FALSE(gpu.module_id.has_value());  // the stand-in has no nvmlDeviceGetModuleId
  ASSERT_TRUE(gpu.mig.has_value());
  EXPECT_EQ(gpu.mig->enabled, false);
  EXPECT_EQ(nvml.Log(), "");  // no state-changing NVML call
  EXPECT_EQ(nvml.Inits(), 1u);
}

TEST(LoaderConfig, ParsesDirectoriesIncludesAndComments) {
  auto conf = ParseLdSoConf(
      "# comment\n"
      "include /etc/ld.so.conf.d/*.conf  other.conf\n"
      "\t/usr/local/nvidia/lib64/  # trailing comment\n"
      "hwcap 1 nosegneg\n"
      "/opt/old/lib=libc5\n"
      "\n");
  ASSERT_TRUE(conf.ok()) << conf.error().message;
  EXPECT_EQ(conf->includes, (std::vector<std::string>{"/etc/ld.so.conf.d/*.conf", "other.conf"}));
  EXPECT_EQ(conf->directories,
            (std::vector<std::string>{"/usr/local/nvidia/lib64", "/opt/old/lib"}));
  EXPECT_FALSE(ParseLdSoConf("lib64\n").ok());  // relative directories mean nothing to ldconfig
  std::string many;
  for (int i = 0; i < 300; ++i)
    many += "/d" + std::to_string(i) + "\n";
  EXPECT_FALSE(ParseLdSoConf(many).ok());
}

TEST(LoaderConfig, SplitsSearchPathsAndReadsElfArchitectures) {
  EXPECT_EQ(SplitSearchPath("/a:;rel:/b/;:/c"), (std::vector<std::string>{"/a", "/b", "/c"}));
  EXPECT_TRUE(SplitSearchPath("").empty());
  std::string x86_64(
      "\x7f"
      "ELF\x02\x01\x01",
      7);
  x86_64.resize(18, '\0');
  x86_64 += std::string("\x3e\x00", 2);
  EXPECT_EQ(ElfLibraryArch(x86_64).value_or(""), "x86_64");
  std::string i386 = x86_64;
  i386[4] = 1;
  i386[18] = 3;
  EXPECT_EQ(ElfLibraryArch(i386).value_or(""), "i386");
  EXPECT_FALSE(ElfLibraryArch(x86_64.substr(0, 19)).has_value());
  EXPECT_FALSE(ElfLibraryArch("#!/bin/sh\necho not a library\n").has_value());
}

}  // namespace
}  // namespace tessera::inventory
