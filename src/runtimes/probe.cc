// doctor --probe, the pure half: which runtimes to try, the podman command for each, and what a
// failure means. Facts behind the fixes, seen on Debian 12 hosts with podman 4.3:
//  - as root podman asks the runtime for nofile 1048576 and a high nproc; where the process
//    lacks CAP_SYS_RESOURCE (containers, restricted VMs) runc then fails with
//    "error setting rlimit type 7" (RLIMIT_NOFILE; type 6 is RLIMIT_NPROC);
//  - runsc's default network (sandbox) fails with "cannot run with network enabled in root
//    network namespace"; network=host (the podman network namespace) and network=none work;
//  - nvproxy with a driver it does not know shows only "waiting for sandbox to start: EOF".
#include <algorithm>

#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r'))
    text.pop_back();
  return text;
}

// podman's own error line ("Error: ..."), else its last non-empty line.
std::string ErrorLine(const std::string& output) {
  std::string last;
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    std::string line = Trimmed(output.substr(start, end - start));
    start = end + 1;
    if (line.rfind("Error: ", 0) == 0) return line;
    if (!line.empty()) last = line;
  }
  return last;
}

const char* RlimitName(int type) {
  // Linux resource numbers (asm-generic/resource.h; x86 and arm64 alike).
  static const char* const kNames[] = {
      "cpu",     "fsize", "data",  "stack",      "core",     "rss",  "nproc",  "nofile",
      "memlock", "as",    "locks", "sigpending", "msgqueue", "nice", "rtprio", "rttime"};
  if (type < 0 || type >= int(std::size(kNames))) return "?";
  return kNames[type];
}

// The containers.conf a fix is made in: the one CONTAINERS_CONF names, else the system's.
std::string ConfFile(const ProbeContext& context) {
  return context.containers_conf.empty()
             ? "/etc/containers/containers.conf (or a file named by CONTAINERS_CONF)"
             : "$CONTAINERS_CONF (" + context.containers_conf + ")";
}

std::string RlimitFix(int type, const ProbeContext& context) {
  std::string where = ConfFile(context);
  // The limits that count are those of conmon, runc's parent, which may be lower than the
  // shell's: on one such host the shell's nproc hard limit was 96365 and conmon's 32768.
  return std::string(
             "podman's default ulimits for root exceed what this host lets a process "
             "set (rlimit type ") +
         std::to_string(type) + " is " + RlimitName(type) +
         "; raising a hard limit needs CAP_SYS_RESOURCE); `tessera serve` gives its containers "
         "--ulimit values within the hard limits itself; for other podman use add to " +
         where +
         ": [containers] default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"] "
         "(larger values up to the hard limits conmon runs with: `grep -e files -e processes "
         "/proc/$(pgrep -n conmon)/limits` while a container runs)";
}

}  // namespace

std::vector<ProbeRuntime> ProbeRuntimes(
    const std::function<std::string(const std::string& program)>& find) {
  std::vector<ProbeRuntime> out;
  if (auto path = find("runc"); !path.empty()) out.push_back({"runc", path, {}});
  if (auto path = find("runsc"); !path.empty()) out.push_back({"runsc", path, {"network=none"}});
  for (const char* kata : {"kata-runtime", "kata-qemu"}) {
    if (auto path = find(kata); !path.empty()) {
      out.push_back({kata, path, {}});
      break;
    }
  }
  return out;
}

std::vector<std::string> ProbeArgv(const std::string& podman, const ProbeRuntime& runtime,
                                   const ProbeTarget& target) {
  // --runtime-flag is one of podman's global flags: podman keeps it for this call only.
  std::vector<std::string> argv = {podman};
  for (const auto& flag : runtime.runtime_flags) {
    argv.push_back("--runtime-flag");
    argv.push_back(flag);
  }
  argv.insert(argv.end(), {"run", "--rm", "--network", "none", "--runtime", runtime.runtime});
  argv.insert(argv.end(), target.run_args.begin(), target.run_args.end());
  if (!target.image.empty()) {
    argv.push_back(target.image);
  } else {
    argv.push_back("--rootfs");
    argv.push_back(target.rootfs);
  }
  argv.insert(argv.end(), target.command.begin(), target.command.end());
  return argv;
}

PodmanFailure DiagnosePodmanFailure(const std::string& runtime_name, const ProbeOutcome& outcome,
                                    const ProbeContext& context) {
  PodmanFailure failure;
  const std::string& output = outcome.output;
  failure.error = ErrorLine(output);
  if (outcome.timed_out)
    failure.error = "no answer (timed out)" + (failure.error.empty() ? "" : ": " + failure.error);
  if (failure.error.empty()) failure.error = "exit status " + std::to_string(outcome.status);
  auto has = [&](const char* text) { return output.find(text) != std::string::npos; };
  if (auto at = output.find("error setting rlimit type "); at != std::string::npos) {
    failure.rlimit_type = std::atoi(output.c_str() + at + 26);
    failure.fix = RlimitFix(*failure.rlimit_type, context);
  } else if (has("cannot run with network enabled in root network namespace")) {
    failure.fix =
        "run runsc with --runtime-flag network=host (it then uses podman's network namespace) "
        "or --runtime-flag network=none; tessera's local backend passes these itself";
  } else if (has("waiting for sandbox to start: EOF")) {
    failure.fix =
        "runsc's nvproxy does not support the loaded NVIDIA driver: install a driver on its "
        "list (`runsc nvproxy list-supported-drivers`) or a newer gVisor release";
  } else if (has("not found") && (has("OCI runtime") || has("executable file"))) {
    failure.fix = "install " + runtime_name +
                  " or name its path under [engine.runtimes] in "
                  "containers.conf";
  } else if (has("cannot use systemd cgroups manager") || has("systemd not running on this host")) {
    failure.fix =
        "podman is set to manage cgroups through systemd, which is not running here: set "
        "[engine] cgroup_manager = \"cgroupfs\" in " +
        ConfFile(context);
  } else if (has("opening seccomp profile failed")) {
    failure.fix =
        "the seccomp profile podman is told to use cannot be read: point "
        "[containers] seccomp_profile in " +
        ConfFile(context) +
        " at an existing profile (Debian's is /usr/share/containers/seccomp.json) or "
        "remove the line";
  } else if (has("cgroup")) {
    failure.fix =
        "the runtime cannot use this host's cgroup layout: use runc ([engine] runtime = "
        "\"runc\" in containers.conf) or boot with a unified cgroup v2 hierarchy";
  } else if (outcome.timed_out) {
    failure.fix = "run the command above by hand with --log-level=debug to see where it stops";
  } else {
    failure.fix = "run the command above by hand with --log-level=debug for podman's details";
  }
  return failure;
}

Check CheckProbe(const ProbeRuntime& runtime, const ProbeOutcome& outcome,
                 const ProbeContext& context) {
  Check check;
  check.id = "probe." + runtime.name;
  check.title = "podman starts a container with " + runtime.name;
  if (!outcome.timed_out && outcome.status == 0) {
    check.verdict = Verdict::kPass;
    check.evidence = "ran and exited 0: " + context.command;
    return check;
  }
  check.verdict = Verdict::kFail;
  PodmanFailure failure = DiagnosePodmanFailure(runtime.name, outcome, context);
  check.evidence = context.command + ": " + failure.error;
  check.fix = std::move(failure.fix);
  return check;
}

}  // namespace tessera::runtimes
