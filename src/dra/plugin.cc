#include "dra/plugin.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <set>
#include <thread>

#include "common/bounded_file.h"
#include "common/untrusted_text.h"
#include "dra/fault_watch.h"
#include "dra/mig_instances.h"
#include "dra/server.h"
#include "fabricmanager/fabricmanager.h"
#include "kubernetes/client.h"
#include "kubernetes/kubeconfig.h"

namespace tessera::dra {
namespace {

const k8s::Resource kClaims{"/apis/resource.k8s.io/v1", "resourceclaims", true};
const k8s::Resource kSlices{"/apis/resource.k8s.io/v1", "resourceslices", false};
const k8s::Resource kNodes{"/api/v1", "nodes", false};
// With recover off, how often the Node's published GPU health is read.
constexpr std::chrono::milliseconds kFollowInterval{1000};

// kubelet gives a prepare call 45 s. One attempt of a claim GET gets 10 s, and the whole fetch
// with its retries 20 s: a claim whose answer trickles fails on its own, well within kubelet's
// call, and the answer is refused as it arrives once it passes the claim limit.
constexpr std::chrono::milliseconds kClaimAttemptTime{10000};
constexpr k8s::CallLimits kClaimFetch{kMaxClaimBytes, std::chrono::milliseconds(20000)};

// Presence of each GPU's device nodes under the host root: a GPU whose node vanished (unbound,
// fallen off the bus) is unhealthy.
std::set<std::string> Unhealthy(const NodeDevices& node) {
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

// The generation of a live slice of the pool, 0 when it has none.
int64_t LiveGeneration(const k8s::Json& live) {
  const k8s::Json& pool = k8s::ObjectField(k8s::ObjectField(live, "spec"), "pool");
  if (auto it = pool.find("generation"); it != pool.end() && it->is_number_integer())
    return std::clamp<int64_t>(it->get<int64_t>(), 0, INT64_MAX / 2);
  return 0;
}

// Creates or replaces every slice of the pool with one generation, after the live slices' own: a
// restarted plugin continues after them, and the scheduler uses only slices of the pool's newest
// generation. Returns false on a conflict (someone else wrote a slice).
Result<bool> WritePool(k8s::Client& client, const Driver& driver, int64_t* generation) {
  const auto& config = driver.config();
  const size_t count = PoolSliceCount(driver.node());
  std::vector<std::optional<k8s::Json>> live(count);
  int64_t next = *generation;
  for (size_t i = 0; i < count; ++i) {
    auto got = client.Get(kSlices, "", PoolSliceName(config.driver, config.node_name, i));
    if (!got && got.error().category != ErrorCategory::kNotFound) return got.error();
    if (got) {
      next = std::max(next, LiveGeneration(*got) + 1);
      live[i] = std::move(*got);
    }
  }
  SliceOptions options{config.driver, config.node_name, next};
  auto slices = BuildResourceSlices(driver.node(), driver.Published(), options, driver.Taints());
  for (size_t i = 0; i < count && i < slices.size(); ++i) {
    auto body = k8s::Json::parse(slices[i]);
    std::string name = body["metadata"]["name"];
    if (live[i]) {
      body["metadata"]["resourceVersion"] =
          k8s::StringField(k8s::ObjectField(*live[i], "metadata"), "resourceVersion");
      auto replaced = client.Replace(kSlices, "", name, body);
      if (replaced) continue;
      if (replaced.error().category != ErrorCategory::kFailedPrecondition) return replaced.error();
      return false;
    }
    auto created = client.Create(kSlices, "", body);
    if (created) continue;
    if (created.error().category != ErrorCategory::kAlreadyExists) return created.error();
    return false;
  }
  *generation = next;
  return true;
}

// The pool's slices; a 409 (someone else wrote one) re-reads and retries.
Status PublishSlice(k8s::Client& client, const Driver& driver, int64_t* generation) {
  const auto& config = driver.config();
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto written = WritePool(client, driver, generation);
    if (!written) return written.error();
    if (*written) return Ok();
    spdlog::info("slices of pool {}: conflict, re-reading", config.node_name);
  }
  return Unavailable("slices of pool " + config.node_name + ": still conflicting after 5 attempts");
}

// MIG by demand: the profile tables (each --mig-profiles file, then the built-in H100 table).
Result<std::vector<mig::ProfileTable>> ReadMigTables(const PluginOptions& options) {
  std::vector<mig::ProfileTable> tables;
  for (const auto& path : options.mig_profiles) {
    auto text = ReadBoundedFile(path, kMaxConfigFileBytes);
    if (!text) return text.error().WithContext("--mig-profiles");
    auto table = mig::ParseProfileTable(*text);
    if (!table) return table.error().WithContext(path);
    tables.push_back(std::move(*table));
  }
  tables.push_back(mig::BuiltinH100Table());
  return tables;
}

bool SocketPresent(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// Shared NVSwitch mode: this node's one owner of partitions (claims hold them). Sets the
// partitions `node_options` publishes.
Result<std::shared_ptr<fabricmanager::PartitionActivator>> OpenNodeFabric(
    const PluginOptions& options, const inventory::Inventory& inventory,
    NodeOptions* node_options) {
  auto address = fabricmanager::ParseFabricAddress(options.fabric_manager);
  if (!address) return address.error().WithContext("--fabric-manager");
  fabricmanager::FabricSetup setup;
  setup.nvfm.library = options.nvfm_library;
  setup.nvfm.address = *address;
  if (!options.partition_table.empty()) {
    auto table = fabricmanager::LoadPartitionTable(options.partition_table);
    if (!table) return table.error().WithContext("--partition-table");
    setup.table = std::move(*table);
  }
  setup.nvml_library = options.nvml_library;
  for (const auto* gpu : inventory.Gpus())
    setup.host_gpus.push_back(gpu->pci_address);
  std::error_code made;
  std::filesystem::create_directories(options.plugin_dir, made);
  setup.ledger_path = options.plugin_dir + "/fabric-partitions.json";
  auto opened = fabricmanager::OpenFabric(std::move(setup));
  if (!opened) return opened.error().WithContext("--fabric-manager");
  node_options->partitions = opened->table;
  std::shared_ptr<fabricmanager::PartitionActivator> fabric = std::move(opened->activator);
  spdlog::info("fabric manager: {}", fabric->Describe());
  return fabric;
}

// Prepared claims keep their partitions; what nothing holds is deactivated. Every prepare and
// unprepare goes through the fabric from then on.
void AttachFabric(Driver& driver, std::shared_ptr<fabricmanager::PartitionActivator> fabric) {
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

void LogRegistration(bool registered, const std::string& error) {
  if (registered) {
    spdlog::info("kubelet registered the plugin");
  } else {
    spdlog::error("kubelet refused the registration: {}", error);
  }
}

}  // namespace

// Destroyed in reverse: the servers first, then the driver they call, then the clients.
struct KubeletPlugin::State {
  PluginOptions options;
  std::shared_ptr<fabricmanager::PartitionActivator> fabric;
  // Prepares run at once, each GET on a connection of its own: a slow claim delays no other.
  std::unique_ptr<k8s::Client> claims_client;
  std::unique_ptr<k8s::Client> slices_client;
  std::unique_ptr<Driver> driver;
  std::unique_ptr<FaultWatch> faults;  // null: device presence is the only health
  deviceplugin::LeaseMap leases;       // the last good lease file
  std::string state_problem;           // the lease file's last problem, logged once
  std::string dra_socket;
  std::string reg_socket;
  int64_t generation = 1;
  bool slice_dirty = true;
  std::chrono::steady_clock::time_point next_publish = std::chrono::steady_clock::now();
  std::chrono::milliseconds backoff{200};
  std::chrono::steady_clock::time_point next_follow = std::chrono::steady_clock::now();
  std::string follow_problem;  // the Node's last problem, logged once
  std::unique_ptr<SocketServer> dra_server;
  std::unique_ptr<SocketServer> reg_server;

  std::shared_ptr<const nvml::Library> nvml;  // MIG by demand only
  Result<NodeDevices> DescribeThisNode();
  Status SetUpMigByDemand(const inventory::Inventory& inventory, NodeOptions& node_options);
  Status Connect();
  Status LoadDriver(NodeDevices node);
  Status WatchFaults();
  DeviceState ReadState();
  Status ServeSockets();
  void RefreshState();
  void PublishWhenDue();
  void FollowNodeAgent();
};

Result<NodeDevices> KubeletPlugin::State::DescribeThisNode() {
  inventory::ReadOptions read;
  read.root = options.root;
  read.nvml_library = options.nvml_library;  // MIG devices' profiles, UUIDs and sizes
  auto inventory = inventory::ReadInventory(read);
  if (!inventory) return inventory.error().WithContext("inventory of " + options.root);
  NodeOptions node_options;
  node_options.mode = options.cdi_mode;
  if (!options.fabric_manager.empty()) {
    auto opened = OpenNodeFabric(options, *inventory, &node_options);
    if (!opened) return opened.error();
    fabric = std::move(*opened);
  }
  if (options.mig_by_demand) {
    if (auto set_up = SetUpMigByDemand(*inventory, node_options); !set_up) return set_up.error();
  }
  auto node = DescribeNode(*inventory, node_options);
  if (!node) return node.error();
  for (const auto& warning : node->warnings)
    spdlog::warn("{}", warning);
  return node;
}

// NVML, the profile tables, and the instances prepared claims hold (read from the claim files
// before the driver loads them: those instances are this plugin's, not someone else's).
Status KubeletPlugin::State::SetUpMigByDemand(const inventory::Inventory& inventory,
                                              NodeOptions& node_options) {
  auto opened = nvml::Library::Open(options.nvml_library);
  if (!opened) return opened.error().WithContext("--mig-by-demand");
  nvml = std::shared_ptr<const nvml::Library>(std::move(*opened));
  auto tables = ReadMigTables(options);
  if (!tables) return tables.error();
  node_options.mig_by_demand = true;
  node_options.mig_tables = std::move(*tables);
  node_options.profile_memory = ProfileMemory(*nvml, inventory);
  std::vector<std::string> dropped;
  const std::string dir = options.plugin_dir + "/prepared";
  auto prepared = ReadPreparedClaims(dir, &dropped);
  if (!prepared) return prepared.error();
  // Instances a prepare made before the plugin was killed, found by their intents' places.
  for (const auto& adopted : AdoptIntents(NvmlMigHooks(nvml, options.root), dir, *prepared))
    spdlog::warn("{}", Excerpt(adopted, 600));
  node_options.owned_instances = Driver::OwnedInstances(*prepared);
  return Ok();
}

Status KubeletPlugin::State::Connect() {
  auto client_config =
      options.kubeconfig.empty() ? k8s::InClusterConfig() : k8s::LoadKubeconfig(options.kubeconfig);
  if (!client_config) return client_config.error();
  client_config->user_agent = "tessera-dra-plugin";
  client_config->timeout = kClaimAttemptTime;
  claims_client = std::make_unique<k8s::Client>(*client_config);
  slices_client = std::make_unique<k8s::Client>(*client_config);
  return Ok();
}

Status KubeletPlugin::State::LoadDriver(NodeDevices node) {
  std::error_code ec;
  std::filesystem::create_directories(options.plugin_dir, ec);
  std::filesystem::create_directories(options.registry_dir, ec);
  std::filesystem::create_directories(options.cdi_dir, ec);
  DriverConfig config{options.driver_name, options.node_name, options.cdi_dir, options.plugin_dir};
  // The claim's bytes as the server sent them: the driver checks their size and nesting before it
  // parses them, once.
  k8s::Client* claims = claims_client.get();
  driver = std::make_unique<Driver>(
      config, std::move(node),
      [claims](const std::string& ns, const std::string& name) -> Result<std::string> {
        return claims->GetBytes(kClaims, ns, name, kClaimFetch);
      });
  auto loaded = driver->Load();
  if (!loaded) return loaded.error();
  for (const auto& dropped : *loaded)
    spdlog::warn("{}", Excerpt(dropped, 600));
  if (fabric) AttachFabric(*driver, fabric);
  if (nvml) driver->SetMig(NvmlMigHooks(nvml, options.root));
  return Ok();
}

// The GPU fault watch; a node where nothing can be watched runs on device presence alone.
Status KubeletPlugin::State::WatchFaults() {
  auto watch = FaultWatch::Start(options, *driver);
  if (!watch) {
    if (watch.error().category == ErrorCategory::kInvalidArgument) return watch.error();
    spdlog::warn("GPU fault watch off: {}; a GPU whose device vanishes is still withdrawn",
                 watch.error().message);
    return Ok();
  }
  faults = std::move(*watch);
  spdlog::info("watching GPU faults; recovery {}",
               options.recover ? "on" : "off (the node agent resets faulted GPUs)");
  return Ok();
}

// Presence, faults and leases now. A lease file that cannot be read keeps the last good leases;
// its problem is logged once.
DeviceState KubeletPlugin::State::ReadState() {
  DeviceState state;
  if (auto read = deviceplugin::ReadLeaseFile(options.lease_file); read) {
    state_problem.clear();
    leases = std::move(*read);
  } else if (read.error().message != state_problem) {
    state_problem = read.error().message;
    spdlog::error("{}; keeping the last good leases", state_problem);
  }
  state.leases = leases;
  state.unhealthy = Unhealthy(driver->node());
  if (faults) state.faults = faults->Faults();
  return state;
}

// The DRA socket first: kubelet dials the endpoint as soon as registration succeeds.
Status KubeletPlugin::State::ServeSockets() {
  if (!dra_server || !SocketPresent(dra_socket)) {
    if (dra_server) spdlog::warn("{} was removed; serving it again", dra_socket);
    dra_server.reset();
    auto served = SocketServer::ServeDra(driver.get(), dra_socket);
    if (!served) return served.error();
    dra_server = std::move(*served);
    spdlog::info("serving DRAPlugin v1, v1beta1 and DRAResourceHealth v1alpha1 on {}", dra_socket);
  }
  if (!reg_server || !SocketPresent(reg_socket)) {
    if (reg_server) spdlog::warn("{} was removed; serving it again", reg_socket);
    reg_server.reset();
    PluginInfo info{options.driver_name, dra_socket};
    auto served = SocketServer::ServeRegistration(info, LogRegistration, reg_socket);
    if (!served) return served.error();
    reg_server = std::move(*served);
    spdlog::info("serving Registration on {}", reg_socket);
  }
  return Ok();
}

void KubeletPlugin::State::RefreshState() {
  if (driver->SetState(ReadState())) {
    slice_dirty = true;
    next_publish = std::chrono::steady_clock::now();
    spdlog::info("published devices changed: {} of {}, {} tainted", driver->Published().size(),
                 driver->node().devices.size(), driver->Taints().size());
  }
}

void KubeletPlugin::State::PublishWhenDue() {
  if (!slice_dirty || std::chrono::steady_clock::now() < next_publish) return;
  auto published = PublishSlice(*slices_client, *driver, &generation);
  if (published) {
    slice_dirty = false;
    backoff = std::chrono::milliseconds(200);
    spdlog::info("ResourceSlice {} generation {} published ({} slices in the pool)",
                 SliceName(options.driver_name, options.node_name), generation,
                 PoolSliceCount(driver->node()));
  } else {
    spdlog::error("publish ResourceSlice: {}", published.error().message);
    next_publish = std::chrono::steady_clock::now() + backoff;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(10000));
  }
}

// Recover off: the node agent recovers the GPUs and publishes their health on this node's Node;
// the taints follow it. A Node that cannot be read or parsed keeps the taints as they are.
void KubeletPlugin::State::FollowNodeAgent() {
  if (options.recover || !faults || !options.published_health) return;
  if (std::chrono::steady_clock::now() < next_follow) return;
  next_follow = std::chrono::steady_clock::now() + kFollowInterval;
  auto node = slices_client->Get(kNodes, "", options.node_name);
  Result<std::map<std::string, health::GpuHealth>> published =
      node ? options.published_health(*node)
           : Result<std::map<std::string, health::GpuHealth>>(node.error());
  if (!published) {
    if (published.error().message != follow_problem) {
      follow_problem = published.error().message;
      spdlog::warn("node {}: {}; the GPU taints stay as they are", options.node_name,
                   Excerpt(follow_problem, 600));
    }
    return;
  }
  follow_problem.clear();
  if (faults->Follow(*published))
    spdlog::info("GPU taints follow the node agent's published health");
}

KubeletPlugin::KubeletPlugin(std::unique_ptr<State> state) : state_(std::move(state)) {}
KubeletPlugin::~KubeletPlugin() = default;

Result<std::unique_ptr<KubeletPlugin>> KubeletPlugin::Start(const PluginOptions& options) {
  auto state = std::make_unique<State>();
  state->options = options;
  auto node = state->DescribeThisNode();
  if (!node) return node.error();
  if (auto connected = state->Connect(); !connected) return connected.error();
  if (auto loaded = state->LoadDriver(std::move(*node)); !loaded) return loaded.error();
  if (auto watched = state->WatchFaults(); !watched) return watched.error();
  state->driver->SetState(state->ReadState());
  state->dra_socket = options.plugin_dir + "/dra.sock";
  state->reg_socket = options.registry_dir + "/" + options.driver_name + "-reg.sock";
  return std::unique_ptr<KubeletPlugin>(new KubeletPlugin(std::move(state)));
}

Status KubeletPlugin::Run(const std::atomic<bool>& stop) {
  State& s = *state_;
  s.next_publish = std::chrono::steady_clock::now();
  while (!stop) {
    if (auto served = s.ServeSockets(); !served) return served.error();
    s.FollowNodeAgent();
    s.RefreshState();
    s.PublishWhenDue();
    std::this_thread::sleep_for(std::chrono::milliseconds(s.options.poll_ms));
  }
  s.reg_server.reset();
  s.dra_server.reset();
  ::unlink(s.reg_socket.c_str());
  ::unlink(s.dra_socket.c_str());
  return Ok();
}

}  // namespace tessera::dra
