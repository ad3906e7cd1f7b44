// HTTP readiness probes over Boost.Beast (see http_probe.h).
#include "serve/http_probe.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <memory>

#include "common/asio_cloexec.h"

namespace tessera::serve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// An answer bounded in every part: the status line and headers, and the body (read only so the
// parser can finish; its content does not count).
constexpr uint32_t kMaxHeaderBytes = 8 * 1024;
constexpr uint64_t kMaxBodyBytes = 4 * 1024;

struct ProbeSession : std::enable_shared_from_this<ProbeSession> {
  ProbeSession(asio::io_context& io, const HttpProbeTarget& target, std::vector<bool>& verdicts,
               size_t index)
      : stream(io), target(target), verdicts(verdicts), index(index) {}

  void Run(std::chrono::milliseconds timeout) {
    beast::error_code ec;
    const auto address = asio::ip::make_address(target.address, ec);
    if (ec) return;
    request.method(http::verb::get);
    request.target(target.path);
    request.version(11);
    const bool v6 = address.is_v6();
    request.set(http::field::host, (v6 ? "[" + target.address + "]" : target.address) + ":" +
                                       std::to_string(target.port));
    request.set(http::field::user_agent, "tessera-readiness");
    request.set(http::field::connection, "close");
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(kMaxBodyBytes);
    stream.expires_after(timeout);
    // Opened close-on-exec here: async_connect would open it without the flag.
    if (OpenCloseOnExec(stream.socket(), v6 ? tcp::v6() : tcp::v4())) return;
    stream.async_connect(tcp::endpoint(address, static_cast<unsigned short>(target.port)),
                         [self = shared_from_this()](beast::error_code error) {
                           if (!error) self->Write();
                         });
  }

  void Write() {
    http::async_write(stream, request,
                      [self = shared_from_this()](beast::error_code error, size_t) {
                        if (!error) self->Read();
                      });
  }

  void Read() {
    // The header is enough: its status decides, whatever the body holds.
    http::async_read_header(stream, buffer, parser,
                            [self = shared_from_this()](beast::error_code error, size_t) {
                              if (error) return;
                              const unsigned status = self->parser.get().result_int();
                              self->verdicts[self->index] = status >= 200 && status < 400;
                              beast::error_code ignored;
                              self->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
                            });
  }

  beast::tcp_stream stream;
  const HttpProbeTarget& target;
  std::vector<bool>& verdicts;
  size_t index;
  beast::flat_buffer buffer{kMaxHeaderBytes};
  http::request<http::empty_body> request;
  http::response_parser<http::string_body> parser;
};

}  // namespace

std::vector<bool> ProbeHttp(const std::vector<HttpProbeTarget>& targets,
                            std::chrono::milliseconds timeout) {
  std::vector<bool> verdicts(targets.size(), false);
  asio::io_context io;
  for (size_t i = 0; i < targets.size(); ++i)
    std::make_shared<ProbeSession>(io, targets[i], verdicts, i)->Run(timeout);
  // Every operation of a session shares the stream's deadline, so this returns within about
  // `timeout`; the bound here is a second line of defence.
  io.run_for(timeout + std::chrono::seconds(1));
  return verdicts;
}

}  // namespace tessera::serve
