// Internal to the api module: the service's records as the API renders them in JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "serve/service.h"

namespace tessera::api {

// A limit of the scheduling policy; null: unlimited.
nlohmann::json LimitJson(int value);
nlohmann::json TenancyJson(const fleet::Tenancy& tenancy, const scheduling::TenancyPolicy& policy);
// A token as GET /v1/tokens lists it: never its secret nor its hash.
nlohmann::json TokenJson(const fleet::TokenRecord& token, int64_t now_ms);
// A token just made: the listing's fields and, this once, its secret.
nlohmann::json CreatedTokenJson(const serve::CreatedToken& created);
nlohmann::json ShareJson(const sharing::Share& share);
nlohmann::json ContainerJson(const fleet::ContainerRecord& c);
// `admin`: with the firmware baseline; `watchdog`: what enforces MPS shares; `history`: its
// health with every fault kept (else the latest only).
nlohmann::json GpuJson(const fleet::GpuRecord& g, bool admin, bool watchdog, bool history = false);
nlohmann::json LeaseJson(const fleet::GpuRecord& gpu, bool watchdog);
// step_s > 0: with the series in buckets of that many seconds.
nlohmann::json UsageJson(const serve::UsageReport& report, int64_t step_s);
nlohmann::json DashboardJson(const serve::DashboardView& view, bool watchdog);
nlohmann::json AuditJson(const fleet::AuditEntry& entry);
nlohmann::json QueueJson(const serve::QueueView& view);

}  // namespace tessera::api
