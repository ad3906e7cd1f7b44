// HTTP/1.1 with keep-alive on Boost.Beast: one session per connection, requests on a connection
// answered in order. A handler may answer later from another thread (after the store's group
// commit); the answer is posted back to the connection's strand.
#include <spdlog/spdlog.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <thread>

#include "api/api.h"
#include "api/router.h"

namespace tessera::api {
namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr size_t kMaxBody = 1 << 20;
constexpr auto kIdleTimeout = std::chrono::seconds(120);

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Router* router) : stream_(std::move(socket)), router_(router) {}

  void Begin() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&Session::Read, shared_from_this()));
  }

 private:
  void Read() {
    parser_.emplace();
    parser_->body_limit(kMaxBody);
    stream_.expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code error, size_t) {
    if (error == http::error::end_of_stream) return Close();
    if (error == http::error::body_limit) {
      Response response{http::status::payload_too_large, 11};
      response.set(http::field::content_type, "application/json");
      response.body() =
          R"({"error":{"code":"invalid_argument","message":"body: larger than 1 MiB"}})"
          "\n";
      response.keep_alive(false);
      response.prepare_payload();
      return Write(std::move(response));
    }
    if (error) {
      if (error != beast::error::timeout && error != net::error::operation_aborted &&
          error != net::error::connection_reset)
        spdlog::debug("http read: {}", error.message());
      return Close();
    }
    Request request = parser_->release();
    const bool keep_alive = request.keep_alive();
    const auto method = request.method();
    const auto started = std::chrono::steady_clock::now();
    stream_.expires_never();  // an answer may wait for a durable commit
    auto self = shared_from_this();
    router_->Handle(std::move(request), [self, keep_alive, method, started](Response response) {
      self->router_->Observe(method, std::chrono::steady_clock::now() - started);
      response.keep_alive(keep_alive);
      response.set(http::field::server, "tessera");
      net::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
        self->Write(std::move(response));
      });
    });
  }

  void Write(Response response) {
    auto owned = std::make_shared<Response>(std::move(response));
    stream_.expires_after(kIdleTimeout);
    http::async_write(stream_, *owned,
                      [self = shared_from_this(), owned](beast::error_code error, size_t) {
                        if (error) return self->Close();
                        if (owned->need_eof()) return self->Close();
                        self->Read();
                      });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Router* router_;
};

class BeastServer final : public Server {
 public:
  BeastServer(const ServerOptions& options, serve::Service* service)
      : options_(options),
        io_(std::max(1, options.io_threads)),
        acceptor_(net::make_strand(io_)),
        signals_(io_, SIGINT, SIGTERM),
        router_(service) {}

  Status Listen() {
    beast::error_code error;
    auto address = net::ip::make_address(options_.host, error);
    if (error)
      return InvalidArgument("--listen: address " + options_.host + ": " + error.message());
    tcp::endpoint endpoint(address, options_.port);
    acceptor_.open(endpoint.protocol(), error);
    if (!error) acceptor_.set_option(net::socket_base::reuse_address(true), error);
    if (!error) acceptor_.bind(endpoint, error);
    if (!error) acceptor_.listen(net::socket_base::max_listen_connections, error);
    if (error) {
      return Unavailable("listen on " + options_.host + ":" + std::to_string(options_.port) + ": " +
                         error.message());
    }
    port_ = acceptor_.local_endpoint().port();
    return Ok();
  }

  uint16_t port() const override { return port_; }

  void Run() override {
    signals_.async_wait([this](beast::error_code error, int signal) {
      if (!error) {
        spdlog::info("signal {}: shutting down", signal);
        Stop();
      }
    });
    Accept();
    std::vector<std::thread> threads;
    for (int i = 1; i < options_.io_threads; ++i)
      threads.emplace_back([this] { io_.run(); });
    io_.run();
    for (auto& thread : threads)
      thread.join();
  }

  void Stop() override { io_.stop(); }

 private:
  void Accept() {
    acceptor_.async_accept(net::make_strand(io_),
                           [this](beast::error_code error, tcp::socket socket) {
                             if (!error) {
                               beast::error_code ignored;
                               socket.set_option(tcp::no_delay(true), ignored);
                               std::make_shared<Session>(std::move(socket), &router_)->Begin();
                             } else if (error == net::error::operation_aborted) {
                               return;
                             }
                             Accept();
                           });
  }

  ServerOptions options_;
  net::io_context io_;
  tcp::acceptor acceptor_;
  net::signal_set signals_;
  Router router_;
  uint16_t port_ = 0;
};

}  // namespace

Result<std::unique_ptr<Server>> Server::Create(const ServerOptions& options,
                                               serve::Service* service) {
  auto server = std::make_unique<BeastServer>(options, service);
  if (auto status = server->Listen(); !status) return status.error();
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace tessera::api
