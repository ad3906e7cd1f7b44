// HTTP/1.1 with keep-alive on Boost.Beast: one session per connection, requests on a connection
// answered in order. A handler may answer later from another thread (after the store's group
// commit); the answer is posted back to the connection's strand.
//
// Hostile peers are expected. A request's header is read and judged first (route, method,
// transfer coding, token: Router::Admit); only an admitted request has its body read. Each phase
// has its own deadline (idle between requests, header, body), open connections are capped below
// the descriptor limit, and running out of descriptors pauses accepting instead of spinning.
// With a certificate (ServerOptions::tls) every connection is TLS: the handshake runs under the
// header timeout, and each new connection takes the certificate of its moment (rotation).
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "api/api.h"
#include "api/router.h"
#include "common/asio_cloexec.h"
#include "tls/tls.h"

namespace tessera::api {

int EffectiveConnectionCap(int wanted, uint64_t nofile_limit, int reserve) {
  const uint64_t available =
      nofile_limit > static_cast<uint64_t>(reserve) ? nofile_limit - reserve : 1;
  return static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(wanted, available)));
}

namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

constexpr size_t kMaxBody = 1 << 20;
constexpr uint32_t kMaxHeader = 16 * 1024;
// After an early answer the peer may still be sending a body: read and drop up to this much
// (for at most kLingerTime) before closing, so that closing does not reset the connection
// before the peer has read the answer.
constexpr size_t kMaxDrain = 256 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr auto kMinAcceptBackoff = std::chrono::milliseconds(10);
constexpr auto kMaxAcceptBackoff = std::chrono::milliseconds(1000);

// Counts open connections; when the cap is reached the acceptor pauses, and the connection that
// closes next resumes it.
class ConnectionGate {
 public:
  explicit ConnectionGate(int cap) : cap_(cap) {}

  void Enter() {
    std::lock_guard lock(mu_);
    ++active_;
  }
  void Leave() {
    std::function<void()> resume;
    {
      std::lock_guard lock(mu_);
      --active_;
      if (paused_ && resume_) {
        paused_ = false;
        resume = resume_;
      }
    }
    if (resume) resume();
  }
  // True (and paused) when no further connection may be accepted now.
  bool PauseIfFull() {
    std::lock_guard lock(mu_);
    paused_ = active_ >= cap_;
    return paused_;
  }
  void SetResume(std::function<void()> resume) {
    std::lock_guard lock(mu_);
    resume_ = std::move(resume);
  }
  int cap() const { return cap_; }

 private:
  std::mutex mu_;
  const int cap_;
  int active_ = 0;
  bool paused_ = false;
  std::function<void()> resume_;  // unset once the server is being destroyed
};

Response PlainError(http::status status, const char* message) {
  Response response{status, 11};
  response.set(http::field::content_type, "application/json");
  response.body() =
      std::string(R"({"error":{"code":"invalid_argument","message":")") + message + "\"}}\n";
  response.keep_alive(false);
  response.prepare_payload();
  return response;
}

bool IsParseError(const beast::error_code& error) {
  return error.category() == http::make_error_code(http::error::bad_method).category();
}

// accept(2) failures that last until descriptors or memory are freed elsewhere.
bool OutOfResources(const beast::error_code& error) {
  if (error.category() != boost::system::system_category()) return false;
  const int value = error.value();
  return value == EMFILE || value == ENFILE || value == ENOBUFS || value == ENOMEM;
}

// One connection, plain (beast::tcp_stream) or TLS (TlsStream over one). Every deadline is set
// on the TCP stream underneath, so the TLS handshake runs under the header timeout.
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  using std::enable_shared_from_this<Session<Stream>>::shared_from_this;

 public:
  template <class... Args>
  Session(Router* router, std::shared_ptr<ConnectionGate> gate, const ServerOptions& options,
          Args&&... stream_args)
      : stream_(std::forward<Args>(stream_args)...),
        router_(router),
        gate_(std::move(gate)),
        options_(options) {
    gate_->Enter();
    // The key of the per-address rate limit for requests without a valid token.
    beast::error_code error;
    auto remote = beast::get_lowest_layer(stream_).socket().remote_endpoint(error);
    if (!error) peer_ = remote.address().to_string();
  }
  ~Session() { gate_->Leave(); }

  void Begin() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&Session::Handshake, shared_from_this()));
  }

 private:
  beast::tcp_stream& Tcp() { return beast::get_lowest_layer(stream_); }

  // TLS: the handshake counts as part of the first request's header.
  void Handshake() {
    if constexpr (kTls) {
      Tcp().expires_after(options_.header_timeout);
      stream_.async_handshake(net::ssl::stream_base::server,
                              [self = shared_from_this()](beast::error_code error) {
                                if (error) {
                                  spdlog::debug("tls handshake: {}", error.message());
                                  return self->Close();
                                }
                                self->ReadHeader();
                              });
    } else {
      ReadHeader();
    }
  }

  // Between requests on a kept-alive connection: wait for the next one's first bytes.
  void AwaitNext() {
    if (buffer_.size() > 0) return ReadHeader();
    Tcp().expires_after(options_.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code error, size_t n) {
                              self->buffer_.commit(n);
                              if (error) return self->Close();
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(kMaxHeader);
    parser_->body_limit(kMaxBody);
    head_ = false;
    Tcp().expires_after(options_.header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::OnHeader, shared_from_this()));
  }

  void OnHeader(beast::error_code error, size_t) {
    if (error) return OnReadError(error);
    const auto& header = parser_->get();
    head_ = header.method() == http::verb::head;
    auto admission = router_->Admit(header, peer_);
    if (admission.answer) {
      // The body, if any, stays unread: answer and close.
      const bool body_pending = !parser_->is_done();
      admission.answer->keep_alive(!body_pending && header.keep_alive());
      admission.answer->set(http::field::server, "tessera");
      return Write(std::move(*admission.answer));
    }
    caller_ = std::move(admission.caller);
    auto expect = header[http::field::expect];
    if (!parser_->is_done() && beast::iequals(expect, "100-continue")) {
      auto interim =
          std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      Tcp().expires_after(options_.body_timeout);
      return http::async_write(stream_, *interim,
                               [self = shared_from_this(), interim](beast::error_code e, size_t) {
                                 if (e) return self->Close();
                                 self->ReadBody();
                               });
    }
    ReadBody();
  }

  void ReadBody() {
    if (parser_->is_done()) return OnRead({}, 0);
    Tcp().expires_after(options_.body_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  void OnReadError(const beast::error_code& error) {
    if (error == http::error::end_of_stream) return Close();
    if (error == http::error::body_limit)
      return Write(PlainError(http::status::payload_too_large, "body: larger than 1 MiB"));
    if (error == http::error::header_limit)
      return Write(PlainError(http::status::request_header_fields_too_large,
                              "request header: larger than 16 KiB"));
    if (error == http::error::partial_message) return Close();
    if (IsParseError(error))
      return Write(PlainError(http::status::bad_request, "malformed HTTP request"));
    if (error != beast::error::timeout && error != net::error::operation_aborted &&
        error != net::error::connection_reset)
      spdlog::debug("http read: {}", error.message());
    Close();
  }

  void OnRead(beast::error_code error, size_t) {
    if (error) return OnReadError(error);
    Request request = parser_->release();
    const bool keep_alive = request.keep_alive();
    const auto method = request.method();
    const auto started = std::chrono::steady_clock::now();
    Tcp().expires_never();  // an answer may wait for a durable commit
    auto self = shared_from_this();
    router_->Handle(
        std::move(request), caller_, [self, keep_alive, method, started](Response response) {
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
    Tcp().expires_after(options_.body_timeout);
    auto after = [self = shared_from_this(), owned](beast::error_code error, size_t) {
      if (error) return self->Close();
      if (owned->need_eof()) return self->Linger();
      self->AwaitNext();
    };
    if (head_) {
      // HEAD: the GET answer's header (Content-Length included) and no body.
      auto serializer = std::make_shared<http::response_serializer<http::string_body>>(*owned);
      http::async_write_header(
          stream_, *serializer,
          [after, serializer](beast::error_code error, size_t n) { after(error, n); });
      return;
    }
    http::async_write(stream_, *owned, after);
  }

  // Half-close, then drop what the peer still sends (bounded) until it closes too. TLS: the
  // close_notify alert first, then the same.
  void Linger() {
    if constexpr (kTls) {
      Tcp().expires_after(kLingerTime);
      return stream_.async_shutdown([self = shared_from_this()](beast::error_code) {
        beast::error_code ignored;
        self->Tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
      });
    }
    beast::error_code ignored;
    Tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Tcp().expires_after(kLingerTime);
    drained_ = buffer_.size();
    buffer_.clear();
    buffer_.shrink_to_fit();
    parser_.reset();
    Drain();
  }
  void Drain() {
    if (drained_ > kMaxDrain) return;
    stream_.async_read_some(net::buffer(drain_),
                            [self = shared_from_this()](beast::error_code error, size_t n) {
                              self->drained_ += n;
                              if (!error) self->Drain();
                            });
  }

  void Close() {
    beast::error_code ignored;
    Tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  Stream stream_;
  // Stages what is read; the body is moved into the request as it comes. Bounded so an idle or
  // lingering connection holds little.
  beast::flat_buffer buffer_{kMaxHeader + 16 * 1024};
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<serve::Caller> caller_;
  std::string peer_;
  bool head_ = false;
  size_t drained_ = 0;
  std::array<char, 1024> drain_{};
  Router* router_;
  std::shared_ptr<ConnectionGate> gate_;
  const ServerOptions& options_;
};

class BeastServer final : public Server {
 public:
  explicit BeastServer(const ServerOptions& options)
      : options_(options),
        io_(std::max(1, options.io_threads)),
        acceptor_(net::make_strand(io_)),
        accept_timer_(acceptor_.get_executor()) {
    rlimit limit{};
    uint64_t nofile = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 1024;
    const int cap = EffectiveConnectionCap(options_.max_connections, nofile);
    if (cap < options_.max_connections)
      spdlog::info("http: at most {} connections (open-file limit {})", cap, nofile);
    gate_ = std::make_shared<ConnectionGate>(cap);
    gate_->SetResume([this] { net::post(acceptor_.get_executor(), [this] { Accept(); }); });
  }
  ~BeastServer() override {
    // Sessions outlive this object's members while io_ is destroyed: they must not resume.
    gate_->SetResume(nullptr);
  }

  Status Listen() {
    beast::error_code error;
    auto address = net::ip::make_address(options_.host, error);
    if (error)
      return InvalidArgument("--listen: address " + options_.host + ": " + error.message());
    tcp::endpoint endpoint(address, options_.port);
    error = OpenCloseOnExec(acceptor_, endpoint.protocol());
    // Accepted with accept4 after the wait (AsyncAcceptCloseOnExec): never block there.
    if (!error) acceptor_.non_blocking(true, error);
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

  void Run(serve::Service* service, const std::function<void()>& serving) override {
    router_ = std::make_unique<Router>(service, options_.metrics_aggregate_public);
    // Here, not at Create: until the service exists, SIGINT/SIGTERM keep their default action.
    signals_.emplace(io_, SIGINT, SIGTERM);
    signals_->async_wait([this](beast::error_code error, int signal) {
      if (!error) {
        spdlog::info("signal {}: shutting down", signal);
        Stop();
      }
    });
    net::post(acceptor_.get_executor(), [this] { Accept(); });
    // From here a stop signal, whichever thread it reaches, lands in the handler above: only now
    // may the caller say the service is up (its port file). It blocked them in its own thread
    // while it started; one sent meanwhile is pending and is handled now.
    if (serving) serving();
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
    std::vector<std::thread> threads;
    for (int i = 1; i < options_.io_threads; ++i)
      threads.emplace_back([this] { io_.run(); });
    io_.run();
    for (auto& thread : threads)
      thread.join();
  }

  void Stop() override { io_.stop(); }

 private:
  // Runs on the acceptor's strand.
  void Accept() {
    if (accepting_) return;
    if (gate_->PauseIfFull()) return;  // the next connection to close resumes
    accepting_ = true;
    AsyncAcceptCloseOnExec(acceptor_, net::make_strand(io_),
                           [this](beast::error_code error, tcp::socket socket) {
                             accepting_ = false;
                             if (!error) {
                               backoff_ = kMinAcceptBackoff;
                               beast::error_code ignored;
                               socket.set_option(tcp::no_delay(true), ignored);
                               StartSession(std::move(socket));
                               return Accept();
                             }
                             if (error == net::error::operation_aborted) return;
                             if (OutOfResources(error)) {
                               // The pending connection stays in the backlog; accepting again at
                               // once would fail the same way in a busy loop. Wait, longer each
                               // time, for descriptors to come back.
                               if (backoff_ == kMinAcceptBackoff)
                                 spdlog::warn("http accept: {}; pausing accepts", error.message());
                               accept_timer_.expires_after(backoff_);
                               backoff_ = std::min(backoff_ * 2, kMaxAcceptBackoff);
                               accept_timer_.async_wait([this](beast::error_code wait_error) {
                                 if (!wait_error) Accept();
                               });
                               return;
                             }
                             spdlog::debug("http accept: {}", error.message());
                             Accept();
                           });
  }

  void StartSession(tcp::socket socket) {
    if (!options_.tls) {
      std::make_shared<Session<beast::tcp_stream>>(router_.get(), gate_, options_,
                                                   std::move(socket))
          ->Begin();
      return;
    }
    // The context of this moment: a rotation after this leaves the connection on it. asio's
    // context adopts the handle it is given (and frees it when it goes); the connection's SSL
    // holds a reference of its own, so adopting one more reference is all it takes.
    tls::ContextPtr ctx = options_.tls->Current();
    SSL_CTX_up_ref(ctx.get());
    net::ssl::context adopted(ctx.get());
    std::make_shared<Session<TlsStream>>(router_.get(), gate_, options_, std::move(socket), adopted)
        ->Begin();
  }

  ServerOptions options_;
  net::io_context io_;
  tcp::acceptor acceptor_;
  net::steady_timer accept_timer_;          // on the acceptor's strand
  std::optional<net::signal_set> signals_;  // from Run on
  std::unique_ptr<Router> router_;          // from Run on
  std::shared_ptr<ConnectionGate> gate_;
  bool accepting_ = false;  // an accept is outstanding (acceptor's strand)
  std::chrono::milliseconds backoff_ = kMinAcceptBackoff;
  uint16_t port_ = 0;
};

}  // namespace

Result<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  auto server = std::make_unique<BeastServer>(options);
  if (auto status = server->Listen(); !status) return status.error();
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace tessera::api
