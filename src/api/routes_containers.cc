// /v1/containers[/{id}[/logs]]: submissions, their listing, state, logs and deletion.
#include <algorithm>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "api/api.h"
#include "api/records_json.h"
#include "api/responses.h"
#include "api/router.h"

namespace tessera::api {

using nlohmann::json;

void Router::RouteContainers(RoutedRequest& route) {
  const auto& parts = route.parts;
  if (parts.size() == 2) {
    if (route.method == http::verb::get) return ListContainers(route);
    if (route.method == http::verb::post) return SubmitContainer(route);
    return route.respond(MethodNotAllowed("GET, POST"));
  }
  if (parts.size() == 3) return RouteContainer(route);
  if (parts.size() == 4 && parts[3] == "logs") return ContainerLogs(route);
  route.respond(NoSuchEndpoint(route.target));
}

void Router::ListContainers(RoutedRequest& route) {
  auto parsed = ParseContainerQuery(route.query);
  if (!parsed) return route.respond(ErrorResponse(parsed.error()));
  boost::asio::post(render_, [this, caller = route.caller, query = std::move(*parsed),
                              respond = std::move(route.respond)] {
    auto page = service_->ListContainers(caller, query);
    if (!page) return respond(ErrorResponse(page.error()));
    json list = json::array();
    for (const auto& container : page->containers)
      list.push_back(ContainerJson(container));
    json doc = {{"containers", std::move(list)}};
    if (!page->next.empty()) doc["next"] = page->next;
    respond(Json(http::status::ok, doc));
  });
}

void Router::SubmitContainer(RoutedRequest& route) {
  auto spec = ParseContainerSpec(route.request.body());
  if (!spec) return route.respond(ErrorResponse(spec.error()));
  auto key_field = route.request["Idempotency-Key"];
  std::string key(key_field.data(), key_field.size());
  if (key.size() > 255)
    return route.respond(ErrorResponse(InvalidArgument("Idempotency-Key: longer than 255 bytes")));
  // It is stored, listed and quoted in a 409: printable ASCII only.
  if (std::any_of(key.begin(), key.end(), [](char c) { return c < 0x20 || c > 0x7e; }))
    return route.respond(ErrorResponse(
        InvalidArgument("Idempotency-Key: may hold only printable ASCII characters")));
  service_->Submit(route.caller, std::move(*spec), std::move(key),
                   [respond = std::move(route.respond)](Result<serve::SubmitResult> result) {
                     if (!result) return respond(ErrorResponse(result.error()));
                     auto response = Json(http::status::accepted, ContainerJson(result->container));
                     response.set(http::field::location, "/v1/containers/" + result->container.id);
                     if (result->replayed) response.set("Idempotent-Replayed", "true");
                     respond(std::move(response));
                   });
}

void Router::RouteContainer(RoutedRequest& route) {
  const std::string& id = route.parts[2];
  if (route.method == http::verb::get) {
    auto container = service_->GetContainer(route.caller, id);
    if (!container) return route.respond(ErrorResponse(container.error()));
    return route.respond(Json(http::status::ok, ContainerJson(*container)));
  }
  if (route.method == http::verb::delete_) {
    return service_->DeleteContainer(
        route.caller, id,
        [respond = std::move(route.respond)](Result<fleet::ContainerRecord> result) {
          if (!result) return respond(ErrorResponse(result.error()));
          respond(Json(fleet::IsTerminal(result->state) ? http::status::ok : http::status::accepted,
                       ContainerJson(*result)));
        });
  }
  route.respond(MethodNotAllowed("GET, DELETE"));
}

void Router::ContainerLogs(RoutedRequest& route) {
  if (route.method != http::verb::get) return route.respond(MethodNotAllowed("GET"));
  boost::asio::post(blocking_, [this, caller = route.caller, id = route.parts[2],
                                respond = std::move(route.respond)] {
    auto logs = service_->Logs(caller, id);
    if (!logs) return respond(ErrorResponse(logs.error()));
    respond(MakeResponse(http::status::ok, std::move(*logs), "text/plain; charset=utf-8"));
  });
}

}  // namespace tessera::api
