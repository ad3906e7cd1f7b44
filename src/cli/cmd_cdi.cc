// `tessera cdi generate|validate`: CDI specs from the host inventory, and a strict checker.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>

#include "cdi/cdi.h"
#include "cli/commands.h"
#include "inventory/inventory.h"
#include "inventory/watch.h"

namespace tessera::cli {
namespace {

struct GenerateFlags {
  std::string root = "/";
  std::optional<std::string> nvml;  // MIG facts; default: libnvidia-ml.so.1 for root "/" only
  std::string mode = "auto";
  std::string kind;
  std::string nvswitch_kind = "nvidia.com/nvswitch";
  bool iommufd = false;
  std::string output;
  std::string output_dir = cdi::kDefaultSpecDir;
  std::string format = "json";
  bool watch = false;
  int poll_interval_ms = 2000;
};

// Written once by the signal handler, read by the watch loop through poll().
int g_stop_pipe[2] = {-1, -1};

void OnStopSignal(int) {
  char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(g_stop_pipe[1], &byte, 1);
}

class Generator {
 public:
  Generator(const GenerateFlags& flags, cdi::BuildOptions options, cdi::Format format)
      : flags_(flags), options_(std::move(options)), format_(format) {}

  // One round: read the host, build, write what changed. Returns an error only for problems
  // the user must fix (bad flags); host problems are warnings.
  Status Run() {
    inventory::ReadOptions read;
    read.root = flags_.root;
    read.nvml_library = flags_.nvml ? *flags_.nvml : inventory::DefaultNvmlLibrary(flags_.root);
    auto inv = inventory::ReadInventory(read);
    if (!inv) return inv.error();
    auto built = cdi::BuildSpecs(*inv, options_);
    if (!built) return built.error();
    for (const auto& warning : built->warnings) {
      std::fprintf(stderr, "tessera: warning: %s\n", warning.c_str());
    }
    const auto& specs = built->specs;
    if (flags_.output == "-") {
      for (size_t i = 0; i < specs.size(); ++i) {
        if (format_ == cdi::Format::kYaml) std::cout << "---\n";
        std::cout << cdi::Serialize(specs[i], format_);
      }
      std::cout.flush();
      return Ok();
    }
    std::set<std::string> written;
    if (!flags_.output.empty()) {
      if (specs.size() > 1) {
        std::string kinds;
        for (const auto& spec : specs)
          kinds += (kinds.empty() ? "" : ", ") + spec.kind;
        return InvalidArgument("--output names one file but the host gives " +
                               std::to_string(specs.size()) + " specs (" + kinds +
                               "); use --output-dir, --mode or --kind");
      }
      if (specs.size() == 1) {
        if (auto status = Write(flags_.output, specs[0]); !status) return status;
        written.insert(flags_.output);
      }
    } else {
      for (const auto& spec : specs) {
        std::string path = flags_.output_dir + "/" + cdi::SpecFileName(spec, format_);
        if (auto status = Write(path, spec); !status) return status;
        written.insert(path);
      }
    }
    // A spec this process wrote before that the host no longer gives is stale: remove it
    // rather than leave containers a device that is gone.
    for (const auto& path : written_) {
      if (written.count(path)) continue;
      if (::unlink(path.c_str()) == 0) std::fprintf(stderr, "tessera: removed %s\n", path.c_str());
    }
    if (specs.empty()) std::fprintf(stderr, "tessera: no devices for CDI on this host\n");
    written_ = std::move(written);
    return Ok();
  }

 private:
  Status Write(const std::string& path, const cdi::Spec& spec) {
    auto changed = cdi::WriteSpecFile(path, cdi::Serialize(spec, format_));
    if (!changed) return changed.error();
    if (*changed) {
      std::fprintf(stderr, "tessera: wrote %s (%s, %zu devices, cdiVersion %s)\n", path.c_str(),
                   spec.kind.c_str(), spec.devices.size(), spec.version.c_str());
    }
    return Ok();
  }

  const GenerateFlags& flags_;
  cdi::BuildOptions options_;
  cdi::Format format_;
  std::set<std::string> written_;  // files written by the last round
};

void RunGenerate(const GenerateFlags& flags) {
  cdi::BuildOptions options;
  auto mode = cdi::ParseMode(flags.mode);
  if (!mode) Fail(mode.error());
  options.mode = *mode;
  options.gpu_kind = flags.kind;
  options.nvswitch_kind = flags.nvswitch_kind;
  options.iommufd = flags.iommufd;
  auto format = cdi::ParseFormat(flags.format);
  if (!format) Fail(format.error());
  if (flags.watch && flags.output == "-") {
    Fail(InvalidArgument("--watch writes files; it cannot be combined with --output -"));
  }

  // Specs name host paths under the root; a relative root would make them relative to
  // whatever directory the container runtime happens to run in.
  GenerateFlags absolute = flags;
  std::error_code error;
  absolute.root = std::filesystem::absolute(flags.root, error).lexically_normal().string();
  if (error) Fail(InvalidArgument("--root " + flags.root + ": " + error.message()));
  if (absolute.root.size() > 1 && absolute.root.back() == '/') absolute.root.pop_back();

  Generator generator(absolute, options, *format);
  if (!flags.watch) {
    if (auto status = generator.Run(); !status) Fail(status.error());
    return;
  }
  if (::pipe2(g_stop_pipe, O_CLOEXEC) != 0) Fail(ErrnoError("pipe", errno));
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  auto watcher = inventory::ChangeWatcher::Start(absolute.root, flags.poll_interval_ms);
  if (!watcher) Fail(watcher.error());
  for (;;) {
    // In watch mode a failed round is reported and retried on the next change: the daemon
    // outlives a half-installed driver.
    if (auto status = generator.Run(); !status) {
      std::fprintf(stderr, "tessera: %s\n", status.error().message.c_str());
    }
    auto changed = (*watcher)->Wait(-1, g_stop_pipe[0]);
    if (!changed) Fail(changed.error());
    if (!*changed) return;  // stopped by a signal
  }
}

void RunValidate(const std::vector<std::string>& paths) {
  auto problems = cdi::ValidatePaths(paths);
  for (const auto& problem : problems)
    std::cout << cdi::FormatFileProblem(problem) << '\n';
  std::cout.flush();
  if (!problems.empty()) throw CLI::RuntimeError(1);
}

}  // namespace

void AddCdiCommand(CLI::App& app) {
  CLI::App* cdi = app.add_subcommand("cdi", "Container Device Interface specs");
  cdi->require_subcommand(1);

  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* generate = cdi->add_subcommand(
      "generate", "Write CDI specs for the host's GPUs, NVSwitches and accelerators");
  generate->add_option("--root", flags->root, "Host root to read (a fixture tree in tests)")
      ->capture_default_str();
  generate->add_option("--nvml", flags->nvml,
                       "NVML library for MIG devices' UUIDs, loaded when a GPU is MIG-capable "
                       "(default libnvidia-ml.so.1 for root /, none for another root)");
  generate
      ->add_option("--mode", flags->mode,
                   "auto: per device from its driver; driver: /dev/nvidia* and driver "
                   "files (runc, gVisor); vfio: IOMMU groups (Kata); dri: DRM nodes")
      ->check(CLI::IsMember({"auto", "driver", "vfio", "dri"}))
      ->capture_default_str();
  generate->add_option("--kind", flags->kind,
                       "VENDOR/CLASS of the GPU spec (default nvidia.com/gpu, nvidia.com/pgpu, "
                       "amd.com/gpu, intel.com/gpu by mode and vendor)");
  generate->add_option("--nvswitch-kind", flags->nvswitch_kind, "Kind of the NVSwitch spec")
      ->capture_default_str();
  generate->add_flag("--iommufd", flags->iommufd,
                     "vfio mode: /dev/iommu + /dev/vfio/devices/vfioN instead of VFIO groups");
  generate->add_option("--output", flags->output, "Write the one spec to FILE, or - for stdout");
  generate
      ->add_option("--output-dir", flags->output_dir,
                   "Directory for <vendor>-<class>.json files when --output is not given")
      ->capture_default_str();
  generate->add_option("--format", flags->format, "Spec format")
      ->check(CLI::IsMember({"json", "yaml"}))
      ->capture_default_str();
  generate->add_flag("--watch", flags->watch,
                     "Keep running; rewrite the specs when the inventory changes (driver "
                     "upgrade, hot-plug, rebinding)");
  generate
      ->add_option("--poll-interval-ms", flags->poll_interval_ms,
                   "--watch: how often to poll what inotify cannot see (/proc, sysfs)")
      ->capture_default_str()
      ->check(CLI::Range(50, 600000));
  generate->callback([flags] { RunGenerate(*flags); });

  auto paths = std::make_shared<std::vector<std::string>>();
  CLI::App* validate = cdi->add_subcommand(
      "validate",
      "Check spec files and directories with the CDI reference library's rules; prints "
      "'file: device: field: problem' lines and exits 1 when anything is invalid");
  validate->add_option("paths", *paths, "Spec files or directories (FILE|DIR...)")->required();
  validate->callback([paths] { RunValidate(*paths); });
}

}  // namespace tessera::cli
