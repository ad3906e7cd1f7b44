// The node agent's HTTP endpoint: GET only, one connection at a time, a bounded request header,
// a deadline per connection, and Connection: close. Prometheus scrapes it every few seconds;
// nothing here needs more (serve's own /metrics is served by its API server).
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <thread>

#include "common/asio_cloexec.h"
#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

constexpr size_t kMaxHeader = 8192;
constexpr int kConnectionSeconds = 5;

void SetDeadline(tcp::socket& socket) {
  timeval timeout{kConnectionSeconds, 0};
  ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
}

class Endpoint final : public MetricsEndpoint {
 public:
  Endpoint(EndpointHandler handler) : handler_(std::move(handler)), acceptor_(io_) {}

  Status Listen(const std::string& host, uint16_t port) {
    boost::system::error_code error;
    auto address = asio::ip::make_address(host, error);
    if (error) return InvalidArgument("listen address " + host + ": " + error.message());
    tcp::endpoint where(address, port);
    error = OpenCloseOnExec(acceptor_, where.protocol());
    if (!error) acceptor_.set_option(tcp::acceptor::reuse_address(true), error);
    if (!error) acceptor_.bind(where, error);
    if (!error) acceptor_.listen(16, error);
    if (error)
      return Unavailable("listen on " + host + ":" + std::to_string(port) + ": " + error.message());
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Serve(); });
    return Ok();
  }

  ~Endpoint() override {
    stopping_ = true;
    // Wakes the blocking accept; the thread sees stopping_ and ends.
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
  }

  uint16_t port() const override { return port_; }

 private:
  void Serve() {
    while (!stopping_) {
      tcp::socket socket(io_);
      boost::system::error_code error = AcceptCloseOnExec(acceptor_, socket);
      if (stopping_) return;
      if (error) continue;
      SetDeadline(socket);
      Answer(socket);
      socket.shutdown(tcp::socket::shutdown_both, error);
    }
  }

  void Answer(tcp::socket& socket) {
    boost::beast::flat_buffer buffer(kMaxHeader);
    http::request_parser<http::empty_body> parser;
    parser.header_limit(kMaxHeader);
    parser.body_limit(0);
    boost::system::error_code error;
    http::read(socket, buffer, parser, error);
    if (error) return;  // too large, malformed or too slow: nothing is answered
    const auto& request = parser.get();
    http::response<http::string_body> response;
    response.version(11);
    response.keep_alive(false);
    if (request.method() != http::verb::get && request.method() != http::verb::head) {
      response.result(http::status::method_not_allowed);
      response.set(http::field::allow, "GET");
      response.body() = "method not allowed\n";
    } else {
      std::string_view target(request.target().data(), request.target().size());
      EndpointResponse answer = handler_(target.substr(0, target.find('?')));
      response.result(static_cast<http::status>(answer.status));
      response.set(http::field::content_type, answer.content_type);
      if (request.method() == http::verb::get) response.body() = std::move(answer.body);
    }
    response.prepare_payload();
    http::write(socket, response, error);
  }

  EndpointHandler handler_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<MetricsEndpoint>> StartMetricsEndpoint(const std::string& host,
                                                              uint16_t port,
                                                              EndpointHandler handler) {
  auto endpoint = std::make_unique<Endpoint>(std::move(handler));
  if (auto status = endpoint->Listen(host, port); !status) return status.error();
  return std::unique_ptr<MetricsEndpoint>(std::move(endpoint));
}

}  // namespace tessera::telemetry
