// Per-container GPU telemetry: what each GPU and each process on it does, attributed from the
// driver's own data (NVML's per-process lists by host PID) through the kernel's record of the
// process (/proc/<pid>/cgroup, and its start time in /proc/<pid>/stat) to its container, then to
// the lease and tenancy that container runs for. Nothing a container can write is read: a
// process that maps to no known container, or that is gone, is counted as unattributed, never
// given to a tenant. Every reading is bounded by what the GPU can do (SM use by 100 %, memory by
// the board's, energy by its power limit); each clamp is counted.
//
// The module is pure logic (cgroup paths, process lists, attribution, integration into usage,
// Prometheus rendering) around two readers that touch the host: the NVML reads of one pass
// (NvmlSource) and /proc (ProcReader). The Collector composes them; serve and the node agent
// drive it and keep what it measures durable.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "fleet/fleet.h"
#include "nvml/nvml.h"
#include "tls/tls.h"

namespace tessera::telemetry {

// ---------------------------------------------------------------------------------------------
// Attribution: /proc/<pid>/cgroup -> container (cgroup_path.cc, pure).

enum class Runtime { kPodman, kDocker, kContainerd, kCrio, kKubepods };
const char* RuntimeName(Runtime runtime);

// The container a cgroup path names, as the runtime that made it spells it.
struct CgroupContainer {
  Runtime runtime = Runtime::kPodman;
  std::string container_id;  // 64 lowercase hex digits; empty when only the pod is known
  std::string pod_uid;       // Kubernetes Pod UID (dashes); empty outside Kubernetes
  friend bool operator==(const CgroupContainer&, const CgroupContainer&) = default;
};

// The container of one cgroup path ("/machine.slice/libpod-<id>.scope",
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope",
// "/kubepods/besteffort/pod<uid>/<id>", "/docker/<id>", ...), or nullopt for a path in no
// container (a host process; conmon's own scope). The outermost component that names a
// container decides: a container may create cgroups below its own, never above, so nothing it
// names under itself moves its processes to another container.
std::optional<CgroupContainer> ContainerOfCgroupPath(std::string_view path);

// The container of a process from its /proc/<pid>/cgroup text (cgroup v2 "0::<path>" and v1
// "<n>:<controllers>:<path>" lines). nullopt when no line names a container, or when lines name
// different containers (never guessed). At most kMaxCgroupFile bytes are looked at.
inline constexpr size_t kMaxCgroupFile = 16384;
std::optional<CgroupContainer> ContainerOfProcCgroup(std::string_view text);
// The path of each "<hierarchy>:<controllers>:<path>" line (of the first kMaxCgroupFile bytes).
std::vector<std::string_view> CgroupPathsOf(std::string_view text);

// The start time of a process from its /proc/<pid>/stat text: field 22 (`starttime`, clock ticks
// after boot). The command name (field 2) is the process's own choice and may hold spaces and
// parentheses, so fields are counted after the last ')'. nullopt for text that is not a stat
// line. At most kMaxStatFile bytes are looked at.
inline constexpr size_t kMaxStatFile = 4096;
std::optional<uint64_t> StartTicksOfProcStat(std::string_view text);

// ---------------------------------------------------------------------------------------------
// Who holds what: the directory the caller (serve, the node agent) builds each pass from its
// leases. Attribution looks containers up here by runtime container ID, then by Pod UID.

struct Holder {
  std::string key;           // serve: the container ID; node agent: the GpuLease's name
  std::string tenancy;       // empty: a container of no tenancy (never metered)
  std::string tenancy_uid;   // the incarnation it runs for
  std::string mode = "gpu";  // how it holds its GPUs: "gpu" (whole), "mig", "share"
  // Labels as dcgm-exporter writes them: Kubernetes Pod, namespace and container name (serve:
  // "", the tenancy and the container ID).
  std::string pod, namespace_, container;
  // What its processes' cgroups name: the runtime's container ID (podman's, or the CRI ID), and
  // in Kubernetes the Pod UID.
  std::string runtime_id;
  std::string pod_uid;
  // The GPUs it holds (PCI address) and its share of each: 1 for a whole GPU, a MIG slice's
  // compute slices over the board's.
  std::map<std::string, double> gpus;
  // When it began to hold them (wall ms; 0: unknown, taken as before any pass): a pass that
  // covers time before it charges it only for the part it held.
  int64_t since_ms = 0;
};

struct Directory {
  std::vector<Holder> holders;
};

// ---------------------------------------------------------------------------------------------
// One pass's raw reading of one GPU (what NvmlSource returns; the unit of the pure integration).

struct GpuIdentity {
  std::string pci_address;  // sysfs form, "0000:18:00.0"
  std::string uuid;         // "GPU-…", from NVML when empty
  // NVML's name where NVML answers ("NVIDIA H100 80GB HBM3", dcgm-exporter's modelName), else
  // the inventory's (pci.ids) name.
  std::string model;
  int index = 0;     // NVML order (PCI order)
  int minor = -1;    // /dev/nvidia<minor>; -1 unknown
  std::string node;  // Kubernetes node, or this host's name
};

}  // namespace tessera::telemetry
namespace tessera::inventory {
struct Inventory;
}
namespace tessera::telemetry {

// The host's NVIDIA GPUs on the nvidia driver, as the collector names them (`node`: the
// Hostname label).
std::vector<GpuIdentity> GpuIdentitiesOf(const inventory::Inventory& inventory,
                                         const std::string& node);

struct MigInstanceReading {
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  std::string uuid;
  std::string profile;  // "1g.10gb"
  uint64_t memory_used = 0, memory_total = 0;
  double share = 0;  // its GPU instance's compute slices over the board's
  std::optional<double>
      sm_percent;  // GPM SM utilisation of its GPU instance, where the board has it
};

struct GpuReading {
  GpuIdentity identity;
  bool lost = false;                    // NVML answered GPU_IS_LOST
  std::vector<std::string> errors;      // reads that failed (not "not supported"), for the log
  std::optional<uint32_t> gpu_percent;  // never set for a GPU in MIG mode (no GPU_UTIL per slice)
  std::optional<uint32_t> memory_percent;
  std::optional<uint64_t> memory_used, memory_total;
  std::optional<uint32_t> power_mw;
  std::optional<uint32_t> power_limit_mw;  // enforced now: what bounds the energy counter
  std::optional<uint64_t> energy_mj;       // the driver's counter since it loaded
  std::optional<uint32_t> temperature_c;
  bool mig = false;
  std::vector<MigInstanceReading> mig_instances;
  std::vector<nvml::ProcessMemory> processes;     // compute and MPS lists, merged by PID
  std::vector<nvml::ProcessUtilization> samples;  // newer than the GPU's cursor
  // The driver's sample period, from the spacing of its GPU utilisation samples (0: unknown);
  // each per-process sample covers one such period.
  uint64_t sample_period_us = 0;
  std::vector<nvml::AccountingStats> ended;  // accounting: processes that ended since the cursor
  std::vector<uint64_t> xids;                // Xid events since the last pass
  double nvml_seconds = 0;                   // time spent in NVML for this GPU
  // Wall time of the energy counter's reading (0: the pass's time stands for it): the interval
  // the counter's delta was measured over ends here.
  int64_t read_ms = 0;
};

// Merges NVML's compute and MPS lists (and the lists of a GPU's MIG devices) into one entry per
// PID: a PID listed twice keeps its larger memory figure, never the sum. Drops PID 0 and keeps at
// most `max_processes`. Pure; the process-list fuzz target drives it with raw NVML records.
std::vector<nvml::ProcessMemory> MergeProcessLists(
    const std::vector<std::vector<nvml::ProcessMemory>>& lists, size_t max_processes = 4096);

// ---------------------------------------------------------------------------------------------
// Durable cursors: what the last counted pass saw of each GPU, so that a restarted collector
// counts neither a sample nor a joule twice (kept in the same transaction as the usage).

struct GpuCursor {
  uint64_t sample_us = 0;  // newest process utilisation sample counted
  uint64_t energy_mj = 0;  // energy counter at the last counted pass (0: none yet)
  int64_t sampled_ms = 0;  // wall time of the last counted pass (its GPU read, where known)
  friend bool operator==(const GpuCursor&, const GpuCursor&) = default;
};
using Cursors = std::map<std::string, GpuCursor>;  // by PCI address

// ---------------------------------------------------------------------------------------------
// What one pass measured (integration.cc, pure).

// Measured use: SM-seconds (Σ dt · SM utilisation, in GPU units: a whole GPU busy for one second
// is 1), GiB-seconds of GPU memory, and joules - the figures the fleet's records keep.
using Usage = fleet::MeasuredUsage;

// One of a holder's processes on a GPU: what a share's watchdog sums and, with MPS, ends.
struct HolderProcess {
  uint32_t pid = 0;
  uint64_t used_bytes = 0;
};

// One holder on one GPU in this pass.
struct HolderGpu {
  std::string pci_address;
  uint32_t processes = 0;
  uint64_t memory_bytes = 0;
  double sm_percent = 0;                    // its processes' SM use now, percent of the whole GPU
  Usage delta;                              // measured in this pass
  std::vector<HolderProcess> process_list;  // its `processes`, each with its memory
};

struct HolderReading {
  size_t holder = 0;  // index into the Directory's holders
  std::vector<HolderGpu> gpus;
  Usage delta;  // summed over its GPUs
};

// Readings the integration bounded or refused, by kind (counted per GPU on /metrics).
struct Clamps {
  uint64_t duplicate_samples = 0;  // a (pid, timestamp) sample seen again: counted once
  uint64_t sm_over_gpu = 0;        // sample periods whose processes' SM use summed over 100 %
  uint64_t memory_over_total = 0;  // process figures (or their sum) beyond the GPU's memory
  uint64_t energy_over_limit = 0;  // counter deltas above power limit × interval, cut to it
  uint64_t energy_refused = 0;     // counters that went back or jumped far past it: nothing
  uint64_t stale_samples = 0;      // samples of a PID that is gone or started after them
  Clamps& operator+=(const Clamps& other);
  friend bool operator==(const Clamps&, const Clamps&) = default;
};

struct GpuSnapshot {
  GpuReading reading;
  Clamps clamps;
  std::vector<std::string> refused;  // why energy readings were refused, for the log
  // Processes that map to no container of the directory: counted here, never given to a tenant.
  uint32_t unattributed_processes = 0;
  uint64_t unattributed_memory = 0;
  double unattributed_sm_percent = 0;
  Usage unattributed;      // measured use nobody holds (energy of a GPU nobody leases too)
  double sm_percent = 0;   // all its processes' SM use now
  double power_watts = 0;  // energy delta over the pass (or the power reading)
  GpuCursor cursor;        // after this pass
};

struct PassResult {
  int64_t time_ms = 0;
  std::vector<GpuSnapshot> gpus;
  std::vector<HolderReading> holders;  // holders with processes or use in this pass
};

struct IntegrationOptions {
  // Memory of a process whose start is not known (one nobody holds) never covers more than
  // this; a live process's memory covers the time since it started or since the last pass.
  std::chrono::milliseconds max_gap{20000};
};

// What the collector knows of a PID in this pass.
struct PidInfo {
  std::optional<CgroupContainer> container;  // nullopt: no container (a host process)
  int64_t start_ms = -1;  // wall time it started (/proc/<pid>/stat); -1: gone, never attributed
};
using PidContainers = std::unordered_map<uint32_t, PidInfo>;

// Attributes and integrates one pass: each live process goes to the holder whose runtime ID
// (else Pod UID) its cgroup names; SM-seconds from the utilisation samples newer than the GPU's
// cursor (each covers the driver's sample period; a sample from before its PID's process started
// is nobody's), memory GiB-seconds over the time each process held it since the cursor's pass,
// energy from the counter's delta bounded by the power limit: the busy part split by SM share,
// the idle part by the holders' allocation over the time they held the GPU. `cursors` are read
// and advanced.
PassResult Integrate(const std::vector<GpuReading>& readings, const PidContainers& pids,
                     const Directory& directory, Cursors& cursors, int64_t now_ms,
                     const IntegrationOptions& options = {});

// ---------------------------------------------------------------------------------------------
// Prometheus series (prometheus.cc, pure).

// Per-holder counters the caller keeps durable (serve's usage records, the node agent's
// GpuLease status), rendered as tessera_container_*_total.
struct HolderTotals {
  Usage total;
};

struct NodeMetricsOptions {
  std::string hostname;
  size_t max_series = 10000;  // --telemetry-max-series: holder series at most
  int64_t linger_ms = 0;      // how long a holder's series stay after its last pass (one interval)
};

// Renders the node endpoint's series: per GPU with dcgm-exporter's names and labels (gpu, UUID,
// pci_bus_id, device, modelName, Hostname), per MIG instance (GPU_I_ID, GPU_I_PROFILE), and per
// holder on each GPU (those labels plus pod, namespace, container, tenancy) under the same names
// and tessera_* for what is new. Holders beyond the cap are summed into container="_other".
class NodeMetrics {
 public:
  explicit NodeMetrics(NodeMetricsOptions options) : options_(std::move(options)) {}
  // A pass: remembers its GPUs and the holders it saw (each with a copy of its labels).
  void Update(const PassResult& pass, const Directory& directory);
  // The exposition text. `totals` by holder key.
  std::string Render(const std::map<std::string, HolderTotals>& totals, int64_t now_ms) const;
  // Holder series in the last Render (for tests and the cardinality check).
  size_t last_holder_series() const { return last_holder_series_; }
  // The holders whose series are shown now (the last pass's and those lingering): their totals
  // are what Render needs.
  std::vector<std::string> keys() const;

 private:
  struct Seen {
    Holder holder;
    std::vector<HolderGpu> gpus;
    int64_t last_ms = 0;
  };
  NodeMetricsOptions options_;
  std::vector<GpuSnapshot> gpus_;
  std::map<std::string, Clamps> clamps_;  // by PCI address, since this process started
  std::map<std::string, Seen> seen_;      // by holder key
  mutable size_t last_holder_series_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Host readers and the collector (collector.cc, nvml_source.cc, proc_reader.cc).

// NVML's side of a pass: one GpuReading per GPU.
class GpuSource {
 public:
  virtual ~GpuSource() = default;
  virtual std::vector<GpuReading> Read(const Cursors& cursors) = 0;
};

struct NvmlSourceOptions {
  std::string library = "libnvidia-ml.so.1";
  std::vector<GpuIdentity> gpus;
  size_t max_processes_per_gpu = 4096;
};
// Opens NVML (dlopen) and finds each GPU by PCI address; GPUs NVML does not know are read as lost.
Result<std::unique_ptr<GpuSource>> OpenNvmlSource(const NvmlSourceOptions& options);

// Reads /proc/<pid>/cgroup (or /stat) under `proc_dir` (bounded, regular files only, never
// blocking); NotFound when the process is gone.
Result<std::string> ReadProcCgroup(const std::string& proc_dir, uint32_t pid);
Result<std::string> ReadProcStat(const std::string& proc_dir, uint32_t pid);
// Whether `proc_dir` can be the collector's /proc (--telemetry-proc-dir, --proc-dir): an
// absolute path to a directory. InvalidArgument naming the flag's value otherwise.
Status CheckProcDir(const std::string& proc_dir);

struct CollectorOptions {
  std::string proc_dir = "/proc";
  IntegrationOptions integration;
};

// What a pass cost: CPU time of the whole pass and the part spent inside NVML.
struct PassCost {
  double cpu_seconds = 0;
  double nvml_seconds = 0;
  double wall_seconds = 0;
  size_t cgroup_reads = 0;
  size_t stat_reads = 0;
};

// One pass at a time, from one thread: NVML readings, each PID's start time (a PID whose start
// time is the previous pass's is the same process and keeps its container; another start time is
// another process, whose cgroup is read again), attribution and integration.
class Collector {
 public:
  Collector(std::unique_ptr<GpuSource> source, CollectorOptions options);
  PassResult Collect(const Directory& directory, Cursors& cursors, int64_t now_ms);
  const PassCost& last_cost() const { return cost_; }

 private:
  std::unique_ptr<GpuSource> source_;
  CollectorOptions options_;
  PidContainers pids_;                                  // PIDs of the previous pass
  std::unordered_map<uint32_t, uint64_t> start_ticks_;  // their start times, as /proc says
  PassCost cost_;
};

// ---------------------------------------------------------------------------------------------
// The node agent's HTTP endpoint (http_endpoint.cc): GET only, an 8 KiB request header at most,
// concurrent connections up to a cap (accepting pauses there), each with a deadline for its
// request header and another for its answer, and Connection: close. With a token file, every
// path but the open ones needs "Authorization: Bearer <the file's token>" (endpoint_token.cc).

struct EndpointResponse {
  int status = 200;
  std::string content_type = "text/plain; version=0.0.4";
  std::string body;
};
// Called with the request path (query removed), from the endpoint's thread, only for requests
// that passed the token check.
using EndpointHandler = std::function<EndpointResponse(std::string_view path)>;

struct EndpointOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 0;  // 0: the kernel's choice
  // Connections served at once; past it the kernel's listen queue holds the next ones. A client
  // that sends nothing holds one slot until its deadline.
  size_t max_connections = 256;
  // For the whole request header from accept, and again for writing the answer: a client that
  // sends (or reads) a byte a second is closed at the deadline.
  std::chrono::milliseconds timeout{5000};
  // A file holding the bearer token (a Kubernetes Secret's key); re-read when it changes.
  // Empty: no token is asked.
  std::string token_file;
  std::vector<std::string> open_paths = {"/healthz"};  // answered without a token
  // Without a token file the endpoint binds only a loopback address, unless this says that
  // something else (a NetworkPolicy) keeps everyone but the scraper out.
  bool anonymous_off_loopback = false;
  // PEM files of the endpoint's certificate and key (and, optionally, the CAs of the client
  // certificates it asks for), re-read when they change (tls/tls.h). Empty cert: plain HTTP.
  tls::ServerFiles tls;
};

class MetricsEndpoint {
 public:
  virtual ~MetricsEndpoint() = default;  // stops serving
  virtual uint16_t port() const = 0;     // the bound port (0 asked: the kernel's choice)
};
// Fails when the address cannot be bound or the token file holds no token.
Result<std::unique_ptr<MetricsEndpoint>> StartMetricsEndpoint(EndpointOptions options,
                                                              EndpointHandler handler);

// The bearer token of a token file, compared in constant time (SHA-256 of both sides, then
// CRYPTO_memcmp: neither the token's bytes nor its length show in the time taken). The file is
// stat()ed on every check and read again when its inode, size or mtime changed (a Secret's
// update swaps a symlink); a file that cannot be read, or holds only white space, refuses
// every token until it holds one again. Thread-safe.
class TokenFile {
 public:
  // Fails when the file cannot be read or holds no token.
  static Result<std::unique_ptr<TokenFile>> Open(std::string path);
  // `authorization` is the Authorization header's value ("Bearer <token>").
  bool Accepts(std::string_view authorization);

 private:
  explicit TokenFile(std::string path) : path_(std::move(path)) {}
  void Refresh();  // with mu_ held

  std::string path_;
  std::mutex mu_;  // guards everything below
  struct Stamp {
    uint64_t dev = 0, ino = 0, size = 0;
    int64_t mtime_ns = -1;
    friend bool operator==(const Stamp&, const Stamp&) = default;
  } stamp_;
  std::optional<std::array<unsigned char, 32>> digest_;  // SHA-256 of the token; none: refuse
};

// ---------------------------------------------------------------------------------------------
// JSON views (json_view.cc): the node's pass for /v1/telemetry and `tessera top`.

// {"time_ms", "gpus": [{pci_address, uuid, model, index, mig, lost, gpu_percent, memory_used,
// memory_total, power_watts, temperature_c, energy_mj, sm_percent, unattributed:{processes,
// memory_bytes, sm_percent}, mig_instances:[...], holders:[{key, tenancy, pod, namespace,
// container, processes, memory_bytes, sm_percent}]}]}
std::string PassToJson(const PassResult& pass, const Directory& directory);

}  // namespace tessera::telemetry
