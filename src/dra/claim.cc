// Reads a resource.k8s.io/v1 ResourceClaim from the API server: only what prepare needs
// (metadata namespace/name/uid, status.allocation.devices.results). Other fields of the object
// are the API server's business and are ignored; the fields read are type-checked and bounded.
#include <nlohmann/json.hpp>

#include "common/untrusted_text.h"
#include "dra/dra.h"

namespace tessera::dra {
namespace {

using nlohmann::json;

// Object names are DNS subdomains (≤ 253); request names "<request>/<subrequest>" ≤ 127.
constexpr size_t kMaxField = 253;

Result<std::string> StringField(const json& object, const char* key, const std::string& where,
                                bool required) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    if (required) return InvalidArgument(where + "." + key + ": required");
    return std::string();
  }
  if (!it->is_string()) return InvalidArgument(where + "." + key + ": want a string");
  const auto& s = it->get_ref<const std::string&>();
  if (s.size() > kMaxField) {
    return InvalidArgument(where + "." + key + ": longer than " + std::to_string(kMaxField) +
                           " bytes (" + Excerpt(s, 40) + ")");
  }
  if (required && s.empty()) return InvalidArgument(where + "." + key + ": empty");
  return s;
}

const json* ObjectField(const json& object, const char* key, const std::string& where,
                        Status* status) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  if (!it->is_object()) {
    *status = InvalidArgument(where + "." + key + ": want an object");
    return nullptr;
  }
  return &*it;
}

}  // namespace

Result<ResourceClaim> ParseResourceClaim(std::string_view text) {
  if (text.size() > kMaxClaimBytes) {
    return InvalidArgument("ResourceClaim: larger than " + std::to_string(kMaxClaimBytes) +
                           " bytes");
  }
  if (auto nesting = CheckJsonNesting(text, "ResourceClaim"); !nesting) return nesting.error();
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("ResourceClaim: not valid JSON");
  if (!doc.is_object()) return InvalidArgument("ResourceClaim: want a JSON object");
  ResourceClaim claim;
  Status status;
  const json* metadata = ObjectField(doc, "metadata", "ResourceClaim", &status);
  if (!status) return status.error();
  if (!metadata) return InvalidArgument("metadata: required");
  for (auto [key, out] : {std::pair{"namespace", &claim.namespace_name},
                          std::pair{"name", &claim.name}, std::pair{"uid", &claim.uid}}) {
    auto value = StringField(*metadata, key, "metadata", /*required=*/true);
    if (!value) return value.error();
    *out = std::move(*value);
  }
  const json* claim_status = ObjectField(doc, "status", "ResourceClaim", &status);
  if (!status) return status.error();
  if (!claim_status) return claim;
  const json* allocation = ObjectField(*claim_status, "allocation", "status", &status);
  if (!status) return status.error();
  if (!allocation) return claim;
  claim.allocated = true;
  const json* devices = ObjectField(*allocation, "devices", "status.allocation", &status);
  if (!status) return status.error();
  if (!devices) return claim;
  auto results = devices->find("results");
  if (results == devices->end() || results->is_null()) return claim;
  const std::string where = "status.allocation.devices.results";
  if (!results->is_array()) return InvalidArgument(where + ": want an array");
  if (results->size() > kMaxResults) {
    return InvalidArgument(where + ": more than " + std::to_string(kMaxResults) + " entries");
  }
  for (size_t i = 0; i < results->size(); ++i) {
    const json& entry = (*results)[i];
    std::string at = where + "[" + std::to_string(i) + "]";
    if (!entry.is_object()) return InvalidArgument(at + ": want an object");
    AllocationResult result;
    for (auto [key, out] :
         {std::pair{"request", &result.request}, std::pair{"driver", &result.driver},
          std::pair{"pool", &result.pool}, std::pair{"device", &result.device}}) {
      auto value = StringField(entry, key, at, /*required=*/true);
      if (!value) return value.error();
      *out = std::move(*value);
    }
    claim.results.push_back(std::move(result));
  }
  return claim;
}

}  // namespace tessera::dra
