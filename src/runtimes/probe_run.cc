// doctor --probe and the local backend's start check, the effects: a throw-away root directory,
// one `podman run` per runtime, the CONTAINERS_CONF the fixes name, and conmon's limits.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "process/process.h"
#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

// A complete static x86-64 ELF program: the ELF header, one PT_LOAD program header mapping the
// file at 0x400000, and 9 bytes of code at 0x400078 (the last 9 bytes).
constexpr unsigned char kElfHeaders[] = {
    0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x02, 0x00, 0x3e, 0x00, 0x01, 0x00, 0x00, 0x00, 0x78, 0x00, 0x40, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x38, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
// `xor edi,edi; mov eax,231; syscall`: exit_group(0).
constexpr unsigned char kExitZeroCode[] = {0x31, 0xff, 0xb8, 0xe7, 0x00, 0x00, 0x00, 0x0f, 0x05};
// `mov eax,34; syscall; jmp -9`: pause() until a signal ends it.
constexpr unsigned char kPauseCode[] = {0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7};
static_assert(sizeof kElfHeaders + sizeof kExitZeroCode == 0x81);
static_assert(sizeof kElfHeaders + sizeof kPauseCode == 0x81);

Status WriteProgram(const std::string& path, const unsigned char (&code)[9]) {
  std::string program(reinterpret_cast<const char*>(kElfHeaders), sizeof kElfHeaders);
  program.append(reinterpret_cast<const char*>(code), sizeof code);
  return WriteFileAtomically(path, program, 0755);
}

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  return text;
}

}  // namespace

Result<std::unique_ptr<ProbeRootfs>> ProbeRootfs::Create() {
#if !defined(__x86_64__)
  return FailedPrecondition("a probe root directory needs an x86-64 host (its programs are)");
#else
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/tessera-probe-XXXXXX";
  if (!::mkdtemp(pattern.data())) return Unavailable("mkdtemp " + pattern);
  // podman adds the mount points (/proc, /dev, /etc/...) itself.
  std::unique_ptr<ProbeRootfs> rootfs(new ProbeRootfs(pattern));
  ::chmod(pattern.c_str(), 0755);
  if (auto written = WriteProgram(pattern + "/true", kExitZeroCode); !written)
    return written.error();
  if (auto written = WriteProgram(pattern + "/pause", kPauseCode); !written) return written.error();
  return rootfs;
#endif
}

ProbeRootfs::~ProbeRootfs() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

ProbeOutcome RunProbe(const std::string& podman, const ProbeRuntime& runtime,
                      const ProbeTarget& target, int timeout_ms) {
  process::Options run;
  run.timeout_ms = timeout_ms;
  auto ran = process::Run(ProbeArgv(podman, runtime, target), run);
  ProbeOutcome outcome;
  if (ran) {
    outcome.status = ran->status;
    outcome.timed_out = ran->timed_out;
    outcome.output = ran->output;
  } else {
    outcome.output = "Error: " + ran.error().message;
  }
  return outcome;
}

Result<ProcessLimits> ReadConmonLimits(const std::string& podman, const ProbeRuntime& runtime,
                                       const ProbeRootfs& rootfs,
                                       const std::vector<std::string>& run_args,
                                       const std::string& name) {
  process::Options quick;
  quick.timeout_ms = 60000;
  std::vector<std::string> argv = {podman,      "run",  "--detach",  "--name",       name,
                                   "--network", "none", "--runtime", runtime.runtime};
  argv.insert(argv.end(), run_args.begin(), run_args.end());
  argv.insert(argv.end(), {"--rootfs", rootfs.path(), "/pause"});
  auto started = process::Run(argv, quick);
  // Removed whatever happened, so nothing of the probe is left behind.
  auto remove = [&] { (void)process::Run({podman, "rm", "--force", "--time", "0", name}, quick); };
  if (!started || started->status != 0) {
    remove();
    if (!started) return started.error();
    return Unavailable(process::Describe(argv) + ": " + Trimmed(started->output));
  }
  auto pid = process::Run({podman, "inspect", "--format", "{{.State.ConmonPid}}", name}, quick);
  Result<ProcessLimits> limits = Unavailable("podman inspect " + name + ": no conmon PID");
  if (pid && pid->status == 0) {
    std::string path = "/proc/" + Trimmed(pid->output) + "/limits";
    auto text = ReadBoundedFile(path, kMaxStateFileBytes);
    limits = text ? ParseProcLimits(*text) : Result<ProcessLimits>(text.error());
    if (!limits) limits = limits.error().WithContext(path);
  }
  remove();
  return limits;
}

std::vector<Check> RunProbes(const ProbeOptions& options) {
  std::vector<Check> out;
  auto runtimes = ProbeRuntimes(process::FindExecutable);
  if (runtimes.empty()) {
    out.push_back(Check{"probe.runtimes", "an OCI runtime for podman is installed", Verdict::kFail,
                        "none of runc, runsc, kata-runtime, kata-qemu in PATH",
                        "apt-get install runc"});
    return out;
  }
  ProbeTarget target;
  std::unique_ptr<ProbeRootfs> rootfs;
  if (!options.image.empty()) {
    target.image = options.image;
    target.command = {"true"};
  } else {
    auto made = ProbeRootfs::Create();
    if (!made) {
      out.push_back(Check{"probe.rootfs", "a root directory for the probe container",
                          Verdict::kFail, made.error().message,
                          "pass --probe-image with a local image that has `true`"});
      return out;
    }
    rootfs = std::move(*made);
    target.rootfs = rootfs->path();
    target.command = {"/true"};
  }
  ProbeContext context;
  if (const char* conf = std::getenv("CONTAINERS_CONF")) context.containers_conf = conf;
  for (const auto& runtime : runtimes) {
    context.command = process::Describe(ProbeArgv(options.podman, runtime, target));
    out.push_back(CheckProbe(runtime, RunProbe(options.podman, runtime, target, options.timeout_ms),
                             context));
  }
  return out;
}

}  // namespace tessera::runtimes
