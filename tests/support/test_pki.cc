#include "support/test_pki.h"

#include <stdexcept>

#include "support/fixture_host.h"

namespace tessera::testing {
namespace {

std::string Run(const std::string& dir, const std::string& script) {
  int status = 0;
  std::string out = RunCommand("cd '" + dir + "' && umask 077 && (" + script + ") 2>&1", &status);
  if (status != 0) throw std::runtime_error("openssl failed: " + out);
  return out;
}

constexpr const char* kEcKey = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

}  // namespace

void MakeTestPki(const std::string& dir) {
  Run(dir, std::string("openssl req -x509 ") + kEcKey +
               " -days 2 -subj /CN=tessera-test-ca -keyout ca.key -out ca.crt" +
               " && openssl req " + kEcKey +
               " -subj /CN=tessera-test-client -keyout client.key -out client.csr" +
               " && openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -set_serial 0x" +
               "C1 -days 2 -out client.crt && chmod 644 ca.crt client.crt");
  IssueServerCertificate(dir, dir + "/server.crt", dir + "/server.key");
}

std::string IssueServerCertificate(const std::string& dir, const std::string& cert,
                                   const std::string& key) {
  // A fresh random serial each time, so that a rotation is visible in what the server sends.
  Run(dir, std::string("openssl req ") + kEcKey + " -subj /CN=tessera-test-server -keyout '" + key +
               ".new' -out server.csr" +
               " && printf 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\\n' > san.ext" +
               " && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -days 2" +
               " -extfile san.ext -set_serial 0x$(openssl rand -hex 8) -out '" + cert + ".new'" +
               " && chmod 644 '" + cert + ".new' && mv '" + key + ".new' '" + key + "'" +
               " && mv '" + cert + ".new' '" + cert + "'");
  return CertificateSerialOf(cert);
}

std::string CertificateSerialOf(const std::string& cert) {
  std::string out = Run("/", "openssl x509 -noout -serial -in '" + cert + "'");
  // "serial=0A1B..."
  auto equals = out.find('=');
  std::string serial = equals == std::string::npos ? "" : out.substr(equals + 1);
  while (!serial.empty() && (serial.back() == '\n' || serial.back() == '\r'))
    serial.pop_back();
  return serial;
}

}  // namespace tessera::testing
