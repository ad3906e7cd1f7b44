// The answer to one request of the node agent's endpoint. Authentication comes before any work:
// the handler (which renders /metrics under the agent's lock) runs only for a caller that
// showed the token or asked for an open path.
#include "telemetry/endpoint_http.h"

#include <algorithm>

namespace tessera::telemetry {

void LimitEndpointParser(EndpointRequestParser& parser) {
  parser.header_limit(kEndpointMaxHeader);
  parser.body_limit(0);
}

namespace {

EndpointReply Refusal(endpoint_http::status status, std::string_view body) {
  EndpointReply reply;
  reply.result(status);
  reply.set(endpoint_http::field::content_type, "text/plain");
  reply.body() = std::string(body);
  return reply;
}

std::string_view AuthorizationOf(const EndpointRequest& request) {
  const auto value = request[endpoint_http::field::authorization];
  return {value.data(), value.size()};
}

}  // namespace

EndpointReply AnswerEndpointRequest(const EndpointRequest& request, TokenFile* token,
                                    const std::vector<std::string>& open_paths,
                                    const EndpointHandler& handler) {
  const bool head = request.method() == endpoint_http::verb::head;
  EndpointReply reply;
  std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (request.method() != endpoint_http::verb::get && !head) {
    reply = Refusal(endpoint_http::status::method_not_allowed, "method not allowed\n");
    reply.set(endpoint_http::field::allow, "GET, HEAD");
  } else if (token && std::find(open_paths.begin(), open_paths.end(), path) == open_paths.end() &&
             !token->Accepts(AuthorizationOf(request))) {
    reply = Refusal(endpoint_http::status::unauthorized, "a bearer token is needed\n");
    reply.set(endpoint_http::field::www_authenticate, "Bearer");
  } else {
    EndpointResponse answer = handler(path);
    reply.result(static_cast<endpoint_http::status>(answer.status));
    reply.set(endpoint_http::field::content_type, answer.content_type);
    reply.body() = std::move(answer.body);
  }
  reply.version(11);
  reply.keep_alive(false);
  if (head) reply.body().clear();
  reply.prepare_payload();
  return reply;
}

}  // namespace tessera::telemetry
