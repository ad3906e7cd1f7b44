// The API client: JSON requests with bearer-token or client-certificate auth over kept-alive
// HTTP/1.1 connections (http_transport.cc), retries with backoff (429 honours Retry-After)
// within a per-call deadline, per-call body limits, list+watch with resourceVersion resume and
// a relist on 410 Gone, as the Kubernetes API concepts document describes. What the server
// sends is decoded in responses.cc.
#include "kubernetes/client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "common/bounded_file.h"
#include "common/untrusted_text.h"
#include "kubernetes/http_transport.h"
#include "kubernetes/responses.h"

namespace tessera::k8s {
namespace {

Error ToError(const ApiError& api, const std::string& what, bool creating) {
  std::string message = what + ": HTTP " + std::to_string(api.http_status) +
                        (api.reason.empty() ? "" : " " + api.reason) +
                        (api.message.empty() ? "" : ": " + api.message);
  switch (api.http_status) {
    case 400:
    case 422:
      return InvalidArgument(message);
    case 401:
    case 403:
      return PermissionDenied(message);
    case 404:
      return NotFound(message);
    case 409:
      return creating && api.reason != "Conflict" ? AlreadyExists(message)
                                                  : FailedPrecondition(message);
    case 410:
      return FailedPrecondition(message);
    default:
      if (api.http_status == 429 || api.http_status >= 500) return Unavailable(message);
      return Internal(message);
  }
}

bool Retryable(long status) {
  return status == 429 || status >= 500;
}

bool SleepUnlessStopped(std::chrono::milliseconds delay, const std::atomic<bool>* stop) {
  auto end = std::chrono::steady_clock::now() + delay;
  while (std::chrono::steady_clock::now() < end) {
    if (stop && stop->load()) return false;
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(20), std::chrono::duration_cast<std::chrono::milliseconds>(
                                           end - std::chrono::steady_clock::now()) +
                                           std::chrono::milliseconds(1)));
  }
  return true;
}

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(char(c));
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// A watch event is one object in a small envelope.
uint64_t MaxWatchLine(const ClientConfig& config) {
  return config.max_object_bytes + (64 << 10);
}

}  // namespace

struct Client::Response {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
};

std::string Resource::Path(const std::string& ns, const std::string& name) const {
  std::string path = api_path;
  if (namespaced && !ns.empty()) path += "/namespaces/" + ns;
  path += "/" + plural;
  if (!name.empty()) path += "/" + name;
  return path;
}

Resource Resource::Namespaces() {
  return {"/api/v1", "namespaces", false};
}
Resource Resource::Pods() {
  return {"/api/v1", "pods", true};
}
Resource Resource::NetworkPolicies() {
  return {"/apis/networking.k8s.io/v1", "networkpolicies", true};
}
Resource Resource::CiliumNetworkPolicies() {
  return {"/apis/cilium.io/v2", "ciliumnetworkpolicies", true};
}
Resource Resource::PersistentVolumes() {
  return {"/api/v1", "persistentvolumes", false};
}
Resource Resource::PersistentVolumeClaims() {
  return {"/api/v1", "persistentvolumeclaims", true};
}
Resource Resource::Jobs() {
  return {"/apis/batch/v1", "jobs", true};
}
Resource Resource::Tenancies() {
  return {std::string("/apis/") + kGroup + "/" + kVersion, "tenancies", false};
}
Resource Resource::GpuLeases() {
  return {std::string("/apis/") + kGroup + "/" + kVersion, "gpuleases", false};
}
Resource Resource::GpuContainers() {
  return {std::string("/apis/") + kGroup + "/" + kVersion, "gpucontainers", false};
}
Resource Resource::Leases() {
  return {"/apis/coordination.k8s.io/v1", "leases", true};
}
Resource Resource::Secrets() {
  return {"/api/v1", "secrets", true};
}
Resource Resource::ConfigMaps() {
  return {"/api/v1", "configmaps", true};
}
Resource Resource::RuntimeClasses() {
  return {"/apis/node.k8s.io/v1", "runtimeclasses", false};
}
Resource Resource::Nodes() {
  return {"/api/v1", "nodes", false};
}
Resource Resource::CustomResourceDefinitions() {
  return {"/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", false};
}

Client::Client(ClientConfig config) : config_(std::move(config)) {
  auto transport = HttpTransport::Create(config_);
  if (transport) {
    transport_ = std::move(*transport);
  } else {
    transport_error_ = transport.error();
  }
}
Client::~Client() = default;

Result<std::vector<std::pair<std::string, std::string>>> Client::Headers(
    const std::string& content_type) const {
  std::vector<std::pair<std::string, std::string>> headers;
  std::string token = config_.bearer_token;
  if (!config_.token_file.empty()) {
    // Re-read each time: projected service-account tokens rotate.
    auto text = ReadBoundedFile(config_.token_file, kMaxTokenFileBytes);
    if (!text) return text.error().WithContext("token file");
    token = *text;
    while (!token.empty() && (token.back() == '\n' || token.back() == ' '))
      token.pop_back();
  }
  if (!token.empty()) headers.emplace_back("Authorization", "Bearer " + token);
  headers.emplace_back("Accept", "application/json");
  headers.emplace_back("User-Agent", config_.user_agent);
  if (!content_type.empty()) headers.emplace_back("Content-Type", content_type);
  return headers;
}

ApiError Client::last_error() const {
  std::lock_guard lock(last_error_mu_);
  return last_error_;
}

void Client::SetLastError(ApiError error) {
  std::lock_guard lock(last_error_mu_);
  last_error_ = std::move(error);
}

Result<Client::Response> Client::Send(const std::string& method, const std::string& path,
                                      const std::string& body, const std::string& content_type,
                                      const CallLimits& limits) {
  if (!transport_) return Unavailable(method + " " + path + ": " + transport_error_.message);
  const uint64_t max_body =
      limits.max_body_bytes ? limits.max_body_bytes : config_.max_object_bytes;
  const auto total =
      limits.total_timeout.count() > 0 ? limits.total_timeout : config_.total_timeout;
  using Clock = std::chrono::steady_clock;
  // No total limit is a deadline that never comes (a plain time point: GCC 12 cannot see through
  // an optional one here and warns it may be read uninitialised).
  const bool has_deadline = total.count() > 0;
  const Clock::time_point deadline = has_deadline ? Clock::now() + total : Clock::time_point::max();
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  };
  auto delay = config_.retry.initial_backoff;
  HttpRequest request{method, path, {}, body};
  for (int attempt = 1;; ++attempt) {
    auto headers = Headers(content_type);
    if (!headers) return headers.error();
    request.headers = std::move(*headers);
    auto timeout = config_.timeout;
    if (has_deadline) timeout = std::min(timeout, left());
    auto sent = transport_->Send(request, timeout, max_body);
    Response response;
    std::string failure;
    if (sent) {
      response.status = sent->status;
      response.body = std::move(sent->body);
      response.headers = std::move(sent->headers);
      if (!Retryable(response.status)) return response;
    } else {
      // An untrusted server certificate or an answer over the limit will not heal by retrying.
      if (sent.error().category != ErrorCategory::kUnavailable) {
        return Unavailable(sent.error().message);
      }
      failure = sent.error().message;
    }
    auto wait = delay;
    if (auto it = response.headers.find("retry-after"); it != response.headers.end()) {
      // Capped before the multiplication: the header is the server's to choose.
      long seconds = std::strtol(it->second.c_str(), nullptr, 10);
      if (seconds >= 0) wait = std::chrono::milliseconds(std::min(seconds, 3600L) * 1000);
    }
    wait = std::min(wait, config_.retry.max_backoff);
    const bool out_of_time = has_deadline && left() <= wait;
    if (attempt >= config_.retry.max_attempts || out_of_time) {
      if (!sent) {
        return Unavailable(failure + (out_of_time ? " (no time left for another attempt within " +
                                                        std::to_string(total.count()) + " ms)"
                                                  : ""));
      }
      return response;  // the caller maps the last 429/5xx
    }
    spdlog::debug("k8s: {} {} -> {} (attempt {}), retrying in {} ms", method, path,
                  sent ? std::to_string(response.status) : failure, attempt, wait.count());
    std::this_thread::sleep_for(wait);
    delay = std::min(delay * 2, config_.retry.max_backoff);
  }
}

Result<std::string> Client::CallBytes(const std::string& method, const std::string& path,
                                      const Json* body, const std::string& content_type,
                                      bool creating, const CallLimits& limits) {
  std::string text = body ? body->dump() : "";
  auto response = Send(method, path, text, body ? content_type : "", limits);
  if (!response) return response.error();
  if (response->status < 200 || response->status >= 300) {
    ApiError error = ParseApiError(response->status, response->body);
    SetLastError(error);
    return ToError(error, method + " " + path, creating);
  }
  return std::move(response->body);
}

Result<Json> Client::Call(const std::string& method, const std::string& path, const Json* body,
                          const std::string& content_type, bool creating,
                          const CallLimits& limits) {
  auto text = CallBytes(method, path, body, content_type, creating, limits);
  if (!text) return text.error();
  return ParseResponseJson(*text, method + " " + path);
}

Result<Json> Client::Create(const Resource& resource, const std::string& ns, const Json& object) {
  return Call("POST", resource.Path(ns), &object, "application/json", true, {});
}

Result<Json> Client::Get(const Resource& resource, const std::string& ns, const std::string& name,
                         const CallLimits& limits) {
  return Call("GET", resource.Path(ns, name), nullptr, "", false, limits);
}

Result<std::string> Client::GetBytes(const Resource& resource, const std::string& ns,
                                     const std::string& name, const CallLimits& limits) {
  return CallBytes("GET", resource.Path(ns, name), nullptr, "", false, limits);
}

Result<Json> Client::Replace(const Resource& resource, const std::string& ns,
                             const std::string& name, const Json& object) {
  return Call("PUT", resource.Path(ns, name), &object, "application/json", false, {});
}

Result<Json> Client::Patch(const Resource& resource, const std::string& ns, const std::string& name,
                           const Json& patch, PatchType type, const std::string& subresource) {
  const char* content_type = type == PatchType::kMerge ? "application/merge-patch+json"
                             : type == PatchType::kStrategicMerge
                                 ? "application/strategic-merge-patch+json"
                                 : "application/json-patch+json";
  std::string path = resource.Path(ns, name) + (subresource.empty() ? "" : "/" + subresource);
  return Call("PATCH", path, &patch, content_type, false, {});
}

Status Client::Delete(const Resource& resource, const std::string& ns, const std::string& name,
                      std::optional<int> grace_seconds) {
  // Background propagation so a Job's pods go with it.
  Json options = {
      {"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", "Background"}};
  if (grace_seconds) options["gracePeriodSeconds"] = *grace_seconds;
  auto result = Call("DELETE", resource.Path(ns, name), &options, "application/json", false, {});
  if (!result) return result.error();
  return Ok();
}

Result<std::string> Client::GetText(const std::string& path) {
  return CallBytes("GET", path, nullptr, "", false, {});
}

Result<Json> Client::List(const Resource& resource, const std::string& ns,
                          const std::string& label_selector, const std::string& field_selector) {
  std::string path = resource.Path(ns);
  std::string query;
  if (!label_selector.empty()) query += "labelSelector=" + UrlEncode(label_selector);
  if (!field_selector.empty())
    query += std::string(query.empty() ? "" : "&") + "fieldSelector=" + UrlEncode(field_selector);
  if (!query.empty()) path += "?" + query;
  return Call("GET", path, nullptr, "", false, CallLimits{config_.max_list_bytes, {}});
}

Status Client::WatchOnce(const Resource& resource, const std::string& ns,
                         const std::string& resource_version, const std::string& field_selector,
                         const std::function<bool(const WatchEvent&)>& on_event,
                         const std::atomic<bool>* stop, std::string* last_version,
                         const std::string& label_selector) {
  long http_status = 0;
  return WatchOnce(resource, ns, resource_version, field_selector, on_event, stop, last_version,
                   label_selector, &http_status);
}

Status Client::WatchOnce(const Resource& resource, const std::string& ns,
                         const std::string& resource_version, const std::string& field_selector,
                         const std::function<bool(const WatchEvent&)>& on_event,
                         const std::atomic<bool>* stop, std::string* last_version,
                         const std::string& label_selector, long* http_status) {
  *http_status = 0;
  std::string path = resource.Path(ns) + "?watch=1&allowWatchBookmarks=true&resourceVersion=" +
                     UrlEncode(resource_version);
  if (!label_selector.empty()) path += "&labelSelector=" + UrlEncode(label_selector);
  if (!field_selector.empty()) path += "&fieldSelector=" + UrlEncode(field_selector);
  if (!transport_) return Unavailable("watch " + path + ": " + transport_error_.message);
  auto headers = Headers("");
  if (!headers) return headers.error();
  WatchDecoder decoder(MaxWatchLine(config_), resource_version);
  std::string error_body;
  auto status = transport_->Stream(
      HttpRequest{"GET", path, std::move(*headers), ""},
      [&](std::string_view data) { return decoder.Feed(data, on_event); }, stop, &error_body);
  if (last_version) *last_version = decoder.last_version();
  if (decoder.gone() || (status && *status == 410)) {
    *http_status = 410;
    SetLastError(ApiError{410, "Expired", decoder.gone_message()});
    return FailedPrecondition("watch " + path + ": 410 Gone: " + decoder.gone_message());
  }
  if (decoder.handler_stopped() || (stop && stop->load())) return Ok();
  if (!status) return Unavailable("watch " + path + ": " + status.error().message);
  if (*status != 0 && (*status < 200 || *status >= 300)) {
    *http_status = *status;
    ApiError error = ParseApiError(*status, error_body);
    SetLastError(error);
    return ToError(error, "watch " + path, false);
  }
  if (decoder.too_long()) {
    return Unavailable("watch " + path + ": a line longer than " +
                       std::to_string(decoder.max_line()) + " bytes");
  }
  return Ok();  // the server ended the stream: resume from *last_version
}

Status Client::ListWatch(const Resource& resource, const std::string& ns,
                         const std::string& field_selector,
                         const std::function<bool(const WatchEvent&)>& on_event,
                         const std::atomic<bool>* stop, const std::string& label_selector) {
  auto backoff = config_.retry.initial_backoff;
  while (!(stop && stop->load())) {
    auto list = List(resource, ns, label_selector, field_selector);
    if (!list) {
      if (list.error().category == ErrorCategory::kPermissionDenied) return list.error();
      if (!SleepUnlessStopped(backoff, stop)) break;
      backoff = std::min(backoff * 2, config_.retry.max_backoff);
      continue;
    }
    std::string version = StringField(ObjectField(*list, "metadata"), "resourceVersion");
    if (!on_event(WatchEvent{"SYNC", *list})) return Ok();
    backoff = config_.retry.initial_backoff;
    bool stopped = false;
    while (!(stop && stop->load())) {
      bool handler_stop = false;
      auto wrapped = [&](const WatchEvent& event) {
        bool more = on_event(event);
        if (!more) handler_stop = true;
        return more;
      };
      long http_status = 0;
      auto status = WatchOnce(resource, ns, version, field_selector, wrapped, stop, &version,
                              label_selector, &http_status);
      if (handler_stop) return Ok();
      if (!status) {
        if (http_status == 410) break;  // relist
        if (status.error().category == ErrorCategory::kPermissionDenied) return status;
        if (!SleepUnlessStopped(backoff, stop)) {
          stopped = true;
          break;
        }
        backoff = std::min(backoff * 2, config_.retry.max_backoff);
        continue;
      }
      backoff = config_.retry.initial_backoff;
    }
    if (stopped) break;
  }
  return Ok();
}

}  // namespace tessera::k8s
