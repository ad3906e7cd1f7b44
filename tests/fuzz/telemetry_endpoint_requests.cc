// Whole requests to the node agent's endpoint: raw HTTP bytes through the request parser with
// the limits the server sets (LimitEndpointParser), then AnswerEndpointRequest with a real token
// file, as the server runs them. Whatever the bytes: an answer is 200, 401, 404 or 405; a
// protected path answered 200 only for bytes that carry the token; nothing of the request comes
// back in the answer.
//
// The token is fixed so the corpus can use it: "Authorization: Bearer fuzz-node-token-0123456789".
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "telemetry/endpoint_http.h"

namespace {

using namespace tessera::telemetry;

constexpr char kToken[] = "fuzz-node-token-0123456789";

TokenFile& Token() {
  static TokenFile* token = [] {
    char dir_template[] = "/tmp/fuzz-node-endpoint-XXXXXX";
    const std::string path = std::string(::mkdtemp(dir_template)) + "/token";
    std::ofstream(path) << kToken << "\n";
    auto opened = TokenFile::Open(path);
    if (!opened) std::abort();
    return opened->release();
  }();
  return *token;
}

// The node agent's paths, with bodies of its own: an answer that held request bytes would show.
EndpointResponse Handle(std::string_view path) {
  if (path == "/metrics") return {200, "text/plain; version=0.0.4", "DCGM_FI_DEV_GPU_UTIL 1\n"};
  if (path == "/v1/telemetry") return {200, "application/json", R"({"time_ms":0,"gpus":[]})"};
  if (path == "/healthz") return {200, "text/plain", "ok\n"};
  return {404, "text/plain", "not found\n"};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> kOpen = {"/healthz"};
  EndpointRequestParser parser;
  LimitEndpointParser(parser);
  boost::beast::error_code error;
  size_t used = 0;
  while (used < size && !parser.is_done()) {
    size_t n = parser.put(boost::asio::buffer(data + used, size - used), error);
    if (error) return 0;  // incomplete, too large or malformed: the server closes, unanswered
    if (n == 0) break;
    used += n;
  }
  if (!parser.is_done()) return 0;
  const EndpointReply reply = AnswerEndpointRequest(parser.get(), &Token(), kOpen, Handle);
  const int status = reply.result_int();
  if (status != 200 && status != 401 && status != 404 && status != 405) __builtin_trap();
  std::string_view target(parser.get().target().data(), parser.get().target().size());
  std::string_view path = target.substr(0, target.find('?'));
  const std::string_view raw(reinterpret_cast<const char*>(data), size);
  if (status == 200 && path != "/healthz" && raw.find(kToken) == std::string_view::npos)
    __builtin_trap();
  if (reply.body().size() > 64) __builtin_trap();
  if (reply.keep_alive()) __builtin_trap();
  return 0;
}
