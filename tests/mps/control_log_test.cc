#include <gtest/gtest.h>

#include "mps/mps.h"

namespace tessera::mps {
namespace {

// Lines as NVIDIA's MPS writes them (k8s-device-plugin #1614, #685; bottlerocket-kernel-kit
// PR #415).
constexpr char kControlLog[] =
    "[2026-02-06 09:34:17.770 Control   261] Starting control daemon using socket "
    "/run/tessera/mps/GPU-1/pipe/control\n"
    "[2026-02-06 09:34:17.770 Control   261] To connect CUDA applications to this daemon, set env "
    "CUDA_MPS_PIPE_DIRECTORY=/run/tessera/mps/GPU-1/pipe\n"
    "[2026-02-06 09:34:17.770 Control   261] CUDA MPS Control binary version: 13000\n"
    "[2026-02-06 09:34:36.380 Control   261] NEW CLIENT 0 from user 0: Server is not ready, push "
    "client to pending list\n"
    "[2026-02-06 09:34:36.381 Control   337] Starting new server 337 for user 0\n"
    "[2026-02-06 09:34:36.386 Other   337] Startup\n"
    "[2026-02-06 09:34:36.450 Control   261] NEW SERVER 337: Ready\n"
    "[2024-04-29 11:22:10.441 Control    73] Server encountered a fatal exception. Shutting down\n"
    "[2024-04-29 11:22:10.446 Control    73] Server 95 exited with status 1\n"
    "[2024-04-29 11:22:10.446 Legacy Server   425] Failed to start : invalid argument\n";

constexpr char kServerLog[] =
    "[2026-04-28 18:20:41.986 Server 4428] CUDA MPS Server for Linux/Unix. Binary version: 13000\n"
    "[2026-04-28 18:20:41.986 Server 4428] Active Threads Percentage set to 33.0\n"
    "[2026-04-28 18:20:41.986 Server 4428] Device pinned memory limit for device 0 set to "
    "0x140000000 bytes\n";

TEST(MpsLog, ReadsLinesWithRightAlignedPidsAndTwoWordSources) {
  auto lines = ParseLogLines(kControlLog);
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_EQ(lines[0].date, "2026-02-06");
  EXPECT_EQ(lines[0].time, "09:34:17.770");
  EXPECT_EQ(lines[0].source, "Control");
  EXPECT_EQ(lines[0].pid, 261u);
  EXPECT_EQ(lines[5].source, "Other");
  EXPECT_EQ(lines[9].source, "Legacy Server");
  EXPECT_EQ(lines[9].pid, 425u);
  EXPECT_EQ(lines[9].message, "Failed to start : invalid argument");
  EXPECT_EQ(ParseLogLines(kControlLog, 3).size(), 3u);
  EXPECT_EQ(ParseLogLines(kControlLog, 3).back().source, "Legacy Server");
}

TEST(MpsLog, FactsFromControlAndServerLogs) {
  const LogFacts facts = ReadLogFacts(std::string(kControlLog) + kServerLog);
  EXPECT_EQ(facts.control_version, 13000u);
  EXPECT_EQ(facts.servers_started, (std::vector<uint32_t>{337}));
  EXPECT_EQ(facts.servers_ready, (std::vector<uint32_t>{337}));
  ASSERT_EQ(facts.servers_exited.size(), 1u);
  EXPECT_EQ(facts.servers_exited[0].pid, 95u);
  EXPECT_EQ(facts.servers_exited[0].status, 1);
  EXPECT_EQ(facts.fatal_exceptions, 1u);
  EXPECT_EQ(facts.pinned_memory_limit, uint64_t{0x140000000});
  EXPECT_DOUBLE_EQ(*facts.active_thread_percentage, 33.0);
  EXPECT_EQ(facts.lines, 13u);
  EXPECT_EQ(facts.malformed, 0u);
}

TEST(MpsLog, CountsOtherShapesAndOverlongLinesWithoutReadingThem) {
  const std::string text =
      "garbage\n[2026-02-06 09:34 Control 1] short time\n"
      "[2026-02-06 09:34:17.770 Control x] no pid\n"
      "[2026-02-06 09:34:17.770 Control 1 no close\n"
      "[2026-02-06 09:34:17.770 Con7rol 1] bad source\n"
      "[2026-02-06 09:34:17.770 Control 1] CUDA MPS Control binary version: "
      "99999999999\n" +
      std::string("[2026-02-06 09:34:17.770 Control 1] ") + std::string(kMaxLogLine, 'x') +
      "\n[2026-02-06 09:34:17.770 Control 1] Server 7 exited with status 2";
  const LogFacts facts = ReadLogFacts(text);
  EXPECT_EQ(facts.malformed, 6u);
  EXPECT_EQ(facts.lines, 2u);
  EXPECT_FALSE(facts.control_version);  // too large to be a version
  ASSERT_EQ(facts.servers_exited.size(), 1u);
  EXPECT_EQ(facts.servers_exited[0].status, 2);
}

TEST(MpsLog, KeepsOnlyTheLastServersOfALongLife) {
  std::string text;
  for (int i = 1; i <= 3000; ++i)
    text += "[2026-02-06 09:34:17.770 Control 1] Starting new server " + std::to_string(i) +
            " for user 0\n";
  const LogFacts facts = ReadLogFacts(text);
  ASSERT_EQ(facts.servers_started.size(), 1024u);
  EXPECT_EQ(facts.servers_started.back(), 3000u);
}

TEST(MpsConfig, HashFollowsTheLimitsAndCommandsAreInMiB) {
  DaemonConfig config{"GPU-8f6b2c1d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", "0000:18:00.0",
                      uint64_t{20} << 30, 25};
  ASSERT_TRUE(CheckConfig(config));
  const std::string hash = ConfigHash(config);
  EXPECT_EQ(hash.rfind("sha256:", 0), 0u);
  EXPECT_EQ(hash, ConfigHash(config));
  DaemonConfig other = config;
  other.active_thread_percentage = 50;
  EXPECT_NE(ConfigHash(other), hash);
  other = config;
  other.pci_address = "0000:3b:00.0";
  EXPECT_EQ(ConfigHash(other), hash);  // how NVML reaches the GPU is no limit
  EXPECT_EQ(DefaultLimitCommands(config),
            (std::vector<std::string>{"set_default_device_pinned_mem_limit 0 20480M",
                                      "set_default_active_thread_percentage 25"}));
}

TEST(MpsConfig, AMigDevicesDaemonIsNamedByItsMigUuid) {
  // A MIG device's daemon is named by its MIG UUID (8-4-4-4-12 hex), nothing looser.
  for (const char* bad :
       {"MIG-8e2c3d4b-0001-4000-8000-00000000000", "MIG-8e2c3d4b-0001-4000-8000-0000000000/0",
        "MIG-GPU-8e2c3d4b-1a5f-4b6c-8d7e-2f3a4b5c6d01/1/0",
        "MIG-8e2c3d4b_0001-4000-8000-000000000000"}) {
    EXPECT_FALSE(PathsFor("/run/tessera/mps", bad)) << bad;
    EXPECT_FALSE(IsMigDevice(bad)) << bad;
  }
  const std::string mig = "MIG-8e2c3d4b-0001-4000-8000-000000000000";
  ASSERT_TRUE(PathsFor("/run/tessera/mps", mig));
  EXPECT_EQ(PathsFor("/run/tessera/mps", mig)->pipe, "/run/tessera/mps/" + mig + "/pipe");
  EXPECT_TRUE(IsMigDevice(mig));
  EXPECT_FALSE(IsMigDevice("GPU-8e2c3d4b-1a5f-4b6c-8d7e-2f3a4b5c6d01"));
  EXPECT_TRUE(CheckConfig({mig, "0000:18:00.0", uint64_t{1} << 30, 25}));
}

TEST(MpsConfig, RefusesUuidsThatAreNotUuidsSinceTheyNameDirectories) {
  for (const char* bad : {"", "GPU-", "GPU-../../etc", "GPU-abc/def", "MIG-1234567890",
                          "GPU-1234567890-", "gpu-1234567890"}) {
    DaemonConfig config{bad, "0000:18:00.0", uint64_t{1} << 30, 25};
    EXPECT_FALSE(CheckConfig(config)) << bad;
    EXPECT_FALSE(PathsFor("/run/tessera/mps", bad)) << bad;
  }
  auto paths = PathsFor("/run/tessera/mps", "GPU-8f6b2c1d-4e5f");
  ASSERT_TRUE(paths);
  EXPECT_EQ(paths->pipe, "/run/tessera/mps/GPU-8f6b2c1d-4e5f/pipe");
  EXPECT_EQ(paths->ready, "/run/tessera/mps/GPU-8f6b2c1d-4e5f/ready");
  EXPECT_FALSE(CheckConfig({"GPU-8f6b2c1d-4e5f", "x", 0, 25}));
  EXPECT_FALSE(CheckConfig({"GPU-8f6b2c1d-4e5f", "x", uint64_t{1} << 30, 0}));
  EXPECT_FALSE(CheckConfig({"GPU-8f6b2c1d-4e5f", "x", uint64_t{1} << 30, 101}));
}

}  // namespace
}  // namespace tessera::mps
