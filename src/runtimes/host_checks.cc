// Host checks for GPU containers and GPU VMs. Facts relied on (see the architecture notes):
//  - VFIO hands a whole IOMMU group to one VM: every member must be on vfio-pci (or be a
//    bridge / driverless), else the group cannot be opened;
//  - a VM with passed-through GPUs pins all its guest memory; pinning runs at ~3.3 s per
//    128 GiB with 4 KiB pages, so 1 GiB hugepages cut Kata GPU VM boot time;
//  - 8-GPU VMs took ~30 min to boot on old kernels and ~3 min on 6.8;
//  - gVisor's nvproxy accepts an exact list of driver versions; any other shows only
//    "waiting for sandbox to start: EOF".
#include <algorithm>
#include <cstdio>
#include <regex>
#include <set>

#include "cdi/cdi.h"
#include "runtimes/check_builder.h"
#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

using checks::Make;

std::string Join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i)
    out += (i ? sep : "") + items[i];
  return out;
}

bool Configured(const ContainerdConfigFacts* containerd, Runtime kind) {
  return containerd && containerd->HasRuntimeOfKind(kind);
}

// The GPU's memory as its largest 64-bit prefetchable BAR (BAR1 maps all of VRAM on data
// centre GPUs); what a VM must be able to address and, sized alike, what it pins.
uint64_t GpuMemoryEstimate(const inventory::PciDevice& gpu) {
  uint64_t largest = 0;
  for (const auto& bar : gpu.bars) {
    if (bar.is_64bit_prefetchable()) largest = std::max(largest, bar.size);
  }
  return largest;
}

std::string GiB(uint64_t bytes) {
  return std::to_string((bytes + kGiB - 1) / kGiB) + " GiB";
}

void CheckIommu(const HostFacts& facts, const ContainerdConfigFacts* containerd,
                std::vector<Check>& out) {
  auto gpus = facts.inventory.Gpus();
  const std::string id = "iommu.groups";
  const std::string title = "GPUs sit in IOMMU groups (needed for VM isolation)";
  if (gpus.empty()) {
    out.push_back(Make(id, title, Verdict::kPass, "no GPU on this host: not applicable"));
    return;
  }
  std::vector<std::string> without;
  for (const auto* gpu : gpus) {
    if (!gpu->iommu_group) without.push_back(gpu->pci_address);
  }
  if (without.empty()) {
    out.push_back(Make(id, title, Verdict::kPass,
                       std::to_string(gpus.size()) + " GPU(s), each in an IOMMU group"));
    return;
  }
  bool kata = Configured(containerd, Runtime::kKata);
  out.push_back(Make(id, title, kata ? Verdict::kFail : Verdict::kWarn,
                     "no /sys/kernel/iommu_groups entry for " + Join(without) +
                         (kata ? " while a Kata runtime is configured" : ""),
                     "enable the IOMMU (intel_iommu=on or amd_iommu=on iommu=pt on the kernel "
                     "command line, VT-d/AMD-Vi in firmware) and reboot"));
}

void CheckVfio(const HostFacts& facts, const ContainerdConfigFacts* containerd,
               std::vector<Check>& out) {
  auto gpus = facts.inventory.Gpus();
  std::vector<const inventory::PciDevice*> vfio;
  std::vector<std::string> other;
  for (const auto* gpu : gpus) {
    if (gpu->driver == "vfio-pci") {
      vfio.push_back(gpu);
    } else {
      other.push_back(gpu->pci_address + " (" + (gpu->driver.empty() ? "unbound" : gpu->driver) +
                      ")");
    }
  }
  bool kata = Configured(containerd, Runtime::kKata);
  {
    const std::string id = "vfio.binding";
    const std::string title = "GPUs for VM isolation are bound to vfio-pci";
    std::string evidence =
        std::to_string(vfio.size()) + " of " + std::to_string(gpus.size()) + " GPU(s) on vfio-pci";
    if (!other.empty()) evidence += "; others: " + Join(other);
    if (kata && !gpus.empty() && vfio.empty()) {
      out.push_back(Make(id, title, Verdict::kFail, evidence + "; a Kata GPU runtime is configured",
                         "bind the GPUs meant for VMs to vfio-pci (driverctl set-override <bdf> "
                         "vfio-pci) and generate CDI specs with --mode vfio"));
    } else {
      out.push_back(Make(id, title, Verdict::kPass, evidence));
    }
  }
  const std::string id = "vfio.group_members";
  const std::string title = "every member of a vfio GPU's IOMMU group is on vfio-pci or a bridge";
  if (vfio.empty()) {
    out.push_back(Make(id, title, Verdict::kPass, "no GPU on vfio-pci: not applicable"));
    return;
  }
  std::vector<std::string> bad;
  for (const auto* gpu : vfio) {
    if (!gpu->iommu_group) continue;
    auto group = facts.inventory.iommu_groups.find(*gpu->iommu_group);
    if (group == facts.inventory.iommu_groups.end()) continue;
    for (const auto& member : group->second.members) {
      auto fn = facts.group_members.find(member);
      if (fn == facts.group_members.end()) continue;
      const PciFunction& f = fn->second;
      bool bridge = (f.class_code >> 8) == 0x0604;
      if (f.driver.empty() || f.driver == "vfio-pci" || f.driver == "pci-stub" || bridge) continue;
      bad.push_back(member + " (driver " + f.driver + ", group " +
                    std::to_string(*gpu->iommu_group) + " of " + gpu->pci_address + ")");
    }
  }
  if (bad.empty()) {
    out.push_back(Make(id, title, Verdict::kPass,
                       std::to_string(vfio.size()) + " vfio GPU group(s) are viable"));
  } else {
    out.push_back(Make(id, title, Verdict::kFail,
                       "VFIO cannot open the group while these are bound elsewhere: " + Join(bad),
                       "bind every listed function to vfio-pci too (driverctl set-override "
                       "<bdf> vfio-pci)"));
  }
}

void CheckHugepages(const HostFacts& facts, const ContainerdConfigFacts* containerd,
                    std::vector<Check>& out) {
  const std::string id = "kata.hugepages";
  const std::string title = "1 GiB hugepages for Kata GPU VMs";
  std::vector<const inventory::PciDevice*> vfio;
  for (const auto* gpu : facts.inventory.Gpus()) {
    if (gpu->driver == "vfio-pci") vfio.push_back(gpu);
  }
  bool kata = Configured(containerd, Runtime::kKata);
  if (vfio.empty() && !kata) {
    out.push_back(Make(id, title, Verdict::kPass, "no vfio GPU and no Kata runtime: not needed"));
    return;
  }
  uint64_t pinned = 0;
  for (const auto* gpu : vfio)
    pinned += GpuMemoryEstimate(*gpu);
  char seconds[64];
  std::snprintf(seconds, sizeof seconds, "%.0f s", double(pinned) / double(128 * kGiB) * 3.3);
  std::string need =
      "a VM with all " + std::to_string(vfio.size()) + " vfio GPU(s) pins about " + GiB(pinned) +
      " (guest RAM sized to the GPUs' BAR1 apertures, an upper bound of their memory; ~" + seconds +
      " to pin with 4 KiB pages)";
  int total = facts.hugepages_1g_total.value_or(0);
  int free = facts.hugepages_1g_free.value_or(0);
  std::string seen = "1 GiB hugepages: " + std::to_string(total) + " total, " +
                     std::to_string(free) + " free; " + need;
  const std::string fix =
      "reserve 1 GiB hugepages at boot (default_hugepagesz=1G hugepagesz=1G "
      "hugepages=" +
      std::to_string((pinned + kGiB - 1) / kGiB) +
      ") and enable hugepages in the Kata GPU configuration";
  if (!facts.hugepages_1g_total) {
    out.push_back(Make(id, title, Verdict::kWarn,
                       "/sys/kernel/mm/hugepages/hugepages-1048576kB missing; " + need, fix));
  } else if (uint64_t(free) * kGiB < pinned || total == 0) {
    out.push_back(Make(id, title, Verdict::kWarn, seen, fix));
  } else {
    out.push_back(Make(id, title, Verdict::kPass, seen));
  }
}

void CheckKernel(const HostFacts& facts, const ContainerdConfigFacts* containerd,
                 std::vector<Check>& out) {
  const std::string id = "kernel.version";
  const std::string title = "kernel is new enough to boot multi-GPU VMs quickly";
  int vfio = 0;
  for (const auto* gpu : facts.inventory.Gpus())
    vfio += gpu->driver == "vfio-pci";
  bool relevant = vfio > 0 || Configured(containerd, Runtime::kKata);
  if (!facts.kernel_release) {
    out.push_back(Make(id, title, relevant ? Verdict::kWarn : Verdict::kPass,
                       "/proc/sys/kernel/osrelease not readable",
                       relevant ? "check the kernel version by hand (6.8 or later)" : ""));
    return;
  }
  auto version = Version::Parse(*facts.kernel_release);
  std::string evidence = "kernel " + *facts.kernel_release;
  if (!relevant) {
    out.push_back(Make(id, title, Verdict::kPass, evidence + "; no VM isolation in use"));
    return;
  }
  if (!version || version->Compare(Version{{6, 8}}) < 0) {
    out.push_back(Make(id, title, Verdict::kWarn,
                       evidence + " with " + std::to_string(vfio) +
                           " vfio GPU(s): 8-GPU VMs took ~30 min to boot on older kernels "
                           "(~3 min on 6.8)",
                       "run kernel 6.8 or later on hosts that start multi-GPU VMs"));
    return;
  }
  out.push_back(Make(id, title, Verdict::kPass, evidence));
}

void CheckNvproxyDriver(const HostFacts& facts, const NvproxyDrivers& drivers,
                        const ContainerdConfigFacts* containerd, std::vector<Check>& out) {
  const std::string id = "gvisor.driver";
  const std::string title = "NVIDIA driver is on gVisor nvproxy's supported list";
  bool gvisor = Configured(containerd, Runtime::kGvisor);
  if (!facts.inventory.nvidia_driver || facts.inventory.nvidia_driver->version.empty()) {
    out.push_back(Make(id, title, Verdict::kPass, "no NVIDIA driver loaded: not applicable"));
    return;
  }
  const std::string& version = facts.inventory.nvidia_driver->version;
  std::string source = drivers.source.empty() ? "" : " (list: " + drivers.source + ")";
  if (drivers.Supports(version)) {
    out.push_back(Make(id, title, Verdict::kPass, "driver " + version + " supported" + source));
    return;
  }
  std::string evidence = "driver " + version + " is not among the " +
                         std::to_string(drivers.versions.size()) + " supported versions" + source +
                         (gvisor ? "; runsc fails with \"waiting for sandbox to start: EOF\"" : "");
  out.push_back(Make(id, title, gvisor ? Verdict::kFail : Verdict::kWarn, evidence,
                     "install a supported driver (`runsc nvproxy list-supported-drivers`) or "
                     "upgrade runsc"));
}

// Debian 12's runsc (20221219) has no nvproxy: containers run under gVisor, GPU containers
// cannot. A containerd gVisor runtime on a host with NVIDIA GPUs is there for GPU containers.
void CheckRunscNvproxy(const HostFacts& facts, const ContainerdConfigFacts* containerd,
                       std::vector<Check>& out) {
  const std::string id = "gvisor.runsc";
  const std::string title = "runsc can give GPU containers their GPUs (nvproxy)";
  if (!facts.runsc) {
    out.push_back(Make(id, title, Verdict::kPass, "runsc not installed: not applicable"));
    return;
  }
  const RunscInfo& runsc = *facts.runsc;
  std::string seen = "runsc " + runsc.version + " (" + runsc.path + ")";
  if (runsc.nvproxy) {
    out.push_back(Make(id, title, Verdict::kPass, seen + " has nvproxy"));
    return;
  }
  bool nvidia = facts.inventory.nvidia_driver.has_value() || !facts.inventory.Gpus().empty();
  bool gpu_runtime = nvidia && Configured(containerd, Runtime::kGvisor);
  out.push_back(Make(id, title, gpu_runtime ? Verdict::kFail : Verdict::kWarn,
                     seen +
                         " has no nvproxy (`runsc flags` lists no -nvproxy): containers without "
                         "GPUs run under gVisor, GPU containers with isolation gvisor are "
                         "refused (tessera serve answers 409)" +
                         (gpu_runtime ? "; containerd has a gVisor runtime on this GPU host" : ""),
                     "for GPU containers under gVisor install a gVisor release with nvproxy "
                     "(https://gvisor.dev/docs/user_guide/gpu/; its `runsc flags` lists "
                     "-nvproxy), or run them with isolation runc or kata"));
}

void CheckCdiSpecs(const HostFacts& facts, std::vector<Check>& out) {
  const std::string id = "cdi.specs";
  const std::string title = "CDI specs present and fresh for the current driver";
  if (!facts.inventory.nvidia_driver || facts.inventory.nvidia_driver->version.empty()) {
    std::string seen = std::to_string(facts.cdi_specs.size()) +
                       " CDI spec file(s); no NVIDIA "
                       "driver loaded";
    out.push_back(Make(id, title, Verdict::kPass, seen));
    return;
  }
  const std::string& driver = facts.inventory.nvidia_driver->version;
  const std::string fix = "tessera cdi generate --output /var/run/cdi (or run it with --watch)";
  std::vector<std::string> nvidia_specs, stale, broken;
  // Driver versions appear in library names: libcuda.so.580.65.06.
  static const std::regex kLibVersion(R"(\.so\.([0-9]{3}\.[0-9]+(\.[0-9]+)?))");
  for (const auto& file : facts.cdi_specs) {
    auto parsed = cdi::ParseSpec(file.content);
    if (!parsed.problems.empty()) {
      broken.push_back(file.path + ": " + cdi::FormatProblem(parsed.problems.front()));
      continue;
    }
    if (parsed.spec.Vendor() != "nvidia.com") continue;
    nvidia_specs.push_back(file.path);
    std::set<std::string> seen;
    for (auto it = std::sregex_iterator(file.content.begin(), file.content.end(), kLibVersion);
         it != std::sregex_iterator(); ++it) {
      seen.insert((*it)[1].str());
    }
    for (const auto& v : seen) {
      if (v != driver) {
        stale.push_back(file.path + " names driver " + v);
        break;
      }
    }
  }
  if (!broken.empty()) {
    out.push_back(Make(id, title, Verdict::kFail, "unreadable spec: " + Join(broken, "; "), fix));
  } else if (nvidia_specs.empty()) {
    out.push_back(Make(id, title, Verdict::kFail,
                       "no nvidia.com spec in /etc/cdi or /var/run/cdi (driver " + driver + ")",
                       fix));
  } else if (!stale.empty()) {
    out.push_back(Make(id, title, Verdict::kFail,
                       Join(stale, "; ") + ", but the loaded driver is " + driver +
                           ": containers would mount missing libraries",
                       fix));
  } else {
    out.push_back(Make(id, title, Verdict::kPass, Join(nvidia_specs) + " match driver " + driver));
  }
}

void CheckPodmanCdiVersion(const HostFacts& facts, std::vector<Check>& out) {
  const std::string id = "cdi.podman";
  const std::string title = "podman accepts the CDI spec versions in use";
  if (!facts.podman_version) {
    out.push_back(Make(id, title, Verdict::kPass, "podman not found: not applicable"));
    return;
  }
  std::string podman = "podman " + facts.podman_version->ToString();
  auto max = MaxCdiVersionForPodman(*facts.podman_version);
  std::vector<std::string> rejected;
  for (const auto& file : facts.cdi_specs) {
    auto parsed = cdi::ParseSpec(file.content);
    auto version = Version::Parse(parsed.spec.version);
    if (!version) continue;
    if (!max || version->Compare(*Version::Parse(*max)) > 0)
      rejected.push_back(file.path + " (cdiVersion " + parsed.spec.version + ")");
  }
  if (rejected.empty()) {
    out.push_back(Make(id, title, Verdict::kPass,
                       podman + (max ? " accepts cdiVersion up to " + *max : " has no CDI") + "; " +
                           std::to_string(facts.cdi_specs.size()) + " spec file(s)"));
    return;
  }
  out.push_back(Make(id, title, Verdict::kFail,
                     podman + (max ? " accepts cdiVersion up to " + *max : " has no CDI (< 4.1)") +
                         ", rejects " + Join(rejected),
                     "regenerate with tessera cdi generate (it writes the lowest version the "
                     "content needs) or upgrade podman"));
}

}  // namespace

std::vector<Check> CheckHost(const HostFacts& facts, const NvproxyDrivers& drivers,
                             const ContainerdConfigFacts* containerd) {
  std::vector<Check> out;
  CheckIommu(facts, containerd, out);
  CheckVfio(facts, containerd, out);
  CheckHugepages(facts, containerd, out);
  CheckKernel(facts, containerd, out);
  CheckNvproxyDriver(facts, drivers, containerd, out);
  CheckRunscNvproxy(facts, containerd, out);
  CheckCdiSpecs(facts, out);
  CheckPodmanCdiVersion(facts, out);
  return out;
}

}  // namespace tessera::runtimes
