// The preflight for a GPU in a Hyper-V-isolated container: one check per link of the chain that a
// snapshot can show, each with what it saw and the fix. Facts the snapshot lacks fail the check
// that needs them: the verdict passes only on what was seen.
#include <fnmatch.h>

#include <algorithm>
#include <cstdio>

#include "common/untrusted_text.h"
#include "windows/hyperv.h"

namespace tessera::windows {
namespace {

constexpr uint32_t kHyperVGpuFromBuild = 19041;  // hcsshim's WCOW hypervisor GPU test minimum
constexpr SchemaVersion kVirtualPciSchema{2, 3};
constexpr uint32_t kProblemDisabled = 22;  // CM_PROB_DISABLED
constexpr uint32_t kLegacyEndpoint = 3;    // DEVPKEY_PciDevice_DeviceType: PciExpressLegacyEndpoint
constexpr uint32_t kDisplayControllerClass = 0x03;   // PCI base class
const std::vector<int> kContainerdMinimum = {1, 7};  // CRI IDType://ID devices, the runtime default
const std::vector<int> kHcsshimMinimum = {0, 9, 0};  // io.microsoft.virtualmachine.kerneldrivers
constexpr const char* kRunhcsRuntimeType = "io.containerd.runhcs.v1";
// containerd >= 1.7's built-in runhcs-wcow-hypervisor runtime (internal/cri/config).
constexpr const char* kBuiltinPodAnnotations = "io.microsoft.virtualmachine.*";

// The first dotted number in `text` ("v1.7.20" -> {1,7,20}); empty when there is none.
std::vector<int> DottedNumbers(const std::string& text) {
  std::vector<int> out;
  size_t i = text.find_first_of("0123456789");
  while (i != std::string::npos && i < text.size() && out.size() < 4) {
    size_t end = i;
    while (end < text.size() && end - i < 6 && text[end] >= '0' && text[end] <= '9')
      ++end;
    out.push_back(std::stoi(text.substr(i, end - i)));
    if (end + 1 >= text.size() || text[end] != '.' || text[end + 1] < '0' || text[end + 1] > '9')
      break;
    i = end + 1;
  }
  return out;
}

bool AtLeast(const std::vector<int>& have, const std::vector<int>& need) {
  for (size_t i = 0; i < need.size(); ++i) {
    int h = i < have.size() ? have[i] : 0;
    if (h != need[i]) return h > need[i];
  }
  return true;
}

std::string Dotted(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i)
    out += (i ? "." : "") + std::to_string(v[i]);
  return out;
}

std::string List(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i)
    out += (i ? ", " : "") + Excerpt(items[i]);
  return out + "]";
}

// containerd matches the allow-list with Go's path.Match, where '*' stops at '/'.
bool AllowListPasses(const std::vector<std::string>& patterns, const std::string& key) {
  for (const std::string& p : patterns) {
    if (fnmatch(p.c_str(), key.c_str(), FNM_PATHNAME) == 0) return true;
  }
  return false;
}

class Checks {
 public:
  void Pass(std::string id, std::string detail) {
    out_.push_back({std::move(id), CheckStatus::kPass, std::move(detail), ""});
  }
  void Fail(std::string id, std::string detail, std::string fix) {
    out_.push_back({std::move(id), CheckStatus::kFail, std::move(detail), std::move(fix)});
  }
  std::vector<PreflightCheck> Take() { return std::move(out_); }

 private:
  std::vector<PreflightCheck> out_;
};

const char* const kRediscover =
    "run tessera-windows-discover.exe as Administrator while the GPU is still enabled on the "
    "host (before dismounting it)";

void CheckHost(const Snapshot& s, Checks& c) {
  SchemaVersion schema = s.MaxSchemaVersion();
  std::string build = "host build " + std::to_string(s.os.build) + ", HCS schema " +
                      (schema == SchemaVersion{} ? "none" : FormatSchemaVersion(schema));
  if (s.os.build >= kHyperVGpuFromBuild && schema >= kVirtualPciSchema) {
    c.Pass("host.build", build + ": a device can be assigned to a Windows utility VM (build " +
                             std::to_string(kHyperVGpuFromBuild) + ", schema 2.3)");
  } else {
    c.Fail("host.build",
           build + ": hcsshim assigns devices to a Windows utility VM from build " +
               std::to_string(kHyperVGpuFromBuild) + " (VirtualPci, HCS schema 2.3)",
           "use Windows Server 2022 (build 20348) or later");
  }
  const HyperVHost& h = s.hyperv_facts->hyperv;
  if (h.vmms == ServiceState::kRunning) {
    c.Pass("host.hyperv", "Hyper-V is running (vmms): Dismount-VMHostAssignableDevice works");
  } else {
    c.Fail("host.hyperv",
           std::string("Hyper-V's management service (vmms) is ") + ServiceStateName(h.vmms),
           "Install-WindowsFeature Hyper-V -IncludeManagementTools, then restart");
  }
  if (h.vmcompute == ServiceState::kRunning) {
    c.Pass("host.containers", "the Host Compute Service is running (vmcompute)");
  } else {
    c.Fail("host.containers",
           std::string("the Host Compute Service (vmcompute) is ") + ServiceStateName(h.vmcompute),
           "Install-WindowsFeature Containers, then restart");
  }
  if (h.iov_support == true) {
    c.Pass("host.iommu", "IOMMU and ACS present (IovSupport: True)");
  } else if (h.iov_support == false) {
    c.Fail("host.iommu",
           "IovSupport: False" +
               (h.iov_support_reasons.empty() ? std::string() : ": " + List(h.iov_support_reasons)),
           "enable the IOMMU (Intel VT-d or AMD-Vi), SR-IOV and ACS in the firmware setup; the "
           "firmware must give Windows native PCI Express control");
  } else {
    c.Fail("host.iommu", "the snapshot does not say whether the host supports IOV (IovSupport)",
           "run tessera-windows-discover.exe as Administrator on a host with Hyper-V installed");
  }
}

// A legacy PCI Express endpoint (device type 3) is judged as Microsoft's DDA survey judges it
// (SurveyDDA.ps1 in MicrosoftDocs/Virtualization-Documentation, hyperv-tools/
// DiscreteDeviceAssignment, since its change of 2022-09-02 "allow any display controller"):
// assignable when its PCI base class is 0x03, a display controller of any subclass; any other
// legacy endpoint is not.
void CheckLegacyEndpoint(const PciAdapter& a, Checks& c) {
  if (!a.class_code) {
    c.Fail("device.type",
           "legacy PCI Express endpoint (type 3) without a PCI class in the snapshot: only a "
           "display controller (base class 0x03) is assignable",
           kRediscover);
    return;
  }
  const uint32_t base = *a.class_code >> 16;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", base);
  if (base == kDisplayControllerClass) {
    c.Pass("device.type",
           "legacy PCI Express endpoint of a display controller (base class 0x03): assignable, as "
           "Microsoft's SurveyDDA.ps1 judges it");
  } else {
    c.Fail("device.type",
           std::string("legacy PCI Express endpoint of base class ") + hex +
               ": only display controllers (0x03) are assignable as legacy endpoints",
           "only PCI Express endpoints, and legacy endpoints that are display controllers, can be "
           "assigned: use another device");
  }
}

// The PCI Express device type: only endpoints can be assigned.
void CheckDeviceType(const PciAdapter& a, Checks& c) {
  const DdaProperties& d = a.dda;
  if (!d.device_type) {
    c.Fail("device.type", "the snapshot has no PCI device type (DEVPKEY_PciDevice_DeviceType)",
           kRediscover);
  } else if (*d.device_type == 2) {
    c.Pass("device.type", "PCI Express endpoint");
  } else if (*d.device_type == 4) {
    c.Pass("device.type",
           "root-complex integrated endpoint (assignable, less isolated than a "
           "discrete endpoint)");
  } else if (*d.device_type == kLegacyEndpoint) {
    CheckLegacyEndpoint(a, c);
  } else if (*d.device_type == 5) {
    c.Fail("device.type", "the firmware kept control of PCI Express for this device (type 5)",
           "give Windows native PCI Express control in the firmware setup, or use another GPU");
  } else {
    c.Fail("device.type",
           "device type " + std::to_string(*d.device_type) +
               ": conventional PCI, PCI-X, a bridge or a port",
           "only PCI Express endpoints can be assigned: use another GPU");
  }
}

// What keeps an assigned device isolated: no reserved memory region, an ACS path to the root.
void CheckIsolationProperties(const PciAdapter& a, Checks& c) {
  const DdaProperties& d = a.dda;
  if (!d.requires_reserved_memory_region) {
    c.Fail("device.reserved_memory",
           "the snapshot does not say whether the device requires a reserved memory region",
           kRediscover);
  } else if (*d.requires_reserved_memory_region) {
    c.Fail("device.reserved_memory",
           "the firmware requires this device to stay attached to firmware-owned memory (a "
           "reserved memory region, RMRR): not assignable",
           "a firmware update or another slot may lift the requirement; otherwise use another GPU");
  } else {
    c.Pass("device.reserved_memory", "no reserved memory region (RMRR)");
  }
  static const char* const kAcs[] = {"not supported", "single function", "no peer-to-peer",
                                     "supported"};
  if (!d.acs_compatible_up_hierarchy) {
    c.Fail("device.acs", "the snapshot has no ACS-compatible-path-up property", kRediscover);
  } else if (*d.acs_compatible_up_hierarchy == 0) {
    c.Fail("device.acs",
           "no ACS-compatible path up to the root: its traffic could be redirected to other "
           "devices",
           "enable ACS in the firmware setup, or move the GPU to a slot whose switches and root "
           "port support ACS");
  } else if (*d.acs_compatible_up_hierarchy <= 3) {
    c.Pass("device.acs", std::string("ACS-compatible path up to the root (") +
                             kAcs[*d.acs_compatible_up_hierarchy] + ")");
  } else {
    c.Fail("device.acs",
           "unknown ACS-compatible-path-up value " + std::to_string(*d.acs_compatible_up_hierarchy),
           kRediscover);
  }
}

// Interrupts and MMIO: what the utility VM must give the device.
void CheckDeviceResources(const HyperVGpuPlan& plan, Checks& c) {
  const PciAdapter& a = plan.adapter;
  if (!a.interrupts) {
    c.Fail("device.interrupts",
           "the snapshot has no allocated interrupts for the device (it was disabled when "
           "discovery ran)",
           kRediscover);
  } else if (a.interrupts->message_signaled > 0) {
    c.Pass("device.interrupts",
           std::to_string(a.interrupts->message_signaled) + " message-signaled interrupt(s)");
  } else if (a.interrupts->line_based > 0) {
    c.Fail("device.interrupts", "line-based interrupts only: assignment cannot work",
           "use a GPU that uses MSI or MSI-X");
  } else {
    c.Pass("device.interrupts", "no interrupts allocated");
  }
  if (plan.mmio) {
    const MmioPlan& m = *plan.mmio;
    c.Pass("device.mmio", "MMIO " + std::to_string(m.below_4g_bytes >> 20) +
                              " MB below 4 GiB and " + std::to_string(m.above_4g_bytes >> 20) +
                              " MB above: gaps of " + std::to_string(m.low_gap_mb) +
                              " MB low and " + std::to_string(m.high_gap_mb) + " MB high at " +
                              std::to_string(m.high_base_mb) +
                              " MB, with the default 128/512 MB buffers");
  } else {
    c.Fail("device.mmio",
           "the snapshot has no memory ranges for the device: the MMIO gaps cannot be sized",
           kRediscover);
  }
}

// Dismounted from the host (or about to be), and its driver folder for the utility VM.
void CheckDeviceState(const HyperVGpuPlan& plan, Checks& c) {
  const PciAdapter& a = plan.adapter;
  if (a.problem_code != 0 && a.problem_code != kProblemDisabled) {
    c.Fail("device.dismounted",
           "the device node reports problem code " + std::to_string(a.problem_code),
           "look at the device in Device Manager; mount it back (Mount-VMHostAssignableDevice) "
           "and dismount it again");
  } else if (a.Dismounted()) {
    c.Pass("device.dismounted", "dismounted from the host: " + Excerpt(a.instance_id, 120));
  } else {
    c.Pass("device.dismounted",
           "not yet: the generated steps disable it and dismount it (Disable-PnpDevice, "
           "Dismount-VMHostAssignableDevice); it is then " +
               Excerpt(plan.assigned_instance_id, 120));
  }
  if (!plan.kernel_drivers.empty()) {
    c.Pass("driver.kernel_drivers",
           "the driver folder for the utility VM (pnputil installs it there): " +
               Excerpt(plan.kernel_drivers, 160));
  } else {
    c.Fail("driver.kernel_drivers", "the snapshot has no DriverStore folder for the GPU's driver",
           "pass --kernel-drivers DIR: the host folder of the GPU's driver package (.inf, .sys, "
           ".cat; pnputil /enum-drivers names it)");
  }
}

void CheckDevice(const HyperVGpuPlan& plan, Checks& c) {
  CheckDeviceType(plan.adapter, c);
  CheckIsolationProperties(plan.adapter, c);
  CheckDeviceResources(plan, c);
  CheckDeviceState(plan, c);
}

// containerd 1.7 or later passes CRI devices (IDType://ID) to hcsshim; returns whether it is.
bool CheckContainerdVersion(const std::optional<ContainerdHost>& cd, Checks& c) {
  std::vector<int> version = cd ? DottedNumbers(cd->version) : std::vector<int>{};
  bool new_enough = !version.empty() && AtLeast(version, kContainerdMinimum);
  if (!cd) {
    c.Fail("containerd.version", "containerd was not found",
           "install containerd 1.7 or later (it passes a CRI device IDType://ID to hcsshim)");
  } else if (version.empty()) {
    c.Fail("containerd.version", "containerd's version is unknown (" + Excerpt(cd->binary) + ")",
           "check `containerd --version`; 1.7 or later is needed");
  } else if (!new_enough) {
    c.Fail("containerd.version", "containerd " + Dotted(version) + " is older than 1.7",
           "upgrade containerd to 1.7 or later");
  } else {
    c.Pass("containerd.version",
           "containerd " + Dotted(version) + " passes CRI devices (IDType://ID) to hcsshim");
  }
  return new_enough;
}

// The runtime handler: declared in the config as runhcs with hypervisor isolation, or
// containerd's built-in one. Returns its pod annotation allow-list when it is known.
std::optional<std::vector<std::string>> CheckContainerdRuntime(
    const std::optional<ContainerdHost>& cd, const HyperVGpuPlan& plan, bool new_enough,
    Checks& c) {
  const std::string& handler = plan.runtime_handler;
  std::string table = "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes." + handler + "]";
  const ContainerdRuntime* declared = nullptr;
  if (cd && cd->config_state == ConfigState::kRead) {
    for (const ContainerdRuntime& r : cd->runtimes) {
      if (r.name == handler) declared = &r;
    }
  }
  if (!cd) {
    c.Fail("containerd.runtime", "no containerd, no runtime " + Excerpt(handler),
           "install containerd 1.7 or later");
  } else if (cd->config_state == ConfigState::kUnreadable ||
             cd->config_state == ConfigState::kInvalid) {
    c.Fail("containerd.runtime",
           std::string("containerd's config ") + Excerpt(cd->config_path) + " is " +
               ConfigStateName(cd->config_state) + ": the runtime " + Excerpt(handler) +
               " cannot be checked",
           "make the config readable by Administrators and valid TOML, then run discovery again");
  } else if (declared) {
    bool type_ok = declared->runtime_type == kRunhcsRuntimeType;
    bool isolation_ok = declared->sandbox_isolation == 1;
    if (type_ok && isolation_ok) {
      c.Pass("containerd.runtime",
             "the config declares " + Excerpt(handler) +
                 ": io.containerd.runhcs.v1, SandboxIsolation 1 (hypervisor)");
    } else {
      c.Fail("containerd.runtime",
             "the config declares " + Excerpt(handler) + " with runtime_type \"" +
                 Excerpt(declared->runtime_type) + "\" and SandboxIsolation " +
                 (declared->sandbox_isolation ? std::to_string(*declared->sandbox_isolation)
                                              : std::string("unset")),
             "set runtime_type = \"io.containerd.runhcs.v1\" and options.SandboxIsolation = 1 "
             "in " +
                 table);
    }
    return declared->pod_annotations;
  } else if (handler == kHyperVRuntimeHandler && new_enough) {
    c.Pass("containerd.runtime",
           "built in: containerd 1.7+ defines runhcs-wcow-hypervisor (io.containerd.runhcs.v1, "
           "SandboxIsolation 1) and the config does not redefine it");
    return std::vector<std::string>{kBuiltinPodAnnotations};
  } else {
    c.Fail("containerd.runtime",
           "containerd's config does not declare the runtime " + Excerpt(handler),
           "add " + table +
               " with runtime_type = \"io.containerd.runhcs.v1\", options.SandboxIsolation = 1 and "
               "pod_annotations = [\"io.microsoft.virtualmachine.*\"]");
  }
  return std::nullopt;
}

// The runtime's allow-list must pass every pod annotation of the plan to hcsshim.
void CheckPodAnnotations(const HyperVGpuPlan& plan,
                         const std::optional<std::vector<std::string>>& allow_list, Checks& c) {
  const std::string& handler = plan.runtime_handler;
  std::string table = "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes." + handler + "]";
  if (allow_list) {
    std::vector<std::string> dropped;
    for (const auto& [key, value] : plan.pod_annotations) {
      if (!AllowListPasses(*allow_list, key)) dropped.push_back(key);
    }
    if (dropped.empty()) {
      c.Pass("containerd.pod_annotations", "pod_annotations " + List(*allow_list) + " pass all " +
                                               std::to_string(plan.pod_annotations.size()) +
                                               " pod annotations to hcsshim");
    } else {
      c.Fail("containerd.pod_annotations",
             "pod_annotations " + List(*allow_list) + " drop " + List(dropped),
             "add pod_annotations = [\"io.microsoft.virtualmachine.*\"] to " + table +
                 " and restart containerd");
    }
  } else {
    c.Fail("containerd.pod_annotations",
           "the pod annotation allow-list of " + Excerpt(handler) + " is unknown",
           "see containerd.runtime");
  }
}

// hcsshim's shim, new enough for the kernel-driver annotation, with device-util.exe beside it.
void CheckHcsshim(const std::optional<ContainerdHost>& cd, const HyperVGpuPlan& plan, Checks& c) {
  if (!cd || cd->shim_path.empty()) {
    c.Fail("hcsshim.version", "containerd-shim-runhcs-v1.exe was not found",
           "install hcsshim's containerd-shim-runhcs-v1.exe beside containerd.exe");
  } else {
    std::vector<int> shim = DottedNumbers(cd->hcsshim_version);
    if (shim.empty()) {
      c.Fail("hcsshim.version", "the shim's version is unknown (" + Excerpt(cd->shim_path) + ")",
             "check `containerd-shim-runhcs-v1.exe --version`; hcsshim 0.9.0 or later is needed");
    } else if (!AtLeast(shim, kHcsshimMinimum)) {
      c.Fail("hcsshim.version",
             "hcsshim " + Dotted(shim) +
                 " reads io.microsoft.assigneddevice.kerneldrivers, not "
                 "io.microsoft.virtualmachine.kerneldrivers",
             "upgrade containerd-shim-runhcs-v1.exe to hcsshim 0.9.0 or later");
    } else {
      c.Pass("hcsshim.version", "hcsshim " + Dotted(shim) + " (containerd-shim-runhcs-v1.exe)");
    }
  }
  if (cd && cd->device_util_beside_shim) {
    c.Pass("hcsshim.device_util",
           "device-util.exe is beside the shim: hcsshim shares it into the utility VM to find the "
           "GPU's location path there");
  } else {
    c.Fail("hcsshim.device_util", "device-util.exe is not beside containerd-shim-runhcs-v1.exe",
           "build device-util.exe from hcsshim (cmd/device-util, the shim's version) and copy it "
           "to " +
               (plan.device_util_host_path.empty() ? std::string("the shim's folder")
                                                   : Excerpt(plan.device_util_host_path, 160)));
  }
}

void CheckContainerd(const Snapshot& s, const HyperVGpuPlan& plan, Checks& c) {
  const auto& cd = s.hyperv_facts->containerd;
  bool new_enough = CheckContainerdVersion(cd, c);
  auto allow_list = CheckContainerdRuntime(cd, plan, new_enough, c);
  CheckPodAnnotations(plan, allow_list, c);
  CheckHcsshim(cd, plan, c);
}

void CheckImage(const Snapshot& s, const ImageInfo& image, Checks& c) {
  CompatibilityRequest request;
  request.host_build = s.os.build;
  request.image = image;
  request.isolation = Isolation::kHyperV;
  CompatibilityVerdict verdict = CheckCompatibility(request);
  if (verdict.ok) {
    c.Pass("image.build", "image build " + std::to_string(image.build) +
                              " runs with Hyper-V isolation on host build " +
                              std::to_string(s.os.build) +
                              " (the utility VM boots the image's build)");
  } else {
    c.Fail("image.build", verdict.summary,
           "use an image for build " + std::to_string(s.os.build) + " or older");
  }
}

}  // namespace

const char* CheckStatusName(CheckStatus status) {
  return status == CheckStatus::kPass ? "PASS" : "FAIL";
}

bool HyperVGpuPreflight::Passes() const {
  return Failures() == 0;
}

size_t HyperVGpuPreflight::Failures() const {
  return std::count_if(checks.begin(), checks.end(),
                       [](const PreflightCheck& c) { return c.status == CheckStatus::kFail; });
}

HyperVGpuPreflight CheckHyperVGpu(const Snapshot& snapshot, const HyperVGpuPlan& plan,
                                  const ImageInfo& image) {
  HyperVGpuPreflight out;
  if (!snapshot.hyperv_facts) {
    out.checks.push_back({"snapshot.format", CheckStatus::kFail,
                          "the snapshot (format 1) records no Hyper-V facts",
                          "write a format-2 snapshot with tessera-windows-discover.exe"});
  } else {
    Checks c;
    CheckHost(snapshot, c);
    CheckDevice(plan, c);
    CheckContainerd(snapshot, plan, c);
    CheckImage(snapshot, image, c);
    out.checks = c.Take();
  }
  out.notes = {
      "Microsoft does not support GPUs in Hyper-V-isolated containers (\"GPU acceleration in "
      "Windows containers\", January 2025: \"not currently supported\"); this chain uses "
      "hcsshim's device assignment to the utility VM, which Microsoft tests but does not support",
      "a snapshot cannot show whether the image carries the GPU's user-mode driver (the "
      "DirectX/CUDA DLLs): kerneldrivers installs only the driver package in the utility VM",
      "a snapshot cannot show the utility VM booting with the GPU, pnputil installing the driver "
      "there, the location path device-util finds, or a workload running: only a real host "
      "proves those"};
  if (snapshot.hyperv_facts && !plan.adapter.Dismounted()) {
    out.notes.push_back(
        "dismounting takes the GPU away from the host until it is mounted back: nothing on the "
        "host (displays, process-isolated containers) can use it meanwhile");
  }
  return out;
}

// Every line is one printable line, whatever a detail quotes of the snapshot: the lines end up on
// terminals and in the comments of a PowerShell script, where a line break would start code.
std::vector<std::string> PreflightLines(const HyperVGpuPreflight& preflight) {
  constexpr size_t kLineBytes = 2000;
  std::vector<std::string> lines;
  for (const PreflightCheck& c : preflight.checks) {
    std::string line = std::string(CheckStatusName(c.status)) + " " + c.id + ": " + c.detail;
    if (!c.fix.empty()) line += "; fix: " + c.fix;
    lines.push_back(Excerpt(line, kLineBytes));
  }
  for (const std::string& note : preflight.notes)
    lines.push_back(Excerpt("NOTE " + note, kLineBytes));
  return lines;
}

}  // namespace tessera::windows
