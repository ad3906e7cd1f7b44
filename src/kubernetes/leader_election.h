// Leader election over a coordination.k8s.io/v1 Lease, with client-go's semantics: a replica
// takes the Lease when it is missing or its holder has not renewed it for leaseDurationSeconds
// (measured on this replica's clock from when it last saw the record change, not from the
// holder's renewTime, so clock skew between machines does not matter), and every write is an
// update carrying the resourceVersion it read: a 409 means another replica wrote first, and the
// attempt is lost.
//
// A leader counts as one only until `renew_deadline` after the start of its last successful
// renewal (monotonic clock, which keeps running while the process is stopped). The deadline is
// shorter than the lease duration, so a leader that cannot renew, or that wakes from a pause,
// stops acting before any other replica may take the Lease.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/error.h"
#include "kubernetes/client.h"

namespace tessera::k8s {

struct LeaderElectionOptions {
  std::string ns = "tessera-system";  // the control plane's namespace
  std::string name = "tessera-control-plane";
  std::string identity;  // unique per replica (Pod name)
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
};

// InvalidArgument unless 0 < retry_period < renew_deadline < lease_duration and the identity and
// names are set.
Status CheckLeaderElectionOptions(const LeaderElectionOptions& options);

// One attempt's outcome, for tests and the elector's loop.
enum class LeaseAttempt { kLeading, kHeldByOther, kConflict, kError };

class LeaderElector {
 public:
  using Callback = std::function<void()>;
  // Starts the election thread. `on_started` runs (on that thread) when this replica becomes
  // leader; `on_stopped` when it stops being one (a lost renewal, or the deadline passed).
  LeaderElector(ClientConfig config, LeaderElectionOptions options, Callback on_started,
                Callback on_stopped);
  // Stops the thread; the Lease is left to expire (a clean handover would release it, but a
  // replica that dies cannot, and the path must work without).
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Whether this replica may act as the leader at this instant. Check it right before each write
  // only the leader may make.
  bool IsLeader() const;
  // The holder this replica last read ("" when none or not read yet).
  std::string ObservedHolder() const;

 private:
  void Loop();
  LeaseAttempt TryAcquireOrRenew();
  // The steps of an attempt: no Lease yet; a Lease read (taken or renewed unless another
  // replica holds it); the record a won attempt leaves.
  LeaseAttempt CreateLease(std::chrono::steady_clock::time_point attempt_start,
                           const std::string& now);
  LeaseAttempt TakeLease(Json lease, std::chrono::steady_clock::time_point attempt_start,
                         const std::string& now);
  bool HeldByOther(const Json& spec, std::chrono::steady_clock::time_point attempt_start);
  void RecordLeading(std::chrono::steady_clock::time_point attempt_start, const std::string& now);
  long long LeaseDurationSeconds() const;

  Client client_;
  const LeaderElectionOptions options_;
  const Callback on_started_, on_stopped_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable wake_;
  bool stopping_ = false;
  bool leading_ = false;
  std::chrono::steady_clock::time_point valid_until_{};  // leading_ and now < this: leader
  // The last record read (holder, renewTime, resourceVersion) and when it last changed here.
  std::string observed_holder_, observed_renew_;
  std::chrono::steady_clock::time_point observed_at_{};
  std::thread thread_;
};

// RFC 3339 with microseconds, UTC ("2026-01-02T03:04:05.000006Z"): Lease MicroTime fields.
std::string MicroTimeNow();

}  // namespace tessera::k8s
