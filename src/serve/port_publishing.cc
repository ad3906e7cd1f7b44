// Host ports for the containers a placement pass placed (see port_publishing.h).
#include "serve/port_publishing.h"

#include <spdlog/spdlog.h>

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

}  // namespace

void PublishPortsLocked(Model& model, const std::vector<std::string>& placed,
                        std::vector<fleet::Mutation>& out) {
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
      if (auto taken = TakeHostPorts(model, container); !taken) {
        container.published.clear();
        spdlog::warn("container {}: {}", container.id, taken.error().message);
        model.FinishContainer(
            container,
            backends::ExitInfo{std::nullopt, true, "not started: " + taken.error().message}, out);
        continue;
      }
    }
    UpdateMutation(container, out);
  }
}

}  // namespace tessera::serve
