// A GPU for a Hyper-V-isolated Windows container: the whole chain generated from a snapshot
// (format 2), and the preflight that says which link blocks it.
//
// The chain: the GPU dismounted from the host (Discrete Device Assignment, PCIP\...) -> a CRI pod
// for the runtime handler runhcs-wcow-hypervisor whose annotations make the utility VM physically
// backed, size its MMIO gaps and name the driver folder -> containerd (>= 1.7) passes the
// io.microsoft.virtualmachine.* pod annotations and the container's vpci-instance-id:// device to
// hcsshim -> hcsshim assigns the device to the utility VM (an HCS VirtualPci modify request),
// installs the driver there with pnputil, finds the device's location path inside the VM with
// device-util.exe and assigns it to the container (AssignedDevices). Microsoft does not support
// this path; docs/windows-containers.md ("Hyper-V isolation") says which link tessera generates,
// which it checks and which only a real host can prove.
//
// Pure logic over a snapshot, like the rest of the module (windows/windows.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "windows/snapshot.h"
#include "windows/windows.h"

namespace tessera::windows {

inline constexpr const char* kHyperVRuntimeHandler = "runhcs-wcow-hypervisor";

// The pod annotations hcsshim reads when it creates the utility VM (pkg/annotations).
inline constexpr const char* kAnnotationFullyPhysicallyBacked =
    "io.microsoft.virtualmachine.fullyphysicallybacked";
inline constexpr const char* kAnnotationMemorySizeInMb =
    "io.microsoft.virtualmachine.computetopology.memory.sizeinmb";
inline constexpr const char* kAnnotationLowMmioGapInMb =
    "io.microsoft.virtualmachine.computetopology.memory.lowmmiogapinmb";
inline constexpr const char* kAnnotationHighMmioBaseInMb =
    "io.microsoft.virtualmachine.computetopology.memory.highmmiobaseinmb";
inline constexpr const char* kAnnotationHighMmioGapInMb =
    "io.microsoft.virtualmachine.computetopology.memory.highmmiogapinmb";
inline constexpr const char* kAnnotationKernelDrivers = "io.microsoft.virtualmachine.kerneldrivers";

// ---------------------------------------------------------------------------------------------
// Choosing the GPU

// --gpu LOCATION|INDEX: a PCI location path (either its PCIROOT form or any of the adapter's
// paths) or an index into the snapshot's pci_adapters. FailedPrecondition for a format-1 snapshot
// (no PCI adapters recorded), NotFound for an unknown selector.
Result<size_t> FindPciAdapter(const Snapshot& snapshot, const std::string& selector);
// The only adapter that is dismounted or can be: for `check-image --gpu` without a selector.
Result<size_t> SoleGpuCandidate(const Snapshot& snapshot);

// ---------------------------------------------------------------------------------------------
// MMIO sizing

// Microsoft's rule for Discrete Device Assignment (Plan for Deploying Devices using DDA, "MMIO
// Space"): a VM's MMIO gap must hold the MMIO of every assigned device plus a buffer for its other
// virtual devices, the default gaps: 128 MB low (below 4 GiB) and 512 MB high.
inline constexpr uint64_t kDefaultLowMmioGapMb = 128;
inline constexpr uint64_t kDefaultHighMmioGapMb = 512;

struct MmioPlan {
  uint64_t below_4g_bytes = 0;  // ranges the host placed below 4 GiB (32-bit BARs among them)
  uint64_t above_4g_bytes = 0;
  uint64_t largest_above_4g_bytes = 0;
  uint64_t low_gap_mb = 0;    // kDefaultLowMmioGapMb + below 4 GiB, rounded up to MB
  uint64_t high_base_mb = 0;  // above the VM's memory, aligned to the largest high range
  uint64_t high_gap_mb = 0;   // kDefaultHighMmioGapMb + above 4 GiB, rounded up to MB
  friend bool operator==(const MmioPlan&, const MmioPlan&) = default;
};
// InvalidArgument when there is nothing to size (no ranges) or the memory size is 0 or larger
// than the guest can address.
Result<MmioPlan> PlanMmio(const std::vector<MemoryRange>& ranges, uint64_t memory_mb);

// ---------------------------------------------------------------------------------------------
// What to generate

struct HyperVGpuOptions {
  std::string image;          // "" -> the servercore LTSC image the host build runs
  uint64_t memory_mb = 4096;  // the utility VM's memory (all of it committed at start)
  std::string runtime_handler = kHyperVRuntimeHandler;
  std::string kernel_drivers;  // "" -> the GPU's DriverStore folder from the snapshot
  std::string pod_name = "tessera-hyperv-gpu";
  std::string container_name = "gpu";
};

// The servercore image for the newest LTSC build the host runs (ltsc2019, ltsc2022, ltsc2025).
std::string DefaultHyperVImage(uint32_t host_build);

struct HyperVGpuPlan {
  size_t adapter_index = 0;
  PciAdapter adapter;
  std::string location_path;         // the PCIROOT path Dismount-VMHostAssignableDevice takes
  std::string assigned_instance_id;  // PCIP\... (predicted from PCI\... when not yet dismounted)
  std::string device_string;         // vpci-instance-id://PCIP\...
  std::string image;
  std::string runtime_handler;
  std::string pod_name;
  std::string container_name;
  uint64_t memory_mb = 0;
  std::optional<MmioPlan> mmio;       // nullopt when the snapshot has no memory ranges
  std::string kernel_drivers;         // "" when unknown
  std::string device_util_host_path;  // device-util.exe beside the shim; "" when unknown
  std::map<std::string, std::string> pod_annotations;
  std::vector<std::string> dismount_steps;   // PowerShell; empty when already dismounted
  std::vector<std::string> give_back_steps;  // PowerShell
};
// Errors only when nothing sensible can be generated: a format-1 snapshot, an unknown selector,
// an adapter without a PCIROOT location path, an invalid image reference.
Result<HyperVGpuPlan> PlanHyperVGpu(const Snapshot& snapshot, const std::string& selector,
                                    const HyperVGpuOptions& options);

// ---------------------------------------------------------------------------------------------
// Preflight

enum class CheckStatus { kPass, kFail };
const char* CheckStatusName(CheckStatus status);  // "PASS" | "FAIL"

struct PreflightCheck {
  std::string id;  // stable: "host.build", "device.acs", "containerd.pod_annotations", ...
  CheckStatus status = CheckStatus::kFail;
  std::string detail;  // what the snapshot shows
  std::string fix;     // empty when it passes
};
struct HyperVGpuPreflight {
  std::vector<PreflightCheck> checks;
  std::vector<std::string> notes;  // always printed: support status, what a snapshot cannot show
  bool Passes() const;
  size_t Failures() const;
};
// Every check of docs/windows-containers.md ("Preflight"), in a fixed order, against the plan's
// adapter, the snapshot's host facts and the image.
HyperVGpuPreflight CheckHyperVGpu(const Snapshot& snapshot, const HyperVGpuPlan& plan,
                                  const ImageInfo& image);
// One line per check ("PASS host.build: ..." / "FAIL ...: ...; fix: ..."), then "NOTE ..." lines.
std::vector<std::string> PreflightLines(const HyperVGpuPreflight& preflight);

// ---------------------------------------------------------------------------------------------
// Outputs

// A PowerShell single-quoted literal: nothing inside is expanded; a quote is doubled.
std::string PowerShellLiteral(const std::string& text);

enum class HyperVFormat { kCrictl, kOci, kHcs, kJson };
Result<HyperVFormat> ParseHyperVFormat(const std::string& text);

// CRI runtime.v1 PodSandboxConfig and ContainerConfig as JSON with the proto field names, which
// is what `crictl runp` / `crictl create` read.
std::string CriPodSandboxConfigJson(const HyperVGpuPlan& plan);
std::string CriContainerConfigJson(const HyperVGpuPlan& plan);
// A PowerShell script: dismount (when needed), write pod.json and container.json, crictl runp /
// create / start / exec device-util obj-dir, and the steps that give the GPU back, commented.
std::string CrictlScript(const Snapshot& snapshot, const HyperVGpuPlan& plan);
// The OCI runtime-spec fields containerd derives for the sandbox and the container:
// {"sandbox": {annotations, windows.hyperv}, "container": {annotations, mounts, windows.devices,
// windows.hyperv}}.
std::string OciSpecJson(const HyperVGpuPlan& plan);
// The HCS documents hcsshim sends, as far as a snapshot predicts them: the utility VM's memory
// settings, the VirtualPci modify request and the container's AssignedDevices, gated by the host's
// HCS schema (VirtualPci needs 2.3, a LocationPath device 2.2; PropagateNumaAffinity from build
// 26100). FailedPrecondition below schema 2.3.
Result<std::string> HcsDocumentsJson(const Snapshot& snapshot, const HyperVGpuPlan& plan);
// The GUID of the VirtualPci resource path. hcsshim draws a random one per assignment; tessera
// derives one from the instance ID (RFC 9562 version 8, FNV-1a) so its output is reproducible.
std::string VmBusGuidFor(const std::string& instance_id);
// Everything above in one JSON document, with the preflight.
std::string HyperVGpuJson(const Snapshot& snapshot, const HyperVGpuPlan& plan,
                          const HyperVGpuPreflight& preflight);

}  // namespace tessera::windows
