// Fuzzes the Node annotation parser: the control plane reads tessera.dev/gpus from every Node,
// and anyone who may edit Nodes can write it. Any text is GPUs or an error naming the field;
// what parses formats back to text that parses to the same GPUs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backends/kubernetes/node_gpus.h"
#include "kubernetes/client.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto gpus = tessera::k8s::ParseNodeGpusAnnotation(text);
  if (!gpus.ok()) {
    if (gpus.error().message.empty()) std::abort();
    return 0;
  }
  auto again = tessera::k8s::ParseNodeGpusAnnotation(tessera::k8s::NodeGpusAnnotation(*gpus));
  if (!again.ok() || !(*again == *gpus)) std::abort();
  return 0;
}
