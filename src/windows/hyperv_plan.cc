// Which GPU, and everything the chain needs for it: the instance ID the utility VM gets, the pod
// annotations, the MMIO gaps and the PowerShell that dismounts the GPU and gives it back.
#include <algorithm>
#include <cctype>

#include "common/untrusted_text.h"
#include "windows/hyperv.h"

namespace tessera::windows {
namespace {

constexpr uint64_t kMinMemoryMb = 512;
constexpr uint64_t kMaxMemoryMb = 1ull << 20;  // 1 TiB

Status RequireHyperVFacts(const Snapshot& snapshot) {
  if (snapshot.hyperv_facts) return Ok();
  return FailedPrecondition(
      "this snapshot (format 1) records no PCI adapters and no Hyper-V facts: write a format-2 "
      "snapshot with tessera-windows-discover.exe");
}

bool AllDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A display (03) or processing accelerator (12) class, or no class recorded.
bool IsGpuClass(const PciAdapter& a) {
  if (!a.class_code) return true;
  uint32_t base = *a.class_code >> 16;
  return base == 0x03 || base == 0x12;
}

std::string Folder(const std::string& windows_path) {
  size_t slash = windows_path.find_last_of("\\/");
  return slash == std::string::npos ? "" : windows_path.substr(0, slash);
}

}  // namespace

std::string PowerShellLiteral(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

Result<size_t> FindPciAdapter(const Snapshot& snapshot, const std::string& selector) {
  if (auto s = RequireHyperVFacts(snapshot); !s) return s.error();
  const auto& adapters = snapshot.hyperv_facts->pci_adapters;
  if (AllDigits(selector) && selector.size() <= 4) {
    size_t index = std::stoul(selector);
    if (index < adapters.size()) return index;
    return NotFound("--gpu " + selector + ": the snapshot has " + std::to_string(adapters.size()) +
                    " PCI adapter(s)");
  }
  for (size_t i = 0; i < adapters.size(); ++i) {
    const auto& paths = adapters[i].location_paths;
    if (std::find(paths.begin(), paths.end(), selector) != paths.end()) return i;
  }
  return NotFound("--gpu \"" + Excerpt(selector) +
                  "\": no PCI adapter in the snapshot has that location path or index");
}

Result<size_t> SoleGpuCandidate(const Snapshot& snapshot) {
  if (auto s = RequireHyperVFacts(snapshot); !s) return s.error();
  const auto& adapters = snapshot.hyperv_facts->pci_adapters;
  std::vector<size_t> dismounted, candidates;
  for (size_t i = 0; i < adapters.size(); ++i) {
    if (!IsGpuClass(adapters[i]) || adapters[i].PciLocationPath().empty()) continue;
    candidates.push_back(i);
    if (adapters[i].Dismounted()) dismounted.push_back(i);
  }
  if (dismounted.size() == 1) return dismounted[0];
  if (dismounted.empty() && candidates.size() == 1) return candidates[0];
  return InvalidArgument("the snapshot has " + std::to_string(candidates.size()) + " GPU(s) (" +
                         std::to_string(dismounted.size()) +
                         " dismounted): name one with --gpu LOCATION|INDEX");
}

std::string DefaultHyperVImage(uint32_t host_build) {
  const char* tag = host_build >= 26100   ? "ltsc2025"
                    : host_build >= 20348 ? "ltsc2022"
                                          : "ltsc2019";
  return std::string("mcr.microsoft.com/windows/servercore:") + tag;
}

namespace {

// The instance ID after its enumerator ("PCI\\" or "PCIP\\").
std::string InstanceIdRest(const PciAdapter& a) {
  return a.instance_id.substr(a.instance_id.find('\\') + 1);
}

// The names the assigned device goes by: its location path (for dismounting) and, once
// dismounted, its PCIP instance ID (the container's device string).
Status NameAssignedDevice(HyperVGpuPlan& plan) {
  const PciAdapter& a = plan.adapter;
  const size_t index = plan.adapter_index;
  plan.location_path = a.PciLocationPath();
  if (plan.location_path.empty()) {
    return FailedPrecondition("PCI adapter " + std::to_string(index) + " (" +
                              Excerpt(a.instance_id) +
                              ") has no PCIROOT location path: Dismount-VMHostAssignableDevice "
                              "names the device by one");
  }
  // The path goes into PowerShell: it must be NAME(ARGS)#... and nothing else.
  if (auto ref = ParseDeviceString("vpci-location-path://" + plan.location_path); !ref) {
    return ref.error().WithContext("PCI adapter " + std::to_string(index));
  }
  // Dismounting re-enumerates the device under the PCIP enumerator with the rest of its ID.
  std::string rest = InstanceIdRest(a);
  plan.assigned_instance_id = "PCIP\\" + rest;
  // hcsshim reads a numeric last path element as a virtual function index.
  std::string last = rest.substr(rest.rfind('\\') + 1);
  if (AllDigits(last)) {
    return FailedPrecondition("instance ID " + Excerpt(a.instance_id) +
                              " ends in a number, which hcsshim would read as a virtual function "
                              "index");
  }
  plan.device_string = "vpci-instance-id://" + plan.assigned_instance_id;
  if (auto ref = ParseDeviceString(plan.device_string); !ref) return ref.error();
  return Ok();
}

// DDA forbids dynamic memory: the utility VM's memory must be physically backed.
void AddPodAnnotations(HyperVGpuPlan& plan) {
  plan.pod_annotations[kAnnotationFullyPhysicallyBacked] = "true";
  plan.pod_annotations[kAnnotationMemorySizeInMb] = std::to_string(plan.memory_mb);
  if (plan.mmio) {
    plan.pod_annotations[kAnnotationLowMmioGapInMb] = std::to_string(plan.mmio->low_gap_mb);
    plan.pod_annotations[kAnnotationHighMmioBaseInMb] = std::to_string(plan.mmio->high_base_mb);
    plan.pod_annotations[kAnnotationHighMmioGapInMb] = std::to_string(plan.mmio->high_gap_mb);
  }
  if (!plan.kernel_drivers.empty()) {
    plan.pod_annotations[kAnnotationKernelDrivers] = plan.kernel_drivers;
  }
}

// The host's PowerShell steps: dismount the GPU (unless it already is), and give it back.
void AddHostSteps(HyperVGpuPlan& plan) {
  std::string host_instance_id = "PCI\\" + InstanceIdRest(plan.adapter);
  if (!plan.adapter.Dismounted()) {
    plan.dismount_steps = {
        "Disable-PnpDevice -InstanceId " + PowerShellLiteral(host_instance_id) + " -Confirm:$false",
        "# -Force: needed unless the GPU's vendor installed a security mitigation driver",
        "Dismount-VMHostAssignableDevice -Force -LocationPath " +
            PowerShellLiteral(plan.location_path)};
  }
  plan.give_back_steps = {
      "Mount-VMHostAssignableDevice -LocationPath " + PowerShellLiteral(plan.location_path),
      "Enable-PnpDevice -InstanceId " + PowerShellLiteral(host_instance_id) + " -Confirm:$false"};
}

}  // namespace

Result<HyperVGpuPlan> PlanHyperVGpu(const Snapshot& snapshot, const std::string& selector,
                                    const HyperVGpuOptions& options) {
  auto index = FindPciAdapter(snapshot, selector);
  if (!index) return index.error();
  HyperVGpuPlan plan;
  plan.adapter_index = *index;
  plan.adapter = snapshot.hyperv_facts->pci_adapters[*index];
  const PciAdapter& a = plan.adapter;
  if (auto named = NameAssignedDevice(plan); !named) return named.error();

  plan.image = options.image.empty() ? DefaultHyperVImage(snapshot.os.build) : options.image;
  if (auto info = ParseImageReference(plan.image); !info) return info.error();
  if (options.memory_mb < kMinMemoryMb || options.memory_mb > kMaxMemoryMb) {
    return InvalidArgument("utility VM memory " + std::to_string(options.memory_mb) +
                           " MB is out of range (" + std::to_string(kMinMemoryMb) + ".." +
                           std::to_string(kMaxMemoryMb) + ")");
  }
  plan.memory_mb = options.memory_mb;
  plan.runtime_handler = options.runtime_handler;
  plan.pod_name = options.pod_name;
  plan.container_name = options.container_name;
  if (a.memory_ranges && !a.memory_ranges->empty()) {
    auto mmio = PlanMmio(*a.memory_ranges, plan.memory_mb);
    if (!mmio) return mmio.error().WithContext("PCI adapter " + std::to_string(*index));
    plan.mmio = *mmio;
  }
  plan.kernel_drivers =
      options.kernel_drivers.empty() ? a.driver_store_path : options.kernel_drivers;
  const auto& containerd = snapshot.hyperv_facts->containerd;
  if (containerd && !containerd->shim_path.empty()) {
    std::string folder = Folder(containerd->shim_path);
    plan.device_util_host_path = (folder.empty() ? "" : folder + "\\") + "device-util.exe";
  }
  AddPodAnnotations(plan);
  AddHostSteps(plan);
  return plan;
}

}  // namespace tessera::windows
