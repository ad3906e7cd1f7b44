// The node agent's telemetry: Pods of this node, the collector loop, durable per-lease measured
// use in GpuLease status, and the /metrics endpoint. See node_telemetry.h.
#include "nodeagent/node_telemetry.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>

namespace tessera::k8s {
namespace {

constexpr size_t kMaxName = 253;

std::string Text(const Json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "";
  const auto& text = it->get_ref<const std::string&>();
  return text.size() > kMaxName ? "" : text;
}

const Json& Member(const Json& object, const char* key) {
  static const Json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool HoldsGpus(const Json& lease) {
  const std::string state = Text(Member(lease, "status"), "state");
  return state.empty() || state == "reserved" || state == "active";
}

double NonNegative(const Json& value) {
  return value.is_number() && value.get<double>() > 0 ? value.get<double>() : 0.0;
}

uint64_t Count(const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() > 0)
    return static_cast<uint64_t>(value.get<int64_t>());
  return 0;
}

}  // namespace

std::optional<NodePod> NodePodOf(const Json& pod) {
  const Json& metadata = Member(pod, "metadata");
  NodePod out;
  out.uid = Text(metadata, "uid");
  out.ns = Text(metadata, "namespace");
  out.name = Text(metadata, "name");
  if (out.uid.empty() || out.name.empty()) return std::nullopt;
  const Json& containers = Member(Member(pod, "spec"), "containers");
  if (containers.is_array() && !containers.empty()) out.container = Text(containers[0], "name");
  out.phase = Text(Member(pod, "status"), "phase");
  return out;
}

telemetry::Directory NodeDirectory(const std::map<std::string, Json>& leases,
                                   const std::map<std::string, NodePod>& pods) {
  // "<namespace>/<name>" -> the lease holding GPUs for that Pod.
  std::map<std::string, const std::pair<const std::string, Json>*> lease_of_pod;
  for (const auto& entry : leases) {
    if (!HoldsGpus(entry.second)) continue;
    const Json& ref = Member(Member(entry.second, "spec"), "podRef");
    lease_of_pod[Text(ref, "namespace") + "/" + Text(ref, "name")] = &entry;
  }
  telemetry::Directory directory;
  for (const auto& [uid, pod] : pods) {
    telemetry::Holder holder;
    holder.pod = pod.name;
    holder.namespace_ = pod.ns;
    holder.container = pod.container;
    holder.pod_uid = pod.uid;
    holder.key = "pod:" + pod.ns + "/" + pod.name;
    auto leased = lease_of_pod.find(pod.ns + "/" + pod.name);
    if (leased != lease_of_pod.end()) {
      const auto& [name, lease] = *leased->second;
      holder.key = name;
      const Json& spec = Member(lease, "spec");
      holder.tenancy = Text(spec, "tenancy");
      // The GPUs kubelet gave the Pod where the node agent learnt them (device plugin), else
      // the lease's.
      const Json& allocated = Member(Member(lease, "status"), "allocatedDevices");
      const Json& gpus =
          allocated.is_array() && !allocated.empty() ? allocated : Member(spec, "gpuIds");
      if (gpus.is_array())
        for (const auto& gpu : gpus)
          if (gpu.is_string() && gpu.get_ref<const std::string&>().size() <= kMaxName)
            holder.gpus[gpu.get<std::string>()] = 1.0;
    }
    directory.holders.push_back(std::move(holder));
  }
  return directory;
}

LeaseMeasured MeasuredOfLease(const Json& lease) {
  LeaseMeasured out;
  const Json& measured = Member(Member(lease, "status"), "measured");
  if (!measured.is_object()) return out;
  out.total.sm_seconds = NonNegative(Member(measured, "smSeconds"));
  out.total.memory_gib_seconds = NonNegative(Member(measured, "memoryGibSeconds"));
  out.total.energy_joules = NonNegative(Member(measured, "energyJoules"));
  const Json& cursors = Member(measured, "cursors");
  if (cursors.is_object()) {
    for (const auto& [pci, cursor] : cursors.items()) {
      if (pci.size() > kMaxName || !cursor.is_object() || out.cursors.size() >= 64) continue;
      out.cursors[pci] = {Count(Member(cursor, "sampleUs")), Count(Member(cursor, "energyMj")),
                          static_cast<int64_t>(Count(Member(cursor, "sampledMs")))};
    }
  }
  return out;
}

Json MeasuredPatch(const LeaseMeasured& measured, int64_t now_ms) {
  Json cursors = Json::object();
  for (const auto& [pci, cursor] : measured.cursors)
    cursors[pci] = {{"sampleUs", cursor.sample_us},
                    {"energyMj", cursor.energy_mj},
                    {"sampledMs", cursor.sampled_ms}};
  Json gauges = Json::object();
  for (const auto& [pci, g] : measured.gauges) {
    Json gauge = {{"memoryUsed", g.memory_used},
                  {"memoryTotal", g.memory_total},
                  {"powerWatts", g.power_watts}};
    if (g.util_percent) gauge["utilPercent"] = *g.util_percent;
    gauges[pci] = std::move(gauge);
  }
  return {{"status",
           {{"measured",
             {{"smSeconds", measured.total.sm_seconds},
              {"memoryGibSeconds", measured.total.memory_gib_seconds},
              {"energyJoules", measured.total.energy_joules},
              {"updatedMs", now_ms},
              {"cursors", std::move(cursors)},
              {"gauges", std::move(gauges)}}}}}};
}

struct NodeTelemetry::Impl {
  ClientConfig config;
  NodeTelemetryOptions options;
  LeaseSnapshot leases;
  std::mutex collector_mu;                          // guards collector and suspended
  std::unique_ptr<telemetry::Collector> collector;  // null while suspended
  bool suspended = false;
  std::unique_ptr<telemetry::MetricsEndpoint> endpoint;
  std::atomic<bool> stop{false};
  std::thread pod_watch;
  std::thread loop;
  std::mutex wake_mu;
  std::condition_variable wake;

  std::mutex mu;                        // guards everything below
  std::map<std::string, NodePod> pods;  // by UID
  bool pods_synced = false;
  telemetry::NodeMetrics metrics{{}};
  std::map<std::string, telemetry::HolderTotals> totals;  // by lease name
  std::map<std::string, LeaseMeasured> written;           // what each lease's status says
  std::set<std::string> previous_keys;                    // holders of the previous pass
  std::string last_pass_json = R"({"time_ms":0,"gpus":[]})";

  telemetry::Cursors cursors;  // loop thread only

  void WatchPods() {
    Client client(config);
    auto status = client.ListWatch(
        Resource::Pods(), "", "spec.nodeName=" + options.node,
        [this](const WatchEvent& event) {
          std::lock_guard lock(mu);
          if (event.type == "SYNC") {
            pods.clear();
            for (const auto& item : Member(event.object, "items"))
              if (auto pod = NodePodOf(item)) pods[pod->uid] = *pod;
            pods_synced = true;
          } else if (event.type == "DELETED") {
            if (auto pod = NodePodOf(event.object)) pods.erase(pod->uid);
          } else if (event.type == "ADDED" || event.type == "MODIFIED") {
            if (auto pod = NodePodOf(event.object)) pods[pod->uid] = *pod;
          }
          return !stop.load();
        },
        &stop);
    if (!status && !stop)
      std::fprintf(stderr, "tessera-lease-sync: telemetry: Pods of node %s: %s\n",
                   options.node.c_str(), status.error().message.c_str());
  }

  void Loop() {
    Client client(config);
    while (!stop) {
      {
        std::unique_lock lock(wake_mu);
        wake.wait_for(lock, options.interval, [this] { return stop.load(); });
      }
      if (stop) return;
      auto leased = leases();
      bool synced;
      {
        std::lock_guard lock(mu);
        synced = pods_synced;
      }
      if (!leased || !synced) continue;  // nothing is attributed before both have listed
      Pass(client, *leased);
    }
  }

  void Pass(Client& client, const std::map<std::string, Json>& leased) {
    telemetry::Directory directory;
    {
      std::lock_guard lock(mu);
      directory = NodeDirectory(leased, pods);
      // A lease seen for the first time since the agent started: its totals and its GPUs'
      // cursors as its status has them (what the previous agent counted).
      for (const auto& holder : directory.holders) {
        if (holder.tenancy.empty() || totals.count(holder.key)) continue;
        auto lease = leased.find(holder.key);
        LeaseMeasured stored = MeasuredOfLease(lease->second);
        totals[holder.key].total = stored.total;
        written[holder.key] = stored;
        for (const auto& [pci, cursor] : stored.cursors)
          if (holder.gpus.count(pci) && cursor.sampled_ms > cursors[pci].sampled_ms)
            cursors[pci] = cursor;
      }
    }
    const int64_t now_ms = NowMs();
    telemetry::PassResult pass;
    {
      std::lock_guard lock(collector_mu);
      if (!collector) return;  // suspended for a GPU reset, or NVML did not open again
      pass = collector->Collect(directory, cursors, now_ms);
    }
    std::vector<std::pair<std::string, LeaseMeasured>> patches;
    {
      std::lock_guard lock(mu);
      for (const auto& reading : pass.holders) {
        const auto& holder = directory.holders[reading.holder];
        if (holder.tenancy.empty()) continue;  // not a lease: never metered
        totals[holder.key].total += reading.delta;
      }
      for (const auto& holder : directory.holders) {
        if (holder.tenancy.empty()) continue;
        LeaseMeasured now{totals[holder.key].total, {}, {}};
        for (const auto& [pci, share] : holder.gpus)
          if (auto it = cursors.find(pci); it != cursors.end()) now.cursors[pci] = it->second;
        for (const auto& gpu : pass.gpus) {
          const auto& r = gpu.reading;
          if (!holder.gpus.count(r.identity.pci_address) || r.lost) continue;
          LeaseMeasured::GpuGauges& g = now.gauges[r.identity.pci_address];
          if (r.gpu_percent && !r.mig) g.util_percent = *r.gpu_percent;
          if (r.mig) g.util_percent = std::min(100.0, gpu.sm_percent);
          g.memory_used = r.memory_used.value_or(0);
          g.memory_total = r.memory_total.value_or(0);
          g.power_watts = gpu.power_watts;
        }
        const LeaseMeasured& before = written[holder.key];
        if (now.total == before.total && now.cursors == before.cursors) continue;
        patches.emplace_back(holder.key, std::move(now));
      }
      metrics.Update(pass, directory);
      last_pass_json = telemetry::PassToJson(pass, directory);
      // Leases that ended leave once their series have gone (one pass later): their counters
      // are rendered with their final value meanwhile.
      std::set<std::string> current;
      for (const auto& holder : directory.holders)
        current.insert(holder.key);
      for (auto it = totals.begin(); it != totals.end();)
        it = current.count(it->first) || previous_keys.count(it->first) ? std::next(it)
                                                                        : totals.erase(it);
      for (auto it = written.begin(); it != written.end();)
        it = totals.count(it->first) ? std::next(it) : written.erase(it);
      previous_keys = std::move(current);
    }
    for (auto& [name, measured] : patches) {
      auto patched = client.Patch(Resource::GpuLeases(), "", name, MeasuredPatch(measured, now_ms),
                                  PatchType::kMerge, "status");
      if (!patched) {
        std::fprintf(stderr, "tessera-lease-sync: telemetry: lease %s: %s\n", name.c_str(),
                     patched.error().message.c_str());
        continue;  // written again with the next pass
      }
      std::lock_guard lock(mu);
      written[name] = std::move(measured);
    }
  }

  telemetry::EndpointResponse Answer(std::string_view path) {
    std::lock_guard lock(mu);
    if (path == "/metrics") {
      std::string body = metrics.Render(totals, NowMs());
      if (options.extra_metrics) body += options.extra_metrics();
      return {200, "text/plain; version=0.0.4", std::move(body)};
    }
    if (path == "/v1/telemetry") return {200, "application/json", last_pass_json};
    if (path == "/healthz") return {200, "text/plain", "ok\n"};
    return {404, "text/plain", "not found\n"};
  }
};

NodeTelemetry::NodeTelemetry(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NodeTelemetry::~NodeTelemetry() {
  impl_->stop = true;
  impl_->wake.notify_all();
  impl_->endpoint.reset();
  if (impl_->loop.joinable()) impl_->loop.join();
  if (impl_->pod_watch.joinable()) impl_->pod_watch.join();
}

uint16_t NodeTelemetry::port() const {
  return impl_->endpoint ? impl_->endpoint->port() : 0;
}

namespace {

Result<std::unique_ptr<telemetry::Collector>> OpenCollector(const NodeTelemetryOptions& options) {
  telemetry::NvmlSourceOptions source;
  source.library = options.nvml_library;
  source.gpus = options.gpus;
  auto opened = telemetry::OpenNvmlSource(source);
  if (!opened) return opened.error();
  telemetry::CollectorOptions collector;
  collector.proc_dir = options.proc_dir;
  collector.integration.max_gap = 2 * options.interval;
  return std::make_unique<telemetry::Collector>(std::move(*opened), collector);
}

}  // namespace

void NodeTelemetry::Suspend() {
  std::lock_guard lock(impl_->collector_mu);
  impl_->suspended = true;
  impl_->collector.reset();  // the last NVML handle: nvmlShutdown
}

void NodeTelemetry::Resume() {
  std::lock_guard lock(impl_->collector_mu);
  impl_->suspended = false;
  auto opened = OpenCollector(impl_->options);
  if (!opened) {
    std::fprintf(stderr, "tessera-lease-sync: telemetry: NVML after a GPU reset: %s\n",
                 opened.error().message.c_str());
    return;
  }
  impl_->collector = std::move(*opened);
}

Result<std::unique_ptr<NodeTelemetry>> NodeTelemetry::Start(const ClientConfig& config,
                                                            NodeTelemetryOptions options,
                                                            LeaseSnapshot leases) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->leases = std::move(leases);
  if (options.hostname.empty()) options.hostname = options.node;
  auto opened = OpenCollector(options);
  if (!opened) return opened.error();
  impl->collector = std::move(*opened);
  impl->metrics = telemetry::NodeMetrics(
      {options.hostname, options.max_series, static_cast<int64_t>(options.interval.count())});
  impl->options = std::move(options);
  Impl* raw = impl.get();
  if (!raw->options.listen.empty()) {
    const auto colon = raw->options.listen.rfind(':');
    if (colon == std::string::npos)
      return InvalidArgument("--metrics-listen " + raw->options.listen + ": want HOST:PORT");
    std::string host = raw->options.listen.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
    int port = std::atoi(raw->options.listen.substr(colon + 1).c_str());
    if (port < 0 || port > 65535)
      return InvalidArgument("--metrics-listen " + raw->options.listen + ": bad port");
    telemetry::EndpointOptions endpoint_options = raw->options.endpoint;
    endpoint_options.host = host.empty() ? "0.0.0.0" : host;
    endpoint_options.port = static_cast<uint16_t>(port);
    auto endpoint = telemetry::StartMetricsEndpoint(
        std::move(endpoint_options), [raw](std::string_view path) { return raw->Answer(path); });
    if (!endpoint) return endpoint.error();
    raw->endpoint = std::move(*endpoint);
  }
  raw->pod_watch = std::thread([raw] { raw->WatchPods(); });
  raw->loop = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<NodeTelemetry>(new NodeTelemetry(std::move(impl)));
}

}  // namespace tessera::k8s
