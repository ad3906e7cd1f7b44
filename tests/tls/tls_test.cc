// The tls module on its own: contexts from test-time certificates, real handshakes between them
// over a socket pair, and rotation of the server's files.
#include "tls/tls.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "support/fixture_host.h"
#include "support/test_pki.h"

namespace tessera::tls {
namespace {

using testing::TempDir;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Write(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path, std::ios::trunc) << text;
  ::chmod(path.c_str(), mode);
}

// What a handshake came to on each side, and the serial the client saw.
struct Handshake {
  bool client_ok = false;
  bool server_ok = false;
  std::string client_error;
  std::string serial;
};

Handshake Connect(const ContextPtr& server, const ContextPtr& client, const std::string& host) {
  ::signal(SIGPIPE, SIG_IGN);  // a refused peer closes while the other side still writes
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  Handshake result;
  auto served = std::async(std::launch::async, [&] {
    SSL* ssl = SSL_new(server.get());
    SSL_set_fd(ssl, fds[0]);
    bool ok = SSL_accept(ssl) == 1;
    if (ok) {
      char byte = 0;
      ok = SSL_read(ssl, &byte, 1) == 1;  // the client's first byte: it trusted us
    }
    SSL_free(ssl);
    ::close(fds[0]);
    return ok;
  });
  SSL* ssl = SSL_new(client.get());
  SSL_set_fd(ssl, fds[1]);
  EXPECT_TRUE(PrepareClientConnection(ssl, host).ok());
  if (SSL_connect(ssl) == 1) {
    result.client_ok = SSL_write(ssl, "x", 1) == 1;
    X509* peer = SSL_get1_peer_certificate(ssl);
    BIGNUM* number = ASN1_INTEGER_to_BN(X509_get0_serialNumber(peer), nullptr);
    char* hex = BN_bn2hex(number);
    result.serial = hex;
    OPENSSL_free(hex);
    BN_free(number);
    X509_free(peer);
  } else {
    result.client_error = TakeOpenSslErrors();
  }
  SSL_free(ssl);
  ::close(fds[1]);
  result.server_ok = served.get();
  return result;
}

class Tls : public ::testing::Test {
 protected:
  void SetUp() override { testing::MakeTestPki(pki_.path()); }
  std::string Path(const std::string& name) const { return pki_.path() + "/" + name; }
  ServerFiles Files(bool client_ca = false) const {
    return {Path("server.crt"), Path("server.key"), client_ca ? Path("ca.crt") : ""};
  }
  ContextPtr Client(bool with_cert = false, const std::string& ca = "") const {
    ClientFiles files{ca.empty() ? Path("ca.crt") : ca, with_cert ? Path("client.crt") : "",
                      with_cert ? Path("client.key") : ""};
    auto ctx = BuildClientContext(files);
    EXPECT_TRUE(ctx.ok()) << ctx.error().message;
    return ctx ? *ctx : nullptr;
  }
  TempDir pki_;
};

TEST_F(Tls, AClientTrustingTheCaReachesTheServerByAddressAndByName) {
  auto source = ServerContextSource::Open(Files());
  ASSERT_TRUE(source.ok()) << source.error().message;
  for (const char* host : {"127.0.0.1", "::1", "localhost"}) {
    auto got = Connect((*source)->Current(), Client(), host);
    EXPECT_TRUE(got.client_ok && got.server_ok) << host << ": " << got.client_error;
    EXPECT_EQ(got.serial, testing::CertificateSerialOf(Path("server.crt")));
  }
}

TEST_F(Tls, AWrongCaOrAnotherHostNameIsRefusedByTheClient) {
  auto source = ServerContextSource::Open(Files());
  ASSERT_TRUE(source.ok());
  TempDir other;
  testing::MakeTestPki(other.path());
  auto wrong_ca =
      Connect((*source)->Current(), Client(false, other.path() + "/ca.crt"), "127.0.0.1");
  EXPECT_FALSE(wrong_ca.client_ok);
  EXPECT_NE(wrong_ca.client_error.find("certificate verify failed"), std::string::npos)
      << wrong_ca.client_error;
  auto wrong_host = Connect((*source)->Current(), Client(), "other.example");
  EXPECT_FALSE(wrong_host.client_ok);
  auto wrong_ip = Connect((*source)->Current(), Client(), "10.1.2.3");
  EXPECT_FALSE(wrong_ip.client_ok);
}

TEST_F(Tls, AClientCaMakesTheServerRequireASignedClientCertificate) {
  auto source = ServerContextSource::Open(Files(/*client_ca=*/true));
  ASSERT_TRUE(source.ok()) << source.error().message;
  EXPECT_FALSE(Connect((*source)->Current(), Client(false), "127.0.0.1").server_ok);
  auto with_cert = Connect((*source)->Current(), Client(true), "127.0.0.1");
  EXPECT_TRUE(with_cert.client_ok && with_cert.server_ok) << with_cert.client_error;
}

TEST_F(Tls, BadFilesAreRefusedAtOpenNamingTheFlagAndFile) {
  Write(Path("garbage.pem"), "-----BEGIN CERTIFICATE-----\nnot base64 at all\n");
  Write(Path("empty.pem"), "");
  auto garbage = ServerContextSource::Open({Path("garbage.pem"), Path("server.key"), ""});
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.error().message.find("--tls-cert " + Path("garbage.pem")), std::string::npos)
      << garbage.error().message;
  auto no_key = ServerContextSource::Open({Path("server.crt"), Path("empty.pem"), ""});
  ASSERT_FALSE(no_key.ok());
  EXPECT_NE(
      no_key.error().message.find("--tls-key " + Path("empty.pem") + ": key: no PEM private key"),
      std::string::npos)
      << no_key.error().message;
  // The client's key is a real key, but not the certificate's.
  auto mismatch = ServerContextSource::Open({Path("server.crt"), Path("client.key"), ""});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.error().message.find("does not match the certificate"), std::string::npos)
      << mismatch.error().message;
  auto bad_ca =
      ServerContextSource::Open({Path("server.crt"), Path("server.key"), Path("empty.pem")});
  ASSERT_FALSE(bad_ca.ok());
  EXPECT_NE(bad_ca.error().message.find("--tls-client-ca " + Path("empty.pem")), std::string::npos)
      << bad_ca.error().message;
  auto missing = ServerContextSource::Open({Path("nothing.crt"), Path("server.key"), ""});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("--tls-cert"), std::string::npos);
  // A key file every user may read is refused; its group reading it is only warned about.
  ::chmod(Path("server.key").c_str(), 0644);
  auto world = ServerContextSource::Open(Files());
  ASSERT_FALSE(world.ok());
  EXPECT_NE(world.error().message.find("readable by every user (mode 644)"), std::string::npos)
      << world.error().message;
  ::chmod(Path("server.key").c_str(), 0640);
  std::string warning;
  EXPECT_TRUE(ReadServerFiles(Files(), &warning).ok());
  EXPECT_NE(warning.find("readable by its group"), std::string::npos);
}

TEST_F(Tls, NoErrorQuotesTheKeyFile) {
  // A private key where the certificate belongs: the message must not carry the key's bytes.
  auto swapped = ServerContextSource::Open({Path("server.key"), Path("server.key"), ""});
  ASSERT_FALSE(swapped.ok());
  const std::string key = Read(Path("server.key"));
  const std::string body_line = key.substr(key.find('\n') + 1, 20);
  EXPECT_EQ(swapped.error().message.find(body_line), std::string::npos) << swapped.error().message;
}

TEST_F(Tls, ChangedFilesServeNewConnectionsAndABrokenChangeKeepsTheOldCertificate) {
  auto opened = ServerContextSource::Open(Files(), std::chrono::milliseconds(0));
  ASSERT_TRUE(opened.ok());
  auto& source = **opened;
  ContextPtr first = source.Current();
  const std::string old_serial = testing::CertificateSerialOf(Path("server.crt"));
  const std::string new_serial =
      testing::IssueServerCertificate(pki_.path(), Path("server.crt"), Path("server.key"));
  ASSERT_NE(old_serial, new_serial);
  ContextPtr second = source.Current();
  EXPECT_EQ(source.generation(), 2u);
  EXPECT_EQ(Connect(second, Client(), "127.0.0.1").serial, new_serial);
  // A context already handed out (an open connection's) still works.
  EXPECT_EQ(Connect(first, Client(), "127.0.0.1").serial, old_serial);

  // Half a rotation: a key that does not match the certificate. Logged; the last good one stays.
  std::filesystem::copy_file(Path("client.key"), Path("server.key"),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(Connect(source.Current(), Client(), "127.0.0.1").serial, new_serial);
  EXPECT_EQ(source.generation(), 2u);
  // The rest of the rotation arrives: the next look builds it.
  const std::string third_serial =
      testing::IssueServerCertificate(pki_.path(), Path("server.crt"), Path("server.key"));
  EXPECT_EQ(Connect(source.Current(), Client(), "127.0.0.1").serial, third_serial);
  EXPECT_EQ(source.generation(), 3u);
}

TEST_F(Tls, TheServerLooksAtItsFilesAtMostOncePerPollInterval) {
  auto opened = ServerContextSource::Open(Files(), std::chrono::hours(1));
  ASSERT_TRUE(opened.ok());
  testing::IssueServerCertificate(pki_.path(), Path("server.crt"), Path("server.key"));
  (*opened)->Current();
  EXPECT_EQ((*opened)->generation(), 1u);
}

TEST_F(Tls, TheSerialOfACertificateIsItsHex) {
  auto serial = CertificateSerial(Read(Path("client.crt")));
  ASSERT_TRUE(serial.ok()) << serial.error().message;
  EXPECT_EQ(*serial, "C1");
}

}  // namespace
}  // namespace tessera::tls
