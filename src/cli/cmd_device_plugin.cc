// `tessera device-plugin ...` and `tessera dra-plugin ...`: exec tessera-device-plugin and
// tessera-dra-plugin from the directory of this binary, so gRPC never loads into `tessera`
// itself (see src/deviceplugin, src/dra).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "cli/commands.h"

namespace tessera::cli {
namespace {

void AddExecCommand(CLI::App& app, const char* name, const std::string& binary,
                    const std::string& help) {
  auto* cmd = app.add_subcommand(name, help);
  cmd->prefix_command();  // every argument goes to the plugin unparsed
  cmd->set_help_flag();
  cmd->callback([cmd, binary] {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    std::string plugin = (ec ? std::filesystem::path(".") : self.parent_path()) / binary;
    std::vector<std::string> args = {plugin};
    for (const auto& arg : cmd->remaining())
      args.push_back(arg);
    std::vector<char*> argv;
    for (auto& arg : args)
      argv.push_back(arg.data());
    argv.push_back(nullptr);
    ::execv(plugin.c_str(), argv.data());
    int first = errno;
    ::execvp(binary.c_str(), argv.data());  // installed elsewhere on PATH
    Fail(Unavailable(
        "exec " + plugin + ": " + std::strerror(first) +
        (first == ENOENT ? " (the node daemons: bash scripts/build.sh --daemons)" : "")));
  });
}

}  // namespace

void AddDevicePluginCommand(CLI::App& app) {
  AddExecCommand(app, "device-plugin", "tessera-device-plugin",
                 "run the Kubernetes device plugin (tessera-device-plugin; see its --help)");
}

void AddDraPluginCommand(CLI::App& app) {
  AddExecCommand(app, "dra-plugin", "tessera-dra-plugin",
                 "run the Kubernetes DRA kubelet plugin for gpu.tessera.dev "
                 "(tessera-dra-plugin; see its --help)");
}

}  // namespace tessera::cli
