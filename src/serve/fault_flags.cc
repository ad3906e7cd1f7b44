// tessera-serve's GPU fault flags (serve_flags.h): the classification table, the recovery
// commands and policy, and how the health monitor polls (docs/faults.md).
#include <CLI/CLI.hpp>

#include "serve/serve_flags.h"

namespace tessera::serve {

void AddFaultFlags(CLI::App& app, ServeFlags& flags) {
  app.add_flag("--no-health", flags.no_health,
               "Do not watch this host's GPUs for faults (no containment, no recovery)");
  app.add_option("--fault-table", flags.fault_table,
                 "Xid classification table (YAML) over the built-in one: its entries replace "
                 "those of the same Xid");
  app.add_option("--gpu-reset-command", flags.gpu_reset_command,
                 "Resets a faulted GPU once it holds no process ({uuid}, {pci}, {index} filled "
                 "in; empty: never reset, a faulted GPU stays out)")
      ->capture_default_str();
  app.add_option("--gpu-self-test-command", flags.gpu_self_test_command,
                 "Active self-test of a reset GPU before it returns (exit 0 = pass; dcgmi diag "
                 "output is read; default: none, NVML state only)");
  app.add_option("--gpu-recovery-timeout", flags.gpu_recovery_timeout,
                 "How long one reset or self-test may run (1s to 2h)")
      ->capture_default_str();
  app.add_option("--recovery-max-attempts", flags.recovery_max_attempts,
                 "Failed recovery attempts for one fault before the GPU stays out")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--max-faults", flags.max_faults,
                 "A GPU taken out this many times within --fault-window stays out")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--fault-window", flags.fault_window,
                 "The window --max-faults counts in (1m to 3660d)")
      ->capture_default_str();
  app.add_option("--health-poll-interval", flags.health_poll_interval,
                 "How often NVML state and sysfs counters are read between events (100ms to 1h)")
      ->capture_default_str();
}

Result<FaultOptions> FaultOptionsFrom(const ServeFlags& flags) {
  FaultOptions out;
  if (!flags.fault_table.empty()) {
    auto table = health::XidTable::Load(flags.fault_table);
    if (!table) return table.error().WithContext("--fault-table " + flags.fault_table);
    out.table = std::move(*table);
  }
  out.policy.max_attempts = flags.recovery_max_attempts;
  out.policy.max_faults = flags.max_faults;
  auto window = ParseDurationFlag(kFaultWindowFlag, flags.fault_window);
  if (!window) return window.error();
  out.policy.fault_window = *window;
  return out;
}

}  // namespace tessera::serve
