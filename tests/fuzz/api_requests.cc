// Whole requests to `tessera serve`: raw HTTP bytes through Beast's request parser (the limits
// the server sets), then Router::Admit on the header and Router::Handle with the body, against a
// real Service (SQLite store, null backend). Every answer is built, so a value that crashes when
// rendered into an error message (deep nesting, huge strings) is caught here, not only in the
// body parsers.
//
// Tokens are fixed so the corpus can use them: "Bearer fuzz-admin-token-0123456789abcdef" is the
// admin, "Bearer fuzz-tenant-token-0123456789abcdef" acts for tenancy "alpha".
#include <unistd.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <string>

#include "api_harness.h"

namespace {

using namespace tessera;
namespace http = boost::beast::http;

using fuzzing::kAdminToken;
using fuzzing::kTenantToken;

fuzzing::ApiHarness& Instance() {
  static fuzzing::ApiHarness* harness = fuzzing::MakeApiHarness("api-requests");
  return *harness;
}

// An error answer must be a JSON error object whose message is short: nothing a caller sent
// comes back whole.
void CheckAnswer(const api::Response& response) {
  const int status = static_cast<int>(response.result_int());
  if (status < 200 || status > 599) __builtin_trap();
  if (status < 400) return;
  auto doc = nlohmann::json::parse(response.body(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("error")) __builtin_trap();
  const auto& error = doc["error"];
  if (!error.is_object() || !error["message"].is_string() || !error["code"].is_string())
    __builtin_trap();
  if (error["message"].get_ref<const std::string&>().size() > 1024) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzzing::ApiHarness& harness = Instance();
  http::request_parser<http::string_body> parser;
  parser.eager(true);
  parser.header_limit(16 * 1024);
  parser.body_limit(1 << 20);
  boost::beast::error_code error;
  size_t used = 0;
  while (used < size && !parser.is_done()) {
    size_t n = parser.put(boost::asio::buffer(data + used, size - used), error);
    if (error == http::error::need_more) break;
    if (error) return 0;  // the server answers 400/413/431 and closes; nothing reaches the router
    if (n == 0) break;
    used += n;
  }
  if (!parser.is_header_done()) return 0;
  auto admission = harness.router->Admit(parser.get(), "");
  if (admission.answer) {
    CheckAnswer(*admission.answer);
    return 0;
  }
  if (!parser.is_done()) {
    parser.put_eof(error);
    if (error) return 0;
  }
  std::promise<api::Response> answered;
  auto answer = answered.get_future();
  harness.router->Handle(parser.release(), admission.caller, [&answered](api::Response response) {
    answered.set_value(std::move(response));
  });
  CheckAnswer(answer.get());
  return 0;
}
