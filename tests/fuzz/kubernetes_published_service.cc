// Fuzzes the readers of a published container's Service and Pod (Exposed): anyone who may edit a
// Service or a Pod's status in the tenant namespace writes them. Any text is a list of bounded
// addresses or an error naming the field, never echoing the input whole.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "backends/kubernetes/published.h"
#include "common/untrusted_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace k8s = tessera::k8s;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!tessera::CheckJsonNesting(text, "service").ok()) return 0;
  k8s::Json object = k8s::Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return 0;
  auto addresses = k8s::ServiceAddressesOf(object, "192.0.2.7");
  if (!addresses) {
    if (addresses.error().message.empty() || addresses.error().message.size() > 300)
      __builtin_trap();
  } else {
    if (addresses->size() > 64) __builtin_trap();
    for (const auto& a : *addresses) {
      if (a.container_port < 1 || a.container_port > 65535 || a.host_port < 0 ||
          a.host_port > 65535 || a.host.size() > 253 || a.name.size() > 63 ||
          (a.protocol != "tcp" && a.protocol != "udp") || a.host.empty() != (a.host_port == 0))
        __builtin_trap();
    }
  }
  auto pod = k8s::PodExposureOf(object);
  if (!pod) {
    if (pod.error().message.empty() || pod.error().message.size() > 300) __builtin_trap();
    return 0;
  }
  if (pod->ports.size() > 64 || pod->host_ip.size() > 45) __builtin_trap();
  return 0;
}
