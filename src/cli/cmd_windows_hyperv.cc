// `tessera windows hyperv-gpu` (the chain for a GPU in a Hyper-V-isolated container) and
// `tessera windows check-hyperv-gpu` (its preflight), plus what the windows commands share:
// loading a snapshot and turning refusals into exit 1.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
    std::fprintf(stderr, "tessera: %s\n", Excerpt(error.message, 2000).c_str());
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

std::vector<std::string> FailingLines(const win::HyperVGpuPreflight& preflight) {
  std::vector<std::string> out;
  for (const std::string& line : win::PreflightLines(preflight))
    if (line.starts_with("FAIL ")) out.push_back(line);
  return out;
}

// --force on a refused GPU: the script says at its top that the preflight failed and why, and
// stops at its first line until that line is deleted, so a saved copy cannot be run by mistake.
std::string MarkScript(const std::string& script, const win::HyperVGpuPreflight& preflight) {
  std::string out = "# PREFLIGHT FAILED: printed anyway (tessera windows hyperv-gpu --force). " +
                    std::to_string(preflight.Failures()) +
                    " check(s) fail; the chain will not work as generated until they are fixed:\n";
  for (const std::string& line : FailingLines(preflight))
    out += "#   " + line + "\n";
  out +=
      "throw 'tessera: the preflight failed for this GPU (see the comments above); delete this "
      "line to run the script anyway'\n";
  return out + script;
}

// --force on a refused GPU, JSON outputs: the document says so in a first member.
std::string MarkJson(const std::string& json, const win::HyperVGpuPreflight& preflight) {
  auto doc = nlohmann::ordered_json::parse(json);
  nlohmann::ordered_json marked = nlohmann::ordered_json::object();
  marked["tessera_preflight_failed"] = FailingLines(preflight);
  for (auto& [key, value] : doc.items())
    marked[key] = std::move(value);
  return marked.dump(2) + "\n";
}

std::string HyperVOutput(win::HyperVFormat fmt, const win::Snapshot& snapshot,
                         const win::HyperVGpuPlan& plan, const win::HyperVGpuPreflight& preflight) {
  switch (fmt) {
    case win::HyperVFormat::kCrictl:
      return win::CrictlScript(snapshot, plan);
    case win::HyperVFormat::kOci:
      return win::OciSpecJson(plan);
    case win::HyperVFormat::kHcs:
      return OrFailWindows(win::HcsDocumentsJson(snapshot, plan));
    case win::HyperVFormat::kJson:
      return win::HyperVGpuJson(snapshot, plan, preflight);
  }
  return "";
}

void AddHyperVGpu(CLI::App& windows) {
  auto* cmd = windows.add_subcommand(
      "hyperv-gpu",
      "Generate the CRI configs, OCI and HCS documents and PowerShell steps that give a "
      "Hyper-V-isolated container a GPU (unsupported by Microsoft; see check-hyperv-gpu)");
  static GenerationFlags flags;
  static std::string format = "crictl";
  static bool force = false;
  flags.Register(*cmd, true);
  cmd->add_option("--format", format, "crictl (PowerShell script), oci, hcs or json")
      ->check(CLI::IsMember({"crictl", "oci", "hcs", "json"}));
  cmd->add_flag("--force", force,
                "Print the chain even for a GPU the preflight refuses, marked as refused (the "
                "exit status stays 1)");
  cmd->callback([] {
    win::Snapshot snapshot = LoadWindowsSnapshot(flags.snapshot_path);
    win::HyperVFormat fmt = OrFailWindows(win::ParseHyperVFormat(format));
    win::HyperVGpuPlan plan = flags.Plan(snapshot);
    win::ImageInfo image = OrFailWindows(win::ParseImageReference(plan.image));
    win::HyperVGpuPreflight preflight = win::CheckHyperVGpu(snapshot, plan, image);
    if (preflight.Passes()) {
      std::fputs(HyperVOutput(fmt, snapshot, plan, preflight).c_str(), stdout);
      return;
    }
    // Refused: no dismount script and no container config to save and run, only the verdict
    // and the fixes, unless --force asks for the chain, which is then marked.
    if (force) {
      std::string out = HyperVOutput(fmt, snapshot, plan, preflight);
      if (fmt == win::HyperVFormat::kCrictl) {
        out = MarkScript(out, preflight);
      } else if (fmt != win::HyperVFormat::kJson) {  // json carries its preflight already
        out = MarkJson(out, preflight);
      }
      std::fputs(out.c_str(), stdout);
    }
    for (const std::string& line : FailingLines(preflight))
      std::fprintf(stderr, "%s\n", line.c_str());
    std::fprintf(stderr,
                 force ? "tessera: refused: %zu of %zu preflight checks fail for GPU %zu; the "
                         "chain above is printed only because of --force and will not work as "
                         "generated\n"
                       : "tessera: refused: %zu of %zu preflight checks fail for GPU %zu; no "
                         "dismount script or container config is printed (fix the checks above, "
                         "or --force to print them anyway, marked; tessera windows "
                         "check-hyperv-gpu lists every check)\n",
                 preflight.Failures(), preflight.checks.size(), plan.adapter_index);
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
                Excerpt(plan.adapter.description).c_str(), Excerpt(plan.location_path, 200).c_str(),
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
