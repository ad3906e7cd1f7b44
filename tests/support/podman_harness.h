// Real containers in tests: podman (Debian 12's 4.3) with runc, a tiny busybox image imported
// once per build tree, and CDI spec files installed where podman reads them.
//
// podman 4.3 reads CDI specs only from /etc/cdi and /var/run/cdi (no per-run directory), so a
// test installs its spec there under a kind of its own (UniqueTestKind) and removes it after.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::testing {

struct CommandResult {
  int status = -1;     // exit status; 128+signal when killed
  std::string output;  // stdout and stderr, interleaved
};

// Runs argv[0] (searched in PATH) without a shell.
CommandResult RunArgv(const std::vector<std::string>& argv);

class Podman {
 public:
  // Sets up once per process: writes <build>/podman/containers.conf (runtime runc; ulimits
  // this kernel accepts; crun fails on its hybrid cgroups), points CONTAINERS_CONF at it, and
  // imports the busybox image unless it exists (under a lock, so parallel test processes import
  // it once). Never fails: check ready() and setup_error().
  static const Podman& Get();

  bool ready() const { return error_.empty(); }
  const std::string& setup_error() const { return error_; }
  const std::string& image() const { return image_; }
  const std::string& containers_conf() const { return conf_; }

  // podman ARGS...
  CommandResult Run(const std::vector<std::string>& args) const;
  // podman run --rm RUN_ARGS... IMAGE /bin/sh -c SCRIPT
  CommandResult RunShell(const std::vector<std::string>& run_args, const std::string& script) const;

 private:
  Podman();
  std::string image_;
  std::string conf_;
  std::string error_;
};

// The host PIDs of a running container's processes (podman top NAME hpid), once it has at least
// `at_least` of them (waits for them, within the event timeout); fewer when it never does.
std::vector<uint32_t> ContainerHostPids(const Podman& podman, const std::string& name,
                                        size_t at_least);

// "tessera-test.example/<class>-<pid>-<n>": a CDI kind no other test process uses.
std::string UniqueTestKind(const std::string& class_prefix = "gpu");

// Removes (forced, no grace) every container labelled tessera.instance=<instance>: what a test's
// tessera-serve left behind.
void RemoveInstanceContainers(const std::string& instance);
// Removes the CDI spec files tessera-serve wrote for `kind` into /var/run/cdi.
void RemoveSpecsOfKind(const std::string& kind);

// A CDI spec file in a directory podman reads, removed when the object goes away.
class InstalledSpec {
 public:
  // Writes `content` to DIR/FILE_NAME (DIR created when missing).
  InstalledSpec(const std::string& content, const std::string& file_name,
                const std::string& dir = "/var/run/cdi");
  InstalledSpec(const InstalledSpec&) = delete;
  InstalledSpec& operator=(const InstalledSpec&) = delete;
  ~InstalledSpec();
  const std::string& path() const { return path_; }
  bool ok() const { return ok_; }

 private:
  std::string path_;
  bool ok_ = false;
};

}  // namespace tessera::testing
