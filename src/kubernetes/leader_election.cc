#include "kubernetes/leader_election.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <ctime>

namespace tessera::k8s {

using Clock = std::chrono::steady_clock;

std::string MicroTimeNow() {
  const auto now = std::chrono::system_clock::now();
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(micros / 1000000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[96];  // room for any int year, which -Wformat-truncation counts
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<long long>(micros % 1000000));
  return text;
}

Status CheckLeaderElectionOptions(const LeaderElectionOptions& options) {
  if (options.identity.empty()) return InvalidArgument("leader election: no identity");
  if (options.ns.empty() || options.name.empty())
    return InvalidArgument("leader election: the Lease needs a namespace and a name");
  if (options.retry_period.count() <= 0 || options.retry_period >= options.renew_deadline ||
      options.renew_deadline >= options.lease_duration)
    return InvalidArgument(
        "leader election: want 0 < retry period < renew deadline < lease duration (got " +
        std::to_string(options.retry_period.count()) + " ms, " +
        std::to_string(options.renew_deadline.count()) + " ms, " +
        std::to_string(options.lease_duration.count()) + " ms)");
  if (options.lease_duration.count() % 1000 != 0)
    return InvalidArgument(
        "leader election: the lease duration is whole seconds (the Lease's "
        "leaseDurationSeconds)");
  return Ok();
}

LeaderElector::LeaderElector(ClientConfig config, LeaderElectionOptions options,
                             Callback on_started, Callback on_stopped)
    : client_(std::move(config)),
      options_(std::move(options)),
      on_started_(std::move(on_started)),
      on_stopped_(std::move(on_stopped)) {
  thread_ = std::thread([this] { Loop(); });
}

LeaderElector::~LeaderElector() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool LeaderElector::IsLeader() const {
  std::lock_guard lock(mu_);
  return leading_ && Clock::now() < valid_until_;
}

std::string LeaderElector::ObservedHolder() const {
  std::lock_guard lock(mu_);
  return observed_holder_;
}

LeaseAttempt LeaderElector::TryAcquireOrRenew() {
  // The renewal counts from before the request: the server may have written it at any point
  // up to the answer, and the deadline must not outlast the Lease as others see it.
  const auto attempt_start = Clock::now();
  const std::string now = MicroTimeNow();
  auto live = client_.Get(Resource::Leases(), options_.ns, options_.name);
  if (live) return TakeLease(std::move(*live), attempt_start, now);
  if (live.error().category != ErrorCategory::kNotFound) {
    spdlog::warn("leader election: get Lease {}/{}: {}", options_.ns, options_.name,
                 live.error().message);
    return LeaseAttempt::kError;
  }
  return CreateLease(attempt_start, now);
}

long long LeaderElector::LeaseDurationSeconds() const {
  return std::chrono::duration_cast<std::chrono::seconds>(options_.lease_duration).count();
}

void LeaderElector::RecordLeading(std::chrono::steady_clock::time_point attempt_start,
                                  const std::string& now) {
  std::lock_guard lock(mu_);
  observed_holder_ = options_.identity;
  observed_renew_ = now;
  observed_at_ = attempt_start;
  valid_until_ = attempt_start + options_.renew_deadline;
}

LeaseAttempt LeaderElector::CreateLease(std::chrono::steady_clock::time_point attempt_start,
                                        const std::string& now) {
  Json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", options_.name}, {"namespace", options_.ns}}},
                {"spec",
                 {{"holderIdentity", options_.identity},
                  {"leaseDurationSeconds", LeaseDurationSeconds()},
                  {"acquireTime", now},
                  {"renewTime", now},
                  {"leaseTransitions", 0}}}};
  auto created = client_.Create(Resource::Leases(), options_.ns, lease);
  if (!created) {
    // AlreadyExists: another replica created it first.
    return created.error().category == ErrorCategory::kAlreadyExists ? LeaseAttempt::kConflict
                                                                     : LeaseAttempt::kError;
  }
  RecordLeading(attempt_start, now);
  return LeaseAttempt::kLeading;
}

bool LeaderElector::HeldByOther(const Json& spec,
                                std::chrono::steady_clock::time_point attempt_start) {
  const std::string holder = spec.value("holderIdentity", "");
  const std::string renewed = spec.value("renewTime", "");
  long long held_for_s = spec.value("leaseDurationSeconds", LeaseDurationSeconds());
  std::lock_guard lock(mu_);
  if (holder != observed_holder_ || renewed != observed_renew_) {
    observed_holder_ = holder;
    observed_renew_ = renewed;
    observed_at_ = attempt_start;
  }
  // Someone else holds it and has renewed within its duration, as this replica's clock sees it.
  return !holder.empty() && holder != options_.identity &&
         attempt_start < observed_at_ + std::chrono::seconds(held_for_s);
}

LeaseAttempt LeaderElector::TakeLease(Json lease,
                                      std::chrono::steady_clock::time_point attempt_start,
                                      const std::string& now) {
  Json spec = lease.value("spec", Json::object());
  if (HeldByOther(spec, attempt_start)) return LeaseAttempt::kHeldByOther;
  const std::string holder = spec.value("holderIdentity", "");
  const bool ours = holder == options_.identity;
  spec["holderIdentity"] = options_.identity;
  spec["leaseDurationSeconds"] = LeaseDurationSeconds();
  spec["renewTime"] = now;
  if (!ours) {
    spec["acquireTime"] = now;
    spec["leaseTransitions"] = spec.value("leaseTransitions", 0) + (holder.empty() ? 0 : 1);
  }
  lease["spec"] = spec;
  // The update carries the resourceVersion read above (it is in lease.metadata): a 409 says
  // another replica wrote in between, and that replica wins.
  auto updated = client_.Replace(Resource::Leases(), options_.ns, options_.name, lease);
  if (!updated) {
    if (updated.error().category == ErrorCategory::kFailedPrecondition) {
      spdlog::info("leader election: Lease {}/{} changed under this update (409)", options_.ns,
                   options_.name);
      return LeaseAttempt::kConflict;
    }
    spdlog::warn("leader election: update Lease {}/{}: {}", options_.ns, options_.name,
                 updated.error().message);
    return LeaseAttempt::kError;
  }
  RecordLeading(attempt_start, now);
  return LeaseAttempt::kLeading;
}

void LeaderElector::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    const LeaseAttempt attempt = TryAcquireOrRenew();
    lock.lock();
    if (stopping_) break;
    const bool valid = attempt == LeaseAttempt::kLeading ||
                       (leading_ && attempt == LeaseAttempt::kError && Clock::now() < valid_until_);
    if (valid && !leading_) {
      leading_ = true;
      spdlog::info("leader election: {} leads (Lease {}/{})", options_.identity, options_.ns,
                   options_.name);
      lock.unlock();
      if (on_started_) on_started_();
      lock.lock();
    } else if (!valid && leading_) {
      // Lost (409, held by another) or the renew deadline passed without a renewal.
      leading_ = false;
      valid_until_ = {};
      spdlog::warn("leader election: {} stops leading", options_.identity);
      lock.unlock();
      if (on_stopped_) on_stopped_();
      lock.lock();
    }
    // A leader that fails to renew retries until its deadline; then it steps down above.
    auto next = Clock::now() + options_.retry_period;
    if (leading_ && valid_until_ < next) next = valid_until_;
    wake_.wait_until(lock, next, [this] { return stopping_; });
    if (leading_ && Clock::now() >= valid_until_) {
      leading_ = false;
      spdlog::warn("leader election: {} could not renew within the deadline; stops leading",
                   options_.identity);
      lock.unlock();
      if (on_stopped_) on_stopped_();
      lock.lock();
    }
  }
  if (leading_) {
    leading_ = false;
    lock.unlock();
    if (on_stopped_) on_stopped_();
  }
}

}  // namespace tessera::k8s
