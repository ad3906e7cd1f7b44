// API body parsers of `tessera serve`: every request body reaches them before any check.
#include <cstddef>
#include <cstdint>
#include <string>

#include "api/api.h"
#include "serve/queue.h"
#include "serve/rate_limit.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = tessera::api::ParseContainerSpec(text);
  if (spec) {
    // What parses is what the service may act on: it must be within the documented bounds.
    if (spec->gpus < 0 || spec->gpus > tessera::fleet::kMaxGpusPerContainer) __builtin_trap();
    if (spec->image.empty() || !tessera::fleet::CheckTenancyName(spec->tenancy).empty())
      __builtin_trap();
    if (spec->priority < tessera::scheduling::kMinPriority ||
        spec->priority > tessera::scheduling::kMaxPriority || spec->max_duration_s < 0 ||
        spec->max_duration_s > tessera::scheduling::kMaxDurationLimitSeconds)
      __builtin_trap();
    // A share is a share of one GPU, in range, and nothing else.
    if (spec->share && (!tessera::sharing::CheckShare(*spec->share) || spec->gpus > 0 ||
                        spec->mig.count > 0 || spec->isolation == tessera::fleet::Isolation::kKata))
      __builtin_trap();
    // Published ports: bounded, in range, unique per protocol, on the tenancy network; the
    // probe's port is one of its tcp ports and its path fits a request line.
    if (spec->ports.size() > tessera::fleet::kMaxPortsPerContainer) __builtin_trap();
    if (!spec->ports.empty() && spec->network == tessera::tenancy::NetworkMode::kNone)
      __builtin_trap();
    for (size_t i = 0; i < spec->ports.size(); ++i) {
      const auto& port = spec->ports[i];
      if (port.container_port < 1 || port.container_port > 65535 || port.name.size() > 15 ||
          (port.protocol != "tcp" && port.protocol != "udp"))
        __builtin_trap();
      for (size_t j = 0; j < i; ++j)
        if (spec->ports[j].container_port == port.container_port &&
            spec->ports[j].protocol == port.protocol)
          __builtin_trap();
    }
    if (spec->ready) {
      bool tcp = false;
      for (const auto& port : spec->ports)
        tcp = tcp || (port.container_port == spec->ready->port && port.protocol == "tcp");
      if (!tcp || spec->ready->path.empty() || spec->ready->path[0] != '/' ||
          spec->ready->path.size() > 256)
        __builtin_trap();
      for (unsigned char c : spec->ready->path)
        if (c <= 0x20 || c >= 0x7f) __builtin_trap();
    }
  } else if (spec.error().message.empty()) {
    __builtin_trap();  // a 400 must name the field
  }
  auto tenancy = tessera::api::ParseTenancy("team-a", text);
  if (!tenancy && tenancy.error().message.empty()) __builtin_trap();
  if (tenancy) {
    // A policy the parser accepted is stored as an extension that reads back the same.
    auto stored = tenancy->extensions.find(std::string(tessera::serve::kSchedulingExtension));
    if (stored != tenancy->extensions.end()) {
      auto policy =
          tessera::serve::ParseTenancyPolicy(stored->second, tessera::serve::PolicySource::kRecord);
      if (!policy || !tessera::scheduling::ValidateTenancyPolicy(*policy)) __builtin_trap();
      if (tessera::serve::TenancyPolicyToJson(*policy) != stored->second) __builtin_trap();
    }
  }
  // The policy parser, from the API and from a record: whatever it accepts is within bounds (a
  // number at or above 2^63 is never wrapped into one) and reads back the same from its record.
  for (auto source : {tessera::serve::PolicySource::kApi, tessera::serve::PolicySource::kRecord}) {
    auto policy = tessera::serve::ParseTenancyPolicy(text, source);
    if (!policy) {
      if (policy.error().message.empty()) __builtin_trap();
      continue;
    }
    if (!tessera::scheduling::ValidateTenancyPolicy(*policy)) __builtin_trap();
    if (policy->max_priority < tessera::scheduling::kMinPriority) __builtin_trap();
    auto back = tessera::serve::ParseTenancyPolicy(tessera::serve::TenancyPolicyToJson(*policy),
                                                   tessera::serve::PolicySource::kRecord);
    if (!back || back->quota_pending != policy->quota_pending ||
        back->quota_gpus != policy->quota_gpus || back->max_priority != policy->max_priority)
      __builtin_trap();
  }
  if (tenancy) {
    // A rate limit the parser accepted is stored as "null" or as one that reads back the same.
    auto stored = tenancy->extensions.find(std::string(tessera::serve::kRateLimitExtension));
    if (stored != tenancy->extensions.end() && stored->second != "null") {
      auto limit = tessera::serve::ParseRateLimit(stored->second);
      if (!limit || limit->per_second < 0 ||
          limit->per_second > tessera::serve::kMaxRatePerSecond || limit->burst < 1 ||
          limit->burst > tessera::serve::kMaxRateBurst ||
          tessera::serve::RateLimitToJson(*limit) != stored->second)
        __builtin_trap();
    }
  }
  // Token creation bodies: a scope that exists, an expiry within its bound (never one whose
  // milliseconds overflow).
  for (auto scope : {tessera::fleet::TokenScope::kTenant, tessera::fleet::TokenScope::kMetrics}) {
    auto request = tessera::api::ParseTokenRequest(text, scope);
    if (!request) {
      if (request.error().message.empty()) __builtin_trap();
      continue;
    }
    if (request->expires_in_s < 0 ||
        request->expires_in_s > tessera::serve::TokenRequest::kMaxExpiresInSeconds)
      __builtin_trap();
    if (std::string(tessera::fleet::TokenScopeName(request->scope)).empty()) __builtin_trap();
  }
  auto limit = tessera::serve::ParseRateLimit(text);
  if (limit) {
    if (!(limit->per_second >= 0 && limit->per_second <= tessera::serve::kMaxRatePerSecond) ||
        !(limit->burst >= 1 && limit->burst <= tessera::serve::kMaxRateBurst))
      __builtin_trap();
  } else if (limit.error().message.empty()) {
    __builtin_trap();
  }
  (void)tessera::serve::ParseRateFlag(text);
  auto tokens = tessera::api::ParseTokenListQuery(text);
  if (tokens && !tokens->empty() && !tessera::fleet::CheckTenancyName(*tokens).empty())
    __builtin_trap();
  auto usage = tessera::api::ParseUsageQuery(text);
  if (usage) {
    // Whole seconds of years 0..9999 only: their milliseconds never overflow.
    if (usage->from_s < 0 || usage->from_s > 253402300799 ||
        (usage->to_s && (*usage->to_s < usage->from_s || *usage->to_s > 253402300799)))
      __builtin_trap();
  } else if (usage.error().message.empty()) {
    __builtin_trap();
  }
  auto none = tessera::api::ParseNoQuery(text);
  if (!none && none.error().message.empty()) __builtin_trap();
  auto empty = tessera::api::ParseEmptyBody(text);
  if (!empty && empty.error().message.empty()) __builtin_trap();
  auto reason = tessera::api::ParseGpuActionBody(text);
  if (!reason && reason.error().message.empty()) __builtin_trap();
  (void)tessera::api::ParseListen(text);
  auto logs = tessera::api::ParseLogQuery(text);
  if (logs) {
    if (logs->offset > tessera::api::LogQuery::kMaxOffset ||
        (logs->tail && (*logs->tail < 1 || *logs->tail > tessera::api::LogQuery::kMaxTail)))
      __builtin_trap();
  } else if (logs.error().message.empty() || logs.error().message.size() > 400) {
    __builtin_trap();  // an error names the parameter by an excerpt, never the input whole
  }
  auto query = tessera::api::ParseContainerQuery(text);
  if (query) {
    if (query->limit < 1 || query->limit > tessera::serve::ContainerQuery::kMaxLimit)
      __builtin_trap();
  } else if (query.error().message.empty()) {
    __builtin_trap();
  }
  return 0;
}
