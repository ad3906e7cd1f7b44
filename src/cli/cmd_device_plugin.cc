// `tessera device-plugin ...`: execs tessera-device-plugin from the directory of this binary, so
// gRPC never loads into `tessera` itself (see src/deviceplugin).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "cli/commands.h"

namespace tessera::cli {

void AddDevicePluginCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("device-plugin",
                                 "run the Kubernetes device plugin (tessera-device-plugin; "
                                 "see its --help)");
  cmd->prefix_command();  // every argument goes to the plugin unparsed
  cmd->set_help_flag();
  cmd->callback([cmd] {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    std::string plugin =
        (ec ? std::filesystem::path(".") : self.parent_path()) / "tessera-device-plugin";
    std::vector<std::string> args = {plugin};
    for (const auto& arg : cmd->remaining())
      args.push_back(arg);
    std::vector<char*> argv;
    for (auto& arg : args)
      argv.push_back(arg.data());
    argv.push_back(nullptr);
    ::execv(plugin.c_str(), argv.data());
    int first = errno;
    ::execvp("tessera-device-plugin", argv.data());  // installed elsewhere on PATH
    Fail(Unavailable("exec " + plugin + ": " + std::strerror(first)));
  });
}

}  // namespace tessera::cli
