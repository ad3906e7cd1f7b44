#include "client/tls_channel.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <mutex>

#include "common/bounded_file.h"

namespace tessera::client {
// Named rather than anonymous: the types below are members of a class with linkage, which
// -Wsubobject-linkage rejects for anonymous types once unity builds include this file.
namespace tls_channel_detail {

// The OpenSSL 3 entry points the client uses, looked up in libssl.so.3 (its dependency
// libcrypto.so.3 answers the crypto ones). Typed from the headers, so a signature mismatch is a
// compile error, not a crash.
#define TESSERA_OPENSSL_FUNCTIONS(X)                                                               \
  X(TLS_client_method)                                                                             \
  X(SSL_CTX_new)                                                                                   \
  X(SSL_CTX_free)                                                                                  \
  X(SSL_CTX_ctrl)                                                                                  \
  X(SSL_CTX_set_cipher_list) X(SSL_CTX_set_options) X(SSL_CTX_set_verify)                          \
      X(SSL_CTX_set_default_verify_paths) X(SSL_CTX_get_cert_store) X(SSL_CTX_use_certificate)     \
          X(SSL_CTX_use_PrivateKey) X(SSL_CTX_check_private_key) X(SSL_new) X(SSL_free)            \
              X(SSL_set_fd) X(SSL_ctrl) X(SSL_set1_host) X(SSL_get0_param) X(SSL_connect)          \
                  X(SSL_read) X(SSL_write) X(SSL_get_error) X(SSL_shutdown)                        \
                      X(SSL_get_verify_result) X(BIO_new_mem_buf) X(BIO_free) X(PEM_read_bio_X509) \
                          X(PEM_read_bio_PrivateKey) X(X509_free) X(EVP_PKEY_free)                 \
                              X(X509_STORE_add_cert) X(X509_VERIFY_PARAM_set1_ip_asc)              \
                                  X(X509_verify_cert_error_string) X(ERR_get_error)                \
                                      X(ERR_error_string_n) X(ERR_clear_error)

struct OpenSsl {
#define TESSERA_OPENSSL_MEMBER(name) decltype(&::name) name = nullptr;
  TESSERA_OPENSSL_FUNCTIONS(TESSERA_OPENSSL_MEMBER)
#undef TESSERA_OPENSSL_MEMBER
};

Result<const OpenSsl*> LoadOpenSsl() {
  static std::once_flag once;
  static OpenSsl table;
  static std::string failure;
  std::call_once(once, [] {
    void* library = ::dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      failure = std::string("HTTPS needs OpenSSL 3 (libssl3): ") + ::dlerror();
      return;
    }
#define TESSERA_OPENSSL_LOOKUP(name)                                         \
  table.name = reinterpret_cast<decltype(&::name)>(::dlsym(library, #name)); \
  if (!table.name && failure.empty()) failure = "libssl.so.3: no symbol " #name;
    TESSERA_OPENSSL_FUNCTIONS(TESSERA_OPENSSL_LOOKUP)
#undef TESSERA_OPENSSL_LOOKUP
  });
  if (!failure.empty()) return Unavailable(failure);
  return &table;
}

// The tls module's TLS 1.2 list (ECDHE, AEAD only).
constexpr const char* kClientCiphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

int NoPassphrase(char*, int, int, void*) {
  return 0;
}

std::string Errors(const OpenSsl& ssl) {
  std::string text;
  while (unsigned long error = ssl.ERR_get_error()) {
    char buffer[256];
    ssl.ERR_error_string_n(error, buffer, sizeof(buffer));
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text.empty() ? "TLS error" : text;
}

Result<std::string> ReadPem(const char* flag, const std::string& path) {
  auto text = ReadBoundedFile(path, kMaxPemFileBytes);
  if (!text) return text.error().WithContext(flag);
  return *text;
}

}  // namespace tls_channel_detail
using namespace tls_channel_detail;

struct TlsChannel::State {
  const OpenSsl* ssl = nullptr;
  SSL_CTX* ctx = nullptr;
  SSL* connection = nullptr;
  ~State() {
    if (connection) ssl->SSL_free(connection);
    if (ctx) ssl->SSL_CTX_free(ctx);
  }
};

namespace {

// The CA file's certificates as the only roots trusted.
Status TrustCaFile(const OpenSsl& ssl, SSL_CTX* ctx, const std::string& path) {
  auto pem = ReadPem("--ca-file", path);
  if (!pem) return pem.error();
  BIO* bio = ssl.BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size()));
  int added = 0;
  while (X509* cert = ssl.PEM_read_bio_X509(bio, nullptr, NoPassphrase, nullptr)) {
    added += ssl.X509_STORE_add_cert(ssl.SSL_CTX_get_cert_store(ctx), cert) == 1;
    ssl.X509_free(cert);
  }
  ssl.BIO_free(bio);
  ssl.ERR_clear_error();
  if (added == 0) return InvalidArgument("--ca-file " + path + ": no PEM certificate in it");
  return Ok();
}

Status UseClientCertificate(const OpenSsl& ssl, SSL_CTX* ctx, const TlsOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty())
    return InvalidArgument("--client-cert and --client-key: give both or neither");
  if (options.cert_file.empty()) return Ok();
  auto cert_pem = ReadPem("--client-cert", options.cert_file);
  if (!cert_pem) return cert_pem.error();
  auto key_pem = ReadPem("--client-key", options.key_file);
  if (!key_pem) return key_pem.error();
  BIO* bio = ssl.BIO_new_mem_buf(cert_pem->data(), static_cast<int>(cert_pem->size()));
  X509* cert = ssl.PEM_read_bio_X509(bio, nullptr, NoPassphrase, nullptr);
  ssl.BIO_free(bio);
  bio = ssl.BIO_new_mem_buf(key_pem->data(), static_cast<int>(key_pem->size()));
  EVP_PKEY* key = ssl.PEM_read_bio_PrivateKey(bio, nullptr, NoPassphrase, nullptr);
  ssl.BIO_free(bio);
  const bool ok = cert && key && ssl.SSL_CTX_use_certificate(ctx, cert) == 1 &&
                  ssl.SSL_CTX_use_PrivateKey(ctx, key) == 1 &&
                  ssl.SSL_CTX_check_private_key(ctx) == 1;
  if (cert) ssl.X509_free(cert);
  if (key) ssl.EVP_PKEY_free(key);
  ssl.ERR_clear_error();
  if (!ok)
    return InvalidArgument("--client-cert " + options.cert_file + " and --client-key " +
                           options.key_file + ": not a PEM certificate and its unencrypted key");
  return Ok();
}

Status Configure(const OpenSsl& ssl, SSL_CTX* ctx, const TlsOptions& options) {
  ssl.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, nullptr);
  ssl.SSL_CTX_set_cipher_list(ctx, kClientCiphers);
  ssl.SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  ssl.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (options.ca_file.empty()) {
    if (ssl.SSL_CTX_set_default_verify_paths(ctx) != 1)
      return Unavailable("system CA roots: " + Errors(ssl));
  } else if (auto status = TrustCaFile(ssl, ctx, options.ca_file); !status) {
    return status;
  }
  return UseClientCertificate(ssl, ctx, options);
}

// SNI for a name (RFC 6066 allows no address there), and the certificate checked to name the
// host dialled.
Status NameTheServer(const OpenSsl& ssl, SSL* connection, const std::string& host) {
  in6_addr address{};
  const bool is_ip = ::inet_pton(AF_INET, host.c_str(), &address) == 1 ||
                     ::inet_pton(AF_INET6, host.c_str(), &address) == 1;
  const bool ok =
      is_ip ? ssl.X509_VERIFY_PARAM_set1_ip_asc(ssl.SSL_get0_param(connection), host.c_str()) == 1
            : ssl.SSL_ctrl(connection, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                           const_cast<char*>(host.c_str())) == 1 &&
                  ssl.SSL_set1_host(connection, host.c_str()) == 1;
  if (!ok) return InvalidArgument("TLS server name " + host + ": " + Errors(ssl));
  return Ok();
}

}  // namespace

TlsChannel::TlsChannel(std::unique_ptr<State> state) : state_(std::move(state)) {}

TlsChannel::~TlsChannel() {
  // close_notify, best effort: the socket is closed right after.
  if (state_->connection) state_->ssl->SSL_shutdown(state_->connection);
}

Result<std::unique_ptr<TlsChannel>> TlsChannel::Open(int fd, const std::string& host,
                                                     const TlsOptions& options) {
  auto loaded = LoadOpenSsl();
  if (!loaded) return loaded.error();
  const OpenSsl& ssl = **loaded;
  ssl.ERR_clear_error();
  auto state = std::make_unique<State>();
  state->ssl = &ssl;
  state->ctx = ssl.SSL_CTX_new(ssl.TLS_client_method());
  if (!state->ctx) return Internal("TLS context: " + Errors(ssl));
  if (auto status = Configure(ssl, state->ctx, options); !status) return status.error();
  state->connection = ssl.SSL_new(state->ctx);
  if (!state->connection || ssl.SSL_set_fd(state->connection, fd) != 1)
    return Internal("TLS connection: " + Errors(ssl));
  if (auto status = NameTheServer(ssl, state->connection, host); !status) return status.error();
  if (ssl.SSL_connect(state->connection) != 1) {
    const long verify = ssl.SSL_get_verify_result(state->connection);
    std::string reason = verify != X509_V_OK ? std::string("certificate not trusted: ") +
                                                   ssl.X509_verify_cert_error_string(verify)
                                             : Errors(ssl);
    ssl.ERR_clear_error();
    ssl.SSL_free(state->connection);
    state->connection = nullptr;
    return Unavailable("TLS handshake with " + host + ": " + reason);
  }
  return std::unique_ptr<TlsChannel>(new TlsChannel(std::move(state)));
}

Status TlsChannel::Send(const char* data, size_t size) {
  const OpenSsl& ssl = *state_->ssl;
  size_t sent = 0;
  while (sent < size) {
    const int n = ssl.SSL_write(state_->connection, data + sent, static_cast<int>(size - sent));
    if (n <= 0) return Unavailable("TLS send: " + Errors(ssl));
    sent += static_cast<size_t>(n);
  }
  return Ok();
}

Result<size_t> TlsChannel::Receive(char* data, size_t size) {
  const OpenSsl& ssl = *state_->ssl;
  const int n = ssl.SSL_read(state_->connection, data, static_cast<int>(size));
  if (n > 0) return static_cast<size_t>(n);
  const int error = ssl.SSL_get_error(state_->connection, n);
  // A close_notify, or a close without one (the answer's length is known from its header).
  if (error == SSL_ERROR_ZERO_RETURN || error == SSL_ERROR_SYSCALL) {
    ssl.ERR_clear_error();
    return size_t{0};
  }
  // An alert: with TLS 1.3 a server refusing our certificate says so only now.
  return Unavailable("TLS receive: " + Errors(ssl));
}

}  // namespace tessera::client
