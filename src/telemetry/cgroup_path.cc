// Which container a process is in, from the cgroup paths the kernel reports for it. Pure.
//
// The forms, as the runtimes and kubelet name their cgroups:
//   podman, systemd driver     /machine.slice/libpod-<id>.scope[/container]
//   podman, cgroupfs driver    /libpod_parent/libpod-<id>
//   podman's conmon (no container)            /machine.slice/libpod-conmon-<id>.scope
//   docker                     /system.slice/docker-<id>.scope, /docker/<id>
//   Kubernetes, systemd driver /kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/
//                                <cri-containerd-|crio-|docker-><id>.scope   (guaranteed: no qos)
//   Kubernetes, cgroupfs       /kubepods[/<qos>]/pod<uid>/<id>
// cgroup v2 has one line "0::<path>"; v1 one line per hierarchy "<n>:<controllers>:<path>".
// Under a cgroup namespace other processes' paths start with "/.." components; they are skipped.
#include <array>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

constexpr size_t kContainerIdLength = 64;

bool IsLowerHex(std::string_view text) {
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool IsContainerId(std::string_view text) {
  return text.size() == kContainerIdLength && IsLowerHex(text);
}

// "<prefix><id><suffix>" -> id, when it has that shape.
std::optional<std::string_view> Between(std::string_view component, std::string_view prefix,
                                        std::string_view suffix) {
  if (component.size() < prefix.size() + suffix.size()) return std::nullopt;
  if (component.substr(0, prefix.size()) != prefix) return std::nullopt;
  if (component.substr(component.size() - suffix.size()) != suffix) return std::nullopt;
  return component.substr(prefix.size(), component.size() - prefix.size() - suffix.size());
}

// A Pod UID as kubelet writes it in cgroup names: dashes (cgroupfs) or underscores (systemd);
// 36 characters with dashes, or 32 hex digits for a static Pod's hash.
std::optional<std::string> PodUid(std::string_view raw) {
  if (raw.size() != 32 && raw.size() != 36) return std::nullopt;
  std::string uid(raw);
  for (char& c : uid) {
    if (c == '_') c = '-';
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-')) return std::nullopt;
  }
  return uid;
}

// "kubepods-pod<uid>.slice", "kubepods-burstable-pod<uid>.slice", "pod<uid>".
std::optional<std::string> PodOfComponent(std::string_view component) {
  if (component.size() > 6 && component.substr(component.size() - 6) == ".slice") {
    auto at = component.rfind("-pod");
    if (component.substr(0, 8) != "kubepods" || at == std::string_view::npos) return std::nullopt;
    return PodUid(component.substr(at + 4, component.size() - 6 - at - 4));
  }
  if (component.substr(0, 3) == "pod") return PodUid(component.substr(3));
  return std::nullopt;
}

struct Named {
  Runtime runtime;
  std::string_view id;
};

// A component that is a container's own cgroup by its runtime's prefix.
std::optional<Named> ScopedContainer(std::string_view component) {
  static constexpr std::array<std::pair<std::string_view, Runtime>, 4> kScopes = {{
      {"libpod-", Runtime::kPodman},
      {"docker-", Runtime::kDocker},
      {"cri-containerd-", Runtime::kContainerd},
      {"crio-", Runtime::kCrio},
  }};
  for (const auto& [prefix, runtime] : kScopes) {
    auto id = Between(component, prefix, ".scope");
    if (!id) id = Between(component, prefix, "");  // cgroupfs drivers: no ".scope"
    if (id && IsContainerId(*id)) return Named{runtime, *id};
  }
  return std::nullopt;
}

// A component that is the runtime's own process next to a container (conmon): not a container.
bool IsMonitorScope(std::string_view component) {
  return component.substr(0, 14) == "libpod-conmon-" || component.substr(0, 12) == "crio-conmon-";
}

}  // namespace

const char* RuntimeName(Runtime runtime) {
  switch (runtime) {
    case Runtime::kPodman:
      return "podman";
    case Runtime::kDocker:
      return "docker";
    case Runtime::kContainerd:
      return "containerd";
    case Runtime::kCrio:
      return "cri-o";
    case Runtime::kKubepods:
      return "kubepods";
  }
  return "unknown";
}

std::optional<CgroupContainer> ContainerOfCgroupPath(std::string_view path) {
  // " (deleted)" follows the path of a cgroup that was removed while the process was in it.
  constexpr std::string_view kDeleted = " (deleted)";
  if (path.size() >= kDeleted.size() && path.substr(path.size() - kDeleted.size()) == kDeleted)
    path.remove_suffix(kDeleted.size());
  bool under_kubepods = false;
  std::string_view parent;  // the previous component
  std::optional<std::string> pod;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view component = path.substr(start, end - start);
    start = end + 1;
    if (component.empty() || component == "." || component == "..") continue;
    if (IsMonitorScope(component)) return std::nullopt;
    if (auto named = ScopedContainer(component)) {
      CgroupContainer out{named->runtime, std::string(named->id), pod.value_or("")};
      return out;
    }
    // A bare ID is a container only where a runtime's cgroupfs driver puts one: below a Pod,
    // or below docker's own cgroup.
    if (IsContainerId(component) && (pod || parent == "docker")) {
      CgroupContainer out{pod ? Runtime::kKubepods : Runtime::kDocker, std::string(component),
                          pod.value_or("")};
      return out;
    }
    if (pod) break;  // the component below a Pod is not a container: the Pod is what is known
    if (component.substr(0, 8) == "kubepods") under_kubepods = true;
    if (under_kubepods) pod = PodOfComponent(component);
    parent = component;
  }
  if (pod) return CgroupContainer{Runtime::kKubepods, "", *pod};
  return std::nullopt;
}

std::vector<std::string_view> CgroupPathsOf(std::string_view text) {
  if (text.size() > kMaxCgroupFile) text = text.substr(0, kMaxCgroupFile);
  std::vector<std::string_view> paths;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    // "<hierarchy>:<controllers>:<path>"; the path itself may hold ':'.
    const size_t first = line.find(':');
    if (first == std::string_view::npos) continue;
    const size_t second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    paths.push_back(line.substr(second + 1));
  }
  return paths;
}

std::optional<CgroupContainer> ContainerOfProcCgroup(std::string_view text) {
  std::optional<CgroupContainer> found;
  for (std::string_view path : CgroupPathsOf(text)) {
    auto container = ContainerOfCgroupPath(path);
    if (!container) continue;
    if (!found) {
      found = std::move(container);
      continue;
    }
    // Every hierarchy must tell the same story; a Pod-only line agrees with a line naming a
    // container of that Pod.
    if (found->pod_uid != container->pod_uid) return std::nullopt;
    if (found->container_id.empty()) {
      found = std::move(container);
    } else if (!container->container_id.empty() &&
               (found->container_id != container->container_id ||
                found->runtime != container->runtime)) {
      return std::nullopt;
    }
  }
  return found;
}

}  // namespace tessera::telemetry
