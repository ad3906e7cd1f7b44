// `tessera windows hyperv-gpu` (the chain for a GPU in a Hyper-V-isolated container) and
// `tessera windows check-hyperv-gpu` (its preflight), plus what the windows commands share:
// loading a snapshot and turning refusals into exit 1.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/windows_cli.h"
#include "common/bounded_file.h"
#include "common/untrusted_text.h"

namespace tessera::cli {

namespace win = tessera::windows;

win::Snapshot LoadWindowsSnapshot(const std::string& path) {
  auto text = ReadBoundedFile(path, kMaxConfigFileBytes);
  if (!text.ok()) Fail(text.error().WithContext("read snapshot " + path));
  auto snapshot = win::ParseSnapshot(*text);
  if (!snapshot.ok()) Fail(snapshot.error().WithContext(path));
  return std::move(*snapshot);
}

void FailWindows(const Error& error) {
  if (error.category == ErrorCategory::kFailedPrecondition) {
    std::fprintf(stderr, "tessera: %s\n", error.message.c_str());
    throw CLI::RuntimeError(1);
  }
  Fail(error);
}

namespace {

// The selector, or the only GPU that is dismounted or can be.
std::string Selector(const win::Snapshot& snapshot, const std::string& selector) {
  if (!selector.empty()) return selector;
  return std::to_string(OrFailWindows(win::SoleGpuCandidate(snapshot)));
}

// The options both commands take, registered on each.
struct GenerationFlags {
  std::string snapshot_path;
  std::string gpu;
  std::string image;
  uint32_t image_build = 0;
  win::HyperVGpuOptions options;

  void Register(CLI::App& cmd, bool gpu_required) {
    cmd.add_option("--snapshot", snapshot_path, "Windows host snapshot (format 2)")->required();
    auto* gpu_opt = cmd.add_option("--gpu", gpu,
                                   "The GPU: a PCI location path or an index into "
                                   "the snapshot's pci_adapters");
    if (gpu_required) gpu_opt->required();
    cmd.add_option("--image", image,
                   "Container image (default: the servercore LTSC image the host build runs)");
    cmd.add_option("--memory-mb", options.memory_mb,
                   "Utility VM memory in MB, all of it committed at start (default 4096)");
    cmd.add_option("--kernel-drivers", options.kernel_drivers,
                   "Driver folder for the utility VM (default: the GPU's DriverStore folder)");
    cmd.add_option("--runtime-handler", options.runtime_handler,
                   "containerd runtime handler (default runhcs-wcow-hypervisor)");
  }

  // The plan for --gpu (or the only candidate without it) with the other flags.
  win::HyperVGpuPlan Plan(const win::Snapshot& snapshot) {
    options.image = image;
    return OrFailWindows(win::PlanHyperVGpu(snapshot, Selector(snapshot, gpu), options));
  }
};

void AddHyperVGpu(CLI::App& windows) {
  auto* cmd = windows.add_subcommand(
      "hyperv-gpu",
      "Generate the CRI configs, OCI and HCS documents and PowerShell steps that give a "
      "Hyper-V-isolated container a GPU (unsupported by Microsoft; see check-hyperv-gpu)");
  static GenerationFlags flags;
  static std::string format = "crictl";
  flags.Register(*cmd, true);
  cmd->add_option("--format", format, "crictl (PowerShell script), oci, hcs or json")
      ->check(CLI::IsMember({"crictl", "oci", "hcs", "json"}));
  cmd->callback([] {
    win::Snapshot snapshot = LoadWindowsSnapshot(flags.snapshot_path);
    win::HyperVFormat fmt = OrFailWindows(win::ParseHyperVFormat(format));
    win::HyperVGpuPlan plan = flags.Plan(snapshot);
    win::ImageInfo image = OrFailWindows(win::ParseImageReference(plan.image));
    win::HyperVGpuPreflight preflight = win::CheckHyperVGpu(snapshot, plan, image);
    std::string out;
    switch (fmt) {
      case win::HyperVFormat::kCrictl:
        out = win::CrictlScript(snapshot, plan);
        break;
      case win::HyperVFormat::kOci:
        out = win::OciSpecJson(plan);
        break;
      case win::HyperVFormat::kHcs:
        out = OrFailWindows(win::HcsDocumentsJson(snapshot, plan));
        break;
      case win::HyperVFormat::kJson:
        out = win::HyperVGpuJson(snapshot, plan, preflight);
        break;
    }
    std::fputs(out.c_str(), stdout);
    if (preflight.Passes()) return;
    // The documents are printed for inspection; the exit status says they will not work as is.
    for (const std::string& line : win::PreflightLines(preflight))
      if (line.starts_with("FAIL ")) std::fprintf(stderr, "%s\n", line.c_str());
    std::fprintf(stderr,
                 "tessera: %zu preflight check(s) fail: the chain will not work as generated "
                 "(tessera windows check-hyperv-gpu lists every check)\n",
                 preflight.Failures());
    throw CLI::RuntimeError(1);
  });
}

void AddCheckHyperVGpu(CLI::App& windows) {
  auto* cmd = windows.add_subcommand(
      "check-hyperv-gpu",
      "Check every link of the chain that gives a Hyper-V-isolated container a GPU, from a "
      "snapshot: one line per check, pass or fail with the fix");
  static GenerationFlags flags;
  flags.Register(*cmd, false);
  auto* build_opt = cmd->add_option("--image-build", flags.image_build,
                                    "The image's Windows build (instead of --image)");
  build_opt->excludes(cmd->get_option("--image"));
  cmd->callback([build_opt] {
    win::Snapshot snapshot = LoadWindowsSnapshot(flags.snapshot_path);
    win::HyperVGpuPlan plan = flags.Plan(snapshot);
    win::ImageInfo image;
    if (build_opt->count() > 0) {
      image.build = flags.image_build;
    } else {
      image = OrFailWindows(win::ParseImageReference(plan.image));
    }
    win::HyperVGpuPreflight preflight = win::CheckHyperVGpu(snapshot, plan, image);
    std::printf("GPU %zu: %s at %s (%s)\n", plan.adapter_index,
                Excerpt(plan.adapter.description).c_str(), plan.location_path.c_str(),
                Excerpt(plan.adapter.instance_id, 200).c_str());
    for (const std::string& line : win::PreflightLines(preflight))
      std::printf("%s\n", line.c_str());
    if (preflight.Passes()) {
      std::printf("verdict: every check passes; tessera windows hyperv-gpu generates the chain\n");
      return;
    }
    std::printf("verdict: refused: %zu of %zu checks fail\n", preflight.Failures(),
                preflight.checks.size());
    throw CLI::RuntimeError(1);
  });
}

}  // namespace

win::HyperVGpuPreflight HyperVGpuPreflightFor(const win::Snapshot& snapshot,
                                              const std::string& selector,
                                              const win::ImageInfo& image) {
  win::HyperVGpuPlan plan = OrFailWindows(
      win::PlanHyperVGpu(snapshot, Selector(snapshot, selector), win::HyperVGpuOptions{}));
  return win::CheckHyperVGpu(snapshot, plan, image);
}

void AddHyperVGpuCommands(CLI::App& windows) {
  AddHyperVGpu(windows);
  AddCheckHyperVGpu(windows);
}

}  // namespace tessera::cli
