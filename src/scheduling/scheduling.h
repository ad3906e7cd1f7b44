// Scheduling policy: which pending GPU request goes next. Pure logic, no I/O, shared by the
// control plane (`serve`) and the fleet simulator.
//
//  - Per-tenancy quotas: GPUs in use, and pending requests (checked at submission).
//  - Weighted fair share: tenancies are served lowest (recent usage + GPUs in use) / weight first,
//    where recent usage decays with a configurable half-life. Inside a tenancy: priority (bounded
//    by the tenancy's maximum), then age.
//  - Reservations: a request that does not fit reserves the node and partition it will get first;
//    later requests run only where they do not delay it, and the reservation is kept from pass
//    to pass until its holder starts (or leaves the queue). A request with a duration limit may use
//    reserved GPUs only when it ends before the reservation needs them; a request without a limit
//    never does.
//  - Preemption (optional): running preemptible requests that may be stopped so a higher-priority
//    request, or one of a tenancy below its share, can start.
//  - Every pending request gets its place in dispatch order and why it waits.
//
// Placement inside a node stays with placement::Fleet (and the topology module under it): the
// scheduler decides order, admission and reservations, and asks the fleet where a request goes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "placement/placement.h"

namespace tessera::scheduling {

using RequestId = uint64_t;

// Bounds on every number a tenant or operator can set; the API refuses values outside them.
inline constexpr int kMinPriority = -1000;
inline constexpr int kMaxPriority = 1000;
inline constexpr double kMinWeight = 0.001;
inline constexpr double kMaxWeight = 1000;
inline constexpr int kMaxQuotaGpus = 1000000;
inline constexpr int kMaxQuotaPending = 1000000;
inline constexpr double kMaxDurationLimitSeconds = 366.0 * 24 * 3600;
inline constexpr int kUnlimited = std::numeric_limits<int>::max();
// A tenancy policy's quota_pending that follows SchedulerOptions::default_quota_pending.
inline constexpr int kDefaultQuota = std::numeric_limits<int>::min();
inline constexpr double kUnknownTime = std::numeric_limits<double>::infinity();

enum class Mode {
  kFifo,  // submission order; no quotas on order, priorities ignored
  kFair,  // weighted fair share, priorities, quotas
};
const char* ModeName(Mode mode);
Result<Mode> ParseMode(std::string_view name);

struct TenancyPolicy {
  double weight = 1;
  int quota_gpus = kUnlimited;        // GPUs in use at once
  int quota_pending = kDefaultQuota;  // requests waiting at once (kDefaultQuota: the scheduler's)
  int max_priority = 0;               // highest priority its submissions may ask for
};
// InvalidArgument naming the field when a value is outside the bounds above.
Status ValidateTenancyPolicy(const TenancyPolicy& policy);

struct SchedulerOptions {
  Mode mode = Mode::kFair;
  placement::Policy placement = placement::Policy::kBinpack;
  double half_life_s = 3600;  // of recent usage
  // Requests that do not fit and get a reservation, in dispatch order, per pass. Zero turns
  // reservations off (plain backfill: anything that fits runs).
  int max_reservations = 8;
  bool preemption = false;
  // quota_pending of tenancies whose policy does not set one: a bound on what one tenancy can
  // queue, so nobody's submission waits on a queue another filled without limit.
  int default_quota_pending = kUnlimited;
};
Status ValidateSchedulerOptions(const SchedulerOptions& options);

struct PendingRequest {
  RequestId id = 0;
  std::string tenancy;
  std::string label;  // how reasons name it ("c-1234"); the ID when empty
  int gpus = 1;
  int priority = 0;
  double submitted_s = 0;
  // The backend stops the request at this limit; kUnknownTime when it has none.
  double max_duration_s = kUnknownTime;
  bool preemptible = false;
};

// Why a request is still pending after a pass.
enum class WaitKind {
  kNone,           // admitted in this pass
  kQuotaGpus,      // its tenancy is at its GPU quota
  kReservation,    // it holds a reservation and waits for it to drain
  kReserved,       // it would fit, but only in GPUs reserved for an earlier request
  kNoCapacity,     // no node has that many free GPUs that can be given together
  kNeverPlaceable  // no node can ever give that many GPUs
};

struct Reservation {
  RequestId holder = 0;
  // Where the holder's turn came in the walk that made the reservation: its tenancy (an index
  // of the scheduler's) and the GPUs of that tenancy's requests walked before it. An arrival
  // that would come earlier in the order may take the reservation over.
  int holder_tenancy = -1;
  double holder_walked_gpus = 0;
  int node = -1;
  placement::GpuMask gpus = 0;
  std::optional<uint32_t> partition_id;
  // When its GPUs are expected to be free (latest known end of what runs on them);
  // kUnknownTime when something on them has no duration limit.
  double ready_s = kUnknownTime;
};

struct Wait {
  RequestId id = 0;
  int position = 0;  // 1-based place in dispatch order among what still waits
  WaitKind kind = WaitKind::kNone;
  double in_use = 0;     // kQuotaGpus: the tenancy's GPUs in use (MIG slices by share)
  int quota = 0;         // kQuotaGpus: its quota
  int reservation = -1;  // kReservation / kReserved: index into PassResult::reservations
  int free_gpus = 0;     // kNoCapacity: free GPUs the fleet had at that point
};

struct Admission {
  RequestId id = 0;
  placement::Placement placement;
  bool backfill = false;  // placed in GPUs reserved for a later-starting request
};

struct Preemption {
  RequestId for_request = 0;
  std::vector<RequestId> victims;
};

struct PassResult {
  std::vector<Admission> admitted;        // in dispatch order; their GPUs are leased
  std::vector<Wait> waiting;              // in dispatch order (empty when !report)
  std::vector<Reservation> reservations;  // in dispatch order
  std::vector<Preemption> preemptions;    // chosen victims (options.preemption)
  int64_t decisions = 0;                  // requests considered
  // The walk ended early (without report): nothing else pending could start or reserve.
  bool stopped_early = false;
};

struct TenancyUsage {
  std::string name;
  double weight = 1;
  int in_use = 0;
  double other_gpus = 0;  // held outside the queue's requests (SetOtherUse)
  int pending = 0;
  double recent_gpus = 0;  // decayed average of GPUs in use over the half-life
  double share = 0;        // of the fleet's recent usage, 0..1
  double target = 0;       // weight / sum of weights of tenancies with work, 0..1
};

class Scheduler {
 public:
  static Result<Scheduler> Create(SchedulerOptions options);

  const SchedulerOptions& options() const { return options_; }

  // Creates or changes a tenancy; tenancies not set explicitly get the defaults on first use.
  Status SetTenancy(const std::string& name, const TenancyPolicy& policy);
  TenancyPolicy GetTenancy(const std::string& name) const;
  // The pending quota that applies to `name`: its policy's, or the scheduler's default.
  int PendingQuotaOf(const std::string& name) const;

  // Whether `request` may join the queue: InvalidArgument for a priority outside
  // kMinPriority..the tenancy's maximum, a size below 1 or a bad duration limit;
  // FailedPrecondition naming the quota when the tenancy already has its maximum pending.
  Status CheckSubmit(const PendingRequest& request) const;
  // Adds a request (after CheckSubmit). AlreadyExists for an ID already known.
  Status Enqueue(PendingRequest request);
  // Drops a pending request (cancelled); false when it is not pending.
  bool Cancel(RequestId id);

  // Usage accounting. Time only moves forward; earlier times are taken as `now`.
  void Advance(double now_s);
  // A request that runs (admitted by a pass, or adopted after a restart): counts against its
  // tenancy's quota and share until Finished. A pending request of that ID leaves the queue.
  // Adopted with a start before the scheduler's time, the time it ran so far is charged too.
  void Started(RequestId id, const std::string& tenancy, const placement::Placement& placement,
               int gpus, double started_s, double max_duration_s, int priority, bool preemptible);
  // It stopped counting at `now_s`; with `ended_s` earlier (its runtime says it ended then),
  // the time after that is taken back from its tenancy's recent usage. False when it was not
  // running here.
  bool Finished(RequestId id, double now_s, double ended_s = kUnknownTime);
  // Recent usage of `gpus` GPUs over [from_s, to_s] (both at most now) added to `tenancy`'s, as
  // though counted then; a negative `gpus` takes it back. Usage records at start-up, and runs
  // that ended while nobody counted them.
  void ChargePast(const std::string& tenancy, double gpus, double from_s, double to_s);
  // GPUs a tenancy holds outside this queue's requests (MIG slices, by their share of a GPU),
  // from `now_s` on: they count in its share and against its quota.gpus as GPUs in use do.
  void SetOtherUse(const std::string& tenancy, double gpus, double now_s);

  // One scheduling pass at `now_s` over `fleet` (whose free GPUs are the truth about what can
  // be given). Admitted requests are leased in the fleet and counted as started. With
  // `report`, every pending request gets its position and reason; without it the pass stops
  // as soon as no pending request could start or take a reservation any more, so its cost
  // follows what can change, not how many requests wait.
  PassResult Schedule(placement::Fleet& fleet, double now_s, bool report = true);

  // Whether the pending request `id` (just enqueued) could change what a pass decides, given
  // what the last pass found and nothing else having changed since: it may fit the GPUs that
  // pass left free (or backfill into reserved ones), take a reservation, come before a
  // reservation's holder in the order, or make its tenancy active (which moves every target
  // share). True when unsure (no pass yet). A caller runs a pass only when this, or another
  // input (GPUs freed, a policy, a request leaving), changed.
  bool CouldChangeAPass(RequestId id) const;

  class Snapshot;
  Snapshot TakeSnapshot() const;
  static Scheduler FromSnapshot(const Snapshot& snapshot);

  // The tenancy a pending or running request belongs to; empty when unknown.
  std::string TenancyOf(RequestId id) const;
  // A pending request as it was enqueued; null when it is not pending.
  const PendingRequest* Request(RequestId id) const;

  // "waiting: tenancy quota 8/8 GPUs in use", "waiting: reserved for c-7 (8 GPUs on node-3)", ...
  // A request is named by its label, else by `label_of` (when given), else its ID.
  std::string Describe(const Wait& wait, const PassResult& pass, const placement::Fleet& fleet,
                       const std::function<std::string(RequestId)>& label_of = nullptr) const;

  size_t pending_count() const { return pending_.size(); }
  // Requests of `tenancy` waiting in this queue.
  int PendingOf(const std::string& tenancy) const;
  size_t running_count() const { return running_.size(); }
  std::vector<TenancyUsage> Usage() const;

 private:
  static constexpr int kMaxSize = 64;  // GPUs of one request at most
  // A pending request's place in its tenancy's order: -priority (clamped to the tenancy's
  // bound; 0 in FIFO), submitted_s, sequence, ID; then what a report needs of it (GPUs, duration
  // limit, priority as asked), so a snapshot reads the order alone.
  using OrderKey = std::tuple<int, double, uint64_t, RequestId, int, double, int>;
  struct Tenancy {
    std::string name;
    TenancyPolicy policy;
    int in_use = 0;
    double other_gpus = 0;           // SetOtherUse
    double decayed_gpu_seconds = 0;  // integral of GPUs in use, decayed by the half-life
    // Pending requests in this tenancy's own order.
    std::set<OrderKey> queue;
    // Its pending requests by size (GPUs), and their GPUs together.
    std::array<int, kMaxSize + 1> pending_by_size{};
    int64_t pending_gpus = 0;
  };
  struct Pending {
    PendingRequest request;
    int tenancy = -1;
    uint64_t sequence = 0;
  };
  struct Running {
    int tenancy = -1;
    placement::Placement placement;
    int gpus = 0;
    double started_s = 0;
    double ends_s = kUnknownTime;
    int priority = 0;
    bool preemptible = false;
  };

 public:
  // The queue as a report needs it, copied flat (one walk of each tenancy's order, no lookup or
  // allocation per request): cheap to take under a caller's lock. FromSnapshot makes a scheduler
  // of it, without that lock, to run the report's pass on.
  class Snapshot {
   private:
    friend class Scheduler;
    SchedulerOptions options_;
    double tau_s_ = 0, now_s_ = 0;
    uint64_t next_sequence_ = 0;
    struct TenancyState {
      std::string name;
      TenancyPolicy policy;
      int in_use = 0;
      double other_gpus = 0;
      double decayed_gpu_seconds = 0;
      std::vector<OrderKey> pending;  // its order
    };
    std::vector<TenancyState> tenancies_;
    std::vector<std::pair<RequestId, Running>> running_;
    std::vector<std::vector<double>> gpu_ends_;
    std::vector<std::vector<RequestId>> gpu_owner_;
    std::vector<Reservation> kept_;
  };

 private:
  // What the last pass found, for CouldChangeAPass: the GPUs it left visible and reserved-free,
  // and per size whether nothing visible fitted, the earliest end that found no GPUs to
  // backfill into, and whether no reservation could be chosen.
  struct PassEnd {
    bool valid = false;
    double now_s = 0;
    int free_visible = 0;
    int free_hidden = 0;
    double latest_ready_s = 0;  // of the reservations kept
    std::array<bool, kMaxSize + 1> no_fit{};
    std::array<double, kMaxSize + 1> backfill_failed_end{};
    std::array<bool, kMaxSize + 1> reserve_failed{};
  };

  // One Schedule call: its state and steps (pass.cc).
  class Pass;

  explicit Scheduler(SchedulerOptions options) : options_(options) {}
  void Added(const Pending& pending);
  void Removed(const Pending& pending);
  int TenancyIndex(const std::string& name);
  int FindTenancy(const std::string& name) const;
  OrderKey QueueKey(const Pending& pending) const;
  double ShareKey(const Tenancy& tenancy, double extra_gpus) const;
  void EnsureNodes(const placement::Fleet& fleet);
  void SetGpuOwner(const placement::Placement& placement, double ends_s, RequestId owner);
  // Reservation choice (reservation.cc): the node and GPUs that can give `gpus` earliest, not
  // overlapping `taken` (per node); false when no node ever can.
  bool ChooseReservation(const placement::Fleet& fleet, int gpus,
                         const std::vector<placement::GpuMask>& taken, double now_s,
                         Reservation* out) const;
  // Preemption choice (preemption.cc).
  std::vector<Preemption> ChoosePreemptions(const placement::Fleet& fleet, const PassResult& pass,
                                            const std::vector<placement::GpuMask>& reserved,
                                            double now_s) const;
  // The running requests to stop so that `reservation`'s holder starts now (the fewest GPUs,
  // then the least work lost), none of them in `taken_victims`; empty when none may be.
  std::vector<RequestId> ChooseVictims(const placement::Fleet& fleet,
                                       const Reservation& reservation,
                                       const std::vector<placement::GpuMask>& reserved,
                                       double now_s, const std::vector<double>& over,
                                       const std::unordered_set<RequestId>& taken_victims) const;

  SchedulerOptions options_;
  double tau_s_ = 0;  // half-life / ln 2
  double now_s_ = 0;
  uint64_t next_sequence_ = 0;
  std::vector<Tenancy> tenancies_;
  std::unordered_map<std::string, int> tenancy_index_;
  std::unordered_map<RequestId, Pending> pending_;
  std::unordered_map<RequestId, Running> running_;
  // Per node, per GPU: when what runs there ends (kUnknownTime: no limit) and who holds it
  // (0: nobody known to the scheduler).
  std::vector<std::vector<double>> gpu_ends_;
  std::vector<std::vector<RequestId>> gpu_owner_;
  // The reservations of the last pass: kept for their holders while they wait, so requests that
  // come earlier in a later pass's order cannot take GPUs a reservation has drained.
  std::vector<Reservation> kept_;
  PassEnd last_pass_;
  // Durations (s) of the pending requests with a limit, per size: the shortest is the one most
  // likely to backfill.
  std::array<std::multiset<double>, kMaxSize + 1> limited_durations_;
};

// ---------------------------------------------------------------------------------------------
// The fleet simulator with tenancies (`tessera fleet simulate --queue --scheduling ...`).

struct TenantLoad {
  std::string name;
  double load = 0;  // offered GPU demand / fleet GPUs
};
// One synthetic stream per tenant (placement::SyntheticTrace with that tenant's load and a seed
// derived from `base.seed` and its position), requests split in proportion to load, merged in
// arrival order. Deterministic for the same options.
Result<std::vector<placement::Request>> SyntheticTenantTrace(
    const placement::SyntheticOptions& base, const std::vector<TenantLoad>& tenants);

struct QueueSimulationOptions {
  SchedulerOptions scheduler;                      // mode kFifo: placement::Simulate exactly
  std::map<std::string, TenancyPolicy> tenancies;  // weights and GPU quotas
  // Requests declare their duration as maxDurationSeconds (so they may backfill into reserved
  // GPUs they leave in time); off: no request has a limit.
  bool duration_limits = true;
};

struct TenancyStats {
  int64_t requests = 0;
  int64_t admitted = 0;
  double gpu_hours = 0;  // served
  double share = 0;      // of the GPU-time leased within the arrival window
  double wait_p50_s = 0, wait_p95_s = 0, wait_max_s = 0;
  std::map<int, double> wait_p95_s_by_size;
  double backlogged_fraction = 0;  // of the arrival window with a request of it waiting
};

struct QueueSimulationResult {
  placement::SimulationResult base;
  std::string scheduling;
  std::map<std::string, TenancyStats> per_tenancy;
  std::map<int, double> wait_p95_s_by_size;
  // Tenancies that got less than 95 % of the GPU-time they offered within the arrival window
  // (what they would have had with no wait), and Jain's index of share / weight over them.
  std::vector<std::string> backlogged;
  double jain_fairness = 1;
};

Result<QueueSimulationResult> SimulateQueue(placement::Fleet fleet,
                                            std::vector<placement::Request> requests,
                                            const QueueSimulationOptions& options);
std::string QueueSimulationToJson(const QueueSimulationResult& result, bool include_timing);

// Jain's fairness index of `values`: (sum x)^2 / (n * sum x^2); 1 when all are equal.
double JainIndex(const std::vector<double>& values);

}  // namespace tessera::scheduling
