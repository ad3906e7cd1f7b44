// NodePrepareResources latency over the socket (the claim GET against a loopback API server
// included), lease change -> ResourceSlice updated, and the plugin's peak RSS.
// Usage: dra_bench [iterations] [--tls]   (the API server is tests/tools/k8s/fake_apiserver.py;
// with --tls it speaks HTTPS, as the API server does in a cluster)
// The files lie as on a node: the CDI dir on a tmpfs (/var/run/cdi; /var/run is /run), the
// plugin dir (/var/lib/kubelet/plugins/...) on disk.
#include <stdlib.h>
#include <sys/vfs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/atomic_file.h"
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
const k8s::Resource kSlices{"/apis/resource.k8s.io/v1", "resourceslices", false};

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

constexpr long kTmpfsMagic = 0x01021994;

std::string FilesystemOf(const std::string& path) {
  struct statfs st;
  if (::statfs(path.c_str(), &st) != 0) return "unknown";
  char magic[32];
  std::snprintf(magic, sizeof magic, "0x%lx", static_cast<long>(st.f_type));
  if (st.f_type == kTmpfsMagic) return std::string("tmpfs (") + magic + ")";
  if (st.f_type == 0xEF53) return std::string("ext2/3/4 (") + magic + ")";
  if (st.f_type == 0x58465342) return std::string("xfs (") + magic + ")";
  if (st.f_type == 0x9123683E) return std::string("btrfs (") + magic + ")";
  return magic;
}

// A fresh directory on the first tmpfs of /dev/shm and /run, as /var/run/cdi is on a node; on
// disk (under `fallback`) when neither is a tmpfs.
class CdiDir {
 public:
  explicit CdiDir(const std::string& fallback) {
    for (const char* base : {"/dev/shm", "/run"}) {
      struct statfs st;
      if (::statfs(base, &st) != 0 || st.f_type != kTmpfsMagic) continue;
      std::string pattern = std::string(base) + "/tessera-dra-bench-XXXXXX";
      if (::mkdtemp(pattern.data())) {
        path_ = pattern;
        owned_ = true;
        return;
      }
    }
    path_ = fallback;
  }
  CdiDir(const CdiDir&) = delete;
  CdiDir& operator=(const CdiDir&) = delete;
  ~CdiDir() {
    std::error_code ignored;
    if (owned_) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

size_t SliceDevices(k8s::Client& client) {
  auto slice = client.Get(kSlices, "", dra::SliceName("gpu.tessera.dev", "node-a"));
  return slice ? (*slice)["spec"]["devices"].size() : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 200;
  bool tls = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--tls") {
      tls = true;
    } else {
      iterations = std::atoi(argv[i]);
    }
  }
  std::string root = testing::MaterializeHost("hgx-h100-dgx");
  testing::TempDir dir;
  // In a cluster the plugin reaches the API server over HTTPS, so --tls measures what a node
  // runs: the TLS session, its library and the CA the client loads.
  std::vector<std::string> server_args;
  if (tls) {
    testing::MakeTestPki(dir.path());
    server_args = {"--tls-cert", dir.path() + "/server.crt", "--tls-key",
                   dir.path() + "/server.key"};
  }
  testing::FakeApiServer server(server_args);
  testing::WriteKubeconfigFile(dir.path() + "/kubeconfig", server.url(),
                               tls ? dir.path() + "/ca.crt" : "");
  k8s::ClientConfig config;
  config.server = server.url();
  if (tls) config.ca_file = dir.path() + "/ca.crt";
  k8s::Client client(config);
  inventory::ReadOptions read;
  read.root = root;
  auto node = dra::DescribeNode(*inventory::ReadInventory(read), {});
  std::string leases = dir.path() + "/leases.json";
  CdiDir cdi_dir(dir.path() + "/cdi");
  std::string plugin_dir = dir.path() + "/plugin";
  std::filesystem::create_directories(plugin_dir);
  testing::PluginProcess plugin(
      testing::DraPluginBinary(),
      {"--node-name", "node-a", "--root", root, "--kubeconfig", dir.path() + "/kubeconfig",
       "--registry-dir", dir.path() + "/registry", "--plugin-dir", plugin_dir, "--cdi-dir",
       cdi_dir.path(), "--lease-file", leases, "--log-level", "warn"},
      dir.path() + "/plugin.log");
  testing::DraKubelet kubelet(dir.path() + "/registry", "gpu.tessera.dev");
  if (auto problem = kubelet.Register(std::chrono::seconds(20)); !problem.empty()) {
    std::fprintf(stderr, "register: %s\n%s", problem.c_str(), plugin.Log().c_str());
    return 1;
  }
  std::printf(
      "DRA plugin bench: %d prepares per size, API server = fake_apiserver.py on "
      "loopback (Python http.server), %s\n",
      iterations, tls ? "HTTPS" : "HTTP");
  std::printf("CDI dir %s: %s; plugin dir %s: %s\n", cdi_dir.path().c_str(),
              FilesystemOf(cdi_dir.path()).c_str(), plugin_dir.c_str(),
              FilesystemOf(plugin_dir).c_str());
  for (size_t count : {1u, 8u}) {
    std::vector<double> ms, get_ms, retry_ms;
    for (int i = 0; i < iterations; ++i) {
      k8s::Json results = k8s::Json::array();
      for (size_t d = 0; d < count; ++d) {
        results.push_back({{"request", "gpus"},
                           {"driver", "gpu.tessera.dev"},
                           {"pool", "node-a"},
                           {"device", node->devices[d].name}});
      }
      std::string name = "c" + std::to_string(count) + "-" + std::to_string(i);
      auto created = client.Create(kClaims, "team",
                                   {{"apiVersion", "resource.k8s.io/v1"},
                                    {"kind", "ResourceClaim"},
                                    {"metadata", {{"name", name}, {"namespace", "team"}}}});
      // The allocation goes through /status, as the scheduler writes it.
      (void)client.Patch(kClaims, "team", name,
                         {{"status", {{"allocation", {{"devices", {{"results", results}}}}}}}},
                         k8s::PatchType::kMerge, "status");
      dra::ClaimRef ref{"team", name, (*created)["metadata"]["uid"]};
      // The same GET the plugin makes, from this process: the API server's share of a prepare.
      auto get_start = Clock::now();
      (void)client.Get(kClaims, "team", name);
      get_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - get_start).count());
      auto start = Clock::now();
      auto prepared = kubelet.Prepare({ref});
      double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      if (prepared[ref.uid].error != "" || prepared[ref.uid].devices.size() != count) {
        std::fprintf(stderr, "prepare failed: %s\n", prepared[ref.uid].error.c_str());
        return 1;
      }
      ms.push_back(elapsed);
      // kubelet's retry of a prepared claim: answered from the checkpoint, no GET and no
      // write, so the socket round trip and the plugin's fixed share.
      start = Clock::now();
      (void)kubelet.Prepare({ref});
      retry_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      kubelet.Unprepare({ref});
    }
    std::printf("NodePrepareResources %zu GPU(s): p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", count,
                Percentile(ms, 0.5), Percentile(ms, 0.99), Percentile(ms, 1.0));
    std::printf(
        "  the same claim GET from the bench (API server share): p50 %.2f ms, p99 %.2f ms\n",
        Percentile(get_ms, 0.5), Percentile(get_ms, 0.99));
    std::printf("  a retried prepare (no GET, no file written): p50 %.2f ms, p99 %.2f ms\n",
                Percentile(retry_ms, 0.5), Percentile(retry_ms, 0.99));
  }
  // Lease change -> slice updated (the plugin checks every --poll-ms, default 200 ms).
  std::vector<double> withdraw_ms;
  for (int i = 0; i < 5; ++i) {
    while (SliceDevices(client) != 8)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto start = Clock::now();
    (void)WriteFileAtomically(leases, R"({"version":1,"gpus":{")" + node->devices[0].pci_address +
                                          R"(":{"state":"quarantined"}}})");
    while (SliceDevices(client) != 7)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    withdraw_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    (void)WriteFileAtomically(leases, R"({"version":1,"gpus":{}})");
  }
  std::printf("lease change -> ResourceSlice updated: p50 %.0f ms, max %.0f ms (5 changes)\n",
              Percentile(withdraw_ms, 0.5), Percentile(withdraw_ms, 1.0));
  long peak_kb = plugin.PeakRssKb();
  std::printf("plugin peak RSS (VmHWM, its whole life): %.1f MB (%ld kB)\n", peak_kb / 1024.0,
              peak_kb);
  return 0;
}
