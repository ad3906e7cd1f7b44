// A small HTTP/1.1 client for the tessera API over plain sockets, or HTTPS (tls_channel.h: OpenSSL
// loaded only when an https:// server is called), kept free of heavy dependencies because the
// light `tessera` binary uses it (`tessera run`, `tessera top`).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "client/tls_channel.h"
#include "common/error.h"

namespace tessera::client {

struct Endpoint {
  std::string host = "127.0.0.1";  // an IPv6 address without brackets
  uint16_t port = 8080;
  bool tls = false;  // https://
};
// "http://HOST:PORT", "https://HOST:PORT" or "HOST:PORT" ("[::1]:8080" for IPv6); the port
// defaults to 8080.
Result<Endpoint> ParseServer(std::string_view url);

// A query value (or path segment) for a request: every byte but [A-Za-z0-9._~-] as %XX.
std::string QueryEscape(std::string_view value);

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

// One connection, kept open between calls (keep-alive) and reopened when the server closed it.
class Connection {
 public:
  explicit Connection(Endpoint endpoint, std::string token = "", TlsOptions tls = {})
      : endpoint_(std::move(endpoint)), token_(std::move(token)), tls_options_(std::move(tls)) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  Result<Response> Call(const std::string& method, const std::string& path,
                        const std::string& body = "",
                        const std::map<std::string, std::string>& headers = {});

 private:
  Status Open();
  void Close();
  Result<Response> Exchange(const std::string& request);
  Status SendAll(const std::string& data);
  Result<size_t> Receive(char* buffer, size_t size);

  Endpoint endpoint_;
  std::string token_;
  TlsOptions tls_options_;
  int fd_ = -1;
  std::unique_ptr<TlsChannel> tls_;  // over fd_ for an https:// endpoint
};

}  // namespace tessera::client
