// Activating NVLink fabric partitions (shared NVSwitch mode) through NVIDIA Fabric Manager.
//
//  - FabricManager: one interface, two implementations: an adapter to the fabric manager's client
//    library `libnvfm.so.1`, loaded with dlopen at run time so tessera never needs it to build or
//    start, and a file-backed one (hosts without a fabric manager, development).
//  - Module map: partitions name GPUs by module ID (the fabric manager's physicalId), and on H100
//    and later the fabric manager reports an empty UUID and a zeroed bus ID, so module -> PCI
//    address comes from NVML's module ID where the driver is loaded, else from the partition
//    table's pci_addresses; sources that disagree are an error, never a guess.
//  - PartitionLedger (pure) and PartitionActivator (its I/O shell): the one owner of a node's
//    partitions. Holders (a container, a claim, a Pod) hold the partition whose GPU set equals
//    theirs; a partition is active while someone holds it. Operations are serialised; a watch
//    thread notices a fabric manager that restarted (it answers nothing but the active-list call
//    until told the list) and sends it the held list.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.h"
#include "topology/topology.h"

namespace tessera::fabricmanager {

// ---------------------------------------------------------------------------------------------
// Where the fabric manager listens.

inline constexpr uint16_t kDefaultPort = 6666;  // FM_CMD_PORT_NUMBER

struct FabricAddress {
  bool unix_socket = false;
  std::string host;  // IPv4 address or host name (TCP)
  uint16_t port = kDefaultPort;
  std::string path;  // socket path (unix)

  // "10.0.0.5:6666" or "unix:/run/nvidia-fabricmanager/socket".
  std::string ToString() const;
  friend bool operator==(const FabricAddress&, const FabricAddress&) = default;
};

// `host[:port]` (port 6666 by default) or `unix:PATH` (an absolute path). Host names are DNS
// names or IPv4 addresses; the result must fit the API's 256-byte address field.
Result<FabricAddress> ParseFabricAddress(std::string_view text);

// ---------------------------------------------------------------------------------------------
// What the fabric manager reports.

struct PartitionGpu {
  int module_id = 0;        // the fabric manager's physicalId: the GPU module ID
  std::string pci_address;  // canonical "0000:18:00.0"; empty when zeroed (H100 and later)
  std::string uuid;         // empty on H100 and later
  int nvlinks_available = 0;
  int max_nvlinks = 0;
};

struct SupportedPartition {
  uint32_t id = 0;
  bool active = false;
  std::vector<PartitionGpu> gpus;

  int nvlinks() const;  // sum of the GPUs' available NVLinks
  std::vector<int> modules() const;
};

// A GPU or NVSwitch whose NVLink ports failed (fmGetNvlinkFailedDevices).
struct NvlinkFailedDevice {
  std::string pci_address;      // canonical "0000:05:00.0"; empty when none usable was reported
  std::string uuid;             // printable bytes only; may be empty
  std::vector<uint32_t> ports;  // the failed ports, sorted, each once
  friend bool operator==(const NvlinkFailedDevice&, const NvlinkFailedDevice&) = default;
};

struct NvlinkFailedDevices {
  std::vector<NvlinkFailedDevice> gpus;
  std::vector<NvlinkFailedDevice> switches;
  bool empty() const { return gpus.empty() && switches.empty(); }
  friend bool operator==(const NvlinkFailedDevices&, const NvlinkFailedDevices&) = default;
};

// Not thread-safe: one owner calls it (PartitionActivator serialises every call).
class FabricManager {
 public:
  virtual ~FabricManager() = default;
  virtual Result<std::vector<SupportedPartition>> ListPartitions() = 0;
  virtual Status Activate(uint32_t partition_id) = 0;
  virtual Status Deactivate(uint32_t partition_id) = 0;
  // After a fabric-manager restart (in its --restart resiliency mode), tells it which partitions
  // are still active; an empty list must be sent too.
  virtual Status SetActivatedPartitions(const std::vector<uint32_t>& partition_ids) = 0;
  // The GPUs and NVSwitches with failed NVLinks. Fabric managers of boards whose NVLinks train
  // themselves (HGX H100 and later) always answer an empty list. Unavailable where an
  // implementation (or the client library) cannot ask.
  virtual Result<NvlinkFailedDevices> GetNvlinkFailedDevices() {
    return Unavailable(Describe() + ": the failed-NVLink list cannot be asked");
  }
  // For logs: what it talks to and how ("libnvfm.so.1 -> unix:/run/... (connect v2)").
  virtual std::string Describe() const = 0;
};

// What makes a fabric manager's partition list unusable, every defect named (at most 16, then a
// count): no partitions or more than 64; a partition ID listed twice; a partition without GPUs or
// with more GPUs than the board has modules; a module ID outside 1..board (a module nobody has);
// a module twice in one partition; two partitions with the same GPUs; a bus ID that is no PCI
// address (quoted as an excerpt). The board is `board_modules` when a partition table names it,
// else the API's 16. Serve refuses such a list at start (OpenFabric, TableFromPartitions) and
// `tessera fabric partitions` exits non-zero on it: both call this.
std::vector<std::string> ListingDefects(const std::vector<SupportedPartition>& partitions,
                                        int board_modules = 0);
// InvalidArgument naming every defect; Ok for a usable list.
Status ValidateListing(const std::vector<SupportedPartition>& partitions, int board_modules = 0);

// An active list for fmSetActivatedFabricPartitions: at most 64 IDs, each once (InvalidArgument
// naming the first ID given twice). Checked before anything is sent.
Status CheckActivatedList(const std::vector<uint32_t>& partition_ids);

// The partition table (module IDs and the module -> PCI address map) a fabric manager reports.
Result<topology::PartitionTable> TableFromPartitions(
    const std::vector<SupportedPartition>& partitions, const std::string& board);

// File-backed: `state_path` holds {"active": [ids]}; a missing file means none active. Every call
// reads the file and writes it back atomically, so separate processes see each other's changes.
Result<std::unique_ptr<FabricManager>> OpenFileFabricManager(topology::PartitionTable table,
                                                             std::string state_path);

// Every call into the fabric manager (connect, list, activate, deactivate, set the active list)
// has a deadline: one that does not answer in time fails with an Unavailable error IsNoAnswer
// recognises, its connection is dropped, and the fabric manager is not asked again for one
// deadline (calls meanwhile fail at once with the same reason). An activation trains NVLinks, so
// the deadline must stay well above how long the board takes for that.
inline constexpr unsigned kDefaultCallDeadlineMs = 10000;
inline constexpr std::string_view kNoAnswer = "no answer within";
// The error is a call that got no answer in time (or was not sent because one just did not):
// retrying at once would only wait again.
bool IsNoAnswer(const Error& error);

struct NvfmOptions {
  std::string library = "libnvfm.so.1";  // a name for the dynamic loader's search, or a path
  FabricAddress address = {false, "127.0.0.1", kDefaultPort, ""};
  unsigned timeout_ms = kDefaultCallDeadlineMs;  // each call's deadline (fmConnect's limit too)
};

// Loads the library, initialises it and connects: with the v2 connect structure first, and with
// v1 when the library answers FM_ST_VERSION_MISMATCH (older fabric managers). Unavailable when
// the library or one of its functions is missing or the fabric manager cannot be reached. Host
// names are resolved to an IPv4 address here (the API takes `<ipv4>:<port>`).
Result<std::unique_ptr<FabricManager>> ConnectNvfm(const NvfmOptions& options);

// ParseFabricAddress, then ConnectNvfm; errors say "fabric manager at <address>: ...".
Result<std::unique_ptr<FabricManager>> ConnectNvfmAt(std::string_view address,
                                                     const std::string& library,
                                                     unsigned deadline_ms = kDefaultCallDeadlineMs);

// ---------------------------------------------------------------------------------------------
// Module ID -> PCI address.

struct ModuleSources {
  std::vector<SupportedPartition> partitions;  // the fabric manager's list
  // An operator's table (--partition-table): its partitions must equal the fabric manager's, its
  // pci_addresses are the map where NVML cannot be asked (VM-isolation hosts have no driver).
  std::optional<topology::PartitionTable> table;
  std::map<std::string, int> nvml_modules;  // PCI address -> NVML module ID (driver loaded)
  std::vector<std::string> host_gpus;       // this host's GPUs (PCI addresses); empty: unknown
};

struct ModuleMap {
  std::map<int, std::string> pci_by_module;
  std::vector<int> unmapped;  // modules of the fabric manager's list no source places
};

// Merges the sources. Errors (InvalidArgument, naming the module and both sources): the table's
// partitions differ from the fabric manager's; two sources put a module at different addresses;
// one address for two modules; an NVML module ID no partition has; an address that is no GPU of
// this host (when host_gpus is known).
Result<ModuleMap> MapModules(const ModuleSources& sources);

// The table placement runs on: the fabric manager's partitions with a complete module -> PCI map
// covering exactly this host's GPUs. FailedPrecondition naming what is missing otherwise.
Result<topology::PartitionTable> PlacementTable(const ModuleSources& sources,
                                                const std::string& board);

// ---------------------------------------------------------------------------------------------
// Who holds which partition (pure).

class PartitionLedger {
 public:
  // `planner` is built from a table whose pci_addresses map every module.
  explicit PartitionLedger(std::shared_ptr<const topology::PartitionPlanner> planner);

  // The partition whose GPU set equals `pci_addresses` (any order). FailedPrecondition for a
  // set that is no partition, naming the sizes partitions have; InvalidArgument for an address
  // that is no module of the table.
  Result<uint32_t> PartitionOf(const std::vector<std::string>& pci_addresses) const;

  // Records that `holder` holds `partition`. Answers whether someone held it already (then it is
  // active and needs no activation). FailedPrecondition when the holder holds another partition
  // or the partition overlaps one another holder holds.
  Result<bool> Hold(const std::string& holder, uint32_t partition);
  // Forgets `holder`; answers its partition when nobody else holds it (to deactivate).
  std::optional<uint32_t> Release(const std::string& holder);

  std::optional<uint32_t> HeldBy(const std::string& holder) const;
  std::vector<uint32_t> Held() const;  // sorted, each once
  const std::map<std::string, uint32_t>& holders() const { return holders_; }
  const topology::PartitionPlanner& planner() const { return *planner_; }

  // {"holders": {"<holder>": id}}; Parse is strict (bounded, known IDs, no overlap).
  std::string ToJson() const;
  static Result<PartitionLedger> Parse(std::string_view json,
                                       std::shared_ptr<const topology::PartitionPlanner> planner);

 private:
  std::shared_ptr<const topology::PartitionPlanner> planner_;
  std::map<std::string, uint32_t> holders_;
};

// What to do so that the fabric manager's active list matches the holders that are still alive:
// holders whose container / claim / Pod is gone are dropped; a partition nothing holds is
// deactivated (one owner per node: a partition someone activated by hand is deactivated too); a
// held partition the fabric manager reports inactive is activated again.
struct ReconcilePlan {
  std::vector<std::string> drop;     // holders
  std::vector<uint32_t> deactivate;  // first
  std::vector<uint32_t> activate;    // then
  bool empty() const { return drop.empty() && deactivate.empty() && activate.empty(); }
};
ReconcilePlan PlanReconcile(const PartitionLedger& ledger, const std::vector<uint32_t>& fm_active,
                            const std::function<bool(const std::string& holder)>& alive);

// The partition IDs a ledger file records, read without a table: what a restarted fabric
// manager must be told before it answers the partition list the table comes from.
Result<std::vector<uint32_t>> LedgerPartitionIds(std::string_view json);

// Names `modules` for messages: "{1,3}".
std::string ModuleSet(const std::vector<int>& modules);

// ---------------------------------------------------------------------------------------------
// The node's one owner of partitions (I/O shell around the ledger).

struct ActivatorOptions {
  // Opens a fresh connection; called again after a connection was lost (a restarted fabric
  // manager no longer knows the old one).
  std::function<Result<std::unique_ptr<FabricManager>>()> connect;
  std::unique_ptr<FabricManager> connected;  // an open connection to start with (optional)
  topology::PartitionTable table;            // placement table: pci_addresses map every module
  std::string state_path;                    // the ledger, written atomically on every change
  // The restart watch: how often the fabric manager is asked for its list (at most 2 s, so that
  // the active list reaches a restarted one well within 10 s).
  std::chrono::milliseconds poll_interval{2000};
  // A deactivation the fabric manager refuses for now (restarting) is retried this long before
  // Deactivate gives up; the watch keeps retrying after that.
  std::chrono::milliseconds deactivate_retry_for{30000};
};

struct ActivatorStats {
  uint64_t activations = 0;    // partitions activated
  uint64_t deactivations = 0;  // partitions deactivated
  uint64_t activation_failures = 0;
  uint64_t deactivation_failures = 0;  // Deactivate calls that gave up (the watch retries)
  uint64_t restarts = 0;               // fabric-manager restarts noticed (active list re-sent)
  uint64_t active = 0;                 // partitions held now
  // Time from noticing a restart to the accepted active list, last one (ms).
  int64_t last_resend_ms = -1;
};

// ---------------------------------------------------------------------------------------------
// Setting up a node's activator (what serve, the DRA plugin and the node agent call at start).

// A partition table named on a command line: a built-in preset (hgx-h100-8gpu, ...) or a
// .yaml/.json file.
Result<topology::PartitionTable> LoadPartitionTable(const std::string& preset_or_file);

// NVML's module ID of each GPU (PCI address -> module ID), from `library` (libnvidia-ml.so.1 or a
// path). GPUs NVML reports no module ID for are left out. Unavailable when NVML cannot be opened
// (no driver on this host: VM isolation).
Result<std::map<std::string, int>> NvmlModuleIds(const std::string& library,
                                                 const std::vector<std::string>& gpus);

// The module map of this host as operators see it (listing, doctor): `partitions` from the
// fabric manager, the table `table_spec` names (preset or file; empty: none), NVML's module IDs
// of `host_gpus` where `nvml_library` opens (empty: not asked). Gaps are allowed; disagreements
// are errors (MapModules).
Result<ModuleMap> MapHostModules(const std::vector<SupportedPartition>& partitions,
                                 const std::string& table_spec,
                                 const std::vector<std::string>& host_gpus,
                                 const std::string& nvml_library);

struct FabricSetup {
  NvfmOptions nvfm;
  std::optional<topology::PartitionTable> table;  // --partition-table (board, pci_addresses)
  std::string nvml_library;                       // empty: NVML is not asked
  std::vector<std::string> host_gpus;             // this host's GPUs (PCI addresses)
  std::string ledger_path;
  std::chrono::milliseconds poll_interval{2000};
};

class PartitionActivator;
struct Fabric {
  std::unique_ptr<PartitionActivator> activator;
  topology::PartitionTable table;  // the placement table (pci_addresses complete)
};

// Connects, lists the partitions (a restarted fabric manager waiting for the active list is sent
// the ledger's partitions first), maps modules to this host's GPUs and opens the activator. Does
// not reconcile and starts no thread. Errors name the fabric manager's address.
Result<Fabric> OpenFabric(FabricSetup setup);

class PartitionActivator {
 public:
  // Reads the ledger and makes first contact: a fabric manager that answers only the active-list
  // call (restarted while tessera was down) gets the held list. Starts no thread.
  static Result<std::unique_ptr<PartitionActivator>> Open(ActivatorOptions options);
  ~PartitionActivator();
  PartitionActivator(const PartitionActivator&) = delete;
  PartitionActivator& operator=(const PartitionActivator&) = delete;

  // Starts the restart watch (poll_interval). Stopped by the destructor.
  void StartWatch();

  // Activates the partition whose GPUs are `pci_addresses` for `holder` (idempotent when the
  // holder or another holder of the same partition already has it active). The error names the
  // partition and the fabric manager's answer; nothing stays recorded or active then.
  Result<uint32_t> Activate(const std::string& holder,
                            const std::vector<std::string>& pci_addresses);
  // Makes sure the holder's recorded partition is active (a start resumed after a restart).
  // NotFound when the holder holds none.
  Status EnsureActive(const std::string& holder);
  // Releases the holder; deactivates its partition when nobody else holds it. Unknown holders
  // succeed.
  Status Deactivate(const std::string& holder);
  // Drops holders that are not `alive` and makes the fabric manager's active list equal to the
  // partitions of the rest. `alive` must answer for the holders present when it is called.
  Status Reconcile(const std::function<bool(const std::string& holder)>& alive);
  // One round of the restart watch (what the thread runs every poll_interval).
  void WatchOnce();

  std::optional<uint32_t> HeldBy(const std::string& holder) const;
  std::vector<std::string> Holders() const;
  // Whether a partition containing one of these GPUs (PCI addresses) is held, or was released
  // but its deactivation has not gone through yet (the watch retries it). A GPU is reset only
  // once this answers false for it: the fabric manager's rule is deactivate first, then reset.
  bool HoldsAnyOf(const std::vector<std::string>& pci_addresses) const;
  ActivatorStats stats() const;
  // Prometheus text: tessera_fabric_* series.
  std::string MetricsText() const;
  const topology::PartitionTable& table() const;
  std::string Describe() const;

 private:
  explicit PartitionActivator(ActivatorOptions options, PartitionLedger ledger);
  // mu_ held.
  Result<FabricManager*> ConnectedLocked();
  // Forgets a connection whose call got no answer (it is never used again); answers `error`.
  Error DropLocked(const Error& error);
  Status SaveLocked();
  Result<std::vector<uint32_t>> ActiveOnFabricLocked();
  Status ResendActiveListLocked(const char* why);
  Status ActivateOnFabricLocked(uint32_t partition);
  Status DeactivateOnFabricLocked(uint32_t partition);

  ActivatorOptions options_;
  mutable std::mutex mu_;  // serialises every fabric-manager call, ledger_, fabric_, stats_
  PartitionLedger ledger_;
  std::unique_ptr<FabricManager> fabric_;  // null until (re)connected
  std::vector<uint32_t> pending_deactivation_;
  ActivatorStats stats_;
  std::string last_watch_problem_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread watch_;
};

}  // namespace tessera::fabricmanager
