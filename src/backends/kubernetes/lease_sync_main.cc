// tessera-lease-sync: the node agent's link to the API server.
//  - Watches GpuLeases (list+watch, resumed and relisted by the client) and keeps the node lease
//    file (/run/tessera/leases.json) equal to the leases of this node, so the device plugin marks
//    GPUs under check or quarantined Unhealthy.
//  - Publishes this node's GPUs (inventory of --root) as the tessera.dev/gpus annotation of its
//    Node, re-reading the inventory every --inventory-interval-ms and patching only on change.
//  - Reads kubelet's PodResources List every --pod-resources-interval-ms and writes the devices
//    kubelet gave each leased Pod into its GpuLease's status.allocatedDevices (PCI addresses):
//    with the device plugin, kubelet picks the IDs, and the firmware check must follow them.
//  - With --fabric-manager (shared NVSwitch mode), owns this node's NVLink partitions: a leased
//    Pod's partition is activated when its devices appear in PodResources and deactivated when
//    they are gone (lease_sync_fabric.h); a restarted fabric manager is sent the active list.
//  - Measures what each leased Pod's GPU processes use (NVML, attributed by cgroup) every
//    --telemetry-interval-ms, keeps it in the GpuLease's status.measured and serves /metrics
//    and /v1/telemetry on --metrics-listen, behind --metrics-token-file (node_telemetry.h).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "backends/kubernetes/kubernetes.h"
#include "backends/kubernetes/lease_sync_fabric.h"
#include "backends/kubernetes/node_telemetry.h"
#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "common/untrusted_text.h"
#include "inventory/inventory.h"
#include "podresources/podresources.h"
#include "topology/topology.h"

namespace {

using namespace tessera;

std::atomic<bool> g_stop{false};
void OnSignal(int) {
  g_stop = true;
}

Result<k8s::NodeGpus> ReadNodeGpus(const std::string& root,
                                   const std::optional<topology::PartitionTable>& table) {
  inventory::ReadOptions read;
  read.root = root;
  read.read_driver_files = false;
  auto inv = inventory::ReadInventory(read);
  if (!inv) return inv.error().WithContext("inventory of " + root);
  k8s::NodeGpus out;
  for (const auto* gpu : inv->Gpus()) {
    k8s::NodeGpu item;
    item.pci_address = gpu->pci_address;
    item.uuid = gpu->gpu_uuid.value_or("");
    item.model = gpu->model;
    item.numa_node = gpu->numa_node;
    item.upstream_bridges = gpu->upstream_bridges;
    out.gpus.push_back(std::move(item));
  }
  if (table) out.partition_table = k8s::Json::parse(topology::PartitionTableToJson(*table, -1));
  return out;
}

// Patches the annotation when the Node's differs from `annotation`; returns whether it patched.
Result<bool> PublishNodeGpus(k8s::Client& client, const std::string& node,
                             const std::string& annotation) {
  auto live = client.Get(k8s::Resource::Nodes(), "", node);
  if (!live) return live.error();
  const k8s::Json& annotations =
      k8s::ObjectField(k8s::ObjectField(*live, "metadata"), "annotations");
  if (annotations.contains(k8s::kNodeGpusAnnotation) &&
      k8s::StringField(annotations, k8s::kNodeGpusAnnotation) == annotation)
    return false;
  auto patched = client.Patch(k8s::Resource::Nodes(), "", node, k8s::NodeGpusPatch(annotation));
  if (!patched) return patched.error();
  return true;
}

// The leases of this node whose Pod may hold devices now.
bool HoldsDevices(const k8s::Json& lease) {
  std::string state = k8s::StringField(k8s::ObjectField(lease, "status"), "state", "reserved");
  return state == "reserved" || state == "active";
}

std::vector<std::string> AllocatedDevicesOf(const k8s::Json& lease) {
  std::vector<std::string> out;
  for (const auto& id : k8s::ArrayField(k8s::ObjectField(lease, "status"), "allocatedDevices")) {
    if (id.is_string()) out.push_back(id.get<std::string>());
  }
  return out;
}

// One round: List once, then patch every lease whose Pod's devices differ from what its status
// says. Returns the problem of this round, or empty.
std::string ReportAllocations(k8s::Client& client, const std::map<std::string, k8s::Json>& leases,
                              const std::string& socket, k8s::NodeGpus& gpus,
                              const std::string& root,
                              const std::optional<topology::PartitionTable>& table) {
  bool wanted = false;
  for (const auto& [name, lease] : leases)
    wanted = wanted || HoldsDevices(lease);
  if (!wanted) return {};
  auto list = podresources::List(socket, std::chrono::seconds(5));
  if (!list) return list.error().message;
  for (const auto& warning : list->warnings)
    std::fprintf(stderr, "tessera-lease-sync: PodResources: %s\n", warning.c_str());
  for (const auto& [name, lease] : leases) {
    if (!HoldsDevices(lease)) continue;
    const k8s::Json& spec = k8s::ObjectField(lease, "spec");
    const k8s::Json& pod_ref = k8s::ObjectField(spec, "podRef");
    const auto* pod =
        list->Find(k8s::StringField(pod_ref, "namespace"), k8s::StringField(pod_ref, "name"));
    if (!pod) continue;  // not started yet, or already gone
    auto ids = podresources::DeviceIds(*pod, k8s::StringField(spec, "resource", "nvidia.com/gpu"));
    if (ids.empty()) continue;
    auto allocated = k8s::PciAddressesOfDeviceIds(ids, gpus);
    // An ID this node does not know yet may be a GPU that appeared since the last inventory.
    auto known = [&](const std::string& pci) {
      for (const auto& gpu : gpus.gpus)
        if (gpu.pci_address == pci) return true;
      return false;
    };
    bool unknown = !std::all_of(allocated.begin(), allocated.end(), known);
    if (unknown) {
      if (auto fresh = ReadNodeGpus(root, table)) {
        gpus = std::move(*fresh);
        allocated = k8s::PciAddressesOfDeviceIds(ids, gpus);
      }
    }
    if (allocated == AllocatedDevicesOf(lease)) continue;
    auto patched = client.Patch(k8s::Resource::GpuLeases(), "", name,
                                {{"status", {{"allocatedDevices", allocated}}}},
                                k8s::PatchType::kMerge, "status");
    if (!patched) return "lease " + Excerpt(name, 253) + ": " + patched.error().message;
    std::string joined;
    for (const auto& id : allocated)
      joined += (joined.empty() ? "" : ",") + id;
    std::fprintf(stderr, "tessera-lease-sync: lease %s: kubelet allocated %s\n",
                 Excerpt(name, 253).c_str(), Excerpt(joined, 600).c_str());
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  std::string kubeconfig, node, lease_file = "/run/tessera/leases.json";
  std::string root = "/", partition_table;
  int inventory_interval_ms = 60000;
  std::string pod_resources_socket = podresources::kDefaultSocket;
  int pod_resources_interval_ms = 10000;
  int telemetry_interval_ms = 10000;
  size_t telemetry_max_series = 10000;
  std::string metrics_listen, nvml = "libnvidia-ml.so.1", proc_dir = "/proc";
  CLI::App app{"tessera-lease-sync: GpuLeases of this node -> the node lease file"};
  app.add_option("--kubeconfig", kubeconfig, "kubeconfig (default: in-cluster service account)");
  app.add_option("--node", node, "This node's name (default: $NODE_NAME)");
  app.add_option("--lease-file", lease_file, "Lease file the device plugin reads")
      ->capture_default_str();
  app.add_option("--root", root, "Host root whose GPUs are published on the Node")
      ->capture_default_str();
  app.add_option("--partition-table", partition_table,
                 "This node's NVLink partition table (file or preset name), published with its "
                 "GPUs");
  app.add_option("--inventory-interval-ms", inventory_interval_ms,
                 "Re-read the inventory this often; 0: publish once")
      ->capture_default_str();
  app.add_option("--pod-resources-socket", pod_resources_socket,
                 "kubelet's PodResources socket, read for the devices kubelet gave leased Pods")
      ->capture_default_str();
  app.add_option("--pod-resources-interval-ms", pod_resources_interval_ms,
                 "Read PodResources this often; 0: never")
      ->capture_default_str();
  std::string fabric_manager, nvfm_library = "libnvfm.so.1";
  std::string fabric_state = "/var/lib/tessera/fabric-partitions.json";
  int fabric_interval_ms = 1000;
  app.add_option("--fabric-manager", fabric_manager,
                 "NVIDIA Fabric Manager API (host[:port] or unix:PATH): activate each leased "
                 "Pod's NVLink partition when its devices appear in PodResources, deactivate it "
                 "when they are gone");
  app.add_option("--nvfm-library", nvfm_library, "Fabric Manager client library")
      ->capture_default_str();
  app.add_option("--fabric-state", fabric_state, "Which lease holds which partition")
      ->capture_default_str();
  app.add_option("--fabric-interval-ms", fabric_interval_ms,
                 "Read PodResources for partitions this often")
      ->check(CLI::Range(50, 60000))
      ->capture_default_str();
  app.add_option("--telemetry-interval-ms", telemetry_interval_ms,
                 "Measure the GPU processes of leased Pods this often (NVML); 0: never")
      ->capture_default_str();
  app.add_option("--telemetry-max-series", telemetry_max_series,
                 "Per-container series on /metrics at most; the rest is summed into "
                 "container=\"_other\"")
      ->capture_default_str();
  app.add_option("--metrics-listen", metrics_listen,
                 "HOST:PORT serving /metrics, /v1/telemetry and /healthz (default: none)");
  telemetry::EndpointOptions endpoint;
  app.add_option("--metrics-token-file", endpoint.token_file,
                 "File holding the bearer token /metrics and /v1/telemetry ask for (a Secret's "
                 "key; re-read when it changes); needed unless --metrics-listen is loopback or "
                 "--metrics-anonymous says so");
  app.add_flag("--metrics-anonymous", endpoint.anonymous_off_loopback,
               "Serve /metrics and /v1/telemetry without a token off loopback too (a "
               "NetworkPolicy must keep everyone but the scraper out)");
  app.add_option("--metrics-max-connections", endpoint.max_connections,
                 "Connections the endpoint serves at once; accepting pauses there")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--metrics-tls-cert", endpoint.tls.cert,
                 "PEM certificate (and chain): the endpoint speaks HTTPS (TLS 1.2+), the files "
                 "re-read when they change")
      ->check(CLI::ExistingFile);
  app.add_option("--metrics-tls-key", endpoint.tls.key, "PEM private key of --metrics-tls-cert")
      ->check(CLI::ExistingFile);
  app.add_option("--metrics-tls-client-ca", endpoint.tls.client_ca,
                 "PEM CAs whose client certificates the endpoint asks for and accepts")
      ->check(CLI::ExistingFile);
  endpoint.tls.flag_prefix = "--metrics-tls-";
  int metrics_timeout_ms = static_cast<int>(endpoint.timeout.count());
  app.add_option("--metrics-timeout-ms", metrics_timeout_ms,
                 "Deadline for a connection's whole request header, and again for its answer")
      ->check(CLI::Range(100, 600000))
      ->capture_default_str();
  app.add_option("--nvml", nvml, "NVML library: telemetry, GPU module IDs (\"\" = none)")
      ->capture_default_str();
  app.add_option("--proc-dir", proc_dir, "The host's /proc (GPU processes' cgroups)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (node.empty() && std::getenv("NODE_NAME")) node = std::getenv("NODE_NAME");
  if (node.empty()) {
    std::fprintf(stderr, "tessera-lease-sync: --node or NODE_NAME is required\n");
    return 2;
  }
  if (endpoint.tls.cert.empty() != endpoint.tls.key.empty() ||
      (endpoint.tls.cert.empty() && !endpoint.tls.client_ca.empty())) {
    std::fprintf(stderr,
                 "tessera-lease-sync: --metrics-tls-cert and --metrics-tls-key go together "
                 "(and --metrics-tls-client-ca needs them)\n");
    return 2;
  }
  auto config = kubeconfig.empty() ? k8s::InClusterConfig() : k8s::LoadKubeconfig(kubeconfig);
  if (!config) {
    std::fprintf(stderr, "tessera-lease-sync: %s\n", config.error().message.c_str());
    return 4;
  }
  std::optional<topology::PartitionTable> table;
  if (!partition_table.empty()) {
    Result<topology::PartitionTable> loaded = InvalidArgument("");
    if (auto text = ReadBoundedFile(partition_table, kMaxConfigFileBytes)) {
      loaded = topology::ParsePartitionTableFile(partition_table, *text);
    } else if (text.error().category == ErrorCategory::kNotFound) {
      loaded = topology::PresetTable(partition_table);
    } else {
      loaded = text.error();
    }
    if (!loaded) {
      std::fprintf(stderr, "tessera-lease-sync: --partition-table: %s\n",
                   loaded.error().message.c_str());
      return 2;
    }
    table = std::move(*loaded);
  }
  std::unique_ptr<fabricmanager::PartitionActivator> fabric;
  if (!fabric_manager.empty()) {
    auto address = fabricmanager::ParseFabricAddress(fabric_manager);
    if (!address) {
      std::fprintf(stderr, "tessera-lease-sync: --fabric-manager: %s\n",
                   address.error().message.c_str());
      return 2;
    }
    fabricmanager::FabricSetup setup;
    setup.nvfm.library = nvfm_library;
    setup.nvfm.address = *address;
    setup.table = table;
    setup.nvml_library = nvml;
    auto gpus = ReadNodeGpus(root, std::nullopt);
    if (!gpus) {
      std::fprintf(stderr, "tessera-lease-sync: %s\n", gpus.error().message.c_str());
      return 4;
    }
    for (const auto& gpu : gpus->gpus)
      setup.host_gpus.push_back(gpu.pci_address);
    setup.ledger_path = fabric_state;
    std::error_code made;
    std::filesystem::create_directories(std::filesystem::path(fabric_state).parent_path(), made);
    auto opened = fabricmanager::OpenFabric(std::move(setup));
    if (!opened) {
      std::fprintf(stderr, "tessera-lease-sync: --fabric-manager: %s\n",
                   opened.error().message.c_str());
      return 4;
    }
    // The node publishes the fabric's partitions, placed on its GPUs.
    table = opened->table;
    fabric = std::move(opened->activator);
    fabric->StartWatch();
    std::fprintf(stderr, "tessera-lease-sync: fabric manager %s\n", fabric->Describe().c_str());
  }
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  // The Node annotation, in its own thread with its own client. Every round compares with the
  // live Node (one GET), so an annotation removed or edited by someone else is put back.
  std::thread publisher([&] {
    k8s::Client client(*config);
    while (!g_stop) {
      bool ok = false;
      auto gpus = ReadNodeGpus(root, table);
      if (!gpus) {
        std::fprintf(stderr, "tessera-lease-sync: %s\n", gpus.error().message.c_str());
      } else {
        auto patched = PublishNodeGpus(client, node, k8s::NodeGpusAnnotation(*gpus));
        if (!patched) {
          std::fprintf(stderr, "tessera-lease-sync: node %s: %s\n", node.c_str(),
                       patched.error().message.c_str());
        } else {
          ok = true;
          if (*patched)
            std::fprintf(stderr, "tessera-lease-sync: node %s: published %zu GPUs\n", node.c_str(),
                         gpus->gpus.size());
        }
      }
      if (ok && inventory_interval_ms <= 0) break;
      // Retry soon after a failure; otherwise wait for the next inventory round.
      auto wait = std::chrono::milliseconds(ok ? inventory_interval_ms : 1000);
      auto until = std::chrono::steady_clock::now() + wait;
      while (!g_stop && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::mutex leases_mu;                     // guards leases, leases_synced
  std::map<std::string, k8s::Json> leases;  // by name, this node's only
  bool leases_synced = false;               // the watch has listed them once
  std::unique_ptr<k8s::NodeTelemetry> node_telemetry;
  if (telemetry_interval_ms > 0) {
    k8s::NodeTelemetryOptions options;
    options.node = node;
    options.nvml_library = nvml;
    options.proc_dir = proc_dir;
    options.interval = std::chrono::milliseconds(telemetry_interval_ms);
    options.max_series = telemetry_max_series;
    options.listen = metrics_listen;
    options.endpoint = endpoint;
    options.endpoint.timeout = std::chrono::milliseconds(metrics_timeout_ms);
    // With --fabric-manager: restarts noticed, partitions activated and deactivated.
    options.extra_metrics = [&fabric] { return fabric ? fabric->MetricsText() : std::string(); };
    inventory::ReadOptions read;
    read.root = root;
    read.read_driver_files = false;
    if (auto inv = inventory::ReadInventory(read))
      options.gpus = telemetry::GpuIdentitiesOf(*inv, node);
    auto started = k8s::NodeTelemetry::Start(
        *config, std::move(options), [&]() -> std::optional<std::map<std::string, k8s::Json>> {
          std::lock_guard lock(leases_mu);
          if (!leases_synced) return std::nullopt;
          return leases;
        });
    // A node without the NVIDIA driver still syncs leases; a bad --metrics-listen or token
    // file is an error.
    if (!started && started.error().category == ErrorCategory::kInvalidArgument) {
      std::fprintf(stderr, "tessera-lease-sync: %s\n", started.error().message.c_str());
      g_stop = true;
      publisher.join();  // a joinable thread's destructor would abort the process
      return 2;
    }
    if (!started) {
      std::fprintf(stderr, "tessera-lease-sync: telemetry off: %s\n",
                   started.error().message.c_str());
    } else {
      node_telemetry = std::move(*started);
      if (node_telemetry->port())
        std::fprintf(stderr, "tessera-lease-sync: /metrics on port %u\n", node_telemetry->port());
    }
  }
  // kubelet's allocations -> GpuLease status, in its own thread with its own client.
  std::thread reporter([&] {
    if (pod_resources_interval_ms <= 0) return;
    k8s::Client client(*config);
    k8s::NodeGpus gpus;
    if (auto read = ReadNodeGpus(root, table)) gpus = std::move(*read);
    std::string last_problem;
    while (!g_stop) {
      std::map<std::string, k8s::Json> snapshot;
      {
        std::lock_guard lock(leases_mu);
        snapshot = leases;
      }
      std::string problem =
          ReportAllocations(client, snapshot, pod_resources_socket, gpus, root, table);
      // A kubelet that is down says so every round: log each new problem once.
      if (!problem.empty() && problem != last_problem)
        std::fprintf(stderr, "tessera-lease-sync: %s\n", problem.c_str());
      last_problem = problem;
      auto until =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(pod_resources_interval_ms);
      while (!g_stop && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  // The leased Pods' partitions, once the leases are known (before, every Pod would look
  // unleased and its partition would be deactivated under it).
  std::thread partitions([&] {
    if (!fabric) return;
    k8s::NodeGpus gpus;
    if (auto read = ReadNodeGpus(root, table)) gpus = std::move(*read);
    std::string last_problem;
    while (!g_stop) {
      std::map<std::string, k8s::Json> snapshot;
      bool synced;
      {
        std::lock_guard lock(leases_mu);
        snapshot = leases;
        synced = leases_synced;
      }
      std::string problem;
      if (synced) {
        auto pods = podresources::List(pod_resources_socket, std::chrono::seconds(5));
        if (!pods) {
          problem = pods.error().message;
        } else {
          auto held = k8s::LeasedPodDevices(snapshot, *pods, gpus);
          for (const auto& line : k8s::SyncPartitions(*fabric, held))
            problem += (problem.empty() ? "" : "; ") + line;
        }
      }
      if (!problem.empty() && problem != last_problem)
        std::fprintf(stderr, "tessera-lease-sync: partitions: %s\n", problem.c_str());
      last_problem = problem;
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(fabric_interval_ms);
      while (!g_stop && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  k8s::Client client(*config);
  // GPU UUIDs a lease may name instead of PCI addresses; canonical addresses need no inventory.
  k8s::NodeGpus known;
  if (auto read = ReadNodeGpus(root, table)) known = std::move(*read);
  std::string written;
  std::set<std::string> warned;  // each problem once, not on every event
  auto name_of = [](const k8s::Json& object) {
    return k8s::StringField(k8s::ObjectField(object, "metadata"), "name");
  };
  auto node_of = [](const k8s::Json& object) {
    return k8s::StringField(k8s::ObjectField(object, "spec"), "node");
  };
  auto handle = [&](const k8s::WatchEvent& event) {
    std::lock_guard lock(leases_mu);
    if (event.type == "SYNC") {
      leases_synced = true;
      leases.clear();
      for (const auto& item : k8s::ArrayField(event.object, "items")) {
        if (node_of(item) == node) leases[name_of(item)] = item;
      }
    } else if (event.type == "ADDED" || event.type == "MODIFIED" || event.type == "DELETED") {
      std::string name = name_of(event.object);
      bool mine = node_of(event.object) == node;
      if (event.type == "DELETED" || !mine) {
        leases.erase(name);
      } else {
        leases[name] = event.object;
      }
    } else {
      return !g_stop.load();  // BOOKMARK
    }
    k8s::Json list = {{"items", k8s::Json::array()}};
    for (const auto& [name, lease] : leases)
      list["items"].push_back(lease);
    std::vector<std::string> warnings;
    std::string content = k8s::LeaseFileFor(list, node, &known, &warnings);
    std::set<std::string> now_warned(warnings.begin(), warnings.end());
    for (const auto& warning : now_warned) {
      if (!warned.count(warning))
        std::fprintf(stderr, "tessera-lease-sync: warning: %s\n", warning.c_str());
    }
    warned = std::move(now_warned);
    if (content != written) {
      if (auto status = WriteFileAtomically(lease_file, content); !status) {
        std::fprintf(stderr, "tessera-lease-sync: %s\n", status.error().message.c_str());
      } else {
        written = content;
      }
    }
    return !g_stop.load();
  };
  auto status = client.ListWatch(k8s::Resource::GpuLeases(), "", "", handle, &g_stop);
  g_stop = true;
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
