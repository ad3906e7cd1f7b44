// The API's listener: its certificate loaded and its port bound before anything else is made,
// read, placed or started (a port still held must not cost the containers of the store).
#include "tls/tls.h"
#include "wiring.h"

namespace tessera::serve_program {

Listener BindListener(const ServeFlags& flags) {
  auto listen = api::ParseListen(flags.listen);
  if (!listen) Die(listen.error());
  // The certificate is loaded before anything is made: a file that does not load is a refusal.
  std::shared_ptr<tls::ServerContextSource> tls_source;
  if (!flags.tls.cert.empty()) {
    auto opened = tls::ServerContextSource::Open(
        {Absolute(flags.tls.cert), Absolute(flags.tls.key),
         flags.tls.client_ca.empty() ? "" : Absolute(flags.tls.client_ca)});
    if (!opened) Die(opened.error());
    tls_source = std::move(*opened);
  }
  // Nothing is accepted before Run; until then connections wait in the backlog.
  api::ServerOptions server_options;
  server_options.host = listen->first;
  server_options.port = listen->second;
  server_options.io_threads = flags.io_threads;
  server_options.max_connections = flags.max_connections;
  server_options.tls = tls_source;
  server_options.metrics_aggregate_public = flags.metrics_aggregate_public;
  auto server = api::Server::Create(server_options);
  if (!server) Die(server.error());
  return {std::move(*server), listen->first, tls_source != nullptr};
}

}  // namespace tessera::serve_program
