// A real tessera-serve process for tests: started with flags, reached over HTTP on a port it
// chose itself, stopped with SIGTERM or killed with SIGKILL.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "support/file_text.h"
#include "support/fixture_host.h"

extern char** environ;

namespace tessera::testing {

inline std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  return text;
}

// A field of /proc/<pid>/status ("VmHWM" -> "16292 kB"); "?" when it has none.
inline std::string ProcStatusField(pid_t pid, const char* field) {
  std::string status = ReadText("/proc/" + std::to_string(pid) + "/status");
  auto at = status.find(field);
  if (at == std::string::npos) return "?";
  auto end = status.find('\n', at);
  std::string line = status.substr(at, end - at);
  return Trimmed(line.substr(line.find(':') + 1));
}

// Writes an option ROM ("ROM-v1-<PCI address>") for every GPU of a materialized fixture host:
// the firmware check's baseline, so released GPUs pass their check. Returns the GPUs' PCI
// addresses, sorted.
inline std::vector<std::string> WriteGpuRoms(const std::string& root) {
  std::vector<std::string> gpus;
  for (const auto& entry : std::filesystem::directory_iterator(root + "/sys/bus/pci/devices")) {
    std::string class_code = Trimmed(ReadText(entry.path().string() + "/class"));
    if (class_code.rfind("0x0302", 0) == 0 || class_code.rfind("0x0300", 0) == 0) {
      // Fixture trees are shared by tests running in parallel: a ROM another service is hashing
      // must never be seen half-written (an empty ROM becomes a wrong baseline), so a ROM is
      // left alone when it already holds this content and is otherwise replaced by a rename.
      const std::string rom = entry.path().string() + "/rom";
      const std::string content = "ROM-v1-" + entry.path().filename().string();
      if (ReadText(rom) != content) {
        const std::string staged = rom + ".tmp-" + std::to_string(::getpid());
        std::ofstream(staged, std::ios::trunc) << content;
        std::filesystem::rename(staged, rom);
      }
      gpus.push_back(entry.path().filename().string());
    }
  }
  std::sort(gpus.begin(), gpus.end());
  return gpus;
}

class ServeProcess {
 public:
  // Data, port file and log live in `dir`; flags are added to the defaults.
  ServeProcess(std::string dir, std::vector<std::string> flags)
      : dir_(std::move(dir)), flags_(std::move(flags)) {}
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;
  ~ServeProcess() { Kill(SIGKILL); }

  // Starts it and waits until it listens. Returns false (with the log) when it does not.
  bool Start(std::string* log = nullptr) {
    exit_status_ = -1;
    std::string port_file = dir_ + "/port";
    ::unlink(port_file.c_str());
    std::string binary = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-serve";
    std::vector<std::string> argv = {binary,    "--data-dir",   dir_ + "/data",       "--port-file",
                                     port_file, "--lease-file", dir_ + "/leases.json"};
    // Flags may name the address themselves (another than loopback's any port).
    if (std::find(flags_.begin(), flags_.end(), "--listen") == flags_.end())
      argv.insert(argv.begin() + 1, {"--listen", listen_});
    argv.insert(argv.end(), flags_.begin(), flags_.end());
    std::vector<char*> args;
    for (auto& arg : argv)
      args.push_back(arg.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // The service starts with stdio only, as from a service manager: what it holds beyond that
    // it opened itself (descriptor tests compare against it).
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    std::string log_path = dir_ + "/serve.log";
    std::string out_path = dir_ + "/serve.out";
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    int rc = ::posix_spawn(&pid_, binary.c_str(), &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return false;
    for (int i = 0; i < 600; ++i) {
      std::string port = Trimmed(ReadText(port_file));
      if (!port.empty()) {
        port_ = static_cast<uint16_t>(std::stoi(port));
        return true;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (log) *log = ReadText(log_path) + ReadText(out_path);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (log) *log = "timed out waiting for the port file\n" + ReadText(log_path);
    return false;
  }

  // Sends `signal` and reaps it; returns the exit status (128+signal when killed).
  int Kill(int signal) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // "HOST:PORT" of the next Start (default 127.0.0.1:0, a port of its choosing).
  void set_listen(std::string listen) { listen_ = std::move(listen); }
  // The exit status of a Start that ended with the process (-1 otherwise).
  int exit_status() const { return exit_status_; }
  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string data_dir() const { return dir_ + "/data"; }
  std::string log() const { return ReadText(dir_ + "/serve.log"); }
  std::string out() const { return ReadText(dir_ + "/serve.out"); }
  std::string lease_file() const { return dir_ + "/leases.json"; }
  std::string admin_token() const { return Trimmed(ReadText(dir_ + "/data/admin.token")); }

  std::unique_ptr<client::Connection> Connect(const std::string& token) const {
    return std::make_unique<client::Connection>(client::Endpoint{"127.0.0.1", port_}, token);
  }

 private:
  std::string dir_;
  std::vector<std::string> flags_;
  std::string listen_ = "127.0.0.1:0";
  pid_t pid_ = -1;
  int exit_status_ = -1;
  uint16_t port_ = 0;
};

// Calls and parses the JSON answer; `status` gets the HTTP status (0 when the call failed).
inline nlohmann::json CallJson(client::Connection& connection, const std::string& method,
                               const std::string& path, const std::string& body = "",
                               int* status = nullptr,
                               const std::map<std::string, std::string>& headers = {}) {
  auto response = connection.Call(method, path, body, headers);
  if (status) *status = response ? response->status : 0;
  if (!response) return nlohmann::json();
  auto doc = nlohmann::json::parse(response->body, nullptr, false);
  return doc.is_discarded() ? nlohmann::json(response->body) : doc;
}

// The flags of a tessera-serve with the null backend (nothing runs) on the fixture host at `root`,
// its CDI specs in `dir`/cdi under a kind of their own, and `extra`.
inline std::vector<std::string> NullBackendFlags(const std::string& root, const std::string& dir,
                                                 std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = {
      "--root",    root,         "--backend",  "null",
      "--cdi-dir", dir + "/cdi", "--cdi-kind", "tessera-test.example/gpu"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// Creates `tenancy` (or keeps it) and a token for it; "" when either call failed.
inline std::string TenancyToken(client::Connection& admin, const std::string& tenancy) {
  int status = 0;
  CallJson(admin, "PUT", "/v1/tenancies/" + tenancy, "{}", &status);
  if (status != 200) return "";
  auto token = CallJson(admin, "POST", "/v1/tenancies/" + tenancy + "/tokens", "", &status);
  return status == 201 ? token.value("token", "") : "";
}

}  // namespace tessera::testing
