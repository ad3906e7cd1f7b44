// The local backend: podman on this host, GPUs as CDI device names, isolation as the OCI
// runtime (runc -> runc, gvisor -> runsc, kata -> a Kata runtime when installed). runsc runs
// with --runtime-flag network=host on a network (gVisor uses podman's network namespace) or
// network=none; GPU containers under gVisor need a runsc with nvproxy, checked once at creation.
//
// podman is run without a shell. It inherits the environment, so CONTAINERS_CONF applies to every
// call. At start the backend checks that podman can start a runc container (start_check.h);
// where podman's default ulimits cannot be set, every container gets ulimits that can.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"

namespace tessera::backends {

struct LocalOptions {
  std::string podman = "podman";
  // Label value that marks this service's containers (tessera.instance=<instance>), so two
  // services on one host (tests) never adopt each other's containers.
  std::string instance = "default";
  // OCI runtimes per isolation: names podman resolves, or absolute paths. Empty kata_runtime:
  // look for kata-runtime / kata-qemu in PATH.
  std::string runc_runtime = "runc";
  std::string gvisor_runtime = "runsc";
  std::string kata_runtime;
  std::vector<std::string> extra_run_args;  // e.g. --env-file, never --network (see below)
  // One --internal podman network per tenancy (tessera-t-<name>), kept apart by host firewall
  // rules (docs/tenancy.md); a container joins its tenancy's network or none. Off: containers
  // that ask for their tenancy's network get podman's default network (not isolated).
  bool tenant_networks = true;
  bool tenant_firewall = true;  // the iptables rules; off on hosts without iptables
  std::string iptables = "iptables";
  // Where each container's log (podman's k8s-file driver, <id>.log) and ID file (<id>.cid)
  // live; the service's data dir. Logs are read from here without a podman call. Empty: podman
  // keeps the logs where it likes and `podman logs` reads them.
  std::string state_dir;
  // Each such log's cap in bytes (podman --log-opt max-size; 0: none). conmon (2.1 on Debian 12)
  // empties the file when the next line would pass it and goes on writing from the start, so a
  // container that prints without end holds at most this much, and its log keeps the latest
  // output (between nothing and the cap of it). No effect without state_dir.
  uint64_t log_max_bytes = 0;
};

// The text of a log in the CRI/k8s-file format podman writes
// ("<RFC 3339 time> <stdout|stderr> <F|P> <text>" per line; P: a partial line continued by the
// next). Lines not in that format are kept as they are.
std::string TextOfCriLog(std::string_view log);
// The text of such a log open at `fd` from byte `offset` on, whole records only, at most
// `max_bytes` of them: LogPart::end is the byte after the last whole record. Cut (and read from
// the start) when `offset` lies past the end or not at a record's start (the log was emptied at
// its cap and written again since); cut to the latest `max_bytes` when it lies further back.
Result<LogPart> ReadCriLogFrom(int fd, uint64_t offset, size_t max_bytes);

std::unique_ptr<ContainerBackend> CreateLocalBackend(LocalOptions options);

// A backend that starts nothing: every container "runs" and exits 0 at once. For benchmarks of
// the service itself (the container start is out of the measured path) and for API tests.
std::unique_ptr<ContainerBackend> CreateNullBackend();

}  // namespace tessera::backends
