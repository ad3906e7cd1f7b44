// `tessera windows ...`: Windows containers from a host snapshot (inventory, HCS device
// documents, gen-device-mounts, image compatibility). Hyper-V isolation with a GPU is in
// cmd_windows_hyperv.cc.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/windows_cli.h"
#include "windows/windows.h"

namespace tessera::cli {
namespace {

namespace win = tessera::windows;

void PrintDiagnostics(const std::vector<std::string>& lines) {
  for (const std::string& line : lines)
    std::fprintf(stderr, "%s\n", line.c_str());
}

// One line for humans: arguments with spaces or quotes are double-quoted.
std::string CommandLine(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& arg : argv) {
    if (!out.empty()) out += ' ';
    if (arg.empty() || arg.find_first_of(" \t\"'") != std::string::npos) {
      std::string quoted = "\"";
      for (char c : arg) {
        if (c == '"' || c == '\\') quoted += '\\';
        quoted += c;
      }
      out += quoted + "\"";
    } else {
      out += arg;
    }
  }
  return out;
}

void AddInventory(CLI::App& windows) {
  auto* cmd = windows.add_subcommand("inventory",
                                     "Print a Windows host snapshot in the inventory JSON shape");
  static std::string snapshot_path;
  cmd->add_option("--snapshot", snapshot_path, "Windows host snapshot (JSON)")->required();
  cmd->callback([] {
    win::Snapshot s = LoadWindowsSnapshot(snapshot_path);
    std::fputs(win::InventoryJson(s).c_str(), stdout);
  });
}

void AddHcsDevice(CLI::App& windows) {
  auto* cmd = windows.add_subcommand(
      "hcs-device", "Print the HCS schema Device document for a device string, or the refusal");
  static uint32_t build = 0;
  static std::string snapshot_path;
  static std::string device;
  static std::string isolation = "process";
  auto* build_opt = cmd->add_option("--build", build, "Host Windows build (e.g. 20348)");
  auto* snap_opt =
      cmd->add_option("--snapshot", snapshot_path, "Take the HCS schema from a host snapshot");
  build_opt->excludes(snap_opt);
  cmd->add_option("--device", device, "class/GUID, TYPE://ID")->required();
  cmd->add_option("--isolation", isolation, "process or hyperv")
      ->check(CLI::IsMember({"process", "hyperv"}));
  cmd->callback([build_opt, snap_opt] {
    if (build_opt->count() == 0 && snap_opt->count() == 0) {
      Fail(InvalidArgument("hcs-device needs --build N or --snapshot FILE"));
    }
    win::SchemaVersion schema;
    if (snap_opt->count() > 0) {
      schema = LoadWindowsSnapshot(snapshot_path).MaxSchemaVersion();
    } else {
      auto from_build = win::HcsSchemaForBuild(build);
      if (from_build.ok()) schema = *from_build;
    }
    win::DeviceRef ref = OrFailWindows(win::ParseDeviceString(device));
    win::Isolation iso = OrFailWindows(win::ParseIsolation(isolation));
    std::string doc = OrFailWindows(win::HcsDeviceJson(ref, schema, iso));
    std::printf("%s\n", doc.c_str());
  });
}

// `windows mounts` flags (kept for the process's life, as CLI11 writes them at parse time).
struct MountsFlags {
  std::string snapshot_path;
  bool all = false;
  std::vector<int> indexes;
  std::vector<std::string> luids;
  std::vector<std::string> paths;
  std::string format;
  std::vector<std::string> vendor_files;
  bool no_vendor_files = false;
  std::string run_image;
  std::string container_id = "tessera-gpu";
};

// Adds the flags; returns --run, whose presence decides whether the command runs.
CLI::Option* AddMountsFlags(CLI::App* cmd, MountsFlags& flags) {
  cmd->add_option("--snapshot", flags.snapshot_path, "Windows host snapshot (JSON)")->required();
  auto* all_opt = cmd->add_flag("--all", flags.all, "Every adapter");
  auto* index_opt =
      cmd->add_option("--index", flags.indexes, "Adapter indexes in the snapshot (I,...)")
          ->delimiter(',');
  auto* luid_opt =
      cmd->add_option("--luid", flags.luids, "Adapter LUIDs in hex (L,...)")->delimiter(',');
  auto* path_opt =
      cmd->add_option("--path", flags.paths, "PCI location paths (P,...)")->delimiter(',');
  all_opt->excludes(index_opt, luid_opt, path_opt);
  index_opt->excludes(luid_opt, path_opt);
  luid_opt->excludes(path_opt);
  cmd->add_option("--format", flags.format, "ctr, nerdctl, docker or json")
      ->required()
      ->check(CLI::IsMember({"ctr", "nerdctl", "docker", "json"}));
  cmd->add_option("--vendor-file", flags.vendor_files,
                  "Extra DriverStore file for a PCI vendor, VENDOR=FILE (replaces the defaults "
                  "for that vendor; default 10de=nvidia-smi.exe)");
  cmd->add_flag("--no-vendor-files", flags.no_vendor_files, "Mount no per-vendor extra files");
  auto* run_opt = cmd->add_option("--run", flags.run_image,
                                  "Print, then execute the runtime's run command for IMAGE; "
                                  "arguments after IMAGE are the container's command");
  cmd->add_option("--name", flags.container_id, "Container ID for ctr run (default tessera-gpu)");
  return run_opt;
}

win::MountsOptions MountsOptionsFrom(const MountsFlags& flags) {
  win::MountsOptions options;
  options.format = OrFailWindows(win::ParseMountFormat(flags.format));
  options.selection.all = flags.all;
  options.selection.indexes = flags.indexes;
  for (const std::string& l : flags.luids)
    options.selection.luids.push_back(OrFailWindows(win::ParseLuid(l)));
  options.selection.location_paths = flags.paths;
  if (!flags.all && flags.indexes.empty() && flags.luids.empty() && flags.paths.empty()) {
    Fail(InvalidArgument("mounts needs one of --all, --index, --luid, --path"));
  }
  if (flags.no_vendor_files) options.vendor_files.clear();
  win::VendorFiles replaced;
  for (const std::string& v : flags.vendor_files) {
    auto [vendor, file] = OrFailWindows(win::ParseVendorFile(v));
    replaced[vendor].push_back(file);
  }
  for (auto& [vendor, files] : replaced)
    options.vendor_files[vendor] = files;
  return options;
}

// Prints the runtime's run command for the plan, then becomes it; returns only by failing.
void ExecMountsRun(const MountsFlags& flags, const win::MountsOptions& options,
                   const win::MountsPlan& plan, const std::vector<std::string>& command) {
  std::vector<std::string> argv = OrFailWindows(
      win::RunCommand(options.format, plan, flags.run_image, command, flags.container_id));
  std::printf("%s\n", CommandLine(argv).c_str());
  std::fflush(stdout);
  std::vector<char*> cargv;
  for (std::string& a : argv)
    cargv.push_back(a.data());
  cargv.push_back(nullptr);
  execvp(cargv[0], cargv.data());
  Fail(Unavailable("run " + argv[0] + ": " + std::strerror(errno)));
}

void RunMounts(const MountsFlags& flags, bool run, const std::vector<std::string>& command) {
  win::Snapshot s = LoadWindowsSnapshot(flags.snapshot_path);
  win::MountsOptions options = MountsOptionsFrom(flags);
  if (!command.empty() && !run) {
    Fail(InvalidArgument("unexpected arguments (a container command needs --run IMAGE first)"));
  }
  win::MountsPlan plan = OrFailWindows(win::PlanMounts(s, options));
  PrintDiagnostics(plan.diagnostics);
  if (run) ExecMountsRun(flags, options, plan, command);
  if (options.format == win::MountFormat::kJson) {
    std::fputs(win::MountsPlanJson(s, plan).c_str(), stdout);
    return;
  }
  // One argument per line: PowerShell's $(...) and POSIX $(...) both pass each line as one
  // argument (the paths hold no spaces).
  for (const std::string& arg : plan.arguments)
    std::printf("%s\n", arg.c_str());
}

void AddMounts(CLI::App& windows) {
  auto* cmd = windows.add_subcommand(
      "mounts",
      "Generate container runtime flags for GPUs: devices and read-only runtime-DLL mounts");
  static MountsFlags flags;
  CLI::Option* run_opt = AddMountsFlags(cmd, flags);
  // Everything after the first positional argument (the command after --run IMAGE) is kept
  // verbatim, so the container's command may carry its own flags.
  cmd->prefix_command();
  cmd->callback([cmd, run_opt] { RunMounts(flags, run_opt->count() > 0, cmd->remaining()); });
}

void AddCheckImage(CLI::App& windows) {
  auto* cmd = windows.add_subcommand("check-image",
                                     "Check whether a container image build runs on a host build");
  static uint32_t host_build = 0;
  static std::string snapshot_path;
  static std::string gpu_device;
  static std::string image;
  static uint32_t image_build = 0;
  static std::string isolation;
  static bool gpu = false;
  auto* host_opt = cmd->add_option("--host-build", host_build, "Host Windows build (e.g. 20348)");
  auto* snap_opt = cmd->add_option(
      "--snapshot", snapshot_path,
      "Host snapshot: the host build, and with --isolation hyperv --gpu the GPU preflight");
  host_opt->excludes(snap_opt);
  cmd->add_option("--gpu-device", gpu_device,
                  "With --snapshot, hyperv and --gpu: the GPU (location path or index); default: "
                  "the only dismounted or dismountable one");
  auto* image_opt = cmd->add_option("--image", image, "Image reference with a Windows tag");
  auto* build_opt = cmd->add_option("--image-build", image_build, "Image Windows build");
  image_opt->excludes(build_opt);
  cmd->add_option("--isolation", isolation, "process or hyperv")
      ->required()
      ->check(CLI::IsMember({"process", "hyperv"}));
  cmd->add_flag("--gpu", gpu, "The container gets a GPU");
  cmd->callback([host_opt, snap_opt, image_opt, build_opt] {
    if (host_opt->count() == 0 && snap_opt->count() == 0) {
      Fail(InvalidArgument("check-image needs --host-build N or --snapshot FILE"));
    }
    win::CompatibilityRequest request;
    request.isolation = OrFailWindows(win::ParseIsolation(isolation));
    request.gpu = gpu;
    if (image_opt->count() > 0) {
      request.image = OrFailWindows(win::ParseImageReference(image));
    } else if (build_opt->count() > 0) {
      request.image.build = image_build;
    } else {
      Fail(InvalidArgument("check-image needs --image REF or --image-build N"));
    }
    win::HyperVGpuPreflight preflight;
    if (snap_opt->count() > 0) {
      win::Snapshot snapshot = LoadWindowsSnapshot(snapshot_path);
      request.host_build = snapshot.os.build;
      if (gpu && request.isolation == win::Isolation::kHyperV) {
        preflight = HyperVGpuPreflightFor(snapshot, gpu_device, request.image);
        request.hyperv_gpu_preflight = &preflight;
      }
    } else {
      request.host_build = host_build;
    }
    win::CompatibilityVerdict verdict = win::CheckCompatibility(request);
    for (const std::string& w : verdict.warnings)
      std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (!verdict.ok) {
      std::fprintf(stderr, "tessera: %s\n", verdict.summary.c_str());
      for (const std::string& d : verdict.details)
        std::fprintf(stderr, "  - %s\n", d.c_str());
      throw CLI::RuntimeError(1);
    }
    std::printf("%s\n", verdict.summary.c_str());
    for (const std::string& d : verdict.details)
      std::printf("  - %s\n", d.c_str());
  });
}

}  // namespace

void AddWindowsCommand(CLI::App& app) {
  auto* windows =
      app.add_subcommand("windows", "Windows containers with GPUs, from a Windows host snapshot");
  windows->require_subcommand(1);
  AddInventory(*windows);
  AddHcsDevice(*windows);
  AddMounts(*windows);
  AddCheckImage(*windows);
  AddHyperVGpuCommands(*windows);
}

}  // namespace tessera::cli
