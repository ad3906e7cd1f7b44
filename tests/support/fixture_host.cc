#include "support/fixture_host.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace tessera::testing {
namespace {

std::string MaterializeScript() {
  return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/materialize.py";
}

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  return text;
}

}  // namespace

std::string RunCommand(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + command);
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    output.append(buffer.data(), n);
  int raw = ::pclose(pipe);
  if (status) *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return output;
}

std::string MaterializeHost(const std::string& name) {
  int status = 0;
  std::string cache = std::string(TESSERA_BINARY_DIR) + "/fixtures";
  std::string out =
      RunCommand("python3 " + MaterializeScript() + " --cached " + name + " " + cache, &status);
  if (status != 0) throw std::runtime_error("materialize " + name + " failed");
  return Trimmed(out);
}

TempHost::TempHost(const std::string& name) {
  char pattern[] = "/tmp/tessera-host-XXXXXX";
  if (!::mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
  root_ = std::string(pattern) + "/root";
  int status = 0;
  RunCommand("cp -a " + MaterializeHost(name) + " " + root_, &status);
  if (status != 0) throw std::runtime_error("copy of fixture " + name + " failed");
}

TempHost::~TempHost() {
  std::error_code ignored;
  std::filesystem::remove_all(std::filesystem::path(root_).parent_path(), ignored);
}

TempDir::TempDir() {
  char pattern[] = "/tmp/tessera-test-XXXXXX";
  if (!::mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TesseraBinary() {
  return std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera";
}

}  // namespace tessera::testing
