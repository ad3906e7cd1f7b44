// The client's HTTP/1.1 over Boost.Beast and Asio's OpenSSL streams. Every connection has its own
// io_context, run in short slices by the thread that uses the connection, so a request obeys its
// deadline and a watch notices `stop` while the server is silent (either one closes the socket,
// which completes the pending operation with an error), and requests on different threads never
// wait for each other: a lock is held only to take or return an idle connection.
#include "kubernetes/http_transport.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <optional>

#include "common/asio_cloexec.h"
#include "common/bounded_file.h"

namespace tessera::k8s {
// Named rather than anonymous: the types below are members of a class with linkage, which
// -Wsubobject-linkage rejects for anonymous types once unity builds include this file.
namespace http_transport_detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMaxHeaderBytes = 64 << 10;
constexpr size_t kMaxErrorBodyBytes = 64 << 10;
// Idle kept-alive connections kept for later requests; more at once are closed after use.
constexpr size_t kMaxIdleConnections = 4;
// How often a silent watch looks at its stop flag.
constexpr auto kStopCheck = std::chrono::milliseconds(100);
// Connecting and reading a watch's response header obey this; its body has no deadline.
constexpr auto kStreamSetupTimeout = std::chrono::seconds(30);

struct Endpoint {
  bool tls = true;
  std::string host;  // to resolve and connect to (no IPv6 brackets)
  std::string port;
  std::string verify_name;  // what the certificate must name and SNI carries
  std::string host_header;
  std::string base_path;  // a server URL's path ("https://proxy/k8s/c1"), without trailing '/'
  std::string origin;
};

bool IsIpAddress(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

Result<Endpoint> ParseServer(const ClientConfig& config) {
  Endpoint endpoint;
  std::string rest = config.server;
  auto scheme_end = rest.find("://");
  if (scheme_end != std::string::npos) {
    std::string scheme = rest.substr(0, scheme_end);
    if (scheme != "https" && scheme != "http") {
      return InvalidArgument("server " + config.server + ": scheme must be https or http");
    }
    endpoint.tls = scheme == "https";
    rest = rest.substr(scheme_end + 3);
  }
  auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) endpoint.base_path = rest.substr(slash);
  while (!endpoint.base_path.empty() && endpoint.base_path.back() == '/')
    endpoint.base_path.pop_back();
  endpoint.port = endpoint.tls ? "443" : "80";
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string::npos)
      return InvalidArgument("server " + config.server + ": bad IPv6");
    endpoint.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return InvalidArgument("server " + config.server);
      endpoint.port = authority.substr(close + 2);
    }
  } else {
    auto colon = authority.rfind(':');
    endpoint.host = authority.substr(0, colon);
    if (colon != std::string::npos) endpoint.port = authority.substr(colon + 1);
  }
  if (endpoint.host.empty() || endpoint.port.empty() ||
      endpoint.port.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("server " + config.server + ": want scheme://host[:port][/path]");
  }
  endpoint.verify_name = config.tls_server_name.empty() ? endpoint.host : config.tls_server_name;
  // With tls-server-name the request names that host, as kubectl's does.
  endpoint.host_header =
      config.tls_server_name.empty() ? authority : config.tls_server_name + ":" + endpoint.port;
  endpoint.origin = (endpoint.tls ? "https://" : "http://") + authority;
  return endpoint;
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string SslMessage(const boost::system::error_code& ec) {
  if (ec.category() != asio::error::get_ssl_category()) return ec.message();
  char text[256];
  ERR_error_string_n(static_cast<unsigned long>(ec.value()), text, sizeof text);
  return text;
}

// One connection: its io_context, a socket, and the TLS stream over it for https.
struct Connection {
  asio::io_context io;
  tcp::socket socket{io};
  std::unique_ptr<ssl::context> tls_context;
  std::unique_ptr<ssl::stream<tcp::socket&>> tls;
  beast::flat_buffer buffer;

  template <typename Fn>
  auto With(Fn&& fn) {
    return tls ? fn(*tls) : fn(socket);
  }
  void Close() {
    boost::system::error_code ignored;
    socket.cancel(ignored);
    socket.close(ignored);
  }
};

enum class Outcome { kDone, kDeadline, kStopped };

// Runs `io` until `done`, the deadline or `stop`; on the last two, `cancel` makes the pending
// operation complete (with operation_aborted) before this returns.
Outcome Run(asio::io_context& io, const bool& done, std::optional<Clock::time_point> deadline,
            const std::atomic<bool>* stop, const std::function<void()>& cancel) {
  Outcome outcome = Outcome::kDone;
  while (!done) {
    auto now = Clock::now();
    if (deadline && now >= *deadline) {
      outcome = Outcome::kDeadline;
    } else if (stop && stop->load()) {
      outcome = Outcome::kStopped;
    } else {
      auto slice = std::chrono::duration_cast<std::chrono::nanoseconds>(kStopCheck);
      if (deadline) slice = std::min(slice, std::chrono::nanoseconds(*deadline - now));
      io.restart();
      io.run_for(slice);
      continue;
    }
    cancel();
    io.restart();
    while (!done && io.run_one() > 0) {
    }
    break;
  }
  return outcome;
}

// Connects to the first of `addresses` that answers, as asio::async_connect would, but each
// socket opened close-on-exec (Asio's own open is not). `ec` holds the last attempt's error.
Outcome ConnectAny(Connection& connection, const tcp::resolver::results_type& addresses,
                   Clock::time_point deadline, boost::system::error_code& ec) {
  ec = asio::error::host_not_found;
  for (const auto& address : addresses) {
    connection.Close();
    ec = OpenCloseOnExec(connection.socket, address.endpoint().protocol());
    if (ec) continue;
    bool done = false;
    connection.socket.async_connect(address.endpoint(), [&](const boost::system::error_code& e) {
      ec = e;
      done = true;
    });
    const Outcome outcome =
        Run(connection.io, done, deadline, nullptr, [&] { connection.Close(); });
    if (outcome != Outcome::kDone || !ec) return outcome;
  }
  return Outcome::kDone;
}

}  // namespace http_transport_detail
using namespace http_transport_detail;

struct HttpTransport::State {
  ClientConfig config;
  Endpoint endpoint;
  std::mutex mu;                                  // guards idle only, never held across I/O
  std::vector<std::unique_ptr<Connection>> idle;  // kept alive between requests

  // Why an operation failed: the error, and whether retrying may help.
  static Error Failed(const std::string& what, const boost::system::error_code& ec, Outcome outcome,
                      uint64_t body_limit = 0) {
    if (outcome == Outcome::kDeadline) return Unavailable(what + ": timed out");
    // Retrying cannot shrink the answer.
    if (ec == http::error::body_limit) {
      return InvalidArgument(what + ": response body larger than " + std::to_string(body_limit) +
                             " bytes");
    }
    if (ec.category() == asio::error::get_ssl_category() &&
        ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
      // The server's certificate is not trusted (or does not name it): retrying cannot help.
      return FailedPrecondition(what + ": " + SslMessage(ec));
    }
    return Unavailable(what + ": " + SslMessage(ec));
  }

  // The TLS material is read for each new connection: certificate files rotate.
  Result<std::unique_ptr<ssl::context>> TlsContext() const {
    auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
    boost::system::error_code ec;
    context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                         ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                         ssl::context::no_tlsv1_1);
    auto failed = [&](const std::string& what) {
      return FailedPrecondition(what + ": " + SslMessage(ec));
    };
    if (config.insecure_skip_tls_verify) {
      context->set_verify_mode(ssl::verify_none);
    } else {
      context->set_verify_mode(ssl::verify_peer);
      if (!config.ca_pem.empty()) {
        context->add_certificate_authority(asio::buffer(config.ca_pem), ec);
        if (ec) return failed("certificate-authority-data");
      } else if (!config.ca_file.empty()) {
        auto pem = ReadBoundedFile(config.ca_file, kMaxPemFileBytes);
        if (!pem) return FailedPrecondition("CA file: " + pem.error().message);
        context->add_certificate_authority(asio::buffer(*pem), ec);
        if (ec) return failed("CA file " + config.ca_file);
      } else {
        context->set_default_verify_paths(ec);
        if (ec) return failed("system CA certificates");
      }
    }
    if (!config.client_cert_pem.empty()) {
      context->use_certificate_chain(asio::buffer(config.client_cert_pem), ec);
      if (ec) return failed("client-certificate-data");
    } else if (!config.client_cert_file.empty()) {
      auto pem = ReadBoundedFile(config.client_cert_file, kMaxPemFileBytes);
      if (!pem) return FailedPrecondition("client certificate: " + pem.error().message);
      context->use_certificate_chain(asio::buffer(*pem), ec);
      if (ec) return failed("client certificate " + config.client_cert_file);
    }
    if (!config.client_key_pem.empty()) {
      context->use_private_key(asio::buffer(config.client_key_pem), ssl::context::pem, ec);
      if (ec) return failed("client-key-data");
    } else if (!config.client_key_file.empty()) {
      auto pem = ReadBoundedFile(config.client_key_file, kMaxPemFileBytes);
      if (!pem) return FailedPrecondition("client key: " + pem.error().message);
      context->use_private_key(asio::buffer(*pem), ssl::context::pem, ec);
      if (ec) return failed("client key " + config.client_key_file);
    }
    return context;
  }

  Result<std::unique_ptr<Connection>> Connect(Clock::time_point deadline) const {
    auto connection = std::make_unique<Connection>();
    asio::io_context& io = connection->io;
    const std::string what = "connect " + endpoint.origin;
    tcp::resolver resolver(io);
    boost::system::error_code ec;
    bool done = false;
    tcp::resolver::results_type addresses;
    resolver.async_resolve(endpoint.host, endpoint.port,
                           [&](const boost::system::error_code& e, tcp::resolver::results_type r) {
                             ec = e;
                             addresses = std::move(r);
                             done = true;
                           });
    Outcome outcome = Run(io, done, deadline, nullptr, [&] { resolver.cancel(); });
    if (ec || outcome != Outcome::kDone) return Failed(what, ec, outcome);
    outcome = ConnectAny(*connection, addresses, deadline, ec);
    if (ec || outcome != Outcome::kDone) return Failed(what, ec, outcome);
    // Requests are written whole; no reason to wait for more.
    connection->socket.set_option(tcp::no_delay(true), ec);
    if (!endpoint.tls) return connection;

    auto context = TlsContext();
    if (!context) return context.error().WithContext(what);
    connection->tls_context = std::move(*context);
    connection->tls =
        std::make_unique<ssl::stream<tcp::socket&>>(connection->socket, *connection->tls_context);
    SSL* ssl_handle = connection->tls->native_handle();
    const bool by_address = IsIpAddress(endpoint.verify_name);
    // SNI carries host names only (RFC 6066 §3).
    if (!by_address) SSL_set_tlsext_host_name(ssl_handle, endpoint.verify_name.c_str());
    if (!config.insecure_skip_tls_verify) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl_handle);
      int set = by_address ? X509_VERIFY_PARAM_set1_ip_asc(param, endpoint.verify_name.c_str())
                           : X509_VERIFY_PARAM_set1_host(param, endpoint.verify_name.c_str(), 0);
      if (set != 1) return InvalidArgument(what + ": cannot verify name " + endpoint.verify_name);
    }
    done = false;
    connection->tls->async_handshake(ssl::stream_base::client,
                                     [&](const boost::system::error_code& e) {
                                       ec = e;
                                       done = true;
                                     });
    outcome = Run(io, done, deadline, nullptr, [&] { connection->Close(); });
    if (ec || outcome != Outcome::kDone)
      return Failed("TLS handshake with " + endpoint.origin, ec, outcome);
    return connection;
  }

  http::request<http::string_body> Build(const HttpRequest& request) const {
    http::request<http::string_body> out;
    out.method_string(request.method);
    out.target(endpoint.base_path + request.target);
    out.version(11);
    out.set(http::field::host, endpoint.host_header);
    for (const auto& [name, value] : request.headers)
      out.set(name, value);
    out.body() = request.body;
    if (!request.body.empty() || (request.method != "GET" && request.method != "DELETE")) {
      out.prepare_payload();
    }
    return out;
  }

  // Writes the request and reads the whole response. `*answered` tells whether any byte of a
  // response came back (when none did on a reused connection, the server had closed it).
  Result<HttpResponse> Exchange(Connection& connection,
                                const http::request<http::string_body>& request,
                                Clock::time_point deadline, uint64_t max_body_bytes, bool* answered,
                                bool* keep_alive) const {
    *answered = false;
    asio::io_context& io = connection.io;
    const std::string what =
        request.method_string().to_string() + " " + endpoint.origin + request.target().to_string();
    boost::system::error_code ec;
    bool done = false;
    connection.With([&](auto& stream) {
      http::async_write(stream, request, [&](const boost::system::error_code& e, size_t) {
        ec = e;
        done = true;
      });
    });
    Outcome outcome = Run(io, done, deadline, nullptr, [&] { connection.Close(); });
    if (ec || outcome != Outcome::kDone) return Failed(what, ec, outcome);
    http::response_parser<http::string_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    // Enforced as the body arrives (chunked, or up to the end of the stream) and at once from
    // its Content-Length: a larger answer is never buffered.
    parser.body_limit(max_body_bytes);
    // The header alone first: Beast 1.74's eager parse of a header and body that arrive in one
    // read drops the Content-Length's body_limit error and reads the whole body.
    size_t received = 0;
    auto read = [&](auto&& start) {
      done = false;
      connection.With([&](auto& stream) {
        start(stream, [&](const boost::system::error_code& e, size_t n) {
          ec = e;
          received += n;
          done = true;
        });
      });
      return Run(io, done, deadline, nullptr, [&] { connection.Close(); });
    };
    outcome = read([&](auto& stream, auto&& handler) {
      http::async_read_header(stream, connection.buffer, parser, handler);
    });
    if (!ec && outcome == Outcome::kDone && parser.content_length() &&
        *parser.content_length() > max_body_bytes) {
      ec = http::error::body_limit;
    }
    if (!ec && outcome == Outcome::kDone && !parser.is_done()) {
      outcome = read([&](auto& stream, auto&& handler) {
        http::async_read(stream, connection.buffer, parser, handler);
      });
    }
    *answered = received > 0 || parser.got_some();
    if (ec || outcome != Outcome::kDone) return Failed(what, ec, outcome, max_body_bytes);
    auto& message = parser.get();
    HttpResponse response;
    response.status = static_cast<int>(message.result_int());
    for (const auto& field : message)
      response.headers[Lower(field.name_string().to_string())] = field.value().to_string();
    response.body = std::move(message.body());
    *keep_alive = message.keep_alive();
    return response;
  }
};

HttpTransport::HttpTransport(std::unique_ptr<State> state) : state_(std::move(state)) {}
HttpTransport::~HttpTransport() = default;

Result<std::unique_ptr<HttpTransport>> HttpTransport::Create(const ClientConfig& config) {
  auto endpoint = ParseServer(config);
  if (!endpoint) return endpoint.error();
  auto state = std::make_unique<State>();
  state->config = config;
  state->endpoint = std::move(*endpoint);
  return std::unique_ptr<HttpTransport>(new HttpTransport(std::move(state)));
}

const std::string& HttpTransport::origin() const {
  return state_->endpoint.origin;
}

Result<HttpResponse> HttpTransport::Send(const HttpRequest& request,
                                         std::chrono::milliseconds timeout,
                                         uint64_t max_body_bytes) {
  State& s = *state_;
  const auto deadline = Clock::now() + timeout;
  const auto message = s.Build(request);
  for (;;) {
    std::unique_ptr<Connection> connection;
    {
      std::lock_guard lock(s.mu);
      if (!s.idle.empty()) {
        connection = std::move(s.idle.back());
        s.idle.pop_back();
      }
    }
    const bool reused = connection != nullptr;
    if (!connection) {
      auto connected = s.Connect(deadline);
      if (!connected) return connected.error();
      connection = std::move(*connected);
    }
    bool answered = false, keep_alive = false;
    auto response =
        s.Exchange(*connection, message, deadline, max_body_bytes, &answered, &keep_alive);
    if (response) {
      if (keep_alive) {
        std::lock_guard lock(s.mu);
        if (s.idle.size() < kMaxIdleConnections) s.idle.push_back(std::move(connection));
      }
      return response;
    }
    // No byte of an answer on a reused connection: the server (or a load balancer) closed it
    // while idle, so once more on a new one, as HTTP clients do. Anything else (an answer cut
    // off, a timeout) is the caller's to retry or not.
    if (!reused || answered || Clock::now() >= deadline) return response.error();
  }
}

Result<int> HttpTransport::Stream(const HttpRequest& request,
                                  const std::function<bool(std::string_view)>& on_data,
                                  const std::atomic<bool>* stop, std::string* error_body) {
  const State& s = *state_;
  // A connection of its own: a watch runs for minutes, often beside other requests.
  const auto setup_deadline = Clock::now() + kStreamSetupTimeout;
  auto connected = s.Connect(setup_deadline);
  if (!connected) return connected.error();
  Connection& connection = **connected;
  asio::io_context& io = connection.io;
  const auto message = s.Build(request);
  const std::string what = request.method + " " + s.endpoint.origin + message.target().to_string();
  boost::system::error_code ec;
  bool done = false;
  auto cancel = [&] { connection.Close(); };
  connection.With([&](auto& stream) {
    http::async_write(stream, message, [&](const boost::system::error_code& e, size_t) {
      ec = e;
      done = true;
    });
  });
  Outcome outcome = Run(io, done, setup_deadline, stop, cancel);
  if (outcome == Outcome::kStopped) return 0;
  if (ec || outcome != Outcome::kDone) return State::Failed(what, ec, outcome);

  http::response_parser<http::buffer_body> parser;
  parser.header_limit(kMaxHeaderBytes);
  parser.body_limit(boost::none);  // a watch is endless; each piece is bounded by `piece`
  done = false;
  connection.With([&](auto& stream) {
    http::async_read_header(stream, connection.buffer, parser,
                            [&](const boost::system::error_code& e, size_t) {
                              ec = e;
                              done = true;
                            });
  });
  outcome = Run(io, done, setup_deadline, stop, cancel);
  if (outcome == Outcome::kStopped) return 0;
  if (ec || outcome != Outcome::kDone) return State::Failed(what, ec, outcome);
  const int status = static_cast<int>(parser.get().result_int());
  const bool success = status >= 200 && status < 300;

  char piece[16384];
  while (!parser.is_done()) {
    parser.get().body().data = piece;
    parser.get().body().size = sizeof piece;
    done = false;
    connection.With([&](auto& stream) {
      http::async_read(stream, connection.buffer, parser,
                       [&](const boost::system::error_code& e, size_t) {
                         ec = e;
                         done = true;
                       });
    });
    // The error body of a refused watch is small and comes at once; bound its wait as well.
    outcome = Run(io, done, success ? std::nullopt : std::optional(setup_deadline), stop, cancel);
    if (ec == http::error::need_buffer) ec = {};
    const size_t n = sizeof piece - parser.get().body().size;
    if (n > 0) {
      if (success) {
        if (!on_data(std::string_view(piece, n))) return status;
      } else if (error_body && error_body->size() < kMaxErrorBodyBytes) {
        error_body->append(piece, std::min(n, kMaxErrorBodyBytes - error_body->size()));
      }
    }
    if (outcome == Outcome::kStopped) return status;
    if (ec || outcome != Outcome::kDone) {
      if (!success) return status;
      // The server ending a watch without a clean end of body is still the end of that watch.
      if (ec == http::error::partial_message || ec == http::error::end_of_stream ||
          ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) {
        return status;
      }
      return State::Failed(what, ec, outcome);
    }
  }
  return status;
}

}  // namespace tessera::k8s
