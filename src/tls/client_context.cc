// A verifying client context: the server's certificate must chain to the given CA (or to the
// system's roots) and name the host that was dialled.
#include <arpa/inet.h>
#include <openssl/x509v3.h>

#include "common/bounded_file.h"
#include "tls/pem.h"
#include "tls/tls.h"

namespace tessera::tls {
namespace {

Result<std::string> ReadClientPem(std::string_view flag, const std::string& path) {
  auto text = ReadBoundedFile(path, kMaxPemFileBytes);
  if (!text) return text.error().WithContext(flag);
  return *text;
}

Status UseClientCertificate(SSL_CTX* ctx, const ClientFiles& files) {
  if (files.cert_file.empty() != files.key_file.empty())
    return InvalidArgument("--client-cert and --client-key: give both or neither");
  if (files.cert_file.empty()) return Ok();
  auto cert_pem = ReadClientPem("--client-cert", files.cert_file);
  if (!cert_pem) return cert_pem.error();
  auto key_pem = ReadClientPem("--client-key", files.key_file);
  if (!key_pem) return key_pem.error();
  auto certs = ParseCertificates(*cert_pem, "certificate");
  if (!certs) return certs.error().WithContext("--client-cert " + files.cert_file);
  auto key = ParsePrivateKey(*key_pem, "key");
  if (!key) return key.error().WithContext("--client-key " + files.key_file);
  if (auto status = UseIdentity(ctx, *certs, *key); !status)
    return status.error().WithContext("--client-key " + files.key_file);
  return Ok();
}

}  // namespace

Result<ContextPtr> BuildClientContext(const ClientFiles& files) {
  auto ctx = NewContext(TLS_client_method());
  if (!ctx) return ctx.error();
  if (auto status = ApplyProtocolPolicy(ctx->get()); !status) return status.error();
  SSL_CTX_set_verify(ctx->get(), SSL_VERIFY_PEER, nullptr);
  if (files.ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx->get()) != 1)
      return Unavailable("system CA roots: " + TakeOpenSslErrors());
  } else {
    auto pem = ReadClientPem("--ca-file", files.ca_file);
    if (!pem) return pem.error();
    auto cas = ParseCertificates(*pem, "CA");
    if (!cas) return cas.error().WithContext("--ca-file " + files.ca_file);
    if (auto status = TrustCertificates(ctx->get(), *cas, "CA"); !status)
      return status.error().WithContext("--ca-file " + files.ca_file);
  }
  if (auto status = UseClientCertificate(ctx->get(), files); !status) return status.error();
  return *ctx;
}

Status PrepareClientConnection(SSL* ssl, const std::string& host) {
  in6_addr address{};
  const bool is_ip = ::inet_pton(AF_INET, host.c_str(), &address) == 1 ||
                     ::inet_pton(AF_INET6, host.c_str(), &address) == 1;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  // RFC 6066 3: SNI carries host names only, never an address literal.
  const bool ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) == 1
                        : SSL_set_tlsext_host_name(ssl, host.c_str()) == 1 &&
                              SSL_set1_host(ssl, host.c_str()) == 1;
  if (!ok) return InvalidArgument("TLS server name " + host + ": " + TakeOpenSslErrors());
  return Ok();
}

}  // namespace tessera::tls
