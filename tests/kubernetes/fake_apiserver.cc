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

}  // namespace tessera::testing
