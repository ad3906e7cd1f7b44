// tessera-serve over TLS, with certificates made at test time: OpenSSL's s_client, the client
// library and `tessera top` reach it with the CA and are refused without it; client certificates
// when --tls-client-ca asks; a certificate replaced on disk is served to new connections while an
// open keep-alive connection goes on; plain HTTP stays on loopback unless --insecure-http.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "serve/serve_process.h"
#include "support/fixture_host.h"
#include "support/test_pki.h"
#include "support/wait.h"
#include "tls/tls.h"

namespace tessera::testing {
namespace {

// A connected TCP socket to 127.0.0.1:port, with a receive timeout so a silent server fails the
// test instead of hanging it.
int Dial(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One TLS connection made with the tls module's client context, kept open across requests.
class RawTls {
 public:
  RawTls(const tls::ContextPtr& ctx, uint16_t port) : fd_(Dial(port)), ssl_(SSL_new(ctx.get())) {
    SSL_set_fd(ssl_, fd_);
    EXPECT_TRUE(tls::PrepareClientConnection(ssl_, "127.0.0.1").ok());
    ok_ = SSL_connect(ssl_) == 1;
  }
  ~RawTls() {
    SSL_free(ssl_);
    ::close(fd_);
  }
  bool ok() const { return ok_; }
  std::string Serial() const {
    X509* peer = SSL_get1_peer_certificate(ssl_);
    if (!peer) return "";
    BIGNUM* number = ASN1_INTEGER_to_BN(X509_get0_serialNumber(peer), nullptr);
    char* hex = BN_bn2hex(number);
    std::string serial = hex;
    OPENSSL_free(hex);
    BN_free(number);
    X509_free(peer);
    return serial;
  }
  // GET /healthz on this connection; the status line.
  std::string Healthz() {
    const std::string request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    if (SSL_write(ssl_, request.data(), static_cast<int>(request.size())) <= 0) return "";
    std::string answer;
    char buffer[4096];
    while (answer.find("\r\n\r\n") == std::string::npos || answer.back() != '\n') {
      int n = SSL_read(ssl_, buffer, sizeof(buffer));
      if (n <= 0) break;
      answer.append(buffer, static_cast<size_t>(n));
    }
    return answer.substr(0, answer.find("\r\n"));
  }

 private:
  int fd_;
  SSL* ssl_;
  bool ok_ = false;
};

class ServeTls : public ::testing::Test {
 protected:
  void SetUp() override { MakeTestPki(pki_.path()); }
  std::string Pki(const std::string& name) const { return pki_.path() + "/" + name; }
  std::vector<std::string> TlsFlags(bool client_ca = false) const {
    std::vector<std::string> flags = {"--tls-cert", Pki("server.crt"), "--tls-key",
                                      Pki("server.key")};
    if (client_ca) flags.insert(flags.end(), {"--tls-client-ca", Pki("ca.crt")});
    return NullBackendFlags(root_, dir_.path(), flags);
  }
  // openssl s_client's report of one connection to the server.
  std::string SClient(uint16_t port, const std::string& ca, const std::string& extra = "") {
    return RunCommand(
        "echo | timeout 60 openssl s_client -connect 127.0.0.1:" + std::to_string(port) +
        " -CAfile '" + ca + "' -verify_ip 127.0.0.1 -verify_return_error " + extra + " 2>&1");
  }
  client::Connection Https(uint16_t port, client::TlsOptions options, const std::string& token) {
    return client::Connection(client::Endpoint{"127.0.0.1", port, true}, token, options);
  }

  std::string root_ = MaterializeHost("hgx-h100-dgx");
  TempDir dir_;
  TempDir pki_;
};

TEST_F(ServeTls, OpenSslTheClientLibraryAndTesseraTopReachItWithTheCa) {
  ServeProcess serve(dir_.path(), TlsFlags());
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  const std::string report = SClient(serve.port(), Pki("ca.crt"));
  EXPECT_NE(report.find("Verify return code: 0 (ok)"), std::string::npos) << report;
  EXPECT_NE(report.find("TLSv1.3"), std::string::npos) << report;
  // TLS 1.1 is refused; 1.2 without ECDHE+AEAD too (no cipher agreed: "Cipher is (NONE)").
  const std::string tls11 = SClient(serve.port(), Pki("ca.crt"), "-tls1_1");
  EXPECT_NE(tls11.find("Cipher is (NONE)"), std::string::npos) << tls11;
  const std::string rsa_cbc = SClient(serve.port(), Pki("ca.crt"), "-tls1_2 -cipher AES128-SHA");
  EXPECT_NE(rsa_cbc.find("Cipher is (NONE)"), std::string::npos) << rsa_cbc;
  const std::string tls12 = SClient(serve.port(), Pki("ca.crt"), "-tls1_2");
  EXPECT_NE(tls12.find("Cipher is ECDHE-ECDSA-AES"), std::string::npos) << tls12;

  auto connection = Https(serve.port(), {Pki("ca.crt"), "", ""}, serve.admin_token());
  int status = 0;
  auto tenancies = CallJson(connection, "GET", "/v1/tenancies", "", &status);
  EXPECT_EQ(status, 200) << tenancies.dump();

  const std::string top = RunCommand(
      TesseraBinary() + " top --once --server https://127.0.0.1:" + std::to_string(serve.port()) +
      " --ca-file " + Pki("ca.crt") + " --token-file " + serve.data_dir() + "/admin.token 2>&1");
  EXPECT_NE(top.find("tessera top - https://127.0.0.1:"), std::string::npos) << top;
}

TEST_F(ServeTls, AWrongCaIsRefusedByEveryClient) {
  ServeProcess serve(dir_.path(), TlsFlags());
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  TempDir other;
  MakeTestPki(other.path());
  const std::string report = SClient(serve.port(), other.path() + "/ca.crt");
  EXPECT_EQ(report.find("Verify return code: 0 (ok)"), std::string::npos) << report;
  auto connection = Https(serve.port(), {other.path() + "/ca.crt", "", ""}, serve.admin_token());
  auto got = connection.Call("GET", "/healthz");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.error().message.find("certificate not trusted"), std::string::npos)
      << got.error().message;
  int status = 0;
  const std::string run =
      RunCommand("TESSERA_TOKEN=x " + TesseraBinary() +
                     " run --server https://127.0.0.1:" + std::to_string(serve.port()) +
                     " --ca-file " + other.path() + "/ca.crt busybox true 2>&1",
                 &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(run.find("certificate not trusted"), std::string::npos) << run;
}

TEST_F(ServeTls, AClientCaMakesEveryClientShowACertificate) {
  ServeProcess serve(dir_.path(), TlsFlags(/*client_ca=*/true));
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  auto without = Https(serve.port(), {Pki("ca.crt"), "", ""}, serve.admin_token());
  EXPECT_FALSE(without.Call("GET", "/healthz").ok());
  auto with = Https(serve.port(), {Pki("ca.crt"), Pki("client.crt"), Pki("client.key")},
                    serve.admin_token());
  auto got = with.Call("GET", "/healthz");
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->status, 200);
  const std::string report = SClient(serve.port(), Pki("ca.crt"),
                                     "-cert " + Pki("client.crt") + " -key " + Pki("client.key"));
  EXPECT_NE(report.find("Verify return code: 0 (ok)"), std::string::npos) << report;
}

TEST_F(ServeTls, AReplacedCertificateReachesNewConnectionsAndTheOpenOneGoesOn) {
  ServeProcess serve(dir_.path(), TlsFlags());
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  auto ctx = tls::BuildClientContext({Pki("ca.crt"), "", ""});
  ASSERT_TRUE(ctx.ok()) << ctx.error().message;
  const std::string old_serial = CertificateSerialOf(Pki("server.crt"));
  RawTls open(*ctx, serve.port());
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open.Healthz(), "HTTP/1.1 200 OK");
  EXPECT_EQ(open.Serial(), old_serial);

  const std::string new_serial =
      IssueServerCertificate(pki_.path(), Pki("server.crt"), Pki("server.key"));
  // The files are looked at again at most once a second, on a new connection.
  EXPECT_TRUE(WaitUntil([&] {
    RawTls fresh(*ctx, serve.port());
    return fresh.ok() && fresh.Serial() == new_serial;
  }));
  EXPECT_EQ(open.Healthz(), "HTTP/1.1 200 OK");  // same connection, same certificate
  EXPECT_EQ(open.Serial(), old_serial);
  EXPECT_NE(serve.log().find("loaded the changed certificate"), std::string::npos);
}

TEST_F(ServeTls, PlainHttpToTheTlsPortGetsNoHttpAnswer) {
  ServeProcess serve(dir_.path(), TlsFlags());
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  int fd = Dial(serve.port());
  ASSERT_GE(fd, 0);
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string answer;
  char buffer[1024];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;)
    answer.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(answer.find("HTTP/"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("ok"), std::string::npos) << answer;
}

TEST_F(ServeTls, PlainHttpOffLoopbackIsRefusedWithoutInsecureHttp) {
  for (const char* address : {"0.0.0.0:0", "[::]:0", ":0"}) {
    ServeProcess refused(dir_.path(), NullBackendFlags(root_, dir_.path(), {"--listen", address}));
    std::string log;
    ASSERT_FALSE(refused.Start(&log)) << address;
    EXPECT_NE(log.find("not a loopback address"), std::string::npos) << address << ": " << log;
    EXPECT_NE(log.find("--insecure-http"), std::string::npos) << log;
  }
  ServeProcess allowed(dir_.path(), NullBackendFlags(root_, dir_.path(),
                                                     {"--listen", "0.0.0.0:0", "--insecure-http"}));
  std::string log;
  ASSERT_TRUE(allowed.Start(&log)) << log;
  int status = 0;
  CallJson(*allowed.Connect(""), "GET", "/healthz", "", &status);
  EXPECT_EQ(status, 200);
  allowed.Kill(SIGKILL);
  // With a certificate no flag is needed.
  auto flags = TlsFlags();
  flags.insert(flags.end(), {"--listen", "0.0.0.0:0"});
  ServeProcess with_tls(dir_.path(), flags);
  ASSERT_TRUE(with_tls.Start(&log)) << log;
}

TEST_F(ServeTls, BadCertificateFilesAreARefusalNamingTheFile) {
  ::chmod(Pki("server.key").c_str(), 0644);
  ServeProcess world_readable(dir_.path(), TlsFlags());
  std::string log;
  ASSERT_FALSE(world_readable.Start(&log));
  EXPECT_NE(log.find("--tls-key " + Pki("server.key") + ": readable by every user"),
            std::string::npos)
      << log;
  ::chmod(Pki("server.key").c_str(), 0600);
  ServeProcess mismatched(dir_.path(), NullBackendFlags(root_, dir_.path(),
                                                        {"--tls-cert", Pki("server.crt"),
                                                         "--tls-key", Pki("client.key")}));
  ASSERT_FALSE(mismatched.Start(&log));
  EXPECT_NE(log.find("key: does not match the certificate"), std::string::npos) << log;
  ServeProcess half(dir_.path(),
                    NullBackendFlags(root_, dir_.path(), {"--tls-cert", Pki("server.crt")}));
  ASSERT_FALSE(half.Start(&log));
  EXPECT_NE(log.find("give both"), std::string::npos) << log;
}

}  // namespace
}  // namespace tessera::testing
