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
  auto again = ParseTenancyPolicy(TenancyPolicyToJson(*policy), PolicySource::kRecord);
  ASSERT_TRUE(again);
  EXPECT_EQ(TenancyPolicyToJson(*again), TenancyPolicyToJson(*policy));
}

TEST(TenancyPolicyJson, AbsentFieldsAreDefaultsAndNullQuotasUnlimited) {
  auto policy = ParseTenancyPolicy(R"({"quota":{"gpus":null}})");
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->weight, 1);
  EXPECT_EQ(policy->quota_gpus, scheduling::kUnlimited);
  // Absent: the operator's default pending quota, not unlimited.
  EXPECT_EQ(policy->quota_pending, scheduling::kDefaultQuota);
  EXPECT_EQ(policy->max_priority, 0);
  EXPECT_NE(TenancyPolicyToJson(*policy).find(R"("gpus":null)"), std::string::npos);
  auto unlimited = ParseTenancyPolicy(R"({"quota":{"pending":null}})");
  ASSERT_TRUE(unlimited);
  EXPECT_EQ(unlimited->quota_pending, scheduling::kUnlimited);
  // Both survive the record they are written to.
  for (const auto& written : {*policy, *unlimited}) {
    auto back = ParseTenancyPolicy(TenancyPolicyToJson(written), PolicySource::kRecord);
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(back->quota_pending, written.quota_pending);
  }
}

TEST(TenancyPolicyJson, RecordsOfAnOlderBuildFollowTheDefaultPendingQuota) {
  // That build wrote null both for its unlimited default and for an unlimited quota.
  auto old =
      ParseTenancyPolicy(R"({"weight":2,"quota":{"gpus":null,"pending":null},"maxPriority":0})",
                         PolicySource::kRecord);
  ASSERT_TRUE(old) << old.error().message;
  EXPECT_EQ(old->quota_pending, scheduling::kDefaultQuota);
  EXPECT_EQ(old->weight, 2);
  // "version" is a record's, never the API's.
  EXPECT_FALSE(ParseTenancyPolicy(R"({"version":2})"));
  EXPECT_FALSE(ParseTenancyPolicy(R"({"version":3})", PolicySource::kRecord));
}

TEST(TenancyPolicyJson, NumbersThatDoNotFitAndDuplicateKeysAreRefusedNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"maxPriority":18446744073709551615})", "maxPriority"},
      {R"({"maxPriority":9223372036854775808})", "maxPriority"},
      {R"({"maxPriority":-9223372036854775809})", "maxPriority"},
      {R"({"quota":{"pending":18446744073709551615}})", "quota.pending"},
      {R"({"quota":{"gpus":9223372036854775807}})", "quota.gpus"},
      {R"({"quota":{"gpus":4294967297}})", "quota.gpus"},
      {R"({"weight":1,"weight":2})", "scheduling policy: duplicate key \"weight\""},
      {R"({"quota":{"gpus":1,"gpus":null}})", "scheduling policy: duplicate key \"gpus\""},
  };
  for (const auto& [body, field] : cases) {
    auto policy = ParseTenancyPolicy(body);
    ASSERT_FALSE(policy) << body;
    EXPECT_EQ(policy.error().message.rfind(field, 0), 0u) << body << ": " << policy.error().message;
  }
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
  EXPECT_TRUE(request.label.empty());  // named by its ID
  EXPECT_EQ(ContainerIdOf(request.id), "c-0000000000000010");
  EXPECT_EQ(request.gpus, 4);
  EXPECT_EQ(request.priority, -2);
  EXPECT_EQ(request.submitted_s, 1.5);
  EXPECT_EQ(request.max_duration_s, 60);
  EXPECT_TRUE(request.preemptible);
  container.spec.max_duration_s = 0;
  EXPECT_EQ(PendingRequestOf(container).max_duration_s, scheduling::kUnknownTime);
  // The queue knows a tenancy by its incarnation: a name created again is someone else.
  EXPECT_EQ(request.tenancy, "name:a");
  container.tenancy_uid = "0123456789abcdef";
  EXPECT_EQ(PendingRequestOf(container).tenancy, "0123456789abcdef");
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
  container.tenancy_uid = "u1";
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
  EXPECT_NEAR(meter.TotalGpuMs("u1", 9000), 3000.0, 1e-6);  // 7 s at 3/7 of a GPU
  EXPECT_DOUBLE_EQ(OverlapGpuMs(usage.gpus, 1000, 8000, 0, 4500), 1500.0);
}

TEST(Metering, TotalsBelongToAnIncarnationNotAName) {
  Meter meter;
  meter.Load({{"c-1", "a", "u1", 2, 1000, 3000}, {"c-2", "b", "u2", 1, 0, 500}});
  meter.Add({"c-3", "a", "u1", 4, 3000, 3250});
  EXPECT_EQ(meter.TotalGpuMs("u1", 5000), 2 * 2000 + 4 * 250);
  EXPECT_EQ(meter.TotalGpuMs("u2", 5000), 500);
  // The name created again: a new owner, who starts from nothing.
  EXPECT_EQ(meter.TotalGpuMs("u3", 5000), 0);
  meter.Add({"c-4", "a", "u3", 1, 4000, 4100});
  EXPECT_EQ(meter.TotalGpuMs("u3", 5000), 100);
  EXPECT_EQ(meter.IncarnationsOf("a"), (std::vector<std::string>{"u1", "u3"}));
  // A run counted once, however often its record arrives.
  EXPECT_FALSE(meter.Add({"c-3", "a", "u1", 4, 3000, 3250}));
  EXPECT_EQ(meter.TotalGpuMs("u1", 5000), 2 * 2000 + 4 * 250);
  // The same container ID with another start is another run.
  EXPECT_TRUE(meter.Add({"c-3", "a", "u1", 1, 3500, 3600}));
  EXPECT_EQ(meter.TotalGpuMs("u1", 5000), 2 * 2000 + 4 * 250 + 100);
  // Running ones count up to now.
  meter.Started("u1", "a", "c-5", 2, 4000);
  EXPECT_EQ(meter.TotalGpuMs("u1", 5000), 2 * 2000 + 4 * 250 + 100 + 2 * 1000);
  meter.ObserveWait("u1", "a", 0.5);
  meter.ObserveWait("u1", "a", 100);
  auto waits = meter.WaitsOf("u1");
  ASSERT_TRUE(waits);
  EXPECT_EQ(waits->count, 2u);
  EXPECT_EQ(waits->buckets[0], 1u);  // <= 1 s
  EXPECT_EQ(waits->buckets[5], 1u);  // <= 300 s
  EXPECT_FALSE(meter.WaitsOf("u3"));
}

// The report against a plain walk over every run, for windows anywhere: inside, across and
// outside runs that end out of order (an exit while the service was down goes in its place).
// A repeatable pseudo-random number below `bound` (a linear congruential generator).
struct Draw {
  uint64_t seed;
  uint64_t operator()(uint64_t bound) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % bound;
  }
};

TEST(Metering, TheReportAddsUpTheWindowAsAWalkOverEveryRunDoes) {
  std::vector<fleet::UsageRecord> runs;
  Draw next{12345};
  Meter meter;
  for (int i = 0; i < 400; ++i) {
    const int64_t started = static_cast<int64_t>(next(100000));
    const int64_t finished = started + static_cast<int64_t>(next(i % 50 == 0 ? 40000 : 3000));
    fleet::UsageRecord run{"c-" + std::to_string(i),           "a",     "u1",
                           1.0 + static_cast<double>(next(8)), started, finished};
    runs.push_back(run);
    meter.Add(run);
  }
  meter.Started("u1", "a", "c-running", 2, 90000);
  const int64_t now = 120000;
  for (int window = 0; window < 200; ++window) {
    int64_t from = static_cast<int64_t>(next(130000));
    int64_t to = from + static_cast<int64_t>(next(60000));
    double want = OverlapGpuMs(2, 90000, now, from, to);
    size_t listed = 90000 < to && now >= from ? 1 : 0;
    for (const auto& run : runs) {
      if (run.started_ms >= to || run.finished_ms < from) continue;
      want += OverlapGpuMs(run.gpus, run.started_ms, run.finished_ms, from, to);
      ++listed;
    }
    const UsageReport report = meter.Report({"u1"}, from, to, now);
    EXPECT_NEAR(report.gpu_seconds, want / 1000.0, 1e-6) << from << ".." << to;
    EXPECT_EQ(report.containers_total, listed) << from << ".." << to;
    EXPECT_EQ(report.containers.size(), std::min(listed, UsageReport::kMaxContainers));
    // The running one first, then the latest ended.
    for (size_t i = 1; i < report.containers.size(); ++i) {
      if (report.containers[i - 1].finished_ms == 0) continue;
      EXPECT_GE(report.containers[i - 1].finished_ms, report.containers[i].finished_ms);
    }
  }
}

// Measured use rides with each run's record: the report's window and its buckets take each run's
// figures as even over it, exactly as a plain walk over every run does; a run nobody measured
// adds nothing, and a report of none measured says so (unset).
TEST(Metering, MeasuredUseAndTheSeriesAddUpAsAWalkOverEveryRunDoes) {
  std::vector<fleet::UsageRecord> runs;
  Draw next{777};
  Meter meter;
  for (int i = 0; i < 300; ++i) {
    const int64_t started = static_cast<int64_t>(next(100000));
    const int64_t finished = started + static_cast<int64_t>(next(i % 40 == 0 ? 30000 : 3000));
    fleet::UsageRecord run{"c-" + std::to_string(i), "a", "u1", 1, started, finished};
    if (i % 3 != 0)
      run.measured =
          fleet::MeasuredUsage{static_cast<double>(next(500)), static_cast<double>(next(900)),
                               static_cast<double>(next(70000))};
    run.gpu_model = i % 2 ? "NVIDIA H100 80GB HBM3" : "NVIDIA A100-SXM4-40GB";
    run.mode = "gpu";
    runs.push_back(run);
    meter.Add(run);
  }
  const fleet::MeasuredUsage running_measured{40, 80, 9000};
  meter.Started("u1", "a", "c-running", 2, 90000);
  meter.Measured("u1", "c-running", running_measured);
  const int64_t now = 120000;
  const int64_t step = 7000;
  for (int window = 0; window < 100; ++window) {
    const int64_t from = static_cast<int64_t>(next(130000));
    const int64_t to = from + static_cast<int64_t>(next(60000)) + 1;
    std::optional<fleet::MeasuredUsage> want;
    std::vector<fleet::MeasuredUsage> want_buckets;
    for (int64_t start = from; start < to; start += step)
      want_buckets.emplace_back();
    auto walk = [&](const fleet::MeasuredUsage& m, int64_t started, int64_t finished) {
      if (started >= to || finished < from) return;
      if (!want) want = fleet::MeasuredUsage{};
      *want += MeasuredWithin(m, started, finished, from, to);
      if (finished <= started) return;
      for (size_t b = 0; b < want_buckets.size(); ++b) {
        const int64_t begin = from + static_cast<int64_t>(b) * step;
        want_buckets[b] += MeasuredWithin(m, started, finished, begin, std::min(begin + step, to));
      }
    };
    walk(running_measured, 90000, now);
    for (const auto& run : runs)
      if (run.measured) walk(*run.measured, run.started_ms, run.finished_ms);
    const UsageReport report = meter.Report({"u1"}, from, to, now, step);
    ASSERT_EQ(report.measured.has_value(), want.has_value()) << from << ".." << to;
    if (want) {
      EXPECT_NEAR(report.measured->sm_seconds, want->sm_seconds, 1e-6) << from << ".." << to;
      EXPECT_NEAR(report.measured->memory_gib_seconds, want->memory_gib_seconds, 1e-6);
      EXPECT_NEAR(report.measured->energy_joules, want->energy_joules, 1e-4);
    }
    ASSERT_EQ(report.series.size(), want_buckets.size());
    for (size_t b = 0; b < want_buckets.size(); ++b) {
      EXPECT_EQ(report.series[b].start_ms, from + static_cast<int64_t>(b) * step);
      EXPECT_NEAR(report.series[b].measured.sm_seconds, want_buckets[b].sm_seconds, 1e-6);
      EXPECT_NEAR(report.series[b].measured.energy_joules, want_buckets[b].energy_joules, 1e-4);
    }
    // Each listed run carries its own share, or none when it was not measured.
    for (const auto& listed : report.containers) {
      if (listed.id == "c-running") {
        ASSERT_TRUE(listed.measured);
        continue;
      }
      const auto& run = runs[std::stoul(listed.id.substr(2))];
      ASSERT_EQ(listed.measured.has_value(), run.measured.has_value()) << listed.id;
      if (run.measured)
        EXPECT_NEAR(
            listed.measured->sm_seconds,
            MeasuredWithin(*run.measured, run.started_ms, run.finished_ms, from, to).sm_seconds,
            1e-9);
    }
  }
  // The per-tenancy counters: the ended runs' figures by GPU model, for the incarnations named.
  fleet::MeasuredUsage h100;
  for (const auto& run : runs)
    if (run.measured && run.gpu_model == "NVIDIA H100 80GB HBM3") h100 += *run.measured;
  auto counters = meter.EndedMeasured({{"u1", "a"}});
  ASSERT_EQ(counters.size(), 2u);
  EXPECT_NEAR((counters[{"a", "NVIDIA H100 80GB HBM3", "gpu"}].sm_seconds), h100.sm_seconds, 1e-9);
  EXPECT_TRUE(meter.EndedMeasured({{"u2", "a"}}).empty());  // another incarnation of the name
  // Nothing measured in a window: unset, not zeros.
  Meter unmeasured;
  unmeasured.Add({"c-x", "b", "u9", 1, 1000, 2000});
  EXPECT_FALSE(unmeasured.Report({"u9"}, 0, 5000, 5000).measured);
}

}  // namespace
}  // namespace tessera::serve
