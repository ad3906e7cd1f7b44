// Internal to the api module: HTTP answers, and the one place an Error's category becomes an
// HTTP status.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "api/router.h"

namespace tessera::api {

Response MakeResponse(http::status status, std::string body,
                      const char* content_type = "application/json");
Response Json(http::status status, const nlohmann::json& doc);
Response ErrorResponse(const Error& error, http::status status);
// The status the error's category maps to (a refusal over a pending quota: 429).
Response ErrorResponse(const Error& error);
// 429 with Retry-After: over a request rate limit.
Response TooManyRequests(int retry_after_s);
// 401 with WWW-Authenticate: Bearer.
Response Unauthorized(const Error& error);
Response NoSuchEndpoint(std::string_view target);
// 405 with Allow: `allowed`.
Response MethodNotAllowed(const char* allowed);

// Adapts a Done<T> of the service into an HTTP answer.
template <typename T, typename Render>
serve::Done<T> Reply(Respond respond, http::status ok, Render render) {
  return [respond = std::move(respond), ok, render](Result<T> result) {
    if (!result) return respond(ErrorResponse(result.error()));
    respond(Json(ok, render(*result)));
  };
}

}  // namespace tessera::api
