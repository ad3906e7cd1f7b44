// /v1/tenancies[/{name}[/storage|usage|tokens]]: tenancies, their storage entitlements, their
// metered usage and their tokens.
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "api/api.h"
#include "api/records_json.h"
#include "api/responses.h"
#include "api/router.h"

namespace tessera::api {

using nlohmann::json;

void Router::RouteTenancies(RoutedRequest& route) {
  const auto& parts = route.parts;
  if (parts.size() == 2) return ListTenancies(route);
  if (parts.size() == 3) return RouteTenancy(route);
  if (parts.size() == 4 && parts[3] == "storage") return RouteStorage(route);
  if (parts.size() == 4 && parts[3] == "usage") return ReportUsage(route);
  if (parts.size() == 4 && parts[3] == "tokens") return CreateTenancyToken(route);
  route.respond(NoSuchEndpoint(route.target));
}

void Router::ListTenancies(RoutedRequest& route) {
  if (route.method != http::verb::get) return route.respond(MethodNotAllowed("GET"));
  json list = json::array();
  for (const auto& tenancy : service_->ListTenancies(route.caller))
    list.push_back(TenancyJson(tenancy, service_->PolicyFor(tenancy)));
  route.respond(Json(http::status::ok, {{"tenancies", list}}));
}

void Router::RouteTenancy(RoutedRequest& route) {
  if (route.method == http::verb::get) {
    auto tenancy = service_->GetTenancy(route.caller, route.parts[2]);
    if (!tenancy) return route.respond(ErrorResponse(tenancy.error()));
    return route.respond(
        Json(http::status::ok, TenancyJson(*tenancy, service_->PolicyFor(*tenancy))));
  }
  if (route.method == http::verb::put) return PutTenancy(route);
  if (route.method == http::verb::delete_) return DeleteTenancy(route);
  route.respond(MethodNotAllowed("GET, PUT, DELETE"));
}

void Router::PutTenancy(RoutedRequest& route) {
  auto tenancy = ParseTenancy(route.parts[2], route.request.body());
  if (!tenancy) return route.respond(ErrorResponse(tenancy.error()));
  // Durable first, then the tenancy's network and volumes (podman: off the I/O thread); a
  // failure there is reported, and a repeated PUT retries it.
  service_->PutTenancy(
      route.caller, std::move(*tenancy),
      [this, respond = std::move(route.respond),
       unaudited = std::move(route.unaudited)](Result<fleet::Tenancy> result) mutable {
        if (!result) return respond(ErrorResponse(result.error()));
        PrepareThenRespond(
            result->name, std::move(unaudited),
            Json(http::status::ok, TenancyJson(*result, service_->PolicyFor(*result))));
      });
}

void Router::DeleteTenancy(RoutedRequest& route) {
  // Blocks on the backend (removing containers, network, volumes): off the I/O thread.
  boost::asio::post(blocking_, [this, caller = route.caller, name = route.parts[2],
                                respond = std::move(route.respond)] {
    auto deleted = service_->DeleteTenancy(caller, name);
    if (!deleted) return respond(ErrorResponse(deleted.error()));
    respond(Json(http::status::ok, {{"name", name}, {"deleted", true}}));
  });
}

// /v1/tenancies/{name}/storage: NFS exports the tenancy may mount (admin sets them).
void Router::RouteStorage(RoutedRequest& route) {
  const std::string& name = route.parts[2];
  if (route.method == http::verb::get) {
    auto storage = service_->GetStorage(route.caller, name);
    if (!storage) return route.respond(ErrorResponse(storage.error()));
    return route.respond(
        MakeResponse(http::status::ok, tenancy::StorageEntitlementsToJson(*storage) + "\n"));
  }
  if (route.method == http::verb::put) {
    auto storage = tenancy::ParseStorageEntitlements(route.request.body());
    if (!storage) return route.respond(ErrorResponse(storage.error()));
    return service_->PutStorage(
        route.caller, name, std::move(*storage),
        [this, name, respond = std::move(route.respond), unaudited = std::move(route.unaudited)](
            Result<tenancy::StorageEntitlements> result) mutable {
          if (!result) return respond(ErrorResponse(result.error()));
          PrepareThenRespond(
              name, std::move(unaudited),
              MakeResponse(http::status::ok, tenancy::StorageEntitlementsToJson(*result) + "\n"));
        });
  }
  route.respond(MethodNotAllowed("GET, PUT"));
}

// /v1/tenancies/{name}/usage?from=&to=: metered GPU-seconds.
void Router::ReportUsage(RoutedRequest& route) {
  if (route.method != http::verb::get) return route.respond(MethodNotAllowed("GET"));
  auto parsed = ParseUsageQuery(route.query);
  if (!parsed) return route.respond(ErrorResponse(parsed.error()));
  // Worked out from the meter (its own lock, not the model's) and rendered off the I/O thread: a
  // tenancy with many runs holds up nobody's request.
  boost::asio::post(render_, [this, caller = route.caller, name = route.parts[2], parsed = *parsed,
                              respond = std::move(route.respond)] {
    auto report = service_->Usage(caller, name, parsed);
    if (!report) return respond(ErrorResponse(report.error()));
    respond(Json(http::status::ok, UsageJson(*report, parsed.step_s)));
  });
}

void Router::CreateTenancyToken(RoutedRequest& route) {
  if (route.method != http::verb::post) return route.respond(MethodNotAllowed("POST"));
  auto request = ParseTokenRequest(route.request.body(), fleet::TokenScope::kTenant);
  if (!request) return route.respond(ErrorResponse(request.error()));
  service_->CreateToken(route.caller, route.parts[2], *request,
                        Reply<serve::CreatedToken>(std::move(route.respond), http::status::created,
                                                   CreatedTokenJson));
}

}  // namespace tessera::api
