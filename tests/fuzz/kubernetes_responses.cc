// What the Kubernetes client makes of an API server's bytes (a compromised or impersonated
// server sends anything): the first byte picks an error body, a 2xx object body, or a watch
// stream fed in pieces cut where the next bytes say. Never a crash, and what reaches an error
// message is an excerpt.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kubernetes/responses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  using namespace tessera::k8s;
  std::string_view body(reinterpret_cast<const char*>(data + 2), size - 2);
  switch (data[0] % 3) {
    case 0: {
      ApiError error = ParseApiError(400 + data[1], body);
      if (error.message.size() > 400 || error.reason.size() > 400) std::abort();
      break;
    }
    case 1: {
      auto doc = ParseResponseJson(body, "GET /x");
      if (doc.ok()) (void)doc->dump();  // a value that passed the nesting check dumps
      break;
    }
    default: {
      WatchDecoder decoder(4096, "1");
      size_t piece = data[1] + 1;
      int events = 0;
      for (size_t at = 0; at < body.size(); at += piece) {
        bool more = decoder.Feed(body.substr(at, piece), [&](const WatchEvent& event) {
          (void)event.object.dump();
          return ++events < 1000;
        });
        if (!more) break;
      }
      if (decoder.gone_message().size() > 400) std::abort();
      break;
    }
  }
  return 0;
}
