// tessera-serve: GPU containers as a service on this host. `tessera serve` execs it.
//
// Start-up: the HTTP API's listener (bound, not yet accepting), inventory of --root, CDI specs
// for its GPUs, the store under --data-dir, the admin token, reconciliation with the backend, the
// lease file, then the API accepts.
#include <signal.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "api/api.h"
#include "backends/kubernetes/cluster_store.h"
#include "backends/kubernetes/kubernetes_backend.h"
#include "backends/kubernetes/node_gpus.h"
#include "backends/kubernetes/objects.h"
#include "backends/kubernetes/state_objects.h"
#include "backends/local/local.h"
#include "cdi/cdi.h"
#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "fabricmanager/fabricmanager.h"
#include "fleet/fleet.h"
#include "inventory/inventory.h"
#include "kubernetes/kubeconfig.h"
#include "kubernetes/leader_election.h"
#include "nvml/nvml.h"
#include "placement/placement.h"
#include "serve/fabric_backend.h"
#include "serve/flag_checks.h"
#include "serve/flag_paths.h"
#include "serve/replicated_backend.h"
#include "serve/service.h"
#include "sharing/sharing.h"
#include "telemetry/telemetry.h"
#include "tls/tls.h"
#include "topology/topology.h"

namespace {

using namespace tessera;

struct Flags {
  std::string listen = "127.0.0.1:8080";
  serve::TlsFlags tls;
  std::string data_dir = "tessera-data";
  std::string root = "/";
  std::string backend = "local";
  std::string store;       // sqlite or cluster; empty: cluster with --backend kubernetes
  std::string kubeconfig;  // --backend kubernetes: empty = in-cluster service account
  std::string k8s_node;
  bool k8s_cilium = false;
  std::string k8s_nfs_mode = "inline";
  std::string k8s_gpu_api;  // empty: from API discovery
  std::string placement_policy = "binpack";
  std::string lease_file = "/run/tessera/leases.json";
  std::string admin_token_file;     // default <data-dir>/admin.token
  std::string rate_limit = "50/s";  // per token, and per address without a valid token
  int rate_burst = 100;
  bool metrics_aggregate_public = false;
  std::string cdi_dir = cdi::kDefaultSpecDir;
  std::string cdi_kind = "nvidia.com/gpu";
  std::optional<std::string> nvml;  // MIG facts, telemetry; default: libnvidia-ml.so.1 for root "/"
  std::string telemetry_interval = "10s";
  size_t telemetry_max_series = 10000;
  std::string telemetry_proc_dir;  // default <root>/proc
  std::string partition_table;     // file or preset name
  std::string fabric_manager;      // host[:port] or unix:PATH; empty: no fabric manager
  std::string nvfm_library = "libnvfm.so.1";
  std::string fabric_manager_timeout = "10s";  // each fabric-manager call's deadline
  std::string firmware_command;
  std::vector<std::string> firmware_per_gpu;  // BDF=PROGRAM
  int firmware_timeout_ms = 60000;
  std::string instance;
  std::string port_file;
  std::string log_level = "info";
  int io_threads = 1;
  int max_connections = 1024;
  int stop_grace_s = 10;
  bool synchronous_full = true;
  bool foreground_checkpoint = false;
  bool no_tenant_firewall = false;
  std::string retain_finished = "168h";
  std::string container_log_max = "16Mi";  // each podman log's cap (local backend)
  std::string store_reserve = "256Mi";     // kept free on the data dir's file system
  size_t retain_finished_per_tenancy = 10000;
  std::string retention_sweep_interval = "1m";
  std::string audit_retention = "90d";
  int start_workers = 8;
  std::string scheduling = "fair";
  std::string fair_share_half_life = "1h";
  int reservations = 8;
  bool preemption = false;
  int default_pending_quota = 10000;
  // --backend kubernetes: several replicas, one leader (coordination.k8s.io/v1 Lease).
  bool leader_elect = false;
  std::string leader_elect_namespace;  // default $POD_NAMESPACE, else tessera-system
  std::string leader_elect_identity;   // default $POD_NAME, else <hostname>-<pid>
  int lease_duration_ms = 15000;
  int renew_deadline_ms = 10000;
  int retry_period_ms = 2000;
  // Shares of a GPU (docs/sharing.md).
  std::string share_reserve = "1Gi";
  bool share_across_tenancies = false;
  std::string share_grace = "10s";
  std::string share_check_interval = "1s";
  std::string share_timeslice;  // default|short|medium|long; empty: leave the policy alone
  std::string mps_root = "/run/tessera/mps";
  std::string mps_control = "nvidia-cuda-mps-control";
  int mps_shm_mib = 64;
  std::string mps_command_timeout = "5s";
  std::string nvidia_smi = "nvidia-smi";
};

// --share-* and --mps-* into the service's options; `nvml` is the library the host was read with.
Result<serve::SharingOptions> SharingOptionsFrom(const Flags& flags, const std::string& nvml) {
  serve::SharingOptions out;
  if (flags.share_reserve == "0") {
    out.reserve_bytes = 0;
  } else {
    auto reserve = sharing::ParseMemory(flags.share_reserve);
    if (!reserve) return reserve.error().WithContext("--share-reserve");
    out.reserve_bytes = *reserve;
  }
  out.across_tenancies = flags.share_across_tenancies;
  auto grace = serve::ParseDurationFlag(serve::kShareGraceFlag, flags.share_grace);
  if (!grace) return grace.error();
  out.grace = *grace;
  auto interval =
      serve::ParseDurationFlag(serve::kShareCheckIntervalFlag, flags.share_check_interval);
  if (!interval) return interval.error();
  out.interval = *interval;
  if (!flags.share_timeslice.empty()) {
    const std::vector<std::string> names = {"default", "short", "medium", "long"};
    auto it = std::find(names.begin(), names.end(), flags.share_timeslice);
    if (it == names.end())
      return InvalidArgument("--share-timeslice: want default, short, medium or long");
    out.timeslice = static_cast<int>(it - names.begin());
  }
  out.nvidia_smi = flags.nvidia_smi;
  out.nvml_library = nvml.empty() ? "libnvidia-ml.so.1" : nvml;
  out.mps.root = flags.mps_root;
  out.mps.control_binary = flags.mps_control;
  out.mps.shm_bytes = static_cast<uint64_t>(flags.mps_shm_mib) << 20;
  auto timeout = serve::ParseDurationFlag(serve::kMpsCommandTimeoutFlag, flags.mps_command_timeout);
  if (!timeout) return timeout.error();
  out.mps.command_timeout = *timeout;
  return out;
}

// Every duration's range and every path flag's shape and target, before anything is made or
// bound (docs/serve.md lists the rules). Integer ranges are CLI11's, at parse time.
Status CheckFlags(const Flags& flags) {
  const std::pair<serve::DurationFlag, const std::string*> durations[] = {
      {serve::kShareGraceFlag, &flags.share_grace},
      {serve::kShareCheckIntervalFlag, &flags.share_check_interval},
      {serve::kMpsCommandTimeoutFlag, &flags.mps_command_timeout},
      {serve::kTelemetryIntervalFlag, &flags.telemetry_interval},
      {serve::kRetainFinishedFlag, &flags.retain_finished},
      {serve::kRetentionSweepIntervalFlag, &flags.retention_sweep_interval},
      {serve::kAuditRetentionFlag, &flags.audit_retention},
      {serve::kFairShareHalfLifeFlag, &flags.fair_share_half_life},
      {serve::kFabricManagerTimeoutFlag, &flags.fabric_manager_timeout}};
  for (const auto& [flag, text] : durations)
    if (auto parsed = serve::ParseDurationFlag(flag, *text); !parsed) return parsed.error();
  for (const auto& [flag, text] : {std::pair{serve::kContainerLogMaxFlag, &flags.container_log_max},
                                   std::pair{serve::kStoreReserveFlag, &flags.store_reserve}})
    if (auto parsed = serve::ParseSizeFlag(flag, *text); !parsed) return parsed.error();
  if (auto sharing = SharingOptionsFrom(flags, ""); !sharing) return sharing.error();
  if (auto mode = scheduling::ParseMode(flags.scheduling); !mode)
    return mode.error().WithContext("--scheduling");
  if (auto policy = placement::ParsePolicy(flags.placement_policy); !policy)
    return policy.error().WithContext("--placement-policy");
  auto listen = api::ParseListen(flags.listen);
  if (!listen) return listen.error();
  if (auto status = serve::CheckTlsFlags(listen->first, flags.tls); !status) return status;
  if (auto rate = serve::ParseRateFlag(flags.rate_limit); !rate)
    return rate.error().WithContext("--rate-limit");

  // Paths that must be given, then those that may be left empty.
  std::vector<std::pair<std::string_view, std::string>> paths = {
      {"--root", flags.root}, {"--data-dir", flags.data_dir}, {"--cdi-dir", flags.cdi_dir}};
  for (const auto& [flag, path] : std::initializer_list<std::pair<std::string_view, std::string>>{
           {"--lease-file", flags.lease_file},
           {"--admin-token-file", flags.admin_token_file},
           {"--port-file", flags.port_file},
           {"--telemetry-proc-dir", flags.telemetry_proc_dir},
           {"--nvml", flags.nvml.value_or("")},
           {"--kubeconfig", flags.kubeconfig},
           {"--nvfm-library", flags.nvfm_library}})
    if (!path.empty()) paths.emplace_back(flag, path);
  for (const auto& [flag, path] : paths)
    if (auto status = serve::CheckPathText(flag, path); !status) return status;
  // Spliced into podman's --mount for every MPS share.
  if (auto status = serve::CheckMountSourcePath("--mps-root", flags.mps_root); !status)
    return status;

  std::vector<Status> checks = {serve::CheckDirectory("--root", flags.root),
                                serve::CheckDirectoryToMake("--data-dir", flags.data_dir),
                                serve::CheckDirectoryToMake("--cdi-dir", flags.cdi_dir),
                                serve::CheckDirectoryToMake("--mps-root", flags.mps_root),
                                serve::CheckNoSymlinks("--mps-root", flags.mps_root),
                                serve::CheckLibrary("--nvml", flags.nvml.value_or("")),
                                serve::CheckLibrary("--nvfm-library", flags.nvfm_library)};
  if (!flags.lease_file.empty())
    checks.push_back(serve::CheckFileToWrite("--lease-file", flags.lease_file));
  if (!flags.port_file.empty())
    checks.push_back(serve::CheckFileToWrite("--port-file", flags.port_file));
  if (!flags.telemetry_proc_dir.empty())
    checks.push_back(serve::CheckDirectory("--telemetry-proc-dir", flags.telemetry_proc_dir));
  // A program the operator named must be there; the default MPS control daemon is looked for once
  // the GPUs that can be shared are known (Main), nvidia-smi whenever --share-timeslice needs it.
  const Flags defaults;
  if (flags.mps_control != defaults.mps_control)
    checks.push_back(serve::CheckProgram("--mps-control", flags.mps_control));
  if (flags.nvidia_smi != defaults.nvidia_smi || !flags.share_timeslice.empty())
    checks.push_back(serve::CheckProgram("--nvidia-smi", flags.nvidia_smi));
  if (!flags.firmware_command.empty())
    checks.push_back(serve::CheckProgram(
        "--firmware-check-command", std::string(serve::CommandProgram(flags.firmware_command))));
  for (const auto& entry : flags.firmware_per_gpu) {
    const auto equals = entry.find('=');
    if (equals == std::string::npos || equals == 0)
      return InvalidArgument("--firmware-check " + entry + ": want PCI_ADDRESS=PROGRAM");
    checks.push_back(serve::CheckProgram(
        "--firmware-check", std::string(serve::CommandProgram(entry.substr(equals + 1)))));
  }
  for (auto& status : checks)
    if (!status) return status;
  return Ok();
}

// A GPU in MIG mode: its MIG devices as slices the service hands out, named as the CDI spec
// names them (the UUID, else "<GPU index>:<MIG index>").
void AddMigSlices(const inventory::PciDevice& gpu, int index, const std::string& cdi_kind,
                  const std::set<std::string>& cdi_names, fleet::GpuRecord& record) {
  if (!gpu.mig) return;
  // Instances exist only in MIG mode: without NVML's answer, procfs listing some says enough.
  record.mig_enabled = gpu.mig->enabled.value_or(!gpu.mig->devices.empty());
  if (!record.mig_enabled) return;
  record.compute_slices = placement::MigBoardComputeSlices(gpu.device_id);
  for (const auto& device : gpu.mig->devices) {
    fleet::MigSlice slice;
    slice.id = !device.uuid.empty()
                   ? device.uuid
                   : gpu.pci_address + "/gi" + std::to_string(device.gpu_instance_id) + "/ci" +
                         std::to_string(device.compute_instance_id);
    slice.profile = device.profile;
    slice.compute_slices = placement::MigProfileComputeSlices(device.profile);
    const std::string name = !device.uuid.empty()
                                 ? device.uuid
                                 : std::to_string(index) + ":" + std::to_string(device.index);
    slice.cdi_device = cdi_kind + "=" + name;
    if (device.profile.empty())
      spdlog::warn("GPU {}: MIG device {} has no profile (NVML not available); it is not placed",
                   gpu.pci_address, slice.id);
    else if (!cdi_names.count(name))
      spdlog::warn("GPU {}: no CDI device {} in kind {}; containers cannot get MIG device {}",
                   gpu.pci_address, name, cdi_kind, slice.id);
    record.mig_slices.push_back(std::move(slice));
  }
}

// Each GPU's memory from NVML, what share placement counts against; a GPU whose memory NVML
// cannot tell is never shared.
void ReadGpuMemory(const std::string& nvml_library, std::vector<fleet::GpuRecord>& gpus) {
  if (gpus.empty() || nvml_library.empty()) return;
  auto nvml = nvml::Library::Open(nvml_library);
  if (!nvml) {
    spdlog::info("shares: no GPU can be shared: {}", nvml.error().message);
    return;
  }
  for (auto& gpu : gpus) {
    if (gpu.mig_enabled) continue;
    auto handle = (*nvml)->GpuByPci(gpu.pci_address);
    auto memory = handle ? (*nvml)->MemoryTotal(*handle) : Result<uint64_t>(handle.error());
    if (!memory) {
      spdlog::warn("GPU {}: cannot be shared: {}", gpu.pci_address, memory.error().message);
      continue;
    }
    gpu.memory_bytes = *memory;
  }
}

std::string EnvOr(const char* name, std::string fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : std::move(fallback);
}

// spdlog flag %j: the message as a JSON string body, so every line is one JSON object.
class JsonMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string text(msg.payload.data(), msg.payload.size());
    std::string escaped =
        nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(escaped.data() + 1, escaped.data() + escaped.size() - 1);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessage>();
  }
};

void SetUpLogging(const std::string& level) {
  auto logger = std::make_shared<spdlog::logger>("tessera",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<JsonMessage>('j').set_pattern(
      R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","component":"serve","msg":"%j"})");
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

[[noreturn]] void Die(const Error& error) {
  spdlog::critical("{}", error.message);
  std::fprintf(stderr, "tessera serve: %s\n", error.message.c_str());
  std::exit(error.category == ErrorCategory::kInvalidArgument ? 2 : 5);
}

std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.pop_back();
  return text;
}

constexpr size_t kMinAdminToken = 32;

// The admin token: an existing file is used as is; otherwise one is generated, written 0600 and
// printed once on stdout.
Result<std::string> AdminToken(const std::string& path) {
  auto existing = ReadBoundedFile(path, kMaxTokenFileBytes);
  if (existing) {
    std::string token = Trim(*existing);
    // The admin token opens every tenancy: one an attacker can guess is no lock at all.
    if (token.size() < kMinAdminToken)
      return InvalidArgument("admin token file " + path + " holds " + std::to_string(token.size()) +
                             " characters; at least " + std::to_string(kMinAdminToken) +
                             " are needed (remove the file to have a random one generated)");
    for (char c : token) {
      if (c < 0x21 || c > 0x7e)
        return InvalidArgument("admin token file " + path +
                               ": the token may hold only printable ASCII without spaces");
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      spdlog::warn("admin token file {} is readable by group or others (mode {:o}); chmod 600 it",
                   path, st.st_mode & 0777);
    }
    return token;
  }
  if (existing.error().category != ErrorCategory::kNotFound) return existing.error();
  auto secret = fleet::RandomHex(24);
  if (!secret) return secret.error();
  std::string token = "tsa_" + *secret;
  if (auto status = WriteFileAtomically(path, token + "\n", 0600); !status) return status.error();
  std::printf("tessera serve: admin token (written to %s, shown only this once): %s\n",
              path.c_str(), token.c_str());
  std::fflush(stdout);
  return token;
}

std::string Absolute(const std::string& path) {
  std::error_code error;
  auto absolute = std::filesystem::absolute(path, error).lexically_normal().string();
  if (absolute.size() > 1 && absolute.back() == '/') absolute.pop_back();
  return error ? path : absolute;
}

// The kind of the NVSwitch spec that goes with a GPU kind: the default pair, or "<kind>-nvswitch"
// so a service with its own GPU kind never overwrites another's NVSwitch spec.
std::string NvSwitchKind(const std::string& gpu_kind) {
  if (gpu_kind == "nvidia.com/gpu") return "nvidia.com/nvswitch";
  return gpu_kind + "-nvswitch";
}

// A node's published GPUs as the service takes them: records, topology, partition table.
Result<serve::Service::NodeInventory> NodeInventoryOf(const k8s::NodeGpus& node,
                                                      const std::string& cdi_kind) {
  serve::Service::NodeInventory out;
  out.name = node.node;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const auto& gpu = node.gpus[i];
    fleet::GpuRecord record;
    record.pci_address = gpu.pci_address;
    record.index = static_cast<int>(i);
    record.model = gpu.model;
    record.cdi_device = cdi_kind + "=" + (gpu.uuid.empty() ? gpu.pci_address : gpu.uuid);
    out.gpus.push_back(std::move(record));
    topology::GpuInfo info;
    info.id = gpu.pci_address;
    info.pci_address = gpu.pci_address;
    info.numa_node = gpu.numa_node;
    info.upstream_bridges = gpu.upstream_bridges;
    out.topology.gpus.push_back(std::move(info));
  }
  if (!node.partition_table.is_null()) {
    auto table =
        topology::ParsePartitionTable(node.partition_table.dump(), topology::TableFormat::kJson);
    if (!table) return table.error().WithContext("node " + node.node + ": partitionTable");
    out.partition_table = std::move(*table);
  }
  return out;
}

// Where the cluster store keeps its Secrets and ConfigMaps: the control plane's namespace.
std::string StateNamespace(const Flags& flags) {
  return flags.leader_elect_namespace.empty() ? EnvOr("POD_NAMESPACE", "tessera-system")
                                              : flags.leader_elect_namespace;
}

int Main(const Flags& flags) {
  SetUpLogging(flags.log_level);
  if (auto checked = CheckFlags(flags); !checked) Die(checked.error());
  ::signal(SIGPIPE, SIG_IGN);
  // SIGINT/SIGTERM are handled by the server's signal set; block them in every other thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);

  auto listen = api::ParseListen(flags.listen);
  if (!listen) Die(listen.error());
  // The certificate is loaded before anything is made: a file that does not load is a refusal.
  std::shared_ptr<tls::ServerContextSource> tls_source;
  if (!flags.tls.cert.empty()) {
    auto opened = tls::ServerContextSource::Open(
        {Absolute(flags.tls.cert), Absolute(flags.tls.key),
         flags.tls.client_ca.empty() ? "" : Absolute(flags.tls.client_ca)});
    if (!opened) Die(opened.error());
    tls_source = std::move(*opened);
  }
  // The listener first: a start that cannot bind ends here, before anything is made, read,
  // placed or started (a port still held must not cost the containers of the store). Nothing is
  // accepted before Run; until then connections wait in the backlog.
  api::ServerOptions server_options;
  server_options.host = listen->first;
  server_options.port = listen->second;
  server_options.io_threads = flags.io_threads;
  server_options.max_connections = flags.max_connections;
  server_options.tls = tls_source;
  server_options.metrics_aggregate_public = flags.metrics_aggregate_public;
  auto server = api::Server::Create(server_options);
  if (!server) Die(server.error());
  const std::string data_dir = Absolute(flags.data_dir);
  // What was there before this start: a store beside an admin token is one the service ran
  // with, and an empty one then is a lost store, not a new one.
  std::error_code error;
  const bool ran_before = std::filesystem::exists(
      flags.admin_token_file.empty() ? data_dir + "/admin.token" : flags.admin_token_file, error);
  std::filesystem::create_directories(data_dir, error);
  if (error) Die(Unavailable("--data-dir " + data_dir + ": " + error.message()));
  ::chmod(data_dir.c_str(), 0700);

  const std::string store_kind = !flags.store.empty()            ? flags.store
                                 : flags.backend == "kubernetes" ? "cluster"
                                                                 : "sqlite";
  if (store_kind == "cluster" && flags.backend != "kubernetes")
    Die(InvalidArgument("--store cluster needs --backend kubernetes"));
  const std::string admin_token_path =
      flags.admin_token_file.empty() ? data_dir + "/admin.token" : flags.admin_token_file;

  // The host: GPUs, their topology, CDI specs. With the Kubernetes backend the GPUs are the
  // nodes' (their tessera.dev/gpus annotations), not this host's.
  const bool fleet_mode = flags.backend == "kubernetes";
  const std::string root = Absolute(flags.root);
  inventory::ReadOptions read;
  read.root = root;
  read.nvml_library = flags.nvml ? *flags.nvml : inventory::DefaultNvmlLibrary(root);
  auto inv = fleet_mode ? Result<inventory::Inventory>(inventory::Inventory{})
                        : inventory::ReadInventory(read);
  if (!inv) Die(inv.error().WithContext("inventory of " + root));
  for (const auto& warning : inv->warnings)
    spdlog::warn("inventory: {}", warning);

  cdi::BuildOptions build;
  build.mode = cdi::Mode::kAuto;
  build.gpu_kind = flags.cdi_kind;
  build.nvswitch_kind = NvSwitchKind(flags.cdi_kind);
  std::set<std::string> cdi_names;
  if (!inv->Gpus().empty()) {
    auto built = cdi::BuildSpecs(*inv, build);
    if (!built) Die(built.error().WithContext("CDI"));
    for (const auto& warning : built->warnings)
      spdlog::warn("cdi: {}", warning);
    for (const auto& spec : built->specs) {
      std::string path = flags.cdi_dir + "/" + cdi::SpecFileName(spec, cdi::Format::kJson);
      auto written = cdi::WriteSpecFile(path, cdi::Serialize(spec, cdi::Format::kJson));
      if (!written) Die(written.error().WithContext("CDI spec"));
      spdlog::info("cdi: {} ({}, {} devices)", path, spec.kind, spec.devices.size());
      if (spec.kind == flags.cdi_kind)
        for (const auto& device : spec.devices)
          cdi_names.insert(device.name);
    }
  }

  serve::Service::Host host;
  int index = 0;
  for (const auto* gpu : inv->Gpus()) {
    fleet::GpuRecord record;
    record.pci_address = gpu->pci_address;
    record.index = index++;
    record.model = gpu->model;
    // The stable CDI name (UUID, else PCI address) survives re-enumeration, unlike the index.
    std::string name = gpu->gpu_uuid.value_or(gpu->pci_address);
    if (!cdi_names.count(name)) {
      spdlog::warn("GPU {}: no CDI device {} in kind {}; containers cannot get it",
                   gpu->pci_address, name, flags.cdi_kind);
    }
    record.cdi_device = flags.cdi_kind + "=" + name;
    record.uuid = gpu->gpu_uuid.value_or("");
    AddMigSlices(*gpu, record.index, flags.cdi_kind, cdi_names, record);
    host.gpus.push_back(std::move(record));
  }
  ReadGpuMemory(read.nvml_library, host.gpus);
  // Shares can be placed here: an MPS one needs the control daemon, looked for by its default name.
  if (flags.mps_control == Flags{}.mps_control &&
      std::any_of(host.gpus.begin(), host.gpus.end(), [](auto& gpu) { return gpu.memory_bytes; }))
    if (auto found = serve::CheckProgram("--mps-control", flags.mps_control); !found)
      spdlog::warn("{}: MPS shares cannot start here (time-sliced ones can)",
                   found.error().message);
  if (!host.gpus.empty()) {
    auto topology = topology::TopologyFromInventory(*inv);
    if (!topology) Die(topology.error().WithContext("topology"));
    host.topology = std::move(*topology);
  }

  serve::ServiceOptions options;
  options.root = root;
  options.data_dir = data_dir;
  options.lease_file = flags.lease_file;
  options.cdi_kind = flags.cdi_kind;
  options.stop_grace = std::chrono::seconds(flags.stop_grace_s);
  options.firmware.command = flags.firmware_command;
  options.firmware.timeout = std::chrono::milliseconds(flags.firmware_timeout_ms);
  for (const auto& entry : flags.firmware_per_gpu) {
    auto equals = entry.find('=');
    if (equals == std::string::npos || equals == 0)
      Die(InvalidArgument("--firmware-check " + entry + ": want PCI_ADDRESS=PROGRAM"));
    options.firmware.per_gpu[entry.substr(0, equals)] = entry.substr(equals + 1);
  }
  options.fleet = fleet_mode;
  options.only_node = flags.k8s_node;
  auto sharing_options = SharingOptionsFrom(flags, read.nvml_library);
  if (!sharing_options) Die(sharing_options.error());
  options.sharing = std::move(*sharing_options);
  // In their ranges (CheckFlags).
  auto duration = [](const serve::DurationFlag& flag, const std::string& text) {
    auto parsed = serve::ParseDurationFlag(flag, text);
    if (!parsed) Die(parsed.error());
    return *parsed;
  };
  const auto max_age = duration(serve::kRetainFinishedFlag, flags.retain_finished);
  const auto sweep_interval =
      duration(serve::kRetentionSweepIntervalFlag, flags.retention_sweep_interval);
  options.retention.max_age = max_age;
  options.retention.per_tenancy = flags.retain_finished_per_tenancy;
  options.retention.sweep_interval = sweep_interval;
  options.audit_retention = duration(serve::kAuditRetentionFlag, flags.audit_retention);
  options.start_workers = flags.start_workers;
  {
    // In range (CheckFlags). Logs are the local backend's; the kubelet caps Pods' logs. A store
    // in the cluster has no file system here to keep a reserve on.
    auto reserve = serve::ParseSizeFlag(serve::kStoreReserveFlag, flags.store_reserve);
    auto log_max = serve::ParseSizeFlag(serve::kContainerLogMaxFlag, flags.container_log_max);
    if (!reserve) Die(reserve.error());
    if (!log_max) Die(log_max.error());
    if (store_kind != "cluster") options.store_reserve.reserve_bytes = *reserve;
    if (flags.backend == "local") options.store_reserve.log_max_bytes = *log_max;
  }
  options.telemetry.interval = duration(serve::kTelemetryIntervalFlag, flags.telemetry_interval);
  options.telemetry.max_series = flags.telemetry_max_series;
  options.rate_limit = {*serve::ParseRateFlag(flags.rate_limit),
                        static_cast<double>(flags.rate_burst)};
  options.telemetry.nvml_library = read.nvml_library;
  options.telemetry.proc_dir =
      flags.telemetry_proc_dir.empty() ? root + "/proc" : flags.telemetry_proc_dir;
  {
    char hostname[256] = {};
    ::gethostname(hostname, sizeof hostname - 1);
    options.telemetry.hostname = hostname;
  }
  if (!fleet_mode)
    options.telemetry.gpus = telemetry::GpuIdentitiesOf(*inv, options.telemetry.hostname);
  auto mode = scheduling::ParseMode(flags.scheduling);
  if (!mode) Die(mode.error().WithContext("--scheduling"));
  options.scheduling.mode = *mode;
  const auto half_life = duration(serve::kFairShareHalfLifeFlag, flags.fair_share_half_life);
  options.scheduling.half_life_s = static_cast<double>(half_life.count()) / 1000.0;
  options.scheduling.max_reservations = flags.reservations;
  options.scheduling.preemption = flags.preemption;
  options.scheduling.default_quota_pending = flags.default_pending_quota;
  if (auto valid = scheduling::ValidateSchedulerOptions(options.scheduling); !valid)
    Die(valid.error().WithContext("--fair-share-half-life/--reservations"));
  auto policy = placement::ParsePolicy(flags.placement_policy);
  if (!policy) Die(policy.error().WithContext("--placement-policy"));
  options.policy = *policy;
  if (fleet_mode && !flags.partition_table.empty())
    Die(
        InvalidArgument("--partition-table: with --backend kubernetes every node publishes its own "
                        "(tessera-lease-sync --partition-table)"));
  if (!flags.partition_table.empty()) {
    Result<topology::PartitionTable> table = InvalidArgument("");
    auto text = ReadBoundedFile(flags.partition_table, kMaxConfigFileBytes);
    if (text) {
      table = topology::ParsePartitionTableFile(flags.partition_table, *text);
    } else if (text.error().category == ErrorCategory::kNotFound) {
      table = topology::PresetTable(flags.partition_table);
    } else {
      table = text.error();
    }
    if (!table) Die(table.error().WithContext("--partition-table"));
    options.partition_table = std::move(*table);
  }

  // Shared NVSwitch mode: the fabric manager's partitions are the placement table, and every
  // container's partition is activated around it.
  std::shared_ptr<fabricmanager::PartitionActivator> fabric;
  if (!flags.fabric_manager.empty()) {
    if (fleet_mode)
      Die(InvalidArgument(
          "--fabric-manager: with --backend kubernetes each node's agent "
          "(tessera-lease-sync --fabric-manager) or DRA plugin owns its partitions"));
    auto address = fabricmanager::ParseFabricAddress(flags.fabric_manager);
    if (!address) Die(address.error().WithContext("--fabric-manager"));
    fabricmanager::FabricSetup setup;
    setup.nvfm.library = flags.nvfm_library;
    setup.nvfm.timeout_ms = static_cast<unsigned>(
        duration(serve::kFabricManagerTimeoutFlag, flags.fabric_manager_timeout).count());
    setup.nvfm.address = *address;
    setup.table = options.partition_table;
    setup.nvml_library = read.nvml_library;
    for (const auto* gpu : inv->Gpus())
      setup.host_gpus.push_back(gpu->pci_address);
    setup.ledger_path = data_dir + "/fabric-partitions.json";
    auto opened = fabricmanager::OpenFabric(std::move(setup));
    if (!opened) Die(opened.error().WithContext("--fabric-manager"));
    options.partition_table = std::move(opened->table);
    fabric = std::move(opened->activator);
    options.extra_metrics = [fabric] { return fabric->MetricsText(); };
    spdlog::info("fabric manager: {}; {} partitions, placement in whole partitions",
                 fabric->Describe(), options.partition_table->partitions.size());
  }

  std::unique_ptr<backends::ContainerBackend> backend;
  std::optional<k8s::ClientConfig> k8s_config;
  // The elector once it exists (--leader-elect): asked by the scheduler before each placement and
  // by the backend's tenancy controller.
  std::atomic<k8s::LeaderElector*> elected{nullptr};
  auto leading = [&elected] {
    auto* current = elected.load();
    return current && current->IsLeader();
  };
  if (flags.backend == "local") {
    backends::LocalOptions local;
    local.instance =
        flags.instance.empty() ? fleet::Sha256Hex(data_dir).substr(0, 12) : flags.instance;
    local.tenant_firewall = !flags.no_tenant_firewall;
    local.state_dir = data_dir + "/containers";
    auto log_max = serve::ParseSizeFlag(serve::kContainerLogMaxFlag, flags.container_log_max);
    if (!log_max) Die(log_max.error());  // in range (CheckFlags)
    local.log_max_bytes = *log_max;
    backend = backends::CreateLocalBackend(local);
  } else if (flags.backend == "null") {
    backend = backends::CreateNullBackend();
  } else if (flags.backend == "kubernetes") {
    backends::KubernetesBackendOptions k8s_options;
    auto config =
        flags.kubeconfig.empty() ? k8s::InClusterConfig() : k8s::LoadKubeconfig(flags.kubeconfig);
    if (!config) Die(config.error());
    k8s_config = *config;
    k8s_options.client = std::move(*config);
    k8s_options.instance =
        flags.instance.empty() ? fleet::Sha256Hex(data_dir).substr(0, 12) : flags.instance;
    k8s_options.node = flags.k8s_node;
    k8s_options.cilium = flags.k8s_cilium;
    auto nfs_mode = k8s::ParseNfsMode(flags.k8s_nfs_mode);
    if (!nfs_mode) Die(nfs_mode.error());
    k8s_options.nfs_mode = *nfs_mode;
    if (flags.leader_elect) k8s_options.leading = leading;
    auto gpu_api = backends::ChooseGpuApi(k8s_options.client, flags.k8s_gpu_api);
    if (!gpu_api) Die(gpu_api.error());
    k8s_options.gpu_api = *gpu_api;
    backend = backends::CreateKubernetesBackend(std::move(k8s_options));
  } else {
    Die(InvalidArgument("--backend " + flags.backend + ": want local, kubernetes or null"));
  }

  if (fabric) backend = serve::ActivatePartitionsAround(std::move(backend), fabric);

  // The store: a SQLite file under --data-dir, or the cluster's objects (every replica shares
  // them; nothing of the state is in the Pod).
  Result<std::unique_ptr<fleet::Store>> store = Internal("no store");
  k8s::ClusterStore* cluster = nullptr;
  std::optional<std::string> admin_hash;
  if (store_kind == "cluster") {
    k8s::ClusterStoreOptions cluster_options;
    cluster_options.client = *k8s_config;
    cluster_options.ns = StateNamespace(flags);
    if (flags.leader_elect) cluster_options.leading = leading;
    auto opened = k8s::ClusterStore::Open(std::move(cluster_options));
    cluster = opened.get();
    // The admin token: a file this replica has (the chart mounts one Secret into every replica)
    // is the truth and its hash is written to the cluster; without one, the hash the cluster
    // holds stays valid (a replica with an empty data dir loses nothing); only a cluster without
    // one gets a new token.
    auto held = cluster->AdminTokenHash();
    if (!held) Die(held.error().WithContext("admin token Secret"));
    if (std::filesystem::exists(admin_token_path)) {
      auto admin = AdminToken(admin_token_path);
      if (!admin) Die(admin.error().WithContext("admin token"));
      admin_hash = fleet::Sha256Hex(*admin);
      if (*held != admin_hash) {
        if (auto status = cluster->PutAdminTokenHash(*admin_hash, true); !status)
          Die(status.error().WithContext("admin token Secret"));
      }
    } else if (!*held) {
      // The first replica of a new control plane: the first to create the Secret wins, and only
      // its token is written and shown.
      auto secret = fleet::RandomHex(24);
      if (!secret) Die(secret.error());
      const std::string token = "tsa_" + *secret;
      admin_hash = fleet::Sha256Hex(token);
      auto status = cluster->PutAdminTokenHash(*admin_hash, false);
      if (!status && status.error().category == ErrorCategory::kAlreadyExists) {
        held = cluster->AdminTokenHash();
        if (!held || !*held) Die(Unavailable("admin token Secret: created and gone again"));
        admin_hash = **held;
      } else if (!status) {
        Die(status.error().WithContext("admin token Secret"));
      } else {
        if (auto written = WriteFileAtomically(admin_token_path, token + "\n", 0600); !written)
          Die(written.error());
        std::printf("tessera serve: admin token (written to %s, shown only this once): %s\n",
                    admin_token_path.c_str(), token.c_str());
        std::fflush(stdout);
      }
    } else {
      admin_hash = **held;
      spdlog::info("admin token: the hash in Secret {}/{} (no token file at {})",
                   StateNamespace(flags), k8s::kAdminTokenSecret, admin_token_path);
    }
    store = std::unique_ptr<fleet::Store>(std::move(opened));
    backend = serve::StartAfterPlacementIsDurable(
        std::move(backend), *cluster,
        flags.leader_elect ? std::function<bool()>(leading) : std::function<bool()>());
    options.resync = [cluster] { return cluster->Resync(); };
  } else {
    auto admin = AdminToken(admin_token_path);
    if (!admin) Die(admin.error().WithContext("admin token"));
    admin_hash = fleet::Sha256Hex(*admin);
    // One process owns the file: POST /v1/admin-token:rotate may replace it.
    options.admin_token_file = admin_token_path;
    fleet::StoreOptions store_options;
    store_options.path = data_dir + "/tessera.db";
    store_options.synchronous_full = flags.synchronous_full;
    store_options.background_checkpoint = !flags.foreground_checkpoint;
    store_options.refuse_empty = ran_before;
    store = fleet::OpenSqliteStore(store_options);
    if (!store) Die(store.error());
  }

  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  auto service = serve::Service::Create(std::move(options), std::move(host), std::move(*store),
                                        std::move(backend));
  if (!service) Die(service.error());
  (*service)->SetAdminTokenHash(*admin_hash);
  // Reconciled by the service's start (the backend's list); from here on a restarted fabric
  // manager is sent the active list.
  if (fabric) fabric->StartWatch();
  serve::Service* const served = service->get();
  if (flags.leader_elect) served->SetLeadershipCheck(leading);
  if (cluster) {
    // Other replicas' writes reach this one's model from here on; the API opens once every
    // watch has listed (so /readyz answers only on a synced cache).
    cluster->Follow([served](const fleet::Mutation& change) { served->ApplyReplicated(change); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!cluster->Synced() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!cluster->Synced()) Die(Unavailable("cluster store: watches did not sync within 60 s"));
  }
  // With leader election only the replica holding the Lease runs placement, the lease flow and
  // the checks; it is asked again right before every placement.
  std::unique_ptr<k8s::LeaderElector> elector;
  if (flags.leader_elect) {
    if (!k8s_config) Die(InvalidArgument("--leader-elect needs --backend kubernetes"));
    k8s::LeaderElectionOptions election;
    election.ns = flags.leader_elect_namespace.empty() ? EnvOr("POD_NAMESPACE", "tessera-system")
                                                       : flags.leader_elect_namespace;
    char hostname[256] = {};
    ::gethostname(hostname, sizeof hostname - 1);
    election.identity =
        flags.leader_elect_identity.empty()
            ? EnvOr("POD_NAME", std::string(hostname) + "-" + std::to_string(::getpid()))
            : flags.leader_elect_identity;
    election.lease_duration = std::chrono::milliseconds(flags.lease_duration_ms);
    election.renew_deadline = std::chrono::milliseconds(flags.renew_deadline_ms);
    election.retry_period = std::chrono::milliseconds(flags.retry_period_ms);
    if (auto status = k8s::CheckLeaderElectionOptions(election); !status) Die(status.error());
    serve::Service* target = service->get();
    elector = std::make_unique<k8s::LeaderElector>(
        *k8s_config, election, [target] { target->StartLeading(); },
        [target] { target->StopLeading(); });
    elected = elector.get();
    spdlog::info("leader election: {} in namespace {}, Lease tessera-control-plane",
                 election.identity, election.ns);
  } else {
    (*service)->Start();
  }
  std::unique_ptr<backends::NodeGpuWatch> node_watch;
  if (k8s_config) {
    serve::Service* target = service->get();
    node_watch = backends::StartNodeGpuWatch(
        *k8s_config, [target, kind = flags.cdi_kind](const std::vector<k8s::NodeGpus>& nodes) {
          std::vector<serve::Service::NodeInventory> inventories;
          for (const auto& node : nodes) {
            auto inventory = NodeInventoryOf(node, kind);
            if (!inventory) {
              spdlog::warn("{}; its GPUs are not placed", inventory.error().message);
              continue;
            }
            inventories.push_back(std::move(*inventory));
          }
          target->UpdateNodes(std::move(inventories));
        });
  }

  // Up once SIGINT/SIGTERM are handled: a stop right after the port file appears is a clean one.
  (*server)->Run(service->get(), [&] {
    if (!flags.port_file.empty()) {
      if (auto status =
              WriteFileAtomically(flags.port_file, std::to_string((*server)->port()) + "\n");
          !status)
        Die(status.error());
    }
    spdlog::info("serving {}://{}:{} (data {}, root {}, backend {}, {} GPUs{})",
                 tls_source ? "https" : "http", listen->first, (*server)->port(), data_dir, root,
                 flags.backend, inv->Gpus().size(),
                 fleet_mode ? " here; the nodes' come from the cluster" : "");
  });
  // The service (and its store's pending callbacks) goes before the server they answer through;
  // the node watch, which calls into the service, before both.
  node_watch.reset();
  // Nor may the cluster store's watches report into a service that is going.
  if (cluster) cluster->Unfollow();
  elected = nullptr;
  elector.reset();
  service->reset();
  server->reset();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"tessera serve: GPU containers as a service on this host"};
  app.add_option("--listen", flags.listen, "HOST:PORT to serve the API on (port 0: any)")
      ->capture_default_str();
  app.add_option("--tls-cert", flags.tls.cert,
                 "PEM certificate (then its chain) to serve HTTPS with; re-read when it changes");
  app.add_option("--tls-key", flags.tls.key,
                 "PEM private key of --tls-cert (not readable by other users)");
  app.add_option("--tls-client-ca", flags.tls.client_ca,
                 "PEM CA(s): require client certificates signed by one of them");
  app.add_flag("--insecure-http", flags.tls.insecure_http,
               "Serve plain HTTP on a non-loopback --listen address (without TLS)");
  app.add_option("--data-dir", flags.data_dir, "Store, admin token")->capture_default_str();
  app.add_option("--root", flags.root, "Host root to read (a fixture tree in tests)")
      ->capture_default_str();
  app.add_option("--backend", flags.backend,
                 "local (podman), kubernetes (Pods through the API server) or null (runs "
                 "nothing; benchmarks)")
      ->check(CLI::IsMember({"local", "kubernetes", "null"}))
      ->capture_default_str();
  app.add_option("--store", flags.store,
                 "Where the records live: sqlite (a file under --data-dir) or cluster (objects "
                 "of the API server, shared by every replica; default with --backend kubernetes)")
      ->check(CLI::IsMember({"sqlite", "cluster"}));
  app.add_option("--kubeconfig", flags.kubeconfig,
                 "kubeconfig for --backend kubernetes (default: in-cluster service account)");
  app.add_option("--k8s-node", flags.k8s_node,
                 "Place only on this node (default: every node that publishes its GPUs)");
  app.add_option("--placement-policy", flags.placement_policy,
                 "How --backend kubernetes chooses a node: binpack, spread or first-fit")
      ->capture_default_str();
  app.add_flag("--k8s-cilium", flags.k8s_cilium,
               "Also create a CiliumNetworkPolicy per tenancy (clusters running Cilium)");
  app.add_option("--k8s-nfs-mode", flags.k8s_nfs_mode,
                 "NFS entitlements as inline nfs volumes or a PV/PVC pair each")
      ->check(CLI::IsMember({"inline", "pv"}))
      ->capture_default_str();
  app.add_option("--k8s-gpu-api", flags.k8s_gpu_api,
                 "How Pods get their GPUs: dra (a ResourceClaim pinned to the leased GPUs) or "
                 "device-plugin (default: dra when the cluster serves resource.k8s.io/v1)")
      ->check(CLI::IsMember({"dra", "device-plugin"}));
  app.add_option("--lease-file", flags.lease_file, "Node-local lease file for the device plugin")
      ->capture_default_str();
  app.add_flag("--no-tenant-firewall", flags.no_tenant_firewall,
               "Do not add the iptables rules that fence each tenancy network (hosts without "
               "iptables; the --internal networks still isolate)");
  app.add_option("--admin-token-file", flags.admin_token_file,
                 "Admin token file (default <data-dir>/admin.token; created 0600 when missing)");
  app.add_option("--rate-limit", flags.rate_limit,
                 "Requests per second per token (a tenancy's rateLimit replaces it; the admin "
                 "token has none), and per source address for requests without a valid token: "
                 "\"50/s\", or off")
      ->capture_default_str();
  app.add_option("--rate-burst", flags.rate_burst,
                 "Requests a token (or address) may send at once after a quiet spell")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_flag("--metrics-aggregate-public", flags.metrics_aggregate_public,
               "Answer GET /metrics without a token with the aggregate series only (no tenancy, "
               "container or GPU labels); every series still needs the admin or a metrics token");
  app.add_option("--cdi-dir", flags.cdi_dir, "Where to write the CDI specs")->capture_default_str();
  app.add_option("--cdi-kind", flags.cdi_kind, "CDI kind of the GPU spec")->capture_default_str();
  app.add_option("--nvml", flags.nvml,
                 "NVML library for MIG profiles and UUIDs (default: libnvidia-ml.so.1 when --root "
                 "is /, none otherwise)");
  app.add_option("--telemetry-interval", flags.telemetry_interval,
                 "How often this host's GPUs and their processes are measured through NVML "
                 "(100ms to 1h)")
      ->capture_default_str();
  app.add_option("--telemetry-max-series", flags.telemetry_max_series,
                 "Per-container series on /metrics at most; the rest is summed into "
                 "container=\"_other\"")
      ->check(CLI::Range(size_t{100}, size_t{10000000}))
      ->capture_default_str();
  app.add_option("--telemetry-proc-dir", flags.telemetry_proc_dir,
                 "Where GPU processes' cgroups are read (default <root>/proc)");
  app.add_option("--partition-table", flags.partition_table,
                 "NVLink fabric partition table (file, or preset name such as hgx-h100-8gpu)");
  app.add_option("--fabric-manager", flags.fabric_manager,
                 "NVIDIA Fabric Manager API (host[:port], port 6666 by default, or unix:PATH): "
                 "place whole fabric partitions and activate each container's before it starts");
  app.add_option("--nvfm-library", flags.nvfm_library,
                 "Fabric Manager client library (libnvfm.so.1, or a path)")
      ->capture_default_str();
  app.add_option("--fabric-manager-timeout", flags.fabric_manager_timeout,
                 "Deadline of each fabric-manager call (100ms to 5m): one that does not answer "
                 "fails that activation, not the service")
      ->capture_default_str();
  app.add_option("--firmware-check-command", flags.firmware_command,
                 "Run 'PROGRAM [ARGS] <PCI address>' after each lease (exit 0 = pass) instead of "
                 "comparing the option ROM hash");
  app.add_option("--firmware-check", flags.firmware_per_gpu,
                 "PCI_ADDRESS=PROGRAM: the check for one GPU (repeatable)");
  app.add_option("--firmware-check-timeout-ms", flags.firmware_timeout_ms, "Check time limit")
      ->check(CLI::Range(1, 3600 * 1000))
      ->capture_default_str();
  app.add_option("--instance", flags.instance,
                 "Label value of this service's containers (default: from --data-dir)");
  app.add_option("--port-file", flags.port_file, "Write the bound port here");
  // spdlog takes any other name for "off": a typo would silence every line.
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember(
          {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"}))
      ->capture_default_str();
  app.add_option("--io-threads", flags.io_threads, "HTTP I/O threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--max-connections", flags.max_connections,
                 "Open HTTP connections at most (lowered to stay below the open-file limit)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_flag("--foreground-checkpoint", flags.foreground_checkpoint,
               "Let the commit that fills the WAL copy it back (SQLite's default) instead of a "
               "checkpoint thread; for comparisons");
  app.add_option("--stop-grace-s", flags.stop_grace_s, "SIGTERM to SIGKILL on DELETE")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  app.add_option("--container-log-max", flags.container_log_max,
                 "Cap of each container's log under <data-dir>/containers (64Ki to 1Ti): podman "
                 "empties it when the next line would pass this, so it keeps the latest output")
      ->capture_default_str();
  app.add_option("--store-reserve", flags.store_reserve,
                 "Free space kept on the data directory's file system for the store (0 to 1Ti; "
                 "0: off): submissions and tenancy changes are refused (503) when less is left "
                 "once the live containers' logs may reach --container-log-max")
      ->capture_default_str();
  app.add_option("--retain-finished", flags.retain_finished,
                 "Remove exited/failed container records this long after they finished "
                 "(ms, s, m, h, d)")
      ->capture_default_str();
  app.add_option("--retain-finished-per-tenancy", flags.retain_finished_per_tenancy,
                 "Keep at most this many finished container records per tenancy (oldest go "
                 "first)")
      ->check(CLI::Range(size_t{1}, size_t{100000000}))
      ->capture_default_str();
  app.add_option("--retention-sweep-interval", flags.retention_sweep_interval,
                 "How often the retention policy is applied")
      ->capture_default_str();
  app.add_option("--audit-retention", flags.audit_retention,
                 "Delete audit records this long after they were written (h, d; 1h to 3660d)")
      ->capture_default_str();
  app.add_option("--start-workers", flags.start_workers,
                 "Container starts and stops run this many at a time")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--scheduling", flags.scheduling,
                 "Which pending GPU container goes next: fair (weighted fair share between "
                 "tenancies, priorities, quotas) or fifo")
      ->capture_default_str();
  app.add_option("--fair-share-half-life", flags.fair_share_half_life,
                 "Half-life of the recent GPU usage fair share is measured on (e.g. 30m, 1h)")
      ->capture_default_str();
  app.add_option("--reservations", flags.reservations,
                 "Pending requests that do not fit and reserve the GPUs they get first, per "
                 "scheduling pass (0: plain backfill)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--default-pending-quota", flags.default_pending_quota,
                 "Requests a tenancy may have waiting at once unless its policy sets quota.pending "
                 "(a policy may raise it, null: unlimited)")
      ->check(CLI::Range(0, scheduling::kMaxQuotaPending))
      ->capture_default_str();
  app.add_flag("--preemption", flags.preemption,
               "Stop preemptible containers for a higher-priority or under-share tenancy's "
               "request (reason \"preempted\")");
  app.add_flag("--leader-elect", flags.leader_elect,
               "--backend kubernetes: run placement, the lease flow and checks only while this "
               "replica holds the coordination.k8s.io/v1 Lease tessera-control-plane");
  app.add_option("--leader-elect-namespace", flags.leader_elect_namespace,
                 "Namespace of the Lease (default $POD_NAMESPACE, else tessera-system)");
  app.add_option("--leader-elect-identity", flags.leader_elect_identity,
                 "This replica's holderIdentity (default $POD_NAME, else <hostname>-<pid>)");
  app.add_option("--leader-elect-lease-duration-ms", flags.lease_duration_ms,
                 "How long a Lease not renewed keeps others out (whole seconds)")
      ->check(CLI::Range(1000, 3600 * 1000))
      ->capture_default_str();
  app.add_option("--leader-elect-renew-deadline-ms", flags.renew_deadline_ms,
                 "A leader stops placing when it has not renewed for this long (< lease duration)")
      ->check(CLI::Range(100, 3600 * 1000))
      ->capture_default_str();
  app.add_option("--leader-elect-retry-period-ms", flags.retry_period_ms,
                 "Between attempts to take or renew the Lease")
      ->check(CLI::Range(10, 3600 * 1000))
      ->capture_default_str();
  app.add_option("--share-reserve", flags.share_reserve,
                 "Memory kept free on every shared GPU: its shares add up to at most its memory "
                 "less this (a quantity, or 0)")
      ->capture_default_str();
  app.add_flag("--share-across-tenancies", flags.share_across_tenancies,
               "Let one time-sliced GPU hold several tenancies' containers (never an MPS GPU: its "
               "daemon, pipe directory and shm stay one tenancy's). Risk: a time-sliced GPU is one "
               "fault domain that isolates no memory, so one tenant's fatal GPU fault ends every "
               "tenant's work on it");
  app.add_option("--share-grace", flags.share_grace,
                 "The watchdog stops a container above its memory share for longer than this "
                 "(100ms to 1h)")
      ->capture_default_str();
  app.add_option("--share-check-interval", flags.share_check_interval,
                 "How often each MPS daemon is checked and the watchdog samples (10ms to 1m)")
      ->capture_default_str();
  app.add_option("--share-timeslice", flags.share_timeslice,
                 "Time-sliced GPUs: nvidia-smi compute-policy --set-timeslice default|short|"
                 "medium|long while shared (default: leave the policy alone)");
  app.add_option("--mps-root", flags.mps_root,
                 "Where each shared GPU's MPS daemon keeps <uuid>/{pipe,log,shm,ready} (absolute, "
                 "no links)")
      ->capture_default_str();
  app.add_option("--mps-control", flags.mps_control, "The nvidia-cuda-mps-control to run")
      ->capture_default_str();
  app.add_option("--mps-shm-mib", flags.mps_shm_mib,
                 "Size of each MPS daemon's private shm (the clients' /dev/shm), MiB")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--mps-command-timeout", flags.mps_command_timeout,
                 "An MPS daemon slower than this to answer counts as hung (100ms to 5m)")
      ->capture_default_str();
  app.add_option("--nvidia-smi", flags.nvidia_smi, "nvidia-smi, for --share-timeslice")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return Main(flags);
}
