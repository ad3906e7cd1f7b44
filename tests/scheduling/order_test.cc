// Dispatch order: weighted fair share over recent usage, priority then age inside a tenancy,
// FIFO mode.
#include "scheduling_fixture.h"

namespace tessera::scheduling {
namespace {

using namespace testing;

struct ShareRow {
  const char* name;
  double weight_a, weight_b;
  int in_use_a, in_use_b;
  RequestId first;  // 1: a's request, 2: b's
};

TEST(ShareOrder, TenancyFurthestBelowItsShareGoesFirst) {
  const ShareRow rows[] = {
      {"equal weights, b uses less", 1, 1, 6, 2, 2},
      {"equal weights, a uses less", 1, 1, 2, 6, 1},
      {"a weighs 4x: 6/4 < 2/1", 4, 1, 6, 2, 1},
      {"b weighs 4x", 1, 4, 2, 6, 2},
      {"equal usage and weight: the older request", 1, 1, 4, 4, 1},
  };
  for (const ShareRow& row : rows) {
    SCOPED_TRACE(row.name);
    placement::Fleet fleet = HgxFleet(1);
    Scheduler scheduler = MakeScheduler();
    ASSERT_TRUE(scheduler.SetTenancy("a", {row.weight_a}).ok());
    ASSERT_TRUE(scheduler.SetTenancy("b", {row.weight_b}).ok());
    // Fill the node: a's GPUs from the bottom, b's from the top.
    const placement::GpuMask a_mask = (placement::GpuMask{1} << row.in_use_a) - 1;
    const placement::GpuMask b_mask = 0xFF & ~a_mask;
    ASSERT_EQ(topology::MaskSize(b_mask), row.in_use_b);
    StartRunning(scheduler, fleet, 100, "a", 0, a_mask, 0);
    StartRunning(scheduler, fleet, 101, "b", 0, b_mask, 0);
    ASSERT_TRUE(scheduler.Enqueue(Request(1, "a", 1, 0)).ok());
    ASSERT_TRUE(scheduler.Enqueue(Request(2, "b", 1, 1)).ok());
    PassResult pass = scheduler.Schedule(fleet, 2);
    ASSERT_TRUE(pass.admitted.empty());
    ASSERT_EQ(pass.waiting.size(), 2u);
    EXPECT_EQ(pass.waiting[0].id, row.first);
    EXPECT_EQ(pass.waiting[0].position, 1);
    EXPECT_EQ(pass.waiting[1].position, 2);
  }
}

TEST(ShareOrder, PositionsInterleaveAsSharesWouldFill) {
  placement::Fleet fleet = HgxFleet(1);
  Scheduler scheduler = MakeScheduler();
  StartRunning(scheduler, fleet, 100, "x", 0, 0xFF, 0);
  // a queued four 1-GPU requests before b queued two; with equal usage they alternate.
  for (RequestId id = 1; id <= 4; ++id)
    ASSERT_TRUE(scheduler.Enqueue(Request(id, "a", 1, id)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(5, "b", 1, 5)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(6, "b", 1, 6)).ok());
  PassResult pass = scheduler.Schedule(fleet, 10);
  EXPECT_EQ(WaitingOrder(pass), (std::vector<RequestId>{1, 5, 2, 6, 3, 4}));
}

TEST(ShareOrder, RecentUsageDecaysWithTheHalfLife) {
  SchedulerOptions options;
  options.half_life_s = 100;
  placement::Fleet fleet = HgxFleet(2);
  Scheduler scheduler = MakeScheduler(options);
  // a used a whole node for 1000 s, then stopped; b has held one GPU all along.
  StartRunning(scheduler, fleet, 100, "a", 0, 0xFF, 0);
  StartRunning(scheduler, fleet, 101, "b", 1, 0x01, 0);
  StartRunning(scheduler, fleet, 102, "x", 1, 0xFE, 0);
  ASSERT_TRUE(fleet.SetFreeMask(0, 0xFF).ok());
  scheduler.Finished(100, 1000);
  StartRunning(scheduler, fleet, 103, "x", 0, 0xFF, 1000);
  ASSERT_TRUE(scheduler.Enqueue(Request(1, "a", 1, 1000)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(2, "b", 1, 1001)).ok());
  // Right after: a's recent usage (about 8 GPUs) is above b's (1 recent + 1 in use), so b goes
  // first although a is older.
  EXPECT_EQ(WaitingOrder(scheduler.Schedule(fleet, 1002)), (std::vector<RequestId>{2, 1}));
  auto usage = scheduler.Usage();
  ASSERT_EQ(usage[0].name, "a");
  EXPECT_NEAR(usage[0].recent_gpus, 8 * (1 - std::exp2(-10.0)) * std::exp2(-2.0 / 100), 0.01);
  // Twenty half-lives later a's usage has decayed to almost nothing, below b's.
  EXPECT_EQ(WaitingOrder(scheduler.Schedule(fleet, 3002)), (std::vector<RequestId>{1, 2}));
}

TEST(PriorityOrder, PriorityThenAgeInsideATenancy) {
  placement::Fleet fleet = HgxFleet(1);
  Scheduler scheduler = MakeScheduler();
  ASSERT_TRUE(scheduler.SetTenancy("a", {.max_priority = 5}).ok());
  StartRunning(scheduler, fleet, 100, "x", 0, 0xFF, 0);
  ASSERT_TRUE(scheduler.Enqueue(Request(1, "a", 1, 0, kUnknownTime, 0)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(2, "a", 1, 1, kUnknownTime, 5)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(3, "a", 1, 2, kUnknownTime, 5)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(4, "a", 1, 3, kUnknownTime, -3)).ok());
  EXPECT_EQ(WaitingOrder(scheduler.Schedule(fleet, 10)), (std::vector<RequestId>{2, 3, 1, 4}));
  // Lowering the tenancy's maximum caps what its queued requests count as.
  ASSERT_TRUE(scheduler.SetTenancy("a", {.max_priority = 0}).ok());
  EXPECT_EQ(WaitingOrder(scheduler.Schedule(fleet, 11)), (std::vector<RequestId>{1, 2, 3, 4}));
}

struct PriorityRow {
  int max_priority;
  int priority;
  bool accepted;
};

TEST(PriorityBounds, SubmissionsAboveTheTenancyMaximumAreRefused) {
  const PriorityRow rows[] = {
      {0, 0, true},      {0, 1, false},      {5, 5, true},     {5, 6, false},   {0, -1000, true},
      {0, -1001, false}, {1000, 1000, true}, {-10, -10, true}, {-10, 0, false},
  };
  for (const PriorityRow& row : rows) {
    SCOPED_TRACE(std::to_string(row.max_priority) + " / " + std::to_string(row.priority));
    Scheduler scheduler = MakeScheduler();
    ASSERT_TRUE(scheduler.SetTenancy("a", {.max_priority = row.max_priority}).ok());
    Status status = scheduler.CheckSubmit(Request(1, "a", 1, 0, kUnknownTime, row.priority));
    EXPECT_EQ(status.ok(), row.accepted);
    if (!status.ok()) {
      EXPECT_EQ(status.error().category, ErrorCategory::kInvalidArgument);
      EXPECT_NE(status.error().message.find("priority"), std::string::npos);
    }
  }
  EXPECT_FALSE(ValidateTenancyPolicy({.max_priority = 1001}).ok());
  EXPECT_FALSE(ValidateTenancyPolicy({.max_priority = -1001}).ok());
  EXPECT_FALSE(ValidateTenancyPolicy({.weight = 0}).ok());
  EXPECT_FALSE(ValidateTenancyPolicy({.weight = 1001}).ok());
  EXPECT_FALSE(ValidateTenancyPolicy({.weight = NAN}).ok());
}

TEST(FifoOrder, SubmissionOrderWhateverTheTenancyOrPriority) {
  SchedulerOptions options;
  options.mode = Mode::kFifo;
  placement::Fleet fleet = HgxFleet(1);
  Scheduler scheduler = MakeScheduler(options);
  ASSERT_TRUE(scheduler.SetTenancy("b", {.max_priority = 9}).ok());
  StartRunning(scheduler, fleet, 100, "b", 0, 0xFF, 0);
  ASSERT_TRUE(scheduler.Enqueue(Request(1, "a", 1, 0)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(2, "a", 1, 1)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(3, "b", 1, 2, kUnknownTime, 9)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(4, "a", 1, 3)).ok());
  EXPECT_EQ(WaitingOrder(scheduler.Schedule(fleet, 10)), (std::vector<RequestId>{1, 2, 3, 4}));
}

TEST(Queue, CancelledRequestsLeaveTheOrderAndIdsAreUnique) {
  placement::Fleet fleet = HgxFleet(1);
  Scheduler scheduler = MakeScheduler();
  StartRunning(scheduler, fleet, 100, "x", 0, 0xFF, 0);
  ASSERT_TRUE(scheduler.Enqueue(Request(1, "a", 1)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(2, "a", 1)).ok());
  EXPECT_EQ(scheduler.Enqueue(Request(2, "b", 1)).error().category, ErrorCategory::kAlreadyExists);
  EXPECT_EQ(scheduler.Enqueue(Request(100, "b", 1)).error().category,
            ErrorCategory::kAlreadyExists);
  EXPECT_FALSE(scheduler.Enqueue(Request(0, "b", 1)).ok());
  EXPECT_TRUE(scheduler.Cancel(1));
  EXPECT_FALSE(scheduler.Cancel(1));
  EXPECT_EQ(WaitingOrder(scheduler.Schedule(fleet, 1)), (std::vector<RequestId>{2}));
}

}  // namespace
}  // namespace tessera::scheduling
