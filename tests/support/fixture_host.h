// Fixture hosts for tests: the committed trees under tests/fixtures/hosts/, made usable by
// tests/fixtures/materialize.py (real character devices, a real ld.so.cache, unix sockets).
#pragma once

#include <string>

namespace tessera::testing {

// A shared, cached materialisation of tests/fixtures/hosts/<name>; treat it as read-only.
// Built once per fixture content under <build>/fixtures and reused by every test process.
std::string MaterializeHost(const std::string& name);

// A private copy that a test may change (remove a device, upgrade the driver); deleted when
// the object goes out of scope.
class TempHost {
 public:
  explicit TempHost(const std::string& name);
  TempHost(const TempHost&) = delete;
  TempHost& operator=(const TempHost&) = delete;
  ~TempHost();
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// A fresh empty temporary directory, removed with its contents when the object goes away.
class TempDir {
 public:
  TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs a shell command, returns its stdout; exit status in *status when given.
std::string RunCommand(const std::string& command, int* status = nullptr);

// Path of a built tool: TESSERA_BINARY_DIR/src/cli/tessera and friends.
std::string TesseraBinary();

}  // namespace tessera::testing
