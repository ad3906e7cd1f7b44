// What a hostile API server costs the DRA plugin, printed as figures: for a 100,000-deep claim,
// a 200 MB claim (with a Content-Length, and chunked without one) the time to refuse it and the
// plugin's peak RSS afterwards; then, while a claim whose answer trickles one byte a second
// hangs, the prepare latency of other claims and when the slow claim fails.
// Usage: dra_hostile_bench [fast prepares while the slow one hangs (20)]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "deviceplugin/plugin_process.h"
#include "dra/dra.h"
#include "dra/dra_kubelet.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "support/fixture_host.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

const k8s::Resource kClaims{"/apis/resource.k8s.io/v1", "resourceclaims", true};

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  const int fast_prepares = argc > 1 ? std::atoi(argv[1]) : 20;
  const std::string root = testing::MaterializeHost("hgx-h100-dgx");
  testing::TempDir dir;
  testing::FakeApiServer server;
  testing::WriteKubeconfigFile(dir.path() + "/kubeconfig", server.url());
  k8s::ClientConfig config;
  config.server = server.url();
  k8s::Client client(config);
  inventory::ReadOptions read;
  read.root = root;
  auto node = dra::DescribeNode(*inventory::ReadInventory(read), {});
  std::filesystem::create_directories(dir.path() + "/plugin");
  testing::PluginProcess plugin(
      testing::DraPluginBinary(),
      {"--node-name", "node-a", "--root", root, "--kubeconfig", dir.path() + "/kubeconfig",
       "--registry-dir", dir.path() + "/registry", "--plugin-dir", dir.path() + "/plugin",
       "--cdi-dir", dir.path() + "/cdi", "--lease-file", dir.path() + "/leases.json", "--log-level",
       "warn"},
      dir.path() + "/plugin.log");
  testing::DraKubelet kubelet(dir.path() + "/registry", "gpu.tessera.dev");
  if (auto problem = kubelet.Register(std::chrono::seconds(20)); !problem.empty()) {
    std::fprintf(stderr, "register: %s\n%s", problem.c_str(), plugin.Log().c_str());
    return 1;
  }
  int serial = 0;
  auto claim = [&](k8s::Json rule) {
    std::string name = "c" + std::to_string(serial++);
    auto created = client.Create(kClaims, "team",
                                 {{"apiVersion", "resource.k8s.io/v1"},
                                  {"kind", "ResourceClaim"},
                                  {"metadata", {{"name", name}, {"namespace", "team"}}}});
    k8s::Json results = {{{"request", "gpus"},
                          {"driver", "gpu.tessera.dev"},
                          {"pool", "node-a"},
                          {"device", node->devices[serial % 8].name}}};
    (void)client.Patch(kClaims, "team", name,
                       {{"status", {{"allocation", {{"devices", {{"results", results}}}}}}}},
                       k8s::PatchType::kMerge, "status");
    if (!rule.is_null()) {
      rule["method"] = "GET";
      rule["path"] = "/resourceclaims/" + name + "$";
      rule["times"] = 1000;
      server.Script(k8s::Json::array({rule}));
    }
    return dra::ClaimRef{"team", name, (*created)["metadata"]["uid"]};
  };
  std::printf("DRA plugin against a hostile API server (fake_apiserver.py on loopback, HTTP)\n");
  std::printf("plugin peak RSS after start and registration: %ld kB\n", plugin.PeakRssKb());
  struct Case {
    const char* what;
    k8s::Json rule;
  };
  for (const auto& c :
       {Case{"100,000-deep claim (200 KB)", {{"deep", 100000}}},
        Case{"200 MB claim, Content-Length", {{"huge_bytes", 200 << 20}}},
        Case{"200 MB claim, chunked", {{"huge_bytes", 200 << 20}, {"chunked", true}}}}) {
    auto ref = claim(c.rule);
    auto start = Clock::now();
    auto result = kubelet.Prepare({ref})[ref.uid];
    const double took = Ms(Clock::now() - start);
    std::printf("%-30s refused in %8.1f ms, peak RSS %ld kB (%s)\n", c.what, took,
                plugin.PeakRssKb(), result.error.substr(0, 90).c_str());
  }

  auto slow = claim({{"trickle_interval", 1.0}});
  std::atomic<bool> slow_done{false};
  auto slow_start = Clock::now();
  auto slow_call = std::async(std::launch::async, [&] {
    auto result = kubelet.Prepare({slow})[slow.uid];
    slow_done = true;
    return result.error;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // its GET is in flight
  std::vector<double> fast_ms;
  for (int i = 0; i < fast_prepares && !slow_done; ++i) {
    auto ref = claim(nullptr);
    auto start = Clock::now();
    auto result = kubelet.Prepare({ref})[ref.uid];
    fast_ms.push_back(Ms(Clock::now() - start));
    if (!result.error.empty())
      std::fprintf(stderr, "fast prepare failed: %s\n", result.error.c_str());
    kubelet.Unprepare({ref});
  }
  std::string slow_error = slow_call.get();
  std::printf("while a trickling claim hangs: %zu other prepares, p50 %.1f ms, max %.1f ms\n",
              fast_ms.size(), Percentile(fast_ms, 0.5), Percentile(fast_ms, 1.0));
  std::printf("the trickling claim failed after %.1f s (kubelet allows 45 s): %s\n",
              Ms(Clock::now() - slow_start) / 1000.0, slow_error.substr(0, 100).c_str());
  std::printf("plugin peak RSS at the end: %ld kB\n", plugin.PeakRssKb());
  return plugin.Stop() == 0 ? 0 : 1;
}
