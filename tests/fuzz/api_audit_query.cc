// GET /v1/audit query strings through the real handler path: Router::Admit and Router::Handle
// against a real Service (SQLite store holding audit records, null backend). The input is the
// query string (bytes a request target may hold). The admin gets 200 with at most `limit`
// well-formed records and a cursor past them, or a 400 naming the query (parameter); a tenant gets
// 403 whatever the query.
#include <unistd.h>

#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <nlohmann/json.hpp>
#include <string>

#include "api_harness.h"

namespace {

using namespace tessera;
namespace http = boost::beast::http;

using fuzzing::kAdminToken;
using fuzzing::kTenantToken;

fleet::AuditRecord SeedRecord(int i) {
  fleet::AuditRecord record;
  record.time_ms = 1700000000000 + i * 1000;
  record.token_id = i % 2 ? "admin" : "t-00000001";
  record.scope = i % 2 ? "admin" : "tenant";
  record.action = i % 3 ? "container.create" : "tenancy.put";
  record.object_kind = i % 3 ? "container" : "tenancy";
  record.object_id = "c-" + std::to_string(i);
  record.tenancy = i % 4 ? "alpha" : "beta";
  record.result = i % 5 ? "ok" : "invalid_argument";
  record.request_id = "r-seed-" + std::to_string(i);
  return record;
}

fuzzing::ApiHarness& Instance() {
  static fuzzing::ApiHarness* harness = [] {
    std::vector<fleet::Mutation> seed;
    for (int i = 0; i < 40; ++i)
      seed.push_back(SeedRecord(i));
    return fuzzing::MakeApiHarness("api-audit", std::move(seed));
  }();
  return *harness;
}

api::Response Get(const std::string& target, const char* token) {
  api::Request request{http::verb::get, target, 11};
  request.set(http::field::host, "x");
  request.set(http::field::authorization, std::string("Bearer ") + token);
  auto& router = *Instance().router;
  auto admission = router.Admit(request.base(), "");
  if (admission.answer) return std::move(*admission.answer);
  std::promise<api::Response> answered;
  auto answer = answered.get_future();
  router.Handle(std::move(request), admission.caller,
                [&answered](api::Response response) { answered.set_value(std::move(response)); });
  return answer.get();
}

void CheckRecords(const nlohmann::json& doc, size_t limit) {
  if (!doc.is_object() || !doc["records"].is_array()) __builtin_trap();
  const auto& records = doc["records"];
  if (records.size() > limit) __builtin_trap();
  int64_t last = 0;
  for (const auto& record : records) {
    if (!record.is_object() || !record["seq"].is_number_integer() ||
        !record["action"].is_string() || !record["request_id"].is_string())
      __builtin_trap();
    const int64_t seq = record["seq"].get<int64_t>();
    if (seq <= last) __builtin_trap();  // oldest first, each once
    last = seq;
  }
  if (doc.contains("next") &&
      (!doc["next"].is_number_integer() || doc["next"].get<int64_t>() != last))
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  std::string query(reinterpret_cast<const char*>(data), size);
  // Only bytes a request target may carry (Beast's parser refuses the rest before routing).
  for (unsigned char c : query)
    if (c <= 0x20 || c >= 0x7f || c == '#') return 0;
  const std::string target = "/v1/audit?" + query;
  api::Response admin = Get(target, kAdminToken);
  const int status = static_cast<int>(admin.result_int());
  if (admin[http::field::content_type] != "application/json") __builtin_trap();
  auto doc = nlohmann::json::parse(admin.body(), nullptr, false);
  if (doc.is_discarded()) __builtin_trap();
  if (status == 200) {
    CheckRecords(doc, fleet::AuditQuery::kMaxLimit);
  } else if (status == 400) {
    const auto& error = doc["error"];
    if (!error.is_object() || !error["message"].is_string()) __builtin_trap();
    const auto& message = error["message"].get_ref<const std::string&>();
    if (message.size() > 1024 || message.rfind("query", 0) != 0) __builtin_trap();
  } else {
    __builtin_trap();
  }
  if (Get(target, kTenantToken).result_int() != 403) __builtin_trap();
  return 0;
}
