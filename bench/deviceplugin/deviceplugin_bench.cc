// Device plugin figures, all over real unix sockets:
//  1. Allocate latency: 10k calls to the real tessera-device-plugin process on the materialized
//     HGX H100 host (cdi-cri; and all four strategies at once), p50/p99/max.
//  2. GetPreferredAllocation: 8 GPUs (the real process, with and without the HGX partition
//     table) and 64 GPUs (a synthetic 64-GPU inventory served in-process by the same
//     ResourceServer), p50/p99/max.
//  3. Health change -> ListAndWatch update: a device node removed/restored, time until the
//     kubelet emulator's stream shows the new health.
//  4. Peak RSS (VmHWM) of the plugin process after all of it.
// The machine load (/proc/loadavg) is printed with the figures; run it several times and keep
// the best when the machine is shared.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/atomic_file.h"
#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/kubelet_emulator.h"
#include "deviceplugin/plugin_process.h"
#include "deviceplugin/server.h"
#include "support/fixture_host.h"

using namespace tessera;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::KubeletEmulator;
using testing::PluginClient;
using testing::PluginProcess;

namespace {

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

struct Stats {
  double p50 = 0, p99 = 0, max = 0;
};

Stats Summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us[std::min(us.size() - 1, static_cast<size_t>(q * us.size()))];
  };
  return {at(0.50), at(0.99), us.back()};
}

void Print(const char* what, size_t n, const Stats& s, const char* unit = "us") {
  std::printf("%-58s n=%-6zu p50 %9.1f %s  p99 %9.1f %s  max %9.1f %s\n", what, n, s.p50, unit,
              s.p99, unit, s.max, unit);
}

double Micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

std::vector<double> TimeAllocate(PluginClient& client, const std::vector<std::string>& ids, int n) {
  std::vector<double> us;
  us.reserve(n);
  for (int i = 0; i < n; ++i) {
    v1beta1::AllocateResponse response;
    std::vector<std::vector<std::string>> request = {{ids[i % ids.size()]}};
    auto start = Clock::now();
    if (!client.Allocate(request, &response).ok()) std::abort();
    us.push_back(Micros(start, Clock::now()));
  }
  return us;
}

std::vector<double> TimePreferred(PluginClient& client, const std::vector<std::string>& ids,
                                  int size, int n) {
  std::vector<double> us;
  std::vector<std::string> chosen;
  for (int i = 0; i < n; ++i) {
    // Vary what is available and what must be included, as kubelet's calls do.
    std::vector<std::string> available = ids;
    if (available.size() > static_cast<size_t>(size)) available.erase(available.begin() + (i % 2));
    std::vector<std::string> must = {available[i % available.size()]};
    auto start = Clock::now();
    grpc::Status status = client.Preferred(available, must, size, &chosen);
    if (!status.ok() || chosen.size() != static_cast<size_t>(size)) {
      std::fprintf(stderr, "preferred failed: %s\n", status.error_message().c_str());
      std::abort();
    }
    us.push_back(Micros(start, Clock::now()));
  }
  return us;
}

std::vector<std::string> Ids(const v1beta1::ListAndWatchResponse& list) {
  std::vector<std::string> ids;
  for (const auto& d : list.devices())
    ids.push_back(d.id());
  return ids;
}

// One plugin process on a fresh copy of the HGX host.
struct Node {
  testing::TempHost host{"hgx-h100-dgx"};
  testing::TempDir dir;
  std::unique_ptr<KubeletEmulator> kubelet;
  std::unique_ptr<PluginProcess> plugin;
  std::unique_ptr<PluginClient> client;
  v1beta1::ListAndWatchResponse list;

  explicit Node(const std::string& config) {
    std::string sockets = dir.path() + "/sockets";
    std::filesystem::create_directories(sockets);
    if (!WriteFileAtomically(dir.path() + "/config.yaml",
                             "health: {nvmlLibrary: /nonexistent/libnvidia-ml.so.1}\n" + config)
             .ok()) {
      std::abort();
    }
    kubelet = std::make_unique<KubeletEmulator>(sockets);
    kubelet->Start();
    plugin = std::make_unique<PluginProcess>(
        testing::DevicePluginBinary(),
        std::vector<std::string>{"--root", host.root(), "--socket-dir", sockets, "--cdi-dir",
                                 dir.path() + "/cdi", "--lease-file", dir.path() + "/leases.json",
                                 "--config", dir.path() + "/config.yaml"},
        dir.path() + "/log");
    auto registration = kubelet->WaitForRegistration("nvidia.com/gpu", 1, 20s);
    if (!registration) {
      std::fprintf(stderr, "plugin did not register:\n%s\n", plugin->Log().c_str());
      std::abort();
    }
    client = std::make_unique<PluginClient>(sockets + "/" + registration->endpoint());
    client->Watch();
    auto first = client->WaitForList([](const auto& l) { return l.devices_size() == 8; }, 10s);
    if (!first) std::abort();
    list = *first;
  }
};

// 64 GPUs: 2 NUMA nodes x 4 root ports x 4 PCIe switches x 2 GPUs.
inventory::Inventory SyntheticInventory(int gpus) {
  inventory::Inventory inv;
  inv.root = "/nonexistent-synthetic-host";
  for (int i = 0; i < gpus; ++i) {
    inventory::PciDevice d;
    char pci[16], uuid[64], sw[16], root[16];
    std::snprintf(pci, sizeof pci, "0000:%02x:00.0", 0x10 + i);
    std::snprintf(uuid, sizeof uuid, "GPU-00000000-0000-0000-0000-%012d", i);
    std::snprintf(sw, sizeof sw, "0000:%02x:00.0", 0x80 + i / 2);
    std::snprintf(root, sizeof root, "0000:%02x:01.0", 0xc0 + i / 8);
    d.pci_address = pci;
    d.vendor_id = 0x10de;
    d.device_id = 0x2330;
    d.class_code = 0x030200;
    d.kind = inventory::DeviceKind::kGpu;
    d.model = "GH100 [H100 SXM5 80GB]";
    d.driver = "nvidia";
    d.numa_node = i / (gpus / 2);
    d.upstream_bridges = {sw, root};
    d.gpu_uuid = uuid;
    d.nvidia_minor = i;
    inv.devices.push_back(std::move(d));
  }
  return inv;
}

}  // namespace

int main() {
  std::printf("deviceplugin bench; load average at start: %s\n", LoadAverage().c_str());
  const int kCalls = 10000;

  {
    Node node("");
    auto ids = Ids(node.list);
    TimeAllocate(*node.client, ids, 200);  // warm-up: connection, page faults
    auto us = TimeAllocate(*node.client, ids, kCalls);
    Print("Allocate, 1 GPU, cdi-cri (real process, unix socket)", us.size(), Summarize(us));
    // The floor: an RPC that does no work (GetDevicePluginOptions) on the same connection.
    std::vector<double> empty;
    for (int i = 0; i < kCalls; ++i) {
      grpc::ClientContext context;
      v1beta1::Empty request;
      v1beta1::DevicePluginOptions options;
      auto start = Clock::now();
      if (!node.client->stub().GetDevicePluginOptions(&context, request, &options).ok())
        std::abort();
      empty.push_back(Micros(start, Clock::now()));
    }
    Print("GetDevicePluginOptions (gRPC round trip, no work)", empty.size(), Summarize(empty));
    us = TimePreferred(*node.client, ids, 2, 1000);
    Print("GetPreferredAllocation 8 GPUs, size 2, no table", us.size(), Summarize(us));
    us = TimePreferred(*node.client, ids, 4, 1000);
    Print("GetPreferredAllocation 8 GPUs, size 4, no table", us.size(), Summarize(us));

    // Health: a device node disappears and comes back; time until the stream shows it.
    std::vector<double> down, up;
    std::string node_path = node.host.root() + "/dev/nvidia5";
    std::string aside = node.host.root() + "/nvidia5.away";
    for (int round = 0; round < 10; ++round) {
      auto start = Clock::now();
      std::filesystem::rename(node_path, aside);
      if (!node.client->WaitForList(
              [&](const auto& l) { return testing::HealthOf(l, ids[5]) == "Unhealthy"; }, 5s)) {
        std::abort();
      }
      down.push_back(Micros(start, node.client->LastListTime()) / 1000);
      start = Clock::now();
      std::filesystem::rename(aside, node_path);
      if (!node.client->WaitForList(
              [&](const auto& l) { return testing::HealthOf(l, ids[5]) == "Healthy"; }, 5s)) {
        std::abort();
      }
      up.push_back(Micros(start, node.client->LastListTime()) / 1000);
    }
    Print("device node removed -> ListAndWatch Unhealthy", down.size(), Summarize(down), "ms");
    Print("device node restored -> ListAndWatch Healthy", up.size(), Summarize(up), "ms");
    // sysfs entry (polled: sysfs raises no inotify events for kernel-made changes).
    std::vector<double> sysfs;
    std::string entry = node.host.root() + "/sys/bus/pci/devices/0000:ab:00.0";
    std::string entry_aside = node.host.root() + "/sys/bus/pci/gone-ab";
    for (int round = 0; round < 10; ++round) {
      auto start = Clock::now();
      std::filesystem::rename(entry, entry_aside);
      if (!node.client->WaitForList(
              [&](const auto& l) { return testing::HealthOf(l, ids[5]) == "Unhealthy"; }, 5s)) {
        std::abort();
      }
      sysfs.push_back(Micros(start, node.client->LastListTime()) / 1000);
      std::filesystem::rename(entry_aside, entry);
      node.client->WaitForList(
          [&](const auto& l) { return testing::HealthOf(l, ids[5]) == "Healthy"; }, 5s);
    }
    Print("sysfs entry removed -> ListAndWatch Unhealthy (200 ms poll)", sysfs.size(),
          Summarize(sysfs), "ms");
    std::printf("%-58s %ld kB\n", "plugin peak RSS (VmHWM), cdi-cri", node.plugin->PeakRssKb());
  }

  {
    Node node("deviceListStrategy: [cdi-cri, cdi-annotations, device-specs, envvar]\n");
    auto ids = Ids(node.list);
    TimeAllocate(*node.client, ids, 200);
    auto us = TimeAllocate(*node.client, ids, kCalls);
    Print("Allocate, 1 GPU, all four strategies", us.size(), Summarize(us));
    std::vector<double> eight;
    for (int i = 0; i < 1000; ++i) {
      v1beta1::AllocateResponse response;
      auto start = Clock::now();
      if (!node.client->Allocate({ids}, &response).ok()) std::abort();
      eight.push_back(Micros(start, Clock::now()));
    }
    Print("Allocate, 8 GPUs, all four strategies", eight.size(), Summarize(eight));
    std::printf("%-58s %ld kB\n", "plugin peak RSS (VmHWM), all strategies",
                node.plugin->PeakRssKb());
  }

  {
    Node node(
        "topology:\n  partitionTable: hgx-h100-8gpu\n  modules: {1: '0000:3a:00.0', 2: "
        "'0000:5d:00.0', 3: '0000:18:00.0', 4: '0000:2a:00.0', 5: '0000:db:00.0', 6: "
        "'0000:ba:00.0', 7: '0000:ab:00.0', 8: '0000:9a:00.0'}\n");
    auto ids = Ids(node.list);
    TimePreferred(*node.client, ids, 2, 100);
    auto us = TimePreferred(*node.client, ids, 2, 1000);
    Print("GetPreferredAllocation 8 GPUs, size 2, HGX partition table", us.size(), Summarize(us));
    us = TimePreferred(*node.client, ids, 4, 1000);
    Print("GetPreferredAllocation 8 GPUs, size 4, HGX partition table", us.size(), Summarize(us));
  }

  {
    // 64 GPUs: the same ResourceServer in-process over a synthetic inventory, real socket.
    testing::TempDir dir;
    deviceplugin::Config config;
    auto build_start = Clock::now();
    auto manager = deviceplugin::ResourceManager::Create(SyntheticInventory(64), config);
    if (!manager) std::abort();
    double build_ms = Micros(build_start, Clock::now()) / 1000;
    std::shared_ptr<const deviceplugin::ResourceManager> shared = std::move(*manager);
    const auto& resource = shared->resources().at(0);
    std::string socket = dir.path() + "/plugin.sock";
    auto server = deviceplugin::ResourceServer::Start(shared, &resource, socket, 2);
    if (!server) std::abort();
    PluginClient client(socket);
    std::printf("%-58s %.1f ms\n", "64-GPU resource build (chooser precompute)", build_ms);
    for (int size : {2, 8, 32, 63}) {
      TimePreferred(client, resource.ids, size, 5);
      auto us = TimePreferred(client, resource.ids, size, 200);
      std::string what = "GetPreferredAllocation 64 GPUs, size " + std::to_string(size);
      Print(what.c_str(), us.size(), Summarize(us));
    }
  }
  {
    // The same work without gRPC or a socket: what the plugin itself spends per call.
    inventory::ReadOptions read;
    read.root = testing::MaterializeHost("hgx-h100-dgx");
    auto inv = inventory::ReadInventory(read);
    if (!inv) std::abort();
    deviceplugin::Config config;
    config.device_list_strategy = {
        deviceplugin::ListStrategy::kCdiCri, deviceplugin::ListStrategy::kCdiAnnotations,
        deviceplugin::ListStrategy::kDeviceSpecs, deviceplugin::ListStrategy::kEnvvar};
    auto manager = deviceplugin::ResourceManager::Create(*inv, config);
    if (!manager) std::abort();
    const auto& resource = (*manager)->resources().at(0);
    std::vector<double> us;
    for (int i = 0; i < kCalls; ++i) {
      auto start = Clock::now();
      auto out = (*manager)->Allocate(resource, {{resource.ids[i % 8]}});
      us.push_back(Micros(start, Clock::now()));
      if (!out) std::abort();
    }
    Print("in-process Allocate, 1 GPU, all four strategies", us.size(), Summarize(us));
    auto synthetic = deviceplugin::ResourceManager::Create(SyntheticInventory(64), {});
    if (!synthetic) std::abort();
    const auto& gpus = (*synthetic)->resources().at(0);
    for (int size : {8, 32}) {
      us.clear();
      for (int i = 0; i < 200; ++i) {
        deviceplugin::PreferredRequest request{gpus.ids, {gpus.ids[i % 64]}, size};
        auto start = Clock::now();
        auto out = (*synthetic)->Preferred(gpus, request);
        us.push_back(Micros(start, Clock::now()));
        if (!out) std::abort();
      }
      std::string what = "in-process GetPreferredAllocation 64 GPUs, size " + std::to_string(size);
      Print(what.c_str(), us.size(), Summarize(us));
    }
  }
  std::printf("load average at end: %s\n", LoadAverage().c_str());
  return 0;
}
