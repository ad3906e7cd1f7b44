// Peak RSS of the node agent (tessera-lease-sync) with the GPU telemetry collector on, against
// the same agent with it off: 8 GPUs (HGX fixture), 200 GPU processes in 50 Pods (a /proc tree
// shaped like a Kubernetes node's), the stand-in NVML, a pass every second, /metrics and
// /v1/telemetry scraped twice a second, for SECONDS. Goal: at most 20 MB with the collector on.
// Usage: node_agent_bench [SECONDS]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "backends/kubernetes/objects.h"
#include "client/client.h"
#include "inventory/inventory.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/lease_sync_process.h"
#include "serve/serve_process.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"

namespace {

using namespace tessera;

}  // namespace

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? std::atoi(argv[1]) : 30;
  testing::FakeApiServer server;
  testing::TempDir dir;
  testing::WriteKubeconfigFile(dir.path() + "/kubeconfig", server.url());
  k8s::ClientConfig config;
  config.server = server.url();
  k8s::Client client(config);
  const std::string host = testing::MaterializeHost("hgx-h100-dgx");
  inventory::ReadOptions read;
  read.root = host;
  auto inv = inventory::ReadInventory(read);
  if (!inv) return 1;
  std::vector<std::string> gpus;
  for (const auto* gpu : inv->Gpus())
    gpus.push_back(gpu->pci_address);

  testing::FakeNvmlState state("");
  testing::FakeNvmlScenario scenario;
  ::unsetenv("TESSERA_FAKE_NVML_SERVED");
  const uint64_t now = testing::NowMicros();
  std::string text;
  for (const auto& pci : gpus)
    text += "device " + pci +
            " util=70 memory_used=42949672960 memory_total=85899345920 "
            "power_mw=500000 temp=60 energy_mj=1000 energy_rate_mw=500000 energy_from_us=" +
            std::to_string(now) + "\n";
  int pid = 200000;
  for (int p = 0; p < 50; ++p) {
    const std::string& pci = gpus[p % gpus.size()];
    k8s::Json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", "job-" + std::to_string(p)}, {"namespace", "tenant-t"}}},
        {"spec",
         {{"nodeName", "node-1"},
          {"containers", k8s::Json::array({{{"name", "main"}, {"image", "x"}}})}}}};
    auto created = client.Create(k8s::Resource::Pods(), "tenant-t", pod);
    if (!created) return 1;
    std::string uid = (*created)["metadata"]["uid"];
    std::replace(uid.begin(), uid.end(), '-', '_');
    (void)client.Create(k8s::Resource::GpuLeases(), "",
                        k8s::BuildGpuLease({"job-" + std::to_string(p),
                                            "t",
                                            "node-1",
                                            {pci},
                                            "tenant-t",
                                            "job-" + std::to_string(p)}));
    for (int i = 0; i < 4; ++i, ++pid) {
      char id[80];
      std::snprintf(id, sizeof id, "%064x", pid);
      const std::string proc = dir.path() + "/proc/" + std::to_string(pid);
      std::filesystem::create_directories(proc);
      std::ofstream(proc + "/stat")
          << pid << " (job) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n";
      std::ofstream(proc + "/cgroup")
          << "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" << uid
          << ".slice/cri-containerd-" << id << ".scope\n";
      text += "process " + pci + " pid=" + std::to_string(pid) + " memory=1073741824\n";
      text += "busy " + pci + " pid=" + std::to_string(pid) +
              " sm=10 period_ms=167 from_us=" + std::to_string(now) + "\n";
    }
  }
  scenario.Write(text);

  for (bool telemetry : {false, true}) {
    std::vector<std::string> args = {"--kubeconfig",
                                     dir.path() + "/kubeconfig",
                                     "--node",
                                     "node-1",
                                     "--lease-file",
                                     dir.path() + "/leases.json",
                                     "--root",
                                     host,
                                     "--pod-resources-interval-ms",
                                     "0",
                                     "--nvml",
                                     FAKE_NVML,
                                     "--proc-dir",
                                     dir.path() + "/proc"};
    if (telemetry) {
      args.insert(args.end(),
                  {"--telemetry-interval-ms", "1000", "--metrics-listen", "127.0.0.1:0"});
    } else {
      args.insert(args.end(), {"--telemetry-interval-ms", "0"});
    }
    testing::LeaseSyncProcess agent(args,
                                    dir.path() + "/agent-" + (telemetry ? "on" : "off") + ".log");
    uint16_t port = telemetry ? agent.MetricsPort() : 0;
    size_t scrapes = 0, bytes = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < until) {
      if (port) {
        client::Connection connection({"127.0.0.1", port});
        for (const char* path : {"/metrics", "/v1/telemetry"}) {
          auto response = connection.Call("GET", path);
          if (response) {
            ++scrapes;
            bytes = std::max(bytes, response->body.size());
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    std::printf("node agent, telemetry %s, %d s%s: VmHWM %s, VmRSS %s\n",
                telemetry ? "on (8 GPUs, 200 processes, 50 Pods, a pass per second)" : "off",
                seconds,
                telemetry ? (", " + std::to_string(scrapes) + " scrapes, largest " +
                             std::to_string(bytes / 1024) + " KiB")
                                .c_str()
                          : "",
                testing::ProcStatusField(agent.pid(), "VmHWM").c_str(),
                testing::ProcStatusField(agent.pid(), "VmRSS").c_str());
    if (telemetry) {
      auto lease = client.Get(k8s::Resource::GpuLeases(), "", "job-0");
      if (lease)
        std::printf("  lease job-0 status.measured: %s\n",
                    (*lease)["status"].value("measured", k8s::Json()).dump().c_str());
    }
    agent.Kill(SIGTERM);
  }
  return 0;
}
