// Shared set-up for the scheduling tests: HGX fleets and requests that already run.
#pragma once

#include <gtest/gtest.h>

#include <cmath>

#include "scheduling/scheduling.h"

namespace tessera::scheduling::testing {

inline std::shared_ptr<const topology::PartitionPlanner> Hgx() {
  auto planner = topology::PartitionPlanner::Create(topology::HgxH100Table());
  EXPECT_TRUE(planner.ok());
  return *planner;
}

inline placement::Fleet HgxFleet(int nodes) {
  auto fleet = placement::Fleet::Uniform(nodes, 8, Hgx());
  EXPECT_TRUE(fleet.ok());
  return std::move(*fleet);
}

inline Scheduler MakeScheduler(SchedulerOptions options = {}) {
  auto scheduler = Scheduler::Create(options);
  EXPECT_TRUE(scheduler.ok()) << scheduler.error().message;
  return std::move(*scheduler);
}

// Leases exactly `gpus` (a mask) on `node` in the fleet and tells the scheduler a request holds
// them until `ends_s` (kUnknownTime: no limit).
inline void StartRunning(Scheduler& scheduler, placement::Fleet& fleet, RequestId id,
                         const std::string& tenancy, int node, placement::GpuMask gpus,
                         double started_s, double ends_s = kUnknownTime, bool preemptible = false,
                         int priority = 0) {
  ASSERT_TRUE(fleet.SetFreeMask(node, fleet.free_mask(node) & ~gpus).ok());
  placement::Placement placement;
  placement.node = node;
  placement.gpus = gpus;
  scheduler.Started(id, tenancy, placement, topology::MaskSize(gpus), started_s,
                    ends_s == kUnknownTime ? kUnknownTime : ends_s - started_s, priority,
                    preemptible);
}

inline PendingRequest Request(RequestId id, const std::string& tenancy, int gpus,
                              double submitted_s = 0, double max_duration_s = kUnknownTime,
                              int priority = 0) {
  PendingRequest r;
  r.id = id;
  r.tenancy = tenancy;
  r.label = "r" + std::to_string(id);
  r.gpus = gpus;
  r.submitted_s = submitted_s;
  r.max_duration_s = max_duration_s;
  r.priority = priority;
  return r;
}

inline std::vector<RequestId> WaitingOrder(const PassResult& pass) {
  std::vector<RequestId> ids;
  for (const Wait& wait : pass.waiting)
    ids.push_back(wait.id);
  return ids;
}

inline const Wait* WaitOf(const PassResult& pass, RequestId id) {
  for (const Wait& wait : pass.waiting)
    if (wait.id == id) return &wait;
  return nullptr;
}

inline bool Admitted(const PassResult& pass, RequestId id) {
  for (const Admission& admission : pass.admitted)
    if (admission.id == id) return true;
  return false;
}

}  // namespace tessera::scheduling::testing
