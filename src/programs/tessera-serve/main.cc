// tessera-serve: GPU containers as a service on this host. `tessera serve` execs it.
//
// Start-up: the HTTP API's listener (bound, not yet accepting), inventory of --root, CDI specs
// for its GPUs, the store under --data-dir, the admin token, reconciliation with the backend, the
// lease file, then the API accepts. Each step is in its own file of this folder (wiring.h); the
// flags are serve's (serve/serve_flags.h).
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>

#include "cdi/cdi.h"
#include "common/atomic_file.h"
#include "serve/fabric_backend.h"
#include "wiring.h"

namespace {

using namespace tessera;
using namespace tessera::serve_program;

int Run(const ServeFlags& flags) {
  SetUpLogging(flags.log_level);
  if (auto checked = CheckFlags(flags); !checked) Die(checked.error());
  ::signal(SIGPIPE, SIG_IGN);
  // SIGINT/SIGTERM are handled by the server's signal set; block them in every other thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);

  Listener listener = BindListener(flags);
  const DataDir data = PrepareDataDir(flags);
  HostGpus host = ReadHostGpus(flags);
  serve::ServiceOptions options = ServiceOptionsFrom(flags, data, host);
  auto fabric = OpenFabricManager(flags, data, host, options);

  // The elector once it exists (--leader-elect): asked by the scheduler before each placement and
  // by the backend's tenancy controller.
  std::atomic<k8s::LeaderElector*> elected{nullptr};
  auto leading = [&elected] {
    auto* current = elected.load();
    return current && current->IsLeader();
  };
  Backend backend = CreateBackend(flags, data, leading);
  if (fabric) backend.backend = serve::ActivatePartitionsAround(std::move(backend.backend), fabric);
  Store store = OpenStore(flags, data, backend, leading, options);

  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  auto created = serve::Service::Create(std::move(options), std::move(host.host),
                                        std::move(store.store), std::move(backend.backend));
  if (!created) Die(created.error());
  std::unique_ptr<serve::Service> service = std::move(*created);
  service->SetAdminTokenHash(store.admin_hash);
  // Reconciled by the service's start (the backend's list); from here on a restarted fabric
  // manager is sent the active list.
  if (fabric) fabric->StartWatch();
  auto fabric_health = WatchFabricHealth(flags, fabric.get(), *service);
  if (flags.leader_elect) service->SetLeadershipCheck(leading);
  // Faults are contained from here on; recovery starts with the leading parts.
  std::unique_ptr<health::Monitor> health_monitor = WatchHostHealth(flags, host, *service, fabric);
  if (store.cluster) FollowCluster(*store.cluster, *service);
  // With leader election only the replica holding the Lease runs placement, the lease flow and
  // the checks; it is asked again right before every placement.
  std::unique_ptr<k8s::LeaderElector> elector;
  if (flags.leader_elect) {
    if (!backend.k8s_config) Die(InvalidArgument("--leader-elect needs --backend kubernetes"));
    elector = ElectLeader(flags, *backend.k8s_config, *service, elected);
  } else {
    service->Start();
  }
  std::unique_ptr<backends::NodeGpuWatch> node_watch;
  if (backend.k8s_config) node_watch = WatchNodeGpus(*backend.k8s_config, flags.cdi_kind, *service);

  // Up once SIGINT/SIGTERM are handled: a stop right after the port file appears is a clean one.
  api::Server& server = *listener.server;
  server.Run(service.get(), [&] {
    if (!flags.port_file.empty()) {
      if (auto status = WriteFileAtomically(flags.port_file, std::to_string(server.port()) + "\n");
          !status)
        Die(status.error());
    }
    spdlog::info("serving {}://{}:{} (data {}, root {}, backend {}, {} GPUs{})",
                 listener.https ? "https" : "http", listener.host, server.port(), data.path,
                 host.root, flags.backend, host.inventory.Gpus().size(),
                 host.fleet_mode ? " here; the nodes' come from the cluster" : "");
  });
  // The service (and its store's pending callbacks) goes before the server they answer through;
  // the node watch, which calls into the service, before both.
  node_watch.reset();
  fabric_health.reset();
  health_monitor.reset();
  // Nor may the cluster store's watches report into a service that is going.
  if (store.cluster) store.cluster->Unfollow();
  elected = nullptr;
  elector.reset();
  service.reset();
  listener.server.reset();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::serve::ServeFlags flags;
  flags.cdi_dir = tessera::cdi::kDefaultSpecDir;
  CLI::App app{"tessera serve: GPU containers as a service on this host"};
  tessera::serve::AddServeFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  return Run(flags);
}
