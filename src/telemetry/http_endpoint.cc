// The node agent's HTTP endpoint: one io_context thread serves every connection asynchronously,
// so a client that connects and sends nothing (or a byte a second) holds one connection slot
// until its deadline and delays nobody else. Prometheus scrapes it every few seconds; nothing
// here needs more (serve's own /metrics is served by its API server).
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <thread>
#include <type_traits>

#include "common/asio_cloexec.h"
#include "telemetry/endpoint_http.h"
#include "telemetry/telemetry.h"
#include "tls/tls.h"

namespace tessera::telemetry {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// What the connections share with the server: the answer's inputs and the slot count. Lives on
// the io_context thread only (but for `stopping`, which the destructor sets before it joins).
struct EndpointState {
  EndpointOptions options;
  EndpointHandler handler;
  std::unique_ptr<TokenFile> token;
  std::unique_ptr<tls::ServerContextSource> tls;  // set: every connection is TLS
  size_t open = 0;                                // connections holding a slot
  bool stopping = false;
  std::function<void()> slot_freed;  // resumes a paused accept
};

// One connection: read the request header within the deadline, answer within a deadline of
// its own, close. A template over the stream so that a TLS stream (beast::ssl_stream over a
// tcp_stream, with its handshake before the read) can take the plain one's place.
template <class Stream>
class EndpointConnection : public std::enable_shared_from_this<EndpointConnection<Stream>> {
 public:
  EndpointConnection(Stream stream, EndpointState* state)
      : stream_(std::move(stream)), state_(state) {
    LimitEndpointParser(parser_);
  }

  ~EndpointConnection() {
    --state_->open;
    if (!state_->stopping && state_->slot_freed) state_->slot_freed();
  }

  void Start() {
    // tcp_stream's expiry holds for every operation started until it is moved: the whole
    // header must arrive before it, however the client paces its bytes.
    beast::get_lowest_layer(stream_).expires_after(state_->options.timeout);
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      // The handshake counts against the same deadline as the header it precedes.
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code error) {
                                if (error) return self->Close();
                                self->Read();
                              });
    } else {
      Read();
    }
  }

 private:
  void Read() {
    http::async_read(stream_, buffer_, parser_,
                     [self = this->shared_from_this()](beast::error_code error, size_t) {
                       self->OnRead(error);
                     });
  }

  void OnRead(beast::error_code error) {
    if (error) return Close();  // too large, malformed, too slow or gone: nothing is answered
    reply_ = AnswerEndpointRequest(parser_.get(), state_->token.get(), state_->options.open_paths,
                                   state_->handler);
    beast::get_lowest_layer(stream_).expires_after(state_->options.timeout);
    http::async_write(
        stream_, reply_,
        [self = this->shared_from_this()](beast::error_code, size_t) { self->Close(); });
  }

  void Close() {
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(stream_).close();
  }

  Stream stream_;
  EndpointState* state_;
  beast::flat_buffer buffer_{kEndpointMaxHeader};
  EndpointRequestParser parser_;
  EndpointReply reply_;
};

class Endpoint final : public MetricsEndpoint {
 public:
  explicit Endpoint(EndpointState state)
      : state_(std::move(state)),
        io_(std::make_unique<asio::io_context>(1)),
        acceptor_(std::make_unique<tcp::acceptor>(*io_)),
        retry_(std::make_unique<asio::steady_timer>(*io_)) {
    state_.slot_freed = [this] { ResumeAccepting(); };
  }

  Status Listen() {
    const auto& options = state_.options;
    boost::system::error_code error;
    auto address = asio::ip::make_address(options.host, error);
    if (error) return InvalidArgument("listen address " + options.host + ": " + error.message());
    if (!state_.token && !address.is_loopback() && !options.anonymous_off_loopback)
      return InvalidArgument("listen address " + options.host +
                             " is not a loopback address: a token file is needed there");
    tcp::endpoint where(address, options.port);
    error = OpenCloseOnExec(*acceptor_, where.protocol());
    // Accepted with accept4 once readable (AsyncAcceptCloseOnExec): never block there.
    if (!error) acceptor_->non_blocking(true, error);
    if (!error) acceptor_->set_option(tcp::acceptor::reuse_address(true), error);
    if (!error) acceptor_->bind(where, error);
    if (!error) acceptor_->listen(asio::socket_base::max_listen_connections, error);
    if (error)
      return Unavailable("listen on " + options.host + ":" + std::to_string(options.port) + ": " +
                         error.message());
    port_ = acceptor_->local_endpoint().port();
    Accept();
    thread_ = std::thread([this] { io_->run(); });
    return Ok();
  }

  ~Endpoint() override {
    io_->stop();
    if (thread_.joinable()) thread_.join();
    state_.stopping = true;
    // Connections still open end with the io_context, while the state they point at lives.
    retry_.reset();
    acceptor_.reset();
    io_.reset();
  }

  uint16_t port() const override { return port_; }

 private:
  void Accept() {
    accepting_ = true;
    AsyncAcceptCloseOnExec(*acceptor_, acceptor_->get_executor(),
                           [this](boost::system::error_code error, tcp::socket socket) {
                             accepting_ = false;
                             if (error == asio::error::operation_aborted || state_.stopping) return;
                             if (error) {
                               // Out of descriptors, or the like: try again shortly rather than
                               // spin.
                               retry_->expires_after(std::chrono::milliseconds(100));
                               retry_->async_wait([this](boost::system::error_code waited) {
                                 if (!waited) ResumeAccepting();
                               });
                               return;
                             }
                             ++state_.open;
                             StartConnection(std::move(socket));
                             ResumeAccepting();
                           });
  }

  void StartConnection(tcp::socket socket) {
    if (!state_.tls) {
      std::make_shared<EndpointConnection<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)),
                                                              &state_)
          ->Start();
      return;
    }
    // The certificate of this moment (a rotation leaves open connections on theirs); asio's
    // context adopts one reference, the stream's SSL holds its own (tls/tls.h).
    tls::ContextPtr current = state_.tls->Current();
    SSL_CTX_up_ref(current.get());
    asio::ssl::context adopted(current.get());
    std::make_shared<EndpointConnection<TlsStream>>(
        TlsStream(beast::tcp_stream(std::move(socket)), adopted), &state_)
        ->Start();
  }

  // At the cap, accepting pauses; the connection that frees a slot resumes it.
  void ResumeAccepting() {
    if (!accepting_ && !state_.stopping && state_.open < state_.options.max_connections) Accept();
  }

  EndpointState state_;
  std::unique_ptr<asio::io_context> io_;
  std::unique_ptr<tcp::acceptor> acceptor_;
  std::unique_ptr<asio::steady_timer> retry_;
  bool accepting_ = false;
  uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<MetricsEndpoint>> StartMetricsEndpoint(EndpointOptions options,
                                                              EndpointHandler handler) {
  if (options.max_connections == 0)
    return InvalidArgument("endpoint: at least one connection must be allowed");
  EndpointState state;
  if (!options.token_file.empty()) {
    auto token = TokenFile::Open(options.token_file);
    // The operator's mistake, whatever the file's trouble: never an endpoint without its token.
    if (!token) return InvalidArgument(token.error().message);
    state.token = std::move(*token);
  }
  if (!options.tls.cert.empty()) {
    auto source = tls::ServerContextSource::Open(options.tls);
    if (!source) return source.error();
    state.tls = std::move(*source);
  }
  state.options = std::move(options);
  state.handler = std::move(handler);
  auto endpoint = std::make_unique<Endpoint>(std::move(state));
  if (auto status = endpoint->Listen(); !status) return status.error();
  return std::unique_ptr<MetricsEndpoint>(std::move(endpoint));
}

}  // namespace tessera::telemetry
