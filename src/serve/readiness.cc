// Readiness probes of running containers (see readiness.h).
#include "serve/readiness.h"

#include <map>
#include <string>
#include <vector>

#include "serve/http_probe.h"

namespace tessera::serve {
namespace {

struct Probe {
  std::string id;
  HttpProbeTarget target;  // port 0: no published port to probe (yet)
};

// mu held: what to ask about.
std::vector<Probe> ProbesLocked(const Model& model) {
  std::vector<Probe> probes;
  for (const auto& id : model.probed) {
    auto it = model.containers.find(id);
    if (it == model.containers.end()) continue;
    const fleet::ContainerRecord& container = it->second;
    // Without a probe of its own it is asked about only for where its ports are (Exposed).
    Probe probe{id, {"", 0, container.spec.ready ? container.spec.ready->path : "/"}};
    for (const auto& port : container.published)
      if (container.spec.ready && port.container_port == container.spec.ready->port &&
          port.protocol == "tcp") {
        probe.target.address = port.host_address;
        probe.target.port = port.host_port;
      }
    probes.push_back(std::move(probe));
  }
  return probes;
}

}  // namespace

Readiness::Readiness(Model& model, backends::ContainerBackend& backend)
    : model_(model), backend_(backend) {}

void Readiness::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Readiness::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Readiness::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    Pass();
    lock.lock();
    wake_.wait_for(lock, model_.options.readiness_interval, [this] { return stopping_; });
  }
}

void Readiness::Pass() {
  std::vector<Probe> probes;
  {
    std::lock_guard lock(model_.mu);
    probes = ProbesLocked(model_);
  }
  if (probes.empty()) return;
  // The backend first: one that knows readiness itself answers Exposed; the rest are probed.
  std::map<std::string, bool> verdicts;
  std::map<std::string, std::vector<fleet::PublishedPort>> exposed;
  std::vector<HttpProbeTarget> targets;
  std::vector<std::string> probed_ids;
  for (auto& probe : probes) {
    if (auto exposure = backend_.Exposed(probe.id); exposure) {
      verdicts[probe.id] = exposure->ready.value_or(false);
      if (!exposure->ports.empty()) exposed[probe.id] = std::move(exposure->ports);
      continue;
    }
    if (probe.target.port <= 0 || probe.target.address.empty()) {
      verdicts[probe.id] = false;
      continue;
    }
    targets.push_back(std::move(probe.target));
    probed_ids.push_back(probe.id);
  }
  const auto answers = ProbeHttp(targets, model_.options.readiness_timeout);
  for (size_t i = 0; i < probed_ids.size(); ++i)
    verdicts[probed_ids[i]] = answers[i];
  std::lock_guard lock(model_.mu);
  for (const auto& [id, ready] : verdicts) {
    // Only a container still probed: one that ended meanwhile keeps no verdict.
    if (!model_.probed.count(id)) continue;
    auto& container = model_.containers.at(id);
    if (container.spec.ready) container.ready = ready;
    if (auto ports = exposed.find(id); ports != exposed.end()) container.published = ports->second;
  }
}

}  // namespace tessera::serve
