// Passes that cost what can change, not how many requests wait: a pass without report stops
// once nothing more can start and no reservation can change, and gives the decisions a full
// pass gives; an arrival behind a full queue is no reason for a pass; recent usage follows the
// end the runtime reports; a default pending quota bounds every tenancy.
#include <random>

#include "scheduling_fixture.h"

namespace tessera::scheduling {
namespace {

using namespace testing;

struct Decisions {
  std::vector<std::tuple<RequestId, int, placement::GpuMask, bool>> admitted;
  std::vector<std::tuple<RequestId, int, placement::GpuMask>> reservations;
  std::vector<std::pair<RequestId, std::vector<RequestId>>> preemptions;
  friend bool operator==(const Decisions&, const Decisions&) = default;
};

Decisions DecisionsOf(const PassResult& pass) {
  Decisions out;
  for (const auto& a : pass.admitted)
    out.admitted.emplace_back(a.id, a.placement.node, a.placement.gpus, a.backfill);
  for (const auto& r : pass.reservations)
    out.reservations.emplace_back(r.holder, r.node, r.gpus);
  for (const auto& p : pass.preemptions)
    out.preemptions.emplace_back(p.for_request, p.victims);
  return out;
}

// A fleet of `nodes` HGX nodes with random work running (some with limits, some preemptible)
// and random requests of a few tenancies pending.
struct RandomQueue {
  placement::Fleet fleet;
  Scheduler scheduler;
  RandomQueue(uint32_t seed, int nodes, int pending, SchedulerOptions options)
      : fleet(HgxFleet(nodes)), scheduler(MakeScheduler(options)) {
    std::mt19937 random(seed);
    const std::array<int, 4> sizes = {1, 2, 4, 8};
    RequestId running = 1000000;
    for (int node = 0; node < nodes; ++node) {
      // Busy nodes, half-busy nodes and idle ones.
      const int kind = static_cast<int>(random() % 4);
      if (kind == 0) continue;
      const placement::GpuMask mask = kind == 1 ? 0xFF : kind == 2 ? 0x0F : 0x01;
      const double ends = random() % 2 ? kUnknownTime : 10 + random() % 500;
      StartRunning(scheduler, fleet, running++, "t" + std::to_string(random() % 3), node, mask, 0,
                   ends, random() % 2 == 0, static_cast<int>(random() % 3) - 1);
    }
    for (int i = 0; i < pending; ++i) {
      const int gpus = sizes[random() % sizes.size()];
      const double limit = random() % 3 == 0 ? 5.0 + random() % 300 : kUnknownTime;
      EXPECT_TRUE(scheduler
                      .Enqueue(Request(static_cast<RequestId>(i + 1),
                                       "t" + std::to_string(random() % 4), gpus, i * 0.001, limit))
                      .ok());
    }
  }
};

TEST(FastPass, GivesTheDecisionsOfAFullPass) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    for (int reservations : {0, 1, 8}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", reservations " +
                   std::to_string(reservations));
      SchedulerOptions options{.max_reservations = reservations, .preemption = seed % 2 == 0};
      RandomQueue fast(seed, 12, 300, options);
      RandomQueue full(seed, 12, 300, options);
      // Two passes each: the second starts from the reservations the first kept.
      for (double now : {20.0, 40.0}) {
        const PassResult a = fast.scheduler.Schedule(fast.fleet, now, /*report=*/false);
        const PassResult b = full.scheduler.Schedule(full.fleet, now, /*report=*/true);
        EXPECT_EQ(DecisionsOf(a), DecisionsOf(b)) << "at " << now;
        EXPECT_EQ(fast.scheduler.pending_count(), full.scheduler.pending_count());
      }
    }
  }
}

TEST(FastPass, StopsEarlyWhenEverythingIsBusy) {
  // 100 busy nodes and 10,000 requests: the pass decides its 8 reservations and stops.
  placement::Fleet fleet = HgxFleet(100);
  Scheduler scheduler = MakeScheduler();
  for (int node = 0; node < 100; ++node)
    StartRunning(scheduler, fleet, 1000000 + node, "busy", node, 0xFF, 0, 100 + node);
  for (int i = 0; i < 10000; ++i)
    ASSERT_TRUE(scheduler.Enqueue(Request(i + 1, "flood", 1 + i % 8, i)).ok());
  const PassResult pass = scheduler.Schedule(fleet, 1, /*report=*/false);
  EXPECT_TRUE(pass.admitted.empty());
  EXPECT_EQ(pass.reservations.size(), 8u);
  EXPECT_TRUE(pass.stopped_early);
  EXPECT_LE(pass.decisions, 100);
  // A report walks them all, with the same reservations.
  Scheduler copy = scheduler;
  placement::Fleet fleet_copy = fleet;
  const PassResult report = copy.Schedule(fleet_copy, 1, /*report=*/true);
  EXPECT_EQ(report.waiting.size(), 10000u);
  EXPECT_EQ(DecisionsOf(report).reservations, DecisionsOf(pass).reservations);
}

TEST(Arrival, BehindAFullQueueIsNoReasonForAPass) {
  // The flood's own work fills the fleet.
  placement::Fleet fleet = HgxFleet(4);
  Scheduler scheduler = MakeScheduler({.max_reservations = 2});
  for (int node = 0; node < 4; ++node)
    StartRunning(scheduler, fleet, 1000000 + node, "flood", node, 0xFF, 0);
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(scheduler.Enqueue(Request(i + 1, "flood", 8, i)).ok());
  // Nothing known yet: a pass decides.
  EXPECT_TRUE(scheduler.CouldChangeAPass(1));
  (void)scheduler.Schedule(fleet, 10, false);
  // One more of the flood's requests, behind the holders of both reservations: nothing changes.
  ASSERT_TRUE(scheduler.Enqueue(Request(6, "flood", 8, 10)).ok());
  EXPECT_FALSE(scheduler.CouldChangeAPass(6));
  // Another tenancy's first request comes first in the fair order (and moves the target shares;
  // the flood, above its share, yields a reservation to it): a pass is due.
  ASSERT_TRUE(scheduler.Enqueue(Request(7, "other", 8, 11)).ok());
  EXPECT_TRUE(scheduler.CouldChangeAPass(7));
  const PassResult pass = scheduler.Schedule(fleet, 11, true);
  const Wait* wait = WaitOf(pass, 7);
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(wait->kind, WaitKind::kReservation);
  EXPECT_EQ(wait->position, 1);
}

TEST(Arrival, ThatFitsTheGpusLeftFreeIsAReasonForAPass) {
  // node-0 busy until 100 (reserved for the 8-GPU request), node-1 half busy: 4 GPUs free that
  // no 8-GPU request can use.
  placement::Fleet fleet = HgxFleet(2);
  Scheduler scheduler = MakeScheduler({.max_reservations = 1});
  StartRunning(scheduler, fleet, 1000000, "busy", 0, 0xFF, 0, 100);
  StartRunning(scheduler, fleet, 1000001, "busy", 1, 0xF0, 0);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(scheduler.Enqueue(Request(i + 1, "flood", 8, i)).ok());
  const PassResult pass = scheduler.Schedule(fleet, 10, false);
  ASSERT_EQ(pass.reservations.size(), 1u);
  EXPECT_EQ(pass.reservations[0].node, 0);
  ASSERT_TRUE(scheduler.Enqueue(Request(4, "flood", 8, 10)).ok());
  EXPECT_FALSE(scheduler.CouldChangeAPass(4));
  ASSERT_TRUE(scheduler.Enqueue(Request(5, "flood", 2, 11)).ok());
  EXPECT_TRUE(scheduler.CouldChangeAPass(5));
  EXPECT_TRUE(Admitted(scheduler.Schedule(fleet, 11, false), 5));
}

TEST(Arrival, ThatIsNoReasonForAPassChangesNoPass) {
  // Whenever an arrival is judged no reason, a pass run anyway admits and reserves what it
  // would have without the arrival.
  int judged_no_reason = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomQueue with(seed, 6, 60, {.max_reservations = static_cast<int>(seed % 3)});
    RandomQueue without(seed, 6, 60, {.max_reservations = static_cast<int>(seed % 3)});
    (void)with.scheduler.Schedule(with.fleet, 5, false);
    (void)without.scheduler.Schedule(without.fleet, 5, false);
    std::mt19937 random(seed * 7);
    const PendingRequest arrival =
        Request(5000, "t" + std::to_string(random() % 5), 1 << (random() % 4), 5,
                random() % 2 ? 30 : kUnknownTime);
    ASSERT_TRUE(with.scheduler.Enqueue(arrival).ok());
    if (with.scheduler.CouldChangeAPass(arrival.id)) continue;
    ++judged_no_reason;
    auto a = DecisionsOf(with.scheduler.Schedule(with.fleet, 5, true));
    auto b = DecisionsOf(without.scheduler.Schedule(without.fleet, 5, true));
    EXPECT_EQ(a, b);
  }
  EXPECT_GT(judged_no_reason, 5);
}

TEST(RecentUsage, EndsWhereTheRuntimeSaysTheRunEnded) {
  placement::Fleet fleet = HgxFleet(1);
  Scheduler told_late = MakeScheduler({.half_life_s = 60});
  Scheduler told_at_once = MakeScheduler({.half_life_s = 60});
  placement::Fleet other = HgxFleet(1);
  StartRunning(told_late, fleet, 1, "a", 0, 0x03, 0);
  StartRunning(told_at_once, other, 1, "a", 0, 0x03, 0);
  // The run ended at 10 s; one scheduler hears of it only at 100 s (the service was down).
  EXPECT_TRUE(told_late.Finished(1, 100, 10));
  EXPECT_TRUE(told_at_once.Finished(1, 10));
  told_at_once.Advance(100);
  EXPECT_NEAR(told_late.Usage()[0].recent_gpus, told_at_once.Usage()[0].recent_gpus, 1e-9);
  // Rebuilt from the bill after a restart: the same.
  Scheduler restarted = MakeScheduler({.half_life_s = 60});
  restarted.Advance(100);
  restarted.ChargePast("a", 2, 0, 10);
  EXPECT_NEAR(restarted.Usage()[0].recent_gpus, told_at_once.Usage()[0].recent_gpus, 1e-9);
  // Not running here: nothing to finish.
  EXPECT_FALSE(told_late.Finished(1, 101, 10));
}

TEST(PendingQuota, TheDefaultBoundsATenancyUnlessItsPolicyRaisesIt) {
  Scheduler scheduler = MakeScheduler({.default_quota_pending = 2});
  for (RequestId id = 1; id <= 2; ++id)
    ASSERT_TRUE(scheduler.Enqueue(Request(id, "a", 1)).ok());
  Status refused = scheduler.CheckSubmit(Request(3, "a", 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "tenancy quota: 2/2 requests pending");
  EXPECT_EQ(scheduler.PendingQuotaOf("a"), 2);
  ASSERT_TRUE(scheduler.SetTenancy("a", {.quota_pending = 5}).ok());
  EXPECT_TRUE(scheduler.CheckSubmit(Request(3, "a", 1)).ok());
  ASSERT_TRUE(scheduler.SetTenancy("a", {.quota_pending = kUnlimited}).ok());
  EXPECT_EQ(scheduler.PendingQuotaOf("a"), kUnlimited);
  // A policy that says nothing of it follows the default.
  ASSERT_TRUE(scheduler.SetTenancy("a", {.weight = 2}).ok());
  EXPECT_EQ(scheduler.PendingQuotaOf("a"), 2);
  EXPECT_FALSE(Scheduler::Create({.default_quota_pending = -5}).ok());
}

}  // namespace
}  // namespace tessera::scheduling
