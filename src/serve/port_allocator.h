// Host ports for published container ports (embedded mode): which port of the operator's range
// (--publish-ports) each container gets. Pure: no sockets; whether the host itself has a port
// taken is asked through the `usable` callback (host_ports.h answers it with a bind test).
//
// A container holds its ports from placement until it has ended, and a port is held by one
// container at a time. The holdings are rebuilt after a restart from the records (a running
// container's published host ports are stored with its placement), so this holds no state of
// its own that needs to survive.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"

namespace tessera::serve {

// --publish-address and --publish-ports.
struct PublishOptions {
  std::string address = "127.0.0.1";
  int low = 30000;
  int high = 32767;
  // --publish-ports-per-tenancy: the host ports one tenancy's containers may hold at once, so no
  // tenancy can take the whole range from the others (0: no limit).
  int per_tenancy = 64;
};

// "LOW-HIGH" with 1024 <= LOW <= HIGH <= 65535 (ports below 1024 are the host's services').
// InvalidArgument naming the flag.
Result<std::pair<int, int>> ParsePortRange(std::string_view text);
// --publish-address (an IPv4 or IPv6 address of this host, no name: podman's --publish takes
// an address) and --publish-ports together.
Result<PublishOptions> ParsePublishFlags(std::string_view address, std::string_view range);

class PortAllocator {
 public:
  PortAllocator(int low, int high);

  // `count` ports for `owner` (in addition to what it holds), lowest free first, skipping those
  // `usable` refuses (asked once per candidate, in increasing order). Unavailable (nothing
  // taken) when the range has fewer usable free ports.
  Result<std::vector<int>> Take(const std::string& owner, size_t count,
                                const std::function<bool(int port)>& usable);
  // Records that `owner` holds `port` (a running container's port, after a restart). A port out
  // of the range (the range changed) is held too but never handed out again when released.
  // False when another owner holds it already.
  bool Hold(const std::string& owner, int port);
  // Everything `owner` holds is free again.
  void Release(const std::string& owner);

  size_t held() const { return holder_.size(); }
  size_t free() const { return free_.size(); }
  int low() const { return low_; }
  int high() const { return high_; }
  // Who holds `port` (empty: nobody).
  std::string HolderOf(int port) const;

 private:
  int low_;
  int high_;
  std::set<int> free_;                                       // of the range, increasing
  std::unordered_map<int, std::string> holder_;              // port -> owner
  std::unordered_map<std::string, std::vector<int>> owned_;  // owner -> ports
};

}  // namespace tessera::serve
