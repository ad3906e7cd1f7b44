// What a share of a GPU pays (pure: ShareHolds over records and a Meter). A GPU held whole is
// billed exactly one GPU over the time its shares held it, its containers' fractions and the
// held rest adding up; the first share counts the whole GPU for fair share and quota, the next
// ones nothing; across tenancies each share pays its fraction; a restart bills on from the last
// change.
#include "serve/share_billing.h"

#include <gtest/gtest.h>

#include "serve/metering.h"

namespace tessera::serve {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

fleet::GpuRecord Gpu() {
  fleet::GpuRecord gpu;
  gpu.pci_address = "0000:18:00.0";
  gpu.model = "NVIDIA H100 80GB HBM3";
  gpu.memory_bytes = 81559 * kMiB;
  return gpu;
}

fleet::ContainerRecord Share(const std::string& id, double part, int64_t started_ms,
                             sharing::Mode mode = sharing::Mode::kMps) {
  fleet::ContainerRecord c;
  c.id = id;
  c.spec.tenancy = "tiny";
  c.tenancy_uid = "u1";
  c.spec.share = sharing::Share{256 * kMiB, 1, mode};
  c.share_gpus = part;
  c.started = true;
  c.started_ms = started_ms;
  c.gpus = {"0000:18:00.0"};
  return c;
}

void Hold(fleet::GpuRecord& gpu, const fleet::ContainerRecord& c) {
  gpu.shares.push_back({c.id, c.spec.tenancy, c.tenancy_uid, *c.spec.share, ""});
}
void Unhold(fleet::GpuRecord& gpu, const fleet::ContainerRecord& c) {
  std::erase_if(gpu.shares, [&](const auto& holder) { return holder.container_id == c.id; });
}

std::vector<fleet::UsageRecord> Records(const std::vector<fleet::Mutation>& out) {
  std::vector<fleet::UsageRecord> records;
  for (const auto& m : out)
    if (auto* r = std::get_if<fleet::UsageRecord>(&m)) records.push_back(*r);
  return records;
}

TEST(ShareBilling, AOnePercentShareIsChargedItsPartAndItsGpuTheRest) {
  EXPECT_DOUBLE_EQ(ChargedPart(0.01, 0, true), 0.01);
  EXPECT_DOUBLE_EQ(ChargedPart(0.6, 0.5, true), 0.5);  // never past the one GPU
  EXPECT_DOUBLE_EQ(ChargedPart(1.0, 1.0, true), 0.0);  // a second time-sliced share
  EXPECT_DOUBLE_EQ(ChargedPart(0.6, 0.5, false), 0.6);
  EXPECT_EQ(HeldRunId(Gpu()), "held-0000-18-00.0");

  ShareHolds holds(/*across_tenancies=*/false);
  Meter meter;
  fleet::GpuRecord gpu = Gpu();
  std::vector<fleet::Mutation> out;
  auto a = Share("c-a", 0.01, 1000);
  Hold(gpu, a);
  holds.Started(gpu, a, meter, out);
  meter.Started("u1", "tiny", a.id, a.share_gpus, a.started_ms);
  EXPECT_TRUE(out.empty());
  // While it runs, the tenancy is billed one GPU.
  EXPECT_NEAR(meter.TotalGpuMs("u1", 2000), 1000.0, 1e-6);
  a.finished_ms = 3000;
  Unhold(gpu, a);
  EXPECT_EQ(holds.Left(gpu, a, true, 3000, meter, out), 3000);
  meter.Add(UsageOf(a));
  const auto records = Records(out);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].container_id, "held-0000-18-00.0");
  EXPECT_DOUBLE_EQ(records[0].gpus, 0.99);
  EXPECT_EQ(records[0].started_ms, 1000);
  EXPECT_EQ(records[0].finished_ms, 3000);
  EXPECT_EQ(records[0].mode, "share");
  EXPECT_NEAR(meter.TotalGpuMs("u1", 9000), 2000.0, 1e-6);  // one GPU for 2 s
}

TEST(ShareBilling, SharesComingAndGoingAddUpToOneGpuOverTheHold) {
  ShareHolds holds(/*across_tenancies=*/false);
  Meter meter;
  fleet::GpuRecord gpu = Gpu();
  std::vector<fleet::Mutation> out;
  auto a = Share("c-a", 0.01, 1000);
  auto b = Share("c-b", 0.3, 3000);
  auto c = Share("c-c", 0.2, 0);  // placed, never ran
  for (auto* s : {&a, &b, &c})
    Hold(gpu, *s);
  holds.Started(gpu, a, meter, out);
  holds.Started(gpu, b, meter, out);
  a.finished_ms = 5000;
  Unhold(gpu, a);
  EXPECT_EQ(holds.Left(gpu, a, true, 5000, meter, out), 0);  // b and c hold it still
  b.finished_ms = 6000;
  Unhold(gpu, b);
  EXPECT_EQ(holds.Left(gpu, b, true, 6000, meter, out), 0);  // c, placed, keeps it held
  Unhold(gpu, c);
  EXPECT_EQ(holds.Left(gpu, c, false, 6500, meter, out), 6500);
  double gpu_ms = 0.01 * 4000 + 0.3 * 3000;  // the containers' own parts
  for (const auto& r : Records(out))
    gpu_ms += r.gpus * static_cast<double>(r.finished_ms - r.started_ms);
  EXPECT_NEAR(gpu_ms, 1.0 * (6500 - 1000), 1e-6);
  // 0.99 beside a, 0.69 beside a and b, 0.7 beside b, then 1.0 while only c, placed, held it.
  EXPECT_EQ(Records(out).size(), 4u);
}

TEST(ShareBilling, AShareOfAMigSliceCountsItsPartOnlyAndHoldsNothingWhole) {
  ShareHolds holds(/*across_tenancies=*/false);
  sharing::Share slice_share;
  slice_share.memory_bytes = sharing::kGiB;
  slice_share.compute_percent = 50;
  slice_share.mig_profile = "3g.40gb";
  sharing::Share gpu_share = slice_share;
  gpu_share.mig_profile.clear();
  EXPECT_FALSE(holds.whole(slice_share));
  EXPECT_TRUE(holds.whole(gpu_share));
  EXPECT_DOUBLE_EQ(holds.UseJoining(slice_share, false, 0.2), 0.2);
  EXPECT_DOUBLE_EQ(holds.UseLeaving(slice_share, false, 0.2), 0.2);
  EXPECT_DOUBLE_EQ(holds.UseJoining(gpu_share, false, 0.2), 1.0);
  // Its start and end bill no "held-" run for the GPU.
  Meter meter;
  fleet::GpuRecord gpu = Gpu();
  fleet::ContainerRecord container;
  container.id = "c-slice";
  container.tenancy_uid = "u1";
  container.spec.tenancy = "t1";
  container.spec.share = slice_share;
  container.share_gpus = 0.2;
  container.started_ms = 1000;
  std::vector<fleet::Mutation> out;
  holds.Started(gpu, container, meter, out);
  EXPECT_EQ(holds.Left(gpu, container, true, 5000, meter, out), 0);
  EXPECT_TRUE(Records(out).empty());
}

TEST(ShareBilling, FairShareAndQuotaCountTheWholeGpuOnceUnlessTenanciesMayShareIt) {
  using sharing::Mode;
  ShareHolds whole(/*across_tenancies=*/false), across(/*across_tenancies=*/true);
  EXPECT_DOUBLE_EQ(whole.UseJoining(Mode::kMps, false, 0.01), 1.0);
  EXPECT_DOUBLE_EQ(whole.UseJoining(Mode::kMps, true, 0.3), 0.0);
  EXPECT_DOUBLE_EQ(whole.UseLeaving(Mode::kMps, true, 0.3), 0.0);
  EXPECT_DOUBLE_EQ(whole.UseLeaving(Mode::kTimeslice, false, 0.01), 1.0);
  EXPECT_DOUBLE_EQ(across.UseJoining(Mode::kTimeslice, false, 0.01), 0.01);
  EXPECT_DOUBLE_EQ(across.UseLeaving(Mode::kTimeslice, false, 0.01), 0.01);
  // An MPS GPU stays one tenancy's with the flag too, so it is paid whole all the same.
  EXPECT_DOUBLE_EQ(across.UseJoining(Mode::kMps, false, 0.01), 1.0);
  EXPECT_TRUE(across.whole_gpu(Mode::kMps));
  EXPECT_FALSE(across.whole_gpu(Mode::kTimeslice));
  // Across tenancies nothing but the containers' own records is billed.
  Meter meter;
  fleet::GpuRecord gpu = Gpu();
  std::vector<fleet::Mutation> out;
  auto a = Share("c-a", 0.01, 1000, sharing::Mode::kTimeslice);
  Hold(gpu, a);
  across.Started(gpu, a, meter, out);
  Unhold(gpu, a);
  EXPECT_EQ(across.Left(gpu, a, true, 2000, meter, out), 0);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(meter.TotalGpuMs("u1", 5000), 0.0);
}

TEST(ShareBilling, AfterARestartTheGpuIsBilledOnFromTheLastChange) {
  // Before: a ran 1000-5000, b runs since 3000; the service went down at 5500.
  ShareHolds holds(/*across_tenancies=*/false);
  Meter meter;
  fleet::GpuRecord gpu = Gpu();
  gpu.updated_ms = 1000;  // it became active with a's start
  auto a = Share("c-a", 0.01, 1000);
  a.finished_ms = 5000;
  auto b = Share("c-b", 0.3, 3000);
  auto old = Share("c-old", 0.5, 100);  // an earlier lease's
  old.finished_ms = 900;
  Hold(gpu, b);
  holds.Adopt(gpu, "u1", "tiny", {&b}, {&a, &old}, meter);
  EXPECT_NEAR(meter.TotalGpuMs("u1", 7000), 0.7 * 2000, 1e-6);
  std::vector<fleet::Mutation> out;
  b.finished_ms = 8000;
  Unhold(gpu, b);
  EXPECT_EQ(holds.Left(gpu, b, true, 8000, meter, out), 8000);
  const auto records = Records(out);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].started_ms, 5000);
  EXPECT_DOUBLE_EQ(records[0].gpus, 0.7);
}

TEST(ShareBilling, UsageRecordsAndTheTenancySeriesLabelSharesAsShares) {
  auto a = Share("c-a", 0.01, 1000);
  a.finished_ms = 2000;
  EXPECT_EQ(UsageOf(a, "NVIDIA H100 80GB HBM3").mode, "share");
  a.spec.share.reset();
  a.spec.gpus = 1;
  EXPECT_EQ(UsageOf(a).mode, "gpu");
}

}  // namespace
}  // namespace tessera::serve
