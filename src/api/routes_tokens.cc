// /v1/tokens[/{id}]: every token (admin), metrics tokens made, one revoked; and
// /v1/admin-token:rotate.
#include <nlohmann/json.hpp>

#include "api/api.h"
#include "api/records_json.h"
#include "api/responses.h"
#include "api/router.h"

namespace tessera::api {

using nlohmann::json;

void Router::RouteTokens(RoutedRequest& route) {
  if (route.parts.size() == 2) {
    if (route.method == http::verb::get) return ListTokens(route);
    if (route.method == http::verb::post) {
      auto request = ParseTokenRequest(route.request.body(), fleet::TokenScope::kMetrics);
      if (!request) return route.respond(ErrorResponse(request.error()));
      return service_->CreateToken(
          route.caller, "", *request,
          Reply<serve::CreatedToken>(std::move(route.respond), http::status::created,
                                     CreatedTokenJson));
    }
    return route.respond(MethodNotAllowed("GET, POST"));
  }
  if (route.parts.size() == 3) return RevokeToken(route);
  route.respond(NoSuchEndpoint(route.target));
}

void Router::ListTokens(RoutedRequest& route) {
  auto tenancy = ParseTokenListQuery(route.query);
  if (!tenancy) return route.respond(ErrorResponse(tenancy.error()));
  auto tokens = service_->ListTokens(route.caller, *tenancy);
  if (!tokens) return route.respond(ErrorResponse(tokens.error()));
  json list = json::array();
  const int64_t now_ms = fleet::NowMs();
  for (const auto& token : *tokens)
    list.push_back(TokenJson(token, now_ms));
  route.respond(Json(http::status::ok, {{"tokens", std::move(list)}}));
}

void Router::RevokeToken(RoutedRequest& route) {
  if (route.method != http::verb::delete_) return route.respond(MethodNotAllowed("DELETE"));
  const int64_t now_ms = fleet::NowMs();
  service_->RevokeToken(route.caller, route.parts[2],
                        Reply<fleet::TokenRecord>(std::move(route.respond), http::status::ok,
                                                  [now_ms](const fleet::TokenRecord& token) {
                                                    json doc = TokenJson(token, now_ms);
                                                    doc["revoked"] = true;
                                                    return doc;
                                                  }));
}

// A new admin token in force at once, the old one refused.
void Router::RotateAdminToken(RoutedRequest& route) {
  if (route.method != http::verb::post) return route.respond(MethodNotAllowed("POST"));
  if (auto empty = ParseEmptyBody(route.request.body()); !empty)
    return route.respond(ErrorResponse(empty.error()));
  auto token = service_->RotateAdminToken(route.caller);
  if (!token) return route.respond(ErrorResponse(token.error()));
  route.respond(Json(http::status::ok, {{"token", *token}, {"scope", "admin"}}));
}

}  // namespace tessera::api
