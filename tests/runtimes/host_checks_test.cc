// Host checks over fixture host roots: a healthy HGX host passes; each test seeds one problem
// into a private copy (TempHost) and expects exactly that check's verdict.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cdi/cdi.h"
#include "common/atomic_file.h"
#include "runtimes/runtimes.h"
#include "support/fixture_host.h"

namespace tessera::runtimes {
namespace {

namespace fs = std::filesystem;
using testing::TempHost;

void Write(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << content;
}

// A CDI spec for the host's own driver, as `tessera cdi generate` writes it.
std::string FreshSpec(const std::string& root) {
  inventory::ReadOptions read;
  read.root = root;
  auto inv = inventory::ReadInventory(read);
  EXPECT_TRUE(inv.ok());
  cdi::BuildOptions options;
  options.mode = cdi::Mode::kDriver;
  auto built = cdi::BuildSpecs(*inv, options);
  EXPECT_TRUE(built.ok());
  for (const auto& spec : built->specs) {
    if (spec.kind == "nvidia.com/gpu") return cdi::Serialize(spec, cdi::Format::kJson);
  }
  ADD_FAILURE() << "no nvidia.com/gpu spec";
  return "";
}

struct Host {
  explicit Host(const std::string& fixture) : temp(fixture) {
    Write(root() + "/proc/sys/kernel/osrelease", "6.8.0-45-generic\n");
  }
  const std::string& root() const { return temp.root(); }
  void AddFreshSpec() { Write(root() + "/var/run/cdi/nvidia.com-gpu.json", FreshSpec(root())); }
  void SetHugepages(int total, int free) {
    std::string dir = root() + "/sys/kernel/mm/hugepages/hugepages-1048576kB/";
    Write(dir + "nr_hugepages", std::to_string(total) + "\n");
    Write(dir + "free_hugepages", std::to_string(free) + "\n");
  }
  std::vector<Check> Checks(const ContainerdConfigFacts* containerd = nullptr,
                            const NvproxyDrivers& drivers = BuiltinNvproxyDrivers(),
                            std::optional<std::string> podman = std::nullopt) {
    HostFactsOptions options;
    options.root = root();
    options.podman_version = podman;
    auto facts = ReadHostFacts(options);
    EXPECT_TRUE(facts.ok()) << facts.error().message;
    return CheckHost(*facts, drivers, containerd);
  }
  TempHost temp;
};

Check Get(const std::vector<Check>& checks, const std::string& id) {
  for (const auto& c : checks) {
    if (c.id == id) return c;
  }
  Check missing{"missing", "", Verdict::kPass, "", ""};
  ADD_FAILURE() << "no check " << id;
  return missing;
}

ContainerdConfigFacts Configured(Runtime runtime) {
  ContainerdConfigFacts facts;
  ContainerdRuntime r;
  switch (runtime) {
    case Runtime::kRunc:
      r = {"runc", "io.containerd.runc.v2", "", "", "", {}};
      break;
    case Runtime::kGvisor:
      r = {"runsc",
           "io.containerd.runsc.v1",
           "",
           "io.containerd.runsc.v1.options",
           "/etc/runsc.toml",
           {}};
      break;
    case Runtime::kKata:
      r = {"kata-qemu-nvidia-gpu", "io.containerd.kata-qemu-nvidia-gpu.v2", "", "", "", {}};
      break;
  }
  facts.runtimes.push_back(r);
  return facts;
}

TEST(HostChecks, HealthyHgxHostPassesEverything) {
  Host host("hgx-h100-dgx");
  host.AddFreshSpec();
  auto gvisor = Configured(Runtime::kGvisor);
  for (const auto& check : host.Checks(&gvisor, BuiltinNvproxyDrivers(), "4.3.1"))
    EXPECT_EQ(check.verdict, Verdict::kPass) << check.id << ": " << check.evidence;
}

TEST(HostChecks, MissingCdiSpecFails) {
  Host host("hgx-h100-dgx");
  Check check = Get(host.Checks(), "cdi.specs");
  EXPECT_EQ(check.verdict, Verdict::kFail);
  EXPECT_NE(check.evidence.find("580.65.06"), std::string::npos);
}

TEST(HostChecks, SpecFromAnOlderDriverIsStale) {
  Host host("hgx-h100-dgx");
  std::string spec = FreshSpec(host.root());
  std::string old = spec;
  for (size_t at; (at = old.find("580.65.06")) != std::string::npos;)
    old.replace(at, 9, "570.86.15");
  Write(host.root() + "/etc/cdi/nvidia.com-gpu.json", old);
  Check check = Get(host.Checks(), "cdi.specs");
  EXPECT_EQ(check.verdict, Verdict::kFail);
  EXPECT_NE(check.evidence.find("570.86.15"), std::string::npos) << check.evidence;
}

TEST(HostChecks, UnparsableSpecFails) {
  Host host("hgx-h100-dgx");
  Write(host.root() + "/var/run/cdi/broken.yaml", "cdiVersion: [\n");
  EXPECT_EQ(Get(host.Checks(), "cdi.specs").verdict, Verdict::kFail);
}

TEST(HostChecks, PodmanThatRejectsTheSpecVersionFails) {
  Host host("hgx-h100-dgx");
  host.AddFreshSpec();
  // A spec that needs 0.6.0 (annotations) against podman 4.3 (CDI library 0.5).
  Write(host.root() + "/etc/cdi/vendor.yaml",
        "cdiVersion: \"0.6.0\"\nkind: example.com/dev\nannotations:\n  a: b\ndevices:\n"
        "- name: d0\n  containerEdits:\n    env: [\"X=1\"]\n");
  Check old = Get(host.Checks(nullptr, BuiltinNvproxyDrivers(), "4.3.1"), "cdi.podman");
  EXPECT_EQ(old.verdict, Verdict::kFail);
  EXPECT_NE(old.evidence.find("vendor.yaml"), std::string::npos);
  EXPECT_EQ(Get(host.Checks(nullptr, BuiltinNvproxyDrivers(), "4.9.3"), "cdi.podman").verdict,
            Verdict::kPass);
  // Podman before 4.1 has no CDI at all.
  EXPECT_EQ(Get(host.Checks(nullptr, BuiltinNvproxyDrivers(), "3.4.4"), "cdi.podman").verdict,
            Verdict::kFail);
}

TEST(HostChecks, DriverOffTheNvproxyListFailsOnlyWhenGvisorIsConfigured) {
  Host host("hgx-h100-dgx");
  host.AddFreshSpec();
  NvproxyDrivers old = ParseNvproxyDrivers("source: test\n535.129.03\n550.90.12\n");
  auto gvisor = Configured(Runtime::kGvisor);
  Check with = Get(host.Checks(&gvisor, old), "gvisor.driver");
  EXPECT_EQ(with.verdict, Verdict::kFail);
  EXPECT_NE(with.evidence.find("580.65.06"), std::string::npos);
  EXPECT_EQ(Get(host.Checks(nullptr, old), "gvisor.driver").verdict, Verdict::kWarn);
}

TEST(HostChecks, NoIommuGroupsWarnsAndFailsWithKata) {
  Host host("hgx-h100-dgx");
  host.AddFreshSpec();
  for (auto& entry : fs::recursive_directory_iterator(host.root() + "/sys/devices")) {
    if (entry.path().filename() == "iommu_group") fs::remove(entry.path());
  }
  EXPECT_EQ(Get(host.Checks(), "iommu.groups").verdict, Verdict::kWarn);
  auto kata = Configured(Runtime::kKata);
  EXPECT_EQ(Get(host.Checks(&kata), "iommu.groups").verdict, Verdict::kFail);
}

TEST(HostChecks, KataWithGpusOnTheNvidiaDriverFails) {
  Host host("hgx-h100-dgx");
  auto kata = Configured(Runtime::kKata);
  Check check = Get(host.Checks(&kata), "vfio.binding");
  EXPECT_EQ(check.verdict, Verdict::kFail);
  EXPECT_NE(check.evidence.find("0 of 8"), std::string::npos) << check.evidence;
}

TEST(HostChecks, VfioHostWithHugepagesAndNewKernelPasses) {
  Host host("hgx-h100-vfio");
  host.SetHugepages(2048, 2048);
  auto kata = Configured(Runtime::kKata);
  auto checks = host.Checks(&kata);
  for (const char* id :
       {"iommu.groups", "vfio.binding", "vfio.group_members", "kata.hugepages", "kernel.version"})
    EXPECT_EQ(Get(checks, id).verdict, Verdict::kPass) << id << ": " << Get(checks, id).evidence;
}

TEST(HostChecks, NoHugepagesWarnsWithThePinnedMemory) {
  Host host("hgx-h100-vfio");
  Check none = Get(host.Checks(), "kata.hugepages");
  EXPECT_EQ(none.verdict, Verdict::kWarn);
  EXPECT_NE(none.evidence.find("all 8 vfio GPU(s) pins about"), std::string::npos) << none.evidence;
  host.SetHugepages(64, 16);  // some, but far fewer than 8 GPUs' worth
  EXPECT_EQ(Get(host.Checks(), "kata.hugepages").verdict, Verdict::kWarn);
}

TEST(HostChecks, OldKernelWarnsForVfioGpus) {
  Host host("hgx-h100-vfio");
  Write(host.root() + "/proc/sys/kernel/osrelease", "5.15.0-91-generic\n");
  Check check = Get(host.Checks(), "kernel.version");
  EXPECT_EQ(check.verdict, Verdict::kWarn);
  EXPECT_NE(check.evidence.find("5.15.0"), std::string::npos);
  // The same kernel on a host without VM isolation is fine.
  Host plain("hgx-h100-dgx");
  Write(plain.root() + "/proc/sys/kernel/osrelease", "5.15.0-91-generic\n");
  EXPECT_EQ(Get(plain.Checks(), "kernel.version").verdict, Verdict::kPass);
}

TEST(HostChecks, GroupMemberOnAnotherDriverFails) {
  Host host("hgx-h100-vfio");
  // Put an audio function bound to snd_hda_intel into the first GPU's IOMMU group.
  std::string gpu_link = host.root() + "/sys/bus/pci/devices/0000:18:00.0";
  fs::path gpu_dir = fs::canonical(gpu_link);
  std::string group = fs::read_symlink(gpu_dir / "iommu_group").filename();
  fs::path audio = gpu_dir.parent_path() / "0000:18:00.1";
  fs::create_directories(audio);
  std::ofstream(audio / "class") << "0x040300\n";
  std::ofstream(audio / "vendor") << "0x10de\n";
  std::ofstream(audio / "device") << "0x22a3\n";
  fs::create_symlink("/sys/bus/pci/drivers/snd_hda_intel", audio / "driver");
  fs::create_symlink(fs::relative(audio, host.root() + "/sys/bus/pci/devices"),
                     host.root() + "/sys/bus/pci/devices/0000:18:00.1");
  fs::create_symlink(
      fs::relative(audio, host.root() + "/sys/kernel/iommu_groups/" + group + "/devices"),
      host.root() + "/sys/kernel/iommu_groups/" + group + "/devices/0000:18:00.1");
  Check check = Get(host.Checks(), "vfio.group_members");
  EXPECT_EQ(check.verdict, Verdict::kFail);
  EXPECT_NE(check.evidence.find("0000:18:00.1 (driver snd_hda_intel"), std::string::npos)
      << check.evidence;
}

}  // namespace
}  // namespace tessera::runtimes
