// HTTP answers of the API: JSON bodies, and the one place an Error's category becomes a status.
#include "api/responses.h"

#include "common/untrusted_text.h"
#include "serve/queue.h"

namespace tessera::api {
namespace {

using nlohmann::json;

std::string Dump(const json& doc) {
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

http::status StatusFor(const Error& error) {
  switch (error.category) {
    case ErrorCategory::kInvalidArgument:
      return http::status::bad_request;
    case ErrorCategory::kNotFound:
      return http::status::not_found;
    case ErrorCategory::kAlreadyExists:
    case ErrorCategory::kFailedPrecondition:
      return http::status::conflict;
    case ErrorCategory::kPermissionDenied:
      return http::status::forbidden;
    case ErrorCategory::kUnavailable:
      return http::status::service_unavailable;
    default:
      return http::status::internal_server_error;
  }
}

std::string CategoryCode(ErrorCategory category) {
  std::string name(CategoryName(category));
  for (auto& c : name)
    if (c == ' ') c = '_';
  return name;
}

}  // namespace

Response MakeResponse(http::status status, std::string body, const char* content_type) {
  Response response{status, 11};
  response.set(http::field::content_type, content_type);
  response.set(http::field::cache_control, "no-store");
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

Response Json(http::status status, const json& doc) {
  return MakeResponse(status, Dump(doc) + "\n");
}

Response ErrorResponse(const Error& error, http::status status) {
  return Json(status,
              {{"error", {{"code", CategoryCode(error.category)}, {"message", error.message}}}});
}

Response ErrorResponse(const Error& error) {
  // Over a tenancy's pending quota: the client may submit again once some of its work started.
  if (serve::IsQuotaRefusal(error)) return ErrorResponse(error, http::status::too_many_requests);
  return ErrorResponse(error, StatusFor(error));
}

Response TooManyRequests(int retry_after_s) {
  auto response = ErrorResponse(Unavailable("request rate limit: too many requests; retry after " +
                                            std::to_string(retry_after_s) + " s"),
                                http::status::too_many_requests);
  response.set(http::field::retry_after, std::to_string(retry_after_s));
  return response;
}

Response Unauthorized(const Error& error) {
  auto response = ErrorResponse(Error{ErrorCategory::kPermissionDenied,
                                      error.message + " (send Authorization: Bearer <token>)"},
                                http::status::unauthorized);
  response.set(http::field::www_authenticate, "Bearer");
  return response;
}

Response NoSuchEndpoint(std::string_view target) {
  return ErrorResponse(NotFound("no such endpoint: " + Excerpt(target, 80)));
}

Response MethodNotAllowed(const char* allowed) {
  auto response = ErrorResponse(InvalidArgument(std::string("method not allowed; use ") + allowed),
                                http::status::method_not_allowed);
  response.set(http::field::allow, allowed);
  return response;
}

}  // namespace tessera::api
