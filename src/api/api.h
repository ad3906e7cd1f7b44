// The REST API of `tessera serve` (JSON over HTTP/1.1, Boost.Beast on Boost.Asio), the dashboard
// at `/`, Prometheus metrics at `/metrics` and the OpenAPI 3 document at `/v1/openapi.json`.
// Holds no state of its own: every request is answered from serve::Service. Errors map to HTTP
// status codes here and nowhere else: invalid argument 400, unauthenticated 401, permission
// denied 403, not found 404 (also for another tenancy's objects), already exists and failed
// precondition 409, unavailable 503, internal 500.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.h"
#include "fleet/fleet.h"
#include "serve/service.h"

namespace tessera::tls {
class ServerContextSource;
}

namespace tessera::api {

// ---- Body parsers (pure; strict: unknown fields, wrong types and bad values are errors that
// name the field) ----

// POST /v1/containers: {image, tenancy, gpus?, isolation?, command?, env?, network?, volumes?,
// priority? (-1000..1000, at most the tenancy's maxPriority), maxDurationSeconds? (1..366 days),
// preemptible?}
Result<fleet::ContainerSpec> ParseContainerSpec(std::string_view body);
// PUT /v1/tenancies/{name}: {labels?, extensions?, quota? {gpus?, pending?}, weight?,
// maxPriority?, rateLimit? {perSecond, burst?} | null, requeueOnGpuFault? (bool: its requests
// a GPU fault stops are submitted again; a body without it keeps the stored one)}; an empty
// body is an empty object.
// rateLimit replaces the --rate-limit of the tenancy's tokens (null: back to it); a body without
// it keeps the stored one. Any of quota/weight/maxPriority sets the
// whole scheduling policy (the others at their defaults; a quota of null is unlimited); a body
// with none keeps the stored policy.
Result<fleet::Tenancy> ParseTenancy(std::string_view name, std::string_view body);
// POST /v1/gpus/{id}/{action}: {reason?}; an empty body is an empty object.
Result<std::string> ParseGpuActionBody(std::string_view body);
// POST /v1/tenancies/{name}/tokens and POST /v1/tokens: {scope?, expiresInSeconds?
// (1..kMaxExpiresInSeconds)}; an empty body is an empty object, and scope defaults to
// `default_scope`. Which scopes an endpoint makes is the service's to say.
Result<serve::TokenRequest> ParseTokenRequest(std::string_view body,
                                              fleet::TokenScope default_scope);
// GET /v1/tokens query string: tenancy=NAME (only that tenancy's tokens).
Result<std::string> ParseTokenListQuery(std::string_view query);
// The body of an endpoint that takes none (POST /v1/tenancies/{name}/tokens): empty, or an
// empty JSON object.
Status ParseEmptyBody(std::string_view body);
// GET /v1/containers query string (after '?'): limit=1..1000, after=ID, order=asc|desc,
// state=S[,S...], tenancy=NAME; percent-encoded; unknown or repeated parameters are errors.
Result<serve::ContainerQuery> ParseContainerQuery(std::string_view query);
// GET /v1/containers/{id}/logs query string: tail=1..100000 (only the last N lines),
// offset=BYTES (only what follows that byte of the log, 0..kMaxOffset: the previous answer's
// Tessera-Log-Offset); percent-encoded; unknown or repeated parameters are errors.
struct LogQuery {
  static constexpr size_t kMaxTail = 100000;
  static constexpr uint64_t kMaxOffset = uint64_t{1} << 50;  // past any log's cap (1Ti)
  std::optional<size_t> tail;
  uint64_t offset = 0;
};
Result<LogQuery> ParseLogQuery(std::string_view query);
// GET /v1/tenancies/{name}/usage query string: from=SECONDS, to=SECONDS (Unix time, whole
// seconds up to the year 9999, from <= to; defaults 0 and now, the service refusing a `from`
// after now), step=SECONDS (60..86400: a series of buckets, at most 1440); percent-encoded;
// unknown or repeated parameters, signs and values that do not fit are errors naming the
// parameter.
Result<serve::UsageQuery> ParseUsageQuery(std::string_view query);
// GET /v1/audit query string: limit=1..1000 (default 100), after=SEQ (the previous page's
// `next`), tenancy=NAME, action=ACTION (container.create, ...), from=SECONDS, to=SECONDS (Unix
// time: from <= time < to); percent-encoded; unknown or repeated parameters, and values of the
// wrong shape, are errors naming the parameter.
Result<fleet::AuditQuery> ParseAuditQuery(std::string_view query);
// GET /v1/dashboard query string: usage=TENANCY (embed its usage series, the usage API's answer)
// and range=hour|day (default hour: 60 buckets of a minute; day: 96 of 15 minutes).
struct DashboardQuery {
  std::string usage_tenancy;
  int64_t window_s = 3600;
  int64_t step_s = 60;
};
Result<DashboardQuery> ParseDashboardQuery(std::string_view query);
// The query string of an endpoint that takes no parameters: empty, else InvalidArgument naming
// the first parameter ("query parameter x: unknown (this endpoint takes none)").
Status ParseNoQuery(std::string_view query);
// "HOST:PORT" ("127.0.0.1:8080", "[::1]:8080", ":8080").
Result<std::pair<std::string, uint16_t>> ParseListen(std::string_view listen);

// The OpenAPI 3 document describing every endpoint.
const std::string& OpenApiJson();
// The static part of that document (data/openapi.json, compiled in), before the token
// endpoints and the scopes are added.
const std::string& OpenApiBaseDocument();
// The dashboard page (HTML with its script inline).
const std::string& DashboardHtml();

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: any free port (see Server::port)
  int io_threads = 1;
  // Open connections at most; lowered at start to stay below RLIMIT_NOFILE (less a reserve for
  // the store, logs and podman pipes). At the cap the server stops accepting until one closes.
  int max_connections = 1024;
  // A new connection must deliver its request header within this; so must a kept-alive one once
  // its next request has begun.
  std::chrono::seconds header_timeout{10};
  // A kept-alive connection may wait this long for its next request.
  std::chrono::seconds idle_timeout{60};
  // The body (at most 1 MiB) of an admitted request must arrive within this.
  std::chrono::seconds body_timeout{30};
  // Set: HTTPS only, each new connection with the source's current certificate (tls/tls.h).
  std::shared_ptr<tls::ServerContextSource> tls;
  // GET /metrics without a token answers the aggregate series only (no tenancy, container or
  // GPU labels); with this off it needs the admin or a metrics token.
  bool metrics_aggregate_public = false;
};

// The connection cap actually used: `wanted`, but at most the soft RLIMIT_NOFILE less `reserve`
// descriptors (and at least 1).
int EffectiveConnectionCap(int wanted, uint64_t nofile_limit, int reserve = 64);

class Server {
 public:
  // Binds and listens (close-on-exec), before the service exists: a start that cannot bind
  // fails before anything is placed or started. Connections wait in the backlog until Run.
  static Result<std::unique_ptr<Server>> Create(const ServerOptions& options);
  virtual ~Server() = default;
  virtual uint16_t port() const = 0;
  // Serves `service` until Stop() or SIGINT/SIGTERM. `serving` is called once those signals are
  // handled, before the first accept (where the caller says it is up: a port file); then they
  // are unblocked in the calling thread (the caller blocks them while it starts).
  virtual void Run(serve::Service* service, const std::function<void()>& serving = {}) = 0;
  virtual void Stop() = 0;
};

}  // namespace tessera::api
