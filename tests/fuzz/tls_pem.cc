// Fuzzes what tessera-serve makes of its --tls-cert, --tls-key and --tls-client-ca files: the
// input split at NUL bytes into the certificate, the key and (when there is a third part) the
// client CA PEM text, through the same parsing and context building as a start or a rotation.
// Any input is a context or an error naming the part that was bad, never a crash, and no error
// is longer than an excerpt allows.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tls/tls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  tessera::tls::ServerPem pem;
  const size_t first = text.find('\0');
  pem.cert = std::string(text.substr(0, first));
  if (first != std::string_view::npos) {
    text.remove_prefix(first + 1);
    const size_t second = text.find('\0');
    pem.key = std::string(text.substr(0, second));
    if (second != std::string_view::npos) pem.client_ca = std::string(text.substr(second + 1));
  }
  auto ctx = tessera::tls::BuildServerContext(pem);
  if (ctx.ok() && !*ctx) std::abort();
  if (!ctx.ok()) {
    const auto& message = ctx.error().message;
    if (message.empty() || message.size() > 4096) std::abort();
    // Every refusal says which input it was.
    if (message.rfind("certificate", 0) != 0 && message.rfind("key", 0) != 0 &&
        message.rfind("client CA", 0) != 0)
      std::abort();
  }
  auto serial = tessera::tls::CertificateSerial(pem.cert);
  if (serial.ok() && serial->empty()) std::abort();
  return 0;
}
