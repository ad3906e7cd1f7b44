// The `tessera` command. Only wiring: each subcommand is in its own cmd_*.cc.
#include <cstdio>

#include "cli/commands.h"

namespace tessera::cli {

int ExitCodeFor(const Error& error) {
  switch (error.category) {
    case ErrorCategory::kInvalidArgument:
      return 2;
    case ErrorCategory::kNotFound:
      return 3;
    case ErrorCategory::kUnavailable:
      return 4;
    default:
      return 5;
  }
}

void Fail(const Error& error) {
  std::fprintf(stderr, "tessera: %s\n", error.message.c_str());
  throw CLI::RuntimeError(ExitCodeFor(error));
}

}  // namespace tessera::cli

int main(int argc, char** argv) {
  CLI::App app{"tessera: safe GPU access for containers, from one host to a fleet"};
  app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION);
  app.require_subcommand(1);
  tessera::cli::AddWindowsCommand(app);
  tessera::cli::AddInventoryCommand(app);
  tessera::cli::AddCdiCommand(app);
  tessera::cli::AddFleetCommand(app);
  tessera::cli::AddServeCommand(app);
  tessera::cli::AddRuntimeConfigCommand(app);
  tessera::cli::AddDoctorCommand(app);
  tessera::cli::AddDevicePluginCommand(app);
  tessera::cli::AddDraPluginCommand(app);
  tessera::cli::AddGpuCheckCommand(app);
  tessera::cli::AddMigCommand(app);
  tessera::cli::AddFabricCommand(app);
  tessera::cli::AddTopCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
