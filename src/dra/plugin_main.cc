// tessera-dra-plugin: the DRA kubelet plugin for driver gpu.tessera.dev as its own executable,
// so gRPC stays out of `tessera` (which execs this for `tessera dra-plugin`).
//  - serves DRAPlugin v1 + v1beta1 on <plugin-dir>/dra.sock, then Registration on
//    <registry-dir>/<driver>-reg.sock (the endpoint must answer before kubelet can dial it);
//  - recreates either socket when it is deleted;
//  - publishes the node's ResourceSlice and re-publishes it when health or the lease file change;
//    the same health feeds the DRAResourceHealth stream.
#include <malloc.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/atomic_file.h"
#include "common/untrusted_text.h"
#include "dra/dra.h"
#include "dra/server.h"
#include "fabricmanager/fabricmanager.h"
#include "kubernetes/client.h"
#include "kubernetes/kubeconfig.h"

namespace {

using namespace tessera;

std::atomic<bool> g_stop{false};
void OnSignal(int) {
  g_stop = true;
}

const k8s::Resource kClaims{"/apis/resource.k8s.io/v1", "resourceclaims", true};
const k8s::Resource kSlices{"/apis/resource.k8s.io/v1", "resourceslices", false};

// kubelet gives a prepare call 45 s. One attempt of a claim GET gets 10 s, and the whole fetch
// with its retries 20 s: a claim whose answer trickles fails on its own, well within kubelet's
// call, and the answer is refused as it arrives once it passes the claim limit.
constexpr std::chrono::milliseconds kClaimAttemptTime{10000};
constexpr k8s::CallLimits kClaimFetch{dra::kMaxClaimBytes, std::chrono::milliseconds(20000)};

// Presence of each GPU's device nodes under the host root: a GPU whose node vanished (unbound,
// fallen off the bus) is unhealthy.
std::set<std::string> Unhealthy(const dra::NodeDevices& node) {
  std::set<std::string> out;
  for (const auto& device : node.devices) {
    for (const auto& n : device.edits.device_nodes) {
      std::string path = n.host_path.empty() ? n.path : n.host_path;
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) out.insert(device.pci_address);
    }
  }
  return out;
}

// Create or replace the slice; a 409 (someone else wrote it) re-reads and retries.
Status PublishSlice(k8s::Client& client, const dra::Driver& driver, int64_t* generation) {
  const auto& config = driver.config();
  std::string name = dra::SliceName(config.driver, config.node_name);
  for (int attempt = 0; attempt < 5; ++attempt) {
    dra::SliceOptions options{config.driver, config.node_name, *generation};
    auto live = client.Get(kSlices, "", name);
    if (!live && live.error().category != ErrorCategory::kNotFound) return live.error();
    if (live) {
      // generation only grows: a restarted plugin continues after the live slice's.
      const k8s::Json& pool = k8s::ObjectField(k8s::ObjectField(*live, "spec"), "pool");
      int64_t seen = 0;
      if (auto it = pool.find("generation"); it != pool.end() && it->is_number_integer())
        seen = std::clamp<int64_t>(it->get<int64_t>(), 0, INT64_MAX / 2);
      options.generation = std::max(*generation, seen + 1);
      std::string version =
          k8s::StringField(k8s::ObjectField(*live, "metadata"), "resourceVersion");
      auto body = k8s::Json::parse(
          dra::BuildResourceSlice(driver.node(), driver.Published(), options, version));
      auto replaced = client.Replace(kSlices, "", name, body);
      if (replaced) {
        *generation = options.generation;
        return Ok();
      }
      if (replaced.error().category != ErrorCategory::kFailedPrecondition) return replaced.error();
    } else {
      auto body =
          k8s::Json::parse(dra::BuildResourceSlice(driver.node(), driver.Published(), options));
      auto created = client.Create(kSlices, "", body);
      if (created) return Ok();
      if (created.error().category != ErrorCategory::kAlreadyExists) return created.error();
    }
    spdlog::info("slice {}: conflict, re-reading", name);
  }
  return Unavailable("slice " + name + ": still conflicting after 5 attempts");
}

bool SocketPresent(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

int main(int argc, char** argv) {
  // One malloc arena: glibc gives each of gRPC's threads its own, whose partly used heaps were
  // ~0.3 MB of peak RSS, and kubelet's few calls never contend for it. Before any thread starts.
  ::mallopt(M_ARENA_MAX, 1);
  std::string node_name, root = "/", kubeconfig, driver_name = dra::kDefaultDriverName;
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";
  std::string plugin_dir = "/var/lib/kubelet/plugins/gpu.tessera.dev";
  std::string cdi_dir = "/var/run/cdi", lease_file = "/run/tessera/leases.json", mode = "auto";
  std::string log_level = "info";
  int poll_ms = 200;
  CLI::App app{"tessera-dra-plugin: the DRA kubelet plugin for gpu.tessera.dev"};
  app.add_option("--node-name", node_name, "This node's name (default: $NODE_NAME)");
  app.add_option("--root", root, "Host root")->capture_default_str();
  app.add_option("--kubeconfig", kubeconfig, "kubeconfig (default: in-cluster service account)");
  app.add_option("--driver-name", driver_name, "DRA driver name")->capture_default_str();
  app.add_option("--registry-dir", registry_dir, "kubelet plugin registry dir")
      ->capture_default_str();
  app.add_option("--plugin-dir", plugin_dir, "Dir of dra.sock and the prepared claims")
      ->capture_default_str();
  app.add_option("--cdi-dir", cdi_dir, "Where per-claim CDI specs are written")
      ->capture_default_str();
  app.add_option("--lease-file", lease_file, "Node lease file")->capture_default_str();
  app.add_option("--mode", mode, "auto, driver or vfio")->capture_default_str();
  std::string nvml_library = "libnvidia-ml.so.1";
  app.add_option("--nvml", nvml_library, "NVML library for MIG devices (\"\" = none)")
      ->capture_default_str();
  app.add_option("--poll-ms", poll_ms, "Socket, health and lease check interval")
      ->capture_default_str();
  std::string fabric_manager, nvfm_library = "libnvfm.so.1", partition_table;
  app.add_option("--fabric-manager", fabric_manager,
                 "NVIDIA Fabric Manager API (host[:port] or unix:PATH): a claim must be exactly "
                 "one NVLink partition, activated at prepare and deactivated at unprepare");
  app.add_option("--nvfm-library", nvfm_library, "Fabric Manager client library")
      ->capture_default_str();
  app.add_option("--partition-table", partition_table,
                 "Partition table (preset or file): checked against the fabric manager's; its "
                 "pci_addresses place GPU modules where NVML cannot");
  app.add_option("--log-level", log_level)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_default_logger(spdlog::stderr_logger_st("tessera-dra-plugin"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
  auto fail = [](const Error& error) {
    spdlog::error("{}", error.message);
    return error.category == ErrorCategory::kInvalidArgument ? 2 : 1;
  };
  if (node_name.empty()) {
    if (const char* env = std::getenv("NODE_NAME")) node_name = env;
  }
  if (node_name.empty()) return fail(InvalidArgument("--node-name (or $NODE_NAME) is required"));
  auto cdi_mode = cdi::ParseMode(mode);
  if (!cdi_mode) return fail(cdi_mode.error());

  inventory::ReadOptions read;
  read.root = root;
  read.nvml_library = nvml_library;  // MIG devices' profiles, UUIDs and sizes
  auto inventory = inventory::ReadInventory(read);
  if (!inventory) return fail(inventory.error().WithContext("inventory of " + root));
  dra::NodeOptions node_options;
  node_options.mode = *cdi_mode;
  // Shared NVSwitch mode: this node's one owner of partitions (claims hold them).
  std::shared_ptr<fabricmanager::PartitionActivator> fabric;
  if (!fabric_manager.empty()) {
    auto address = fabricmanager::ParseFabricAddress(fabric_manager);
    if (!address) return fail(address.error().WithContext("--fabric-manager"));
    fabricmanager::FabricSetup setup;
    setup.nvfm.library = nvfm_library;
    setup.nvfm.address = *address;
    if (!partition_table.empty()) {
      auto table = fabricmanager::LoadPartitionTable(partition_table);
      if (!table) return fail(table.error().WithContext("--partition-table"));
      setup.table = std::move(*table);
    }
    setup.nvml_library = nvml_library;
    for (const auto* gpu : inventory->Gpus())
      setup.host_gpus.push_back(gpu->pci_address);
    std::error_code made;
    std::filesystem::create_directories(plugin_dir, made);
    setup.ledger_path = plugin_dir + "/fabric-partitions.json";
    auto opened = fabricmanager::OpenFabric(std::move(setup));
    if (!opened) return fail(opened.error().WithContext("--fabric-manager"));
    node_options.partitions = opened->table;
    fabric = std::move(opened->activator);
    spdlog::info("fabric manager: {}", fabric->Describe());
  }
  auto node = dra::DescribeNode(*inventory, node_options);
  if (!node) return fail(node.error());
  for (const auto& warning : node->warnings)
    spdlog::warn("{}", warning);

  auto client_config =
      kubeconfig.empty() ? k8s::InClusterConfig() : k8s::LoadKubeconfig(kubeconfig);
  if (!client_config) return fail(client_config.error());
  client_config->user_agent = "tessera-dra-plugin";
  client_config->timeout = kClaimAttemptTime;
  // Prepares run at once, each GET on a connection of its own: a slow claim delays no other.
  k8s::Client claims_client(*client_config);
  k8s::Client slices_client(*client_config);

  std::error_code ec;
  std::filesystem::create_directories(plugin_dir, ec);
  std::filesystem::create_directories(registry_dir, ec);
  std::filesystem::create_directories(cdi_dir, ec);
  dra::DriverConfig config{driver_name, node_name, cdi_dir, plugin_dir};
  // The claim's bytes as the server sent them: the driver checks their size and nesting before it
  // parses them, once.
  dra::Driver driver(config, std::move(*node),
                     [&](const std::string& ns, const std::string& name) -> Result<std::string> {
                       return claims_client.GetBytes(kClaims, ns, name, kClaimFetch);
                     });
  auto loaded = driver.Load();
  if (!loaded) return fail(loaded.error());
  for (const auto& dropped : *loaded)
    spdlog::warn("{}", Excerpt(dropped, 600));
  if (fabric) {
    // Prepared claims keep their partitions; what nothing holds is deactivated.
    auto prepared = driver.PreparedClaimUids();
    std::set<std::string> alive(prepared.begin(), prepared.end());
    if (auto reconciled =
            fabric->Reconcile([&](const std::string& uid) { return alive.count(uid) > 0; });
        !reconciled)
      spdlog::error("fabric partitions: {}", reconciled.error().message);
    driver.SetFabric(
        {[fabric](const std::string& uid, const std::vector<std::string>& gpus) -> Status {
           auto activated = fabric->Activate(uid, gpus);
           if (!activated) return activated.error();
           return Ok();
         },
         [fabric](const std::string& uid) { return fabric->Deactivate(uid); }});
    fabric->StartWatch();
  }

  auto read_state = [&]() -> Result<dra::DeviceState> {
    dra::DeviceState state;
    auto leases = deviceplugin::ReadLeaseFile(lease_file);
    if (!leases) return leases.error();
    state.leases = std::move(*leases);
    state.unhealthy = Unhealthy(driver.node());
    return state;
  };
  std::string state_problem;  // the lease file's last problem, logged once
  if (auto state = read_state(); state) {
    driver.SetState(std::move(*state));
  } else {
    state_problem = state.error().message;
    spdlog::error("{}", state_problem);
  }

  std::string dra_socket = plugin_dir + "/dra.sock";
  std::string reg_socket = registry_dir + "/" + driver_name + "-reg.sock";
  dra::PluginInfo info{driver_name, dra_socket};
  auto on_status = [](bool registered, const std::string& error) {
    if (registered) {
      spdlog::info("kubelet registered the plugin");
    } else {
      spdlog::error("kubelet refused the registration: {}", error);
    }
  };
  std::unique_ptr<dra::SocketServer> dra_server, reg_server;
  ::signal(SIGTERM, OnSignal);
  ::signal(SIGINT, OnSignal);

  int64_t generation = 1;
  bool slice_dirty = true;
  auto next_publish = std::chrono::steady_clock::now();
  auto backoff = std::chrono::milliseconds(200);
  while (!g_stop) {
    // The DRA socket first: kubelet dials the endpoint as soon as registration succeeds.
    if (!dra_server || !SocketPresent(dra_socket)) {
      if (dra_server) spdlog::warn("{} was removed; serving it again", dra_socket);
      dra_server.reset();
      auto served = dra::SocketServer::ServeDra(&driver, dra_socket);
      if (!served) return fail(served.error());
      dra_server = std::move(*served);
      spdlog::info("serving DRAPlugin v1, v1beta1 and DRAResourceHealth v1alpha1 on {}",
                   dra_socket);
    }
    if (!reg_server || !SocketPresent(reg_socket)) {
      if (reg_server) spdlog::warn("{} was removed; serving it again", reg_socket);
      reg_server.reset();
      auto served = dra::SocketServer::ServeRegistration(info, on_status, reg_socket);
      if (!served) return fail(served.error());
      reg_server = std::move(*served);
      spdlog::info("serving Registration on {}", reg_socket);
    }
    if (auto state = read_state(); state) {
      state_problem.clear();
      if (driver.SetState(std::move(*state))) {
        slice_dirty = true;
        next_publish = std::chrono::steady_clock::now();
        spdlog::info("published devices changed: {} of {}", driver.Published().size(),
                     driver.node().devices.size());
      }
    } else if (state.error().message != state_problem) {
      // Once per problem, not on every poll; the last good state stays in force.
      state_problem = state.error().message;
      spdlog::error("{}; keeping the last good leases", state_problem);
    }
    if (slice_dirty && std::chrono::steady_clock::now() >= next_publish) {
      auto published = PublishSlice(slices_client, driver, &generation);
      if (published) {
        slice_dirty = false;
        backoff = std::chrono::milliseconds(200);
        spdlog::info("ResourceSlice {} generation {} published",
                     dra::SliceName(driver_name, node_name), generation);
      } else {
        spdlog::error("publish ResourceSlice: {}", published.error().message);
        next_publish = std::chrono::steady_clock::now() + backoff;
        backoff = std::min(backoff * 2, std::chrono::milliseconds(10000));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  reg_server.reset();
  dra_server.reset();
  ::unlink(reg_socket.c_str());
  ::unlink(dra_socket.c_str());
  return 0;
}
