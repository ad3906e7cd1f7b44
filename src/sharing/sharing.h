// Fractional GPUs: a share of one GPU's memory and compute, how each share is enforced, where a
// share fits among those a GPU already holds, what a container of an MPS share is given, and
// when a container's measured use breaks its share. Pure logic: values in, values out (the MPS
// daemons themselves live in mps/, the NVML figures come from the caller).
//
// Facts this rests on (docs/serve.md, "Sharing a GPU"): MIG is the only hardware isolation; MPS
// limits memory and threads per *process* (two processes in one container get twice the limit)
// and is one fault domain; time-slicing limits nothing. So every share is also held by the
// watchdog, which sums the driver's per-process figures per container.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/error.h"

namespace tessera::sharing {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

// How a GPU is shared. MPS needs the GPU in EXCLUSIVE_PROCESS compute mode with tessera's daemon
// in front of it; time-slicing is the only option where MPS is unavailable.
enum class Mode { kMps, kTimeslice };
const char* ModeName(Mode mode);  // "mps", "timeslice"
Result<Mode> ParseMode(std::string_view name);

// What holds a lease's limits: the hardware (MIG), the driver (MPS memory and thread limits),
// only tessera's watchdog, or nothing.
enum class Enforcement { kHardware, kDriver, kWatchdog, kNone };
const char* EnforcementName(Enforcement enforcement);  // "hardware", "driver", ...
// MPS shares are held by the driver; time-slicing shares by the watchdog when it runs, else by
// nothing at all.
Enforcement EnforcementOf(Mode mode, bool watchdog_running);

// The smallest and largest memory a share may ask for: below 256 MiB a CUDA context alone does
// not fit; 4 TiB is beyond any board.
inline constexpr uint64_t kMinShareMemory = 256 * kMiB;
inline constexpr uint64_t kMaxShareMemory = uint64_t{4} << 40;

// A share of one GPU: its memory, its compute in percent of the GPU's SMs (MPS: the active
// thread percentage, a ceiling), and the mode. With `mig_profile` it is a share of one MIG
// device of that profile instead (memory and compute then count against that device).
struct Share {
  uint64_t memory_bytes = 0;
  int compute_percent = 0;  // 1..100
  Mode mode = Mode::kMps;
  std::string mig_profile;  // "3g.40gb"; empty: a share of a whole GPU
  friend bool operator==(const Share&, const Share&) = default;
};

// A memory quantity as Kubernetes writes one: an integer or a decimal with at most three
// fraction digits, then a binary (Ki, Mi, Gi, Ti) or decimal (k, M, G, T) suffix or none
// (bytes): "20Gi", "1.5Gi", "512Mi", "16G". Strict: no sign, exponent, spaces or other suffix;
// the value must lie within [kMinShareMemory, kMaxShareMemory]. Errors quote a short excerpt.
Result<uint64_t> ParseMemory(std::string_view text);
// The shortest exact form ParseMemory reads back: "20Gi", "1536Mi", else plain bytes.
std::string FormatMemory(uint64_t bytes);
// "23.1 GiB", "20 GiB": one decimal, dropped when it is zero (messages and reasons).
std::string FormatGiB(uint64_t bytes);

// InvalidArgument naming the field when a share is outside its ranges.
Status CheckShare(const Share& share);
// `tessera run --share`: "[PROFILE:]MEMORY,COMPUTE[,mps|timeslice]" ("20Gi,25",
// "8Gi,50,timeslice", "3g.40gb:10Gi,50": a share of a MIG slice of profile 3g.40gb).
Result<Share> ParseShareFlag(std::string_view text);

// What a share is metered and fair-shared as: its fraction of the GPU, the larger of its memory
// over the GPU's and its compute over 100 (a MIG slice counts by its compute slices the same
// way), at most 1. A time-sliced share's compute is the whole GPU's (nothing limits it), so it
// is 1. Where a GPU takes no other tenancy's work its holder pays the whole GPU, these fractions
// being the breakdown (serve/share_billing.h).
double Fraction(const Share& share, uint64_t gpu_memory_bytes);

// ---------------------------------------------------------------------------------------------
// Shares of a MIG slice: the slice's memory and compute are what the share counts against, one
// MPS daemon per MIG device enforces it, and its metered fraction is its fraction of the slice
// times the slice's fraction of the GPU.

// The longest MIG profile name a share may give.
inline constexpr size_t kMaxMigProfileLength = 32;
// InvalidArgument unless `profile` has the shape of NVML's GPU/compute instance profile names:
// [<c>c.]<g>g.<memory>gb[(+|-)<attribute>] ("1g.10gb", "3g.40gb", "1g.10gb+me", "1c.3g.40gb"),
// at most kMaxMigProfileLength characters. The error quotes a short excerpt only.
Status CheckMigProfile(std::string_view profile);
// The memory a slice of `profile` is counted as holding when the inventory does not say: its
// "<N>gb" in decimal gigabytes (NVML's names round a slice's memory, which is never below it);
// 0 for a name of another shape.
uint64_t MigProfileMemoryBytes(std::string_view profile);
// What a share of a MIG slice is metered as: its Fraction of the slice (memory over the slice's,
// compute over 100) times the slice's fraction of its GPU (placement::MigGpuFraction).
double MigShareFraction(const Share& share, uint64_t slice_memory_bytes, double slice_gpu_fraction);

// ---------------------------------------------------------------------------------------------
// Placement.

// One GPU as share placement sees it.
struct SharedGpu {
  uint64_t memory_bytes = 0;  // the board's total
  bool placeable = false;     // its lease lets new shares in (no drain, quarantine, fault)
  std::vector<Share> held;    // the shares on it now
  std::string tenancy_uid;    // the holders' tenancy (all of them) when held is not empty
};

struct PlacementRules {
  // Kept free on every shared GPU for the driver, the MPS server's own context and
  // fragmentation: the shares on one GPU add up to at most memory_bytes - reserve_bytes.
  uint64_t reserve_bytes = 1 * kGiB;
  // Fault domain: by default a shared GPU holds one tenancy's containers only (an MPS server,
  // or a time-sliced GPU, is one fault domain). True lets any tenancy onto a time-sliced GPU (an
  // operator's explicit choice: a fault in one tenant's process then reaches another's). Never
  // onto an MPS GPU: its daemon, pipe directory and shm would be two tenancies' writable paths.
  bool across_tenancies = false;
};

// Whether shares of `mode` may join another tenancy's on one GPU: only time-sliced ones, and only
// with the operator's rules.across_tenancies.
bool MayMixTenancies(const PlacementRules& rules, Mode mode);

// The GPU `share` of tenancy `tenancy_uid` goes to: among those it fits (mode, memory, compute,
// fault domain), the fullest by memory, so that idle GPUs stay idle; ties go to the lowest
// index. FailedPrecondition saying why none fits.
Result<size_t> ChooseGpu(const std::vector<SharedGpu>& gpus, const Share& share,
                         const std::string& tenancy_uid, const PlacementRules& rules);
// Whether `share` fits on `gpu` (WhyNotFits is empty), without saying why not.
bool Fits(const SharedGpu& gpu, const Share& share, const std::string& tenancy_uid,
          const PlacementRules& rules);
// Why `share` does not fit on `gpu`; empty when it fits.
std::string WhyNotFits(const SharedGpu& gpu, const Share& share, const std::string& tenancy_uid,
                       const PlacementRules& rules);

// One MIG slice as share placement sees it: its profile, and its room as a SharedGpu (the
// slice's memory; placeable while free or shared, never while a container holds it whole).
struct SharedSlice {
  std::string profile;
  SharedGpu room;
};
// The slice a share of a MIG slice (share.mig_profile set) goes to: among the slices of its
// profile where it fits (Fits, with the slice as the GPU), the fullest by memory, then the lowest
// index; FailedPrecondition saying why none fits.
Result<size_t> ChooseSlice(const std::vector<SharedSlice>& slices, const Share& share,
                           const std::string& tenancy_uid, const PlacementRules& rules);

// ChooseGpu's choice without a walk over every GPU: the GPUs' free room indexed by what can go
// there (empty, or one mode and, by default, one tenancy) and by memory held, so a decision costs
// O(log n) plus the GPUs passed over for want of compute, however many GPUs there are. Choose
// gives exactly what ChooseGpu would over the same GPUs.
class PlacementIndex {
 public:
  explicit PlacementIndex(PlacementRules rules) : rules_(rules) {}
  // GPU `index` as `gpu` says, replacing what the index held for it.
  void Set(size_t index, const SharedGpu& gpu);
  // `share` of `tenancy_uid` was placed on GPU `index` (one Choose gave for it).
  void Add(size_t index, const Share& share, const std::string& tenancy_uid);
  // The GPU ChooseGpu would give `share` of `tenancy_uid`; nullopt when none fits.
  std::optional<size_t> Choose(const Share& share, const std::string& tenancy_uid) const;
  // Whether GPU `index` holds shares of `tenancy_uid` now.
  bool Holds(size_t index, const std::string& tenancy_uid) const;
  // Whether any GPU has room for the smallest share there can be (kMinShareMemory, 1 %).
  bool AnyRoom() const;

 private:
  struct Slot {
    bool indexed = false;  // placeable: in empty_ or shared_
    uint64_t usable = 0;   // memory less the reserve
    uint64_t held = 0;     // memory of the shares it holds
    int compute = 0;       // compute percent they hold
    size_t count = 0;      // shares it holds
    Mode mode = Mode::kMps;
    std::string tenancy_uid;  // the holders' (the first one's)
  };
  // Shared GPUs that take the same shares: mode, tenancy ("" when any may come), usable memory.
  using Group = std::tuple<int, std::string, uint64_t>;
  // ~held (so that the fullest comes first), then the lowest index.
  using Entry = std::pair<uint64_t, size_t>;
  void Unlink(size_t index);
  void Link(size_t index);

  PlacementRules rules_;
  std::vector<Slot> slots_;
  std::map<uint64_t, std::set<size_t>> empty_;  // usable memory -> placeable GPUs with no share
  std::map<Group, std::set<Entry>> shared_;
};

// ---------------------------------------------------------------------------------------------
// What a container of an MPS share is given.

// Where a container finds its MPS pipe directory. Never /tmp/nvidia-mps: CUDA probes that path
// by default and NVIDIA's container runtime bind-mounts the host's into every GPU container.
inline constexpr char kContainerPipeDirectory[] = "/run/tessera/mps";

struct ClientMount {
  std::string host_path;
  std::string container_path;
  bool read_only = false;
  friend bool operator==(const ClientMount&, const ClientMount&) = default;
};
struct ClientEdits {
  std::map<std::string, std::string> env;
  std::vector<ClientMount> mounts;
};

// The environment and mounts of an MPS client container: CUDA_MPS_PIPE_DIRECTORY, its own
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=<MiB>M": device 0 is the one GPU the container sees) and
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, a read-only bind of the daemon's pipe directory and its
// private shm as /dev/shm. Time-slicing shares get nothing.
ClientEdits MpsClientEdits(const Share& share, const std::string& host_pipe_directory,
                           const std::string& host_shm_directory);

// ---------------------------------------------------------------------------------------------
// The watchdog's judgement (the sampling and the stopping live with the caller).

// One GPU process as the telemetry collector attributes it.
struct ProcessUse {
  uint32_t pid = 0;
  std::string container_id;  // empty: not attributed to any container
  uint64_t used_bytes = 0;
};
// Memory per container: every attributed process of it summed (MPS limits hold per process, so
// only the sum says what a container holds).
std::map<std::string, uint64_t> SumByContainer(const std::vector<ProcessUse>& processes);

struct Breach {
  std::string container_id;
  uint64_t used_bytes = 0;
  uint64_t limit_bytes = 0;
  std::string reason;  // "gpu-memory-limit: 23.1 GiB used of 20 GiB"
};

// Judges containers from samples taken at jittered, unannounced times (NextSampleDelay): a
// container whose memory is over its share in two samples no more than the grace apart is in
// breach (with no grace, in one). A single peak that no other sample within the grace sees is
// forgiven; peaks timed between announced passes are not, since there are none to time. Each
// breach is reported once; a container no longer in `limits` is forgotten.
class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Watchdog(std::chrono::milliseconds grace) : grace_(grace) {}

  // One sample: each share's memory limit by container, and what each container used.
  std::vector<Breach> Observe(Clock::time_point now, const std::map<std::string, uint64_t>& limits,
                              const std::map<std::string, uint64_t>& used);
  std::chrono::milliseconds grace() const { return grace_; }

 private:
  struct Over {
    Clock::time_point since;  // the last sample that saw it over its share
    bool reported = false;
  };
  std::chrono::milliseconds grace_;
  std::map<std::string, Over> over_;
};

// How long until the watchdog's next sample: on average the check interval or a quarter of the
// grace, whichever is shorter (at least 10 ms), times a factor drawn from [0.5, 1.5) by
// `random01` in [0, 1). Any window of one grace then holds at least two samples.
std::chrono::milliseconds NextSampleDelay(std::chrono::milliseconds grace,
                                          std::chrono::milliseconds interval, double random01);

// The reason a container stopped by the watchdog ends with.
std::string MemoryLimitReason(uint64_t used_bytes, uint64_t limit_bytes);
// The reason the containers of a GPU whose MPS daemon failed end with.
inline constexpr char kSharedFaultReason[] = "gpu-shared-fault";

}  // namespace tessera::sharing
