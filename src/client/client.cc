#include "client/client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

#include "client/http_response.h"

namespace tessera::client {
namespace {

constexpr int kReceiveTimeoutSeconds = 120;

}  // namespace

Result<Endpoint> ParseServer(std::string_view url) {
  Endpoint endpoint;
  if (url.rfind("http://", 0) == 0) url.remove_prefix(7);
  if (url.rfind("https://", 0) == 0) {
    url.remove_prefix(8);
    endpoint.tls = true;
  }
  while (!url.empty() && url.back() == '/')
    url.remove_suffix(1);
  auto colon = url.rfind(':');
  // "[::1]" alone: its colons are the address's.
  if (colon != std::string_view::npos && url.front() == '[' && url.find(']') > colon)
    colon = std::string_view::npos;
  if (colon == std::string_view::npos) {
    endpoint.host = std::string(url);
  } else {
    endpoint.host = std::string(url.substr(0, colon));
  }
  if (endpoint.host.size() >= 2 && endpoint.host.front() == '[' && endpoint.host.back() == ']')
    endpoint.host = endpoint.host.substr(1, endpoint.host.size() - 2);
  if (colon == std::string_view::npos) return endpoint;
  std::string port(url.substr(colon + 1));
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    return InvalidArgument("server " + std::string(url) + ": bad port");
  endpoint.port = static_cast<uint16_t>(std::stoi(port));
  if (endpoint.host.empty()) endpoint.host = "127.0.0.1";
  return endpoint;
}

std::string QueryEscape(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '~' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Connection::~Connection() {
  Close();
}

void Connection::Close() {
  tls_.reset();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status Connection::Open() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string port = std::to_string(endpoint_.port);
  if (int rc = ::getaddrinfo(endpoint_.host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return Unavailable("resolve " + endpoint_.host + ": " + gai_strerror(rc));
  int error = 0;
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      // A server that stops answering must not hold the client forever.
      timeval timeout{.tv_sec = kReceiveTimeoutSeconds, .tv_usec = 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
      fd_ = fd;
      break;
    }
    error = errno;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (fd_ < 0)
    return Unavailable("connect to " + endpoint_.host + ":" + port + ": " + std::strerror(error));
  if (endpoint_.tls) {
    auto channel = TlsChannel::Open(fd_, endpoint_.host, tls_options_);
    if (!channel) {
      Close();
      return channel.error();
    }
    tls_ = std::move(*channel);
  }
  return Ok();
}

Status Connection::SendAll(const std::string& data) {
  if (tls_) return tls_->Send(data.data(), data.size());
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("send", errno);
    }
    sent += static_cast<size_t>(n);
  }
  return Ok();
}

Result<size_t> Connection::Receive(char* buffer, size_t size) {
  if (tls_) return tls_->Receive(buffer, size);
  for (;;) {
    ssize_t n = ::recv(fd_, buffer, size, 0);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return Unavailable("no answer within " + std::to_string(kReceiveTimeoutSeconds) + " s");
    if (errno != EINTR) return ErrnoError("recv", errno);
  }
}

Result<Response> Connection::Call(const std::string& method, const std::string& path,
                                  const std::string& body,
                                  const std::map<std::string, std::string>& headers) {
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: " + endpoint_.host + "\r\n";
  if (!token_.empty()) request += "Authorization: Bearer " + token_ + "\r\n";
  for (const auto& [name, value] : headers)
    request += name + ": " + value + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") {
    request +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;
  // A kept-alive connection may have been closed by the server meanwhile: retry once on a
  // fresh one when nothing came back.
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = fd_ >= 0;
    if (!reused) {
      if (auto status = Open(); !status) return status.error();
    }
    auto response = Exchange(request);
    if (response || !reused) return response;
    Close();
  }
  return Unavailable("connection closed");
}

Result<Response> Connection::Exchange(const std::string& request) {
  if (auto status = SendAll(request); !status) {
    Close();
    return status.error();
  }
  ResponseReader reader;
  char buffer[16384];
  while (!reader.done()) {
    auto n = Receive(buffer, sizeof(buffer));
    if (!n) {
      Close();
      return n.error();
    }
    Status fed = *n == 0 ? reader.Finish() : reader.Feed(std::string_view(buffer, *n));
    if (!fed) {
      Close();
      return fed.error();
    }
    if (*n == 0 && !reader.done()) {
      Close();
      return Unavailable("connection closed before a full response");
    }
  }
  const bool close_after = reader.closes();
  Response response = reader.Take();
  if (close_after) Close();
  return response;
}

}  // namespace tessera::client
