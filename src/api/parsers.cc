// Strict parsers of API bodies: text in, values out, every problem naming its field.
#include <algorithm>
#include <charconv>
#include <functional>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "api/api.h"
#include "api/ports_json.h"
#include "common/strict_json.h"
#include "common/untrusted_text.h"
#include "serve/faults.h"
#include "serve/queue.h"
#include "sharing/sharing.h"

namespace tessera::api {
namespace {

using nlohmann::json;

constexpr size_t kMaxArgs = 256;
constexpr size_t kMaxArg = 8192;
constexpr size_t kMaxEnv = 256;
constexpr size_t kMaxEnvValue = 32 * 1024;
// Everything a submission carries (image, command, env, volumes), counted in bytes: records are
// kept, listed and rendered, so one tenant must not make them arbitrarily large.
constexpr size_t kMaxSpecBytes = 256 * 1024;
constexpr size_t kMaxLabels = 64;
constexpr size_t kMaxLabelValue = 1024;
constexpr size_t kMaxExtensions = 64;
constexpr size_t kMaxExtensionBytes = 64 * 1024;

Result<json> ParseObject(std::string_view body, bool empty_is_object) {
  if (empty_is_object && body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return json::object();
  // Nesting bounded before parsing (no later walk over the value recurses far) and duplicate
  // keys refused at every depth: a body that says two things is not read as one of them.
  auto doc = ParseStrictJson(body, "body");
  if (!doc) return doc.error();
  if (!doc->is_object()) return InvalidArgument("body: must be a JSON object");
  return doc;
}

bool HasControl(std::string_view text) {
  for (unsigned char c : text)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

std::string CheckEnvName(std::string_view name) {
  if (name.empty()) return "must not be empty";
  if (!(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
    return "must start with a letter or '_'";
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      return "may contain only letters, digits and '_'";
  return "";
}

// An object of string keys: string values, or any JSON value kept as its text (`json_values`),
// each at most `max_value` bytes; at most `max_entries` keys.
Result<std::map<std::string, std::string>> StringMap(const json& value, const std::string& field,
                                                     bool json_values, size_t max_entries,
                                                     size_t max_value) {
  if (!value.is_object()) return InvalidArgument(field + ": must be an object");
  if (value.size() > max_entries)
    return InvalidArgument(field + ": more than " + std::to_string(max_entries) + " entries");
  std::map<std::string, std::string> out;
  for (const auto& [key, item] : value.items()) {
    if (key.empty() || key.size() > 253 || HasControl(key))
      return InvalidArgument(field + ": key \"" + Excerpt(key) +
                             "\" must be 1..253 printable characters");
    std::string text;
    if (json_values) {
      // Nesting is bounded by ParseObject, so this dump recurses at most kMaxJsonDepth deep.
      text = item.dump(-1, ' ', false, json::error_handler_t::replace);
    } else {
      if (!item.is_string()) return InvalidArgument(field + "." + key + ": must be a string");
      text = item.get<std::string>();
    }
    if (text.size() > max_value)
      return InvalidArgument(field + "." + key + ": longer than " + std::to_string(max_value) +
                             " bytes");
    out[key] = std::move(text);
  }
  return out;
}

size_t SpecBytes(const fleet::ContainerSpec& spec) {
  size_t bytes = spec.image.size() + spec.tenancy.size();
  for (const auto& arg : spec.command)
    bytes += arg.size() + 1;
  for (const auto& [name, value] : spec.env)
    bytes += name.size() + value.size() + 2;
  for (const auto& volume : spec.volumes)
    bytes += volume.name.size() + volume.mount_path.size() + 2;
  return bytes;
}

// {"profile": "1g.10gb", "count": N}: both required, nothing else.
Result<fleet::MigRequest> ParseMigRequest(const json& value) {
  if (!value.is_object())
    return InvalidArgument("mig: must be an object {\"profile\": \"1g.10gb\", \"count\": 1}");
  fleet::MigRequest mig;
  bool counted = false;
  for (const auto& [key, item] : value.items()) {
    if (key == "profile") {
      if (!item.is_string()) return InvalidArgument("mig.profile: must be a string");
      mig.profile = item.get<std::string>();
      if (auto problem = fleet::CheckMigProfileName(mig.profile); !problem.empty())
        return InvalidArgument("mig.profile: \"" + Excerpt(mig.profile) + "\" " + problem);
    } else if (key == "count") {
      auto count = JsonIntInRange(item, "mig.count", 1, fleet::kMaxMigSlicesPerContainer);
      if (!count) return count.error();
      mig.count = static_cast<int>(*count);
      counted = true;
    } else {
      return InvalidArgument("mig." + Excerpt(key) + ": unknown field (profile, count)");
    }
  }
  if (mig.profile.empty()) return InvalidArgument("mig.profile: required");
  if (!counted) return InvalidArgument("mig.count: required");
  return mig;
}

// {"memory": "20Gi", "compute": 25, "mode": "mps"|"timeslice", "mig": "3g.40gb"}: memory and
// compute required; `mig` makes it a share of a MIG slice of that profile.
Result<sharing::Share> ParseShareRequest(const json& value) {
  if (!value.is_object())
    return InvalidArgument("share: must be an object {\"memory\": \"20Gi\", \"compute\": 25}");
  sharing::Share share;
  bool memory = false, compute = false;
  for (const auto& [key, item] : value.items()) {
    if (key == "memory") {
      if (!item.is_string())
        return InvalidArgument("share.memory: must be a string such as \"20Gi\"");
      auto bytes = sharing::ParseMemory(item.get<std::string>());
      if (!bytes) return InvalidArgument("share." + bytes.error().message);
      share.memory_bytes = *bytes;
      memory = true;
    } else if (key == "compute") {
      if (!item.is_number_integer() || item.get<int64_t>() < 1 || item.get<int64_t>() > 100)
        return InvalidArgument("share.compute: must be a whole percentage from 1 to 100");
      share.compute_percent = static_cast<int>(item.get<int64_t>());
      compute = true;
    } else if (key == "mode") {
      if (!item.is_string()) return InvalidArgument("share.mode: want \"mps\" or \"timeslice\"");
      auto mode = sharing::ParseMode(item.get<std::string>());
      if (!mode) return mode.error().WithContext("share");
      share.mode = *mode;
    } else if (key == "mig") {
      if (!item.is_string())
        return InvalidArgument("share.mig: must be a MIG profile name such as \"3g.40gb\"");
      const std::string& profile = item.get_ref<const std::string&>();
      if (auto status = sharing::CheckMigProfile(profile); !status)
        return status.error().WithContext("share");
      share.mig_profile = profile;
    } else {
      return InvalidArgument("share." + Excerpt(key) +
                             ": unknown field (memory, compute, mode, mig)");
    }
  }
  if (!memory) return InvalidArgument("share.memory: required");
  if (!compute) return InvalidArgument("share.compute: required");
  return share;
}

// The fields of a container spec, one parser each: the value checked and set in the spec.
Status SpecImage(const json& value, fleet::ContainerSpec& spec) {
  if (!value.is_string()) return InvalidArgument("image: must be a string");
  spec.image = value.get<std::string>();
  if (auto problem = fleet::CheckImageReference(spec.image); !problem.empty())
    return InvalidArgument("image: \"" + Excerpt(spec.image) + "\" " + problem);
  return Ok();
}

Status SpecTenancy(const json& value, fleet::ContainerSpec& spec) {
  if (!value.is_string()) return InvalidArgument("tenancy: must be a string");
  spec.tenancy = value.get<std::string>();
  if (auto problem = fleet::CheckTenancyName(spec.tenancy); !problem.empty())
    return InvalidArgument("tenancy: \"" + Excerpt(spec.tenancy) + "\" " + problem);
  return Ok();
}

Status SpecGpus(const json& value, fleet::ContainerSpec& spec) {
  auto gpus = JsonIntInRange(value, "gpus", 0, fleet::kMaxGpusPerContainer);
  if (!gpus) return gpus.error();
  spec.gpus = static_cast<int>(*gpus);
  return Ok();
}

Status SpecIsolation(const json& value, fleet::ContainerSpec& spec) {
  if (!value.is_string()) return InvalidArgument("isolation: must be a string");
  auto isolation = fleet::ParseIsolation(value.get<std::string>());
  if (!isolation) return InvalidArgument("isolation: want \"runc\", \"gvisor\" or \"kata\"");
  spec.isolation = *isolation;
  return Ok();
}

Status SpecCommand(const json& value, fleet::ContainerSpec& spec) {
  if (!value.is_array()) return InvalidArgument("command: must be an array of strings");
  if (value.size() > kMaxArgs)
    return InvalidArgument("command: more than " + std::to_string(kMaxArgs) + " arguments");
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string())
      return InvalidArgument("command[" + std::to_string(i) + "]: must be a string");
    auto arg = value[i].get<std::string>();
    if (arg.size() > kMaxArg || arg.find('\0') != std::string::npos)
      return InvalidArgument("command[" + std::to_string(i) + "]: too long or contains NUL");
    spec.command.push_back(std::move(arg));
  }
  return Ok();
}

Status SpecEnv(const json& value, fleet::ContainerSpec& spec) {
  auto env = StringMap(value, "env", false, kMaxEnv, kMaxEnvValue);
  if (!env) return env.error();
  for (const auto& [name, text] : *env) {
    if (auto problem = CheckEnvName(name); !problem.empty())
      return InvalidArgument("env." + name + ": name " + problem);
    if (text.find('\0') != std::string::npos)
      return InvalidArgument("env." + name + ": contains NUL");
  }
  spec.env = std::move(*env);
  return Ok();
}

Status SpecNetwork(const json& value, fleet::ContainerSpec& spec) {
  auto network = tenancy::NetworkModeFromJson(value, "network");
  if (!network) return network.error();
  spec.network = *network;
  return Ok();
}

Status SpecVolumes(const json& value, fleet::ContainerSpec& spec) {
  auto volumes = tenancy::VolumeRequestsFromJson(value, "volumes");
  if (!volumes) return volumes.error();
  spec.volumes = std::move(*volumes);
  return Ok();
}

// The tenancy's maxPriority bounds it further when it is submitted.
Status SpecPriority(const json& value, fleet::ContainerSpec& spec) {
  auto priority =
      JsonIntInRange(value, "priority", scheduling::kMinPriority, scheduling::kMaxPriority);
  if (!priority) return priority.error();
  spec.priority = static_cast<int>(*priority);
  return Ok();
}

Status SpecMaxDuration(const json& value, fleet::ContainerSpec& spec) {
  auto limit = JsonIntInRange(value, "maxDurationSeconds", 1,
                              static_cast<int64_t>(scheduling::kMaxDurationLimitSeconds));
  if (!limit) return limit.error();
  spec.max_duration_s = *limit;
  return Ok();
}

Status SpecPreemptible(const json& value, fleet::ContainerSpec& spec) {
  if (!value.is_boolean()) return InvalidArgument("preemptible: must be true or false");
  spec.preemptible = value.get<bool>();
  return Ok();
}

Status SpecMig(const json& value, fleet::ContainerSpec& spec) {
  auto mig = ParseMigRequest(value);
  if (!mig) return mig.error();
  spec.mig = std::move(*mig);
  return Ok();
}

Status SpecShare(const json& value, fleet::ContainerSpec& spec) {
  auto share = ParseShareRequest(value);
  if (!share) return share.error();
  spec.share = *share;
  return Ok();
}

Status SpecPorts(const json& value, fleet::ContainerSpec& spec) {
  auto ports = ParsePortRequests(value);
  if (!ports) return ports.error();
  spec.ports = std::move(*ports);
  return Ok();
}

Status SpecReady(const json& value, fleet::ContainerSpec& spec) {
  auto probe = ParseReadinessProbe(value);
  if (!probe) return probe.error();
  spec.ready = std::move(*probe);
  return Ok();
}

struct SpecField {
  std::string_view name;
  Status (*parse)(const json& value, fleet::ContainerSpec& spec);
};

constexpr SpecField kSpecFields[] = {
    {"image", SpecImage},
    {"tenancy", SpecTenancy},
    {"gpus", SpecGpus},
    {"isolation", SpecIsolation},
    {"command", SpecCommand},
    {"env", SpecEnv},
    {"network", SpecNetwork},
    {"volumes", SpecVolumes},
    {"priority", SpecPriority},
    {"maxDurationSeconds", SpecMaxDuration},
    {"preemptible", SpecPreemptible},
    {"mig", SpecMig},
    {"share", SpecShare},
    {"ports", SpecPorts},
    {"ready", SpecReady},
};

// What the fields say together: the required ones, GPUs asked one way only, and the isolation
// each way runs with.
Status CheckSpecAsAWhole(const fleet::ContainerSpec& spec) {
  if (spec.image.empty()) return InvalidArgument("image: required");
  if (spec.tenancy.empty()) return InvalidArgument("tenancy: required");
  if (spec.mig.count > 0) {
    if (spec.gpus > 0) return InvalidArgument("mig: asks for MIG slices instead of gpus, not both");
    // gVisor's nvproxy cannot pass MIG devices through; a Kata VM takes whole GPUs by VFIO.
    if (spec.isolation != fleet::Isolation::kRunc)
      return InvalidArgument(std::string("mig: MIG slices run with isolation runc only, not ") +
                             fleet::IsolationName(spec.isolation));
  }
  if (spec.share) {
    if (spec.gpus > 0)
      return InvalidArgument("share: asks for a share of one GPU instead of gpus, not both");
    if (spec.mig.count > 0)
      return InvalidArgument("share: asks for a share of one GPU, not MIG slices too");
    // A Kata VM takes whole GPUs by VFIO; gVisor is decided by the backend (its nvproxy must
    // carry MPS), see Submissions::Submit.
    if (spec.isolation == fleet::Isolation::kKata)
      return InvalidArgument(
          "share: shares run with isolation runc (or gvisor with nvproxy MPS), not kata");
  }
  if (auto ports = CheckPortsOfSpec(spec); !ports) return ports;
  if (auto bytes = SpecBytes(spec); bytes > kMaxSpecBytes)
    return InvalidArgument("body: image, command, env and volumes add up to " +
                           std::to_string(bytes) + " bytes, more than " +
                           std::to_string(kMaxSpecBytes));
  return Ok();
}

}  // namespace

Result<fleet::ContainerSpec> ParseContainerSpec(std::string_view body) {
  auto parsed = ParseObject(body, false);
  if (!parsed) return parsed.error();
  fleet::ContainerSpec spec;
  for (const auto& item : parsed->items()) {
    // Named, not a structured binding: clang 14 (the fuzz build) cannot capture those.
    const std::string& key = item.key();
    const auto& value = item.value();
    const auto field = std::find_if(std::begin(kSpecFields), std::end(kSpecFields),
                                    [&key](const SpecField& f) { return f.name == key; });
    if (field == std::end(kSpecFields)) {
      return InvalidArgument(Excerpt(key) +
                             ": unknown field (image, tenancy, gpus, mig, share, isolation, "
                             "command, env, network, volumes, priority, maxDurationSeconds, "
                             "preemptible, ports, ready)");
    }
    if (auto set = field->parse(value, spec); !set) return set.error();
  }
  if (auto whole = CheckSpecAsAWhole(spec); !whole) return whole.error();
  return spec;
}

Result<fleet::Tenancy> ParseTenancy(std::string_view name, std::string_view body) {
  fleet::Tenancy tenancy;
  tenancy.name = std::string(name);
  if (auto problem = fleet::CheckTenancyName(name); !problem.empty())
    return InvalidArgument("name: \"" + Excerpt(name) + "\" " + problem);
  auto parsed = ParseObject(body, true);
  if (!parsed) return parsed.error();
  json policy = json::object();
  std::optional<std::string> rate_limit;
  for (const auto& [key, value] : parsed->items()) {
    if (key == "quota" || key == "weight" || key == "maxPriority") {
      policy[key] = value;
    } else if (key == "rateLimit") {
      // null: back to the service's --rate-limit; kept as "null" so the stored one is replaced.
      if (value.is_null()) {
        rate_limit = "null";
        continue;
      }
      auto limit = serve::ParseRateLimit(value.dump());
      if (!limit) return limit.error();
      rate_limit = serve::RateLimitToJson(*limit);
    } else if (key == "requeueOnGpuFault") {
      // Its requests a GPU fault stops are submitted again (docs/faults.md).
      if (!value.is_boolean()) return InvalidArgument("requeueOnGpuFault: must be true or false");
      tenancy.extensions[std::string(serve::kFaultPolicyExtension)] =
          serve::FaultPolicyToJson(value.get<bool>());
    } else if (key == "labels") {
      auto labels = StringMap(value, "labels", false, kMaxLabels, kMaxLabelValue);
      if (!labels) return labels.error();
      tenancy.labels = std::move(*labels);
    } else if (key == "extensions") {
      auto extensions = StringMap(value, "extensions", true, kMaxExtensions, kMaxExtensionBytes);
      if (!extensions) return extensions.error();
      if (extensions->count(std::string(serve::kSchedulingExtension)))
        return InvalidArgument("extensions.scheduling: set quota, weight and maxPriority instead");
      if (extensions->count(std::string(serve::kRateLimitExtension)))
        return InvalidArgument("extensions.rateLimit: set rateLimit instead");
      if (extensions->count(std::string(serve::kFaultPolicyExtension)))
        return InvalidArgument("extensions.faults: set requeueOnGpuFault instead");
      // Set beside them (requeueOnGpuFault may come first).
      for (auto& [extension, text] : tenancy.extensions)
        extensions->emplace(extension, std::move(text));
      tenancy.extensions = std::move(*extensions);
    } else if (key == "name") {
      if (!value.is_string() || value.get<std::string>() != name)
        return InvalidArgument("name: must match the name in the path");
    } else {
      return InvalidArgument(
          Excerpt(key) +
          ": unknown field (labels, extensions, quota, weight, maxPriority, rateLimit, "
          "requeueOnGpuFault)");
    }
  }
  if (rate_limit) tenancy.extensions[std::string(serve::kRateLimitExtension)] = *rate_limit;
  // The scheduling policy is set whole when any of its fields is given (the others take their
  // defaults); a body without any keeps the stored one.
  if (!policy.empty()) {
    auto parsed_policy = serve::ParseTenancyPolicy(policy.dump());
    if (!parsed_policy) return parsed_policy.error();
    tenancy.extensions[std::string(serve::kSchedulingExtension)] =
        serve::TenancyPolicyToJson(*parsed_policy);
  }
  return tenancy;
}

Result<std::string> ParseGpuActionBody(std::string_view body) {
  auto parsed = ParseObject(body, true);
  if (!parsed) return parsed.error();
  std::string reason;
  for (const auto& [key, value] : parsed->items()) {
    if (key != "reason") return InvalidArgument(Excerpt(key) + ": unknown field (reason)");
    if (!value.is_string()) return InvalidArgument("reason: must be a string");
    reason = value.get<std::string>();
    if (reason.size() > 1024) return InvalidArgument("reason: longer than 1024 characters");
  }
  return reason;
}

Result<serve::TokenRequest> ParseTokenRequest(std::string_view body,
                                              fleet::TokenScope default_scope) {
  auto parsed = ParseObject(body, true);
  if (!parsed) return parsed.error();
  serve::TokenRequest request;
  request.scope = default_scope;
  for (const auto& [key, value] : parsed->items()) {
    if (key == "scope") {
      if (!value.is_string()) return InvalidArgument("scope: must be a string");
      auto scope = fleet::ParseTokenScope(value.get<std::string>());
      if (!scope) return InvalidArgument("scope: want tenant, read-only or metrics");
      request.scope = *scope;
    } else if (key == "expiresInSeconds") {
      auto seconds =
          JsonIntInRange(value, "expiresInSeconds", 1, serve::TokenRequest::kMaxExpiresInSeconds);
      if (!seconds) return seconds.error();
      request.expires_in_s = *seconds;
    } else {
      return InvalidArgument(Excerpt(key) + ": unknown field (scope, expiresInSeconds)");
    }
  }
  return request;
}

Status ParseEmptyBody(std::string_view body) {
  auto parsed = ParseObject(body, true);
  if (!parsed) return parsed.error();
  if (!parsed->empty())
    return InvalidArgument(Excerpt(parsed->begin().key()) +
                           ": unknown field (this endpoint takes none)");
  return Ok();
}

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// application/x-www-form-urlencoded value: %XX escapes and '+' for space.
Result<std::string> PercentDecode(std::string_view text, const std::string& field) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out.push_back(' ');
    } else if (text[i] == '%') {
      int high = i + 2 < text.size() ? HexDigit(text[i + 1]) : -1;
      int low = i + 2 < text.size() ? HexDigit(text[i + 2]) : -1;
      if (high < 0 || low < 0) return InvalidArgument(field + ": bad percent escape");
      out.push_back(static_cast<char>(high * 16 + low));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  if (HasControl(out)) return InvalidArgument(field + ": control characters");
  return out;
}

// Every NAME=VALUE of a query string, percent-decoded, each name at most once: `each` is called
// with the name, the value and how errors name the parameter.
Status ForEachQueryParameter(
    std::string_view query,
    const std::function<Status(const std::string&, std::string&, const std::string&)>& each) {
  std::set<std::string> seen;
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    auto name = PercentDecode(pair.substr(0, eq), "query");
    if (!name) return name.error();
    const std::string field = "query parameter " + Excerpt(*name, 40);
    if (eq == std::string_view::npos) return InvalidArgument(field + ": want NAME=VALUE");
    auto value = PercentDecode(pair.substr(eq + 1), field);
    if (!value) return value.error();
    if (!seen.insert(*name).second) return InvalidArgument(field + ": given more than once");
    if (auto status = each(*name, *value, field); !status) return status;
  }
  return Ok();
}

}  // namespace

Result<std::string> ParseTokenListQuery(std::string_view query) {
  std::string tenancy;
  auto parsed = ForEachQueryParameter(
      query,
      [&tenancy](const std::string& name, std::string& value, const std::string& field) -> Status {
        if (name != "tenancy") return InvalidArgument(field + ": unknown (tenancy)");
        if (auto problem = fleet::CheckTenancyName(value); !problem.empty())
          return InvalidArgument(field + ": \"" + Excerpt(value, 40) + "\" " + problem);
        tenancy = std::move(value);
        return Ok();
      });
  if (!parsed) return parsed.error();
  return tenancy;
}

Result<serve::ContainerQuery> ParseContainerQuery(std::string_view query) {
  serve::ContainerQuery out;
  auto parsed = ForEachQueryParameter(
      query,
      [&out](const std::string& name, std::string& value, const std::string& field) -> Status {
        if (name == "limit") {
          size_t limit = 0;
          const char* end = value.data() + value.size();
          auto [ptr, ec] = std::from_chars(value.data(), end, limit);
          if (ec != std::errc() || ptr != end || limit < 1 ||
              limit > serve::ContainerQuery::kMaxLimit)
            return InvalidArgument(field + ": want a whole number from 1 to " +
                                   std::to_string(serve::ContainerQuery::kMaxLimit));
          out.limit = limit;
        } else if (name == "after") {
          if (value.empty() || value.size() > 64) return InvalidArgument(field + ": want an ID");
          out.after = std::move(value);
        } else if (name == "order") {
          if (value != "asc" && value != "desc")
            return InvalidArgument(field + ": want asc or desc");
          out.newest_first = value == "desc";
        } else if (name == "state") {
          std::string_view list = value;
          while (true) {
            auto comma = list.find(',');
            auto state = fleet::ParseContainerState(list.substr(0, comma));
            if (!state)
              return InvalidArgument(field + ": state \"" + Excerpt(list.substr(0, comma), 20) +
                                     "\" is unknown (pending, running, exited, failed)");
            out.states.push_back(*state);
            if (comma == std::string_view::npos) break;
            list = list.substr(comma + 1);
          }
        } else if (name == "tenancy") {
          if (auto problem = fleet::CheckTenancyName(value); !problem.empty())
            return InvalidArgument(field + ": " + problem);
          out.tenancy = std::move(value);
        } else {
          return InvalidArgument(field + ": unknown (known: limit, after, order, state, tenancy)");
        }
        return Ok();
      });
  if (!parsed) return parsed.error();
  return out;
}

Result<LogQuery> ParseLogQuery(std::string_view query) {
  LogQuery out;
  auto parsed = ForEachQueryParameter(
      query,
      [&out](const std::string& name, std::string& value, const std::string& field) -> Status {
        uint64_t number = 0;
        const char* end = value.data() + value.size();
        auto [ptr, ec] = std::from_chars(value.data(), end, number);
        const bool whole = ec == std::errc() && ptr == end && !value.empty();
        if (name == "tail") {
          if (!whole || number < 1 || number > LogQuery::kMaxTail)
            return InvalidArgument(field + ": want a whole number of lines from 1 to " +
                                   std::to_string(LogQuery::kMaxTail));
          out.tail = static_cast<size_t>(number);
        } else if (name == "offset") {
          if (!whole || number > LogQuery::kMaxOffset)
            return InvalidArgument(field + ": want a byte offset from 0 to " +
                                   std::to_string(LogQuery::kMaxOffset) +
                                   " (the last answer's Tessera-Log-Offset)");
          out.offset = number;
        } else {
          return InvalidArgument(field + ": unknown (known: tail, offset)");
        }
        return Ok();
      });
  if (!parsed) return parsed.error();
  return out;
}

Status ParseNoQuery(std::string_view query) {
  return ForEachQueryParameter(
      query, [](const std::string&, std::string&, const std::string& field) -> Status {
        return InvalidArgument(field + ": unknown (this endpoint takes none)");
      });
}

Result<serve::UsageQuery> ParseUsageQuery(std::string_view query) {
  // Up to the end of year 9999: later times are typing mistakes, and ms must not overflow.
  constexpr int64_t kMaxTime = 253402300799;
  serve::UsageQuery out;
  auto parsed = ForEachQueryParameter(
      query,
      [&out](const std::string& name, std::string& value, const std::string& field) -> Status {
        if (name != "from" && name != "to" && name != "step")
          return InvalidArgument(field + ": unknown (known: from, to, step)");
        int64_t time = -1;
        const char* end = value.data() + value.size();
        auto [ptr, ec] = std::from_chars(value.data(), end, time);
        if (name == "step") {
          if (ec != std::errc() || ptr != end || time < serve::UsageQuery::kMinStep ||
              time > serve::UsageQuery::kMaxStep)
            return InvalidArgument(field + ": want whole seconds from " +
                                   std::to_string(serve::UsageQuery::kMinStep) + " to " +
                                   std::to_string(serve::UsageQuery::kMaxStep));
          out.step_s = time;
          return Ok();
        }
        if (ec != std::errc() || ptr != end || time < 0 || time > kMaxTime)
          return InvalidArgument(field + ": want Unix time in whole seconds from 0 to " +
                                 std::to_string(kMaxTime));
        if (name == "from") {
          out.from_s = time;
        } else {
          out.to_s = time;
        }
        return Ok();
      });
  if (!parsed) return parsed.error();
  if (out.to_s && *out.to_s < out.from_s) return InvalidArgument("query parameter to: before from");
  if (out.step_s > 0 && out.to_s &&
      (*out.to_s - out.from_s) / out.step_s >= static_cast<int64_t>(serve::UsageQuery::kMaxBuckets))
    return InvalidArgument("query parameter step: more than " +
                           std::to_string(serve::UsageQuery::kMaxBuckets) +
                           " buckets in the window");
  return out;
}

namespace {

// An audit action's shape: dot-separated words of [a-z_] ("container.create"), at most 64.
bool IsAuditAction(std::string_view action) {
  if (action.empty() || action.size() > 64 || action.front() == '.' || action.back() == '.')
    return false;
  for (size_t i = 0; i < action.size(); ++i) {
    const char c = action[i];
    if (c == '.' && action[i - 1] == '.') return false;
    if (!(c >= 'a' && c <= 'z') && c != '_' && c != '.') return false;
  }
  return true;
}

// A whole number within [low, high], or the field's error saying what it wants.
Result<int64_t> BoundedNumber(const std::string& value, const std::string& field, int64_t low,
                              int64_t high, const std::string& want) {
  int64_t number = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, number);
  if (ec != std::errc() || ptr != end || number < low || number > high)
    return InvalidArgument(field + ": want " + want);
  return number;
}

}  // namespace

Result<fleet::AuditQuery> ParseAuditQuery(std::string_view query) {
  // Up to the end of year 9999, as the usage report's times.
  constexpr int64_t kMaxTime = 253402300799;
  fleet::AuditQuery out;
  auto parsed = ForEachQueryParameter(
      query,
      [&out](const std::string& name, std::string& value, const std::string& field) -> Status {
        const std::string times =
            "Unix time in whole seconds from 0 to " + std::to_string(kMaxTime);
        if (name == "limit") {
          auto limit = BoundedNumber(
              value, field, 1, fleet::AuditQuery::kMaxLimit,
              "a whole number from 1 to " + std::to_string(fleet::AuditQuery::kMaxLimit));
          if (!limit) return limit.error();
          out.limit = static_cast<size_t>(*limit);
        } else if (name == "after") {
          auto after = BoundedNumber(value, field, 0, std::numeric_limits<int64_t>::max(),
                                     "a record's sequence number (the previous page's next)");
          if (!after) return after.error();
          out.after = *after;
        } else if (name == "tenancy") {
          if (auto problem = fleet::CheckTenancyName(value); !problem.empty())
            return InvalidArgument(field + ": " + problem);
          out.tenancy = std::move(value);
        } else if (name == "action") {
          if (!IsAuditAction(value))
            return InvalidArgument(field + ": want an action such as container.create");
          out.action = std::move(value);
        } else if (name == "from" || name == "to") {
          auto time = BoundedNumber(value, field, 0, kMaxTime, times);
          if (!time) return time.error();
          (name == "from" ? out.from_ms : out.to_ms) = *time * 1000;
        } else {
          return InvalidArgument(field +
                                 ": unknown (known: limit, after, tenancy, action, from, to)");
        }
        return Ok();
      });
  if (!parsed) return parsed.error();
  if (out.from_ms && out.to_ms && *out.to_ms < *out.from_ms)
    return InvalidArgument("query parameter to: before from");
  return out;
}

Result<DashboardQuery> ParseDashboardQuery(std::string_view query) {
  DashboardQuery out;
  auto parsed = ForEachQueryParameter(
      query,
      [&out](const std::string& name, std::string& value, const std::string& field) -> Status {
        if (name == "usage") {
          if (auto problem = fleet::CheckTenancyName(value); !problem.empty())
            return InvalidArgument(field + ": " + problem);
          out.usage_tenancy = value;
          return Ok();
        }
        if (name == "range") {
          if (value == "hour") {
            out.window_s = 3600;
            out.step_s = 60;
          } else if (value == "day") {
            out.window_s = 86400;
            out.step_s = 900;
          } else {
            return InvalidArgument(field + ": want hour or day");
          }
          return Ok();
        }
        return InvalidArgument(field + ": unknown (known: usage, range)");
      });
  if (!parsed) return parsed.error();
  return out;
}

Result<std::pair<std::string, uint16_t>> ParseListen(std::string_view listen) {
  auto colon = listen.rfind(':');
  if (colon == std::string_view::npos)
    return InvalidArgument("--listen " + Excerpt(listen) + ": want HOST:PORT");
  std::string host(listen.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  std::string port_text(listen.substr(colon + 1));
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument("--listen " + Excerpt(listen) + ": port must be 0..65535");
  int port = std::stoi(port_text);
  if (port > 65535)
    return InvalidArgument("--listen " + Excerpt(listen) + ": port must be 0..65535");
  return std::make_pair(host, static_cast<uint16_t>(port));
}

}  // namespace tessera::api
