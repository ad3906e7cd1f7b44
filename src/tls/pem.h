// Inside the tls module: PEM parsing into owned OpenSSL objects, and the protocol policy every
// context gets. Pure: bytes in, objects or errors out; nothing is read from disk here.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::tls {

struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using CertPtr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;

// Every certificate of `pem`, in order; at least one. `what` names the input in errors
// ("certificate: no PEM certificate in it").
Result<std::vector<CertPtr>> ParseCertificates(std::string_view pem, std::string_view what);

// The first private key of `pem`. An encrypted key is refused (nothing would type its
// passphrase); the message never quotes the key's bytes.
Result<KeyPtr> ParsePrivateKey(std::string_view pem, std::string_view what);

// TLS 1.2 minimum, ECDHE+AEAD ciphers for 1.2, no compression or renegotiation.
Status ApplyProtocolPolicy(SSL_CTX* ctx);

// A new context for `method`, owned.
Result<std::shared_ptr<SSL_CTX>> NewContext(const SSL_METHOD* method);

// Certificate `leaf` followed by `chain` as the context's identity, with `key`.
Status UseIdentity(SSL_CTX* ctx, std::vector<CertPtr>& certs, KeyPtr& key);

// Adds every certificate to the context's trust store.
Status TrustCertificates(SSL_CTX* ctx, const std::vector<CertPtr>& certs, std::string_view what);

}  // namespace tessera::tls
