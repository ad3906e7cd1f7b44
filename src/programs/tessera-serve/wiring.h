// tessera-serve's start-up steps, in the order main.cc takes them. Each step ends the process
// through Die (exit 2 for a bad flag, 5 otherwise) when it cannot be taken.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "api/api.h"
#include "backends/backend.h"
#include "backends/kubernetes/cluster_store.h"
#include "backends/kubernetes/kubernetes_backend.h"
#include "backends/kubernetes/node_gpus.h"
#include "backends/kubernetes/objects.h"
#include "common/error.h"
#include "fabricmanager/fabric_health.h"
#include "fabricmanager/fabricmanager.h"
#include "fleet/fleet.h"
#include "health/watch/watch.h"
#include "inventory/inventory.h"
#include "kubernetes/client.h"
#include "kubernetes/kubeconfig.h"
#include "kubernetes/leader_election.h"
#include "serve/mig_demand.h"
#include "serve/serve_flags.h"
#include "serve/service.h"

namespace tessera::serve_program {

using serve::ServeFlags;

// Log lines as JSON objects on stderr, at --log-level (logging.cc).
void SetUpLogging(const std::string& level);
// Logs and prints "tessera serve: <message>", then exits 2 (invalid argument) or 5.
[[noreturn]] void Die(const Error& error);

// Every flag's value, path and program, before anything is made or bound (checks.cc).
Status CheckFlags(const ServeFlags& flags);

// `path` absolute and in normal form, without a trailing slash; as given when that fails.
std::string Absolute(const std::string& path);

// The API listener, bound but not yet accepting: a start that cannot bind ends before anything
// is made (listener.cc).
struct Listener {
  std::unique_ptr<api::Server> server;
  std::string host;
  bool https = false;
};
Listener BindListener(const ServeFlags& flags);

// --data-dir made (0700), and what it says about the store (data_dir.cc).
struct DataDir {
  std::string path;              // absolute
  bool ran_before = false;       // an admin token was there: an empty store then is a lost one
  std::string store_kind;        // sqlite or cluster
  std::string admin_token_path;  // --admin-token-file, else <data-dir>/admin.token
};
DataDir PrepareDataDir(const ServeFlags& flags);

// This host's GPUs: inventory, CDI specs, records, topology (host.cc). With the Kubernetes
// backend the GPUs are the nodes' (fleet mode), and the inventory stays empty.
struct HostGpus {
  bool fleet_mode = false;
  std::string root;          // absolute --root
  std::string nvml_library;  // empty: none
  inventory::Inventory inventory;
  serve::Service::Host host;
};
HostGpus ReadHostGpus(const ServeFlags& flags);
// host.cc's steps MIG by demand takes again after a change: the CDI specs of `inv` written under
// --cdi-dir (the names of the devices of --cdi-kind), and a GPU's MIG devices as slices.
Result<std::set<std::string>> WriteHostCdiSpecs(const ServeFlags& flags,
                                                const inventory::Inventory& inv);
void AddMigSlices(const inventory::PciDevice& gpu, int index, const std::string& cdi_kind,
                  const std::set<std::string>& cdi_names, fleet::GpuRecord& record);
// The capability device nodes (/dev/nvidia-caps/nvidia-cap<N> under `root`) of the GPU's MIG
// devices that procfs names and /dev lacks, made as nvidia-modprobe -f makes them; whether any
// was made (mig_shaper.cc).
bool MakeMigCapNodes(const std::string& root, const inventory::PciDevice& gpu);
// MIG by demand on this host (--mig-by-demand instances; mig_shaper.cc): null when off, in fleet
// mode, or when no GPU is in MIG mode with a known board.
std::shared_ptr<serve::MigShaper> HostMigShaper(const ServeFlags& flags, const HostGpus& host);

// The service's options from the flags (service_options.cc).
serve::ServiceOptions ServiceOptionsFrom(const ServeFlags& flags, const DataDir& data,
                                         const HostGpus& host);

// --fabric-manager: the fabric manager's partitions become the placement table, and its
// activator goes around the backend; null without the flag (fabric.cc).
std::shared_ptr<fabricmanager::PartitionActivator> OpenFabricManager(
    const ServeFlags& flags, const DataDir& data, const HostGpus& host,
    serve::ServiceOptions& options);
// With --fabric-manager (`fabric` set; nullptr otherwise): failed NVLinks (a GPU's or an
// NVSwitch's) become kFabricFatal health signals handed to the service's fault handling, each
// new failure once; the fabric manager is asked on a connection of the watch's own every
// kFabricHealthInterval (fabric.cc).
inline constexpr std::chrono::seconds kFabricHealthInterval{5};
std::unique_ptr<fabricmanager::FabricHealthWatch> WatchFabricHealth(
    const ServeFlags& flags, const fabricmanager::PartitionActivator* fabric,
    serve::Service& service);

// --backend (backend.cc). `leading` is asked before the tenancy controller acts (--leader-elect).
struct Backend {
  std::unique_ptr<backends::ContainerBackend> backend;
  std::optional<k8s::ClientConfig> k8s_config;  // --backend kubernetes
};
Backend CreateBackend(const ServeFlags& flags, const DataDir& data,
                      const std::function<bool()>& leading);

// The admin token of a store in a file (admin_token.cc): an existing file is used as is;
// otherwise one is generated, written 0600 and printed once on stdout.
Result<std::string> AdminToken(const std::string& path);
// The admin token's hash with the store in the cluster: the file this replica has, else the
// hash the cluster holds, else a new token that the first replica writes and shows.
std::string ClusterAdminTokenHash(k8s::ClusterStore& cluster, const ServeFlags& flags,
                                  const std::string& path);

// The store: a SQLite file under --data-dir, or the cluster's objects (store.cc). With the
// cluster's, the backend starts a container only once its placement is durable there.
struct Store {
  std::unique_ptr<fleet::Store> store;
  k8s::ClusterStore* cluster = nullptr;  // owned by `store`
  std::string admin_hash;
};
Store OpenStore(const ServeFlags& flags, const DataDir& data, Backend& backend,
                const std::function<bool()>& leading, serve::ServiceOptions& options);

// Several replicas (replicas.cc). Where the cluster store keeps its Secrets and ConfigMaps: the
// control plane's namespace.
std::string StateNamespace(const ServeFlags& flags);
// Other replicas' writes reach `service` from here on; returns once every watch has listed.
void FollowCluster(k8s::ClusterStore& cluster, serve::Service& service);
// --leader-elect: the elector that starts and stops `service`'s leading parts, also stored in
// `elected` for those who ask whether this replica leads.
std::unique_ptr<k8s::LeaderElector> ElectLeader(const ServeFlags& flags,
                                                const k8s::ClientConfig& config,
                                                serve::Service& service,
                                                std::atomic<k8s::LeaderElector*>& elected);
// This host's GPUs watched for faults (embedded mode, unless --no-health): each fault goes to
// `service`, whose recovery resets through the monitor and the commands. Null when nothing is
// watched (health.cc). Goes before `service`. With `fabric` (partition mode) a GPU is reset
// only once no NVLink partition holds it.
std::unique_ptr<health::Monitor> WatchHostHealth(
    const ServeFlags& flags, const HostGpus& host, serve::Service& service,
    std::shared_ptr<const fabricmanager::PartitionActivator> fabric);

// The nodes' published GPUs, handed to `service` each time they change.
std::unique_ptr<backends::NodeGpuWatch> WatchNodeGpus(const k8s::ClientConfig& config,
                                                      const std::string& cdi_kind,
                                                      serve::Service& service);

}  // namespace tessera::serve_program
