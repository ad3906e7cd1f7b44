// GPU fault and recovery series as /metrics renders them: labels, the histogram's buckets, the
// bounds on label sets, escaping, and counting from many threads at once.
#include "serve/fault_metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace tessera::serve {
namespace {

std::string Rendered(const FaultMetrics& metrics) {
  std::string out;
  metrics.Render(out);
  return out;
}

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(FaultMetrics, CountsFaultsByGpuXidAndAction) {
  FaultMetrics metrics;
  metrics.Fault("0000:9d:00.0", 79, "stop-gpu");
  metrics.Fault("0000:9d:00.0", 79, "stop-gpu");
  metrics.Fault("0000:9d:00.0", 13, "notify");
  metrics.Fault("0000:18:00.0@node-a", 0, "out");
  const std::string out = Rendered(metrics);
  EXPECT_TRUE(Has(out, "# TYPE tessera_gpu_faults_total counter")) << out;
  EXPECT_TRUE(
      Has(out, R"(tessera_gpu_faults_total{gpu="0000:9d:00.0",xid="79",action="stop-gpu"} 2)"))
      << out;
  EXPECT_TRUE(
      Has(out, R"(tessera_gpu_faults_total{gpu="0000:9d:00.0",xid="13",action="notify"} 1)"))
      << out;
  EXPECT_TRUE(
      Has(out, R"(tessera_gpu_faults_total{gpu="0000:18:00.0@node-a",xid="0",action="out"} 1)"))
      << out;
  EXPECT_TRUE(Has(out, "tessera_gpu_fault_series_dropped_total 0")) << out;
}

TEST(FaultMetrics, RecoveriesFillTheHistogramCumulatively) {
  FaultMetrics metrics;
  metrics.Recovered("0000:9d:00.0", 0.5);
  metrics.Recovered("0000:9d:00.0", 42);
  metrics.Recovered("0000:18:00.0", 5000);
  const std::string out = Rendered(metrics);
  EXPECT_TRUE(Has(out, "# TYPE tessera_gpu_recovery_seconds histogram")) << out;
  EXPECT_TRUE(Has(out, R"(tessera_gpu_recovery_seconds_bucket{le="1"} 1)")) << out;
  EXPECT_TRUE(Has(out, R"(tessera_gpu_recovery_seconds_bucket{le="30"} 1)")) << out;
  EXPECT_TRUE(Has(out, R"(tessera_gpu_recovery_seconds_bucket{le="60"} 2)")) << out;
  EXPECT_TRUE(Has(out, R"(tessera_gpu_recovery_seconds_bucket{le="1800"} 2)")) << out;
  EXPECT_TRUE(Has(out, R"(tessera_gpu_recovery_seconds_bucket{le="+Inf"} 3)")) << out;
  EXPECT_TRUE(Has(out, "tessera_gpu_recovery_seconds_sum 5042.500")) << out;
  EXPECT_TRUE(Has(out, "tessera_gpu_recovery_seconds_count 3")) << out;
  EXPECT_TRUE(Has(out, R"(tessera_gpu_recoveries_total{gpu="0000:9d:00.0"} 2)")) << out;
  EXPECT_TRUE(Has(out, R"(tessera_gpu_recoveries_total{gpu="0000:18:00.0"} 1)")) << out;
}

TEST(FaultMetrics, EveryFamilyHasHelpAndTypeBeforeAnySample) {
  const std::string out = Rendered(FaultMetrics());
  for (const char* family :
       {"tessera_gpu_faults_total", "tessera_gpu_recoveries_total", "tessera_gpu_recovery_seconds",
        "tessera_gpu_fault_series_dropped_total"}) {
    EXPECT_NE(out.find(std::string("# HELP ") + family + " "), std::string::npos) << family;
    EXPECT_NE(out.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
  EXPECT_TRUE(Has(out, R"(tessera_gpu_recovery_seconds_bucket{le="+Inf"} 0)")) << out;
}

TEST(FaultMetrics, GpusAndSeriesPastTheBoundAreDroppedAndCounted) {
  FaultMetrics metrics(/*max_gpus=*/2, /*max_series_per_gpu=*/2);
  metrics.Fault("gpu-a", 79, "stop-gpu");
  metrics.Fault("gpu-a", 48, "stop-gpu");
  metrics.Fault("gpu-a", 48, "stop-gpu");       // an existing series still counts
  metrics.Fault("gpu-a", 94, "stop-instance");  // a third series of gpu-a: dropped
  metrics.Fault("gpu-b", 79, "stop-gpu");
  metrics.Fault("gpu-c", 79, "stop-gpu");  // a third GPU: dropped
  metrics.Recovered("gpu-c", 10);          // in the histogram, not by GPU
  const std::string out = Rendered(metrics);
  EXPECT_TRUE(Has(out, R"(tessera_gpu_faults_total{gpu="gpu-a",xid="48",action="stop-gpu"} 2)"))
      << out;
  EXPECT_EQ(out.find("xid=\"94\""), std::string::npos) << out;
  EXPECT_EQ(out.find("gpu-c"), std::string::npos) << out;
  EXPECT_TRUE(Has(out, "tessera_gpu_fault_series_dropped_total 3")) << out;
  EXPECT_TRUE(Has(out, "tessera_gpu_recovery_seconds_count 1")) << out;
}

TEST(FaultMetrics, LabelValuesAreEscapedAndBounded) {
  FaultMetrics metrics;
  metrics.Fault("a\"b\\c\nd", 1, std::string(200, 'x'));
  const std::string out = Rendered(metrics);
  EXPECT_NE(out.find(R"(gpu="a\"b\\c\nd")"), std::string::npos) << out;
  EXPECT_NE(out.find("action=\"" + std::string(32, 'x') + "\"}"), std::string::npos) << out;
  EXPECT_EQ(out.find(std::string(33, 'x')), std::string::npos) << out;
}

TEST(FaultMetrics, CountsFromManyThreadsAddUp) {
  FaultMetrics metrics;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&metrics] {
      for (int i = 0; i < 1000; ++i) {
        metrics.Fault("0000:9d:00.0", 79, "stop-gpu");
        metrics.Recovered("0000:9d:00.0", 2);
        if (i % 100 == 0) Rendered(metrics);
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  const std::string out = Rendered(metrics);
  EXPECT_TRUE(
      Has(out, R"(tessera_gpu_faults_total{gpu="0000:9d:00.0",xid="79",action="stop-gpu"} 8000)"))
      << out;
  EXPECT_TRUE(Has(out, "tessera_gpu_recovery_seconds_count 8000")) << out;
}

}  // namespace
}  // namespace tessera::serve
