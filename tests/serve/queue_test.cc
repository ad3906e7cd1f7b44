// How the service stores a tenancy's scheduling policy, names a container in the queue, and
// meters GPU time: pure logic over records.
#include "serve/queue.h"

#include <gtest/gtest.h>

#include "serve/metering.h"

namespace tessera::serve {
namespace {

TEST(TenancyPolicyJson, ReadsEveryFieldAndWritesItBackTheSame) {
  auto policy =
      ParseTenancyPolicy(R"({"weight":2.5,"quota":{"gpus":8,"pending":100},"maxPriority":10})");
  ASSERT_TRUE(policy) << policy.error().message;
  EXPECT_EQ(policy->weight, 2.5);
  EXPECT_EQ(policy->quota_gpus, 8);
  EXPECT_EQ(policy->quota_pending, 100);
  EXPECT_EQ(policy->max_priority, 10);
  auto again = ParseTenancyPolicy(TenancyPolicyToJson(*policy));
  ASSERT_TRUE(again);
  EXPECT_EQ(TenancyPolicyToJson(*again), TenancyPolicyToJson(*policy));
}

TEST(TenancyPolicyJson, AbsentFieldsAreDefaultsAndNullQuotasUnlimited) {
  auto policy = ParseTenancyPolicy(R"({"quota":{"gpus":null}})");
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->weight, 1);
  EXPECT_EQ(policy->quota_gpus, scheduling::kUnlimited);
  EXPECT_EQ(policy->quota_pending, scheduling::kUnlimited);
  EXPECT_EQ(policy->max_priority, 0);
  EXPECT_NE(TenancyPolicyToJson(*policy).find(R"("gpus":null)"), std::string::npos);
}

TEST(TenancyPolicyJson, BadValuesNameTheirField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"weight":0})", "weight"},
      {R"({"weight":"2"})", "weight"},
      {R"({"weight":5000})", "weight"},
      {R"({"quota":{"gpus":-1}})", "quota.gpus"},
      {R"({"quota":{"gpus":1.5}})", "quota.gpus"},
      {R"({"quota":{"pending":2000000}})", "quota.pending"},
      {R"({"quota":{"cpus":1}})", "quota.cpus"},
      {R"({"quota":7})", "quota"},
      {R"({"maxPriority":1001})", "maxPriority"},
      {R"({"maxPriority":true})", "maxPriority"},
      {R"({"priority":3})", "priority"},
  };
  for (const auto& [body, field] : cases) {
    auto policy = ParseTenancyPolicy(body);
    ASSERT_FALSE(policy) << body;
    EXPECT_EQ(policy.error().category, ErrorCategory::kInvalidArgument);
    EXPECT_EQ(policy.error().message.rfind(field, 0), 0u) << body << ": " << policy.error().message;
  }
}

TEST(TenancyPolicyJson, ARecordWithoutAPolicyHasTheDefaults) {
  fleet::Tenancy record;
  record.name = "a";
  EXPECT_EQ(PolicyOf(record).weight, 1);
  record.extensions[std::string(kSchedulingExtension)] = R"({"weight":3})";
  EXPECT_EQ(PolicyOf(record).weight, 3);
  record.extensions[std::string(kSchedulingExtension)] = "not json";
  EXPECT_EQ(PolicyOf(record).weight, 1);
}

TEST(QueueRequest, ContainerIdsAreTheirRequestIds) {
  EXPECT_EQ(RequestIdOf("c-00000000000000ff"), 255u);
  EXPECT_EQ(RequestIdOf("c-ffffffffffffffff"), UINT64_MAX);
  EXPECT_EQ(RequestIdOf("c-fff"), 0u);
  EXPECT_EQ(RequestIdOf("x-00000000000000ff"), 0u);
  EXPECT_EQ(RequestIdOf("c-00000000000000fg"), 0u);
  fleet::ContainerRecord container;
  container.id = "c-0000000000000010";
  container.spec.tenancy = "a";
  container.spec.gpus = 4;
  container.spec.priority = -2;
  container.spec.max_duration_s = 60;
  container.spec.preemptible = true;
  container.created_ms = 1500;
  auto request = PendingRequestOf(container);
  EXPECT_EQ(request.id, 16u);
  EXPECT_EQ(request.label, "c-0000000000000010");
  EXPECT_EQ(request.gpus, 4);
  EXPECT_EQ(request.priority, -2);
  EXPECT_EQ(request.submitted_s, 1.5);
  EXPECT_EQ(request.max_duration_s, 60);
  EXPECT_TRUE(request.preemptible);
  container.spec.max_duration_s = 0;
  EXPECT_EQ(PendingRequestOf(container).max_duration_s, scheduling::kUnknownTime);
}

TEST(QuotaRefusal, IsTheQueuesPendingQuotaOnly) {
  EXPECT_TRUE(IsQuotaRefusal(FailedPrecondition("tenancy quota: 3/3 requests pending")));
  EXPECT_FALSE(IsQuotaRefusal(InvalidArgument("tenancy quota: 3/3 requests pending")));
  EXPECT_FALSE(IsQuotaRefusal(FailedPrecondition("gpus: no node has 9 GPUs")));
}

TEST(Metering, CountsGpuTimeInsideTheWindowOnly) {
  EXPECT_EQ(OverlapGpuMs(2, 1000, 5000, 0, 10000), 8000);
  EXPECT_EQ(OverlapGpuMs(2, 1000, 5000, 2000, 3000), 2000);
  EXPECT_EQ(OverlapGpuMs(2, 1000, 5000, 5000, 9000), 0);
  EXPECT_EQ(OverlapGpuMs(8, 1000, 5000, 0, 1000), 0);
}

TEST(Metering, AContainerThatNeverRanWithGpusIsNotMetered) {
  fleet::ContainerRecord container;
  container.id = "c-1";
  container.spec.tenancy = "a";
  container.gpus = {"0000:18:00.0", "0000:2a:00.0"};
  container.finished_ms = 9000;
  EXPECT_EQ(UsageOf(container).gpus, 0);  // never started
  container.started_ms = 4000;
  auto usage = UsageOf(container);
  EXPECT_EQ(usage.gpus, 2);
  EXPECT_EQ(usage.container_id, "c-1");
  EXPECT_EQ(usage.finished_ms - usage.started_ms, 5000);
  container.gpus.clear();
  EXPECT_EQ(UsageOf(container).gpus, 0);
}

TEST(Metering, MigSlicesCountByTheirShareOfTheGpu) {
  fleet::ContainerRecord container;
  container.id = "c-2";
  container.spec.tenancy = "a";
  container.spec.mig = {"1g.10gb", 3};
  container.gpus = {"0000:18:00.0"};  // the parent
  container.mig_devices = {"MIG-1", "MIG-2", "MIG-3"};
  container.mig_gpus = 3.0 / 7.0;
  container.started_ms = 1000;
  container.finished_ms = 8000;
  EXPECT_DOUBLE_EQ(fleet::GpuEquivalents(container), 3.0 / 7.0);
  auto usage = UsageOf(container);
  EXPECT_DOUBLE_EQ(usage.gpus, 3.0 / 7.0);
  Meter meter;
  meter.Add(usage);
  EXPECT_NEAR(meter.ended_gpu_ms().at("a"), 3000.0, 1e-6);  // 7 s at 3/7 of a GPU
  EXPECT_DOUBLE_EQ(OverlapGpuMs(usage.gpus, 1000, 8000, 0, 4500), 1500.0);
}

TEST(Metering, TotalsPerTenancyAddUpTheRecords) {
  Meter meter;
  meter.Load({{"c-1", "a", "u1", 2, 1000, 3000}, {"c-2", "b", "u2", 1, 0, 500}});
  meter.Add({"c-3", "a", "u1", 4, 3000, 3250});
  EXPECT_EQ(meter.ended_gpu_ms().at("a"), 2 * 2000 + 4 * 250);
  EXPECT_EQ(meter.ended_gpu_ms().at("b"), 500);
  EXPECT_EQ(meter.Of("a").size(), 2u);
  EXPECT_TRUE(meter.Of("nobody").empty());
  meter.ObserveWait("a", 0.5);
  meter.ObserveWait("a", 100);
  const auto& waits = meter.waits().at("a");
  EXPECT_EQ(waits.count, 2u);
  EXPECT_EQ(waits.buckets[0], 1u);  // <= 1 s
  EXPECT_EQ(waits.buckets[5], 1u);  // <= 300 s
}

}  // namespace
}  // namespace tessera::serve
