// Server time of the dashboard's one request per poll at fleet size: 100 nodes x 8 GPUs (the HGX
// fixture with its NVLink partition table, fleet mode), 10,000 containers (800 running, the rest
// queued), 20 tenancies; GET /v1/dashboard and GET /metrics through the real router (request in,
// rendered response out), timed in process. Goal: the dashboard under 50 ms.
// Usage: dashboard_bench [REQUESTS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "api/router.h"
#include "inventory/inventory.h"
#include "serve/service.h"
#include "support/fixture_host.h"
#include "topology/topology.h"

namespace {

using namespace tessera;

// Containers run until stopped: nothing ends on its own, so GPUs stay leased.
class HoldingBackend final : public backends::ContainerBackend {
 public:
  std::string name() const override { return "holding"; }
  Status CheckIsolation(fleet::Isolation, int) const override { return Ok(); }
  Status Start(const backends::StartRequest&, backends::ExitCallback) override { return Ok(); }
  Status Watch(const std::string&, backends::ExitCallback) override { return Ok(); }
  Status Stop(const std::string&, std::chrono::seconds) override { return Ok(); }
  Result<backends::BackendContainer> Inspect(const std::string& id) override {
    return backends::BackendContainer{id, backends::BackendState::kRunning, std::nullopt};
  }
  Result<std::string> Logs(const std::string&) override { return std::string(); }
  Result<std::vector<backends::BackendContainer>> List() override {
    return std::vector<backends::BackendContainer>{};
  }
  Status Remove(const std::string&) override { return Ok(); }
};

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0
                        : values[std::min(values.size() - 1,
                                          static_cast<size_t>(p * (values.size() - 1) + 0.5))];
}

struct Timed {
  std::vector<double> ms;
  size_t bytes = 0;
  int status = 0;
};

Timed Time(api::Router& router, const std::string& target, const std::string& token, int n) {
  Timed out;
  for (int i = 0; i < n; ++i) {
    api::Request request{api::http::verb::get, target, 11};
    request.set(api::http::field::authorization, "Bearer " + token);
    std::promise<api::Response> answered;
    const auto start = std::chrono::steady_clock::now();
    router.HandleRequest(std::move(request), [&answered](api::Response response) {
      answered.set_value(std::move(response));
    });
    api::Response response = answered.get_future().get();
    out.ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    out.bytes = response.body().size();
    out.status = static_cast<int>(response.result_int());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 50;
  testing::TempDir dir;
  inventory::ReadOptions read;
  read.root = testing::MaterializeHost("hgx-h100-dgx");
  auto inv = inventory::ReadInventory(read);
  auto topo =
      inv ? topology::TopologyFromInventory(*inv) : Result<topology::GpuTopology>(Internal(""));
  auto table = topology::PresetTable("hgx-h100-8gpu");
  if (!inv || !topo || !table) {
    std::fprintf(stderr, "dashboard_bench: fixture, topology or table missing\n");
    return 1;
  }
  std::vector<serve::NodeInventory> nodes;
  for (int n = 1; n <= 100; ++n) {
    serve::NodeInventory node;
    char name[32];
    std::snprintf(name, sizeof name, "gpu-node-%03d", n);
    node.name = name;
    node.topology = *topo;
    topology::PartitionTable with_pci = *table;
    int index = 0;
    for (const auto* gpu : inv->Gpus()) {
      fleet::GpuRecord record;
      record.pci_address = gpu->pci_address;
      record.index = index;
      record.model = gpu->model;
      record.cdi_device = "nvidia.com/gpu=" + gpu->gpu_uuid.value_or(gpu->pci_address);
      node.gpus.push_back(std::move(record));
      with_pci.pci_addresses[++index] = gpu->pci_address;
    }
    node.partition_table = std::move(with_pci);
    nodes.push_back(std::move(node));
  }
  fleet::StoreOptions store_options;
  store_options.path = dir.path() + "/store.db";
  store_options.synchronous_full = false;
  auto store = fleet::OpenSqliteStore(store_options);
  if (!store) return 1;
  serve::ServiceOptions options;
  options.data_dir = dir.path();
  options.lease_file.clear();
  options.fleet = true;
  auto service = serve::Service::Create(std::move(options), serve::Service::Host{},
                                        std::move(*store), std::make_unique<HoldingBackend>());
  if (!service) {
    std::fprintf(stderr, "dashboard_bench: %s\n", service.error().message.c_str());
    return 1;
  }
  const std::string token = "bench-admin-token-0123456789abcdef0123";
  (*service)->SetAdminTokenHash(fleet::Sha256Hex(token));
  (*service)->UpdateNodes(std::move(nodes));
  (*service)->Start();
  const serve::Caller admin{true, "", ""};
  std::mutex mu;
  std::condition_variable done;
  int answered = 0, accepted = 0;
  const auto submit_start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) {
    fleet::ContainerSpec spec;
    spec.image = "registry.example/job:1";
    spec.tenancy = "tenant-" + std::to_string(i % 20);
    spec.gpus = 1;
    (*service)->Submit(admin, spec, "", [&](Result<serve::SubmitResult> result) {
      std::lock_guard lock(mu);
      ++answered;
      accepted += result.ok();
      done.notify_all();
    });
  }
  {
    std::unique_lock lock(mu);
    done.wait(lock, [&] { return answered == 10000; });
  }
  // Until every GPU is held (the rest of the containers stay queued).
  for (int i = 0; i < 1200 && (*service)->counts().containers[1] < 800; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double submit_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - submit_start).count();
  auto counts = (*service)->counts();
  std::printf(
      "fleet: 100 nodes x 8 GPUs, %d containers accepted in %.1f s: %lld running, %lld "
      "pending\n",
      accepted, submit_s, static_cast<long long>(counts.containers[1]),
      static_cast<long long>(counts.containers[0]));
  api::Router router(service->get());
  for (const std::string target :
       {"/v1/dashboard", "/v1/dashboard?usage=tenant-3&range=day", "/metrics"}) {
    Time(router, target, token, 3);  // warm
    Timed timed = Time(router, target, token, requests);
    std::printf(
        "GET %s: HTTP %d, %zu KiB, server time p50 %.2f ms, p90 %.2f ms, max %.2f ms "
        "(%d requests)\n",
        target.c_str(), timed.status, timed.bytes / 1024, Percentile(timed.ms, 0.5),
        Percentile(timed.ms, 0.9), Percentile(timed.ms, 1.0), requests);
  }
  (*service)->Stop();
  return 0;
}
