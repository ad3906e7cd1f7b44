// Container runtime configuration for GPUs (runc, gVisor with nvproxy, Kata with VFIO) and
// `doctor`: checks of a host and its containerd config that explain why GPU containers would
// fail or hang, each with the evidence and the fix.
//
// Pure logic (config text generation, TOML checks, host checks over HostFacts) is separate from
// the one reader (ReadHostFacts), so every check is testable from a fixture root.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "inventory/inventory.h"

namespace tessera::runtimes {

enum class Runtime { kRunc, kGvisor, kKata };
Result<Runtime> ParseRuntime(std::string_view name);  // "runc" | "gvisor" | "kata"
const char* RuntimeName(Runtime runtime);

// ---- runtime-config ----

struct ContainerdConfigOptions {
  Runtime runtime = Runtime::kRunc;
  // Where the runsc.toml printed by RunscToml() is installed (containerd passes it to the shim).
  std::string runsc_config_path = "/etc/containerd/runsc.toml";
  // Kata's GPU configuration as installed by kata-deploy.
  std::string kata_config_path =
      "/opt/kata/share/defaults/kata-containers/configuration-qemu-nvidia-gpu.toml";
  std::vector<std::string> cdi_spec_dirs = {"/etc/cdi", "/var/run/cdi"};
};

// The containerd config (version = 2, containerd 1.7) TOML to add: CDI enablement and the
// runtime's `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.<name>]` table.
std::string ContainerdConfig(const ContainerdConfigOptions& options);
// runsc.toml for the gVisor runtime: `[runsc_config] nvproxy = "true"`.
std::string RunscToml();
// containers.conf lines for podman (`[engine.runtimes]` and the default runtime).
std::string PodmanContainersConf(Runtime runtime, const ContainerdConfigOptions& options);

// ---- doctor ----

enum class Verdict { kPass, kWarn, kFail };
const char* VerdictName(Verdict verdict);  // "PASS" | "WARN" | "FAIL"

struct Check {
  std::string id;     // stable, e.g. "containerd.runtime_type", "vfio.group_members"
  std::string title;  // one line, what is checked
  Verdict verdict = Verdict::kPass;
  std::string evidence;  // what was seen (paths, values)
  std::string fix;       // empty for PASS
};

// Versions as "major.minor[.patch]"; compared numerically field by field.
struct Version {
  std::vector<int> parts;
  static std::optional<Version> Parse(std::string_view text);  // first dotted number in text
  int Compare(const Version& other) const;                     // <0, 0, >0
  std::string ToString() const;
};

// gVisor nvproxy's supported driver list (data/nvproxy-drivers.txt).
struct NvproxyDrivers {
  std::string source;  // the "source:" line
  std::vector<std::string> versions;
  bool Supports(const std::string& driver_version) const;
};
NvproxyDrivers ParseNvproxyDrivers(std::string_view text);
// The list compiled in from data/nvproxy-drivers.txt.
const NvproxyDrivers& BuiltinNvproxyDrivers();

// What the containerd config says, extracted once so host checks can use it too.
struct ContainerdRuntime {
  std::string name;          // the table name under .runtimes
  std::string runtime_type;  // e.g. "io.containerd.runsc.v1"
  std::string binary_name;   // options.BinaryName when set
  std::string type_url;      // options.TypeUrl (runsc)
  std::string config_path;   // options.ConfigPath (runsc, kata)
  std::vector<std::string> pod_annotations;
};
struct ContainerdConfigFacts {
  int config_version = 1;                   // top-level `version`
  std::optional<bool> enable_cdi;           // CRI plugin's enable_cdi
  std::vector<std::string> cdi_spec_dirs;   // CRI plugin's cdi_spec_dirs
  std::vector<ContainerdRuntime> runtimes;  // in file order
  bool HasRuntimeOfKind(Runtime kind) const;
};
// Which kind of runtime a table describes (from runtime_type, BinaryName and TypeUrl).
std::optional<Runtime> KindOf(const ContainerdRuntime& runtime);

// Reads a file below the host root (nullopt when missing); injected so checks stay pure.
using FileReader = std::function<std::optional<std::string>(const std::string& path)>;

struct ContainerdCheckInput {
  std::string config_path;                    // for evidence only
  std::string config_text;                    // containerd config.toml content
  std::optional<Version> containerd_version;  // from `containerd --version` or a flag
  bool cdi_specs_present = false;             // host has CDI spec files
  FileReader read_file;                       // resolves runsc ConfigPath; may be empty
};
struct ContainerdCheckResult {
  std::vector<Check> checks;
  std::optional<ContainerdConfigFacts> facts;  // absent when the TOML did not parse
};
// Parses the config with toml++ and checks: runtime_type against the binary it runs, runsc
// without nvproxy, CDI not enabled on containerd >= 1.7, containerd < 1.7 with CDI expected,
// Kata without pod_annotations.
ContainerdCheckResult CheckContainerdConfig(const ContainerdCheckInput& input);

// One CDI spec file found on the host.
struct CdiSpecFile {
  std::string path;  // host path, e.g. /var/run/cdi/nvidia.com-gpu.json
  std::string content;
};

// A PCI function in a GPU's IOMMU group, as sysfs describes it.
struct PciFunction {
  std::string driver;  // empty when unbound
  uint32_t class_code = 0;
};

// ---- gVisor's runsc ----

// What an installed runsc can do, from its own output (read once: it does not change while a
// process runs).
struct RunscInfo {
  std::string path;      // the binary that was asked
  std::string version;   // `runsc --version`: "0.0~20221219.0", "release-20240513.0"
  bool nvproxy = false;  // `runsc flags` lists -nvproxy (GPU support)
};
// Pure: from the outputs of `runsc --version` and `runsc flags`.
RunscInfo ParseRunscInfo(std::string path, std::string_view version_output,
                         std::string_view flags_output);
// Runs `runsc --version` and `runsc flags`. NotFound when the binary is missing, Unavailable
// when it does not answer.
Result<RunscInfo> ReadRunscInfo(const std::string& runsc);
// Ok when this runsc can give a container GPUs (nvproxy); FailedPrecondition naming its
// version and what is needed otherwise.
Status GvisorGpuSupport(const RunscInfo& runsc);
// The release date in a runsc version ("release-20240513.0" -> 20240513); nullopt without one.
std::optional<int> RunscReleaseDate(std::string_view version);
// Ok when this runsc can run an MPS client (a share of a GPU) under gVisor; InvalidArgument
// naming its version otherwise.
Status GvisorMpsSupport(const RunscInfo& runsc);

// Everything doctor needs to know about a host, gathered by ReadHostFacts.
struct HostFacts {
  inventory::Inventory inventory;
  std::optional<std::string> kernel_release;  // /proc/sys/kernel/osrelease
  std::optional<int> hugepages_1g_total;      // /sys/kernel/mm/hugepages/hugepages-1048576kB
  std::optional<int> hugepages_1g_free;
  std::map<std::string, PciFunction>
      group_members;                   // every IOMMU-group member of a GPU or NVSwitch
  std::vector<CdiSpecFile> cdi_specs;  // /etc/cdi, /var/run/cdi (*.json, *.yaml)
  std::optional<Version> podman_version;
  std::optional<Version> containerd_version;
  std::optional<RunscInfo> runsc;  // absent when runsc is not installed (or not asked)
};

struct HostFactsOptions {
  std::string root = "/";
  // When unset and root is "/", `podman --version` / `containerd --version` are run.
  std::optional<std::string> podman_version;
  std::optional<std::string> containerd_version;
  // The runsc binary to ask (`--version`, `flags`); when unset and root is "/", runsc in PATH.
  std::optional<std::string> runsc;
  // false: ask no program (podman, containerd, runsc) at all; the host's files only.
  bool ask_tools = true;
};
Result<HostFacts> ReadHostFacts(const HostFactsOptions& options);

// Host checks: IOMMU groups, vfio-pci binding and group members, 1 GiB hugepages against the
// memory a VM of all vfio GPUs pins, kernel version, driver vs nvproxy list, runsc with or
// without nvproxy, CDI specs present and fresh, podman vs the CDI spec version. `containerd` (when
// a config was read) says which isolation runtimes are configured, which sharpens WARN into FAIL
// where a runtime needs it.
std::vector<Check> CheckHost(const HostFacts& facts, const NvproxyDrivers& drivers,
                             const ContainerdConfigFacts* containerd);

// The newest cdiVersion a podman version accepts (from the CDI library version it vendors);
// nullopt when it has no CDI support at all (< 4.1).
std::optional<std::string> MaxCdiVersionForPodman(const Version& podman);

// ---- doctor --probe: one trivial container per OCI runtime, through podman ----

struct ProbeRuntime {
  std::string name;     // "runc", "runsc", "kata-runtime"
  std::string runtime;  // podman's --runtime: the binary's path
  // podman --runtime-flag values. runsc gets network=none: its default network (sandbox) fails
  // under podman 4.3 ("cannot run with network enabled in root network namespace").
  std::vector<std::string> runtime_flags;
};
// The OCI runtimes podman can use here, in probe order: runc, runsc, then the first Kata runtime
// found. `find` resolves a program name to its path, empty when it is not installed.
std::vector<ProbeRuntime> ProbeRuntimes(
    const std::function<std::string(const std::string& program)>& find);

// What the probe container is made of: an image, or a root directory holding `command`.
struct ProbeTarget {
  std::string image;   // used when set
  std::string rootfs;  // podman --rootfs otherwise
  std::vector<std::string> command;
  std::vector<std::string> run_args;  // more `podman run` flags (--ulimit ...)
};
// podman [--runtime-flag F]... run --rm --network none --runtime R [RUN_ARGS]...
//   (IMAGE | --rootfs DIR) CMD...
std::vector<std::string> ProbeArgv(const std::string& podman, const ProbeRuntime& runtime,
                                   const ProbeTarget& target);

struct ProbeOutcome {
  int status = -1;
  bool timed_out = false;
  std::string output;  // podman's stdout and stderr
};
// What the fix for a failed probe depends on.
struct ProbeContext {
  std::string command;          // the podman command line, for the evidence
  std::string containers_conf;  // $CONTAINERS_CONF, empty when unset
};
// What a failed container start means: podman's error line and its fix (rlimits podman may not
// set, runsc's network mode, a missing runtime, nvproxy, cgroups, ...). `runtime_name` is the
// runtime the fix names ("runc").
struct PodmanFailure {
  std::string error;
  std::string fix;
  std::optional<int> rlimit_type;  // "error setting rlimit type N": the resource podman set
};
PodmanFailure DiagnosePodmanFailure(const std::string& runtime_name, const ProbeOutcome& outcome,
                                    const ProbeContext& context);
// PASS when the container ran and exited 0; FAIL with DiagnosePodmanFailure's error and fix.
Check CheckProbe(const ProbeRuntime& runtime, const ProbeOutcome& outcome,
                 const ProbeContext& context);

// The hard limits a process runs with, from /proc/<pid>/limits; nullopt: unlimited.
struct ProcessLimits {
  std::optional<uint64_t> open_files;  // RLIMIT_NOFILE
  std::optional<uint64_t> processes;   // RLIMIT_NPROC
};
Result<ProcessLimits> ParseProcLimits(std::string_view text);
// podman's --ulimit flags for when its own defaults (1048576 files and processes for root) are
// more than runc may set here: each resource at the lowest of the given hard limits (this
// process's and those of conmon, runc's parent, which can be lower) and of podman's default,
// soft = hard. Resources without a limit anywhere are left to podman.
std::vector<std::string> UlimitArgsWithin(const std::vector<ProcessLimits>& limits);

struct ProbeOptions {
  std::string podman = "podman";
  std::string image;  // empty: a one-file root directory with a static exit(0) program (x86-64)
  int timeout_ms = 180000;
};
// Starts the probe container with each of ProbeRuntimes() and checks the outcomes.
std::vector<Check> RunProbes(const ProbeOptions& options);

// A temporary root directory for probe containers, removed with the object: /true (exits 0)
// and /pause (waits until killed), both static x86-64 programs of 129 bytes, so that no image,
// registry or network is needed.
class ProbeRootfs {
 public:
  static Result<std::unique_ptr<ProbeRootfs>> Create();
  ~ProbeRootfs();
  ProbeRootfs(const ProbeRootfs&) = delete;
  ProbeRootfs& operator=(const ProbeRootfs&) = delete;
  const std::string& path() const { return path_; }

 private:
  explicit ProbeRootfs(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Runs one probe container (`podman run --rm`) and answers how it went.
ProbeOutcome RunProbe(const std::string& podman, const ProbeRuntime& runtime,
                      const ProbeTarget& target, int timeout_ms);

// The hard limits of conmon, the parent of the runtime that sets a container's rlimits: a
// /pause container started detached (with `run_args`) and removed again, its conmon's
// /proc/<pid>/limits read while it runs. `name` names the container.
Result<ProcessLimits> ReadConmonLimits(const std::string& podman, const ProbeRuntime& runtime,
                                       const ProbeRootfs& rootfs,
                                       const std::vector<std::string>& run_args,
                                       const std::string& name);

struct DoctorReport {
  std::vector<Check> checks;
  bool HasFailure() const;
};
std::string ToTable(const DoctorReport& report);
std::string ToJson(const DoctorReport& report);

}  // namespace tessera::runtimes
