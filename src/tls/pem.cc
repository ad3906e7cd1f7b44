#include "tls/pem.h"

#include <openssl/err.h>
#include <openssl/pem.h>

#include "common/untrusted_text.h"
#include "tls/tls.h"

namespace tessera::tls {
namespace {

// Mozilla's "intermediate" TLS 1.2 list without the finite-field DHE suites: forward secrecy by
// ECDHE, authenticated encryption only. TLS 1.3's suites (all AEAD) are OpenSSL's defaults.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};

std::unique_ptr<BIO, BioFree> MemoryBio(std::string_view bytes) {
  return std::unique_ptr<BIO, BioFree>(
      BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

// PEM_read_bio_* end a clean input with "no start line"; anything else queued is a real fault.
bool OnlyNoStartLine() {
  const unsigned long error = ERR_peek_last_error();
  return ERR_GET_LIB(error) == ERR_LIB_PEM && ERR_GET_REASON(error) == PEM_R_NO_START_LINE;
}

// Never prompts: an encrypted key fails instead of waiting on a terminal.
int NoPassphrase(char*, int, int, void*) {
  return 0;
}

}  // namespace

std::string TakeOpenSslErrors(std::string_view fallback) {
  std::string text;
  while (const unsigned long error = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(error, buffer, sizeof(buffer));
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text.empty() ? std::string(fallback) : text;
}

Result<std::vector<CertPtr>> ParseCertificates(std::string_view pem, std::string_view what) {
  ERR_clear_error();
  auto bio = MemoryBio(pem);
  if (!bio) return Internal(std::string(what) + ": " + TakeOpenSslErrors());
  std::vector<CertPtr> certs;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr))
    certs.emplace_back(cert);
  if (!OnlyNoStartLine() || certs.empty()) {
    const std::string reason = certs.empty() && OnlyNoStartLine()
                                   ? "no PEM certificate in it"
                                   : "not a valid PEM certificate (" + TakeOpenSslErrors() + ")";
    ERR_clear_error();
    return InvalidArgument(std::string(what) + ": " + reason + " (starts \"" +
                           Excerpt(pem.substr(0, 40), 40) + "\")");
  }
  ERR_clear_error();
  return certs;
}

Result<KeyPtr> ParsePrivateKey(std::string_view pem, std::string_view what) {
  ERR_clear_error();
  auto bio = MemoryBio(pem);
  if (!bio) return Internal(std::string(what) + ": " + TakeOpenSslErrors());
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (!key) {
    // The key's own bytes are never quoted; OpenSSL's reasons name no content. OpenSSL 3's
    // decoders report a text without any PEM block as "unsupported": look for one ourselves.
    const bool none = OnlyNoStartLine() || pem.find("-----BEGIN ") == std::string_view::npos;
    const std::string reason = none ? "no PEM private key in it"
                                    : "not a usable PEM private key (an encrypted key is not "
                                      "supported; " +
                                          TakeOpenSslErrors() + ")";
    ERR_clear_error();
    return InvalidArgument(std::string(what) + ": " + reason);
  }
  ERR_clear_error();
  return key;
}

Status ApplyProtocolPolicy(SSL_CTX* ctx) {
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_cipher_list(ctx, kTls12Ciphers) != 1)
    return Internal("TLS policy: " + TakeOpenSslErrors());
  SSL_CTX_set_options(
      ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  return Ok();
}

Result<std::shared_ptr<SSL_CTX>> NewContext(const SSL_METHOD* method) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(method);
  if (!ctx) return Internal("TLS context: " + TakeOpenSslErrors());
  return std::shared_ptr<SSL_CTX>(ctx, SSL_CTX_free);
}

Status UseIdentity(SSL_CTX* ctx, std::vector<CertPtr>& certs, KeyPtr& key) {
  ERR_clear_error();
  if (SSL_CTX_use_certificate(ctx, certs.front().get()) != 1)
    return InvalidArgument("certificate: " + TakeOpenSslErrors());
  for (size_t i = 1; i < certs.size(); ++i)
    if (SSL_CTX_add1_chain_cert(ctx, certs[i].get()) != 1)
      return InvalidArgument("certificate chain: " + TakeOpenSslErrors());
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    ERR_clear_error();
    return InvalidArgument("key: does not match the certificate");
  }
  return Ok();
}

Status TrustCertificates(SSL_CTX* ctx, const std::vector<CertPtr>& certs, std::string_view what) {
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  for (const auto& cert : certs) {
    if (X509_STORE_add_cert(store, cert.get()) != 1) {
      // The same CA twice in a bundle is harmless.
      const unsigned long error = ERR_peek_last_error();
      if (ERR_GET_REASON(error) == X509_R_CERT_ALREADY_IN_HASH_TABLE) {
        ERR_clear_error();
        continue;
      }
      return InvalidArgument(std::string(what) + ": " + TakeOpenSslErrors());
    }
  }
  return Ok();
}

}  // namespace tessera::tls
