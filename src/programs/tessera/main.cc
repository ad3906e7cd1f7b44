// The `tessera` command: its subcommands (src/cli, one cmd_*.cc each) on one root app.
#include <string>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera: safe GPU access for containers, from one host to a fleet"};
  app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION);
  app.require_subcommand(1);
  tessera::cli::AddWindowsCommand(app);
  tessera::cli::AddInventoryCommand(app);
  tessera::cli::AddCdiCommand(app);
  tessera::cli::AddFleetCommand(app);
  tessera::cli::AddServeCommand(app);
  tessera::cli::AddRunCommand(app);
  tessera::cli::AddLogsCommand(app);
  tessera::cli::AddStopCommand(app);
  tessera::cli::AddWaitCommand(app);
  tessera::cli::AddRuntimeConfigCommand(app);
  tessera::cli::AddDoctorCommand(app);
  tessera::cli::AddDevicePluginCommand(app);
  tessera::cli::AddDraPluginCommand(app);
  tessera::cli::AddGpuCheckCommand(app);
  tessera::cli::AddMigCommand(app);
  tessera::cli::AddFabricCommand(app);
  tessera::cli::AddTopCommand(app);
  tessera::cli::AddPsCommand(app);
  tessera::cli::AddInspectCommand(app);
  tessera::cli::AddQueueCommand(app);
  tessera::cli::AddUsageCommand(app);
  tessera::cli::AddLoginCommand(app);
  tessera::cli::AddConfigCommand(app);
  tessera::cli::AddCompletionCommand(app);
  tessera::cli::AddTenancyCommand(app);
  tessera::cli::AddTokenCommand(app);
  tessera::cli::AddGpusCommand(app);
  tessera::cli::AddAuditCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& failure) {
    return app.exit(failure);  // a command's own exit code (commands.h)
  } catch (const CLI::ParseError& error) {
    // --help and --version exit 0; a bad flag or argument is bad input: 2, as documented, rather
    // than CLI11's own codes.
    return app.exit(error) == 0 ? 0 : 2;
  }
  return 0;
}
