// `tessera serve`: execs tessera-serve, which holds the heavy dependencies.
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace tessera::cli {
namespace {

// tessera-serve next to this executable (the build tree and `make install` both put it there),
// else from PATH.
std::string ServeBinary() {
  std::error_code error;
  auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    auto candidate = self.parent_path() / "tessera-serve";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "tessera-serve";
}

void ExecServe(const std::vector<std::string>& args) {
  std::string binary = ServeBinary();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const auto& arg : args)
    argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execvp(binary.c_str(), argv.data());
  Fail(ErrnoError("exec " + binary, errno));
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  CLI::App* serve = app.add_subcommand(
      "serve",
      "GPU containers as a service on this host (REST API, dashboard; runs tessera-serve)");
  serve->prefix_command();
  serve->allow_extras();
  serve->set_help_flag();  // --help goes to tessera-serve
  serve->callback([serve] { ExecServe(serve->remaining()); });
}

}  // namespace tessera::cli
