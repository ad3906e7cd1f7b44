// /v1/gpus[/{id}[/{action}]] and /v1/leases: the GPUs (one with its fault history), their leases,
// and the admin's actions on one (drain, quarantine...).
#include <nlohmann/json.hpp>

#include "api/api.h"
#include "api/records_json.h"
#include "api/responses.h"
#include "api/router.h"

namespace tessera::api {

using nlohmann::json;

void Router::RouteGpus(RoutedRequest& route) {
  if (route.parts.size() == 2) return ListGpus(route);
  if (route.parts[1] == "gpus" && route.parts.size() == 3) return GetGpu(route);
  if (route.parts[1] == "gpus" && route.parts.size() == 4) return GpuAction(route);
  route.respond(NoSuchEndpoint(route.target));
}

void Router::ListGpus(RoutedRequest& route) {
  if (route.method != http::verb::get) return route.respond(MethodNotAllowed("GET"));
  const std::string& collection = route.parts[1];
  json list = json::array();
  for (const auto& gpu : service_->ListGpus(route.caller)) {
    if (collection == "gpus") {
      list.push_back(GpuJson(gpu, route.caller.admin, service_->WatchdogRuns()));
    } else {
      list.push_back(LeaseJson(gpu, service_->WatchdogRuns()));
    }
  }
  route.respond(Json(http::status::ok, {{collection, list}}));
}

void Router::GetGpu(RoutedRequest& route) {
  if (route.method != http::verb::get) return route.respond(MethodNotAllowed("GET"));
  auto gpu = service_->GetGpu(route.caller, route.parts[2]);
  if (!gpu) return route.respond(ErrorResponse(gpu.error()));
  route.respond(
      Json(http::status::ok, GpuJson(*gpu, route.caller.admin, service_->WatchdogRuns(), true)));
}

void Router::GpuAction(RoutedRequest& route) {
  if (route.method != http::verb::post) return route.respond(MethodNotAllowed("POST"));
  auto action = serve::ParseGpuAction(route.parts[3]);
  if (!action) return route.respond(ErrorResponse(action.error()));
  auto reason = ParseGpuActionBody(route.request.body());
  if (!reason) return route.respond(ErrorResponse(reason.error()));
  service_->GpuAdmin(
      route.caller, route.parts[2], *action, std::move(*reason),
      Reply<fleet::GpuRecord>(std::move(route.respond), http::status::ok,
                              [watchdog = service_->WatchdogRuns()](const fleet::GpuRecord& gpu) {
                                return GpuJson(gpu, true, watchdog);
                              }));
}

}  // namespace tessera::api
