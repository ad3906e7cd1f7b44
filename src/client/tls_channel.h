// HTTPS for the light client: OpenSSL on the connection's socket, loaded with dlopen the first
// time an https:// server is called. `tessera` runs on hot paths (node boot, hooks) where loading
// libssl and libcrypto at every start would cost ~4 ms; only `run` and `top` against an https://
// server pay it. Policy as the tls module's: TLS 1.2 at least, ECDHE+AEAD for 1.2, the server's
// certificate verified against --ca-file or the system roots, and checked to name the host.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/error.h"

namespace tessera::client {

struct TlsOptions {
  std::string ca_file;    // empty: the system's roots
  std::string cert_file;  // with key_file: a client certificate, for servers that ask
  std::string key_file;
};

class TlsChannel {
 public:
  // Handshakes on the connected socket `fd` (not owned) with the server `host` (a DNS name: SNI
  // and a name check; an IP address: an address check).
  static Result<std::unique_ptr<TlsChannel>> Open(int fd, const std::string& host,
                                                  const TlsOptions& options);
  ~TlsChannel();
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  // All of `data`, or an error.
  Status Send(const char* data, size_t size);
  // Up to `size` bytes; 0 when the server closed the connection.
  Result<size_t> Receive(char* data, size_t size);

 private:
  struct State;
  explicit TlsChannel(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tessera::client
