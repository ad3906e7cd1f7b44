// A small typed client of the Kubernetes API: HTTP/1.1 over Boost.Beast (TLS by OpenSSL),
// typed requests on resources, watches (list + watch, resumed and relisted), retries and the
// bounds every response is read within. It knows the API's conventions, not what tessera stores.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::k8s {

using Json = nlohmann::json;

// ---------------------------------------------------------------- client configuration

struct RetryPolicy {
  int max_attempts = 5;  // 429 and 5xx (and connection failures) are retried
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{10000};  // also caps a server's Retry-After
};

struct ClientConfig {
  std::string server;  // "https://10.0.0.1:6443"
  // TLS: the CA as PEM data (kubeconfig certificate-authority-data) or a file.
  std::string ca_pem;
  std::string ca_file;
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;  // name to verify (and send as SNI) instead of the server's host
  // Authentication: a bearer token (or a file re-read per request: service-account tokens
  // rotate), and/or a client certificate and key (PEM data or files).
  std::string bearer_token;
  std::string token_file;
  std::string client_cert_pem, client_key_pem;
  std::string client_cert_file, client_key_file;
  std::string user_agent = "tessera";
  std::chrono::milliseconds timeout{30000};  // per request (not for watches)
  // One call with its retries (0: only timeout and retry.max_attempts bound it).
  std::chrono::milliseconds total_timeout{0};
  RetryPolicy retry;
  // Response bodies beyond these are refused while they are read, never buffered: one object
  // (etcd stores at most 1.5 MiB per object; its JSON is larger than its protobuf), and a list
  // (also the watch event limit is the object one).
  uint64_t max_object_bytes = uint64_t{4} << 20;
  uint64_t max_list_bytes = uint64_t{128} << 20;
};

// How deep an API server's JSON may nest. Objects nest a dozen levels (a CRD's schema some
// more); a body or watch event deeper than this is refused before it is parsed, since a walk or
// dump() of a value nested 100,000 deep overflows the stack.
inline constexpr int kMaxApiJsonDepth = 64;

// Per-call bounds that override the configuration's (0: the configuration's).
struct CallLimits {
  uint64_t max_body_bytes = 0;
  std::chrono::milliseconds total_timeout{0};
};

// ---------------------------------------------------------------- resources and client

// tessera's own API group and version (its CRDs: Tenancy, GpuLease, GpuContainer).
inline constexpr const char* kGroup = "tessera.dev";
inline constexpr const char* kVersion = "v1alpha1";

// An API resource: where it lives and whether it is namespaced.
struct Resource {
  std::string api_path;  // "/api/v1" or "/apis/<group>/<version>"
  std::string plural;    // "pods"
  bool namespaced = true;

  // "/api/v1/namespaces/ns/pods[/name]" (namespace ignored for cluster-scoped resources).
  std::string Path(const std::string& ns, const std::string& name = "") const;

  static Resource Namespaces();
  static Resource Pods();
  static Resource NetworkPolicies();
  static Resource CiliumNetworkPolicies();
  static Resource PersistentVolumes();
  static Resource PersistentVolumeClaims();
  static Resource Jobs();
  static Resource Tenancies();
  static Resource GpuLeases();
  static Resource GpuContainers();
  static Resource Leases();  // coordination.k8s.io/v1
  static Resource Secrets();
  static Resource ConfigMaps();
  static Resource CustomResourceDefinitions();
  static Resource RuntimeClasses();
  static Resource Nodes();
};

enum class PatchType { kMerge, kStrategicMerge, kJson };

// What a failed request said: HTTP status and the Status object's reason/message.
struct ApiError {
  long http_status = 0;
  std::string reason;  // Status.reason: "NotFound", "AlreadyExists", "Conflict", "Expired"...
  std::string message;
};

// A watch event: type ADDED/MODIFIED/DELETED/BOOKMARK; SYNC is sent by ListWatch once per
// (re)list with `object` = the whole list, so handlers can rebuild state after 410 Gone.
struct WatchEvent {
  std::string type;
  Json object;
};

class HttpTransport;

class Client {
 public:
  explicit Client(ClientConfig config);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Errors carry categories: 404 NotFound, 409 AlreadyExists (create) or FailedPrecondition
  // (conflict), 400/422 InvalidArgument, 401/403 PermissionDenied, 429/5xx after retries and
  // connection failures Unavailable. last_error() holds the HTTP details of the last failure.
  // Calls on several threads run at once: each takes a connection of its own, and no lock is
  // held while one waits on the network.
  Result<Json> Create(const Resource& resource, const std::string& ns, const Json& object);
  Result<Json> Get(const Resource& resource, const std::string& ns, const std::string& name,
                   const CallLimits& limits = {});
  // GET of one object's JSON as the server sent it, unparsed, for callers that check and parse
  // it themselves (its nesting is not checked here).
  Result<std::string> GetBytes(const Resource& resource, const std::string& ns,
                               const std::string& name, const CallLimits& limits = {});
  Result<Json> Replace(const Resource& resource, const std::string& ns, const std::string& name,
                       const Json& object);
  Result<Json> Patch(const Resource& resource, const std::string& ns, const std::string& name,
                     const Json& patch, PatchType type = PatchType::kMerge,
                     const std::string& subresource = "");
  Status Delete(const Resource& resource, const std::string& ns, const std::string& name,
                std::optional<int> grace_seconds = std::nullopt);
  // GET of a non-JSON body (pod logs): the text as the server sent it.
  Result<std::string> GetText(const std::string& path);
  Result<Json> List(const Resource& resource, const std::string& ns,
                    const std::string& label_selector = "", const std::string& field_selector = "");

  // One watch request from `resource_version`: calls `on_event` per event until the server
  // ends the stream (returns Ok with *last_version updated), the handler returns false or
  // `stop` is set (Ok), or the server says 410 Gone (FailedPrecondition, api_error 410).
  // An empty `ns` of a namespaced resource watches every namespace.
  Status WatchOnce(const Resource& resource, const std::string& ns,
                   const std::string& resource_version, const std::string& field_selector,
                   const std::function<bool(const WatchEvent&)>& on_event,
                   const std::atomic<bool>* stop, std::string* last_version,
                   const std::string& label_selector = "");

  // List then watch forever (until `stop` or the handler returns false): reconnects when the
  // stream ends, relists on 410 Gone, backs off on errors. Emits SYNC after every list.
  Status ListWatch(const Resource& resource, const std::string& ns,
                   const std::string& field_selector,
                   const std::function<bool(const WatchEvent&)>& on_event,
                   const std::atomic<bool>* stop, const std::string& label_selector = "");

  // The last failure of any thread's call.
  ApiError last_error() const;
  const ClientConfig& config() const { return config_; }

 private:
  struct Response;
  Result<Json> Call(const std::string& method, const std::string& path, const Json* body,
                    const std::string& content_type, bool creating, const CallLimits& limits);
  // The 2xx body of a request, or the error its status maps to (recorded as last_error).
  Result<std::string> CallBytes(const std::string& method, const std::string& path,
                                const Json* body, const std::string& content_type, bool creating,
                                const CallLimits& limits);
  Result<Response> Send(const std::string& method, const std::string& path, const std::string& body,
                        const std::string& content_type, const CallLimits& limits);
  void SetLastError(ApiError error);
  Status WatchOnce(const Resource& resource, const std::string& ns,
                   const std::string& resource_version, const std::string& field_selector,
                   const std::function<bool(const WatchEvent&)>& on_event,
                   const std::atomic<bool>* stop, std::string* last_version,
                   const std::string& label_selector, long* http_status);
  // Authorization (the token file is re-read: service-account tokens rotate), Accept,
  // User-Agent and, with a body, Content-Type.
  Result<std::vector<std::pair<std::string, std::string>>> Headers(
      const std::string& content_type) const;

  ClientConfig config_;
  mutable std::mutex last_error_mu_;
  ApiError last_error_;                       // guarded by last_error_mu_
  std::unique_ptr<HttpTransport> transport_;  // null when the server URL is unusable
  Error transport_error_;
};

// ---------------------------------------------------------------- reading the server's JSON

// Typed reads of objects from the API server that never throw, whatever shape its JSON has
// (nlohmann's operator[] and value() throw on a type they did not expect).
// object[key] when `object` is an object holding a string there, else `fallback`.
std::string StringField(const Json& object, std::string_view key, std::string_view fallback = "");
// object[key] when it is an object (an array), else an empty one.
const Json& ObjectField(const Json& object, std::string_view key);
const Json& ArrayField(const Json& object, std::string_view key);

}  // namespace tessera::k8s
