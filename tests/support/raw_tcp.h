// Plain TCP clients for tests of servers that must survive misbehaving peers: connections that
// send nothing, or a byte at a time, and requests written by hand. Every wait has a bound, so a
// server that hangs fails the test instead of hanging it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tessera::testing {

// A connected TCP socket to 127.0.0.1:port, close-on-exec; -1 on failure. The caller closes it.
int ConnectLoopback(uint16_t port);

// Writes `request` on a new connection and reads until the server closes it or `timeout`
// passes. `*closed` says whether the server closed it (the whole answer was read).
std::string RawExchange(uint16_t port, const std::string& request,
                        std::chrono::milliseconds timeout, bool* closed = nullptr);

// The status code of an HTTP/1.1 answer's first line; 0 when there is none.
int StatusOf(const std::string& answer);
// The body: what follows the blank line after the header.
std::string BodyOf(const std::string& answer);

// Whether the peer closes `fd` (read gives EOF or a reset) within `timeout`; bytes it sends
// meanwhile are read and dropped.
bool ClosedByPeerWithin(int fd, std::chrono::milliseconds timeout);

}  // namespace tessera::testing
