// Internal to the api module: request routing and rendering, shared by the server and tests.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "serve/service.h"

namespace tessera::api {

namespace http = boost::beast::http;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;
using Respond = std::function<void(Response)>;

// Request latency histogram (Prometheus buckets, seconds), lock-free.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 14> kBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
  void Observe(double seconds);
  void Render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_us_{0};
};

// What the request line and header alone decide, before any body byte is read: an answer now
// (the server sends it and closes, leaving the body unread), or read the body and handle the
// request as `caller` (unset for the public routes).
struct Admission {
  std::optional<Response> answer;
  std::optional<serve::Caller> caller;
};

// A request on its way through Router::Handle to the route that answers it.
struct RoutedRequest {
  const Request& request;
  http::verb method;  // HEAD is answered as GET
  std::string target;
  std::vector<std::string> parts;  // the path's segments
  std::string query;               // after '?', undecoded
  std::string request_id;
  serve::Caller caller;  // set once the request is past the public routes
  // Answers with the request ID; a mutating request's refusal is recorded in the audit trail
  // before it is sent (its success was recorded with its change).
  Respond respond;
  // Answers with the request ID only: after the change was recorded (a tenancy's network made
  // after its record).
  Respond unaudited;
};

class Router {
 public:
  // metrics_aggregate_public: GET /metrics without a token answers the aggregate series.
  explicit Router(serve::Service* service, bool metrics_aggregate_public = false);
  ~Router();
  // Routes that need no token and their methods, unknown paths, transfer codings we do not
  // decode, authentication, the token's scope and the request rate limits (per token, and per
  // `peer` address without a valid token): all from the header. Unauthenticated callers never
  // get a body read on their behalf.
  Admission Admit(const http::request_header<>& header, std::string_view peer) const;
  // Answers through `respond`, possibly later and from another thread (after a durable
  // commit, or from a pool for logs and large listings). `caller` is what Admit returned for
  // this request's header.
  void Handle(Request request, const std::optional<serve::Caller>& caller, Respond respond);
  // Admit, then Handle: one call for a request read whole (tests, the fuzzer).
  void HandleRequest(Request request, Respond respond);
  // Called by the server when a response has been produced.
  void Observe(http::verb method, std::chrono::steady_clock::duration elapsed);

 private:
  // Every series, or (full false) the aggregate ones: no tenancy, container or GPU labels.
  std::string Metrics(bool full) const;
  void RenderLatency(std::string& out) const;
  // Without a valid token: charged to the peer's address; answered 429 when over its limit,
  // else 401 with `refusal` (none: admitted without a caller).
  Admission AdmitAnonymous(std::string_view peer, std::optional<Error> refusal) const;
  // With a token: authenticated, charged to the token, and its scope checked (`metrics`: for
  // GET /metrics, the admin and metrics scopes).
  Admission AdmitCaller(const std::string& token, http::verb method, bool metrics,
                        std::string_view peer) const;
  Admission AdmitHeader(const http::request_header<>& header, std::string_view peer) const;
  // A new request ID: this process's random prefix and a counter ("r-1a2b3c4d-2f"), never a
  // caller's value, so the audit trail's IDs are unique and say nothing a caller chose.
  std::string NewRequestId() const;
  // Wraps `respond` of a mutating request: an error answer (a refusal: nothing changed) is
  // recorded in the audit trail before it is sent; a success was recorded with its change.
  Respond AuditRefusals(const serve::Caller& caller, serve::AuditSubject subject, Respond respond);
  // Runs Service::PrepareTenancy on the blocking pool, then answers `response` (or its error).
  void PrepareThenRespond(const std::string& tenancy, Respond respond, Response response);

  // Handle's steps: name the request and wrap its answer, refuse a query string where none is
  // taken, answer the routes that need no token (true when answered), then the /v1 resources.
  RoutedRequest StartRoute(const Request& request, const std::optional<serve::Caller>& admitted,
                           Respond respond);
  bool CheckNoQuery(RoutedRequest& route) const;
  bool AnswerPublic(RoutedRequest& route, bool admitted);
  void RouteResource(RoutedRequest& route);
  // One per resource family, each in its routes_*.cc; a path they do not know is answered 404.
  void RouteTenancies(RoutedRequest& route);  // /v1/tenancies[/{name}[/storage|usage|tokens]]
  void ListTenancies(RoutedRequest& route);
  void RouteTenancy(RoutedRequest& route);
  void PutTenancy(RoutedRequest& route);
  void DeleteTenancy(RoutedRequest& route);
  void RouteStorage(RoutedRequest& route);
  void ReportUsage(RoutedRequest& route);
  void CreateTenancyToken(RoutedRequest& route);
  void RouteTokens(RoutedRequest& route);  // /v1/tokens[/{id}]
  void ListTokens(RoutedRequest& route);
  void RevokeToken(RoutedRequest& route);
  void RotateAdminToken(RoutedRequest& route);  // /v1/admin-token:rotate
  void RouteContainers(RoutedRequest& route);   // /v1/containers[/{id}[/logs]]
  void ListContainers(RoutedRequest& route);
  void SubmitContainer(RoutedRequest& route);
  void RouteContainer(RoutedRequest& route);
  void ContainerLogs(RoutedRequest& route);
  void RouteGpus(RoutedRequest& route);  // /v1/gpus[/{id}[/{action}]], /v1/leases
  void ListGpus(RoutedRequest& route);
  void GetGpu(RoutedRequest& route);
  void GpuAction(RoutedRequest& route);
  void Telemetry(RoutedRequest& route);  // /v1/telemetry
  void Dashboard(RoutedRequest& route);  // /v1/dashboard
  void Audit(RoutedRequest& route);      // /v1/audit
  void Queue(RoutedRequest& route);      // /v1/queue

  serve::Service* service_;
  const bool metrics_aggregate_public_;
  std::string request_prefix_;
  mutable std::atomic<uint64_t> requests_{0};
  boost::asio::thread_pool blocking_{2};  // backend calls that wait on podman (logs)
  // Container listings are copied and rendered here, not on the I/O thread: a page can be
  // megabytes of JSON, and /healthz must not wait for it.
  boost::asio::thread_pool render_{2};
  // By method: GET, POST, PUT, DELETE, other.
  std::array<LatencyHistogram, 5> latency_;
};

}  // namespace tessera::api
