// Each subcommand lives in its own cmd_<name>.cc and registers itself on the root app here.
// Subcommands report failure by throwing CLI::RuntimeError(exit_code) after printing to stderr.
#pragma once

#include <CLI/CLI.hpp>

#include "client/tls_channel.h"
#include "common/error.h"

namespace tessera::cli {

// Exit codes: 0 ok, 1 check failed (validate/doctor found problems), 2 usage or bad input,
// 3 not found, 4 unavailable (or busy: 429), 5 refused by the object's state (409) or internal,
// 6 not allowed (no token, or the token may not). `run` and `wait` exit with the container's own
// code, 125 when it failed to run.
int ExitCodeFor(const Error& error);
// Prints "tessera: <message>" to stderr and returns the exit code for the error.
[[noreturn]] void Fail(const Error& error);

// `tessera windows ...` (cmd_windows.cc).
void AddWindowsCommand(CLI::App& app);

void AddInventoryCommand(CLI::App& app);
void AddCdiCommand(CLI::App& app);
void AddFleetCommand(CLI::App& app);
// `tessera fleet simulate-mig` under `fleet` (cmd_fleet_mig.cc).
void AddFleetMigSubcommand(CLI::App& fleet);
void AddServeCommand(CLI::App& app);  // `tessera serve` (cmd_serve.cc)
void AddRunCommand(CLI::App& app);    // `tessera run` (cmd_run.cc)
void AddLogsCommand(CLI::App& app);   // `tessera logs` (cmd_logs.cc)
void AddStopCommand(CLI::App& app);   // `tessera stop` (cmd_stop.cc)
void AddWaitCommand(CLI::App& app);   // `tessera wait` (cmd_wait.cc)
void AddRuntimeConfigCommand(CLI::App& app);
void AddDoctorCommand(CLI::App& app);
void AddDevicePluginCommand(CLI::App& app);
void AddDraPluginCommand(CLI::App& app);
void AddGpuCheckCommand(CLI::App& app);  // the firmware check (cmd_gpu_check.cc)
void AddMigCommand(CLI::App& app);       // `tessera mig apply` (cmd_mig.cc)
void AddFabricCommand(CLI::App& app);    // `tessera fabric ...` (cmd_fabric.cc)
void AddTopCommand(CLI::App& app);       // `tessera top` (cmd_top.cc)
void AddPsCommand(CLI::App& app);        // `tessera ps` (cmd_ps.cc)
void AddInspectCommand(CLI::App& app);   // `tessera inspect` (cmd_inspect.cc)
void AddQueueCommand(CLI::App& app);     // `tessera queue` (cmd_queue.cc)
void AddUsageCommand(CLI::App& app);     // `tessera usage` (cmd_usage.cc)

// `tessera login`, `tessera config ...` (the client config's contexts) and `tessera completion
// bash|zsh` (cmd_login.cc, cmd_config.cc, cmd_completion.cc).
void AddLoginCommand(CLI::App& app);
void AddConfigCommand(CLI::App& app);
void AddCompletionCommand(CLI::App& app);
void AddTenancyCommand(CLI::App& app);  // `tessera tenancy ...` (cmd_tenancy.cc)
void AddTokenCommand(CLI::App& app);    // `tessera token ...` (cmd_token.cc)
void AddGpusCommand(CLI::App& app);     // `tessera gpus`, `tessera gpu ...` (cmd_gpus.cc)
void AddAuditCommand(CLI::App& app);    // `tessera audit` (cmd_audit.cc)

}  // namespace tessera::cli
