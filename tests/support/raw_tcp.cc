#include "support/raw_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/file_descriptor.h"

namespace tessera::testing {
namespace {

using Clock = std::chrono::steady_clock;

int MillisLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

}  // namespace

int ConnectLoopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string RawExchange(uint16_t port, const std::string& request,
                        std::chrono::milliseconds timeout, bool* closed) {
  if (closed) *closed = false;
  const auto deadline = Clock::now() + timeout;
  FileDescriptor fd(ConnectLoopback(port));
  if (fd.get() < 0) return "";
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = ::send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return "";
    sent += static_cast<size_t>(n);
  }
  std::string answer;
  char chunk[65536];
  for (;;) {
    pollfd ready{fd.get(), POLLIN, 0};
    if (::poll(&ready, 1, MillisLeft(deadline)) <= 0) return answer;  // timed out
    ssize_t n = ::recv(fd.get(), chunk, sizeof chunk, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      return answer;
    }
    answer.append(chunk, static_cast<size_t>(n));
  }
}

int StatusOf(const std::string& answer) {
  if (answer.rfind("HTTP/1.1 ", 0) != 0 || answer.size() < 12) return 0;
  return std::atoi(answer.substr(9, 3).c_str());
}

std::string BodyOf(const std::string& answer) {
  const size_t end = answer.find("\r\n\r\n");
  return end == std::string::npos ? "" : answer.substr(end + 4);
}

bool ClosedByPeerWithin(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  char chunk[4096];
  for (;;) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, MillisLeft(deadline)) <= 0) return false;
    if (::recv(fd, chunk, sizeof chunk, 0) <= 0) return true;
  }
}

}  // namespace tessera::testing
