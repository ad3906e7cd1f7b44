// tessera-lease-sync's telemetry as a real process against the scripted API server, the stand-in
// NVML and a /proc tree shaped like a Kubernetes node's (a GPU process in a Pod's containerd
// cgroup): /metrics with dcgm-exporter's names and the Pod's labels, `tessera top` on the node
// endpoint, and the lease's measured use kept in its status across kill -9 of the agent:
// exactly the samples and the energy the stand-in served after the first pass, none twice.
#include "nodeagent/node_telemetry.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "backends/kubernetes/objects.h"
#include "client/client.h"
#include "common/file_descriptor.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/lease_sync_process.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "support/raw_tcp.h"
#include "support/wait.h"

namespace tessera::k8s {
namespace {

using testing::FakeApiServer;
using testing::LeaseSyncProcess;
using testing::TempDir;

constexpr const char* kGpu = "0000:18:00.0";
constexpr uint32_t kPid = 4242;
const std::string kContainerId(64, 'e');

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class NodeTelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.SetWatchSeconds(0.5);
    testing::WriteKubeconfigFile(dir_.path() + "/kubeconfig", server_.url());
    ClientConfig config;
    config.server = server_.url();
    client_ = std::make_unique<Client>(config);
    Json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", "c-1"}, {"namespace", "tenant-team-a"}}},
                {"spec",
                 {{"nodeName", "node-1"},
                  {"containers", Json::array({{{"name", "main"}, {"image", "busybox"}}})}}}};
    auto created = client_->Create(Resource::Pods(), "tenant-team-a", pod);
    ASSERT_TRUE(created) << created.error().message;
    pod_uid_ = (*created)["metadata"]["uid"];
    // Another node's Pod is not watched.
    pod["metadata"]["name"] = "elsewhere";
    pod["spec"]["nodeName"] = "node-2";
    ASSERT_TRUE(client_->Create(Resource::Pods(), "tenant-team-a", pod));
    ASSERT_TRUE(client_->Create(
        Resource::GpuLeases(), "",
        BuildGpuLease({"c-1", "team-a", "node-1", {kGpu}, "tenant-team-a", "c-1"})));
    ASSERT_TRUE(client_->Patch(Resource::GpuLeases(), "", "c-1",
                               {{"status", {{"state", "active"}}}}, PatchType::kMerge, "status"));
    // The GPU process, in the Pod's containerd cgroup as kubelet's systemd driver names it.
    std::string uid = pod_uid_;
    std::replace(uid.begin(), uid.end(), '-', '_');
    std::filesystem::create_directories(dir_.path() + "/proc/" + std::to_string(kPid));
    // Its start time (field 22: one tick after boot, before any sample) keeps it attributed.
    std::ofstream(dir_.path() + "/proc/" + std::to_string(kPid) + "/stat")
        << kPid << " (job) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n";
    std::ofstream(dir_.path() + "/proc/" + std::to_string(kPid) + "/cgroup")
        << "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" << uid
        << ".slice/cri-containerd-" << kContainerId << ".scope\n";
  }

  std::vector<std::string> AgentFlags(const std::string& listen = "127.0.0.1:0") {
    return {"--kubeconfig",
            dir_.path() + "/kubeconfig",
            "--node",
            "node-1",
            "--lease-file",
            dir_.path() + "/leases.json",
            "--root",
            host_,
            "--pod-resources-interval-ms",
            "0",
            "--inventory-interval-ms",
            "0",
            "--telemetry-interval-ms",
            "300",
            "--nvml",
            FAKE_NVML,
            "--proc-dir",
            dir_.path() + "/proc",
            "--metrics-listen",
            listen};
  }

  std::unique_ptr<LeaseSyncProcess> StartAgent(std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = AgentFlags();
    flags.insert(flags.end(), extra.begin(), extra.end());
    return std::make_unique<LeaseSyncProcess>(flags, dir_.path() + "/agent.log");
  }

  Json Measured() {
    auto lease = client_->Get(Resource::GpuLeases(), "", "c-1");
    if (!lease) return Json();
    return (*lease)["status"].value("measured", Json());
  }

  std::string Get(uint16_t port, const std::string& path) {
    client::Connection connection({"127.0.0.1", port});
    auto response = connection.Call("GET", path);
    return response ? response->body : "";
  }

  FakeApiServer server_;
  TempDir dir_;
  std::string host_ = testing::MaterializeHost("hgx-h100-dgx");
  std::unique_ptr<Client> client_;
  std::string pod_uid_;
  testing::FakeNvmlState state_{""};
  testing::FakeNvmlScenario scenario_;
};

TEST_F(NodeTelemetryTest, MetricsWithPodLabelsAndMeasuredUseAcrossKill9) {
  const std::string device =
      std::string("device ") + kGpu +
      " util=50 memory_used=4294967296 memory_total=85899345920 "
      "power_mw=300000 temp=55 energy_mj=1000000 energy_rate_mw=200000 energy_from_us=" +
      std::to_string(testing::NowMicros()) + "\n";
  const std::string process =
      std::string("process ") + kGpu + " pid=" + std::to_string(kPid) + " memory=2147483648\n";
  // First only one sample: the agent's first pass takes it (and the energy counter) as its
  // baseline and writes both into the lease's status.
  const uint64_t t0 = testing::NowMicros();
  scenario_.Write(device + process + "sample " + kGpu + " pid=" + std::to_string(kPid) +
                  " ts=" + std::to_string(t0) + " sm=50\n");
  auto agent = StartAgent();
  const uint16_t port = agent->MetricsPort();
  ASSERT_NE(port, 0) << Slurp(dir_.path() + "/agent.log");
  Json baseline;
  ASSERT_TRUE(testing::WaitUntil([&] {
    baseline = Measured();
    return baseline.is_object() && baseline["cursors"][kGpu].value("sampleUs", 0ull) == t0;
  })) << Measured().dump()
      << Slurp(dir_.path() + "/agent.log");
  EXPECT_EQ(baseline.value("smSeconds", -1.0), 0.0);
  const uint64_t energy_baseline = baseline["cursors"][kGpu]["energyMj"];

  // /metrics: dcgm-exporter's names with the Pod's labels, and the node's series.
  std::string metrics;
  ASSERT_TRUE(testing::WaitUntil([&] {
    metrics = Get(port, "/metrics");
    return metrics.find("pod=\"c-1\"") != std::string::npos;
  })) << metrics;
  EXPECT_NE(metrics.find("DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID="), std::string::npos) << metrics;
  std::regex holder_fb(
      R"re(DCGM_FI_DEV_FB_USED\{gpu="0",UUID="[^"]*",pci_bus_id="00000000:18:00.0",device="nvidia\d+",modelName="[^"]*",Hostname="node-1",pod="c-1",namespace="tenant-team-a",container="main",tenancy="team-a"\} 2048)re");
  EXPECT_TRUE(std::regex_search(metrics, holder_fb)) << metrics;
  EXPECT_NE(metrics.find("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""), std::string::npos);
  EXPECT_NE(metrics.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\""), std::string::npos);
  EXPECT_NE(metrics.find("tessera_container_sm_seconds_total{pod=\"c-1\""), std::string::npos);
  EXPECT_EQ(metrics.find("elsewhere"), std::string::npos);
  // `tessera top` on the node endpoint (no token needed).
  int status = -1;
  std::string top = testing::RunCommand(
      testing::TesseraBinary() + " top --once --server http://127.0.0.1:" + std::to_string(port) +
          " 2>&1",
      &status);
  EXPECT_EQ(status, 0) << top;
  EXPECT_NE(top.find("0000:18:00.0"), std::string::npos) << top;
  EXPECT_NE(top.find("team-a/c-1"), std::string::npos) << top;
  EXPECT_NE(top.find("team-a "), std::string::npos) << top;

  // Now a sample every 100 ms at 50 % SM until t_end; the agent is killed with -9 halfway and
  // started again.
  const uint64_t period = 100'000;
  const uint64_t t_end = t0 + 40 * period;
  scenario_.Write(device + process + "busy " + kGpu + " pid=" + std::to_string(kPid) +
                  " sm=50 period_ms=100 from_us=" + std::to_string(t0) +
                  " to_us=" + std::to_string(t_end) + "\n");
  ASSERT_TRUE(testing::WaitUntil([&] {
    Json m = Measured();
    return m.is_object() && m.value("smSeconds", 0.0) > 0.3;
  })) << Measured().dump();
  agent->Kill(SIGKILL);
  const Json at_kill = Measured();
  agent = StartAgent();
  // Every sample up to t_end counted, once: the cursor reaches the last one.
  Json final;
  ASSERT_TRUE(testing::WaitUntil([&] {
    final = Measured();
    return final.is_object() && final["cursors"][kGpu].value("sampleUs", 0ull) == t_end;
  })) << Measured().dump()
      << Slurp(dir_.path() + "/agent.log");
  EXPECT_GE(final.value("smSeconds", 0.0), at_kill.value("smSeconds", 0.0));
  // 40 samples after the baseline, each covering 0.1 s at 50 %.
  EXPECT_NEAR(final.value("smSeconds", 0.0), 40 * 0.1 * 0.5, 1e-9) << final.dump();
  // Energy: exactly the counter's growth since the baseline pass, all of it the lease's (it
  // holds the whole GPU and runs its only process).
  const uint64_t energy_now = final["cursors"][kGpu]["energyMj"];
  EXPECT_NEAR(final.value("energyJoules", 0.0), (energy_now - energy_baseline) / 1000.0, 1e-6)
      << final.dump();
  // Memory: 2 GiB for about the time it ran (not exact: the passes' own times).
  EXPECT_GT(final.value("memoryGibSeconds", 0.0), 0.0);
}

// The agent's endpoint behind --metrics-token-file: refused without the token or with a wrong
// one, /healthz open; with 100 idle connections and a slowloris client open, a scrape with the
// token still answers within a second; `tessera top` reads it with the token.
TEST_F(NodeTelemetryTest, EndpointNeedsItsTokenAndAnswersBesideHundredIdleConnections) {
  const std::string token = "node-agent-scrape-token-0123456789";
  const std::string token_file = dir_.path() + "/metrics-token";
  std::ofstream(token_file) << token << "\n";
  scenario_.Write(std::string("device ") + kGpu + " util=50 memory_used=1 memory_total=2\n");
  auto agent = StartAgent({"--metrics-token-file", token_file, "--metrics-timeout-ms", "3000"});
  const uint16_t port = agent->MetricsPort();
  ASSERT_NE(port, 0) << Slurp(dir_.path() + "/agent.log");
  using std::chrono::milliseconds;
  auto get = [&](const std::string& path, const std::string& bearer) {
    return testing::RawExchange(
        port,
        "GET " + path + " HTTP/1.1\r\nHost: node\r\n" +
            (bearer.empty() ? "" : "Authorization: Bearer " + bearer + "\r\n") + "\r\n",
        milliseconds(10000));
  };
  EXPECT_EQ(testing::StatusOf(get("/healthz", "")), 200);
  EXPECT_EQ(testing::StatusOf(get("/metrics", "")), 401);
  EXPECT_EQ(testing::StatusOf(get("/metrics", "not-" + token)), 401);
  EXPECT_EQ(testing::StatusOf(get("/v1/telemetry", "")), 401);
  EXPECT_EQ(testing::StatusOf(get("/v1/telemetry", token)), 200);
  // Once the first pass has run, the GPU's series are there.
  std::string metrics;
  ASSERT_TRUE(testing::WaitUntil([&] {
    metrics = get("/metrics", token);
    return metrics.find("DCGM_FI_DEV_") != std::string::npos;
  })) << metrics;

  std::deque<FileDescriptor> idle;
  for (int i = 0; i < 100; ++i) {
    idle.emplace_back(testing::ConnectLoopback(port));
    ASSERT_GE(idle.back().get(), 0);
  }
  FileDescriptor slow(testing::ConnectLoopback(port));
  ASSERT_GE(slow.get(), 0);
  std::atomic<bool> stop{false};
  std::thread slowloris([&] {  // a header byte a second, never a whole header
    const std::string header = "GET /metrics HTTP/1.1\r\nX-Slow: " + std::string(600, 'x');
    for (size_t i = 0; i < header.size() && !stop; ++i) {
      if (::send(slow.get(), &header[i], 1, MSG_NOSIGNAL) != 1) return;
      for (int tick = 0; tick < 10 && !stop; ++tick)
        std::this_thread::sleep_for(milliseconds(100));
    }
  });
  std::this_thread::sleep_for(milliseconds(200));  // all of them connected and sending
  const auto begin = std::chrono::steady_clock::now();
  const std::string scrape = get("/metrics", token);
  const auto took = std::chrono::steady_clock::now() - begin;
  EXPECT_EQ(testing::StatusOf(scrape), 200) << scrape.substr(0, 300);
  EXPECT_NE(scrape.find("DCGM_FI_DEV_"), std::string::npos) << scrape.substr(0, 300);
  EXPECT_LE(took, std::chrono::seconds(1));
  // Each of them holds its slot only until the deadline.
  EXPECT_TRUE(testing::ClosedByPeerWithin(slow.get(), milliseconds(20000)));
  EXPECT_TRUE(testing::ClosedByPeerWithin(idle.back().get(), milliseconds(20000)));
  stop = true;
  slowloris.join();

  int status = -1;
  std::string top = testing::RunCommand(
      testing::TesseraBinary() + " top --once --server http://127.0.0.1:" + std::to_string(port) +
          " --token-file " + token_file + " 2>&1",
      &status);
  EXPECT_EQ(status, 0) << top;
  EXPECT_NE(top.find("0000:18:00.0"), std::string::npos) << top;
}

// Off loopback the agent does not serve without a token file, unless told the NetworkPolicy is
// the guard; a token file it cannot read stops it too.
TEST_F(NodeTelemetryTest, EndpointOffLoopbackWithoutATokenIsRefusedAtStart) {
  auto run = [&](std::vector<std::string> flags, int* status) {
    std::string command =
        "timeout 60 " + std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-lease-sync";
    for (const auto& flag : flags)
      command += " '" + flag + "'";
    return testing::RunCommand(command + " 2>&1", status);
  };
  int status = -1;
  std::string out = run(AgentFlags("0.0.0.0:0"), &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("not a loopback address"), std::string::npos) << out;
  std::vector<std::string> missing = AgentFlags();
  missing.insert(missing.end(), {"--metrics-token-file", dir_.path() + "/absent"});
  out = run(missing, &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("absent"), std::string::npos) << out;
  // --metrics-anonymous: it serves (then it is stopped).
  std::vector<std::string> anonymous = AgentFlags("0.0.0.0:0");
  anonymous.push_back("--metrics-anonymous");
  LeaseSyncProcess agent(anonymous, dir_.path() + "/anonymous.log");
  EXPECT_NE(agent.MetricsPort(), 0) << agent.Log();
}

TEST(NodeDirectory, LeasedPodsCarryTheirTenancyOtherPodsOnlyLabels) {
  std::map<std::string, Json> leases;
  leases["c-1"] = BuildGpuLease({"c-1", "team-a", "node-1", {kGpu}, "ns-a", "pod-a"});
  leases["c-2"] = BuildGpuLease({"c-2", "team-b", "node-1", {"0000:2a:00.0"}, "ns-b", "pod-b"});
  leases["c-2"]["status"] = {{"state", "checking"}};  // its Pod ended: no longer a holder
  std::map<std::string, NodePod> pods;
  pods["u-a"] = {"u-a", "ns-a", "pod-a", "main", "Running"};
  pods["u-b"] = {"u-b", "ns-b", "pod-b", "main", "Succeeded"};
  pods["u-c"] = {"u-c", "kube-system", "dcgm", "exporter", "Running"};
  auto directory = NodeDirectory(leases, pods);
  ASSERT_EQ(directory.holders.size(), 3u);
  std::map<std::string, telemetry::Holder> by_pod;
  for (const auto& holder : directory.holders)
    by_pod[holder.pod] = holder;
  EXPECT_EQ(by_pod["pod-a"].key, "c-1");
  EXPECT_EQ(by_pod["pod-a"].tenancy, "team-a");
  EXPECT_EQ(by_pod["pod-a"].pod_uid, "u-a");
  EXPECT_EQ(by_pod["pod-a"].gpus, (std::map<std::string, double>{{kGpu, 1.0}}));
  EXPECT_EQ(by_pod["pod-b"].tenancy, "");
  EXPECT_EQ(by_pod["dcgm"].key, "pod:kube-system/dcgm");
  EXPECT_EQ(by_pod["dcgm"].container, "exporter");
}

TEST(LeaseMeasured, RoundTripsAndIgnoresGarbage) {
  LeaseMeasured measured;
  measured.total = {1.5, 2.5, 3.5};
  measured.cursors[kGpu] = {1700000000123456ull, 987654321ull, 1700000000123};
  Json lease = {{"status", MeasuredPatch(measured, 42)["status"]}};
  auto back = MeasuredOfLease(lease);
  EXPECT_EQ(back.total, measured.total);
  EXPECT_EQ(back.cursors, measured.cursors);
  Json garbage = {{"status",
                   {{"measured",
                     {{"smSeconds", "many"},
                      {"energyJoules", -5},
                      {"cursors", {{kGpu, "x"}, {"0000:2a:00.0", {{"sampleUs", -1}}}}}}}}}};
  auto zero = MeasuredOfLease(garbage);
  EXPECT_EQ(zero.total, telemetry::Usage{});
  EXPECT_EQ(zero.cursors.size(), 1u);
  EXPECT_EQ(zero.cursors["0000:2a:00.0"], telemetry::GpuCursor{});
}

}  // namespace
}  // namespace tessera::k8s
