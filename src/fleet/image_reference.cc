// Image references a tenant may submit: registry references only, in the grammar of the
// distribution project's `reference` package (the one podman, Docker and containerd accept):
//
//   reference  := name [ ":" tag ] [ "@" digest ]
//   name       := [ domain "/" ] path-component { "/" path-component }     (at most 255 bytes)
//   domain     := domain-component { "." domain-component } [ ":" port ]
//   domain-component := [A-Za-z0-9] | [A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]
//   path-component   := [a-z0-9]+ { separator [a-z0-9]+ },  separator := "." | "_" | "__" | "-"+
//   tag        := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
//   digest     := algorithm ":" [0-9a-fA-F]{32,}
//
// podman also reads containers-transports references (`docker-archive:/path`, `dir:/path`,
// `oci:…`, `containers-storage:[…]`…) and opens such paths as root: a host file would become a
// tenant's image. Some of them even fit the grammar above (`oci:latest` reads as image "oci" with
// tag "latest"), so every transport name is refused before the grammar is applied.
#include <array>
#include <string>

#include "fleet/fleet.h"

namespace tessera::fleet {
namespace {

// containers-transports(5), and the prefixes other tools accept.
constexpr std::array<std::string_view, 11> kTransports = {
    "docker", "docker-archive",     "docker-daemon", "oci", "oci-archive",
    "dir",    "containers-storage", "ostree",        "sif", "tarball",
    "atomic"};

bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}
bool IsAlnum(char c) {
  return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z');
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}
bool IsHex(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool ValidPathComponent(std::string_view part) {
  if (part.empty() || !IsLowerAlnum(part.front()) || !IsLowerAlnum(part.back())) return false;
  for (size_t i = 0; i < part.size();) {
    if (IsLowerAlnum(part[i])) {
      ++i;
      continue;
    }
    // A separator: ".", "_", "__" or a run of "-", always between alphanumerics.
    size_t run = i;
    if (part[i] == '.') {
      run = i + 1;
    } else if (part[i] == '_') {
      run = i + 1 < part.size() && part[i + 1] == '_' ? i + 2 : i + 1;
    } else if (part[i] == '-') {
      while (run < part.size() && part[run] == '-')
        ++run;
    } else {
      return false;
    }
    if (run >= part.size() || !IsLowerAlnum(part[run])) return false;
    i = run;
  }
  return true;
}

bool ValidDomain(std::string_view domain) {
  auto colon = domain.find(':');
  if (colon != std::string_view::npos) {
    std::string_view port = domain.substr(colon + 1);
    if (port.empty() || port.size() > 5) return false;
    for (char c : port)
      if (!IsDigit(c)) return false;
    domain = domain.substr(0, colon);
  }
  if (domain.empty()) return false;
  size_t start = 0;
  while (start <= domain.size()) {
    size_t dot = domain.find('.', start);
    if (dot == std::string_view::npos) dot = domain.size();
    std::string_view label = domain.substr(start, dot - start);
    if (label.empty() || !IsAlnum(label.front()) || !IsAlnum(label.back())) return false;
    for (char c : label)
      if (!IsAlnum(c) && c != '-') return false;
    start = dot + 1;
  }
  return true;
}

bool ValidTag(std::string_view tag) {
  if (tag.empty() || tag.size() > 128) return false;
  if (!(IsAlnum(tag[0]) || tag[0] == '_')) return false;
  for (char c : tag)
    if (!(IsAlnum(c) || c == '_' || c == '.' || c == '-')) return false;
  return true;
}

bool ValidDigest(std::string_view digest) {
  auto colon = digest.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view algorithm = digest.substr(0, colon);
  std::string_view hex = digest.substr(colon + 1);
  if (!((algorithm[0] >= 'a' && algorithm[0] <= 'z') ||
        (algorithm[0] >= 'A' && algorithm[0] <= 'Z')))
    return false;
  for (char c : algorithm)
    if (!(IsAlnum(c) || c == '-' || c == '_' || c == '+' || c == '.')) return false;
  if (hex.size() < 32) return false;
  for (char c : hex)
    if (!IsHex(c)) return false;
  return true;
}

}  // namespace

std::string CheckImageReference(std::string_view reference) {
  if (reference.empty()) return "must not be empty";
  if (reference.size() > kMaxImageReference)
    return "must be at most " + std::to_string(kMaxImageReference) + " characters";
  auto colon = reference.find(':');
  if (colon != std::string_view::npos) {
    std::string_view prefix = reference.substr(0, colon);
    for (std::string_view transport : kTransports) {
      if (prefix == transport)
        return "names a containers transport (" + std::string(transport) +
               ":); give a registry reference such as registry.example/team/image:tag";
    }
  }
  std::string_view rest = reference;
  if (auto at = rest.find('@'); at != std::string_view::npos) {
    if (!ValidDigest(rest.substr(at + 1))) return "has a malformed digest after '@'";
    rest = rest.substr(0, at);
  }
  auto last_slash = rest.rfind('/');
  auto tag_colon = rest.rfind(':');
  if (tag_colon != std::string_view::npos &&
      (last_slash == std::string_view::npos || tag_colon > last_slash)) {
    if (!ValidTag(rest.substr(tag_colon + 1))) return "has a malformed tag";
    rest = rest.substr(0, tag_colon);
  }
  if (rest.empty()) return "has no repository name";
  if (rest.size() > 255) return "has a repository name longer than 255 characters";
  std::string_view path = rest;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    std::string_view first = rest.substr(0, slash);
    // As in the reference grammar: a first component with '.' or ':', or "localhost", is a
    // registry host.
    if (first.find_first_of(".:") != std::string_view::npos || first == "localhost") {
      if (!ValidDomain(first)) return "has a malformed registry host";
      path = rest.substr(slash + 1);
    }
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (!ValidPathComponent(path.substr(start, slash - start)))
      return "is not a registry reference (repository path components are lowercase letters and "
             "digits joined by '.', '_', '__' or '-')";
    start = slash + 1;
  }
  return "";
}

}  // namespace tessera::fleet
