// Read-only views: /v1/telemetry, /v1/dashboard, /v1/audit and /v1/queue.
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "api/api.h"
#include "api/records_json.h"
#include "api/responses.h"
#include "api/router.h"

namespace tessera::api {

using nlohmann::json;

// This host's last telemetry pass (the node view `tessera top` shows).
void Router::Telemetry(RoutedRequest& route) {
  if (route.method != http::verb::get) return route.respond(MethodNotAllowed("GET"));
  route.respond(MakeResponse(http::status::ok, service_->TelemetryJson(route.caller) + "\n"));
}

void Router::Dashboard(RoutedRequest& route) {
  if (route.method != http::verb::get) return route.respond(MethodNotAllowed("GET"));
  auto parsed = ParseDashboardQuery(route.query);
  if (!parsed) return route.respond(ErrorResponse(parsed.error()));
  boost::asio::post(render_, [this, caller = route.caller, query = std::move(*parsed),
                              respond = std::move(route.respond)] {
    json doc = DashboardJson(service_->Dashboard(caller), service_->WatchdogRuns());
    // The chart: the usage API's answer for the chosen tenancy, in the same request.
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
}

// The audit trail (admin only), a page at a time, read from the store off the I/O thread.
void Router::Audit(RoutedRequest& route) {
  if (route.method != http::verb::get) return route.respond(MethodNotAllowed("GET"));
  if (!route.caller.admin)
    return route.respond(
        ErrorResponse(PermissionDenied("only the admin token reads the audit trail")));
  auto parsed = ParseAuditQuery(route.query);
  if (!parsed) return route.respond(ErrorResponse(parsed.error()));
  boost::asio::post(render_, [this, caller = route.caller, query = std::move(*parsed),
                              respond = std::move(route.respond)] {
    auto page = service_->Audit(caller, query);
    if (!page) return respond(ErrorResponse(page.error()));
    json records = json::array();
    for (const auto& entry : page->entries)
      records.push_back(AuditJson(entry));
    json doc = {{"records", std::move(records)}};
    if (page->next != 0) doc["next"] = page->next;
    respond(Json(http::status::ok, doc));
  });
}

void Router::Queue(RoutedRequest& route) {
  if (route.method != http::verb::get) return route.respond(MethodNotAllowed("GET"));
  boost::asio::post(render_, [this, caller = route.caller, respond = std::move(route.respond)] {
    respond(Json(http::status::ok, QueueJson(service_->Queue(caller))));
  });
}

}  // namespace tessera::api
