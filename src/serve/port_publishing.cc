// Host ports for the containers a placement pass placed (see port_publishing.h).
#include "serve/port_publishing.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <unordered_map>
#include <variant>

#include "serve/host_ports.h"

namespace tessera::serve {
namespace {

using fleet::ContainerRecord;

// The pass's latest copy of `container` in `out` becomes the record as it is now.
void UpdateMutation(const ContainerRecord& container, std::vector<fleet::Mutation>& out) {
  for (auto it = out.rbegin(); it != out.rend(); ++it) {
    auto* copy = std::get_if<ContainerRecord>(&*it);
    if (copy && copy->id == container.id) {
      *copy = container;
      return;
    }
  }
  out.push_back(container);
}

Status TakeHostPorts(Model& model, ContainerRecord& container) {
  const std::string& address = model.options.publish.address;
  // A port number is held for both protocols, so one test of the protocol each wants.
  size_t next = 0;
  auto usable = [&address, &container, &next](int port) {
    return HostPortFree(address, port, container.spec.ports[next].protocol);
  };
  std::vector<int> taken;
  for (next = 0; next < container.spec.ports.size(); ++next) {
    auto port = model.ports.Take(container.id, 1, usable);
    if (!port) {
      model.ports.Release(container.id);
      return port.error();
    }
    taken.push_back(port->front());
  }
  for (size_t i = 0; i < taken.size(); ++i) {
    container.published[i].host_address = address;
    container.published[i].host_port = taken[i];
  }
  return Ok();
}

// Host ports each tenancy's containers hold now (by incarnation), for the per-tenancy limit.
std::unordered_map<std::string, size_t> HeldByTenancy(const Model& model) {
  std::unordered_map<std::string, size_t> held;
  for (const auto& [id, container] : model.containers) {
    const bool live = container.state == fleet::ContainerState::kRunning ||
                      (container.state == fleet::ContainerState::kPending && container.started);
    if (!live) continue;
    for (const auto& port : container.published)
      if (port.host_port > 0) ++held[container.tenancy_uid];
  }
  return held;
}

// Unavailable naming the limit when `container`'s ports would take its tenancy past it.
Status CheckTenancyLimit(const Model& model, const ContainerRecord& container,
                         std::optional<std::unordered_map<std::string, size_t>>& held) {
  const int limit = model.options.publish.per_tenancy;
  if (limit <= 0) return Ok();
  if (!held) held = HeldByTenancy(model);
  const size_t holds = (*held)[container.tenancy_uid];
  if (holds + container.spec.ports.size() <= static_cast<size_t>(limit)) return Ok();
  return Unavailable("tenancy " + container.spec.tenancy + " holds " + std::to_string(holds) +
                     " of its " + std::to_string(limit) +
                     " published host ports (--publish-ports-per-tenancy)");
}

}  // namespace

void PublishPortsLocked(Model& model, const std::vector<std::string>& placed,
                        std::vector<fleet::Mutation>& out) {
  std::optional<std::unordered_map<std::string, size_t>> held;  // built at the first need
  for (const auto& id : placed) {
    auto it = model.containers.find(id);
    if (it == model.containers.end()) continue;
    ContainerRecord& container = it->second;
    if (container.spec.ports.empty() || !container.published.empty() ||
        container.state != fleet::ContainerState::kPending || !container.started)
      continue;
    for (const auto& request : container.spec.ports)
      container.published.push_back(
          fleet::PublishedPort{request.container_port, request.protocol, request.name, "", 0});
    // Fleet mode: the backend chooses where they are reached (Exposed).
    if (!model.options.fleet) {
      Status taken = CheckTenancyLimit(model, container, held);
      if (taken) taken = TakeHostPorts(model, container);
      if (!taken) {
        container.published.clear();
        spdlog::warn("container {}: {}", container.id, taken.error().message);
        model.FinishContainer(
            container,
            backends::ExitInfo{std::nullopt, true, "not started: " + taken.error().message}, out);
        continue;
      }
      if (held) (*held)[container.tenancy_uid] += container.spec.ports.size();
    }
    UpdateMutation(container, out);
  }
}

}  // namespace tessera::serve
