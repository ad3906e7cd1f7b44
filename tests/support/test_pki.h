// Certificates made at test time with the openssl command (EC P-256 keys: quick to make), so no
// key is ever committed. Every key file is mode 600, as a server's key must be.
#pragma once

#include <string>

namespace tessera::testing {

// In `dir`: ca.crt/ca.key (CN tessera-test-ca), server.crt/server.key for 127.0.0.1, ::1 and
// localhost signed by that CA, and client.crt/client.key signed by it too.
void MakeTestPki(const std::string& dir);

// Another server certificate and key for the same names, signed by the CA in `dir`, written to
// `cert`/`key` (a rotation's new files). Returns its serial in upper-case hex.
std::string IssueServerCertificate(const std::string& dir, const std::string& cert,
                                   const std::string& key);

// The serial (upper-case hex) of the certificate in `cert`.
std::string CertificateSerialOf(const std::string& cert);

}  // namespace tessera::testing
