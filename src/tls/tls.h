// TLS for tessera's HTTP endpoints, on OpenSSL: a server identity read from PEM files and re-read
// when they change (rotation without a restart), and a verifying client context.
//
// Policy, the same on both sides: TLS 1.2 at least (1.3 is negotiated whenever the peer has it),
// TLS 1.2 only with ECDHE key exchange and AEAD ciphers, no compression, no renegotiation.
// Contexts are shared (std::shared_ptr<SSL_CTX>): a connection's SSL holds its own reference, so
// a context swapped out by a rotation lives on for the connections made with it.
//
// With Boost.Asio (async or blocking): per accepted socket, take ServerContextSource::Current(),
// SSL_CTX_up_ref it and hand it to a boost::asio::ssl::context (which adopts one reference and
// frees it when it goes); construct the ssl::stream from that context (its SSL holds a reference
// of its own), then let the asio context go. src/api/server.cc does so.
#pragma once

#include <openssl/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace tessera::tls {

using ContextPtr = std::shared_ptr<SSL_CTX>;

// ---- Parsing (pure: PEM bytes in, a context or an error out) ----

// The PEM text of a server identity: the certificate (then its chain), its private key
// (unencrypted), and optionally the CAs whose client certificates are accepted. With client_ca
// set (even to an empty text, which is refused), a client must present a certificate that one of
// them signed.
struct ServerPem {
  std::string cert;
  std::string key;
  std::optional<std::string> client_ca;
};

// A server context. Errors say which input was bad ("certificate: ...", "key: ...",
// "client CA: ...", "key: does not match the certificate") without quoting key material.
Result<ContextPtr> BuildServerContext(const ServerPem& pem);

// The serial number (upper-case hex) of the first certificate of `cert_pem`.
Result<std::string> CertificateSerial(std::string_view cert_pem);

// ---- Server files, re-read when they change ----

// The files and the flags that named them (for messages): "--tls-cert", "--tls-key",
// "--tls-client-ca". client_ca empty: no client certificates asked for.
struct ServerFiles {
  std::string cert;
  std::string key;
  std::string client_ca;
  std::string flag_prefix = "--tls-";  // + "cert", "key", "client-ca"
};

// Reads the files (bounded: common/bounded_file.h) into PEM text. A key file that others may
// read is refused; one its group may read is allowed with `warning` set (a Kubernetes Secret
// mounted for an fsGroup is such a file). Errors name the flag and the path.
Result<ServerPem> ReadServerFiles(const ServerFiles& files, std::string* warning = nullptr);

// The context new connections get. Current() looks at the files again when the last look is at
// least `poll` old (a stat of each: device, inode, size, modification time), and when any
// changed builds a new context from them and swaps it in. A change that does not build (a
// half-written file, a key that does not match) is logged and the previous context kept; the
// next change is tried again. Thread-safe.
class ServerContextSource {
 public:
  // Refuses (naming the flag and file) when the files do not make a context.
  static Result<std::unique_ptr<ServerContextSource>> Open(
      ServerFiles files, std::chrono::milliseconds poll = std::chrono::seconds(1));

  ContextPtr Current();
  // How many contexts were built (1 after Open); for tests and logs.
  uint64_t generation() const;

 private:
  struct Stamp {
    uint64_t device = 0, inode = 0, size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  struct Stamps {
    Stamp cert, key, client_ca;
    bool operator==(const Stamps&) const = default;
  };
  ServerContextSource(ServerFiles files, std::chrono::milliseconds poll)
      : files_(std::move(files)), poll_(poll) {}
  Stamps Look() const;
  void Reload(const Stamps& seen);

  const ServerFiles files_;
  const std::chrono::milliseconds poll_;
  mutable std::mutex mu_;  // guards everything below
  ContextPtr current_;
  Stamps tried_;  // the files as last built from (or tried)
  std::chrono::steady_clock::time_point looked_{};
  uint64_t generation_ = 0;
};

// ---- Client ----

// A client's trust and identity. ca_file empty: the system's roots. cert_file and key_file
// (both or neither): a client certificate for servers that ask for one.
struct ClientFiles {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};
Result<ContextPtr> BuildClientContext(const ClientFiles& files);

// For one connection to `host` (a DNS name, or an IPv4/IPv6 address without brackets): SNI for a
// name, and verification that the certificate names this host (its DNS name or IP address).
Status PrepareClientConnection(SSL* ssl, const std::string& host);

// The OpenSSL error queue as one line (emptied), or `fallback` when it is empty.
std::string TakeOpenSslErrors(std::string_view fallback = "unknown TLS error");

}  // namespace tessera::tls
