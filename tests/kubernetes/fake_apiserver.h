// Runs tests/tools/k8s/fake_apiserver.py (a scripted Kubernetes API server on a real socket) for
// the lifetime of the object, and talks to its /_tessera/ control API.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

// MakeTestPki (a CA, server and client certificates) for the TLS tests of the API server.
#include "support/test_pki.h"

namespace tessera::testing {

class FakeApiServer {
 public:
  // extra_args: --token T, --tls-cert/--tls-key/--client-ca PATH.
  explicit FakeApiServer(const std::vector<std::string>& extra_args = {});
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  std::string url() const;  // http(s)://127.0.0.1:<port>
  // Appends fault rules: {"method","path" (regex),"status","headers","body","times"}.
  void Script(const nlohmann::json& rules);
  // History before now is gone (410) and the watches open now end before their next event;
  // later watches stream as before.
  void Compact();
  void SetWatchSeconds(double seconds);
  // The connection that carries the next API request is closed once it is answered.
  void CloseAfterNextRequest();
  // Every API request seen: method, path, query, authorization, body, peerPort (the client's).
  nlohmann::json Log();
  void ClearLog();

 private:
  nlohmann::json Control(const std::string& path, const nlohmann::json& body);
  int pid_ = -1;
  int port_ = 0;
  bool tls_ = false;
};

// A kubeconfig at `path` naming `server` (and `ca_file` as its certificate authority, if any), with
// no credentials: what the clients under test read.
void WriteKubeconfigFile(const std::string& path, const std::string& server,
                         const std::string& ca_file = "");

}  // namespace tessera::testing
