#include "backends/kubernetes/state_objects.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "backends/kubernetes/objects.h"
#include "scheduling/scheduling.h"

namespace tessera::k8s {
namespace {

constexpr size_t kMaxField = 4096;          // any one string read back from an object
constexpr size_t kMaxItems = 256;           // command, env, volumes, gpus
constexpr size_t kMaxGpuEntry = 64u << 10;  // one GPU's record (JSON text) in its ConfigMap

const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64(const std::string& in) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    unsigned v =
        (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63],
            kAlphabet[v & 63]};
  }
  if (i + 1 == in.size()) {
    unsigned v = (unsigned char)in[i] << 16;
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], '='};
  }
  return out;
}

Result<std::string> Unbase64(const std::string& in, const std::string& field) {
  if (in.size() > kMaxField) return InvalidArgument(field + ": too long");
  std::string out;
  unsigned bits = 0;
  int count = 0;
  for (char c : in) {
    if (c == '=') break;
    const char* at = std::strchr(kAlphabet, c);
    if (!at || c == '\0') return InvalidArgument(field + ": not base64");
    bits = bits << 6 | unsigned(at - kAlphabet);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += char((bits >> count) & 0xff);
    }
  }
  return out;
}

// RFC 3339 seconds (the CRD's date-time) from Unix milliseconds, and back; 0 = absent.
std::string Rfc3339(int64_t ms) {
  std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[96];  // room for any int year, which -Wformat-truncation counts
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(ms % 1000));
  return text;
}

Result<int64_t> UnixMs(const Json& object, const std::string& key, const std::string& field) {
  if (!object.contains(key)) return int64_t{0};
  if (!object[key].is_string()) return InvalidArgument(field + ": not a string");
  const std::string text = object[key];
  std::tm utc{};
  int millis = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &utc.tm_year, &utc.tm_mon,
                  &utc.tm_mday, &utc.tm_hour, &utc.tm_min, &utc.tm_sec, &millis) < 6)
    return InvalidArgument(field + ": not an RFC 3339 time");
  utc.tm_year -= 1900;
  utc.tm_mon -= 1;
  const int64_t ms = static_cast<int64_t>(timegm(&utc)) * 1000 + millis;
  // Only the form this control plane writes: anything else (out-of-range fields, other zones,
  // times before 1970) is not one of its objects.
  if (ms < 0 || Rfc3339(ms) != text) return InvalidArgument(field + ": not a time tessera wrote");
  return ms;
}

// A bounded string field; absent = "".
Result<std::string> Text(const Json& object, const std::string& key, const std::string& field) {
  if (!object.is_object() || !object.contains(key)) return std::string();
  const Json& value = object[key];
  if (!value.is_string()) return InvalidArgument(field + ": not a string");
  if (value.get_ref<const std::string&>().size() > kMaxField)
    return InvalidArgument(field + ": longer than " + std::to_string(kMaxField) + " bytes");
  return value.get<std::string>();
}

}  // namespace

Result<fleet::MeasuredUsage> MeasuredOf(const Json& object, const std::string& key,
                                        const std::string& field) {
  fleet::MeasuredUsage out;
  if (!object.is_object() || !object.contains(key)) return out;
  const Json& value = object[key];
  if (!value.is_object()) return InvalidArgument(field + ": not an object");
  for (auto [name, target] : {std::pair<const char*, double*>{"smSeconds", &out.sm_seconds},
                              {"memoryGibSeconds", &out.memory_gib_seconds},
                              {"energyJoules", &out.energy_joules}}) {
    if (!value.contains(name)) continue;
    const Json& number = value[name];
    if (!number.is_number() || !std::isfinite(number.get<double>()) || number.get<double>() < 0)
      return InvalidArgument(field + "." + name + ": want a number not below 0");
    *target = number.get<double>();
  }
  return out;
}

namespace {

Json MeasuredJson(const fleet::MeasuredUsage& measured) {
  return {{"smSeconds", measured.sm_seconds},
          {"memoryGibSeconds", measured.memory_gib_seconds},
          {"energyJoules", measured.energy_joules}};
}

Result<std::vector<std::string>> Texts(const Json& object, const std::string& key,
                                       const std::string& field) {
  std::vector<std::string> out;
  if (!object.contains(key)) return out;
  const Json& value = object[key];
  if (!value.is_array() || value.size() > kMaxItems)
    return InvalidArgument(field + ": want an array of at most " + std::to_string(kMaxItems));
  for (const auto& item : value) {
    if (!item.is_string() || item.get_ref<const std::string&>().size() > kMaxField)
      return InvalidArgument(field + ": want bounded strings");
    out.push_back(item);
  }
  return out;
}

// spec.ports [{containerPort, protocol, name}] and spec.ready {httpGet: {path, port}}, when asked.
void AddPortsJson(const fleet::ContainerRecord& c, Json& spec) {
  if (!c.spec.ports.empty()) {
    Json ports = Json::array();
    for (const auto& p : c.spec.ports) {
      Json port = {{"containerPort", p.container_port}, {"protocol", p.protocol}};
      if (!p.name.empty()) port["name"] = p.name;
      ports.push_back(port);
    }
    spec["ports"] = ports;
  }
  if (c.spec.ready)
    spec["ready"] = {{"httpGet", {{"path", c.spec.ready->path}, {"port", c.spec.ready->port}}}};
}

// status.ports [{containerPort, protocol, name, hostAddress, hostPort}] (where each is reached,
// once known) and status.ready.
void AddPublishedJson(const fleet::ContainerRecord& c, Json& status) {
  if (!c.published.empty()) {
    Json ports = Json::array();
    for (const auto& p : c.published) {
      Json port = {{"containerPort", p.container_port}, {"protocol", p.protocol}};
      if (!p.name.empty()) port["name"] = p.name;
      if (!p.host_address.empty()) port["hostAddress"] = p.host_address;
      if (p.host_port != 0) port["hostPort"] = p.host_port;
      ports.push_back(port);
    }
    status["ports"] = ports;
  }
  if (c.ready) status["ready"] = *c.ready;
}

}  // namespace

std::string IdempotentContainerId(const std::string& tenancy_uid, const std::string& key) {
  return fleet::IdempotentContainerId(tenancy_uid, key);
}

Json GpuContainerObject(const fleet::ContainerRecord& c) {
  Json volumes = Json::array();
  for (const auto& v : c.spec.volumes) {
    Json volume = {{"name", v.name}, {"mountPath", v.mount_path}};
    if (v.read_only) volume["readOnly"] = *v.read_only;
    volumes.push_back(volume);
  }
  Json labels = {{kManagedBy, "tessera"}, {kTenancyLabel, c.spec.tenancy}};
  // Label values hold 63 characters: the key's hash, for finding the object by its key.
  if (!c.idempotency_key.empty())
    labels[kIdempotencyLabel] = fleet::Sha256Hex(c.idempotency_key).substr(0, 32);
  Json spec = {{"id", c.id},
               {"tenancy", c.spec.tenancy},
               {"tenancyUid", c.tenancy_uid},
               {"image", c.spec.image},
               {"gpus", c.spec.gpus},
               {"isolation", fleet::IsolationName(c.spec.isolation)},
               {"network", tenancy::NetworkModeName(c.spec.network)},
               {"command", c.spec.command},
               {"env", c.spec.env},
               {"volumes", volumes},
               {"stopRequested", c.stop_requested},
               {"createdTime", Rfc3339(c.created_ms)}};
  if (!c.idempotency_key.empty()) spec["idempotencyKey"] = c.idempotency_key;
  // Scheduling fields only when set, as the embedded store keeps them.
  if (c.spec.priority != 0) spec["priority"] = c.spec.priority;
  if (c.spec.max_duration_s > 0) spec["maxDurationSeconds"] = c.spec.max_duration_s;
  if (c.spec.preemptible) spec["preemptible"] = true;
  AddPortsJson(c, spec);
  Json status = {
      {"state", fleet::ContainerStateName(c.state)}, {"started", c.started}, {"gpus", c.gpus}};
  if (c.exit_code) status["exitCode"] = *c.exit_code;
  if (!c.reason.empty()) status["reason"] = c.reason;
  if (c.started_ms) status["startedTime"] = Rfc3339(c.started_ms);
  if (c.finished_ms) status["finishedTime"] = Rfc3339(c.finished_ms);
  if (c.measured) status["measured"] = MeasuredJson(*c.measured);
  AddPublishedJson(c, status);
  // The node is the GPUs' ("<PCI>@<node>"); the claim is the GpuLease the backend creates.
  if (!c.gpus.empty()) {
    const auto at = c.gpus.front().find('@');
    if (at != std::string::npos) status["node"] = c.gpus.front().substr(at + 1);
    status["claim"] = "lease-tessera-" + c.id;
  }
  return {{"apiVersion", std::string(kGroup) + "/" + kVersion},
          {"kind", "GpuContainer"},
          {"metadata", {{"name", c.id}, {"labels", labels}}},
          {"spec", spec},
          {"status", status}};
}

namespace {

std::string ContainerField(const char* name) {
  return std::string("GpuContainer ") + name;
}

#define TESSERA_TAKE(target, expr)    \
  {                                   \
    auto taken = (expr);              \
    if (!taken) return taken.error(); \
    target = std::move(*taken);       \
  }

// What the tenant submitted: identity, image, GPUs, isolation, network, command, env, volumes.
Status ReadSubmittedSpec(const Json& spec, fleet::ContainerRecord& c) {
  TESSERA_TAKE(c.id, Text(spec, "id", ContainerField("spec.id")));
  if (c.id.empty()) return InvalidArgument(ContainerField("spec.id") + ": missing");
  TESSERA_TAKE(c.spec.tenancy, Text(spec, "tenancy", ContainerField("spec.tenancy")));
  if (auto problem = fleet::CheckTenancyName(c.spec.tenancy); !problem.empty())
    return InvalidArgument(ContainerField("spec.tenancy") + ": " + problem);
  TESSERA_TAKE(c.tenancy_uid, Text(spec, "tenancyUid", ContainerField("spec.tenancyUid")));
  TESSERA_TAKE(c.spec.image, Text(spec, "image", ContainerField("spec.image")));
  TESSERA_TAKE(c.idempotency_key,
               Text(spec, "idempotencyKey", ContainerField("spec.idempotencyKey")));
  const Json gpus = spec.value("gpus", Json(0));
  if (!gpus.is_number_integer() || gpus.get<int64_t>() < 0 ||
      gpus.get<int64_t>() > fleet::kMaxGpusPerContainer)
    return InvalidArgument(ContainerField("spec.gpus") + ": want 0.." +
                           std::to_string(fleet::kMaxGpusPerContainer));
  c.spec.gpus = gpus.get<int>();
  std::string text;
  TESSERA_TAKE(text, Text(spec, "isolation", ContainerField("spec.isolation")));
  TESSERA_TAKE(c.spec.isolation, fleet::ParseIsolation(text.empty() ? "runc" : text));
  TESSERA_TAKE(text, Text(spec, "network", ContainerField("spec.network")));
  TESSERA_TAKE(c.spec.network, tenancy::ParseNetworkMode(text.empty() ? "tenancy" : text));
  TESSERA_TAKE(c.spec.command, Texts(spec, "command", ContainerField("spec.command")));
  if (spec.contains("env")) {
    const Json& env = spec["env"];
    if (!env.is_object() || env.size() > kMaxItems)
      return InvalidArgument(ContainerField("spec.env") + ": want an object of bounded size");
    for (auto it = env.begin(); it != env.end(); ++it) {
      if (!it.value().is_string() || it.key().size() > kMaxField ||
          it.value().get_ref<const std::string&>().size() > kMaxField)
        return InvalidArgument(ContainerField("spec.env") + ": want bounded strings");
      c.spec.env[it.key()] = it.value().get<std::string>();
    }
  }
  if (spec.contains("volumes")) {
    TESSERA_TAKE(c.spec.volumes, tenancy::VolumeRequestsFromJson(spec["volumes"], "volumes"));
  }
  return Ok();
}

// How the scheduler treats it: priority, duration limit, preemptible; a stop asked; when.
Status ReadSchedulingSpec(const Json& spec, fleet::ContainerRecord& c) {
  const Json priority = spec.value("priority", Json(0));
  if (!priority.is_number_integer() || priority.get<int64_t>() < scheduling::kMinPriority ||
      priority.get<int64_t>() > scheduling::kMaxPriority)
    return InvalidArgument(ContainerField("spec.priority") + ": want " +
                           std::to_string(scheduling::kMinPriority) + ".." +
                           std::to_string(scheduling::kMaxPriority));
  c.spec.priority = priority.get<int>();
  const Json max_duration = spec.value("maxDurationSeconds", Json(0));
  if (!max_duration.is_number_integer() || max_duration.get<int64_t>() < 0 ||
      max_duration.get<int64_t>() > static_cast<int64_t>(scheduling::kMaxDurationLimitSeconds))
    return InvalidArgument(ContainerField("spec.maxDurationSeconds") + ": out of range");
  c.spec.max_duration_s = max_duration.get<int64_t>();
  const Json preemptible = spec.value("preemptible", Json(false));
  if (!preemptible.is_boolean())
    return InvalidArgument(ContainerField("spec.preemptible") + ": not a boolean");
  c.spec.preemptible = preemptible.get<bool>();
  const Json stop = spec.value("stopRequested", Json(false));
  if (!stop.is_boolean())
    return InvalidArgument(ContainerField("spec.stopRequested") + ": not a boolean");
  c.stop_requested = stop.get<bool>();
  TESSERA_TAKE(c.created_ms, UnixMs(spec, "createdTime", ContainerField("spec.createdTime")));
  return Ok();
}

// What became of it: state, GPUs, exit code, reason, times, measured usage.
Status ReadContainerStatus(const Json& status, fleet::ContainerRecord& c) {
  std::string text;
  TESSERA_TAKE(text, Text(status, "state", ContainerField("status.state")));
  TESSERA_TAKE(c.state, fleet::ParseContainerState(text.empty() ? "pending" : text));
  const Json started = status.value("started", Json(false));
  if (!started.is_boolean())
    return InvalidArgument(ContainerField("status.started") + ": not a boolean");
  c.started = started.get<bool>();
  TESSERA_TAKE(c.gpus, Texts(status, "gpus", ContainerField("status.gpus")));
  if (status.contains("exitCode")) {
    if (!status["exitCode"].is_number_integer() || status["exitCode"].get<int64_t>() < -255 ||
        status["exitCode"].get<int64_t>() > 255)
      return InvalidArgument(ContainerField("status.exitCode") + ": not an exit code");
    c.exit_code = status["exitCode"].get<int>();
  }
  TESSERA_TAKE(c.reason, Text(status, "reason", ContainerField("status.reason")));
  TESSERA_TAKE(c.started_ms, UnixMs(status, "startedTime", ContainerField("status.startedTime")));
  TESSERA_TAKE(c.finished_ms,
               UnixMs(status, "finishedTime", ContainerField("status.finishedTime")));
  if (status.contains("measured")) {
    fleet::MeasuredUsage measured;
    TESSERA_TAKE(measured, MeasuredOf(status, "measured", ContainerField("status.measured")));
    c.measured = measured;
  }
  return Ok();
}

// object[key]: absent → 0, else an integer in min..65535.
Result<int> PortOf(const Json& object, const char* key, int min, const std::string& field) {
  if (!object.contains(key)) return 0;
  const Json& value = object[key];
  if (!value.is_number_integer() || value.get<int64_t>() < min || value.get<int64_t>() > 65535)
    return InvalidArgument(field + ": want " + std::to_string(min) + "..65535");
  return value.get<int>();
}

// One entry of spec.ports or status.ports.
Status ReadPortEntry(const Json& entry, const std::string& field, fleet::PublishedPort& out) {
  if (!entry.is_object()) return InvalidArgument(field + ": not an object");
  TESSERA_TAKE(out.container_port, PortOf(entry, "containerPort", 1, field + ".containerPort"));
  if (out.container_port == 0) return InvalidArgument(field + ".containerPort: missing");
  TESSERA_TAKE(out.protocol, Text(entry, "protocol", field + ".protocol"));
  if (out.protocol.empty()) out.protocol = "tcp";
  if (out.protocol != "tcp" && out.protocol != "udp")
    return InvalidArgument(field + ".protocol: want tcp or udp");
  TESSERA_TAKE(out.name, Text(entry, "name", field + ".name"));
  TESSERA_TAKE(out.host_address, Text(entry, "hostAddress", field + ".hostAddress"));
  if (out.name.size() > 63 || out.host_address.size() > 253)
    return InvalidArgument(field + ": name or hostAddress too long");
  TESSERA_TAKE(out.host_port, PortOf(entry, "hostPort", 0, field + ".hostPort"));
  return Ok();
}

Result<std::vector<fleet::PublishedPort>> PortList(const Json& object, const std::string& field) {
  std::vector<fleet::PublishedPort> out;
  if (!object.contains("ports")) return out;
  const Json& ports = object["ports"];
  if (!ports.is_array() || ports.size() > fleet::kMaxPortsPerContainer)
    return InvalidArgument(field + ": want an array of at most " +
                           std::to_string(fleet::kMaxPortsPerContainer));
  for (size_t i = 0; i < ports.size(); ++i) {
    fleet::PublishedPort port;
    if (auto read = ReadPortEntry(ports[i], field + "[" + std::to_string(i) + "]", port); !read)
      return read.error();
    out.push_back(std::move(port));
  }
  return out;
}

// spec.ports and spec.ready (what was asked), status.ports and status.ready (where they are
// reached, and whether it answers).
Status ReadPorts(const Json& spec, const Json& status, fleet::ContainerRecord& c) {
  std::vector<fleet::PublishedPort> asked;
  TESSERA_TAKE(asked, PortList(spec, ContainerField("spec.ports")));
  for (const auto& p : asked)
    c.spec.ports.push_back({p.container_port, p.name, p.protocol});
  if (spec.contains("ready")) {
    const std::string field = ContainerField("spec.ready.httpGet");
    const Json& ready = spec["ready"];
    if (!ready.is_object() || !ready.contains("httpGet") || !ready["httpGet"].is_object())
      return InvalidArgument(field + ": not an object");
    fleet::ReadinessProbe probe;
    TESSERA_TAKE(probe.path, Text(ready["httpGet"], "path", field + ".path"));
    if (probe.path.empty()) probe.path = "/";
    if (probe.path.front() != '/' || probe.path.size() > 256)
      return InvalidArgument(field + ".path: want an absolute path of at most 256 bytes");
    TESSERA_TAKE(probe.port, PortOf(ready["httpGet"], "port", 1, field + ".port"));
    if (probe.port == 0) return InvalidArgument(field + ".port: missing");
    c.spec.ready = probe;
  }
  TESSERA_TAKE(c.published, PortList(status, ContainerField("status.ports")));
  if (status.contains("ready")) {
    if (!status["ready"].is_boolean())
      return InvalidArgument(ContainerField("status.ready") + ": not a boolean");
    c.ready = status["ready"].get<bool>();
  }
  return Ok();
}

#undef TESSERA_TAKE

}  // namespace

Result<fleet::ContainerRecord> ContainerRecordOf(const Json& object) {
  if (!object.is_object() || !object.value("spec", Json()).is_object())
    return InvalidArgument("GpuContainer: no spec");
  const Json& spec = object["spec"];
  const Json status = object.value("status", Json::object());
  if (!status.is_object()) return InvalidArgument("GpuContainer status: not an object");
  fleet::ContainerRecord c;
  if (auto read = ReadSubmittedSpec(spec, c); !read) return read.error();
  if (auto read = ReadSchedulingSpec(spec, c); !read) return read.error();
  if (auto read = ReadContainerStatus(status, c); !read) return read.error();
  if (auto read = ReadPorts(spec, status, c); !read) return read.error();
  return c;
}

std::string TokenSecretName(const std::string& token_id) {
  return "tessera-token-" + token_id.substr(token_id.rfind('-') + 1);
}

std::string TokenIdOfSecretName(const std::string& name) {
  constexpr std::string_view kPrefix = "tessera-token-";
  return name.starts_with(kPrefix) ? "t-" + name.substr(kPrefix.size()) : name;
}

Json TokenSecret(const fleet::TokenRecord& token, const std::string& ns) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"type", "Opaque"},
          {"metadata",
           {{"name", TokenSecretName(token.id)},
            {"namespace", ns},
            {"labels",
             {{kManagedBy, "tessera"},
              {kTokenSecretLabel, "tenancy"},
              {kTenancyLabel, token.tenancy}}}}},
          {"data",
           {{"id", Base64(token.id)},
            {"sha256", Base64(token.sha256)},
            {"tenancy", Base64(token.tenancy)},
            {"tenancyUid", Base64(token.tenancy_uid)},
            {"created", Base64(std::to_string(token.created_ms))},
            {"scope", Base64(fleet::TokenScopeName(token.scope))},
            {"expires", Base64(std::to_string(token.expires_ms))}}}};
}

Result<fleet::TokenRecord> TokenRecordOf(const Json& secret) {
  const Json data = secret.is_object() ? secret.value("data", Json::object()) : Json();
  if (!data.is_object()) return InvalidArgument("token Secret: no data");
  auto entry = [&](const char* key) -> Result<std::string> {
    auto text = Text(data, key, std::string("token Secret data.") + key);
    if (!text) return text.error();
    return Unbase64(*text, std::string("token Secret data.") + key);
  };
  fleet::TokenRecord token;
  for (auto [key, target] :
       {std::pair{"id", &token.id}, std::pair{"sha256", &token.sha256},
        std::pair{"tenancy", &token.tenancy}, std::pair{"tenancyUid", &token.tenancy_uid}}) {
    auto value = entry(key);
    if (!value) return value.error();
    *target = std::move(*value);
  }
  if (token.sha256.size() != 64) return InvalidArgument("token Secret data.sha256: not a SHA-256");
  auto created = entry("created");
  if (!created) return created.error();
  token.created_ms = std::strtoll(created->c_str(), nullptr, 10);
  // Secrets written before scopes existed hold tenancy tokens that never expire.
  if (data.contains("scope")) {
    auto scope_text = entry("scope");
    if (!scope_text) return scope_text.error();
    auto scope = fleet::ParseTokenScope(*scope_text);
    if (!scope || *scope == fleet::TokenScope::kAdmin)
      return InvalidArgument("token Secret data.scope: want tenant, read-only or metrics");
    token.scope = *scope;
  }
  if (data.contains("expires")) {
    auto expires = entry("expires");
    if (!expires) return expires.error();
    token.expires_ms = std::strtoll(expires->c_str(), nullptr, 10);
    if (token.expires_ms < 0) return InvalidArgument("token Secret data.expires: negative");
  }
  return token;
}

Json AdminTokenSecret(const std::string& sha256, const std::string& ns) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"type", "Opaque"},
          {"metadata",
           {{"name", kAdminTokenSecret},
            {"namespace", ns},
            {"labels", {{kManagedBy, "tessera"}, {kTokenSecretLabel, "admin"}}}}},
          {"data", {{"sha256", Base64(sha256)}}}};
}

Result<std::string> AdminTokenHashOf(const Json& secret) {
  const Json data = secret.is_object() ? secret.value("data", Json::object()) : Json();
  if (!data.is_object()) return InvalidArgument("admin token Secret: no data");
  auto text = Text(data, "sha256", "admin token Secret data.sha256");
  if (!text) return text.error();
  auto hash = Unbase64(*text, "admin token Secret data.sha256");
  if (!hash) return hash.error();
  if (hash->size() != 64) return InvalidArgument("admin token Secret data.sha256: not a SHA-256");
  return hash;
}

Json TenancyObject(const fleet::Tenancy& tenancy) {
  Json nfs = Json::array();
  auto storage = tenancy.extensions.find(std::string(tenancy::kStorageExtension));
  if (storage != tenancy.extensions.end()) {
    if (auto parsed = tenancy::ParseStorageEntitlements(storage->second)) {
      for (const auto& e : parsed->nfs)
        nfs.push_back(
            {{"name", e.name}, {"server", e.server}, {"path", e.path}, {"readOnly", e.read_only}});
    }
  }
  Json record = {{"uid", tenancy.uid},
                 {"created", tenancy.created_ms},
                 {"labels", tenancy.labels},
                 {"extensions", tenancy.extensions}};
  return {{"apiVersion", std::string(kGroup) + "/" + kVersion},
          {"kind", "Tenancy"},
          {"metadata",
           {{"name", tenancy.name},
            {"labels", {{kManagedBy, "tessera"}}},
            {"annotations", {{kTenancyRecordAnnotation, record.dump()}}}}},
          {"spec", {{"name", tenancy.name}, {"storage", {{"nfs", nfs}}}}}};
}

Result<fleet::Tenancy> TenancyRecordOf(const Json& object) {
  if (!object.is_object() || !object.value("metadata", Json()).is_object())
    return InvalidArgument("Tenancy: no metadata");
  const Json& metadata = object["metadata"];
  fleet::Tenancy tenancy;
  auto name = Text(metadata, "name", "Tenancy metadata.name");
  if (!name) return name.error();
  tenancy.name = std::move(*name);
  if (auto problem = fleet::CheckTenancyName(tenancy.name); !problem.empty())
    return InvalidArgument("Tenancy metadata.name: " + problem);
  const Json annotations = metadata.value("annotations", Json::object());
  if (!annotations.is_object() || !annotations.contains(kTenancyRecordAnnotation))
    return NotFound("Tenancy " + tenancy.name + ": no " + kTenancyRecordAnnotation);
  const Json& text = annotations[kTenancyRecordAnnotation];
  // Annotations hold 256 KiB in all; the record is bounded by that.
  if (!text.is_string() || text.get_ref<const std::string&>().size() > (256u << 10))
    return InvalidArgument("Tenancy " + tenancy.name + " record: not a bounded string");
  const Json record = Json::parse(text.get<std::string>(), nullptr, false);
  if (!record.is_object())
    return InvalidArgument("Tenancy " + tenancy.name + " record: not a JSON object");
  auto uid = Text(record, "uid", "Tenancy record uid");
  if (!uid) return uid.error();
  if (uid->empty()) return InvalidArgument("Tenancy " + tenancy.name + " record uid: missing");
  tenancy.uid = std::move(*uid);
  const Json created = record.value("created", Json(0));
  if (!created.is_number_integer() || created.get<int64_t>() < 0)
    return InvalidArgument("Tenancy " + tenancy.name + " record created: not a time");
  tenancy.created_ms = created.get<int64_t>();
  for (auto [key, target] :
       {std::pair{"labels", &tenancy.labels}, std::pair{"extensions", &tenancy.extensions}}) {
    const Json map = record.value(key, Json::object());
    if (!map.is_object() || map.size() > kMaxItems)
      return InvalidArgument("Tenancy " + tenancy.name + " record " + key + ": not a map");
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it.value().is_string() || it.key().size() > kMaxField)
        return InvalidArgument("Tenancy " + tenancy.name + " record " + key +
                               ": want string values");
      (*target)[it.key()] = it.value().get<std::string>();
    }
  }
  return tenancy;
}

std::string GpuRecordsName(const std::string& node) {
  std::string name = "tessera-gpus-" + node;
  // Node names are DNS subdomains of up to 253 characters, as are ConfigMap names.
  if (name.size() > 253) name = "tessera-gpus-" + fleet::Sha256Hex(node).substr(0, 32);
  return name;
}

std::string GpuRecordKey(const std::string& pci_address) {
  std::string key = pci_address;
  for (char& c : key)
    if (c == ':') c = '_';
  return key;
}

std::string GpuRecordText(const fleet::GpuRecord& gpu) {
  Json record = {{"node", gpu.node},
                 {"pci", gpu.pci_address},
                 {"index", gpu.index},
                 {"model", gpu.model},
                 {"cdi", gpu.cdi_device},
                 {"state", fleet::LeaseStateName(gpu.state)},
                 {"reason", gpu.reason},
                 {"tenancy", gpu.tenancy},
                 {"container", gpu.container_id},
                 {"drain", gpu.drain_requested},
                 {"quarantine", gpu.quarantine_requested},
                 {"baseline", gpu.firmware_baseline},
                 {"updated", gpu.updated_ms}};
  if (gpu.health != health::GpuHealth{})
    record["health"] = Json::parse(fleet::GpuHealthToJson(gpu.health));
  return record.dump();
}

Json GpuRecordsObject(const std::string& node, const std::string& ns) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata",
           {{"name", GpuRecordsName(node)},
            {"namespace", ns},
            {"labels",
             {{kManagedBy, "tessera"}, {kGpuRecordsLabel, fleet::Sha256Hex(node).substr(0, 32)}}}}},
          {"data", Json::object()}};
}

Result<std::vector<fleet::GpuRecord>> GpuRecordsOf(const Json& config_map) {
  std::vector<fleet::GpuRecord> out;
  const Json data = config_map.is_object() ? config_map.value("data", Json::object()) : Json();
  if (!data.is_object()) return InvalidArgument("GPU records ConfigMap: data is not a map");
  for (auto it = data.begin(); it != data.end(); ++it) {
    const std::string field = "GPU records ConfigMap data." + it.key().substr(0, 64);
    if (!it.value().is_string() || it.value().get_ref<const std::string&>().size() > kMaxGpuEntry)
      return InvalidArgument(field + ": not a bounded string");
    const Json record = Json::parse(it.value().get<std::string>(), nullptr, false);
    if (!record.is_object()) return InvalidArgument(field + ": not a JSON object");
    fleet::GpuRecord gpu;
#define TESSERA_TEXT(target, key)                      \
  {                                                    \
    auto taken = Text(record, key, field + "." + key); \
    if (!taken) return taken.error();                  \
    target = std::move(*taken);                        \
  }
    TESSERA_TEXT(gpu.node, "node");
    TESSERA_TEXT(gpu.pci_address, "pci");
    TESSERA_TEXT(gpu.model, "model");
    TESSERA_TEXT(gpu.cdi_device, "cdi");
    TESSERA_TEXT(gpu.reason, "reason");
    TESSERA_TEXT(gpu.tenancy, "tenancy");
    TESSERA_TEXT(gpu.container_id, "container");
    TESSERA_TEXT(gpu.firmware_baseline, "baseline");
    std::string state;
    TESSERA_TEXT(state, "state");
#undef TESSERA_TEXT
    if (gpu.pci_address.empty() || GpuRecordKey(gpu.pci_address) != it.key())
      return InvalidArgument(field + ".pci: does not match its key");
    auto parsed = fleet::ParseLeaseState(state);
    if (!parsed) return parsed.error().WithContext(field + ".state");
    gpu.state = *parsed;
    const Json index = record.value("index", Json(0));
    const Json updated = record.value("updated", Json(0));
    const Json drain = record.value("drain", Json(false));
    const Json quarantine = record.value("quarantine", Json(false));
    if (!index.is_number_integer() || index.get<int64_t>() < 0 || index.get<int64_t>() > 4096 ||
        !updated.is_number_integer() || !drain.is_boolean() || !quarantine.is_boolean())
      return InvalidArgument(field + ": index, updated, drain or quarantine of the wrong type");
    gpu.index = index.get<int>();
    gpu.updated_ms = updated.get<int64_t>();
    gpu.drain_requested = drain.get<bool>();
    gpu.quarantine_requested = quarantine.get<bool>();
    if (record.contains("health")) {
      auto parsed_health = fleet::ParseGpuHealthJson(record["health"].dump());
      if (!parsed_health) return parsed_health.error().WithContext(field);
      gpu.health = std::move(*parsed_health);
    }
    out.push_back(std::move(gpu));
  }
  return out;
}

namespace {
// Whole GPU counts as integers ("2"), fractions in the shortest text that reads back the same
// double ("0.42857142857142855"), so a record survives the round trip exactly.
std::string GpuCountText(double gpus) {
  if (gpus == std::floor(gpus)) return std::to_string(static_cast<int64_t>(gpus));
  return fmt::format("{}", gpus);
}
}  // namespace

std::string UsageConfigMapName(const fleet::UsageRecord& usage) {
  return "tessera-usage-" + usage.container_id + "-" + std::to_string(usage.started_ms);
}

Json UsageConfigMap(const fleet::UsageRecord& usage, const std::string& ns) {
  // No managed-by label: the GPU records' list (which selects on it) never pages through the
  // usage maps, of which there is one per ended container.
  Json config_map = {{"apiVersion", "v1"},
                     {"kind", "ConfigMap"},
                     {"metadata",
                      {{"name", UsageConfigMapName(usage)},
                       {"namespace", ns},
                       {"labels", {{kUsageLabel, "container"}, {kTenancyLabel, usage.tenancy}}}}},
                     {"data",
                      {{"container", usage.container_id},
                       {"tenancy", usage.tenancy},
                       {"tenancyUid", usage.tenancy_uid},
                       {"gpus", GpuCountText(usage.gpus)},
                       {"started", Rfc3339(usage.started_ms)},
                       {"finished", Rfc3339(usage.finished_ms)},
                       {"gpuModel", usage.gpu_model},
                       {"mode", usage.mode}}}};
  if (usage.measured) {
    // Measured use as ConfigMap data: strings, numbers in the shortest exact text.
    Json& data = config_map["data"];
    data["smSeconds"] = fmt::format("{}", usage.measured->sm_seconds);
    data["memoryGibSeconds"] = fmt::format("{}", usage.measured->memory_gib_seconds);
    data["energyJoules"] = fmt::format("{}", usage.measured->energy_joules);
  }
  return config_map;
}

Result<fleet::UsageRecord> UsageRecordOf(const Json& config_map) {
  const Json data = config_map.is_object() ? config_map.value("data", Json::object()) : Json();
  if (!data.is_object()) return InvalidArgument("usage ConfigMap: no data");
  auto field = [](const char* name) { return std::string("usage ConfigMap data.") + name; };
  fleet::UsageRecord usage;
#define TESSERA_TAKE(target, expr)    \
  {                                   \
    auto taken = (expr);              \
    if (!taken) return taken.error(); \
    target = std::move(*taken);       \
  }
  TESSERA_TAKE(usage.container_id, Text(data, "container", field("container")));
  if (usage.container_id.empty()) return InvalidArgument(field("container") + ": missing");
  TESSERA_TAKE(usage.tenancy, Text(data, "tenancy", field("tenancy")));
  if (auto problem = fleet::CheckTenancyName(usage.tenancy); !problem.empty())
    return InvalidArgument(field("tenancy") + ": " + problem);
  TESSERA_TAKE(usage.tenancy_uid, Text(data, "tenancyUid", field("tenancyUid")));
  std::string gpus;
  TESSERA_TAKE(gpus, Text(data, "gpus", field("gpus")));
  // Whole GPUs, or MIG slices' share of their GPUs ("0.2857142857142857"): a number above 0.
  double count = 0;
  const auto parsed =
      std::from_chars(gpus.data(), gpus.data() + gpus.size(), count, std::chars_format::general);
  if (gpus.empty() || gpus.size() > 32 || parsed.ec != std::errc() ||
      parsed.ptr != gpus.data() + gpus.size() || !(count > 0) ||
      count > fleet::kMaxGpusPerContainer)
    return InvalidArgument(field("gpus") + ": want a number above 0 and at most " +
                           std::to_string(fleet::kMaxGpusPerContainer));
  usage.gpus = count;
  TESSERA_TAKE(usage.started_ms, UnixMs(data, "started", field("started")));
  TESSERA_TAKE(usage.finished_ms, UnixMs(data, "finished", field("finished")));
  // Measured use (absent: not measured): numbers not below 0.
  fleet::MeasuredUsage measured;
  bool any = false;
  for (auto [name, target] : {std::pair<const char*, double*>{"smSeconds", &measured.sm_seconds},
                              {"memoryGibSeconds", &measured.memory_gib_seconds},
                              {"energyJoules", &measured.energy_joules}}) {
    std::string text;
    TESSERA_TAKE(text, Text(data, name, field(name)));
    if (text.empty()) continue;
    any = true;
    double value = 0;
    const auto read =
        std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::general);
    if (text.size() > 32 || read.ec != std::errc() || read.ptr != text.data() + text.size() ||
        !std::isfinite(value) || value < 0)
      return InvalidArgument(field(name) + ": want a number not below 0");
    *target = value;
  }
  if (any) usage.measured = measured;
  TESSERA_TAKE(usage.gpu_model, Text(data, "gpuModel", field("gpuModel")));
  TESSERA_TAKE(usage.mode, Text(data, "mode", field("mode")));
#undef TESSERA_TAKE
  if (usage.started_ms == 0 || usage.finished_ms < usage.started_ms)
    return InvalidArgument(field("finished") + ": before its start");
  return usage;
}

Json RetiredIdConfigMap(const std::string& container_id, const std::string& ns) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata",
           {{"name", "tessera-retired-" + container_id},
            {"namespace", ns},
            {"labels", {{kRetiredLabel, "container"}}}}},
          {"data", {{"container", container_id}}}};
}

Result<std::string> RetiredIdOf(const Json& config_map) {
  const Json data = config_map.is_object() ? config_map.value("data", Json::object()) : Json();
  if (!data.is_object()) return InvalidArgument("retired container ConfigMap: no data");
  auto id = Text(data, "container", "retired container ConfigMap data.container");
  if (!id) return id.error();
  if (id->size() != 18 || !id->starts_with("c-"))
    return InvalidArgument("retired container ConfigMap data.container: not a container ID");
  return *id;
}

}  // namespace tessera::k8s
