// `tessera doctor`: checks a host and its container runtime config for GPU containers; with
// --probe it also starts one trivial container per installed OCI runtime through podman; with
// --server it lists the GPUs tessera serve has taken out after a fault (doctor_faults.cc).
// Exit 1 when any check FAILs.
#include <sys/stat.h>

#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/doctor_faults.h"
#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "fabricmanager/operator_tools.h"
#include "mps/mps.h"
#include "runtimes/runtimes.h"
#include "sharing/sharing.h"

namespace tessera::cli {
namespace {

// Shared GPUs on this host: each tessera-owned MPS daemon (what holds its GPU's shares, and
// whether it is ready), and the host's /tmp/nvidia-mps, which NVIDIA's container runtime would
// bind into every GPU container.
std::vector<runtimes::Check> SharingChecks(const std::string& root, const std::string& mps_root) {
  std::vector<runtimes::Check> checks;
  struct stat st {};
  const std::string host_pipe = inventory::HostPath(root, "/tmp/nvidia-mps");
  runtimes::Check tmp{"mps.host_pipe_directory",
                      "no host-wide MPS pipe directory (/tmp/nvidia-mps)", runtimes::Verdict::kPass,
                      "absent", ""};
  if (::lstat(host_pipe.c_str(), &st) == 0) {
    tmp.verdict = runtimes::Verdict::kWarn;
    tmp.evidence = host_pipe + " exists";
    tmp.fix =
        "NVIDIA's container runtime binds it into every GPU container, attaching containers that "
        "never asked for MPS to that daemon; stop that daemon (echo quit | "
        "nvidia-cuda-mps-control) and share GPUs through tessera (per-GPU daemons under " +
        mps_root + ")";
  }
  checks.push_back(std::move(tmp));
  for (const auto& daemon : mps::InspectDaemons(inventory::HostPath(root, mps_root))) {
    runtimes::Check check;
    check.id = "mps.daemon";
    check.title = "MPS daemon of " + daemon.gpu_uuid + " (enforcement " +
                  sharing::EnforcementName(sharing::Enforcement::kDriver) +
                  ": its memory and thread limits; the watchdog holds each container)";
    std::string evidence = "control pid " +
                           (daemon.control_pid ? std::to_string(*daemon.control_pid) : "none") +
                           (daemon.running ? " (running)" : " (not running)") + ", marker " +
                           (daemon.marker.empty() ? "none" : daemon.marker) + ", shm " +
                           (daemon.shm_mounted ? "mounted" : "not mounted");
    if (daemon.log.control_version)
      evidence += ", control binary version " + std::to_string(*daemon.log.control_version);
    if (daemon.log.pinned_memory_limit)
      evidence +=
          ", a server applied " + std::to_string(*daemon.log.pinned_memory_limit >> 20) + " MiB";
    if (daemon.log.active_thread_percentage) {
      char percent[32];
      std::snprintf(percent, sizeof percent, "%g", *daemon.log.active_thread_percentage);
      evidence += std::string(" and ") + percent + "% threads";
    }
    if (daemon.log.fatal_exceptions)
      evidence +=
          ", " + std::to_string(daemon.log.fatal_exceptions) + " server fault(s) in its log";
    check.evidence = std::move(evidence);
    if (!daemon.running) {
      check.verdict = runtimes::Verdict::kFail;
      check.fix =
          "the daemon is gone: tessera serve (or the device plugin) restarts it and drains "
          "its GPU meanwhile; if neither runs, remove " +
          daemon.paths.dir;
    } else if (daemon.marker.empty()) {
      check.verdict = runtimes::Verdict::kWarn;
      check.fix =
          "not ready: no container gets this GPU until its limits are applied and the "
          "ready marker is written";
    }
    checks.push_back(std::move(check));
  }
  return checks;
}

}  // namespace
namespace {

// What the fabric checks need: the Service VM's groups, the fabric manager's answer, the
// module map and the lease file, each only when asked for (or implied by the host).
template <typename Options>
fabricmanager::FabricDoctorInput FabricInput(const Options& options,
                                             const runtimes::HostFacts& facts) {
  fabricmanager::FabricDoctorInput input;
  input.inventory = &facts.inventory;
  input.members = facts.group_members;
  input.service_vm = options.service_vm;
  for (const auto& device : facts.inventory.devices) {
    if (device.kind == inventory::DeviceKind::kNvSwitch && device.driver == "vfio-pci")
      input.service_vm = true;
  }
  if (!options.fabricmanager_config.empty()) {
    input.config_path = options.fabricmanager_config;
    auto text = ReadBoundedFile(options.fabricmanager_config, kMaxConfigFileBytes);
    input.config = text ? fabricmanager::ParseFabricManagerConfig(*text)
                        : Result<std::map<std::string, std::string>>(text.error());
  }
  if (options.fabric_manager.empty()) return input;
  input.fm_address = options.fabric_manager;
  if (auto address = fabricmanager::ParseFabricAddress(options.fabric_manager); !address)
    Fail(address.error().WithContext("--fabric-manager"));
  auto connected = fabricmanager::ConnectNvfmAt(options.fabric_manager, options.nvfm_library);
  if (!connected) {
    input.listed = Result<std::vector<fabricmanager::SupportedPartition>>(connected.error());
    return input;
  }
  input.listed = (*connected)->ListPartitions();
  if (!*input.listed) return input;
  std::vector<std::string> gpus;
  for (const auto* gpu : facts.inventory.Gpus())
    gpus.push_back(gpu->pci_address);
  auto modules = fabricmanager::MapHostModules(
      **input.listed, options.partition_table, gpus,
      options.nvml ? *options.nvml : inventory::DefaultNvmlLibrary(options.root));
  if (!modules) Fail(modules.error());
  input.modules = std::move(*modules);
  const std::string lease_file = options.lease_file.empty()
                                     ? inventory::HostPath(options.root, "/run/tessera/leases.json")
                                     : options.lease_file;
  auto leases = deviceplugin::ReadLeaseFile(lease_file);
  if (!leases) Fail(leases.error().WithContext("lease file"));
  input.leases = std::move(*leases);
  return input;
}

struct DoctorOptions {
  std::string root = "/";
  std::string containerd_config;
  std::string format = "table";
  std::string containerd_version;
  std::string podman_version;
  std::string nvproxy_drivers;
  std::string runsc;
  bool probe = false;
  std::string probe_image;
  std::string podman = "podman";
  std::string mps_root = "/run/tessera/mps";
  // Fabric manager (shared NVSwitch mode).
  std::string fabric_manager;
  std::string nvfm_library = "libnvfm.so.1";
  bool service_vm = false;
  std::string partition_table;
  std::optional<std::string> nvml;
  std::string lease_file;
  std::string fabricmanager_config;
  // tessera serve: the GPUs it has taken out after a fault.
  DoctorServer serve;
};

void AddDoctorHostFlags(CLI::App* cmd, DoctorOptions& options) {
  cmd->add_option("--root", options.root, "Host root to read (a fixture tree in tests)")
      ->capture_default_str();
  cmd->add_option("--containerd-config", options.containerd_config,
                  "containerd config.toml (default: <root>/etc/containerd/config.toml if present)");
  cmd->add_option("--format", options.format, "Output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->add_option("--containerd-version", options.containerd_version,
                  "containerd version (default: `containerd --version` when --root is /)");
  cmd->add_option("--podman-version", options.podman_version,
                  "podman version (default: `podman --version` when --root is /)");
  cmd->add_option("--nvproxy-drivers", options.nvproxy_drivers,
                  "Supported-driver list file (default: the built-in data/nvproxy-drivers.txt)");
  cmd->add_option("--runsc", options.runsc,
                  "runsc binary to ask for its version and nvproxy support (default: runsc in "
                  "PATH when --root is /)");
  cmd->add_flag("--probe", options.probe,
                "Also start one trivial container with each installed runtime (runc, runsc, "
                "Kata) through podman and report the exact error with its fix");
  cmd->add_option("--probe-image", options.probe_image,
                  "Local image with `true` for --probe (default: a one-file root directory "
                  "written to a temporary directory; x86-64 hosts)");
  cmd->add_option("--podman", options.podman, "podman binary for --probe")->capture_default_str();
  cmd->add_option("--mps-root", options.mps_root, "Where tessera's MPS daemons live (under --root)")
      ->capture_default_str();
}

void AddDoctorServeFlags(CLI::App* cmd, DoctorOptions& options) {
  AddApiOptions(cmd, options.serve.api);
  cmd->get_option("--server")
      ->description(
          "Also ask tessera serve (http[s]://HOST:PORT) for GPUs out of service after a fault, and "
          "why");
  cmd->get_option("--token-file")
      ->description(
          "Token for --server (default $TESSERA_TOKEN, $TESSERA_TOKEN_FILE, the "
          "context's, tessera-data/admin.token); a read-only token will do");
  cmd->get_option("--context")
      ->description("Also ask tessera serve, at this context of the client config (tessera login)");
}

void AddDoctorFabricFlags(CLI::App* cmd, DoctorOptions& options) {
  cmd->add_option(
      "--fabric-manager", options.fabric_manager,
      "Check the fabric manager at host[:port] or unix:PATH: reachable, shared NVSwitch "
      "mode, active partitions matching the lease file");
  cmd->add_option("--nvfm-library", options.nvfm_library, "Fabric Manager client library")
      ->capture_default_str();
  cmd->add_flag("--service-vm", options.service_vm,
                "The NVSwitches go to a Service VM: check their IOMMU groups are wholly on "
                "vfio-pci (implied when an NVSwitch is bound to vfio-pci)");
  cmd->add_option("--partition-table", options.partition_table,
                  "Partition table (preset or file) whose pci_addresses map GPU modules");
  cmd->add_option("--nvml", options.nvml,
                  "NVML library for GPU module IDs (default: libnvidia-ml.so.1 when --root is /)");
  cmd->add_option("--lease-file", options.lease_file,
                  "Node lease file (default <root>/run/tessera/leases.json)");
  cmd->add_option("--fabricmanager-config", options.fabricmanager_config,
                  "A fabricmanager.cfg to check (FABRIC_MODE, FABRIC_MODE_RESTART, the address)");
}

runtimes::HostFacts ReadDoctorHostFacts(const DoctorOptions& options) {
  runtimes::HostFactsOptions read;
  read.root = options.root;
  if (!options.containerd_version.empty()) read.containerd_version = options.containerd_version;
  if (!options.podman_version.empty()) read.podman_version = options.podman_version;
  if (!options.runsc.empty()) read.runsc = options.runsc;
  auto facts = runtimes::ReadHostFacts(read);
  if (!facts) Fail(facts.error());
  return std::move(*facts);
}

runtimes::NvproxyDrivers ReadDoctorNvproxyDrivers(const DoctorOptions& options) {
  runtimes::NvproxyDrivers drivers = runtimes::BuiltinNvproxyDrivers();
  if (!options.nvproxy_drivers.empty()) {
    auto text = ReadWholeFile(options.nvproxy_drivers);
    if (!text) Fail(text.error());
    drivers = runtimes::ParseNvproxyDrivers(*text);
  }
  return drivers;
}

// Checks containerd's config (the one named, else the host's when it has one) into `report`;
// returns what the config says for the host checks, none without a config.
std::optional<runtimes::ContainerdConfigFacts> CheckDoctorContainerd(
    const DoctorOptions& options, const runtimes::HostFacts& facts,
    runtimes::DoctorReport* report) {
  std::string config_path = options.containerd_config;
  bool explicit_config = !config_path.empty();
  if (!explicit_config)
    config_path = inventory::HostPath(options.root, "/etc/containerd/config.toml");
  auto config_text = ReadWholeFile(config_path);
  if (!config_text && explicit_config) Fail(config_text.error());
  if (!config_text) return std::nullopt;
  runtimes::ContainerdCheckInput input;
  input.config_path = config_path;
  input.config_text = *config_text;
  input.containerd_version = facts.containerd_version;
  input.cdi_specs_present = !facts.cdi_specs.empty();
  std::string root = options.root;
  input.read_file = [root](const std::string& path) -> std::optional<std::string> {
    auto text = ReadWholeFile(inventory::HostPath(root, path));
    if (!text) return std::nullopt;
    return *text;
  };
  auto result = runtimes::CheckContainerdConfig(input);
  report->checks = std::move(result.checks);
  return std::move(result.facts);
}

void AppendChecks(runtimes::DoctorReport* report, const std::vector<runtimes::Check>& checks) {
  report->checks.insert(report->checks.end(), checks.begin(), checks.end());
}

void RunDoctor(const DoctorOptions& options) {
  runtimes::HostFacts facts = ReadDoctorHostFacts(options);
  runtimes::NvproxyDrivers drivers = ReadDoctorNvproxyDrivers(options);
  runtimes::DoctorReport report;
  auto containerd = CheckDoctorContainerd(options, facts, &report);
  AppendChecks(&report, runtimes::CheckHost(facts, drivers, containerd ? &*containerd : nullptr));
  AppendChecks(&report, SharingChecks(options.root, options.mps_root));
  AppendChecks(&report, fabricmanager::FabricChecks(FabricInput(options, facts)));
  if (options.serve.asked()) AppendChecks(&report, GpuFaultChecks(options.serve));
  if (options.probe) {
    runtimes::ProbeOptions probe;
    probe.podman = options.podman;
    probe.image = options.probe_image;
    AppendChecks(&report, runtimes::RunProbes(probe));
  }
  std::cout << (options.format == "json" ? runtimes::ToJson(report) + "\n"
                                         : runtimes::ToTable(report));
  if (report.HasFailure()) throw CLI::RuntimeError(1);
}

}  // namespace

void AddDoctorCommand(CLI::App& app) {
  auto options = std::make_shared<DoctorOptions>();
  CLI::App* cmd = app.add_subcommand(
      "doctor", "Check the host and containerd config for GPU containers (PASS/WARN/FAIL)");
  AddDoctorHostFlags(cmd, *options);
  AddDoctorFabricFlags(cmd, *options);
  AddDoctorServeFlags(cmd, *options);
  cmd->callback([options] { RunDoctor(*options); });
}

}  // namespace tessera::cli
