// Reservations: the request that does not fit holds the node and partition it gets first; later
// requests run only where they do not delay it.
#include "scheduling_fixture.h"

namespace tessera::scheduling {
namespace {

using namespace testing;

// Two HGX nodes: node-0 fully busy until t=100, node-1 holds a 2-GPU request (partition P3,
// modules 1 and 3) until `node1_ends` and is otherwise free. An 8-GPU request queues first.
// One reservation per pass, so later requests that do not fit wait behind it.
struct TwoNodes {
  placement::Fleet fleet = HgxFleet(2);
  Scheduler scheduler = MakeScheduler({.max_reservations = 1});

  explicit TwoNodes(double node1_ends = 50, double node0_ends = 100) {
    StartRunning(scheduler, fleet, 100, "x", 0, 0xFF, 0, node0_ends);
    StartRunning(scheduler, fleet, 101, "x", 1, 0x05, 0, node1_ends);
    EXPECT_TRUE(scheduler.Enqueue(Request(1, "big", 8, 0)).ok());
  }
};

TEST(Reservation, TheHeadReservesTheNodeThatFreesFirst) {
  TwoNodes setup;
  PassResult pass = setup.scheduler.Schedule(setup.fleet, 1);
  ASSERT_EQ(pass.reservations.size(), 1u);
  const Reservation& r = pass.reservations[0];
  EXPECT_EQ(r.holder, 1u);
  EXPECT_EQ(r.node, 1);
  EXPECT_EQ(r.gpus, 0xFFu);
  EXPECT_EQ(r.partition_id, 0u);
  EXPECT_DOUBLE_EQ(r.ready_s, 50);
  const Wait* wait = WaitOf(pass, 1);
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(wait->kind, WaitKind::kReservation);
  EXPECT_EQ(setup.scheduler.Describe(*wait, pass, setup.fleet),
            "waiting: next to start, 8 GPUs reserved on node-1 (free in at most 49 s)");
  // The pass gives the hidden GPUs back to the fleet model.
  EXPECT_EQ(setup.fleet.free_mask(1), 0xFAu);
}

TEST(Reservation, IsKeptAcrossPassesUntilTheHolderStarts) {
  TwoNodes setup;
  // A stream of 1-GPU requests without a limit: none may take node-1's free GPUs.
  RequestId next = 2;
  for (double t = 1; t < 50; t += 7) {
    ASSERT_TRUE(setup.scheduler.Enqueue(Request(next, "small", 1, t)).ok());
    PassResult pass = setup.scheduler.Schedule(setup.fleet, t);
    EXPECT_TRUE(pass.admitted.empty()) << "at t=" << t;
    const Wait* wait = WaitOf(pass, next);
    ASSERT_NE(wait, nullptr);
    EXPECT_EQ(wait->kind, WaitKind::kReserved);
    EXPECT_EQ(setup.scheduler.Describe(*wait, pass, setup.fleet),
              "waiting: reserved for r1 (8 GPUs on node-1)");
    ++next;
  }
  // Node-1's request ends: the 8-GPU request starts there, then the small ones get nothing
  // (node-0 is still busy).
  setup.scheduler.Finished(101, 50);
  ASSERT_TRUE(setup.fleet.SetFreeMask(1, 0xFF).ok());
  PassResult pass = setup.scheduler.Schedule(setup.fleet, 50);
  ASSERT_EQ(pass.admitted.size(), 1u);
  EXPECT_EQ(pass.admitted[0].id, 1u);
  EXPECT_EQ(pass.admitted[0].placement.node, 1);
  EXPECT_EQ(pass.admitted[0].placement.gpus, 0xFFu);
}

TEST(Reservation, RequestsThatFitElsewhereStillRun) {
  TwoNodes setup;
  // Node-0 gets two free GPUs (P4: modules 2 and 4): 1-GPU requests go there, not into node-1.
  setup.scheduler.Finished(100, 1);
  ASSERT_TRUE(setup.fleet.SetFreeMask(0, 0x0A).ok());
  StartRunning(setup.scheduler, setup.fleet, 102, "x", 0, 0xF5, 0, 100);
  for (RequestId id = 2; id <= 4; ++id)
    ASSERT_TRUE(setup.scheduler.Enqueue(Request(id, "small", 1, id)).ok());
  PassResult pass = setup.scheduler.Schedule(setup.fleet, 5);
  ASSERT_EQ(pass.admitted.size(), 2u);
  for (const Admission& a : pass.admitted) {
    EXPECT_EQ(a.placement.node, 0);
    EXPECT_FALSE(a.backfill);
  }
  EXPECT_EQ(WaitingOrder(pass), (std::vector<RequestId>{1, 4}));
}

struct BackfillRow {
  const char* name;
  double node1_ends;      // kUnknownTime: what runs there has no limit
  double max_duration_s;  // of the 1-GPU request submitted at t=10
  bool admitted;
};

TEST(Backfill, OnlyIntoWhatTheReservationDoesNotNeedInTime) {
  const BackfillRow rows[] = {
      {"ends before the reservation is needed", 50, 30, true},
      {"ends exactly when it is needed", 50, 40, true},
      {"would delay it", 50, 41, false},
      {"no limit never backfills", 50, kUnknownTime, false},
      {"reservation time unknown: no backfill", kUnknownTime, 5, false},
  };
  for (const BackfillRow& row : rows) {
    SCOPED_TRACE(row.name);
    TwoNodes setup(row.node1_ends, row.node1_ends == kUnknownTime ? kUnknownTime : 100);
    ASSERT_TRUE(setup.scheduler.Enqueue(Request(2, "small", 1, 10, row.max_duration_s)).ok());
    PassResult pass = setup.scheduler.Schedule(setup.fleet, 10);
    ASSERT_EQ(pass.reservations.size(), 1u);
    EXPECT_EQ(pass.reservations[0].node, 1);
    EXPECT_EQ(Admitted(pass, 2), row.admitted);
    if (row.admitted) {
      EXPECT_TRUE(pass.admitted[0].backfill);
      EXPECT_EQ(pass.admitted[0].placement.node, 1);
      // Inside the reserved node's free GPUs, never the running request's.
      EXPECT_EQ(pass.admitted[0].placement.gpus & 0x05, 0u);
    } else {
      EXPECT_EQ(WaitOf(pass, 2)->kind, WaitKind::kReserved);
    }
  }
}

TEST(Reservation, UnknownEndsReserveTheNodeWithTheLeastStillRunning) {
  placement::Fleet fleet = HgxFleet(3);
  Scheduler scheduler = MakeScheduler();
  StartRunning(scheduler, fleet, 100, "x", 0, 0xFF, 0);  // 8 busy
  StartRunning(scheduler, fleet, 101, "x", 1, 0x0F, 0);  // 4 busy
  StartRunning(scheduler, fleet, 102, "x", 2, 0x05, 0);  // 2 busy
  ASSERT_TRUE(scheduler.Enqueue(Request(1, "big", 8)).ok());
  PassResult pass = scheduler.Schedule(fleet, 1);
  ASSERT_EQ(pass.reservations.size(), 1u);
  EXPECT_EQ(pass.reservations[0].node, 2);
  EXPECT_EQ(pass.reservations[0].ready_s, kUnknownTime);
  EXPECT_EQ(scheduler.Describe(*WaitOf(pass, 1), pass, fleet),
            "waiting: next to start, 8 GPUs reserved on node-2 (free when their work ends)");
}

TEST(Reservation, LaterHeadsReserveWhatEarlierOnesLeft) {
  placement::Fleet fleet = HgxFleet(2);
  Scheduler scheduler = MakeScheduler({.max_reservations = 3});
  StartRunning(scheduler, fleet, 100, "x", 0, 0xFF, 0, 100);
  StartRunning(scheduler, fleet, 101, "x", 1, 0xFF, 0, 50);
  for (RequestId id = 1; id <= 4; ++id)
    ASSERT_TRUE(scheduler.Enqueue(Request(id, "big", 8, id)).ok());
  PassResult pass = scheduler.Schedule(fleet, 5);
  ASSERT_EQ(pass.reservations.size(), 2u);
  EXPECT_EQ(pass.reservations[0].holder, 1u);
  EXPECT_EQ(pass.reservations[0].node, 1);
  EXPECT_EQ(pass.reservations[1].holder, 2u);
  EXPECT_EQ(pass.reservations[1].node, 0);
  EXPECT_DOUBLE_EQ(pass.reservations[1].ready_s, 100);
  // Nothing is left to reserve for the third: it waits for capacity.
  EXPECT_EQ(WaitOf(pass, 3)->kind, WaitKind::kNoCapacity);
  EXPECT_EQ(WaitOf(pass, 3)->position, 3);
}

TEST(Reservation, OffMeansPlainBackfill) {
  SchedulerOptions options;
  options.max_reservations = 0;
  placement::Fleet fleet = HgxFleet(2);
  Scheduler scheduler = MakeScheduler(options);
  StartRunning(scheduler, fleet, 100, "x", 0, 0xFF, 0, 100);
  StartRunning(scheduler, fleet, 101, "x", 1, 0x05, 0, 50);
  ASSERT_TRUE(scheduler.Enqueue(Request(1, "big", 8)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(2, "small", 1)).ok());
  PassResult pass = scheduler.Schedule(fleet, 1);
  EXPECT_TRUE(pass.reservations.empty());
  EXPECT_TRUE(Admitted(pass, 2));
  EXPECT_EQ(WaitOf(pass, 1)->kind, WaitKind::kNoCapacity);
  EXPECT_EQ(scheduler.Describe(*WaitOf(pass, 1), pass, fleet),
            "waiting: no capacity: needs 8 GPUs together, 6 free");
}

TEST(Reservation, SizesNoNodeCanGiveNeverReserve) {
  placement::Fleet fleet = HgxFleet(1);
  Scheduler scheduler = MakeScheduler();
  ASSERT_TRUE(scheduler.Enqueue(Request(1, "a", 3)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(2, "a", 1)).ok());
  PassResult pass = scheduler.Schedule(fleet, 1);
  EXPECT_TRUE(pass.reservations.empty());
  EXPECT_TRUE(Admitted(pass, 2));
  EXPECT_EQ(WaitOf(pass, 1)->kind, WaitKind::kNeverPlaceable);
}

}  // namespace
}  // namespace tessera::scheduling

namespace tessera::scheduling {
namespace {

using namespace testing;

// flood runs node-0 until 1000 and half of node-1 until 50; `holder` runs the other half until
// 60 and its 8-GPU request (ID 1) reserves node-1, which drains first.
void HolderReservesNodeOne(Scheduler& scheduler, placement::Fleet& fleet,
                           const std::string& holder) {
  StartRunning(scheduler, fleet, 100, "flood", 0, 0xFF, 0, 1000);
  StartRunning(scheduler, fleet, 101, "flood", 1, 0x0F, 0, 50);
  StartRunning(scheduler, fleet, 102, holder, 1, 0xF0, 0, 60);
  ASSERT_TRUE(scheduler.Enqueue(Request(1, holder, 8, 0)).ok());
  PassResult first = scheduler.Schedule(fleet, 1);
  ASSERT_EQ(first.reservations.size(), 1u);
  EXPECT_EQ(first.reservations[0].node, 1);
}

TEST(Reservation, IsKeptAgainstRequestsThatComeEarlierInALaterPass) {
  placement::Fleet fleet = HgxFleet(2);
  Scheduler scheduler = MakeScheduler();
  // x is below its share: its reservation stays.
  HolderReservesNodeOne(scheduler, fleet, "x");
  // Half of node-1 frees; tenancy a (using nothing, so first in order) asks for 1 GPU.
  scheduler.Finished(101, 50);
  ASSERT_TRUE(fleet.SetFreeMask(1, 0x0F).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(2, "a", 1, 50)).ok());
  PassResult second = scheduler.Schedule(fleet, 50);
  EXPECT_TRUE(second.admitted.empty());
  EXPECT_EQ(WaitingOrder(second), (std::vector<RequestId>{2, 1}));
  // a's request reserves elsewhere: node-1's free half stays with the holder.
  ASSERT_EQ(WaitOf(second, 2)->kind, WaitKind::kReservation);
  EXPECT_EQ(second.reservations[WaitOf(second, 2)->reservation].node, 0);
  EXPECT_EQ(WaitOf(second, 1)->kind, WaitKind::kReservation);
  EXPECT_DOUBLE_EQ(second.reservations[WaitOf(second, 1)->reservation].ready_s, 60);
  // The rest frees: the holder starts on its node, and its reservation is gone.
  scheduler.Finished(102, 60);
  ASSERT_TRUE(fleet.SetFreeMask(1, 0xFF).ok());
  PassResult third = scheduler.Schedule(fleet, 60);
  ASSERT_EQ(third.admitted.size(), 1u);
  EXPECT_EQ(third.admitted[0].id, 1u);
  EXPECT_EQ(third.admitted[0].placement.node, 1);
  PassResult fourth = scheduler.Schedule(fleet, 61);
  EXPECT_EQ(fourth.reservations.size(), 1u);  // a's own now, on node-0
  EXPECT_EQ(fourth.reservations[0].holder, 2u);
}

TEST(Reservation, ATenancyAboveItsShareYieldsItsReservationToOneBelow) {
  placement::Fleet fleet = HgxFleet(2);
  Scheduler scheduler = MakeScheduler();
  // flood holds everything, node-1 reserved for its 8-GPU request.
  HolderReservesNodeOne(scheduler, fleet, "flood");
  // Half of node-1 frees while a, far below its share, waits: flood (above its share) keeps no
  // reservation against it, so a starts now instead of behind flood's request.
  scheduler.Finished(101, 50);
  ASSERT_TRUE(fleet.SetFreeMask(1, 0x0F).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(2, "a", 1, 50)).ok());
  PassResult second = scheduler.Schedule(fleet, 50);
  EXPECT_TRUE(Admitted(second, 2));
  EXPECT_FALSE(Admitted(second, 1));
  ASSERT_NE(WaitOf(second, 1), nullptr);
  EXPECT_EQ(WaitOf(second, 1)->kind, WaitKind::kReservation);  // made again, in fair order
  // With nobody below its share waiting, flood's reservation is kept from pass to pass.
  PassResult third = scheduler.Schedule(fleet, 51);
  ASSERT_EQ(third.reservations.size(), 1u);
  EXPECT_EQ(third.reservations[0].holder, 1u);
  EXPECT_EQ(third.reservations[0].node, second.reservations[0].node);
}

}  // namespace
}  // namespace tessera::scheduling
