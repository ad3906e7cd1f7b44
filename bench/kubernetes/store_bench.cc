// The cluster store of tessera-serve --backend kubernetes against the scripted API server on
// loopback, next to the embedded mode (SQLite, null backend) in the same run:
//  1. submissions per second and latency percentiles: CLIENTS threads, each POSTing SUBMISSIONS
//     containers (no GPUs) one after another over its own connection; an answer comes once the
//     record is durable (a GpuContainer created / a SQLite group committed). In Kubernetes mode
//     the leader starts each container (a Pod) meanwhile, against the same API server;
//  2. peak RSS (VmHWM) of one replica whose watch cache holds OBJECTS GpuContainer objects
//     (created beforehand in the API server), after it synced and after a full listing.
//
//   store_bench [CLIENTS SUBMISSIONS OBJECTS]   (default 4 250 10000)
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/kubernetes/state_objects.h"
#include "kubernetes/fake_apiserver.h"
#include "serve/serve_process.h"
#include "support/wait.h"

using namespace tessera;
using namespace tessera::testing;
using k8s::Json;
using k8s::Resource;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kAdminToken = "tsa_0123456789abcdef0123456789abcdef0123456789abcdef";

std::string WriteKubeconfig(const std::string& dir, const std::string& url) {
  const std::string path = dir + "/kubeconfig";
  WriteKubeconfigFile(path, url);
  std::ofstream(dir + "/admin.token") << kAdminToken << "\n";
  std::filesystem::permissions(dir + "/admin.token", std::filesystem::perms::owner_read |
                                                         std::filesystem::perms::owner_write);
  return path;
}

std::vector<std::string> KubernetesFlags(const std::string& dir, const std::string& kubeconfig) {
  return {"--root",
          MaterializeHost("hgx-h100-dgx"),
          "--backend",
          "kubernetes",
          "--kubeconfig",
          kubeconfig,
          "--cdi-dir",
          dir + "/cdi",
          "--instance",
          "tessera-control-plane",
          "--leader-elect",
          "--leader-elect-identity",
          "replica-a",
          "--leader-elect-namespace",
          "tessera-system",
          "--admin-token-file",
          dir + "/admin.token"};
}

void Submissions(const char* mode, ServeProcess& serve, int clients, int per_client) {
  {
    auto admin = serve.Connect(kAdminToken);
    int status = 0;
    CallJson(*admin, "PUT", "/v1/tenancies/bench", "{}", &status);
    if (status != 200) {
      std::fprintf(stderr, "%s: PUT tenancy answered %d\n", mode, status);
      std::exit(1);
    }
  }
  std::vector<std::vector<double>> latencies(clients);
  std::atomic<int> failures{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto connection = serve.Connect(kAdminToken);
      for (int n = 0; n < per_client; ++n) {
        const auto sent = Clock::now();
        auto response = connection->Call(
            "POST", "/v1/containers",
            R"({"image":"registry.example/team/train:2024.1","tenancy":"bench","command":["python3","train.py"],"env":{"SEED":"1"}})");
        latencies[c].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
        if (!response || response->status / 100 != 2) ++failures;
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& one : latencies)
    all.insert(all.end(), one.begin(), one.end());
  std::sort(all.begin(), all.end());
  auto at = [&](double q) { return all[std::min(all.size() - 1, size_t(q * all.size()))]; };
  std::printf(
      "%-40s %6zu submissions in %6.2f s: %7.1f /s, p50 %6.2f ms, p99 %7.2f ms, "
      "max %7.2f ms, failed %d\n",
      mode, all.size(), seconds, all.size() / seconds, at(0.50), at(0.99), all.back(),
      failures.load());
}

void PeakRss(int objects) {
  FakeApiServer api;
  TempDir dir;
  const std::string kubeconfig = WriteKubeconfig(dir.path(), api.url());
  k8s::ClientConfig config;
  config.server = api.url();
  // The objects as replicas write them: finished submissions with a command and environment.
  {
    std::atomic<int> next{0};
    std::vector<std::thread> writers;
    for (int t = 0; t < 4; ++t) {
      writers.emplace_back([&] {
        k8s::Client client(config);
        for (int i = next++; i < objects; i = next++) {
          fleet::ContainerRecord record;
          char id[32];
          std::snprintf(id, sizeof id, "c-%016x", i);
          record.id = id;
          record.spec.image = "registry.example/team/train:2024.1";
          record.spec.tenancy = "bench";
          record.spec.command = {"python3", "train.py", "--epochs", "10"};
          record.spec.env = {{"SEED", "1"}, {"RUN", "bench"}};
          record.tenancy_uid = "0011223344556677";
          record.created_ms = 1763900000000 + i;
          if (!client.Create(Resource::GpuContainers(), "", k8s::GpuContainerObject(record))) {
            std::fprintf(stderr, "create %s failed\n", id);
            std::exit(1);
          }
        }
      });
    }
    for (auto& writer : writers)
      writer.join();
  }
  ServeProcess serve(dir.path() + "/replica", KubernetesFlags(dir.path(), kubeconfig));
  std::filesystem::create_directories(dir.path() + "/replica");
  const auto started = Clock::now();
  std::string log;
  if (!serve.Start(&log)) {
    std::fprintf(stderr, "tessera-serve did not start:\n%s\n", log.c_str());
    std::exit(1);
  }
  std::printf("== one replica, %d GpuContainer objects in the cluster\n", objects);
  std::printf("listening (caches synced) after %.2f s: VmHWM %s, VmRSS %s\n",
              std::chrono::duration<double>(Clock::now() - started).count(),
              ProcStatusField(serve.pid(), "VmHWM").c_str(),
              ProcStatusField(serve.pid(), "VmRSS").c_str());
  auto client = serve.Connect(kAdminToken);
  size_t listed = 0;
  std::string after;
  for (;;) {
    auto page =
        client->Call("GET", "/v1/containers?limit=1000" + (after.empty() ? "" : "&after=" + after));
    if (!page || page->status != 200) break;
    auto doc = nlohmann::json::parse(page->body);
    listed += doc["containers"].size();
    if (!doc.contains("next")) break;
    after = doc["next"].get<std::string>();
  }
  std::printf("after listing all %zu: VmHWM %s, VmRSS %s\n", listed,
              ProcStatusField(serve.pid(), "VmHWM").c_str(),
              ProcStatusField(serve.pid(), "VmRSS").c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const int clients = argc > 1 ? std::stoi(argv[1]) : 4;
  const int per_client = argc > 2 ? std::stoi(argv[2]) : 250;
  const int objects = argc > 3 ? std::stoi(argv[3]) : 10000;
  std::printf("load average before: %s\n", Trimmed(ReadText("/proc/loadavg")).c_str());
  std::printf("== submissions, %d clients x %d each (no GPUs)\n", clients, per_client);
  {
    TempDir dir;
    WriteKubeconfig(dir.path(), "http://127.0.0.1:1");
    ServeProcess serve(dir.path(),
                       {"--root", "/", "--backend", "null", "--cdi-dir", dir.path() + "/cdi",
                        "--admin-token-file", dir.path() + "/admin.token"});
    if (!serve.Start()) return 1;
    Submissions("embedded (SQLite, null backend)", serve, clients, per_client);
  }
  {
    FakeApiServer api;
    TempDir dir;
    const std::string kubeconfig = WriteKubeconfig(dir.path(), api.url());
    ServeProcess serve(dir.path(), KubernetesFlags(dir.path(), kubeconfig));
    std::string log;
    if (!serve.Start(&log)) {
      std::fprintf(stderr, "tessera-serve did not start:\n%s\n", log.c_str());
      return 1;
    }
    k8s::ClientConfig config;
    config.server = api.url();
    k8s::Client admin(config);
    WaitUntil([&] {
      auto lease = admin.Get(Resource::Leases(), "tessera-system", "tessera-control-plane");
      return lease && (*lease)["spec"].value("holderIdentity", "") == "replica-a";
    });
    Submissions("kubernetes (cluster store, scripted API)", serve, clients, per_client);
  }
  std::printf("load average after: %s\n", Trimmed(ReadText("/proc/loadavg")).c_str());
  if (objects > 0) PeakRss(objects);
  return 0;
}
