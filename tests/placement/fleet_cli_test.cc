// Runs the real `tessera fleet simulate` process.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct Output {
  int exit_code = -1;
  std::string out;
};

Output Tessera(const std::string& args) {
  std::string command = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera " + args + " 2>&1";
  Output result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0)
    result.out.append(buf, n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(FleetSimulateCli, SameSeedGivesByteIdenticalOutputWithoutTiming) {
  const std::string args =
      "fleet simulate --nodes 20 --gpus-per-node 8 --policy binpack --synthetic 5 --load 0.9 "
      "--requests 3000 --format json --no-timing";
  Output a = Tessera(args);
  Output b = Tessera(args);
  ASSERT_EQ(a.exit_code, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  auto doc = nlohmann::json::parse(a.out);
  EXPECT_EQ(doc["requests"], 3000);
  EXPECT_FALSE(doc.contains("decisions_per_second"));
  Output timed = Tessera("fleet simulate --nodes 20 --synthetic 5 --load 0.9 --requests 3000");
  ASSERT_EQ(timed.exit_code, 0) << timed.out;
  auto timed_doc = nlohmann::json::parse(timed.out);
  EXPECT_GT(timed_doc["decisions_per_second"].get<double>(), 0);
  timed_doc.erase("decisions_per_second");
  EXPECT_EQ(timed_doc, doc);
}

TEST(FleetSimulateCli, ReplaysATraceFile) {
  const std::string path = std::string(TESSERA_BINARY_DIR) + "/fleet_cli_trace.csv";
  std::ofstream(path) << "arrival_s,duration_s,gpus\n0,100,8\n1,100,4\n2,100,3\n3,100,1\n";
  Output out = Tessera("fleet simulate --nodes 1 --trace " + path + " --policy first-fit");
  ASSERT_EQ(out.exit_code, 0) << out.out;
  auto doc = nlohmann::json::parse(out.out);
  EXPECT_EQ(doc["requests"], 4);
  EXPECT_EQ(doc["admitted"], 1);
  EXPECT_EQ(doc["never_placeable"], 1);
  EXPECT_EQ(doc["admitted_by_size"]["8"], 1);
}

TEST(FleetSimulateCli, QueueFlagAdmitsEverything) {
  const std::string path = std::string(TESSERA_BINARY_DIR) + "/fleet_cli_queue.csv";
  std::ofstream(path) << "0,100,8\n1,100,4\n";
  Output out = Tessera("fleet simulate --nodes 1 --trace " + path + " --queue --no-timing");
  ASSERT_EQ(out.exit_code, 0) << out.out;
  auto doc = nlohmann::json::parse(out.out);
  EXPECT_EQ(doc["admitted"], 2);
  EXPECT_DOUBLE_EQ(doc["mean_wait_s"].get<double>(), 49.5);
}

TEST(FleetSimulateCli, BadInputExitsWithUsageCode) {
  Output none = Tessera("fleet simulate --nodes 2");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.out.find("--trace FILE or --synthetic SEED"), std::string::npos);
  Output missing = Tessera("fleet simulate --trace /nonexistent/trace.csv");
  EXPECT_EQ(missing.exit_code, 3) << missing.out;
  const std::string path = std::string(TESSERA_BINARY_DIR) + "/fleet_cli_bad.csv";
  std::ofstream(path) << "0,100,8\n1,abc,4\n";
  Output bad = Tessera("fleet simulate --trace " + path);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("line 2: duration_s \"abc\""), std::string::npos) << bad.out;
  Output table = Tessera("fleet simulate --synthetic 1 --partitions /nonexistent.yaml");
  EXPECT_EQ(table.exit_code, 2);
  Output both = Tessera("fleet simulate --synthetic 1 --trace x.csv");
  EXPECT_NE(both.exit_code, 0);
}

TEST(FleetSimulateCli, TextFormatPrintsTheFigures) {
  Output out = Tessera("fleet simulate --nodes 4 --synthetic 2 --requests 500 --format text");
  ASSERT_EQ(out.exit_code, 0) << out.out;
  EXPECT_NE(out.out.find("served GPU-hours"), std::string::npos);
  EXPECT_NE(out.out.find("decisions/second"), std::string::npos);
}

}  // namespace

TEST(FleetSimulateCli, TenanciesFromTheTraceAndFairScheduling) {
  const std::string path = std::string(TESSERA_BINARY_DIR) + "/fleet_cli_tenancy_trace.csv";
  // One node: flood fills it and queues three more 8-GPU requests; a's 1-GPU request arrives
  // last.
  std::ofstream(path) << "arrival_s,duration_s,gpus,tenancy\n0,100,8,flood\n1,100,8,flood\n"
                         "2,100,8,flood\n3,100,8,flood\n4,10,1,a\n";
  for (const char* mode : {"fifo", "fair"}) {
    SCOPED_TRACE(mode);
    Output out = Tessera("fleet simulate --nodes 1 --queue --no-timing --trace " + path +
                         " --scheduling " + mode);
    ASSERT_EQ(out.exit_code, 0) << out.out;
    auto doc = nlohmann::json::parse(out.out);
    EXPECT_EQ(doc["scheduling"], mode);
    EXPECT_EQ(doc["per_tenancy"]["flood"]["requests"], 4);
    EXPECT_EQ(doc["per_tenancy"]["a"]["admitted"], 1);
    // FIFO: each queued 8-GPU request takes the whole node in turn, so a starts at t=400. Fair:
    // the second flood request reserved the node before a arrived, but the flood is above its
    // share and a below hers, so the flood keeps no reservation against a: a starts when the
    // node frees, at t=100.
    const double wait = doc["per_tenancy"]["a"]["wait_max_s"];
    EXPECT_DOUBLE_EQ(wait, std::string(mode) == "fair" ? 96.0 : 396.0);
  }
  Output bad = Tessera("fleet simulate --nodes 1 --trace " + path + " --scheduling fair");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("--scheduling needs --queue"), std::string::npos) << bad.out;
  Output quota = Tessera("fleet simulate --nodes 1 --queue --trace " + path +
                         " --scheduling fair --tenancy-quota a=x");
  EXPECT_NE(quota.exit_code, 0);
}

TEST(FleetSimulateCli, SyntheticTenantsWithWeights) {
  const std::string args =
      "fleet simulate --nodes 10 --queue --synthetic 3 --requests 1500 --no-timing "
      "--scheduling fair --tenant x=1 --tenant y=1 --tenancy-weight x=2";
  Output a = Tessera(args);
  ASSERT_EQ(a.exit_code, 0) << a.out;
  EXPECT_EQ(a.out, Tessera(args).out);
  auto doc = nlohmann::json::parse(a.out);
  EXPECT_EQ(doc["per_tenancy"]["x"]["requests"], 750);
  EXPECT_EQ(doc["backlogged_tenancies"].size(), 2u);
  // Both stay backlogged, so x (weight 2) gets more of the fleet than y.
  EXPECT_GT(doc["per_tenancy"]["x"]["share"].get<double>(),
            doc["per_tenancy"]["y"]["share"].get<double>());
}

namespace {

TEST(FleetSimulateMigCli, ReplaysATraceByDemandAndAgainstTheBestStaticLayout) {
  const std::string dir = ::testing::TempDir();
  const std::string written = dir + "/mig-trace.csv";
  Output generated = Tessera(
      "fleet simulate-mig --synthetic 41 --hours 1 --nodes 2 "
      "--search-budget 10 --write-trace " +
      written);
  ASSERT_EQ(generated.exit_code, 0) << generated.out;
  auto doc = nlohmann::json::parse(generated.out);
  EXPECT_EQ(doc["gpus"], 16);
  EXPECT_GT(doc["requests"].get<int>(), 0);
  EXPECT_GT(doc["by_demand"]["gpu_hours"].get<double>(), 0) << doc;
  EXPECT_EQ(doc["by_demand"]["requests"], doc["requests"]);
  EXPECT_GE(doc["by_demand"]["instances_created"].get<int>(), 1) << doc;
  EXPECT_EQ(doc["best_static"]["candidates"], 10) << doc;
  EXPECT_FALSE(doc["best_static"]["layout"].get<std::string>().empty());
  // The written trace replays to the same figures.
  Output replayed = Tessera("fleet simulate-mig --nodes 2 --search-budget 10 --trace " + written);
  ASSERT_EQ(replayed.exit_code, 0) << replayed.out;
  EXPECT_EQ(nlohmann::json::parse(replayed.out), doc);
}

TEST(FleetSimulateMigCli, RefusesABadTraceWithoutEchoingIt) {
  const std::string path = ::testing::TempDir() + "/bad-mig-trace.csv";
  std::ofstream(path) << "1,t,mig,9g.999gb-" << std::string(4000, 'x') << ",60\n";
  Output out = Tessera("fleet simulate-mig --no-search --trace " + path);
  EXPECT_EQ(out.exit_code, 2) << out.out;
  EXPECT_EQ(out.out.find(std::string(200, 'x')), std::string::npos) << out.out;
  Output neither = Tessera("fleet simulate-mig --no-search");
  EXPECT_EQ(neither.exit_code, 2) << neither.out;
}

}  // namespace
