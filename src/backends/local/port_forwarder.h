// Published ports of the local backend: the service's listener on HOST_ADDR:HOST_PORT for each
// published TCP port, every connection carried to the container's address on its tenancy
// network from inside the container's own network namespace.
//
// Why not `podman run --publish`: a tenancy network is a podman `--internal` network (CNI
// bridge with isGateway false: the host has no address on it and no route to it), so the DNAT
// rule that --publish installs (CNI portmap) sends the packets out of the default route instead
// of into the bridge (measured with podman 4.3.1/CNI on Debian 12: the connection is answered
// by whatever the default route leads to). A socket made in the container's network namespace
// reaches the container without crossing the bridge: the tenancy firewall and --internal stay
// as they are, and the published address is the only way in from outside the tenancy.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "fleet/fleet.h"

namespace tessera::backends {

// Where a running container is reached: the PID whose network namespace it lives in, and its
// address there (on its tenancy network).
struct ForwardTarget {
  int pid = 0;
  std::string address;
};

class PortForwarder {
 public:
  // `resolve` says where container `id` is now (an error while it is not running); asked on a
  // connection when nothing is known yet, or when what was known stopped working. It may block.
  using Resolve = std::function<Result<ForwardTarget>(const std::string& id)>;
  explicit PortForwarder(Resolve resolve);
  ~PortForwarder();
  PortForwarder(const PortForwarder&) = delete;
  PortForwarder& operator=(const PortForwarder&) = delete;

  // Listens on every TCP port's host_address:host_port for container `id` (what it had
  // before is replaced). Fails, listening on none, when a host port cannot be bound.
  Status Add(const std::string& id, const std::vector<fleet::PublishedPort>& ports);
  // Stops listening for `id` and closes its connections.
  void Remove(const std::string& id);
  // How many containers have listeners.
  size_t size() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// "ADDR:PORT:CONTAINER_PORT/PROTO" per port, comma-separated (the label that carries them
// across a restart of the service), and back.
std::string PortsToLabel(const std::vector<fleet::PublishedPort>& ports);
std::vector<fleet::PublishedPort> PortsFromLabel(const std::string& label);

}  // namespace tessera::backends
