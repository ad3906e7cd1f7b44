// Reading a response with Boost.Beast's parser (http_response.h).
#include "client/http_response.h"

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cctype>
#include <string>

namespace tessera::client {
namespace http = boost::beast::http;

struct ResponseReader::Parser {
  http::response_parser<http::string_body> parser;
  std::string pending;  // bytes the parser has not consumed yet (a header line cut in two)
};

ResponseReader::ResponseReader() : parser_(std::make_unique<Parser>()) {
  parser_->parser.header_limit(kMaxResponseHeaderBytes);
  parser_->parser.body_limit(kMaxResponseBodyBytes);
  parser_->parser.eager(true);
}

ResponseReader::~ResponseReader() = default;

Status ResponseReader::Feed(std::string_view bytes) {
  auto& parser = parser_->parser;
  auto& pending = parser_->pending;
  if (parser.is_done()) return Ok();
  pending.append(bytes);
  size_t at = 0;
  while (at < pending.size() && !parser.is_done()) {
    boost::system::error_code error;
    const size_t used =
        parser.put(boost::asio::buffer(pending.data() + at, pending.size() - at), error);
    at += used;
    if (error == http::error::need_more) break;  // the rest waits for more bytes
    if (error)
      return Unavailable("the server's answer is not an HTTP/1.1 response within bounds (" +
                         error.message() + ")");
    if (used == 0) break;
  }
  pending.erase(0, at);
  // Unconsumed bytes only ever hold a partial header line; the parser's header limit bounds the
  // header, and this bounds a line it has not seen the end of yet.
  if (!parser.is_header_done() && pending.size() > kMaxResponseHeaderBytes)
    return Unavailable("the server's answer has a header over " +
                       std::to_string(kMaxResponseHeaderBytes) + " bytes");
  return Ok();
}

Status ResponseReader::Finish() {
  // Beast calls a message complete at the end of input even when none came (a default 200):
  // a connection closed before a whole header is no answer at all.
  if (!parser_->parser.is_header_done()) return Unavailable("connection closed before a response");
  boost::system::error_code error;
  parser_->parser.put_eof(error);
  if (error) return Unavailable("connection closed before a full response");
  return Ok();
}

bool ResponseReader::done() const {
  return parser_->parser.is_done();
}

bool ResponseReader::closes() const {
  return !parser_->parser.get().keep_alive();
}

Response ResponseReader::Take() {
  auto message = parser_->parser.release();
  Response response;
  response.status = static_cast<int>(message.result_int());
  for (const auto& field : message) {
    std::string name(field.name_string());
    for (auto& c : name)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    response.headers[name] = std::string(field.value());
  }
  response.body = std::move(message.body());
  return response;
}

}  // namespace tessera::client
