// The node-local lease file. The control plane writes it atomically (temp file + rename), so a
// reader sees a whole old or a whole new file; a missing file means no leases.
#include <nlohmann/json.hpp>

#include "common/bounded_file.h"
#include "common/pci_address.h"
#include "common/untrusted_text.h"
#include "deviceplugin/deviceplugin.h"

namespace tessera::deviceplugin {
namespace {

constexpr LeaseState kStates[] = {
    LeaseState::kFree,     LeaseState::kReserved,    LeaseState::kActive,  LeaseState::kReleasing,
    LeaseState::kChecking, LeaseState::kQuarantined, LeaseState::kDraining};

}  // namespace

const char* LeaseStateName(LeaseState state) {
  switch (state) {
    case LeaseState::kFree:
      return "free";
    case LeaseState::kReserved:
      return "reserved";
    case LeaseState::kActive:
      return "active";
    case LeaseState::kReleasing:
      return "releasing";
    case LeaseState::kChecking:
      return "checking";
    case LeaseState::kQuarantined:
      return "quarantined";
    case LeaseState::kDraining:
      return "draining";
  }
  return "free";
}

Result<LeaseMap> ParseLeaseFile(std::string_view text) {
  if (auto nesting = CheckJsonNesting(text, "lease file"); !nesting) return nesting.error();
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("lease file: not valid JSON");
  if (!doc.is_object()) return InvalidArgument("lease file: want a JSON object");
  for (const auto& [key, value] : doc.items()) {
    if (key != "version" && key != "gpus") {
      return InvalidArgument(Excerpt(key, 40) + ": unknown field");
    }
  }
  if (!doc.contains("version") || !doc["version"].is_number_integer() ||
      doc["version"].get<int64_t>() != 1) {
    return InvalidArgument("version: want 1");
  }
  LeaseMap leases;
  if (!doc.contains("gpus")) return leases;
  const auto& gpus = doc["gpus"];
  if (!gpus.is_object()) return InvalidArgument("gpus: want an object keyed by PCI address");
  for (const auto& [pci, entry] : gpus.items()) {
    std::string where = "gpus." + Excerpt(pci, 40);
    if (!IsPciAddress(pci)) {
      return InvalidArgument(where + ": not a canonical PCI address (0000:18:00.0)");
    }
    if (!entry.is_object()) return InvalidArgument(where + ": want an object");
    Lease lease;
    bool has_state = false;
    for (const auto& [key, value] : entry.items()) {
      if (key != "state" && key != "reason" && key != "tenancy" && key != "claim") {
        return InvalidArgument(where + "." + Excerpt(key, 40) + ": unknown field");
      }
      if (!value.is_string()) return InvalidArgument(where + "." + key + ": want a string");
      const std::string& s = value.get_ref<const std::string&>();
      if (key == "state") {
        has_state = false;
        for (LeaseState state : kStates) {
          if (s == LeaseStateName(state)) {
            lease.state = state;
            has_state = true;
          }
        }
        if (!has_state) {
          return InvalidArgument(where + ".state: \"" + Excerpt(s, 40) +
                                 "\": want free, reserved, active, releasing, checking, "
                                 "quarantined or draining");
        }
      } else if (key == "reason") {
        lease.reason = s;
      } else if (key == "claim") {
        lease.claim = s;
      } else {
        lease.tenancy = s;
      }
    }
    if (!has_state) return InvalidArgument(where + ".state: required");
    leases[pci] = std::move(lease);
  }
  return leases;
}

Result<LeaseMap> ReadLeaseFile(const std::string& path) {
  auto text = ReadBoundedFile(path, kMaxStateFileBytes);
  if (!text) {
    if (text.error().category == ErrorCategory::kNotFound) return LeaseMap{};
    return text.error();
  }
  auto leases = ParseLeaseFile(*text);
  if (!leases) return leases.error().WithContext(path);
  return leases;
}

}  // namespace tessera::deviceplugin
