// doctor --probe, the effects: a throw-away root directory, one `podman run` per runtime, and the
// CONTAINERS_CONF the fixes name.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "process/process.h"
#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

// A complete static x86-64 ELF program that only calls exit_group(0): the ELF header, one
// PT_LOAD program header mapping the file at 0x400000, and `xor edi,edi; mov eax,231; syscall`.
// A root directory holding it needs no image, no registry and no network.
constexpr unsigned char kExitZeroX8664[] = {
    0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x02, 0x00, 0x3e, 0x00, 0x01, 0x00, 0x00, 0x00, 0x78, 0x00, 0x40, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x38, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x31, 0xff, 0xb8, 0xe7, 0x00, 0x00, 0x00, 0x0f, 0x05};

// A root directory with /true; podman adds its mount points (/proc, /dev, /etc/...) itself.
Result<std::string> MakeRootfs() {
#if !defined(__x86_64__)
  return FailedPrecondition("--probe without --probe-image needs an x86-64 host");
#else
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/tessera-probe-XXXXXX";
  if (!::mkdtemp(pattern.data())) return Unavailable("mkdtemp " + pattern);
  std::string program = pattern + "/true";
  {
    std::ofstream out(program, std::ios::binary);
    out.write(reinterpret_cast<const char*>(kExitZeroX8664), sizeof kExitZeroX8664);
    if (!out) return Unavailable("write " + program);
  }
  ::chmod(pattern.c_str(), 0755);
  ::chmod(program.c_str(), 0755);
  return pattern;
#endif
}

}  // namespace

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
  if (!options.image.empty()) {
    target.image = options.image;
    target.command = {"true"};
  } else {
    auto rootfs = MakeRootfs();
    if (!rootfs) {
      out.push_back(Check{"probe.rootfs", "a root directory for the probe container",
                          Verdict::kFail, rootfs.error().message,
                          "pass --probe-image with a local image that has `true`"});
      return out;
    }
    target.rootfs = *rootfs;
    target.command = {"/true"};
  }
  ProbeContext context;
  if (const char* conf = std::getenv("CONTAINERS_CONF")) context.containers_conf = conf;
  for (const auto& runtime : runtimes) {
    auto argv = ProbeArgv(options.podman, runtime, target);
    context.command = process::Describe(argv);
    process::Options run;
    run.timeout_ms = options.timeout_ms;
    auto ran = process::Run(argv, run);
    ProbeOutcome outcome;
    if (ran) {
      outcome.status = ran->status;
      outcome.timed_out = ran->timed_out;
      outcome.output = ran->output;
    } else {
      outcome.output = "Error: " + ran.error().message;
    }
    out.push_back(CheckProbe(runtime, outcome, context));
  }
  if (!target.rootfs.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(target.rootfs, ignored);
  }
  return out;
}

}  // namespace tessera::runtimes
