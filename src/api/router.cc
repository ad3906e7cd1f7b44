// Admission (authentication, scope, rate limits) and routing of requests to the resources'
// routes (routes_*.cc); the routes that need no token are answered here.
#include "api/router.h"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "api/api.h"
#include "api/responses.h"
#include "common/untrusted_text.h"
#include "serve/queue.h"

namespace tessera::api {
namespace {

using nlohmann::json;
using serve::Caller;

std::vector<std::string> SplitPath(std::string_view target) {
  auto query = target.find('?');
  if (query != std::string_view::npos) target = target.substr(0, query);
  std::vector<std::string> parts;
  size_t start = 0;
  while (start < target.size()) {
    size_t end = target.find('/', start);
    if (end == std::string_view::npos) end = target.size();
    if (end > start) parts.emplace_back(target.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

int MethodSlot(http::verb method) {
  switch (method) {
    case http::verb::get:
      return 0;
    case http::verb::post:
      return 1;
    case http::verb::put:
      return 2;
    case http::verb::delete_:
      return 3;
    default:
      return 4;
  }
}

// Longest path segment routed: tenancy names are DNS labels, container IDs and GPU IDs short.
// Anything longer is refused before a handler could echo it into a message.
constexpr size_t kMaxPathSegment = 253;

// What a token's scope allows on the routes behind a token (the service then decides per
// object): read-only tokens read, metrics tokens read /metrics only (see AdmitMetrics).
Status CheckScope(const Caller& caller, http::verb method) {
  switch (caller.scope) {
    case fleet::TokenScope::kAdmin:
    case fleet::TokenScope::kTenant:
      return Ok();
    case fleet::TokenScope::kReadOnly:
      if (method == http::verb::get || method == http::verb::head) return Ok();
      return PermissionDenied("token " + caller.token_id + " is read-only: GET requests only");
    case fleet::TokenScope::kMetrics:
      break;
  }
  return PermissionDenied("token " + caller.token_id + " reads /metrics only");
}

std::string BearerToken(const http::request_header<>& header) {
  auto field = header[http::field::authorization];
  std::string_view auth(field.data(), field.size());
  if (auth.size() > 7 && (auth.substr(0, 7) == "Bearer " || auth.substr(0, 7) == "bearer "))
    return std::string(auth.substr(7));
  return "";
}

// The routes served without a token.
enum class PublicRoute { kNone, kDashboard, kMetrics, kHealth, kReady, kOpenApi };

PublicRoute PublicRouteOf(const std::vector<std::string>& parts) {
  if (parts.empty() || (parts.size() == 1 && parts[0] == "index.html"))
    return PublicRoute::kDashboard;
  if (parts.size() == 1 && parts[0] == "metrics") return PublicRoute::kMetrics;
  if (parts.size() == 1 && parts[0] == "healthz") return PublicRoute::kHealth;
  if (parts.size() == 1 && parts[0] == "readyz") return PublicRoute::kReady;
  if (parts.size() == 2 && parts[0] == "v1" && parts[1] == "openapi.json")
    return PublicRoute::kOpenApi;
  return PublicRoute::kNone;
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string_view TrimmedField(boost::beast::string_view value) {
  std::string_view text(value.data(), value.size());
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  return text;
}

// The audit subject of a mutating route (method and path), or nullopt for a read or an unknown
// route. Names from the path are the caller's text: kept as excerpts.
std::optional<serve::AuditSubject> MutationOf(http::verb method,
                                              const std::vector<std::string>& parts,
                                              const Caller& caller) {
  if (parts.size() < 2 || parts[0] != "v1") return std::nullopt;
  const std::string own = caller.admin ? "" : caller.tenancy;
  const std::string& collection = parts[1];
  if (collection == "tenancies" && parts.size() >= 3) {
    const std::string name = Excerpt(parts[2], 80);
    if (parts.size() == 3 && method == http::verb::put)
      return serve::AuditSubject{"tenancy.put", "tenancy", name, name};
    if (parts.size() == 3 && method == http::verb::delete_)
      return serve::AuditSubject{"tenancy.delete", "tenancy", name, name};
    if (parts.size() == 4 && parts[3] == "storage" && method == http::verb::put)
      return serve::AuditSubject{"storage.put", "storage", name, name};
    if (parts.size() == 4 && parts[3] == "tokens" && method == http::verb::post)
      return serve::AuditSubject{"token.create", "token", "", name};
  }
  if (collection == "tokens" && parts.size() == 2 && method == http::verb::post)
    return serve::AuditSubject{"token.create", "token", "", ""};
  if (collection == "tokens" && parts.size() == 3 && method == http::verb::delete_)
    return serve::AuditSubject{"token.revoke", "token", Excerpt(parts[2], 80), ""};
  if (collection == "admin-token:rotate" && parts.size() == 2 && method == http::verb::post)
    return serve::AuditSubject{"admin-token.rotate", "token", "admin", ""};
  if (collection == "containers" && parts.size() == 2 && method == http::verb::post)
    return serve::AuditSubject{"container.create", "container", "", own};
  if (collection == "containers" && parts.size() == 3 && method == http::verb::delete_)
    return serve::AuditSubject{"container.delete", "container", Excerpt(parts[2], 80), own};
  if (collection == "gpus" && parts.size() == 4 && method == http::verb::post) {
    auto action = serve::ParseGpuAction(parts[3]);
    return serve::AuditSubject{action ? serve::GpuAuditAction(*action) : "gpu.action", "gpu",
                               Excerpt(parts[2], 80), ""};
  }
  return std::nullopt;
}

// Query parameters: only the container and token listings, a container's logs, the usage report,
// the audit trail and the dashboard's document take any; on every other endpoint one is a
// mistake, refused rather than ignored.
bool TakesQuery(http::verb method, const std::vector<std::string>& parts) {
  return parts.size() >= 2 && parts[0] == "v1" &&
         ((parts.size() == 2 && parts[1] == "containers" && method == http::verb::get) ||
          (parts.size() == 4 && parts[1] == "containers" && parts[3] == "logs" &&
           method == http::verb::get) ||
          (parts.size() == 2 && parts[1] == "tokens" && method == http::verb::get) ||
          (parts.size() == 4 && parts[1] == "tenancies" && parts[3] == "usage") ||
          (parts.size() == 2 && parts[1] == "dashboard" && method == http::verb::get) ||
          (parts.size() == 2 && parts[1] == "audit" && method == http::verb::get));
}

}  // namespace

Router::Router(serve::Service* service, bool metrics_aggregate_public)
    : service_(service), metrics_aggregate_public_(metrics_aggregate_public) {
  auto random = fleet::RandomHex(4);
  request_prefix_ = "r-" + (random ? *random : std::to_string(fleet::NowMs())) + "-";
}

std::string Router::NewRequestId() const {
  char counter[20];
  std::snprintf(counter, sizeof counter, "%llx",
                static_cast<unsigned long long>(requests_.fetch_add(1) + 1));
  return request_prefix_ + counter;
}

Respond Router::AuditRefusals(const Caller& caller, serve::AuditSubject subject, Respond respond) {
  return [this, caller, subject = std::move(subject),
          respond = std::move(respond)](Response response) mutable {
    if (response.result_int() < 400) return respond(std::move(response));
    // The answer is one of ours (ErrorResponse): its code is the error's category.
    std::string result = "error";
    json doc = json::parse(response.body(), nullptr, false);
    if (doc.is_object() && doc.contains("error") && doc["error"].is_object())
      result = doc["error"].value("code", "error");
    auto shared = std::make_shared<Response>(std::move(response));
    service_->RecordRefusal(
        caller, std::move(subject), std::move(result),
        [respond = std::move(respond), shared] { respond(std::move(*shared)); });
  };
}

Router::~Router() {
  blocking_.join();
  render_.join();
}

void Router::PrepareThenRespond(const std::string& tenancy, Respond respond, Response response) {
  boost::asio::post(blocking_, [this, tenancy, respond = std::move(respond),
                                response = std::move(response)]() mutable {
    auto prepared = service_->PrepareTenancy(tenancy);
    if (!prepared) {
      return respond(ErrorResponse(
          prepared.error().WithContext("tenancy " + tenancy + " stored, but its network/volumes")));
    }
    respond(std::move(response));
  });
}

void Router::Observe(http::verb method, std::chrono::steady_clock::duration elapsed) {
  latency_[MethodSlot(method)].Observe(std::chrono::duration<double>(elapsed).count());
}

Admission Router::AdmitAnonymous(std::string_view peer, std::optional<Error> refusal) const {
  Admission admission;
  // Charged per source address before anything else is said: a flood of bad tokens or
  // anonymous requests costs a map look-up each.
  if (auto retry = service_->ChargeAnonymousRequest(peer)) {
    admission.answer = TooManyRequests(*retry);
  } else if (refusal) {
    admission.answer = Unauthorized(*refusal);
  }
  return admission;
}

Admission Router::AdmitCaller(const std::string& token, http::verb method, bool metrics,
                              std::string_view peer) const {
  auto caller = service_->Authenticate(token);
  if (!caller) return AdmitAnonymous(peer, caller.error());
  Admission admission;
  if (auto retry = service_->ChargeRequest(*caller)) {
    admission.answer = TooManyRequests(*retry);
    return admission;
  }
  Status allowed = Ok();
  if (metrics) {
    if (caller->scope != fleet::TokenScope::kAdmin && caller->scope != fleet::TokenScope::kMetrics)
      allowed = PermissionDenied("/metrics needs the admin token or a metrics token");
  } else {
    allowed = CheckScope(*caller, method);
  }
  if (!allowed) {
    admission.answer = ErrorResponse(allowed.error());
    return admission;
  }
  admission.caller = std::move(*caller);
  return admission;
}

Admission Router::Admit(const http::request_header<>& header, std::string_view peer) const {
  Admission admission = AdmitHeader(header, peer);
  const std::string request_id = NewRequestId();
  if (admission.answer) admission.answer->set("X-Request-Id", request_id);
  if (admission.caller) admission.caller->request_id = request_id;
  return admission;
}

Admission Router::AdmitHeader(const http::request_header<>& header, std::string_view peer) const {
  Admission admission;
  const auto method = header.method();
  // Beast decodes the chunked coding only; a body in any other coding would be used undecoded.
  if (auto coding = TrimmedField(header[http::field::transfer_encoding]);
      !coding.empty() && !EqualsIgnoringCase(coding, "chunked")) {
    admission.answer = ErrorResponse(
        Error{ErrorCategory::kInvalidArgument, "Transfer-Encoding: only chunked is supported"},
        http::status::not_implemented);
    return admission;
  }
  if (auto coding = TrimmedField(header[http::field::content_encoding]);
      !coding.empty() && !EqualsIgnoringCase(coding, "identity")) {
    admission.answer =
        ErrorResponse(InvalidArgument("Content-Encoding: bodies are read as sent; send them "
                                      "uncompressed"),
                      http::status::unsupported_media_type);
    return admission;
  }
  const std::string_view target(header.target().data(), header.target().size());
  const auto parts = SplitPath(target);
  for (const auto& part : parts) {
    if (part.size() > kMaxPathSegment) {
      admission.answer = ErrorResponse(NotFound("no such endpoint: a path segment is longer than " +
                                                std::to_string(kMaxPathSegment) + " bytes"));
      return admission;
    }
  }
  const std::string token = BearerToken(header);
  if (const auto route = PublicRouteOf(parts); route != PublicRoute::kNone) {
    if (method != http::verb::get && method != http::verb::head) {
      admission.answer = MethodNotAllowed("GET, HEAD");
      return admission;
    }
    // Probes are never limited: a kubelet that gets 429 would restart a healthy service.
    if (route == PublicRoute::kHealth || route == PublicRoute::kReady) return admission;
    if (route != PublicRoute::kMetrics) return AdmitAnonymous(peer, std::nullopt);
    // /metrics: the admin or a metrics token for every series; without a token the aggregate
    // series where the operator opened them (--metrics-aggregate-public).
    if (!token.empty()) return AdmitCaller(token, method, true, peer);
    return AdmitAnonymous(peer,
                          metrics_aggregate_public_
                              ? std::nullopt
                              : std::optional<Error>(PermissionDenied("/metrics needs a token")));
  }
  if (parts.size() < 2 || parts[0] != "v1") {
    admission.answer = NoSuchEndpoint(target);
    return admission;
  }
  return AdmitCaller(token, method, false, peer);
}

void Router::HandleRequest(Request request, Respond respond) {
  auto admission = Admit(request.base(), "");
  if (admission.answer) return respond(std::move(*admission.answer));
  Handle(std::move(request), admission.caller, std::move(respond));
}

void Router::Handle(Request request, const std::optional<Caller>& admitted, Respond respond) {
  RoutedRequest route = StartRoute(request, admitted, std::move(respond));
  if (!CheckNoQuery(route)) return;
  if (AnswerPublic(route, admitted.has_value())) return;
  if (!admitted) return route.respond(Unauthorized(PermissionDenied("missing bearer token")));
  route.caller = *admitted;
  route.caller.request_id = route.request_id;
  RouteResource(route);
}

RoutedRequest Router::StartRoute(const Request& request, const std::optional<Caller>& admitted,
                                 Respond respond) {
  const std::string target(request.target().data(), request.target().size());
  const auto query_at = target.find('?');
  RoutedRequest route{
      .request = request,
      // HEAD is answered as GET; the server sends the header only.
      .method = request.method() == http::verb::head ? http::verb::get : request.method(),
      .target = target,
      .parts = SplitPath(target),
      .query = query_at == std::string::npos ? std::string() : target.substr(query_at + 1),
      // Every answer names its request.
      .request_id =
          admitted && !admitted->request_id.empty() ? admitted->request_id : NewRequestId(),
      .caller = {},
      .respond = {},
      .unaudited = {},
  };
  route.respond = [respond = std::move(respond), request_id = route.request_id](Response response) {
    response.set("X-Request-Id", request_id);
    respond(std::move(response));
  };
  route.unaudited = route.respond;
  if (admitted) {
    Caller audited = *admitted;
    audited.request_id = route.request_id;
    if (auto subject = MutationOf(route.method, route.parts, audited))
      route.respond = AuditRefusals(audited, std::move(*subject), std::move(route.respond));
  }
  return route;
}

bool Router::CheckNoQuery(RoutedRequest& route) const {
  if (TakesQuery(route.method, route.parts)) return true;
  auto none = ParseNoQuery(route.query);
  if (none) return true;
  route.respond(ErrorResponse(none.error()));
  return false;
}

bool Router::AnswerPublic(RoutedRequest& route, bool admitted) {
  switch (PublicRouteOf(route.parts)) {
    case PublicRoute::kDashboard:
      route.respond(MakeResponse(http::status::ok, DashboardHtml(), "text/html; charset=utf-8"));
      return true;
    case PublicRoute::kMetrics: {
      // Without a caller only where Admit let it through: the aggregate series.
      if (!admitted && !metrics_aggregate_public_) {
        route.respond(Unauthorized(PermissionDenied("/metrics needs a token")));
        return true;
      }
      // Off the I/O thread: with telemetry on, thousands of series.
      boost::asio::post(render_, [this, full = admitted, respond = std::move(route.respond)] {
        respond(MakeResponse(http::status::ok, Metrics(full), "text/plain; version=0.0.4"));
      });
      return true;
    }
    // Alive while it answers; a store that cannot write is said here too (restarting would not
    // help), while /readyz turns the traffic away.
    case PublicRoute::kHealth: {
      auto failure = service_->StoreWriteFailure();
      route.respond(MakeResponse(
          http::status::ok,
          failure ? "degraded: the store cannot write: " + *failure + "\n" : "ok\n", "text/plain"));
      return true;
    }
    // The listener opens only after the store is loaded and reconciled, so a replica that
    // answers at all can take traffic, unless its store cannot write.
    case PublicRoute::kReady: {
      if (auto failure = service_->StoreWriteFailure()) {
        route.respond(MakeResponse(http::status::service_unavailable,
                                   "not ready: the store cannot write: " + *failure + "\n",
                                   "text/plain"));
      } else {
        route.respond(MakeResponse(http::status::ok, "ready\n", "text/plain"));
      }
      return true;
    }
    case PublicRoute::kOpenApi:
      route.respond(MakeResponse(http::status::ok, OpenApiJson()));
      return true;
    case PublicRoute::kNone:
      break;
  }
  return false;
}

void Router::RouteResource(RoutedRequest& route) {
  const std::string& collection = route.parts[1];
  const size_t size = route.parts.size();
  if (collection == "tenancies") return RouteTenancies(route);
  if (collection == "tokens") return RouteTokens(route);
  if (collection == "admin-token:rotate" && size == 2) return RotateAdminToken(route);
  if (collection == "containers") return RouteContainers(route);
  if (collection == "telemetry" && size == 2) return Telemetry(route);
  if (collection == "dashboard" && size == 2) return Dashboard(route);
  if (collection == "audit" && size == 2) return Audit(route);
  if (collection == "queue" && size == 2) return Queue(route);
  if (collection == "gpus" || collection == "leases") return RouteGpus(route);
  route.respond(NoSuchEndpoint(route.target));
}

}  // namespace tessera::api
