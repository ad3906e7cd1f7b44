// `tessera runtime-config`: prints the runtime configuration GPU containers need.
#include <iostream>

#include "cli/commands.h"
#include "runtimes/runtimes.h"

namespace tessera::cli {

void AddRuntimeConfigCommand(CLI::App& app) {
  struct Options {
    std::string target = "containerd";
    std::string runtime = "runc";
    runtimes::ContainerdConfigOptions config;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "runtime-config", "Print containerd or podman configuration for runc, gVisor or Kata");
  cmd->add_option("target", options->target, "containerd | podman | runsc-toml")
      ->check(CLI::IsMember({"containerd", "podman", "runsc-toml"}))
      ->capture_default_str();
  cmd->add_option("--for", options->target, "Same as the positional target")
      ->check(CLI::IsMember({"containerd", "podman", "runsc-toml"}));
  cmd->add_option("--runtime", options->runtime, "runc | gvisor | kata")
      ->check(CLI::IsMember({"runc", "gvisor", "kata"}))
      ->capture_default_str();
  cmd->add_option("--runsc-config", options->config.runsc_config_path, "Where runsc.toml goes")
      ->capture_default_str();
  cmd->add_option("--kata-config", options->config.kata_config_path, "Kata GPU configuration")
      ->capture_default_str();
  cmd->callback([options] {
    auto runtime = runtimes::ParseRuntime(options->runtime);
    if (!runtime) Fail(runtime.error());
    options->config.runtime = *runtime;
    if (options->target == "podman") {
      std::cout << runtimes::PodmanContainersConf(*runtime, options->config);
    } else if (options->target == "runsc-toml") {
      std::cout << runtimes::RunscToml();
    } else {
      std::cout << runtimes::ContainerdConfig(options->config);
    }
  });
}

}  // namespace tessera::cli
