// Routes, rendering of records as JSON, the error -> HTTP status mapping, and /metrics.
#include "api/router.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "api/api.h"
#include "common/untrusted_text.h"
#include "serve/queue.h"
#include "sharing/sharing.h"

namespace tessera::api {
namespace {

using nlohmann::json;
using serve::Caller;

std::string Dump(const json& doc) {
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

Response MakeResponse(http::status status, std::string body,
                      const char* content_type = "application/json") {
  Response response{status, 11};
  response.set(http::field::content_type, content_type);
  response.set(http::field::cache_control, "no-store");
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

Response Json(http::status status, const json& doc) {
  return MakeResponse(status, Dump(doc) + "\n");
}

http::status StatusFor(const Error& error) {
  switch (error.category) {
    case ErrorCategory::kInvalidArgument:
      return http::status::bad_request;
    case ErrorCategory::kNotFound:
      return http::status::not_found;
    case ErrorCategory::kAlreadyExists:
    case ErrorCategory::kFailedPrecondition:
      return http::status::conflict;
    case ErrorCategory::kPermissionDenied:
      return http::status::forbidden;
    case ErrorCategory::kUnavailable:
      return http::status::service_unavailable;
    default:
      return http::status::internal_server_error;
  }
}

std::string CategoryCode(ErrorCategory category) {
  std::string name(CategoryName(category));
  for (auto& c : name)
    if (c == ' ') c = '_';
  return name;
}

Response ErrorResponse(const Error& error, http::status status) {
  return Json(status,
              {{"error", {{"code", CategoryCode(error.category)}, {"message", error.message}}}});
}

Response ErrorResponse(const Error& error) {
  // Over a tenancy's pending quota: the client may submit again once some of its work started.
  if (serve::IsQuotaRefusal(error)) return ErrorResponse(error, http::status::too_many_requests);
  return ErrorResponse(error, StatusFor(error));
}

json LimitJson(int value) {
  return value == scheduling::kUnlimited ? json(nullptr) : json(value);
}

// The tenancy's own request rate limit; null: the service's --rate-limit applies.
json TenancyRateLimitJson(const fleet::Tenancy& tenancy) {
  auto it = tenancy.extensions.find(std::string(serve::kRateLimitExtension));
  if (it == tenancy.extensions.end() || it->second == "null") return nullptr;
  auto limit = serve::ParseRateLimit(it->second);
  if (!limit) return nullptr;
  return {{"perSecond", limit->per_second}, {"burst", limit->burst}};
}

json TenancyJson(const fleet::Tenancy& tenancy, const scheduling::TenancyPolicy& policy) {
  json extensions = json::object();
  for (const auto& [key, value] : tenancy.extensions) {
    // Shown as their own fields below.
    if (key == serve::kSchedulingExtension || key == serve::kRateLimitExtension) continue;
    json parsed = json::parse(value, nullptr, false);
    extensions[key] = parsed.is_discarded() ? json(value) : parsed;
  }
  return {{"name", tenancy.name},
          {"uid", tenancy.uid},
          {"created_ms", tenancy.created_ms},
          {"labels", tenancy.labels},
          {"extensions", extensions},
          {"quota",
           {{"gpus", LimitJson(policy.quota_gpus)}, {"pending", LimitJson(policy.quota_pending)}}},
          {"weight", policy.weight},
          {"maxPriority", policy.max_priority},
          {"rateLimit", TenancyRateLimitJson(tenancy)}};
}

json MsOrNull(int64_t ms) {
  return ms == 0 ? json(nullptr) : json(ms);
}

// A token as GET /v1/tokens lists it: never its secret nor its hash.
json TokenJson(const fleet::TokenRecord& token, int64_t now_ms) {
  return {{"id", token.id},
          {"scope", fleet::TokenScopeName(token.scope)},
          {"tenancy", token.tenancy.empty() ? json(nullptr) : json(token.tenancy)},
          {"created_ms", token.created_ms},
          {"last_used_ms", MsOrNull(token.last_used_ms)},
          {"expires_ms", MsOrNull(token.expires_ms)},
          {"expired", token.expires_ms != 0 && now_ms >= token.expires_ms}};
}

json CreatedTokenJson(const serve::CreatedToken& created) {
  json doc = TokenJson(created.record, created.record.created_ms);
  doc["token"] = created.secret;
  return doc;
}

json ShareJson(const sharing::Share& share) {
  return {{"memory", sharing::FormatMemory(share.memory_bytes)},
          {"memory_bytes", share.memory_bytes},
          {"compute", share.compute_percent},
          {"mode", sharing::ModeName(share.mode)}};
}

json ContainerJson(const fleet::ContainerRecord& c) {
  json doc = {{"id", c.id},
              {"tenancy", c.spec.tenancy},
              {"image", c.spec.image},
              {"command", c.spec.command},
              {"env", c.spec.env},
              {"isolation", fleet::IsolationName(c.spec.isolation)},
              {"gpus_requested", c.spec.gpus},
              {"gpus", c.gpus},
              {"state", fleet::ContainerStateName(c.state)},
              {"exit_code", nullptr},
              {"reason", c.reason},
              {"stop_requested", c.stop_requested},
              {"created_ms", c.created_ms},
              {"started_ms", c.started_ms},
              {"finished_ms", c.finished_ms}};
  if (c.exit_code) doc["exit_code"] = *c.exit_code;
  if (!c.idempotency_key.empty()) doc["idempotency_key"] = c.idempotency_key;
  doc["priority"] = c.spec.priority;
  doc["maxDurationSeconds"] = c.spec.max_duration_s ? json(c.spec.max_duration_s) : json(nullptr);
  doc["preemptible"] = c.spec.preemptible;
  if (c.spec.mig.count > 0) {
    doc["mig"] = {{"profile", c.spec.mig.profile}, {"count", c.spec.mig.count}};
    doc["mig_devices"] = c.mig_devices;
    doc["mig_gpus"] = c.mig_gpus;
  } else {
    doc["mig"] = nullptr;
  }
  doc["share"] = c.spec.share ? ShareJson(*c.spec.share) : json(nullptr);
  if (c.spec.share) doc["share_gpus"] = c.share_gpus;
  // What holds its limits: hardware (MIG), driver (MPS), watchdog, none; empty for whole GPUs.
  doc["enforcement"] = !c.enforcement.empty() ? json(c.enforcement)
                       : c.spec.mig.count > 0
                           ? json(sharing::EnforcementName(sharing::Enforcement::kHardware))
                           : json(nullptr);
  if (c.state == fleet::ContainerState::kPending && c.queue_position > 0)
    doc["queue_position"] = c.queue_position;
  doc["measured"] = nullptr;
  if (c.measured)
    doc["measured"] = {{"sm_seconds", c.measured->sm_seconds},
                       {"memory_gib_seconds", c.measured->memory_gib_seconds},
                       {"energy_joules", c.measured->energy_joules}};
  doc["network"] = tenancy::NetworkModeName(c.spec.network);
  json volumes = json::array();
  for (const auto& volume : c.spec.volumes) {
    json item = {{"name", volume.name}, {"mountPath", volume.mount_path}};
    if (volume.read_only) item["readOnly"] = *volume.read_only;
    volumes.push_back(std::move(item));
  }
  doc["volumes"] = std::move(volumes);
  return doc;
}

// A GPU that holds shares: its mode, what enforces them, each share, and its daemon's health;
// null for other GPUs. The same in /v1/gpus and the dashboard.
json SharedJson(const fleet::GpuRecord& g, bool watchdog) {
  if (g.shares.empty() && g.share_fault.empty()) return nullptr;
  json shares = json::array();
  for (const auto& holder : g.shares) {
    json item = ShareJson(holder.share);
    item["tenancy"] = holder.tenancy;
    item["container_id"] = holder.container_id;
    shares.push_back(std::move(item));
  }
  const sharing::Mode mode = g.shares.empty() ? sharing::Mode::kMps : g.shares.front().share.mode;
  return {{"mode", sharing::ModeName(mode)},
          {"enforcement", sharing::EnforcementName(sharing::EnforcementOf(mode, watchdog))},
          {"shares", std::move(shares)},
          {"healthy", g.share_fault.empty()},
          {"fault", g.share_fault}};
}

json GpuJson(const fleet::GpuRecord& g, bool admin, bool watchdog) {
  json doc = {{"id", g.id()},
              {"node", g.node},
              {"available", g.available},
              {"pci_address", g.pci_address},
              {"index", g.index},
              {"model", g.model},
              {"cdi_device", g.cdi_device},
              {"state", fleet::LeaseStateName(g.state)},
              {"reason", g.reason},
              {"tenancy", g.tenancy},
              {"container_id", g.container_id},
              {"drain_requested", g.drain_requested},
              {"quarantine_requested", g.quarantine_requested},
              {"updated_ms", g.updated_ms}};
  if (admin) doc["firmware_baseline"] = g.firmware_baseline;
  if (g.mig_enabled) {
    json slices = json::array();
    for (const auto& slice : g.mig_slices)
      slices.push_back({{"id", slice.id},
                        {"profile", slice.profile},
                        {"compute_slices", slice.compute_slices},
                        {"cdi_device", slice.cdi_device},
                        {"tenancy", slice.tenancy},
                        {"container_id", slice.container_id}});
    doc["mig"] = {
        {"enabled", true}, {"compute_slices", g.compute_slices}, {"slices", std::move(slices)}};
  } else {
    doc["mig"] = nullptr;
  }
  if (g.memory_bytes > 0) doc["memory_bytes"] = g.memory_bytes;
  doc["shared"] = SharedJson(g, watchdog);
  return doc;
}

// GET /v1/tenancies/{name}/usage (and the dashboard's chart, which embeds the same answer).
// The measured figures of a usage entry, next to its allocated gpu_seconds (null: not measured).
void AddMeasured(json& doc, const std::optional<fleet::MeasuredUsage>& measured) {
  doc["sm_seconds"] = measured ? json(measured->sm_seconds) : json(nullptr);
  doc["memory_gib_seconds"] = measured ? json(measured->memory_gib_seconds) : json(nullptr);
  doc["energy_joules"] = measured ? json(measured->energy_joules) : json(nullptr);
}

json UsageJson(const serve::UsageReport& report, int64_t step_s) {
  json containers = json::array();
  for (const auto& usage : report.containers) {
    json entry = {{"id", usage.id},
                  {"gpus", usage.gpus},
                  {"started_ms", usage.started_ms},
                  {"finished_ms", usage.finished_ms ? json(usage.finished_ms) : json(nullptr)},
                  {"gpu_seconds", usage.gpu_seconds}};
    AddMeasured(entry, usage.measured);
    containers.push_back(std::move(entry));
  }
  json doc = {{"tenancy", report.tenancy},
              {"from_ms", report.from_ms},
              {"to_ms", report.to_ms},
              {"gpu_seconds", report.gpu_seconds},
              {"containers", std::move(containers)},
              {"containers_total", report.containers_total}};
  AddMeasured(doc, report.measured);
  if (step_s > 0) {
    json series = json::array();
    for (const auto& bucket : report.series) {
      json entry = {{"start_ms", bucket.start_ms}, {"gpu_seconds", bucket.gpu_seconds}};
      AddMeasured(entry, bucket.measured);
      series.push_back(std::move(entry));
    }
    doc["step_s"] = step_s;
    doc["series"] = std::move(series);
  }
  return doc;
}

// GET /v1/dashboard: one document per poll (see serve/dashboard.h).
json DashboardJson(const serve::DashboardView& view, bool watchdog) {
  json gpus = json::array();
  for (const auto& entry : view.gpus) {
    const auto& g = entry.record;
    json mig = nullptr;
    if (g.mig_enabled) {
      int held = 0;
      for (const auto& slice : g.mig_slices)
        held += !slice.container_id.empty();
      mig = {{"slices", g.mig_slices.size()}, {"held", held}};
    }
    auto optional = [](const auto& value) { return value ? json(*value) : json(nullptr); };
    gpus.push_back({{"id", g.id()},
                    {"node", g.node},
                    {"pci_address", g.pci_address},
                    {"model", g.model},
                    {"module", entry.module},
                    {"state", fleet::LeaseStateName(g.state)},
                    {"reason", g.reason},
                    {"tenancy", g.tenancy},
                    {"container_id", g.container_id},
                    {"available", g.available},
                    {"drain_requested", g.drain_requested},
                    {"quarantine_requested", g.quarantine_requested},
                    {"mig", std::move(mig)},
                    {"shared", SharedJson(g, watchdog)},
                    {"util_percent", optional(entry.gauges.util_percent)},
                    {"memory_used", optional(entry.gauges.memory_used)},
                    {"memory_total", optional(entry.gauges.memory_total)},
                    {"power_watts", optional(entry.gauges.power_watts)},
                    {"lost", entry.gauges.lost}});
  }
  json nodes = json::array();
  for (const auto& node : view.nodes) {
    json groups = json::array();
    for (const auto& group : node.groups)
      groups.push_back({{"label", group.label}, {"gpus", group.gpus}});
    nodes.push_back({{"name", node.name}, {"groups", std::move(groups)}});
  }
  json tenancies = json::array();
  for (const auto& t : view.tenancies) {
    tenancies.push_back({{"name", t.share.name},
                         {"weight", t.share.policy.weight},
                         {"quota_gpus", LimitJson(t.share.policy.quota_gpus)},
                         {"gpus_in_use", t.share.gpus_in_use},
                         {"mig_gpus_in_use", t.share.mig_gpus_in_use},
                         {"pending", t.share.pending},
                         {"share", t.share.share},
                         {"target_share", t.share.target},
                         {"sm_percent", t.gauges.sm_percent},
                         {"memory_bytes", t.gauges.memory_bytes},
                         {"power_watts", t.gauges.power_watts}});
  }
  json states = json::object();
  for (int i = 0; i < fleet::kLeaseStateCount; ++i)
    states[fleet::LeaseStateName(static_cast<fleet::LeaseState>(i))] = view.gpu_states[i];
  json containers = json::object();
  for (int i = 0; i < 4; ++i)
    containers[fleet::ContainerStateName(static_cast<fleet::ContainerState>(i))] =
        view.containers[i];
  return {{"time_ms", view.time_ms},
          {"telemetry_ms", view.telemetry_ms},
          {"scheduling", view.scheduling},
          {"counts",
           {{"gpus", std::move(states)},
            {"containers", std::move(containers)},
            {"queue", view.queue_total}}},
          {"nodes", std::move(nodes)},
          {"gpus", std::move(gpus)},
          {"tenancies", std::move(tenancies)}};
}

std::vector<std::string> SplitPath(std::string_view target) {
  auto query = target.find('?');
  if (query != std::string_view::npos) target = target.substr(0, query);
  std::vector<std::string> parts;
  size_t start = 0;
  while (start < target.size()) {
    size_t end = target.find('/', start);
    if (end == std::string_view::npos) end = target.size();
    if (end > start) parts.emplace_back(target.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

int MethodSlot(http::verb method) {
  switch (method) {
    case http::verb::get:
      return 0;
    case http::verb::post:
      return 1;
    case http::verb::put:
      return 2;
    case http::verb::delete_:
      return 3;
    default:
      return 4;
  }
}

constexpr std::array<const char*, 5> kMethodNames = {"GET", "POST", "PUT", "DELETE", "other"};

// Longest path segment routed: tenancy names are DNS labels, container IDs and GPU IDs short.
// Anything longer is refused before a handler could echo it into a message.
constexpr size_t kMaxPathSegment = 253;

// What a token's scope allows on the routes behind a token (the service then decides per
// object): read-only tokens read, metrics tokens read /metrics only (see AdmitMetrics).
Status CheckScope(const Caller& caller, http::verb method) {
  switch (caller.scope) {
    case fleet::TokenScope::kAdmin:
    case fleet::TokenScope::kTenant:
      return Ok();
    case fleet::TokenScope::kReadOnly:
      if (method == http::verb::get || method == http::verb::head) return Ok();
      return PermissionDenied("token " + caller.token_id + " is read-only: GET requests only");
    case fleet::TokenScope::kMetrics:
      break;
  }
  return PermissionDenied("token " + caller.token_id + " reads /metrics only");
}

std::string BearerToken(const http::request_header<>& header) {
  auto field = header[http::field::authorization];
  std::string_view auth(field.data(), field.size());
  if (auth.size() > 7 && (auth.substr(0, 7) == "Bearer " || auth.substr(0, 7) == "bearer "))
    return std::string(auth.substr(7));
  return "";
}

Response TooManyRequests(int retry_after_s) {
  auto response = ErrorResponse(Unavailable("request rate limit: too many requests; retry after " +
                                            std::to_string(retry_after_s) + " s"),
                                http::status::too_many_requests);
  response.set(http::field::retry_after, std::to_string(retry_after_s));
  return response;
}

// The routes served without a token.
enum class PublicRoute { kNone, kDashboard, kMetrics, kHealth, kReady, kOpenApi };

PublicRoute PublicRouteOf(const std::vector<std::string>& parts) {
  if (parts.empty() || (parts.size() == 1 && parts[0] == "index.html"))
    return PublicRoute::kDashboard;
  if (parts.size() == 1 && parts[0] == "metrics") return PublicRoute::kMetrics;
  if (parts.size() == 1 && parts[0] == "healthz") return PublicRoute::kHealth;
  if (parts.size() == 1 && parts[0] == "readyz") return PublicRoute::kReady;
  if (parts.size() == 2 && parts[0] == "v1" && parts[1] == "openapi.json")
    return PublicRoute::kOpenApi;
  return PublicRoute::kNone;
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string_view TrimmedField(boost::beast::string_view value) {
  std::string_view text(value.data(), value.size());
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  return text;
}

Response Unauthorized(const Error& error) {
  auto response = ErrorResponse(Error{ErrorCategory::kPermissionDenied,
                                      error.message + " (send Authorization: Bearer <token>)"},
                                http::status::unauthorized);
  response.set(http::field::www_authenticate, "Bearer");
  return response;
}

Response NoSuchEndpoint(std::string_view target) {
  return ErrorResponse(NotFound("no such endpoint: " + Excerpt(target, 80)));
}

Response MethodNotAllowed(const char* allowed) {
  auto response = ErrorResponse(InvalidArgument(std::string("method not allowed; use ") + allowed),
                                http::status::method_not_allowed);
  response.set(http::field::allow, allowed);
  return response;
}

// The audit subject of a mutating route (method and path), or nullopt for a read or an unknown
// route. Names from the path are the caller's text: kept as excerpts.
std::optional<serve::AuditSubject> MutationOf(http::verb method,
                                              const std::vector<std::string>& parts,
                                              const Caller& caller) {
  if (parts.size() < 2 || parts[0] != "v1") return std::nullopt;
  const std::string own = caller.admin ? "" : caller.tenancy;
  const std::string& collection = parts[1];
  if (collection == "tenancies" && parts.size() >= 3) {
    const std::string name = Excerpt(parts[2], 80);
    if (parts.size() == 3 && method == http::verb::put)
      return serve::AuditSubject{"tenancy.put", "tenancy", name, name};
    if (parts.size() == 3 && method == http::verb::delete_)
      return serve::AuditSubject{"tenancy.delete", "tenancy", name, name};
    if (parts.size() == 4 && parts[3] == "storage" && method == http::verb::put)
      return serve::AuditSubject{"storage.put", "storage", name, name};
    if (parts.size() == 4 && parts[3] == "tokens" && method == http::verb::post)
      return serve::AuditSubject{"token.create", "token", "", name};
  }
  if (collection == "tokens" && parts.size() == 2 && method == http::verb::post)
    return serve::AuditSubject{"token.create", "token", "", ""};
  if (collection == "tokens" && parts.size() == 3 && method == http::verb::delete_)
    return serve::AuditSubject{"token.revoke", "token", Excerpt(parts[2], 80), ""};
  if (collection == "admin-token:rotate" && parts.size() == 2 && method == http::verb::post)
    return serve::AuditSubject{"admin-token.rotate", "token", "admin", ""};
  if (collection == "containers" && parts.size() == 2 && method == http::verb::post)
    return serve::AuditSubject{"container.create", "container", "", own};
  if (collection == "containers" && parts.size() == 3 && method == http::verb::delete_)
    return serve::AuditSubject{"container.delete", "container", Excerpt(parts[2], 80), own};
  if (collection == "gpus" && parts.size() == 4 && method == http::verb::post) {
    auto action = serve::ParseGpuAction(parts[3]);
    return serve::AuditSubject{action ? serve::GpuAuditAction(*action) : "gpu.action", "gpu",
                               Excerpt(parts[2], 80), ""};
  }
  return std::nullopt;
}

json AuditJson(const fleet::AuditEntry& entry) {
  const auto& record = entry.record;
  return {{"seq", entry.seq},
          {"time_ms", record.time_ms},
          {"token_id", record.token_id},
          {"scope", record.scope},
          {"action", record.action},
          {"object", {{"kind", record.object_kind}, {"id", record.object_id}}},
          {"tenancy", record.tenancy},
          {"result", record.result},
          {"request_id", record.request_id},
          {"detail", record.detail}};
}

// Adapts a Done<T> of the service into an HTTP answer.
template <typename T, typename Render>
serve::Done<T> Reply(Respond respond, http::status ok, Render render) {
  return [respond = std::move(respond), ok, render](Result<T> result) {
    if (!result) return respond(ErrorResponse(result.error()));
    respond(Json(ok, render(*result)));
  };
}

}  // namespace

void LatencyHistogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i])
    ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(static_cast<uint64_t>(seconds * 1e6), std::memory_order_relaxed);
}

void LatencyHistogram::Render(std::string& out, const std::string& name,
                              const std::string& labels) const {
  uint64_t cumulative = 0;
  char line[256];
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    if (i < kBounds.size()) {
      std::snprintf(line, sizeof(line), "%s_bucket{%s,le=\"%g\"} %llu\n", name.c_str(),
                    labels.c_str(), kBounds[i], static_cast<unsigned long long>(cumulative));
    } else {
      std::snprintf(line, sizeof(line), "%s_bucket{%s,le=\"+Inf\"} %llu\n", name.c_str(),
                    labels.c_str(), static_cast<unsigned long long>(cumulative));
    }
    out += line;
  }
  std::snprintf(line, sizeof(line), "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name.c_str(),
                labels.c_str(), sum_us_.load(std::memory_order_relaxed) / 1e6, name.c_str(),
                labels.c_str(), static_cast<unsigned long long>(count_.load()));
  out += line;
}

Router::Router(serve::Service* service, bool metrics_aggregate_public)
    : service_(service), metrics_aggregate_public_(metrics_aggregate_public) {
  auto random = fleet::RandomHex(4);
  request_prefix_ = "r-" + (random ? *random : std::to_string(fleet::NowMs())) + "-";
}

std::string Router::NewRequestId() const {
  char counter[20];
  std::snprintf(counter, sizeof counter, "%llx",
                static_cast<unsigned long long>(requests_.fetch_add(1) + 1));
  return request_prefix_ + counter;
}

Respond Router::AuditRefusals(const Caller& caller, serve::AuditSubject subject, Respond respond) {
  return [this, caller, subject = std::move(subject),
          respond = std::move(respond)](Response response) mutable {
    if (response.result_int() < 400) return respond(std::move(response));
    // The answer is one of ours (ErrorResponse): its code is the error's category.
    std::string result = "error";
    json doc = json::parse(response.body(), nullptr, false);
    if (doc.is_object() && doc.contains("error") && doc["error"].is_object())
      result = doc["error"].value("code", "error");
    auto shared = std::make_shared<Response>(std::move(response));
    service_->RecordRefusal(
        caller, std::move(subject), std::move(result),
        [respond = std::move(respond), shared] { respond(std::move(*shared)); });
  };
}

Router::~Router() {
  blocking_.join();
  render_.join();
}

void Router::PrepareThenRespond(const std::string& tenancy, Respond respond, Response response) {
  boost::asio::post(blocking_, [this, tenancy, respond = std::move(respond),
                                response = std::move(response)]() mutable {
    auto prepared = service_->PrepareTenancy(tenancy);
    if (!prepared) {
      return respond(ErrorResponse(
          prepared.error().WithContext("tenancy " + tenancy + " stored, but its network/volumes")));
    }
    respond(std::move(response));
  });
}

void Router::Observe(http::verb method, std::chrono::steady_clock::duration elapsed) {
  latency_[MethodSlot(method)].Observe(std::chrono::duration<double>(elapsed).count());
}

std::string Router::Metrics(bool full) const {
  auto counts = service_->counts();
  std::string out;
  out += "# HELP tessera_gpus GPUs on this host by lease state.\n# TYPE tessera_gpus gauge\n";
  for (int i = 0; i < fleet::kLeaseStateCount; ++i) {
    out += std::string("tessera_gpus{state=\"") +
           fleet::LeaseStateName(static_cast<fleet::LeaseState>(i)) + "\"} " +
           std::to_string(counts.gpus[i]) + "\n";
  }
  out +=
      "# HELP tessera_containers Containers in the store by state.\n"
      "# TYPE tessera_containers gauge\n";
  for (int i = 0; i < 4; ++i) {
    out += std::string("tessera_containers{state=\"") +
           fleet::ContainerStateName(static_cast<fleet::ContainerState>(i)) + "\"} " +
           std::to_string(counts.containers[i]) + "\n";
  }
  out +=
      "# HELP tessera_store_commits_total Store transactions (commit groups).\n"
      "# TYPE tessera_store_commits_total counter\ntessera_store_commits_total " +
      std::to_string(counts.store.groups) + "\n";
  out +=
      "# HELP tessera_store_records_written_total Records written by the store.\n"
      "# TYPE tessera_store_records_written_total counter\n"
      "tessera_store_records_written_total " +
      std::to_string(counts.store.mutations) + "\n";
  out +=
      "# HELP tessera_store_checkpoints_total WAL checkpoints run off the commit path.\n"
      "# TYPE tessera_store_checkpoints_total counter\n"
      "tessera_store_checkpoints_total " +
      std::to_string(counts.store.checkpoints) + "\n";
  out +=
      "# HELP tessera_store_write_failing 1 while the store cannot write (disk full, I/O error, "
      "damage): changes are refused with 503 until a write succeeds.\n"
      "# TYPE tessera_store_write_failing gauge\ntessera_store_write_failing " +
      std::string(counts.store_write_failure ? "1" : "0") + "\n";
  out +=
      "# HELP tessera_scheduling_passes_total Passes of the scheduling policy (one per change "
      "that could start or reserve something, however many came at once).\n"
      "# TYPE tessera_scheduling_passes_total counter\ntessera_scheduling_passes_total " +
      std::to_string(counts.scheduling_passes) + "\n";
  out +=
      "# HELP tessera_queue_reports_total Queue positions and reasons worked out for readers.\n"
      "# TYPE tessera_queue_reports_total counter\ntessera_queue_reports_total " +
      std::to_string(counts.queue_reports) + "\n";
  RenderLatency(out);
  // The aggregate ends here: what follows names tenancies, containers and GPUs.
  if (!full) return out;
  // One series per tenancy incarnation that exists (uid): a name created again starts from
  // nothing, and a deleted one's series go. Names are DNS labels and uids hex: nothing needs
  // escaping in a label value.
  out +=
      "# HELP tessera_tenancy_gpu_seconds_total GPU-seconds metered per tenancy (ended and "
      "running containers).\n# TYPE tessera_tenancy_gpu_seconds_total counter\n";
  char line[384];
  for (const auto& tenancy : counts.tenancies) {
    std::snprintf(line, sizeof(line),
                  "tessera_tenancy_gpu_seconds_total{tenancy=\"%s\",uid=\"%s\"} %.3f\n",
                  tenancy.name.c_str(), tenancy.uid.c_str(), tenancy.gpu_seconds);
    out += line;
  }
  out +=
      "# HELP tessera_queue_wait_seconds How long GPU containers waited in the queue, by "
      "tenancy.\n# TYPE tessera_queue_wait_seconds histogram\n";
  for (const auto& tenancy : counts.tenancies) {
    if (!tenancy.queue_waits) continue;
    const auto& waits = *tenancy.queue_waits;
    const std::string labels = "tenancy=\"" + tenancy.name + "\",uid=\"" + tenancy.uid + "\"";
    for (size_t i = 0; i < waits.cumulative.size(); ++i) {
      if (i < waits.bounds.size()) {
        std::snprintf(line, sizeof(line), "tessera_queue_wait_seconds_bucket{%s,le=\"%g\"} %llu\n",
                      labels.c_str(), waits.bounds[i],
                      static_cast<unsigned long long>(waits.cumulative[i]));
      } else {
        std::snprintf(line, sizeof(line),
                      "tessera_queue_wait_seconds_bucket{%s,le=\"+Inf\"} %llu\n", labels.c_str(),
                      static_cast<unsigned long long>(waits.cumulative[i]));
      }
      out += line;
    }
    std::snprintf(line, sizeof(line),
                  "tessera_queue_wait_seconds_sum{%s} %.3f\n"
                  "tessera_queue_wait_seconds_count{%s} %llu\n",
                  labels.c_str(), waits.sum, labels.c_str(),
                  static_cast<unsigned long long>(waits.count));
    out += line;
  }
  out += service_->ExtraMetrics();
  // This host's GPUs and containers (the node endpoint of embedded mode) and per tenancy.
  service_->RenderTelemetryMetrics(out);
  return out;
}

void Router::RenderLatency(std::string& out) const {
  out +=
      "# HELP tessera_http_request_duration_seconds API request latency by method.\n"
      "# TYPE tessera_http_request_duration_seconds histogram\n";
  for (size_t i = 0; i < latency_.size(); ++i) {
    latency_[i].Render(out, "tessera_http_request_duration_seconds",
                       std::string("method=\"") + kMethodNames[i] + "\"");
  }
}

Admission Router::AdmitAnonymous(std::string_view peer, std::optional<Error> refusal) const {
  Admission admission;
  // Charged per source address before anything else is said: a flood of bad tokens or
  // anonymous requests costs a map look-up each.
  if (auto retry = service_->ChargeAnonymousRequest(peer)) {
    admission.answer = TooManyRequests(*retry);
  } else if (refusal) {
    admission.answer = Unauthorized(*refusal);
  }
  return admission;
}

Admission Router::AdmitCaller(const std::string& token, http::verb method, bool metrics,
                              std::string_view peer) const {
  auto caller = service_->Authenticate(token);
  if (!caller) return AdmitAnonymous(peer, caller.error());
  Admission admission;
  if (auto retry = service_->ChargeRequest(*caller)) {
    admission.answer = TooManyRequests(*retry);
    return admission;
  }
  Status allowed = Ok();
  if (metrics) {
    if (caller->scope != fleet::TokenScope::kAdmin && caller->scope != fleet::TokenScope::kMetrics)
      allowed = PermissionDenied("/metrics needs the admin token or a metrics token");
  } else {
    allowed = CheckScope(*caller, method);
  }
  if (!allowed) {
    admission.answer = ErrorResponse(allowed.error());
    return admission;
  }
  admission.caller = std::move(*caller);
  return admission;
}

Admission Router::Admit(const http::request_header<>& header, std::string_view peer) const {
  Admission admission = AdmitHeader(header, peer);
  const std::string request_id = NewRequestId();
  if (admission.answer) admission.answer->set("X-Request-Id", request_id);
  if (admission.caller) admission.caller->request_id = request_id;
  return admission;
}

Admission Router::AdmitHeader(const http::request_header<>& header, std::string_view peer) const {
  Admission admission;
  const auto method = header.method();
  // Beast decodes the chunked coding only; a body in any other coding would be used undecoded.
  if (auto coding = TrimmedField(header[http::field::transfer_encoding]);
      !coding.empty() && !EqualsIgnoringCase(coding, "chunked")) {
    admission.answer = ErrorResponse(
        Error{ErrorCategory::kInvalidArgument, "Transfer-Encoding: only chunked is supported"},
        http::status::not_implemented);
    return admission;
  }
  if (auto coding = TrimmedField(header[http::field::content_encoding]);
      !coding.empty() && !EqualsIgnoringCase(coding, "identity")) {
    admission.answer =
        ErrorResponse(InvalidArgument("Content-Encoding: bodies are read as sent; send them "
                                      "uncompressed"),
                      http::status::unsupported_media_type);
    return admission;
  }
  const std::string_view target(header.target().data(), header.target().size());
  const auto parts = SplitPath(target);
  for (const auto& part : parts) {
    if (part.size() > kMaxPathSegment) {
      admission.answer = ErrorResponse(NotFound("no such endpoint: a path segment is longer than " +
                                                std::to_string(kMaxPathSegment) + " bytes"));
      return admission;
    }
  }
  const std::string token = BearerToken(header);
  if (const auto route = PublicRouteOf(parts); route != PublicRoute::kNone) {
    if (method != http::verb::get && method != http::verb::head) {
      admission.answer = MethodNotAllowed("GET, HEAD");
      return admission;
    }
    // Probes are never limited: a kubelet that gets 429 would restart a healthy service.
    if (route == PublicRoute::kHealth || route == PublicRoute::kReady) return admission;
    if (route != PublicRoute::kMetrics) return AdmitAnonymous(peer, std::nullopt);
    // /metrics: the admin or a metrics token for every series; without a token the aggregate
    // series where the operator opened them (--metrics-aggregate-public).
    if (!token.empty()) return AdmitCaller(token, method, true, peer);
    return AdmitAnonymous(peer,
                          metrics_aggregate_public_
                              ? std::nullopt
                              : std::optional<Error>(PermissionDenied("/metrics needs a token")));
  }
  if (parts.size() < 2 || parts[0] != "v1") {
    admission.answer = NoSuchEndpoint(target);
    return admission;
  }
  return AdmitCaller(token, method, false, peer);
}

void Router::HandleRequest(Request request, Respond respond) {
  auto admission = Admit(request.base(), "");
  if (admission.answer) return respond(std::move(*admission.answer));
  Handle(std::move(request), admission.caller, std::move(respond));
}

void Router::Handle(Request request, const std::optional<Caller>& admitted, Respond respond) {
  // HEAD is answered as GET; the server sends the header only.
  const auto method = request.method() == http::verb::head ? http::verb::get : request.method();
  const std::string target(request.target().data(), request.target().size());
  const auto parts = SplitPath(target);
  // Every answer names its request; a mutating request's refusal is recorded in the audit trail
  // before it is sent (its success was recorded with its change). `unaudited` answers after the
  // change was recorded (a tenancy's network made after its record).
  const std::string request_id =
      admitted && !admitted->request_id.empty() ? admitted->request_id : NewRequestId();
  respond = [respond = std::move(respond), request_id](Response response) {
    response.set("X-Request-Id", request_id);
    respond(std::move(response));
  };
  Respond unaudited = respond;
  if (admitted) {
    Caller audited = *admitted;
    audited.request_id = request_id;
    if (auto subject = MutationOf(method, parts, audited))
      respond = AuditRefusals(audited, std::move(*subject), std::move(respond));
  }
  // Query parameters: only the container listing, the usage report, the audit trail and the
  // dashboard's document take any; on every other endpoint one is a mistake, refused rather than
  // ignored.
  const auto query_at = target.find('?');
  const std::string_view query = query_at == std::string::npos
                                     ? std::string_view()
                                     : std::string_view(target).substr(query_at + 1);
  const bool takes_query =
      parts.size() >= 2 && parts[0] == "v1" &&
      ((parts.size() == 2 && parts[1] == "containers" && method == http::verb::get) ||
       (parts.size() == 2 && parts[1] == "tokens" && method == http::verb::get) ||
       (parts.size() == 4 && parts[1] == "tenancies" && parts[3] == "usage") ||
       (parts.size() == 2 && parts[1] == "dashboard" && method == http::verb::get) ||
       (parts.size() == 2 && parts[1] == "audit" && method == http::verb::get));
  if (!takes_query) {
    if (auto none = ParseNoQuery(query); !none) return respond(ErrorResponse(none.error()));
  }

  switch (PublicRouteOf(parts)) {
    case PublicRoute::kDashboard:
      return respond(MakeResponse(http::status::ok, DashboardHtml(), "text/html; charset=utf-8"));
    case PublicRoute::kMetrics: {
      // Without a caller only where Admit let it through: the aggregate series.
      if (!admitted && !metrics_aggregate_public_)
        return respond(Unauthorized(PermissionDenied("/metrics needs a token")));
      const bool full = admitted.has_value();
      // Off the I/O thread: with telemetry on, thousands of series.
      boost::asio::post(render_, [this, full, respond = std::move(respond)] {
        respond(MakeResponse(http::status::ok, Metrics(full), "text/plain; version=0.0.4"));
      });
      return;
    }
    // Alive while it answers; a store that cannot write is said here too (restarting would not
    // help), while /readyz turns the traffic away.
    case PublicRoute::kHealth: {
      auto failure = service_->StoreWriteFailure();
      return respond(MakeResponse(
          http::status::ok,
          failure ? "degraded: the store cannot write: " + *failure + "\n" : "ok\n", "text/plain"));
    }
    // The listener opens only after the store is loaded and reconciled, so a replica that
    // answers at all can take traffic, unless its store cannot write.
    case PublicRoute::kReady: {
      if (auto failure = service_->StoreWriteFailure())
        return respond(MakeResponse(http::status::service_unavailable,
                                    "not ready: the store cannot write: " + *failure + "\n",
                                    "text/plain"));
      return respond(MakeResponse(http::status::ok, "ready\n", "text/plain"));
    }
    case PublicRoute::kOpenApi:
      return respond(MakeResponse(http::status::ok, OpenApiJson()));
    case PublicRoute::kNone:
      break;
  }
  if (!admitted) return respond(Unauthorized(PermissionDenied("missing bearer token")));
  Caller caller = *admitted;
  caller.request_id = request_id;
  const std::string& collection = parts[1];
  const std::string& body = request.body();

  // /v1/tenancies[/{name}[/tokens]]
  if (collection == "tenancies") {
    if (parts.size() == 2) {
      if (method != http::verb::get) return respond(MethodNotAllowed("GET"));
      json list = json::array();
      for (const auto& tenancy : service_->ListTenancies(caller))
        list.push_back(TenancyJson(tenancy, service_->PolicyFor(tenancy)));
      return respond(Json(http::status::ok, {{"tenancies", list}}));
    }
    const std::string& name = parts[2];
    if (parts.size() == 3) {
      if (method == http::verb::get) {
        auto tenancy = service_->GetTenancy(caller, name);
        if (!tenancy) return respond(ErrorResponse(tenancy.error()));
        return respond(
            Json(http::status::ok, TenancyJson(*tenancy, service_->PolicyFor(*tenancy))));
      }
      if (method == http::verb::put) {
        auto tenancy = ParseTenancy(name, body);
        if (!tenancy) return respond(ErrorResponse(tenancy.error()));
        // Durable first, then the tenancy's network and volumes (podman: off the I/O thread);
        // a failure there is reported, and a repeated PUT retries it.
        return service_->PutTenancy(
            caller, std::move(*tenancy),
            [this, respond = std::move(respond),
             unaudited = std::move(unaudited)](Result<fleet::Tenancy> result) mutable {
              if (!result) return respond(ErrorResponse(result.error()));
              PrepareThenRespond(
                  result->name, std::move(unaudited),
                  Json(http::status::ok, TenancyJson(*result, service_->PolicyFor(*result))));
            });
      }
      if (method == http::verb::delete_) {
        // Blocks on the backend (removing containers, network, volumes): off the I/O thread.
        boost::asio::post(blocking_, [this, caller, name, respond = std::move(respond)] {
          auto deleted = service_->DeleteTenancy(caller, name);
          if (!deleted) return respond(ErrorResponse(deleted.error()));
          respond(Json(http::status::ok, {{"name", name}, {"deleted", true}}));
        });
        return;
      }
      return respond(MethodNotAllowed("GET, PUT, DELETE"));
    }
    // /v1/tenancies/{name}/storage: NFS exports the tenancy may mount (admin sets them).
    if (parts.size() == 4 && parts[3] == "storage") {
      if (method == http::verb::get) {
        auto storage = service_->GetStorage(caller, name);
        if (!storage) return respond(ErrorResponse(storage.error()));
        return respond(
            MakeResponse(http::status::ok, tenancy::StorageEntitlementsToJson(*storage) + "\n"));
      }
      if (method == http::verb::put) {
        auto storage = tenancy::ParseStorageEntitlements(body);
        if (!storage) return respond(ErrorResponse(storage.error()));
        return service_->PutStorage(
            caller, name, std::move(*storage),
            [this, name, respond = std::move(respond), unaudited = std::move(unaudited)](
                Result<tenancy::StorageEntitlements> result) mutable {
              if (!result) return respond(ErrorResponse(result.error()));
              PrepareThenRespond(name, std::move(unaudited),
                                 MakeResponse(http::status::ok,
                                              tenancy::StorageEntitlementsToJson(*result) + "\n"));
            });
      }
      return respond(MethodNotAllowed("GET, PUT"));
    }
    // /v1/tenancies/{name}/usage?from=&to=: metered GPU-seconds.
    if (parts.size() == 4 && parts[3] == "usage") {
      if (method != http::verb::get) return respond(MethodNotAllowed("GET"));
      auto parsed = ParseUsageQuery(query);
      if (!parsed) return respond(ErrorResponse(parsed.error()));
      // Worked out from the meter (its own lock, not the model's) and rendered off the I/O
      // thread: a tenancy with many runs holds up nobody's request.
      boost::asio::post(render_,
                        [this, caller, name, parsed = *parsed, respond = std::move(respond)] {
                          auto report = service_->Usage(caller, name, parsed);
                          if (!report) return respond(ErrorResponse(report.error()));
                          respond(Json(http::status::ok, UsageJson(*report, parsed.step_s)));
                        });
      return;
    }
    if (parts.size() == 4 && parts[3] == "tokens") {
      if (method != http::verb::post) return respond(MethodNotAllowed("POST"));
      auto request = ParseTokenRequest(body, fleet::TokenScope::kTenant);
      if (!request) return respond(ErrorResponse(request.error()));
      return service_->CreateToken(
          caller, name, *request,
          Reply<serve::CreatedToken>(std::move(respond), http::status::created, CreatedTokenJson));
    }
  }

  // /v1/tokens[/{id}]: every token (admin), metrics tokens made, one revoked.
  if (collection == "tokens") {
    if (parts.size() == 2) {
      if (method == http::verb::get) {
        auto tenancy = ParseTokenListQuery(query);
        if (!tenancy) return respond(ErrorResponse(tenancy.error()));
        auto tokens = service_->ListTokens(caller, *tenancy);
        if (!tokens) return respond(ErrorResponse(tokens.error()));
        json list = json::array();
        const int64_t now_ms = fleet::NowMs();
        for (const auto& token : *tokens)
          list.push_back(TokenJson(token, now_ms));
        return respond(Json(http::status::ok, {{"tokens", std::move(list)}}));
      }
      if (method == http::verb::post) {
        auto request = ParseTokenRequest(body, fleet::TokenScope::kMetrics);
        if (!request) return respond(ErrorResponse(request.error()));
        return service_->CreateToken(
            caller, "", *request,
            Reply<serve::CreatedToken>(std::move(respond), http::status::created,
                                       CreatedTokenJson));
      }
      return respond(MethodNotAllowed("GET, POST"));
    }
    if (parts.size() == 3) {
      if (method != http::verb::delete_) return respond(MethodNotAllowed("DELETE"));
      const int64_t now_ms = fleet::NowMs();
      return service_->RevokeToken(
          caller, parts[2],
          Reply<fleet::TokenRecord>(std::move(respond), http::status::ok,
                                    [now_ms](const fleet::TokenRecord& token) {
                                      json doc = TokenJson(token, now_ms);
                                      doc["revoked"] = true;
                                      return doc;
                                    }));
    }
  }

  // /v1/admin-token:rotate: a new admin token in force at once, the old one refused.
  if (collection == "admin-token:rotate" && parts.size() == 2) {
    if (method != http::verb::post) return respond(MethodNotAllowed("POST"));
    if (auto empty = ParseEmptyBody(body); !empty) return respond(ErrorResponse(empty.error()));
    auto token = service_->RotateAdminToken(caller);
    if (!token) return respond(ErrorResponse(token.error()));
    return respond(Json(http::status::ok, {{"token", *token}, {"scope", "admin"}}));
  }

  // /v1/containers[/{id}[/logs]]
  if (collection == "containers") {
    if (parts.size() == 2) {
      if (method == http::verb::get) {
        auto parsed = ParseContainerQuery(query);
        if (!parsed) return respond(ErrorResponse(parsed.error()));
        boost::asio::post(render_,
                          [this, caller, query = std::move(*parsed), respond = std::move(respond)] {
                            auto page = service_->ListContainers(caller, query);
                            if (!page) return respond(ErrorResponse(page.error()));
                            json list = json::array();
                            for (const auto& container : page->containers)
                              list.push_back(ContainerJson(container));
                            json doc = {{"containers", std::move(list)}};
                            if (!page->next.empty()) doc["next"] = page->next;
                            respond(Json(http::status::ok, doc));
                          });
        return;
      }
      if (method == http::verb::post) {
        auto spec = ParseContainerSpec(body);
        if (!spec) return respond(ErrorResponse(spec.error()));
        auto key_field = request["Idempotency-Key"];
        std::string key(key_field.data(), key_field.size());
        if (key.size() > 255)
          return respond(ErrorResponse(InvalidArgument("Idempotency-Key: longer than 255 bytes")));
        // It is stored, listed and quoted in a 409: printable ASCII only.
        if (std::any_of(key.begin(), key.end(), [](char c) { return c < 0x20 || c > 0x7e; }))
          return respond(ErrorResponse(
              InvalidArgument("Idempotency-Key: may hold only printable ASCII characters")));
        return service_->Submit(
            caller, std::move(*spec), std::move(key),
            [respond = std::move(respond)](Result<serve::SubmitResult> result) {
              if (!result) return respond(ErrorResponse(result.error()));
              auto response = Json(http::status::accepted, ContainerJson(result->container));
              response.set(http::field::location, "/v1/containers/" + result->container.id);
              if (result->replayed) response.set("Idempotent-Replayed", "true");
              respond(std::move(response));
            });
      }
      return respond(MethodNotAllowed("GET, POST"));
    }
    const std::string& id = parts[2];
    if (parts.size() == 3) {
      if (method == http::verb::get) {
        auto container = service_->GetContainer(caller, id);
        if (!container) return respond(ErrorResponse(container.error()));
        return respond(Json(http::status::ok, ContainerJson(*container)));
      }
      if (method == http::verb::delete_) {
        return service_->DeleteContainer(
            caller, id, [respond = std::move(respond)](Result<fleet::ContainerRecord> result) {
              if (!result) return respond(ErrorResponse(result.error()));
              respond(
                  Json(fleet::IsTerminal(result->state) ? http::status::ok : http::status::accepted,
                       ContainerJson(*result)));
            });
      }
      return respond(MethodNotAllowed("GET, DELETE"));
    }
    if (parts.size() == 4 && parts[3] == "logs") {
      if (method != http::verb::get) return respond(MethodNotAllowed("GET"));
      boost::asio::post(blocking_, [this, caller, id, respond = std::move(respond)] {
        auto logs = service_->Logs(caller, id);
        if (!logs) return respond(ErrorResponse(logs.error()));
        respond(MakeResponse(http::status::ok, std::move(*logs), "text/plain; charset=utf-8"));
      });
      return;
    }
  }

  // /v1/telemetry: this host's last telemetry pass (the node view `tessera top` shows).
  if (collection == "telemetry" && parts.size() == 2) {
    if (method != http::verb::get) return respond(MethodNotAllowed("GET"));
    return respond(MakeResponse(http::status::ok, service_->TelemetryJson(caller) + "\n"));
  }

  // /v1/dashboard
  if (collection == "dashboard" && parts.size() == 2) {
    if (method != http::verb::get) return respond(MethodNotAllowed("GET"));
    auto parsed = ParseDashboardQuery(query);
    if (!parsed) return respond(ErrorResponse(parsed.error()));
    boost::asio::post(
        render_, [this, caller, query = std::move(*parsed), respond = std::move(respond)] {
          json doc = DashboardJson(service_->Dashboard(caller), service_->WatchdogRuns());
          // The chart: the usage API's answer for the chosen tenancy, in the same
          // request.
          if (!query.usage_tenancy.empty()) {
            serve::UsageQuery usage;
            usage.step_s = query.step_s;
            usage.to_s = fleet::NowMs() / 1000;
            usage.from_s = *usage.to_s - query.window_s;
            auto report = service_->Usage(caller, query.usage_tenancy, usage);
            if (!report) return respond(ErrorResponse(report.error()));
            doc["usage"] = UsageJson(*report, usage.step_s);
          }
          respond(Json(http::status::ok, doc));
        });
    return;
  }

  // /v1/audit: the audit trail (admin only), a page at a time, read from the store off the I/O
  // thread.
  if (collection == "audit" && parts.size() == 2) {
    if (method != http::verb::get) return respond(MethodNotAllowed("GET"));
    if (!caller.admin)
      return respond(ErrorResponse(PermissionDenied("only the admin token reads the audit trail")));
    auto parsed = ParseAuditQuery(query);
    if (!parsed) return respond(ErrorResponse(parsed.error()));
    boost::asio::post(render_,
                      [this, caller, query = std::move(*parsed), respond = std::move(respond)] {
                        auto page = service_->Audit(caller, query);
                        if (!page) return respond(ErrorResponse(page.error()));
                        json records = json::array();
                        for (const auto& entry : page->entries)
                          records.push_back(AuditJson(entry));
                        json doc = {{"records", std::move(records)}};
                        if (page->next != 0) doc["next"] = page->next;
                        respond(Json(http::status::ok, doc));
                      });
    return;
  }

  // /v1/queue
  if (collection == "queue" && parts.size() == 2) {
    if (method != http::verb::get) return respond(MethodNotAllowed("GET"));
    boost::asio::post(render_, [this, caller, respond = std::move(respond)] {
      const auto view = service_->Queue(caller);
      json entries = json::array();
      for (const auto& entry : view.entries) {
        entries.push_back({{"id", entry.id},
                           {"tenancy", entry.tenancy},
                           {"gpus", entry.gpus},
                           {"priority", entry.priority},
                           {"queue_position", entry.position},
                           {"reason", entry.reason},
                           {"created_ms", entry.created_ms}});
        if (entry.mig.count > 0)
          entries.back()["mig"] = {{"profile", entry.mig.profile}, {"count", entry.mig.count}};
        if (entry.share) entries.back()["share"] = ShareJson(*entry.share);
      }
      json tenancies = json::array();
      for (const auto& share : view.tenancies) {
        tenancies.push_back({{"name", share.name},
                             {"weight", share.policy.weight},
                             {"quota",
                              {{"gpus", LimitJson(share.policy.quota_gpus)},
                               {"pending", LimitJson(share.policy.quota_pending)}}},
                             {"maxPriority", share.policy.max_priority},
                             {"gpus_in_use", share.gpus_in_use},
                             {"mig_gpus_in_use", share.mig_gpus_in_use},
                             {"pending", share.pending},
                             {"share", share.share},
                             {"target_share", share.target}});
      }
      respond(Json(http::status::ok, {{"scheduling", view.mode},
                                      {"queue", std::move(entries)},
                                      {"queue_total", view.total},
                                      {"tenancies", std::move(tenancies)}}));
    });
    return;
  }

  // /v1/gpus[/{id}/{action}], /v1/leases
  if (collection == "gpus" || collection == "leases") {
    if (parts.size() == 2) {
      if (method != http::verb::get) return respond(MethodNotAllowed("GET"));
      json list = json::array();
      for (const auto& gpu : service_->ListGpus(caller)) {
        if (collection == "gpus") {
          list.push_back(GpuJson(gpu, caller.admin, service_->WatchdogRuns()));
        } else {
          json lease = {{"gpu", gpu.id()},
                        {"state", fleet::LeaseStateName(gpu.state)},
                        {"reason", gpu.reason},
                        {"tenancy", gpu.tenancy},
                        {"container_id", gpu.container_id}};
          // Fractional leases say what they hold and what holds their limits.
          if (gpu.mig_enabled) {
            lease["mode"] = "mig";
            lease["enforcement"] = sharing::EnforcementName(sharing::Enforcement::kHardware);
          } else if (!gpu.shares.empty()) {
            const sharing::Mode mode = gpu.shares.front().share.mode;
            lease["mode"] = sharing::ModeName(mode);
            lease["enforcement"] =
                sharing::EnforcementName(sharing::EnforcementOf(mode, service_->WatchdogRuns()));
            json shares = json::array();
            for (const auto& holder : gpu.shares) {
              json item = ShareJson(holder.share);
              item["tenancy"] = holder.tenancy;
              item["container_id"] = holder.container_id;
              shares.push_back(std::move(item));
            }
            lease["shares"] = std::move(shares);
          }
          list.push_back(std::move(lease));
        }
      }
      return respond(Json(http::status::ok, {{collection, list}}));
    }
    if (collection == "gpus" && parts.size() == 4) {
      if (method != http::verb::post) return respond(MethodNotAllowed("POST"));
      auto action = serve::ParseGpuAction(parts[3]);
      if (!action) return respond(ErrorResponse(action.error()));
      auto reason = ParseGpuActionBody(body);
      if (!reason) return respond(ErrorResponse(reason.error()));
      return service_->GpuAdmin(caller, parts[2], *action, std::move(*reason),
                                Reply<fleet::GpuRecord>(std::move(respond), http::status::ok,
                                                        [watchdog = service_->WatchdogRuns()](
                                                            const fleet::GpuRecord& gpu) {
                                                          return GpuJson(gpu, true, watchdog);
                                                        }));
    }
  }
  respond(NoSuchEndpoint(target));
}

}  // namespace tessera::api
