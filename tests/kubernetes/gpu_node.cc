#include "kubernetes/gpu_node.h"

#include <gtest/gtest.h>

#include "backends/kubernetes/node_gpus.h"
#include "inventory/inventory.h"
#include "support/fixture_host.h"

namespace tessera::testing {

void PublishGpuNode(k8s::Client& admin, const std::string& name, const std::string& host) {
  inventory::ReadOptions read;
  read.root = MaterializeHost(host);
  auto inv = inventory::ReadInventory(read);
  ASSERT_TRUE(inv.ok());
  k8s::NodeGpus gpus;
  for (const auto* gpu : inv->Gpus())
    gpus.gpus.push_back({gpu->pci_address, gpu->gpu_uuid.value_or(""), gpu->model, gpu->numa_node,
                         gpu->upstream_bridges});
  k8s::Json node = {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", name},
        {"annotations", {{k8s::kNodeGpusAnnotation, k8s::NodeGpusAnnotation(gpus)}}}}}};
  ASSERT_TRUE(admin.Create(k8s::Resource::Nodes(), "", node).ok());
}

}  // namespace tessera::testing
