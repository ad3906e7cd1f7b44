// Fuzzes the client config's parser with arbitrary text: any input is a config or an error
// naming the problem, never a crash; and a config that parses is written back to text that
// parses again to the same config (else the process aborts).
#include "client/client_config.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

bool Same(const tessera::client::ClientConfig& a, const tessera::client::ClientConfig& b) {
  if (a.current != b.current || a.contexts.size() != b.contexts.size()) return false;
  for (size_t i = 0; i < a.contexts.size(); ++i) {
    const auto& x = a.contexts[i];
    const auto& y = b.contexts[i];
    if (x.name != y.name || x.server != y.server || x.token_file != y.token_file ||
        x.ca_file != y.ca_file || x.client_cert != y.client_cert || x.client_key != y.client_key)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = tessera::client::ParseClientConfig(text);
  if (!config.ok()) {
    if (config.error().message.empty()) std::abort();
    return 0;
  }
  // The current context is one of the contexts, or there is none.
  const auto* current = config->Find("");
  if (config->current.empty() != (current == nullptr)) std::abort();
  for (const auto& context : config->contexts)
    if (config->Find(context.name) == nullptr) std::abort();
  auto again = tessera::client::ParseClientConfig(tessera::client::FormatClientConfig(*config));
  if (!again.ok() || !Same(*config, *again)) std::abort();
  return 0;
}
