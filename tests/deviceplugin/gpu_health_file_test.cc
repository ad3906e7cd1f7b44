// The device plugin's GPU health file: what a restarted plugin reads back, and what it refuses.
#include "deviceplugin/gpu_health_file.h"

#include <gtest/gtest.h>

#include "common/atomic_file.h"
#include "support/fixture_host.h"

namespace tessera::deviceplugin {
namespace {

health::GpuHealth Faulted() {
  health::GpuHealth gpu;
  gpu.step = health::RecoveryStep::kResetting;
  gpu.reason = "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0";
  gpu.attempts = 1;
  gpu.step_since_ms = 1700000001000;
  gpu.faulted_ms = 1700000000000;
  gpu.history.push_back({1700000000000, "xid", 79, "gpu", "stop-gpu", gpu.reason});
  return gpu;
}

TEST(GpuHealthFile, RoundTripsEveryField) {
  GpuHealthMap gpus = {{"0000:9d:00.0", Faulted()}, {"0000:18:00.0", health::GpuHealth{}}};
  auto parsed = ParseGpuHealth(SerializeGpuHealth(gpus));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, gpus);
}

TEST(GpuHealthFile, AMissingFileIsNoGpuAndAWrittenOneReadsBack) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/plugin/gpu-health.json";
  auto none = ReadGpuHealthFile(path);
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_TRUE(none->empty());
  GpuHealthMap gpus = {{"0000:9d:00.0", Faulted()}};
  ASSERT_TRUE(WriteGpuHealthFile(path, gpus).ok());  // creates the directory
  auto back = ReadGpuHealthFile(path);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, gpus);
}

TEST(GpuHealthFile, RefusesMalformedFilesNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"[]", "want a JSON object"},
      {"{\"version\":2}", "version"},
      {"{\"version\":1,\"gpus\":[]}", "gpus"},
      {"{\"version\":1,\"gpus\":{\"GPU-1\":{}}}", "not a canonical PCI address"},
      {"{\"version\":1,\"gpus\":{\"0000:9d:00.0\":{\"step\":\"asleep\"}}}",
       "gpus.0000:9d:00.0.step"},
      {"{\"version\":1,\"gpus\":{\"0000:9d:00.0\":{\"step\":\"out\",\"attempts\":\"x\"}}}",
       "attempts"},
      {"{\"version\":1,\"gpus\":{\"0000:9d:00.0\":{\"step\":\"out\",\"history\":[1]}}}",
       "history[0]"},
  };
  for (const auto& [text, want] : cases) {
    auto parsed = ParseGpuHealth(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.error().message.find(want), std::string::npos)
        << text << ": " << parsed.error().message;
  }
}

TEST(GpuHealthFile, KeepsTheNewestHistoryAndCutsLongText) {
  std::string history;
  for (size_t i = 0; i < health::kMaxHistory + 5; ++i)
    history += std::string(i ? "," : "") + "{\"atMs\":" + std::to_string(i) + ",\"xid\":79}";
  auto parsed = ParseGpuHealth(
      "{\"version\":1,\"gpus\":{\"0000:9d:00.0\":{\"step\":\"out\","
      "\"reason\":\"" +
      std::string(100000, 'r') + "\",\"history\":[" + history + "]}}}");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const auto& gpu = parsed->at("0000:9d:00.0");
  ASSERT_EQ(gpu.history.size(), health::kMaxHistory);
  EXPECT_EQ(gpu.history.front().at_ms, 5);
  EXPECT_LT(gpu.reason.size(), 600u);
}

}  // namespace
}  // namespace tessera::deviceplugin
