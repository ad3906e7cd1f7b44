// A server context from PEM text: the identity, the protocol policy, and client verification
// when a client CA is given.
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/x509.h>

#include "tls/pem.h"
#include "tls/tls.h"

namespace tessera::tls {
namespace {

// Client certificates: the CA list sent in the CertificateRequest, and verification that fails
// the handshake when the client sends none or one no given CA signed.
Status RequireClientCertificates(SSL_CTX* ctx, const std::vector<CertPtr>& cas) {
  if (auto status = TrustCertificates(ctx, cas, "client CA"); !status) return status;
  STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
  if (!names) return Internal("client CA: out of memory");
  for (const auto& ca : cas) {
    X509_NAME* name = X509_NAME_dup(X509_get_subject_name(ca.get()));
    if (!name || sk_X509_NAME_push(names, name) == 0) {
      X509_NAME_free(name);
      sk_X509_NAME_pop_free(names, X509_NAME_free);
      return Internal("client CA: out of memory");
    }
  }
  SSL_CTX_set_client_CA_list(ctx, names);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // Session resumption with client verification needs an ID context (else resumption fails).
  static const unsigned char kSessionContext[] = "tessera";
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof(kSessionContext) - 1);
  return Ok();
}

}  // namespace

Result<ContextPtr> BuildServerContext(const ServerPem& pem) {
  auto certs = ParseCertificates(pem.cert, "certificate");
  if (!certs) return certs.error();
  auto key = ParsePrivateKey(pem.key, "key");
  if (!key) return key.error();
  auto ctx = NewContext(TLS_server_method());
  if (!ctx) return ctx.error();
  if (auto status = ApplyProtocolPolicy(ctx->get()); !status) return status.error();
  if (auto status = UseIdentity(ctx->get(), *certs, *key); !status) return status.error();
  if (pem.client_ca) {
    auto cas = ParseCertificates(*pem.client_ca, "client CA");
    if (!cas) return cas.error();
    if (auto status = RequireClientCertificates(ctx->get(), *cas); !status) return status.error();
  }
  return *ctx;
}

Result<std::string> CertificateSerial(std::string_view cert_pem) {
  auto certs = ParseCertificates(cert_pem, "certificate");
  if (!certs) return certs.error();
  BIGNUM* number = ASN1_INTEGER_to_BN(X509_get0_serialNumber(certs->front().get()), nullptr);
  char* hex = number ? BN_bn2hex(number) : nullptr;
  std::string serial = hex ? hex : "";
  OPENSSL_free(hex);
  BN_free(number);
  if (serial.empty()) return Internal("certificate: serial number: " + TakeOpenSslErrors());
  return serial;
}

}  // namespace tessera::tls
