// Whether this host has a port taken by another program (the port allocator's `usable`): a
// bind() test of the publish address, the one way to know without racing the kernel's own
// bookkeeping. podman reserves the host ports it publishes by binding them itself (rootful:
// conmon holds the sockets), so a port a container publishes tests taken as well.
#pragma once

#include <string>

namespace tessera::serve {

// True when a socket of `protocol` ("tcp" or "udp") can bind `address`:`port` now (TCP with
// SO_REUSEADDR, as podman binds: a connection in TIME_WAIT does not hold the port). False when
// the address is no address of this host or the bind fails for any reason.
bool HostPortFree(const std::string& address, int port, const std::string& protocol);

}  // namespace tessera::serve
