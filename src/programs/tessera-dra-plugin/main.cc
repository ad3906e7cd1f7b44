// tessera-dra-plugin: the DRA kubelet plugin for driver gpu.tessera.dev as its own executable,
// so gRPC stays out of `tessera` (which execs this for `tessera dra-plugin`). What it serves and
// publishes: src/dra/plugin.h.
#include <malloc.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>

#include "backends/kubernetes/node_gpus.h"
#include "dra/plugin.h"
#include "dra/plugin_options.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) {
  g_stop = true;
}

int Fail(const tessera::Error& error) {
  spdlog::error("{}", error.message);
  return error.category == tessera::ErrorCategory::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // One malloc arena: glibc gives each of gRPC's threads its own, whose partly used heaps were
  // ~0.3 MB of peak RSS, and kubelet's few calls never contend for it. Before any thread starts.
  ::mallopt(M_ARENA_MAX, 1);
  tessera::dra::PluginOptions options;
  CLI::App app{"tessera-dra-plugin: the DRA kubelet plugin for gpu.tessera.dev"};
  tessera::dra::AddPluginFlags(app, options);
  CLI11_PARSE(app, argc, argv);
  spdlog::set_default_logger(spdlog::stderr_logger_st("tessera-dra-plugin"));
  spdlog::set_level(spdlog::level::from_str(options.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
  if (auto completed = tessera::dra::CompletePluginOptions(options); !completed)
    return Fail(completed.error());

  // With --recover=false the taints follow the node agent's published health of each GPU.
  options.published_health = [](const nlohmann::json& node)
      -> tessera::Result<std::map<std::string, tessera::health::GpuHealth>> {
    auto gpus = tessera::k8s::NodeGpusOf(node);
    if (!gpus) return gpus.error();
    std::map<std::string, tessera::health::GpuHealth> out;
    if (*gpus) {
      for (const auto& gpu : (*gpus)->gpus)
        out[gpu.pci_address] = gpu.health;
    }
    return out;
  };
  auto plugin = tessera::dra::KubeletPlugin::Start(options);
  if (!plugin) return Fail(plugin.error());
  ::signal(SIGTERM, OnSignal);
  ::signal(SIGINT, OnSignal);
  if (auto ran = (*plugin)->Run(g_stop); !ran) return Fail(ran.error());
  return 0;
}
