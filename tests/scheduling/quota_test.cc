// Quotas: GPUs in use (a pending request waits, naming the quota) and requests pending (refused
// at submission).
#include "scheduling_fixture.h"

namespace tessera::scheduling {
namespace {

using namespace testing;

struct GpuQuotaRow {
  int quota;
  int in_use;
  int gpus;
  bool admitted;
};

TEST(GpuQuota, ARequestOverTheQuotaWaitsAndSaysWhy) {
  const GpuQuotaRow rows[] = {
      {8, 0, 8, true},  {8, 4, 4, true}, {8, 4, 8, false}, {8, 8, 1, false},
      {0, 0, 1, false}, {2, 1, 1, true}, {2, 1, 2, false},
  };
  for (const GpuQuotaRow& row : rows) {
    SCOPED_TRACE(std::to_string(row.in_use) + " in use + " + std::to_string(row.gpus) + " of " +
                 std::to_string(row.quota));
    placement::Fleet fleet = HgxFleet(2);
    Scheduler scheduler = MakeScheduler();
    ASSERT_TRUE(scheduler.SetTenancy("a", {.quota_gpus = row.quota}).ok());
    if (row.in_use > 0) StartRunning(scheduler, fleet, 100, "a", 1, (1u << row.in_use) - 1, 0);
    ASSERT_TRUE(scheduler.Enqueue(Request(1, "a", row.gpus)).ok());
    // Another tenancy is not held back by a's quota.
    ASSERT_TRUE(scheduler.Enqueue(Request(2, "b", 1)).ok());
    PassResult pass = scheduler.Schedule(fleet, 1);
    EXPECT_EQ(Admitted(pass, 1), row.admitted);
    EXPECT_TRUE(Admitted(pass, 2));
    if (!row.admitted) {
      const Wait* wait = WaitOf(pass, 1);
      ASSERT_NE(wait, nullptr);
      EXPECT_EQ(wait->kind, WaitKind::kQuotaGpus);
      EXPECT_EQ(wait->position, 1);
      EXPECT_EQ(scheduler.Describe(*wait, pass, fleet),
                "waiting: tenancy quota " + std::to_string(row.in_use) + "/" +
                    std::to_string(row.quota) + " GPUs in use");
    }
  }
}

TEST(GpuQuota, AdmissionsInOnePassCountAgainstTheQuota) {
  placement::Fleet fleet = HgxFleet(2);
  Scheduler scheduler = MakeScheduler();
  ASSERT_TRUE(scheduler.SetTenancy("a", {.quota_gpus = 3}).ok());
  for (RequestId id = 1; id <= 5; ++id)
    ASSERT_TRUE(scheduler.Enqueue(Request(id, "a", 1, id)).ok());
  PassResult pass = scheduler.Schedule(fleet, 10);
  EXPECT_EQ(pass.admitted.size(), 3u);
  EXPECT_EQ(WaitingOrder(pass), (std::vector<RequestId>{4, 5}));
  // One ends: exactly one more starts.
  scheduler.Finished(pass.admitted[0].id, 20);
  ASSERT_TRUE(fleet.Release(pass.admitted[0].placement).ok());
  PassResult next = scheduler.Schedule(fleet, 21);
  ASSERT_EQ(next.admitted.size(), 1u);
  EXPECT_EQ(next.admitted[0].id, 4u);
}

TEST(GpuQuota, GpusHeldOutsideTheQueueCountAgainstItAndInTheShare) {
  placement::Fleet fleet = HgxFleet(2);
  Scheduler scheduler = MakeScheduler();
  ASSERT_TRUE(scheduler.SetTenancy("a", {.quota_gpus = 2}).ok());
  // Three 1g MIG slices of seven: 3/7 of a GPU, so two whole GPUs would pass the quota.
  scheduler.SetOtherUse("a", 3.0 / 7.0, 1);
  ASSERT_TRUE(scheduler.Enqueue(Request(1, "a", 2)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(2, "a", 1)).ok());
  PassResult pass = scheduler.Schedule(fleet, 2);
  EXPECT_FALSE(Admitted(pass, 1));
  EXPECT_TRUE(Admitted(pass, 2));
  const Wait* wait = WaitOf(pass, 1);
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(scheduler.Describe(*wait, pass, fleet), "waiting: tenancy quota 0.429/2 GPUs in use");
  // Their share of the fleet counts them too; released, they count no more.
  auto usage = scheduler.Usage();
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_DOUBLE_EQ(usage[0].other_gpus, 3.0 / 7.0);
  EXPECT_EQ(usage[0].in_use, 1);
  scheduler.SetOtherUse("a", 0, 3);
  EXPECT_DOUBLE_EQ(scheduler.Usage()[0].other_gpus, 0);
}

TEST(FairShare, SlicesHeldOutsideTheQueueMoveATenancyBack) {
  placement::Fleet fleet = HgxFleet(1);
  Scheduler scheduler = MakeScheduler();
  // Equal weights, nothing run yet; a holds 2 GPUs' worth of MIG slices, b none: b goes first.
  scheduler.SetOtherUse("a", 2, 0);
  ASSERT_TRUE(scheduler.Enqueue(Request(1, "a", 8, 0)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(2, "b", 8, 1)).ok());
  PassResult pass = scheduler.Schedule(fleet, 1);
  EXPECT_TRUE(Admitted(pass, 2));
  EXPECT_FALSE(Admitted(pass, 1));
}

struct PendingQuotaRow {
  int quota;
  int queued;
  bool accepted;
};

TEST(PendingQuota, SubmissionsOverThePendingQuotaAreRefusedNamingIt) {
  const PendingQuotaRow rows[] = {{2, 0, true}, {2, 1, true}, {2, 2, false}, {0, 0, false}};
  for (const PendingQuotaRow& row : rows) {
    SCOPED_TRACE(std::to_string(row.queued) + " of " + std::to_string(row.quota));
    Scheduler scheduler = MakeScheduler();
    ASSERT_TRUE(scheduler.SetTenancy("a", {.quota_pending = row.quota}).ok());
    for (int i = 0; i < row.queued; ++i)
      ASSERT_TRUE(scheduler.Enqueue(Request(i + 1, "a", 1)).ok());
    Status status = scheduler.CheckSubmit(Request(99, "a", 1));
    EXPECT_EQ(status.ok(), row.accepted);
    if (!status.ok()) {
      EXPECT_EQ(status.error().category, ErrorCategory::kFailedPrecondition);
      EXPECT_EQ(status.error().message, "tenancy quota: " + std::to_string(row.queued) + "/" +
                                            std::to_string(row.quota) + " requests pending");
    }
    // Other tenancies have their own.
    EXPECT_TRUE(scheduler.CheckSubmit(Request(98, "b", 1)).ok());
  }
}

TEST(Bounds, OutOfRangeQuotasAndDurationLimitsAreRefused) {
  EXPECT_FALSE(ValidateTenancyPolicy({.quota_gpus = -1}).ok());
  EXPECT_FALSE(ValidateTenancyPolicy({.quota_gpus = kMaxQuotaGpus + 1}).ok());
  EXPECT_FALSE(ValidateTenancyPolicy({.quota_pending = -1}).ok());
  EXPECT_TRUE(ValidateTenancyPolicy({.quota_gpus = 0, .quota_pending = 0}).ok());
  Scheduler scheduler = MakeScheduler();
  EXPECT_FALSE(scheduler.CheckSubmit(Request(1, "a", 1, 0, 0.5)).ok());
  EXPECT_FALSE(scheduler.CheckSubmit(Request(1, "a", 1, 0, NAN)).ok());
  EXPECT_FALSE(scheduler.CheckSubmit(Request(1, "a", 1, 0, 1e12)).ok());
  EXPECT_TRUE(scheduler.CheckSubmit(Request(1, "a", 1, 0, 60)).ok());
  EXPECT_FALSE(scheduler.CheckSubmit(Request(1, "a", 0)).ok());
  EXPECT_FALSE(scheduler.CheckSubmit(Request(1, "a", 65)).ok());
  EXPECT_FALSE(Scheduler::Create({.half_life_s = 0}).ok());
  EXPECT_FALSE(Scheduler::Create({.max_reservations = -1}).ok());
}

}  // namespace
}  // namespace tessera::scheduling
