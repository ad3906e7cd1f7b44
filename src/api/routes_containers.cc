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

namespace {

// The last `count` lines of `text` (a last line without its newline counts).
std::string_view LastLinesOf(std::string_view text, size_t count) {
  size_t at = text.size();
  if (at > 0 && text.back() == '\n') --at;
  while (at > 0) {
    auto newline = text.rfind('\n', at - 1);
    if (newline == std::string_view::npos) return text;
    if (--count == 0) return text.substr(newline + 1);
    at = newline;
  }
  return text;
}

}  // namespace

// The state is read before the output: once it is ended, the answer holds all of the output up
// to its Tessera-Log-Offset, so a follower stops at the first empty answer of an ended container.
void Router::ContainerLogs(RoutedRequest& route) {
  if (route.method != http::verb::get) return route.respond(MethodNotAllowed("GET"));
  auto query = ParseLogQuery(route.query);
  if (!query) return route.respond(ErrorResponse(query.error()));
  boost::asio::post(blocking_, [this, caller = route.caller, id = route.parts[2], query = *query,
                                respond = std::move(route.respond)] {
    auto container = service_->GetContainer(caller, id);
    if (!container) return respond(ErrorResponse(container.error()));
    auto part = service_->LogsFrom(caller, id, query.offset);
    if (!part) return respond(ErrorResponse(part.error()));
    std::string text =
        query.tail ? std::string(LastLinesOf(part->text, *query.tail)) : std::move(part->text);
    auto response = MakeResponse(http::status::ok, std::move(text), "text/plain; charset=utf-8");
    response.set("Tessera-Log-Offset", std::to_string(part->end));
    response.set("Tessera-Container-State", fleet::ContainerStateName(container->state));
    if (part->cut) response.set("Tessera-Log-Cut", "true");
    respond(std::move(response));
  });
}

}  // namespace tessera::api
