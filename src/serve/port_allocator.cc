// Host ports for published container ports (see port_allocator.h).
#include "serve/port_allocator.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>

#include "common/untrusted_text.h"

namespace tessera::serve {

Result<std::pair<int, int>> ParsePortRange(std::string_view text) {
  auto bad = [text](const std::string& why) {
    return InvalidArgument("--publish-ports " + Excerpt(text) + ": " + why);
  };
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos) return bad("want LOW-HIGH, such as 30000-32767");
  auto number = [](std::string_view part, int& out) {
    if (part.empty() || part.size() > 5) return false;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), out);
    return ec == std::errc() && end == part.data() + part.size();
  };
  int low = 0, high = 0;
  if (!number(text.substr(0, dash), low) || !number(text.substr(dash + 1), high))
    return bad("want LOW-HIGH, such as 30000-32767");
  if (low < 1024 || high > 65535) return bad("ports must be within 1024..65535");
  if (low > high) return bad("LOW must not be above HIGH");
  return std::make_pair(low, high);
}

Result<PublishOptions> ParsePublishFlags(std::string_view address, std::string_view range) {
  const std::string text(address);
  unsigned char bytes[sizeof(in6_addr)];
  if (inet_pton(AF_INET, text.c_str(), bytes) != 1 && inet_pton(AF_INET6, text.c_str(), bytes) != 1)
    return InvalidArgument("--publish-address " + Excerpt(address) +
                           ": want an IPv4 or IPv6 address, such as 127.0.0.1");
  auto ports = ParsePortRange(range);
  if (!ports) return ports.error();
  return PublishOptions{text, ports->first, ports->second};
}

PortAllocator::PortAllocator(int low, int high) : low_(low), high_(high) {
  for (int port = low; port <= high; ++port)
    free_.insert(free_.end(), port);
}

Result<std::vector<int>> PortAllocator::Take(const std::string& owner, size_t count,
                                             const std::function<bool(int port)>& usable) {
  std::vector<int> chosen;
  for (auto it = free_.begin(); it != free_.end() && chosen.size() < count; ++it)
    if (!usable || usable(*it)) chosen.push_back(*it);
  if (chosen.size() < count)
    return Unavailable("no free host port: " + std::to_string(free_.size()) +
                       " of --publish-ports " + std::to_string(low_) + "-" + std::to_string(high_) +
                       " are free, " + std::to_string(chosen.size()) + " of them usable, " +
                       std::to_string(count) + " wanted");
  auto& owned = owned_[owner];
  for (int port : chosen) {
    free_.erase(port);
    holder_[port] = owner;
    owned.push_back(port);
  }
  return chosen;
}

bool PortAllocator::Hold(const std::string& owner, int port) {
  auto held = holder_.find(port);
  if (held != holder_.end()) return held->second == owner;
  holder_[port] = owner;
  free_.erase(port);
  owned_[owner].push_back(port);
  return true;
}

void PortAllocator::Release(const std::string& owner) {
  auto owned = owned_.find(owner);
  if (owned == owned_.end()) return;
  for (int port : owned->second) {
    holder_.erase(port);
    if (port >= low_ && port <= high_) free_.insert(port);
  }
  owned_.erase(owned);
}

std::string PortAllocator::HolderOf(int port) const {
  auto held = holder_.find(port);
  return held == holder_.end() ? std::string() : held->second;
}

}  // namespace tessera::serve
