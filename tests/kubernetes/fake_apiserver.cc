#include "kubernetes/fake_apiserver.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "support/fixture_host.h"

namespace tessera::testing {

FakeApiServer::FakeApiServer(const std::vector<std::string>& extra_args) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe");
  std::vector<std::string> argv = {
      "/usr/bin/python3", std::string(TESSERA_SOURCE_DIR) + "/tests/tools/k8s/fake_apiserver.py"};
  for (const auto& a : extra_args) {
    if (a == "--tls-cert") tls_ = true;
    argv.push_back(a);
  }
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> args;
    for (auto& a : argv)
      args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  FILE* out = ::fdopen(fds[0], "r");
  char line[128] = {0};
  if (!std::fgets(line, sizeof line, out) || std::sscanf(line, "PORT %d", &port_) != 1)
    throw std::runtime_error("fake_apiserver.py did not start");
  std::fclose(out);
}

FakeApiServer::~FakeApiServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::string FakeApiServer::url() const {
  return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
}

nlohmann::json FakeApiServer::Control(const std::string& path, const nlohmann::json& body) {
  std::string data = body.dump();
  std::string quoted;
  for (char c : data)
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  std::string out = RunCommand("curl -sk -X POST -H 'Content-Type: application/json' --data '" +
                               quoted + "' " + url() + path);
  return nlohmann::json::parse(out, nullptr, false);
}

void FakeApiServer::Script(const nlohmann::json& rules) {
  Control("/_tessera/script", {{"rules", rules}});
}
void FakeApiServer::Compact() {
  Control("/_tessera/compact", nlohmann::json::object());
}
void FakeApiServer::SetWatchSeconds(double seconds) {
  Control("/_tessera/watch-seconds", {{"seconds", seconds}});
}
void FakeApiServer::CloseAfterNextRequest() {
  Control("/_tessera/close-after-next", nlohmann::json::object());
}
nlohmann::json FakeApiServer::Log() {
  return Control("/_tessera/log", nlohmann::json::object())["log"];
}
void FakeApiServer::ClearLog() {
  Control("/_tessera/clear-log", nlohmann::json::object());
}

void WriteKubeconfigFile(const std::string& path, const std::string& server,
                         const std::string& ca_file) {
  std::ofstream(path) << "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: "
                         "c\n  cluster:\n    server: "
                      << server
                      << (ca_file.empty() ? "" : "\n    certificate-authority: " + ca_file)
                      << "\ncontexts:\n- name: t\n  context: {cluster: c}\n";
}

void MakeApiServerPki(const std::string& dir) {
  std::string script =
      "set -e; cd " + dir +
      "; openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=tessera-test-ca "
      "-keyout ca.key -out ca.crt 2>/dev/null"
      "; openssl req -newkey rsa:2048 -nodes -subj /CN=apiserver -keyout server.key -out "
      "server.csr 2>/dev/null"
      "; echo subjectAltName=IP:127.0.0.1,DNS:localhost > san.ext"
      "; openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
      "-extfile san.ext -out server.crt 2>/dev/null"
      "; openssl req -newkey rsa:2048 -nodes -subj /CN=tessera/O=system:masters -keyout "
      "client.key -out client.csr 2>/dev/null"
      "; openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
      "-out client.crt 2>/dev/null";
  int status = 0;
  RunCommand("bash -c '" + script + "'", &status);
  if (status != 0) throw std::runtime_error("openssl failed");
}

}  // namespace tessera::testing
