// Polling the fabric manager for failed NVLinks, each new one handed to the sink once.
#include <spdlog/spdlog.h>

#include "fabricmanager/fabric_health.h"

namespace tessera::fabricmanager {
namespace {

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

FabricHealthWatch::FabricHealthWatch(FabricHealthOptions options, FabricSignalSink to_service)
    : options_(std::move(options)), sink_(std::move(to_service)) {}

FabricHealthWatch::~FabricHealthWatch() {
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FabricHealthWatch::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

Result<size_t> FabricHealthWatch::PollOnce() {
  std::lock_guard lock(poll_mu_);
  if (!fabric_) {
    if (!options_.connect) return FailedPrecondition("fabric health watch: no way to connect");
    auto connected = options_.connect();
    if (!connected) return connected.error();
    fabric_ = std::move(*connected);
  }
  // A connection that failed (the fabric manager restarted, or did not answer) is opened again
  // at the next poll.
  auto drop_if_lost = [this](const Error& error) {
    if (error.category == ErrorCategory::kUnavailable) fabric_.reset();
    return error;
  };
  auto listed = fabric_->ListPartitions();
  if (!listed) return drop_if_lost(listed.error());
  auto failed = fabric_->GetNvlinkFailedDevices();
  if (!failed) return drop_if_lost(failed.error());
  std::vector<uint32_t> active;
  for (const auto& partition : *listed)
    if (partition.active) active.push_back(partition.id);
  FabricFaultList found = FabricFaults(*failed, options_.table, active, WallClockMs());
  std::set<std::string> now;
  size_t handed = 0;
  for (auto& fault : found.faults) {
    now.insert(fault.key);
    if (seen_.count(fault.key)) continue;
    spdlog::info("fabric fault on GPU {}: {}", fault.signal.gpu, fault.signal.detail);
    if (sink_) sink_(std::move(fault.signal));
    ++handed;
  }
  for (const auto& unplaced : found.unplaced) {
    const std::string key = "unplaced " + unplaced;
    if (!now.insert(key).second || seen_.count(key)) continue;
    spdlog::warn(
        "fabric manager reports failed NVLinks on {}, which is no GPU of the partition table; "
        "nothing is stopped for it",
        unplaced);
  }
  seen_ = std::move(now);
  return handed;
}

void FabricHealthWatch::Run() {
  for (;;) {
    auto polled = PollOnce();
    {
      std::lock_guard lock(poll_mu_);
      const std::string problem = polled ? "" : polled.error().message;
      if (!problem.empty() && problem != last_problem_)
        spdlog::warn("fabric health watch: {}", problem);
      last_problem_ = problem;
    }
    std::unique_lock lock(stop_mu_);
    if (stop_cv_.wait_for(lock, options_.interval, [this] { return stopping_; })) return;
  }
}

}  // namespace tessera::fabricmanager
