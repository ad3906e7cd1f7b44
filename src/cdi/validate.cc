// Semantic rules of a CDI spec, as the reference library applies them when it loads a spec
// (pkg/cdi: qualified-device.go for names, container-edits.go for edits, spec.go and
// version.go for versions, device.go for empty edits and duplicates).
#include <algorithm>
#include <cstdio>
#include <map>

#include "cdi/cdi.h"

namespace tessera::cdi {
namespace {

bool IsLetter(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}
bool IsAlphaNumeric(char c) {
  return IsLetter(c) || IsDigit(c);
}

std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\x%02x", static_cast<unsigned char>(c));
      out += buffer;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Shared shape of vendor, class and device names: a first character rule, a set of characters
// allowed inside, and a letter or digit at the end.
std::string CheckName(std::string_view what, std::string_view name, bool first_may_be_digit,
                      std::string_view inner_extra) {
  if (name.empty()) return "invalid (empty) " + std::string(what);
  char first = name.front();
  if (!(IsLetter(first) || (first_may_be_digit && IsDigit(first)))) {
    return "invalid " + std::string(what) + " " + Quote(name) + ", should start with " +
           (first_may_be_digit ? "a letter or digit" : "a letter");
  }
  for (size_t i = 1; i + 1 < name.size(); ++i) {
    char c = name[i];
    if (!IsAlphaNumeric(c) && inner_extra.find(c) == std::string_view::npos) {
      return "invalid character " + Quote(std::string_view(&name[i], 1)) + " in " +
             std::string(what) + " " + Quote(name);
    }
  }
  if (!IsAlphaNumeric(name.back())) {
    return "invalid " + std::string(what) + " " + Quote(name) +
           ", should end with a letter or digit";
  }
  return {};
}

// Kubernetes qualified name, as the reference library checks annotation keys: an optional DNS
// subdomain prefix and '/', then 1-63 characters [A-Za-z0-9] with '-', '_', '.' inside.
std::string CheckAnnotationKey(std::string_view key) {
  std::string_view name = key;
  if (auto slash = key.find('/'); slash != std::string_view::npos) {
    std::string_view prefix = key.substr(0, slash);
    name = key.substr(slash + 1);
    if (prefix.empty() || prefix.size() > 253) return "invalid annotation key prefix";
    for (size_t i = 0; i < prefix.size(); ++i) {
      char c = prefix[i];
      bool edge = i == 0 || i + 1 == prefix.size();
      bool ok = (c >= 'a' && c <= 'z') || IsDigit(c) || (!edge && (c == '-' || c == '.'));
      if (!ok) return "invalid annotation key prefix " + Quote(prefix);
    }
  }
  if (name.empty() || name.size() > 63) return "invalid annotation key " + Quote(key);
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool edge = i == 0 || i + 1 == name.size();
    bool ok = IsAlphaNumeric(c) || (!edge && (c == '-' || c == '_' || c == '.'));
    if (!ok) return "invalid annotation key " + Quote(key);
  }
  return {};
}

struct Checker {
  std::vector<Problem>* problems;
  std::string device;

  void Add(std::string field, std::string message) {
    problems->push_back({device, std::move(field), std::move(message)});
  }

  void Env(const std::string& field, const std::vector<std::string>& env) {
    for (size_t i = 0; i < env.size(); ++i) {
      auto eq = env[i].find('=');
      if (eq == std::string::npos || eq == 0) {
        Add(field + "[" + std::to_string(i) + "]",
            "invalid environment variable " + Quote(env[i]) + " (want NAME=value)");
      }
    }
  }

  void Annotations(const std::string& field, const std::map<std::string, std::string>& map) {
    size_t total = 0;
    for (const auto& [key, value] : map) {
      total += key.size() + value.size();
      if (auto problem = CheckAnnotationKey(key); !problem.empty()) Add(field, problem);
    }
    if (total > 256 * 1024) Add(field, "annotations larger than 256 KiB");
  }

  void Edits(const std::string& prefix, const ContainerEdits& edits) {
    Env(prefix + "env", edits.env);
    for (size_t i = 0; i < edits.device_nodes.size(); ++i) {
      const DeviceNode& node = edits.device_nodes[i];
      std::string field = prefix + "deviceNodes[" + std::to_string(i) + "]";
      if (node.path.empty()) Add(field + ".path", "invalid (empty) device path");
      static const char* kTypes[] = {"", "b", "c", "u", "p"};
      if (std::find(std::begin(kTypes), std::end(kTypes), node.type) == std::end(kTypes)) {
        Add(field + ".type", "invalid device type " + Quote(node.type) + " (want b, c, u or p)");
      }
      if (node.permissions.find_first_not_of("rwm") != std::string::npos) {
        Add(field + ".permissions",
            "invalid permissions " + Quote(node.permissions) + " (want a subset of rwm)");
      }
    }
    for (size_t i = 0; i < edits.hooks.size(); ++i) {
      const Hook& hook = edits.hooks[i];
      std::string field = prefix + "hooks[" + std::to_string(i) + "]";
      static const char* kHooks[] = {"prestart",       "createRuntime", "createContainer",
                                     "startContainer", "poststart",     "poststop"};
      if (std::find(std::begin(kHooks), std::end(kHooks), hook.hook_name) == std::end(kHooks)) {
        Add(field + ".hookName", "invalid hook name " + Quote(hook.hook_name));
      }
      if (hook.path.empty()) Add(field + ".path", "invalid hook with empty path");
      Env(field + ".env", hook.env);
    }
    for (size_t i = 0; i < edits.mounts.size(); ++i) {
      const Mount& mount = edits.mounts[i];
      std::string field = prefix + "mounts[" + std::to_string(i) + "]";
      if (mount.host_path.empty()) Add(field + ".hostPath", "invalid mount, empty host path");
      if (mount.container_path.empty()) {
        Add(field + ".containerPath", "invalid mount, empty container path");
      }
    }
    if (edits.intel_rdt) {
      const std::string& clos = edits.intel_rdt->clos_id;
      if (clos == "." || clos == ".." || clos.find_first_of("/\n") != std::string::npos) {
        Add(prefix + "intelRdt.closID", "invalid closID " + Quote(clos));
      }
    }
  }
};

int CompareVersions(const std::string& a, const std::string& b) {
  const auto& known = KnownVersions();
  auto ia = std::find(known.begin(), known.end(), a);
  auto ib = std::find(known.begin(), known.end(), b);
  return static_cast<int>(ia - known.begin()) - static_cast<int>(ib - known.begin());
}

bool UsesV040(const Spec& spec) {
  auto typed = [](const ContainerEdits& edits) {
    return std::any_of(edits.mounts.begin(), edits.mounts.end(),
                       [](const Mount& m) { return !m.type.empty(); });
  };
  if (typed(spec.container_edits)) return true;
  return std::any_of(spec.devices.begin(), spec.devices.end(),
                     [&](const Device& d) { return typed(d.container_edits); });
}

bool UsesV050(const Spec& spec) {
  auto host_path = [](const ContainerEdits& edits) {
    return std::any_of(edits.device_nodes.begin(), edits.device_nodes.end(),
                       [](const DeviceNode& n) { return !n.host_path.empty(); });
  };
  if (host_path(spec.container_edits)) return true;
  for (const Device& device : spec.devices) {
    if (!device.name.empty() && !IsLetter(device.name.front())) return true;
    if (host_path(device.container_edits)) return true;
  }
  return false;
}

bool UsesV060(const Spec& spec) {
  if (!spec.annotations.empty()) return true;
  for (const Device& device : spec.devices) {
    if (!device.annotations.empty()) return true;
  }
  return !spec.Vendor().empty() && spec.Class().find('.') != std::string::npos;
}

bool UsesV070(const Spec& spec) {
  auto uses = [](const ContainerEdits& edits) {
    return edits.intel_rdt.has_value() || !edits.additional_gids.empty();
  };
  if (uses(spec.container_edits)) return true;
  return std::any_of(spec.devices.begin(), spec.devices.end(),
                     [&](const Device& d) { return uses(d.container_edits); });
}

}  // namespace

std::string Spec::Vendor() const {
  auto slash = kind.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == kind.size()) return {};
  return kind.substr(0, slash);
}

std::string Spec::Class() const {
  auto slash = kind.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == kind.size()) return kind;
  return kind.substr(slash + 1);
}

const std::vector<std::string>& KnownVersions() {
  static const std::vector<std::string> versions = {"0.1.0", "0.2.0", "0.3.0", "0.4.0",
                                                    "0.5.0", "0.6.0", "0.7.0"};
  return versions;
}

std::string MinimumVersion(const Spec& spec) {
  if (UsesV070(spec)) return "0.7.0";
  if (UsesV060(spec)) return "0.6.0";
  if (UsesV050(spec)) return "0.5.0";
  if (UsesV040(spec)) return "0.4.0";
  return "0.3.0";
}

std::string CheckVendorName(std::string_view vendor) {
  return CheckName("vendor name", vendor, false, "_-.");
}

std::string CheckClassName(std::string_view class_name) {
  // '.' is allowed since cdiVersion 0.6.0; MinimumVersion accounts for it.
  return CheckName("class name", class_name, false, "_-.");
}

std::string CheckDeviceName(std::string_view name) {
  return CheckName("device name", name, true, "_-.:");
}

std::string CheckKind(std::string_view kind) {
  auto slash = kind.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == kind.size()) {
    return "invalid kind " + Quote(kind) + ", want vendor/class";
  }
  if (auto problem = CheckVendorName(kind.substr(0, slash)); !problem.empty()) return problem;
  return CheckClassName(kind.substr(slash + 1));
}

std::string FormatProblem(const Problem& problem) {
  return problem.device + ": " + problem.field + ": " + problem.message;
}

std::vector<Problem> ValidateSpec(const Spec& spec) {
  std::vector<Problem> problems;
  Checker spec_checker{&problems, "-"};

  const auto& known = KnownVersions();
  if (std::find(known.begin(), known.end(), spec.version) == known.end()) {
    spec_checker.Add("cdiVersion", "invalid version " + Quote(spec.version) +
                                       " (known: " + known.front() + " to " + known.back() + ")");
  } else if (std::string needed = MinimumVersion(spec); CompareVersions(needed, spec.version) > 0) {
    spec_checker.Add("cdiVersion", "the spec version must be at least " + needed +
                                       " for the fields it uses (has " + spec.version + ")");
  }
  if (auto problem = CheckKind(spec.kind); !problem.empty()) spec_checker.Add("kind", problem);
  spec_checker.Annotations("annotations", spec.annotations);
  spec_checker.Edits("containerEdits.", spec.container_edits);

  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < spec.devices.size(); ++i) {
    const Device& device = spec.devices[i];
    Checker checker{&problems,
                    device.name.empty() ? "devices[" + std::to_string(i) + "]" : device.name};
    if (auto problem = CheckDeviceName(device.name); !problem.empty()) {
      checker.Add("name", problem);
    }
    if (auto [it, inserted] = seen.emplace(device.name, i); !inserted) {
      checker.Add("name",
                  "duplicate device name (also devices[" + std::to_string(it->second) + "])");
    }
    checker.Annotations("annotations", device.annotations);
    if (device.container_edits.empty()) {
      checker.Add("containerEdits", "invalid device, empty device edits");
    }
    checker.Edits("containerEdits.", device.container_edits);
  }
  return problems;
}

std::vector<Problem> CheckSpecText(std::string_view text) {
  ParsedSpec parsed = ParseSpec(text);
  std::vector<Problem> problems = std::move(parsed.problems);
  // A spec that did not decode is not checked further: its fields may be half filled.
  if (!problems.empty()) return problems;
  return ValidateSpec(parsed.spec);
}

}  // namespace tessera::cdi
