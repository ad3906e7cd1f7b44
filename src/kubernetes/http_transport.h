// HTTP/1.1 to the API server over Boost.Beast (plain TCP or TLS with OpenSSL): one kept-alive
// connection for requests, a connection of its own per streamed (watch) request. Private to the
// Kubernetes client; it knows URLs, TLS and timeouts, not the Kubernetes API.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kubernetes/client.h"

namespace tessera::k8s {

struct HttpRequest {
  std::string method;
  std::string target;  // path and query, e.g. "/api/v1/pods?watch=1"
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

class HttpTransport {
 public:
  // Checks the server URL and loads the TLS material (CA, client certificate and key) once.
  // InvalidArgument names the bad URL or PEM.
  static Result<std::unique_ptr<HttpTransport>> Create(const ClientConfig& config);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // One request on an idle kept-alive connection (a new one when there is none, or when the
  // server closed the idle one before answering); callers on several threads each get their
  // own. Unavailable for network and TLS failures and for no answer within `timeout`;
  // FailedPrecondition when retrying cannot help (the server's certificate is not trusted);
  // InvalidArgument when the body is larger than `max_body_bytes`, found while it is read (or
  // from its Content-Length) and never buffered beyond that.
  Result<HttpResponse> Send(const HttpRequest& request, std::chrono::milliseconds timeout,
                            uint64_t max_body_bytes);

  // A request whose body is read as it arrives: `on_data` gets each piece until it returns
  // false, `stop` is set, or the server ends the body. Only 2xx bodies are streamed; another
  // status comes back with its (bounded) body in `error_body`. Returns the HTTP status.
  Result<int> Stream(const HttpRequest& request,
                     const std::function<bool(std::string_view)>& on_data,
                     const std::atomic<bool>* stop, std::string* error_body);

  // The "scheme://host:port" requests go to, for messages.
  const std::string& origin() const;

 private:
  struct State;
  explicit HttpTransport(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tessera::k8s
