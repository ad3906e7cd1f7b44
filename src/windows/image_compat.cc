// Which container image builds run on which host build, per isolation mode, and what a GPU adds.
#include <algorithm>
#include <cctype>

#include "windows/hyperv.h"
#include "windows/text.h"
#include "windows/windows.h"

namespace tessera::windows {
namespace {

using text::Lower;

struct TagRow {
  const char* tag;
  uint32_t build;
};
// Windows base image tags on mcr.microsoft.com and the builds they carry.
constexpr TagRow kTags[] = {
    {"ltsc2016", 14393}, {"1607", 14393}, {"1709", 16299},     {"1803", 17134},
    {"ltsc2019", 17763}, {"1809", 17763}, {"1903", 18362},     {"1909", 18363},
    {"2004", 19041},     {"20h2", 19042}, {"ltsc2022", 20348}, {"ltsc2025", 26100},
};

// Long-term servicing builds. From 20348 a host runs process-isolated images from the previous
// LTSC up to its own build.
constexpr uint32_t kLtscBuilds[] = {14393, 17763, 20348, 26100};
constexpr uint32_t kFlexibleFrom = 20348;
constexpr uint32_t kGpuProcessFrom = 17763;     // GPU acceleration in containers: WS2019 / 1809
constexpr uint32_t kGpuHyperVFrom = 19041;      // VPCI assignment with a Windows utility VM
constexpr uint32_t kServercoreGpuFrom = 26100;  // servercore carries the DirectX compute runtime

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() <= 9 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "10.0.20348" or "10.0.20348.2849" → 20348.
std::optional<uint32_t> BuildFromVersion(const std::string& token) {
  if (token.rfind("10.0.", 0) != 0) return std::nullopt;
  std::string rest = token.substr(5);
  size_t dot = rest.find('.');
  std::string build = rest.substr(0, dot);
  if (!AllDigits(build)) return std::nullopt;
  if (dot != std::string::npos && !AllDigits(rest.substr(dot + 1))) return std::nullopt;
  return static_cast<uint32_t>(std::stoul(build));
}

std::string BaseFromName(const std::string& name) {
  for (const char* base : {"servercore", "nanoserver", "server", "windows"}) {
    if (name == base) return base;
  }
  if (name == "windowsservercore") return "servercore";
  return "";
}

std::string Range(uint32_t low, uint32_t high) {
  return low == high ? "exactly " + std::to_string(low)
                     : "between " + std::to_string(low) + " and " + std::to_string(high);
}

// The preflight decides: every check must pass.
CompatibilityVerdict HyperVGpuVerdict(const CompatibilityRequest& r,
                                      const HyperVGpuPreflight& preflight) {
  CompatibilityVerdict v;
  v.details = PreflightLines(preflight);
  if (!preflight.Passes()) {
    v.summary = "GPU with Hyper-V isolation is refused: " + std::to_string(preflight.Failures()) +
                " of " + std::to_string(preflight.checks.size()) + " preflight checks fail";
    return v;
  }
  v.ok = true;
  v.summary = "ok: image build " + std::to_string(r.image.build) + " runs on host build " +
              std::to_string(r.host_build) +
              " with hyperv isolation and an assigned GPU (every preflight check passes; "
              "Microsoft does not support this path)";
  return v;
}

// Process isolation shares the host kernel: the image must be of a build the host accepts. Fills
// `v` and returns true when it is not.
bool ProcessIsolationRefuses(uint32_t host, uint32_t image, CompatibilityVerdict& v) {
  uint32_t low = host;
  if (host >= kFlexibleFrom) {
    low = kFlexibleFrom;
    for (uint32_t ltsc : kLtscBuilds) {
      if (ltsc < host) low = std::max(low, ltsc);
    }
  }
  if (image < low) {
    v.summary = "process isolation on host build " + std::to_string(host) +
                " needs an image build " + Range(low, host) + "; image build " +
                std::to_string(image) + " fails with 0xc0370101";
    v.details.push_back(
        "0xc0370101: \"The container operating system does not match the host operating "
        "system\": a process-isolated container shares the host kernel, so its user mode must "
        "come from a compatible build");
    if (host < kFlexibleFrom) {
      v.details.push_back(
          "hosts before build 20348 (Windows Server 2022) accept only their own "
          "build; from 20348 a host accepts images from the previous LTSC up to "
          "its own build");
    }
    v.details.push_back("use an image for build " + std::to_string(host) +
                        " or Hyper-V isolation (--isolation hyperv), which runs older images");
    return true;
  }
  return false;
}

// A GPU in a Hyper-V-isolated container cannot be judged without the host's facts: what the
// preflight would need.
CompatibilityVerdict HyperVGpuWithoutFacts(uint32_t host) {
  CompatibilityVerdict v;
  v.summary =
      "GPU with Hyper-V isolation is refused without the host's facts: pass --snapshot FILE "
      "(a format-2 snapshot) to run the preflight";
  v.details = {
      "Microsoft does not support GPUs in Hyper-V-isolated containers; hcsshim can assign a "
      "whole GPU to the container's utility VM (Discrete Device Assignment, no sharing)",
      "host build " + std::to_string(kGpuHyperVFrom) +
          " or later (this host: " + std::to_string(host) +
          "), IOMMU and ACS, and a GPU that can be assigned: no "
          "reserved memory region, an ACS-compatible path up, a PCI Express endpoint, MSI "
          "interrupts",
      "the GPU dismounted from the host (Dismount-VMHostAssignableDevice), so that it "
      "appears as PCIP\\... and is passed as vpci-instance-id://PCIP\\...",
      "pod annotations io.microsoft.virtualmachine.fullyphysicallybacked=true, MMIO gaps "
      "sized from the GPU's BARs and io.microsoft.virtualmachine.kerneldrivers=<the driver "
      "folder>, passed on by containerd 1.7+ (runtime handler runhcs-wcow-hypervisor), and "
      "device-util.exe beside containerd-shim-runhcs-v1.exe",
      "tessera windows hyperv-gpu generates the chain and tessera windows check-hyperv-gpu "
      "checks it; process isolation shares GPUs with containers through DirectX instead"};
  return v;
}

// GPU workloads need the DirectX runtime of the base image.
void WarnAboutGpuBase(const CompatibilityRequest& r, uint32_t host, CompatibilityVerdict& v) {
  if (r.image.base == "servercore") {
    v.warnings.push_back(
        "Microsoft documents GPU acceleration only for the full `windows` base image "
        "(mcr.microsoft.com/windows, or mcr.microsoft.com/windows/server from ltsc2022); "
        "servercore works for DirectX compute and CUDA on Windows Server 2025 (build 26100)" +
        std::string(host < kServercoreGpuFrom ? "; this host is build " + std::to_string(host) +
                                                    ", so expect missing DirectX components"
                                              : ""));
  } else if (r.image.base == "nanoserver") {
    v.warnings.push_back(
        "nanoserver carries no DirectX runtime: GPU workloads will not load; "
        "use the `windows` (or `server`) base image");
  }
}

}  // namespace

std::optional<uint32_t> BuildForTag(const std::string& tag) {
  std::string t = Lower(tag);
  for (const TagRow& row : kTags) {
    if (t == row.tag) return row.build;
  }
  return BuildFromVersion(t);
}

Result<ImageInfo> ParseImageReference(const std::string& reference) {
  if (reference.empty()) return InvalidArgument("image reference is empty");
  std::string ref = reference;
  size_t at = ref.find('@');
  bool digest = at != std::string::npos;
  if (digest) ref = ref.substr(0, at);
  size_t slash = ref.rfind('/');
  size_t colon = ref.rfind(':');
  std::string name = ref;
  std::string tag;
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
    name = ref.substr(0, colon);
    tag = ref.substr(colon + 1);
  }
  std::string last =
      Lower(name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1));
  ImageInfo info;
  info.base = BaseFromName(last);
  if (tag.empty()) {
    return InvalidArgument("image \"" + reference + "\" has " +
                           (digest ? std::string("only a digest") : std::string("no tag")) +
                           ", which names no Windows build: pass --image-build N or a tag such as "
                           "ltsc2022");
  }
  // Tags such as "4.8-windowsservercore-ltsc2022" or "ltsc2022-amd64": look at each token.
  std::optional<uint32_t> build = BuildForTag(tag);
  size_t start = 0;
  std::string lower_tag = Lower(tag);
  while (!build && start <= lower_tag.size()) {
    size_t end = lower_tag.find('-', start);
    if (end == std::string::npos) end = lower_tag.size();
    std::string token = lower_tag.substr(start, end - start);
    build = BuildForTag(token);
    if (info.base.empty()) info.base = BaseFromName(token);
    start = end + 1;
  }
  if (info.base.empty()) {
    for (const char* token : {"windowsservercore", "servercore", "nanoserver"}) {
      if (lower_tag.find(token) != std::string::npos) info.base = BaseFromName(token);
    }
  }
  if (!build) {
    return InvalidArgument("image tag \"" + tag +
                           "\" names no known Windows build (known: ltsc2016, 1709, 1803, "
                           "ltsc2019/1809, 1903, 1909, 2004, 20H2, ltsc2022, ltsc2025, "
                           "10.0.BUILD[.UBR]): pass --image-build N");
  }
  info.build = *build;
  return info;
}

CompatibilityVerdict CheckCompatibility(const CompatibilityRequest& r) {
  CompatibilityVerdict v;
  const uint32_t host = r.host_build;
  const uint32_t image = r.image.build;
  const std::string mode = IsolationName(r.isolation);
  if (image > host) {
    v.summary = "image build " + std::to_string(image) + " is newer than host build " +
                std::to_string(host) + ": Windows never runs a newer image, in any isolation mode";
    return v;
  }
  if (r.isolation == Isolation::kProcess && ProcessIsolationRefuses(host, image, v)) return v;
  if (r.gpu) {
    if (r.isolation == Isolation::kHyperV) {
      if (r.hyperv_gpu_preflight != nullptr) return HyperVGpuVerdict(r, *r.hyperv_gpu_preflight);
      return HyperVGpuWithoutFacts(host);
    }
    if (host < kGpuProcessFrom) {
      v.summary = "GPU acceleration in Windows containers needs host build " +
                  std::to_string(kGpuProcessFrom) + " (Windows Server 2019) or later; host is " +
                  std::to_string(host);
      return v;
    }
    WarnAboutGpuBase(r, host, v);
  }
  v.ok = true;
  v.summary = "ok: image build " + std::to_string(image) + " runs on host build " +
              std::to_string(host) + " with " + mode + " isolation" +
              (r.gpu ? std::string(" and a GPU") : std::string());
  return v;
}

}  // namespace tessera::windows
