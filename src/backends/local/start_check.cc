#include "backends/local/start_check.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>

#include "process/process.h"
#include "runtimes/runtimes.h"

namespace tessera::backends {
namespace {

constexpr int kProbeTimeoutMs = 120000;

runtimes::ProcessLimits OwnHardLimits() {
  runtimes::ProcessLimits limits;
  auto hard = [](int resource) -> std::optional<uint64_t> {
    struct rlimit limit {};
    if (::getrlimit(resource, &limit) != 0 || limit.rlim_max == RLIM_INFINITY) return std::nullopt;
    return static_cast<uint64_t>(limit.rlim_max);
  };
  limits.open_files = hard(RLIMIT_NOFILE);
  limits.processes = hard(RLIMIT_NPROC);
  return limits;
}

std::string Describe(const runtimes::ProcessLimits& limits) {
  auto text = [](const std::optional<uint64_t>& value) {
    return value ? std::to_string(*value) : std::string("unlimited");
  };
  return "nofile " + text(limits.open_files) + ", nproc " + text(limits.processes);
}

std::string Joined(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& arg : args)
    out += (out.empty() ? "" : " ") + arg;
  return out;
}

}  // namespace

StartCheck CheckContainersStart(const std::string& podman, const std::string& runc_runtime,
                                const std::string& instance) {
  StartCheck check;
  auto rootfs = runtimes::ProbeRootfs::Create();
  if (!rootfs) {
    check.problem = "start check: " + rootfs.error().message;
    check.summary = check.problem;
    return check;
  }
  std::string runc_path = process::FindExecutable(runc_runtime);
  runtimes::ProbeRuntime runc{"runc", runc_path.empty() ? runc_runtime : runc_path, {}};
  runtimes::ProbeTarget target;
  target.rootfs = (*rootfs)->path();
  target.command = {"/true"};
  runtimes::ProbeContext context;
  if (const char* conf = std::getenv("CONTAINERS_CONF")) context.containers_conf = conf;
  auto problem_of = [&](const runtimes::ProbeOutcome& outcome) {
    context.command = process::Describe(runtimes::ProbeArgv(podman, runc, target));
    auto failure = runtimes::DiagnosePodmanFailure("runc", outcome, context);
    return failure;
  };

  auto outcome = runtimes::RunProbe(podman, runc, target, kProbeTimeoutMs);
  if (!outcome.timed_out && outcome.status == 0) {
    check.summary = "podman starts runc containers here with its default ulimits";
    return check;
  }
  auto failure = problem_of(outcome);
  if (!failure.rlimit_type) {
    check.problem = failure.error + "; fix: " + failure.fix;
    check.summary = "podman cannot start a runc container here: " + check.problem;
    return check;
  }

  // The hard limits that count: this process's, and conmon's, measured on a container started
  // with limits low enough to start anywhere.
  const runtimes::ProcessLimits own = OwnHardLimits();
  runtimes::ProcessLimits low{1024, 1024};
  std::vector<runtimes::ProcessLimits> within = {own};
  std::string conmon_note;
  auto conmon =
      runtimes::ReadConmonLimits(podman, runc, **rootfs, runtimes::UlimitArgsWithin({own, low}),
                                 "tessera-check-" + instance + "-" + std::to_string(::getpid()));
  if (conmon) {
    within.push_back(*conmon);
    conmon_note = "conmon, runc's parent, runs with " + Describe(*conmon);
  } else {
    conmon_note = "conmon's limits unknown (" + conmon.error().message + ")";
  }
  target.run_args = runtimes::UlimitArgsWithin(within);
  auto retried = runtimes::RunProbe(podman, runc, target, kProbeTimeoutMs);
  const std::string why = "podman's default ulimits cannot be set here (" + failure.error +
                          "); this process's hard limits: " + Describe(own) + "; " + conmon_note;
  if (!retried.timed_out && retried.status == 0) {
    check.run_args = target.run_args;
    check.summary = why + "; containers get " + Joined(check.run_args);
    return check;
  }
  auto second = problem_of(retried);
  check.problem = second.error + "; fix: " + second.fix;
  check.summary =
      why + "; with " + Joined(target.run_args) + " podman still fails: " + check.problem;
  return check;
}

}  // namespace tessera::backends
