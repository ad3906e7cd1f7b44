#include "nodeagent/lease_sync.h"

#include <cstdio>
#include <filesystem>
#include <set>
#include <thread>

#include "backends/kubernetes/node_gpus.h"
#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "inventory/inventory.h"
#include "kubernetes/kubeconfig.h"
#include "nodeagent/agent_loops.h"
#include "nodeagent/gpu_recovery.h"
#include "nodeagent/lease_file.h"
#include "nodeagent/node_telemetry.h"

namespace tessera::nodeagent {
namespace {

Result<topology::PartitionTable> LoadPartitionTable(const std::string& name) {
  auto text = ReadBoundedFile(name, kMaxConfigFileBytes);
  if (text) return topology::ParsePartitionTableFile(name, *text);
  if (text.error().category == ErrorCategory::kNotFound) return topology::PresetTable(name);
  return text.error();
}

// Opens the fabric manager over this node's GPUs; returns 0 or the exit code (printed).
int OpenFabricManager(const LeaseSyncOptions& options, LeaseSyncSetup& setup) {
  auto address = fabricmanager::ParseFabricAddress(options.fabric_manager);
  if (!address) {
    std::fprintf(stderr, "tessera-lease-sync: --fabric-manager: %s\n",
                 address.error().message.c_str());
    return 2;
  }
  fabricmanager::FabricSetup fabric;
  fabric.nvfm.library = options.nvfm_library;
  fabric.nvfm.address = *address;
  fabric.table = setup.table;
  fabric.nvml_library = options.nvml;
  auto gpus = ReadNodeGpus(options.root, std::nullopt);
  if (!gpus) {
    std::fprintf(stderr, "tessera-lease-sync: %s\n", gpus.error().message.c_str());
    return 4;
  }
  for (const auto& gpu : gpus->gpus)
    fabric.host_gpus.push_back(gpu.pci_address);
  fabric.ledger_path = options.fabric_state;
  std::error_code made;
  std::filesystem::create_directories(std::filesystem::path(options.fabric_state).parent_path(),
                                      made);
  auto opened = fabricmanager::OpenFabric(std::move(fabric));
  if (!opened) {
    std::fprintf(stderr, "tessera-lease-sync: --fabric-manager: %s\n",
                 opened.error().message.c_str());
    return 4;
  }
  // The node publishes the fabric's partitions, placed on its GPUs.
  setup.table = opened->table;
  setup.fabric = std::move(opened->activator);
  setup.fabric->StartWatch();
  std::fprintf(stderr, "tessera-lease-sync: fabric manager %s\n", setup.fabric->Describe().c_str());
  return 0;
}

// Keeps the node lease file equal to the GpuLeases of this node, from the watch's events.
class LeaseFileWriter {
 public:
  LeaseFileWriter(const LeaseSyncOptions& options, k8s::NodeGpus known, NodeLeases& leases)
      : options_(options), known_(std::move(known)), leases_(leases) {}

  void operator()(const k8s::WatchEvent& event) {
    std::lock_guard lock(leases_.mu);
    Apply(event);
    k8s::Json list = {{"items", k8s::Json::array()}};
    for (const auto& [name, lease] : leases_.leases)
      list["items"].push_back(lease);
    std::vector<std::string> warnings;
    std::string content = k8s::LeaseFileFor(list, options_.node, &known_, &warnings);
    std::set<std::string> now_warned(warnings.begin(), warnings.end());
    for (const auto& warning : now_warned) {
      if (!warned_.count(warning))
        std::fprintf(stderr, "tessera-lease-sync: warning: %s\n", warning.c_str());
    }
    warned_ = std::move(now_warned);
    if (content == written_) return;
    if (auto status = WriteFileAtomically(options_.lease_file, content); !status) {
      std::fprintf(stderr, "tessera-lease-sync: %s\n", status.error().message.c_str());
    } else {
      written_ = content;
    }
  }

 private:
  static std::string NameOf(const k8s::Json& object) {
    return k8s::StringField(k8s::ObjectField(object, "metadata"), "name");
  }
  static std::string NodeOf(const k8s::Json& object) {
    return k8s::StringField(k8s::ObjectField(object, "spec"), "node");
  }

  // SYNC (a whole list), ADDED, MODIFIED or DELETED into the leases of this node.
  void Apply(const k8s::WatchEvent& event) {
    if (event.type == "SYNC") {
      leases_.synced = true;
      leases_.leases.clear();
      for (const auto& item : k8s::ArrayField(event.object, "items")) {
        if (NodeOf(item) == options_.node) leases_.leases[NameOf(item)] = item;
      }
      return;
    }
    std::string name = NameOf(event.object);
    if (event.type == "DELETED" || NodeOf(event.object) != options_.node) {
      leases_.leases.erase(name);
    } else {
      leases_.leases[name] = event.object;
    }
  }

  const LeaseSyncOptions& options_;
  // GPU UUIDs a lease may name instead of PCI addresses; canonical addresses need no inventory.
  k8s::NodeGpus known_;
  NodeLeases& leases_;
  std::string written_;
  std::set<std::string> warned_;  // each problem once, not on every event
};

// The leased Pods' measurements and /metrics. Returns 0 (telemetry on, or off on a node
// without the NVIDIA driver) or 2 for a bad --metrics-listen or token file (printed).
int StartTelemetry(const LeaseSyncOptions& options, LeaseSyncSetup& setup, NodeLeases& leases,
                   std::unique_ptr<k8s::NodeTelemetry>& out) {
  if (options.telemetry_interval_ms <= 0) return 0;
  k8s::NodeTelemetryOptions measure;
  measure.node = options.node;
  measure.nvml_library = options.nvml;
  measure.proc_dir = options.proc_dir;
  measure.interval = std::chrono::milliseconds(options.telemetry_interval_ms);
  measure.max_series = options.telemetry_max_series;
  measure.listen = options.metrics_listen;
  measure.endpoint = options.endpoint;
  measure.endpoint.timeout = std::chrono::milliseconds(options.metrics_timeout_ms);
  // With --fabric-manager: restarts noticed, partitions activated and deactivated.
  auto* fabric = setup.fabric.get();
  measure.extra_metrics = [fabric] { return fabric ? fabric->MetricsText() : std::string(); };
  inventory::ReadOptions read;
  read.root = options.root;
  read.read_driver_files = false;
  if (auto inv = inventory::ReadInventory(read))
    measure.gpus = telemetry::GpuIdentitiesOf(*inv, options.node);
  auto started =
      k8s::NodeTelemetry::Start(setup.config, std::move(measure),
                                [&leases]() -> std::optional<std::map<std::string, k8s::Json>> {
                                  std::lock_guard lock(leases.mu);
                                  if (!leases.synced) return std::nullopt;
                                  return leases.leases;
                                });
  if (!started && started.error().category == ErrorCategory::kInvalidArgument) {
    std::fprintf(stderr, "tessera-lease-sync: %s\n", started.error().message.c_str());
    return 2;
  }
  if (!started) {
    std::fprintf(stderr, "tessera-lease-sync: telemetry off: %s\n",
                 started.error().message.c_str());
    return 0;
  }
  out = std::move(*started);
  if (out->port()) std::fprintf(stderr, "tessera-lease-sync: /metrics on port %u\n", out->port());
  return 0;
}

// Each GPU's health as the last run left it: the state file, or else what the Node publishes.
void LoadGpuHealth(const LeaseSyncOptions& options, const k8s::ClientConfig& config,
                   NodeHealth& board) {
  if (!options.gpu_health || board.Load()) return;
  k8s::Client client(config);
  auto node = client.Get(k8s::Resource::Nodes(), "", options.node);
  if (!node) return;
  auto published = k8s::NodeGpusOf(*node);
  if (published.ok() && published->has_value()) board.Adopt(**published);
}

}  // namespace

int PrepareLeaseSync(const LeaseSyncOptions& options, LeaseSyncSetup& setup) {
  auto config =
      options.kubeconfig.empty() ? k8s::InClusterConfig() : k8s::LoadKubeconfig(options.kubeconfig);
  if (!config) {
    std::fprintf(stderr, "tessera-lease-sync: %s\n", config.error().message.c_str());
    return 4;
  }
  setup.config = std::move(*config);
  if (!options.partition_table.empty()) {
    auto loaded = LoadPartitionTable(options.partition_table);
    if (!loaded) {
      std::fprintf(stderr, "tessera-lease-sync: --partition-table: %s\n",
                   loaded.error().message.c_str());
      return 2;
    }
    setup.table = std::move(*loaded);
  }
  if (options.fabric_manager.empty()) return 0;
  return OpenFabricManager(options, setup);
}

int RunLeaseSync(const LeaseSyncOptions& options, LeaseSyncSetup& setup, std::atomic<bool>& stop) {
  const auto& table = setup.table;
  k8s::NodeGpus known;
  if (auto read = ReadNodeGpus(options.root, table)) known = std::move(*read);
  NodeHealth health(options.gpu_health_state);
  LoadGpuHealth(options, setup.config, health);
  std::thread publisher([&] { PublishGpusLoop(setup.config, options, table, health, stop); });
  NodeLeases leases;
  std::unique_ptr<k8s::NodeTelemetry> node_telemetry;
  int code = StartTelemetry(options, setup, leases, node_telemetry);
  auto* telemetry = node_telemetry.get();
  auto recovery = StartGpuRecovery(options, known, health, leases, [telemetry](bool release) {
    if (!telemetry) return;
    if (release) {
      telemetry->Suspend();
    } else {
      telemetry->Resume();
    }
  });
  if (!recovery) std::fprintf(stderr, "tessera-lease-sync: %s\n", recovery.error().message.c_str());
  if (code != 0 || !recovery) {
    stop = true;
    publisher.join();  // a joinable thread's destructor would abort the process
    return code != 0 ? code : 2;
  }
  std::thread reporter([&] { ReportAllocationsLoop(setup.config, options, table, leases, stop); });
  std::thread partitions([&] {
    if (setup.fabric) SyncPartitionsLoop(*setup.fabric, options, table, leases, stop);
  });
  k8s::Client client(setup.config);
  LeaseFileWriter writer(options, std::move(known), leases);
  auto handle = [&](const k8s::WatchEvent& event) {
    if (event.type == "SYNC" || event.type == "ADDED" || event.type == "MODIFIED" ||
        event.type == "DELETED")
      writer(event);
    return !stop.load();  // BOOKMARK: nothing to write
  };
  auto status = client.ListWatch(k8s::Resource::GpuLeases(), "", "", handle, &stop);
  stop = true;
  recovery->reset();       // its thread reads `leases` and `health`
  node_telemetry.reset();  // its threads read `leases`
  publisher.join();
  reporter.join();
  partitions.join();
  if (!status) {
    std::fprintf(stderr, "tessera-lease-sync: %s\n", status.error().message.c_str());
    return 4;
  }
  return 0;
}

}  // namespace tessera::nodeagent
