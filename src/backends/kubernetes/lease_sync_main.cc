// tessera-lease-sync: the node agent's link to the API server.
//  - Watches GpuLeases (list+watch, resumed and relisted by the client) and keeps the node lease
//    file (/run/tessera/leases.json) equal to the leases of this node, so the device plugin marks
//    GPUs under check or quarantined Unhealthy.
//  - Publishes this node's GPUs (inventory of --root) as the tessera.dev/gpus annotation of its
//    Node, re-reading the inventory every --inventory-interval-ms and patching only on change.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "backends/kubernetes/kubernetes.h"
#include "common/atomic_file.h"
#include "inventory/inventory.h"
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
  const k8s::Json annotations = (*live)["metadata"].value("annotations", k8s::Json::object());
  if (annotations.is_object() && annotations.value(k8s::kNodeGpusAnnotation, "") == annotation)
    return false;
  auto patched = client.Patch(k8s::Resource::Nodes(), "", node, k8s::NodeGpusPatch(annotation));
  if (!patched) return patched.error();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string kubeconfig, node, lease_file = "/run/tessera/leases.json";
  std::string root = "/", partition_table;
  int inventory_interval_ms = 60000;
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
  CLI11_PARSE(app, argc, argv);
  if (node.empty() && std::getenv("NODE_NAME")) node = std::getenv("NODE_NAME");
  if (node.empty()) {
    std::fprintf(stderr, "tessera-lease-sync: --node or NODE_NAME is required\n");
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
    if (auto text = ReadWholeFile(partition_table)) {
      loaded = topology::ParsePartitionTableFile(partition_table, *text);
    } else {
      loaded = topology::PresetTable(partition_table);
    }
    if (!loaded) {
      std::fprintf(stderr, "tessera-lease-sync: --partition-table: %s\n",
                   loaded.error().message.c_str());
      return 2;
    }
    table = std::move(*loaded);
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
  k8s::Client client(*config);
  std::map<std::string, k8s::Json> leases;  // by name, this node's only
  std::string written;
  auto handle = [&](const k8s::WatchEvent& event) {
    if (event.type == "SYNC") {
      leases.clear();
      for (const auto& item : event.object.value("items", k8s::Json::array())) {
        if (item.value("spec", k8s::Json::object()).value("node", "") == node)
          leases[item["metadata"].value("name", "")] = item;
      }
    } else if (event.type == "ADDED" || event.type == "MODIFIED" || event.type == "DELETED") {
      std::string name = event.object["metadata"].value("name", "");
      bool mine = event.object.value("spec", k8s::Json::object()).value("node", "") == node;
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
    std::string content = k8s::LeaseFileFor(list, node);
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
  publisher.join();
  if (!status) {
    std::fprintf(stderr, "tessera-lease-sync: %s\n", status.error().message.c_str());
    return 4;
  }
  return 0;
}
