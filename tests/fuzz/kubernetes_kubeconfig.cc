// Fuzzes the kubeconfig parser (yaml-cpp, base64 certificate data, context/cluster/user lookup)
// with arbitrary text: any input is a config or an error naming the problem, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kubernetes/client.h"
#include "kubernetes/kubeconfig.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = tessera::k8s::ParseKubeconfig(text, "/base");
  if (config.ok() && config->server.empty()) std::abort();  // a parsed config has a server
  if (!config.ok() && config.error().message.empty()) std::abort();
  return 0;
}
