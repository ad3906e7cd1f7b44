// Dotted versions and the nvproxy driver list.
#include <cctype>
#include <sstream>

#include "runtimes/runtimes.h"

namespace tessera::runtimes {

std::optional<Version> Version::Parse(std::string_view text) {
  // The first run of digits that contains at least one dot: "podman version 4.3.1",
  // "containerd github.com/containerd/containerd/v2 v2.0.0 abc", "6.1.0-18-amd64".
  for (size_t i = 0; i < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) continue;
    Version v;
    size_t j = i;
    bool ok = true;
    while (true) {
      size_t start = j;
      long value = 0;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) {
        value = value * 10 + (text[j] - '0');
        if (value > 1000000000) ok = false;
        ++j;
      }
      if (j == start) break;
      v.parts.push_back(int(value));
      if (j + 1 < text.size() && text[j] == '.' &&
          std::isdigit(static_cast<unsigned char>(text[j + 1]))) {
        ++j;
        continue;
      }
      break;
    }
    if (ok && v.parts.size() >= 2) return v;
    i = j;
  }
  return std::nullopt;
}

int Version::Compare(const Version& other) const {
  size_t n = std::max(parts.size(), other.parts.size());
  for (size_t i = 0; i < n; ++i) {
    int a = i < parts.size() ? parts[i] : 0;
    int b = i < other.parts.size() ? other.parts[i] : 0;
    if (a != b) return a < b ? -1 : 1;
  }
  return 0;
}

std::string Version::ToString() const {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i)
    out += (i ? "." : "") + std::to_string(parts[i]);
  return out;
}

bool NvproxyDrivers::Supports(const std::string& driver_version) const {
  for (const auto& v : versions) {
    if (v == driver_version) return true;
  }
  return false;
}

NvproxyDrivers ParseNvproxyDrivers(std::string_view text) {
  NvproxyDrivers drivers;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
      line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("source:", 0) == 0) {
      drivers.source = line.substr(7);
      while (!drivers.source.empty() && drivers.source[0] == ' ')
        drivers.source.erase(0, 1);
      continue;
    }
    drivers.versions.push_back(line);
  }
  return drivers;
}

std::optional<std::string> MaxCdiVersionForPodman(const Version& podman) {
  // From the container-device-interface library each podman release vendors: CDI support
  // arrived in 4.1 (CDI lib 0.3-0.5: specs up to 0.5.0), 4.6 vendors 0.6 (0.6.0), 5.1 vendors
  // 0.7 (0.7.0). A spec newer than the library is rejected ("unsupported version").
  if (podman.Compare(Version{{4, 1}}) < 0) return std::nullopt;
  if (podman.Compare(Version{{4, 6}}) < 0) return std::string("0.5.0");
  if (podman.Compare(Version{{5, 1}}) < 0) return std::string("0.6.0");
  return std::string("0.7.0");
}

}  // namespace tessera::runtimes
