// Golden-output tests of the `tessera` client: the real binary run with arguments and an
// environment of the test's choosing (TESSERA_SERVER, TESSERA_TOKEN, TESSERA_CONFIG pointing
// nowhere, HOME in a temporary directory), its stdout, stderr and exit code captured, what varies
// from run to run normalised, and the result compared with tests/cli/golden/<name>.txt.
//
// With TESSERA_UPDATE_GOLDEN=1 in the test's environment the files are written instead of
// compared (review the diff before committing them).
//
// Normalised: container IDs (c-<16 hex>) become c-1, c-2, ... and token IDs (t-<8 hex>) t-1, ...
// in order of first appearance in the file; times (2026-11-29T19:56:12Z) <time>; Unix-ms values
// (13 digits) <ms>; ages (12s, 3m, 5h, 2d) in a table's cells <age>; the server's address <server>;
// any other address's port <port>; SHA-256 digests (a GPU's firmware baseline) sha256:<rom>; runs
// of two or more blanks inside a line three blanks (a cell's width changes with the values above,
// so a table's alignment is not compared here: RenderTable has its own tests), blanks at the end of
// a line dropped. A test adds its own rules for what else varies (a measured figure).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/file_text.h"
#include "support/fixture_host.h"

namespace tessera::testing {

struct CliResult {
  int exit_code = -1;  // 128+signal when killed
  std::string out, err;
  std::string command;  // "tessera ARG...", as the golden file shows it
};

// A rule of a test's own: every match of `pattern` becomes `replacement` (std::regex_replace
// format: $1 is the first group).
struct GoldenRule {
  std::string pattern;
  std::string replacement;
};

// Runs the real `tessera` binary against one server with one token.
class TesseraCli {
 public:
  // `server`: as --server takes it ("http://127.0.0.1:PORT"); `token`: TESSERA_TOKEN ("" for
  // none).
  TesseraCli(std::string server, std::string token)
      : server_(std::move(server)), token_(std::move(token)) {}

  void set_token(std::string token) { token_ = std::move(token); }
  const std::string& server() const { return server_; }

  // Runs `tessera args...` with the environment described above plus `env` (NAME -> value; an
  // empty value leaves NAME out); waits at most 120 s, then kills it (exit code 137).
  CliResult Run(const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env = {}) const {
    std::map<std::string, std::string> vars = {
        {"PATH", "/usr/local/bin:/usr/bin:/bin"},
        {"HOME", dir_.path()},
        {"LANG", "C"},
        {"TESSERA_CONFIG", dir_.path() + "/nowhere/config.yaml"},
        {"TESSERA_SERVER", server_},
        {"TESSERA_TOKEN", token_},
    };
    for (const auto& [name, value] : env)
      vars[name] = value;
    std::vector<std::string> env_text;
    for (const auto& [name, value] : vars)
      if (!value.empty()) env_text.push_back(name + "=" + value);
    const std::string binary = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera";
    std::vector<std::string> argv = {binary};
    argv.insert(argv.end(), args.begin(), args.end());
    CliResult result;
    result.command = "tessera";
    for (const auto& arg : args)
      result.command += " " + Quoted(arg);
    const std::string out_path = dir_.path() + "/stdout", err_path = dir_.path() + "/stderr";
    result.exit_code = Spawn(binary, argv, env_text, out_path, err_path);
    result.out = ReadText(out_path);
    result.err = ReadText(err_path);
    return result;
  }

 private:
  static std::string Quoted(const std::string& arg) {
    if (!arg.empty() && arg.find_first_of(" \t\n'\"\\$") == std::string::npos) return arg;
    std::string quoted = "'";
    for (char c : arg)
      quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return quoted + "'";
  }

  static std::vector<char*> Pointers(std::vector<std::string>& strings) {
    std::vector<char*> pointers;
    for (auto& s : strings)
      pointers.push_back(s.data());
    pointers.push_back(nullptr);
    return pointers;
  }

  static int Spawn(const std::string& binary, std::vector<std::string> argv,
                   std::vector<std::string> env, const std::string& out_path,
                   const std::string& err_path) {
    auto args = Pointers(argv);
    auto envp = Pointers(env);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, binary.c_str(), &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return -1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string server_, token_;
  TempDir dir_;
};

// Replaces each distinct match of `pattern` with prefix + its number (1, 2, ...) in order of
// first appearance.
inline std::string NumberMatches(const std::string& text, const std::regex& pattern,
                                 const std::string& prefix) {
  std::map<std::string, int> numbers;
  std::string out;
  auto last = text.cbegin();
  for (std::sregex_iterator it(text.begin(), text.end(), pattern), end; it != end; ++it) {
    out.append(last, text.cbegin() + it->position());
    auto [at, added] = numbers.emplace(it->str(), static_cast<int>(numbers.size()) + 1);
    out += prefix + std::to_string(at->second);
    last = text.cbegin() + it->position() + it->length();
  }
  out.append(last, text.cend());
  return out;
}

// Blanks inside a line: a run of two or more becomes three; none at the end.
inline std::string CollapseBlanks(const std::string& text) {
  std::istringstream lines(text);
  std::string line, out;
  while (std::getline(lines, line)) {
    const size_t indent = line.find_first_not_of(' ');
    std::string body = indent == std::string::npos ? "" : line.substr(indent);
    body = std::regex_replace(body, std::regex(" {2,}"), "   ");
    while (!body.empty() && body.back() == ' ')
      body.pop_back();
    out += (body.empty() ? "" : line.substr(0, indent) + body) + "\n";
  }
  return out;
}

// What varies from run to run, normalised (see the top of this file). `server_port`: the
// server's port (0: none).
inline std::string NormalizeGolden(std::string text, uint16_t server_port,
                                   const std::vector<GoldenRule>& rules = {}) {
  for (const auto& rule : rules)
    text = std::regex_replace(text, std::regex(rule.pattern), rule.replacement);
  text = NumberMatches(text, std::regex("\\bc-[0-9a-f]{16}\\b"), "c-");
  text = NumberMatches(text, std::regex("\\bt-[0-9a-f]{8}\\b"), "t-");
  text = std::regex_replace(
      text, std::regex("\\b20\\d\\d-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d(\\.\\d+)?Z"), "<time>");
  if (server_port != 0) {
    const std::string port = std::to_string(server_port);
    text = std::regex_replace(text, std::regex("(127\\.0\\.0\\.1|localhost):" + port + "\\b"),
                              "<server>");
  }
  text = std::regex_replace(
      text, std::regex("(\\b\\d{1,3}(\\.\\d{1,3}){3}|\\[[0-9a-f:]*\\]):\\d{1,5}\\b"), "$1:<port>");
  text = std::regex_replace(text, std::regex("\\b1\\d{12}\\b"), "<ms>");
  // A GPU's firmware baseline hashes the fixture's option ROM, which tests share and some rewrite.
  text = std::regex_replace(text, std::regex("sha256:[0-9a-f]{64}"), "sha256:<rom>");
  // An age is a table's cell: after a line break or the blanks between cells, before either.
  text = std::regex_replace(text, std::regex("(^|\\n| {2})\\d+[smhd](?= {2}|\\n|$)"), "$1<age>");
  return CollapseBlanks(text);
}

// The golden file's text: the command, its exit code, stdout and stderr, normalised.
inline std::string GoldenText(const CliResult& result, uint16_t server_port,
                              const std::vector<GoldenRule>& rules = {}) {
  std::string text = "$ " + result.command + "\n--- exit " + std::to_string(result.exit_code) +
                     "\n--- stdout\n" + result.out;
  if (!result.out.empty() && result.out.back() != '\n') text += "\n";
  text += "--- stderr\n" + result.err;
  return NormalizeGolden(text, server_port, rules);
}

inline std::string GoldenPath(const std::string& name) {
  return std::string(TESSERA_SOURCE_DIR) + "/tests/cli/golden/" + name + ".txt";
}

// Compares the result with tests/cli/golden/<name>.txt (writes it with TESSERA_UPDATE_GOLDEN=1).
inline void ExpectGolden(const std::string& name, const CliResult& result, uint16_t server_port,
                         const std::vector<GoldenRule>& rules = {}) {
  const std::string actual = GoldenText(result, server_port, rules);
  const std::string path = GoldenPath(name);
  const char* update = std::getenv("TESSERA_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::trunc) << actual;
    return;
  }
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing (run with TESSERA_UPDATE_GOLDEN=1 to write it); got:\n"
                  << actual;
    return;
  }
  EXPECT_EQ(ReadText(path), actual)
      << "golden file " << path << " (TESSERA_UPDATE_GOLDEN=1 rewrites it)";
}

}  // namespace tessera::testing
