// tessera-device-plugin: the kubelet device plugin as its own executable, so that gRPC's start-up
// cost and libraries stay out of `tessera` (which execs this for `tessera device-plugin`).
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "common/untrusted_text.h"
#include "deviceplugin/agent.h"
#include "deviceplugin/plugin_options.h"

int main(int argc, char** argv) {
  CLI::App app{
      "tessera-device-plugin: kubelet device plugin (v1beta1) for GPUs, NVSwitches and "
      "accelerators"};
  app.set_version_flag("--version", std::string("tessera-device-plugin ") + TESSERA_VERSION);
  tessera::deviceplugin::PluginFlags flags;
  tessera::deviceplugin::AddPluginFlags(app, flags);
  CLI11_PARSE(app, argc, argv);

  spdlog::set_default_logger(spdlog::stderr_logger_st("tessera-device-plugin"));
  spdlog::set_level(spdlog::level::from_str(flags.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");

  auto status = tessera::deviceplugin::RunAgent(
      [&flags] { return tessera::deviceplugin::LoadPluginConfig(flags); });
  if (!status) {
    std::fprintf(stderr, "tessera-device-plugin: %s\n",
                 tessera::Excerpt(status.error().message, 2000).c_str());
    return status.error().category == tessera::ErrorCategory::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
