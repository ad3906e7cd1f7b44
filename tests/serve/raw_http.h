// Raw TCP to a test server, for what a well-behaved client never sends: pipelined HEAD, odd
// transfer codings, malformed request lines, stalled headers, bodies that never come.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace tessera::testing {

class RawConnection {
 public:
  explicit RawConnection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return fd_ >= 0; }

  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads until the peer closes, `until` appears in what was read, or `timeout` passes.
  std::string Receive(std::chrono::milliseconds timeout, const std::string& until = "") {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (!until.empty() && received_.find(until) != std::string::npos) break;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) break;
      char buffer[65536];
      ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      received_.append(buffer, static_cast<size_t>(n));
    }
    return received_;
  }

  // Whether the peer closed the connection within `timeout`.
  bool WaitClosed(std::chrono::milliseconds timeout) {
    Receive(timeout);
    return closed_;
  }

  const std::string& received() const { return received_; }

 private:
  int fd_ = -1;
  bool closed_ = false;
  std::string received_;
};

// The status code of the first response in `text` (0 when there is none).
inline int FirstStatus(const std::string& text) {
  if (text.rfind("HTTP/1.1 ", 0) != 0 || text.size() < 12) return 0;
  return std::stoi(text.substr(9, 3));
}

}  // namespace tessera::testing
