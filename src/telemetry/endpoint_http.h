// The node agent endpoint's HTTP side, apart from its sockets: the request parser's limits and
// the answer to one parsed request (method, token, then the handler). The server
// (http_endpoint.cc) and the fuzz target use exactly these.
#pragma once

#include <boost/beast/http.hpp>
#include <string>
#include <vector>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {

namespace endpoint_http = boost::beast::http;
using EndpointRequestParser = endpoint_http::request_parser<endpoint_http::empty_body>;
using EndpointRequest = endpoint_http::request<endpoint_http::empty_body>;
using EndpointReply = endpoint_http::response<endpoint_http::string_body>;

inline constexpr size_t kEndpointMaxHeader = 8192;

// An 8 KiB header and no body: a request with one is refused by the parser.
void LimitEndpointParser(EndpointRequestParser& parser);

// What the endpoint answers: 405 for a method other than GET and HEAD; 401 (with
// WWW-Authenticate: Bearer) when `token` is set, the path is not one of `open_paths` and the
// request's Authorization header does not carry the token; else the handler's answer (its body
// left out for HEAD). The handler sees only the path, the query removed.
EndpointReply AnswerEndpointRequest(const EndpointRequest& request, TokenFile* token,
                                    const std::vector<std::string>& open_paths,
                                    const EndpointHandler& handler);

}  // namespace tessera::telemetry
