// A small HTTP/1.1 client for the tessera API over plain sockets (loopback and LAN), kept free
// of heavy dependencies because the light `tessera` binary uses it (`tessera run`).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/error.h"

namespace tessera::client {

struct Endpoint {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
};
// "http://HOST:PORT" or "HOST:PORT".
Result<Endpoint> ParseServer(std::string_view url);

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

// One connection, kept open between calls (keep-alive) and reopened when the server closed it.
class Connection {
 public:
  explicit Connection(Endpoint endpoint, std::string token = "")
      : endpoint_(std::move(endpoint)), token_(std::move(token)) {}
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

  Endpoint endpoint_;
  std::string token_;
  int fd_ = -1;
};

}  // namespace tessera::client
