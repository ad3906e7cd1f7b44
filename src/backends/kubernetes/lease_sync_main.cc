// tessera-lease-sync: the node agent's lease watcher. Watches GpuLeases (list+watch, resumed
// and relisted by the client) and keeps the node lease file (/run/tessera/leases.json) equal to
// the leases of this node, so the device plugin marks GPUs under check or quarantined Unhealthy.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <map>

#include "backends/kubernetes/kubernetes.h"
#include "common/atomic_file.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) {
  g_stop = true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  std::string kubeconfig, node, lease_file = "/run/tessera/leases.json";
  CLI::App app{"tessera-lease-sync: GpuLeases of this node -> the node lease file"};
  app.add_option("--kubeconfig", kubeconfig, "kubeconfig (default: in-cluster service account)");
  app.add_option("--node", node, "This node's name (default: $NODE_NAME)");
  app.add_option("--lease-file", lease_file, "Lease file the device plugin reads")
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
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
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
  if (!status) {
    std::fprintf(stderr, "tessera-lease-sync: %s\n", status.error().message.c_str());
    return 4;
  }
  return 0;
}
