// --backend: podman on this host (local), Pods through the API server (kubernetes), or nothing
// (null, for benchmarks).
#include "backends/kubernetes/state_objects.h"
#include "backends/local/local.h"
#include "wiring.h"

namespace tessera::serve_program {
namespace {

// The label value of this service's containers: --instance, else from the data directory.
std::string InstanceOf(const ServeFlags& flags, const DataDir& data) {
  return flags.instance.empty() ? fleet::Sha256Hex(data.path).substr(0, 12) : flags.instance;
}

std::unique_ptr<backends::ContainerBackend> CreateLocal(const ServeFlags& flags,
                                                        const DataDir& data) {
  backends::LocalOptions local;
  local.instance = InstanceOf(flags, data);
  local.tenant_firewall = !flags.no_tenant_firewall;
  local.state_dir = data.path + "/containers";
  auto log_max = serve::ParseSizeFlag(serve::kContainerLogMaxFlag, flags.container_log_max);
  if (!log_max) Die(log_max.error());  // in range (CheckFlags)
  local.log_max_bytes = *log_max;
  return backends::CreateLocalBackend(local);
}

Backend CreateKubernetes(const ServeFlags& flags, const DataDir& data,
                         const std::function<bool()>& leading) {
  Backend out;
  backends::KubernetesBackendOptions k8s_options;
  auto config =
      flags.kubeconfig.empty() ? k8s::InClusterConfig() : k8s::LoadKubeconfig(flags.kubeconfig);
  if (!config) Die(config.error());
  out.k8s_config = *config;
  k8s_options.client = std::move(*config);
  k8s_options.instance = InstanceOf(flags, data);
  k8s_options.node = flags.k8s_node;
  k8s_options.cilium = flags.k8s_cilium;
  auto nfs_mode = k8s::ParseNfsMode(flags.k8s_nfs_mode);
  if (!nfs_mode) Die(nfs_mode.error());
  k8s_options.nfs_mode = *nfs_mode;
  if (flags.leader_elect) k8s_options.leading = leading;
  auto gpu_api = backends::ChooseGpuApi(k8s_options.client, flags.k8s_gpu_api);
  if (!gpu_api) Die(gpu_api.error());
  k8s_options.gpu_api = *gpu_api;
  auto service_type = k8s::ParseServiceType(flags.publish_service_type);
  if (!service_type) Die(service_type.error());
  k8s_options.publish_service_type = *service_type;
  auto ingress = k8s::ParseIngressSources(flags.publish_ingress_from);
  if (!ingress) Die(ingress.error());
  k8s_options.publish_ingress = *ingress;
  out.backend = backends::CreateKubernetesBackend(std::move(k8s_options));
  return out;
}

}  // namespace

Backend CreateBackend(const ServeFlags& flags, const DataDir& data,
                      const std::function<bool()>& leading) {
  if (flags.backend == "local") return {CreateLocal(flags, data), std::nullopt};
  if (flags.backend == "null") return {backends::CreateNullBackend(), std::nullopt};
  if (flags.backend == "kubernetes") return CreateKubernetes(flags, data, leading);
  Die(InvalidArgument("--backend " + flags.backend + ": want local, kubernetes or null"));
}

}  // namespace tessera::serve_program
