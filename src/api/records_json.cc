// Records of the service as the API renders them in JSON.
#include "api/records_json.h"

#include "api/ports_json.h"
#include "serve/faults.h"
#include "serve/queue.h"
#include "sharing/sharing.h"

namespace tessera::api {
namespace {

using nlohmann::json;

// The tenancy's own request rate limit; null: the service's --rate-limit applies.
json TenancyRateLimitJson(const fleet::Tenancy& tenancy) {
  auto it = tenancy.extensions.find(std::string(serve::kRateLimitExtension));
  if (it == tenancy.extensions.end() || it->second == "null") return nullptr;
  auto limit = serve::ParseRateLimit(it->second);
  if (!limit) return nullptr;
  return {{"perSecond", limit->per_second}, {"burst", limit->burst}};
}

json MsOrNull(int64_t ms) {
  return ms == 0 ? json(nullptr) : json(ms);
}

json FaultEntryJson(const health::FaultEntry& entry) {
  return {{"at_ms", entry.at_ms},
          {"signal", entry.signal},
          {"xid", entry.xid ? json(entry.xid) : json(nullptr)},
          {"class", entry.fault_class},
          {"action", entry.action},
          {"reason", entry.reason}};
}

// Its recovery step and the fault that took it out (docs/faults.md); `history`: every fault kept
// (GET /v1/gpus/{id}), else the latest only (listings, the dashboard).
json HealthJson(const health::GpuHealth& health, bool history) {
  json doc = {{"step", health::RecoveryStepName(health.step)},
              {"reason", health.reason},
              {"attempts", health.attempts},
              {"step_since_ms", MsOrNull(health.step_since_ms)},
              {"faulted_ms", MsOrNull(health.faulted_ms)},
              {"fault_count", health.history.size()},
              {"last_fault",
               health.history.empty() ? json(nullptr) : FaultEntryJson(health.history.back())}};
  if (history) {
    json entries = json::array();
    for (const auto& entry : health.history)
      entries.push_back(FaultEntryJson(entry));
    doc["history"] = std::move(entries);
  }
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

// The measured figures of a usage entry, next to its allocated gpu_seconds (null: not measured).
void AddMeasured(json& doc, const std::optional<fleet::MeasuredUsage>& measured) {
  doc["sm_seconds"] = measured ? json(measured->sm_seconds) : json(nullptr);
  doc["memory_gib_seconds"] = measured ? json(measured->memory_gib_seconds) : json(nullptr);
  doc["energy_joules"] = measured ? json(measured->energy_joules) : json(nullptr);
}

}  // namespace

using nlohmann::json;

json LimitJson(int value) {
  return value == scheduling::kUnlimited ? json(nullptr) : json(value);
}

json TenancyJson(const fleet::Tenancy& tenancy, const scheduling::TenancyPolicy& policy) {
  json extensions = json::object();
  for (const auto& [key, value] : tenancy.extensions) {
    // Shown as their own fields below.
    if (key == serve::kSchedulingExtension || key == serve::kRateLimitExtension ||
        key == serve::kFaultPolicyExtension)
      continue;
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
          {"rateLimit", TenancyRateLimitJson(tenancy)},
          {"requeueOnGpuFault", serve::RequeuesOnGpuFault(tenancy)}};
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
  json doc = {{"memory", sharing::FormatMemory(share.memory_bytes)},
              {"memory_bytes", share.memory_bytes},
              {"compute", share.compute_percent},
              {"mode", sharing::ModeName(share.mode)}};
  if (!share.mig_profile.empty()) doc["mig"] = share.mig_profile;
  return doc;
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
  // A share of a MIG slice: the MIG device it was placed on.
  if (c.spec.share && !c.spec.share->mig_profile.empty()) doc["mig_devices"] = c.mig_devices;
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
  doc["volumes"] = tenancy::VolumeRequestsToJson(c.spec.volumes);
  doc["ports"] = PublishedPortsToJson(c);
  // Readiness is a live observation: false until a probe answered, and for a container that
  // is not running.
  if (c.spec.ready)
    doc["ready"] = c.state == fleet::ContainerState::kRunning && c.ready.value_or(false);
  return doc;
}

json GpuJson(const fleet::GpuRecord& g, bool admin, bool watchdog, bool history) {
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
                        {"container_id", slice.container_id},
                        {"shared", slice.shared}});
    doc["mig"] = {
        {"enabled", true}, {"compute_slices", g.compute_slices}, {"slices", std::move(slices)}};
  } else {
    doc["mig"] = nullptr;
  }
  if (g.memory_bytes > 0) doc["memory_bytes"] = g.memory_bytes;
  doc["shared"] = SharedJson(g, watchdog);
  doc["health"] = HealthJson(g.health, history);
  return doc;
}

// GET /v1/tenancies/{name}/usage (and the dashboard's chart, which embeds the same answer).
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
                    {"lost", entry.gauges.lost},
                    {"health", HealthJson(g.health, false)}});
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

// GET /v1/queue.
json QueueJson(const serve::QueueView& view) {
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
  return {{"scheduling", view.mode},
          {"queue", std::move(entries)},
          {"queue_total", view.total},
          {"tenancies", std::move(tenancies)}};
}

// A GPU as GET /v1/leases lists it.
json LeaseJson(const fleet::GpuRecord& gpu, bool watchdog) {
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
    lease["enforcement"] = sharing::EnforcementName(sharing::EnforcementOf(mode, watchdog));
    json shares = json::array();
    for (const auto& holder : gpu.shares) {
      json item = ShareJson(holder.share);
      item["tenancy"] = holder.tenancy;
      item["container_id"] = holder.container_id;
      shares.push_back(std::move(item));
    }
    lease["shares"] = std::move(shares);
  }
  return lease;
}

}  // namespace tessera::api
