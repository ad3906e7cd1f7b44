// podman CLI backend. One thread per started container follows the attached `podman run` (its
// exit status is the container's exit code, with no polling), or `podman wait` for a container
// found after a restart. Logs are podman's k8s-file logs in the service's state dir.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "backends/local/local.h"
#include "backends/local/port_forwarder.h"
#include "backends/local/start_check.h"
#include "common/atomic_file.h"
#include "process/process.h"
#include "runtimes/runtimes.h"

namespace tessera::backends {

namespace {

constexpr const char* kIdLabel = "tessera.container";
constexpr const char* kInstanceLabel = "tessera.instance";
constexpr const char* kTenancyLabel = "tessera.tenancy";
// The --runtime-flag values a container was created with, comma-separated: podman does not keep
// them (they are global flags of one podman call), yet `runsc start` needs them again when a
// created container is started after a restart.
constexpr const char* kRuntimeFlagsLabel = "tessera.runtime-flags";
// Its published ports (PortsToLabel), so a restarted service listens for them again.
constexpr const char* kPortsLabel = "tessera.ports";

std::string ContainerName(const std::string& id) {
  return "tessera-" + id;
}

BackendState StateFromPodman(const std::string& state) {
  if (state == "running" || state == "paused" || state == "stopping") return BackendState::kRunning;
  if (state == "exited" || state == "stopped") return BackendState::kExited;
  if (state == "created" || state == "configured" || state == "initialized")
    return BackendState::kCreated;
  return BackendState::kUnknown;
}

// `podman inspect` of State.Status, ExitCode, StartedAt and FinishedAt (Unix ms; the zero Go
// time, year 1, when it never started or has not ended): the line that has them, podman's
// warnings ("time=… level=warning msg=…", on stderr, read with it) around it.
Result<BackendContainer> ParseInspect(const std::string& id, const std::string& text) {
  std::istringstream lines(text);
  std::string line, status;
  int exit_code = 0;
  int64_t started_ms = 0, finished_ms = 0;
  bool found = false;
  while (!found && std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string rest;
    found = (fields >> status >> exit_code >> started_ms >> finished_ms) && !(fields >> rest) &&
            status.find('=') == std::string::npos;
  }
  if (!found)
    return Internal("podman inspect " + id + ": unexpected output \"" + text.substr(0, 120) + "\"");
  BackendContainer container{id, StateFromPodman(status), std::nullopt};
  if (container.state == BackendState::kExited) container.exit_code = exit_code;
  container.started_ms = started_ms > 0 ? started_ms : 0;
  container.finished_ms = finished_ms > 0 ? finished_ms : 0;
  container.never_started = container.state != BackendState::kRunning && started_ms <= 0;
  return container;
}

class PodmanBackend final : public ContainerBackend {
 public:
  explicit PodmanBackend(LocalOptions options)
      : options_(std::move(options)), tenancy_(TenancyOptions(options_)) {
    if (!options_.state_dir.empty()) {
      std::error_code error;
      std::filesystem::create_directories(options_.state_dir, error);
      if (error) spdlog::warn("local backend: {}: {}", options_.state_dir, error.message());
    }
    // Once: what the installed runsc can do decides every GPU submission under gVisor.
    if (!process::FindExecutable(options_.gvisor_runtime).empty()) {
      auto runsc = runtimes::ReadRunscInfo(options_.gvisor_runtime);
      if (runsc) {
        runsc_ = std::move(*runsc);
        spdlog::info("local backend: runsc {} ({}), nvproxy {}", runsc_->version, runsc_->path,
                     runsc_->nvproxy ? "yes" : "no");
      } else {
        runsc_error_ = runsc.error().message;
        spdlog::warn("local backend: {}", runsc_error_);
      }
    }
    if (options_.kata_runtime.empty()) {
      for (const char* candidate : {"kata-runtime", "kata-qemu", "containerd-shim-kata-v2"}) {
        if (!process::FindExecutable(candidate).empty()) {
          options_.kata_runtime = candidate;
          break;
        }
      }
    }
    // Beside the service's start, so the API answers meanwhile; the first Start waits for it.
    start_check_ =
        std::async(std::launch::async, [podman = options_.podman, runc = options_.runc_runtime,
                                        instance = options_.instance] {
          StartCheck check = CheckContainersStart(podman, runc, instance);
          if (!check.problem.empty())
            spdlog::error("local backend: {}", check.summary);
          else if (!check.run_args.empty())
            spdlog::warn("local backend: {}", check.summary);
          else
            spdlog::info("local backend: {}", check.summary);
          return check;
        }).share();
  }

  ~PodmanBackend() override {
    stopping_ = true;
    std::list<Follower> followers;
    {
      std::lock_guard lock(mutex_);
      // Containers keep running under conmon; only the podman clients that follow them end.
      for (auto& follower : followers_)
        if (follower.pid > 0) ::kill(follower.pid, SIGKILL);
      followers.swap(followers_);
    }
    for (auto& follower : followers)
      if (follower.thread.joinable()) follower.thread.join();
  }

  std::string name() const override { return "local"; }

  Status CheckIsolation(fleet::Isolation isolation, int gpus) const override {
    switch (isolation) {
      case fleet::Isolation::kRunc:
        if (process::FindExecutable(options_.runc_runtime).empty())
          return FailedPrecondition("isolation runc: runtime " + options_.runc_runtime +
                                    " is not installed");
        return Ok();
      case fleet::Isolation::kGvisor:
        if (process::FindExecutable(options_.gvisor_runtime).empty())
          return FailedPrecondition("isolation gvisor: gVisor runtime " + options_.gvisor_runtime +
                                    " is not installed on this host");
        if (gpus > 0 && !runsc_)
          return FailedPrecondition(
              "isolation gvisor with GPUs: cannot tell whether runsc has "
              "nvproxy: " +
              runsc_error_);
        if (gpus > 0) return runtimes::GvisorGpuSupport(*runsc_);
        return Ok();
      case fleet::Isolation::kKata:
        if (options_.kata_runtime.empty())
          return FailedPrecondition(
              "isolation kata: no Kata Containers runtime is installed on this host "
              "(looked for kata-runtime, kata-qemu, containerd-shim-kata-v2 in PATH)");
        return Ok();
    }
    return InvalidArgument("isolation: unknown");
  }

  Status CheckShare(fleet::Isolation isolation) const override {
    switch (isolation) {
      case fleet::Isolation::kRunc:
        return Ok();
      case fleet::Isolation::kGvisor:
        if (!runsc_)
          return InvalidArgument("share: isolation gvisor: cannot tell what runsc supports: " +
                                 runsc_error_);
        return runtimes::GvisorMpsSupport(*runsc_);
      case fleet::Isolation::kKata:
        break;
    }
    return InvalidArgument("share: a Kata VM takes whole GPUs (VFIO); shares run with runc");
  }

  Status Start(const StartRequest& request, ExitCallback on_exit) override {
    if (auto status = CheckIsolation(request.isolation, int(request.cdi_devices.size())); !status)
      return status;
    // One attached `podman run` per container (one podman start-up, as a user's own `podman
    // run`); its exit status is the container's. Start returns once podman has created the
    // container (it writes the ID file right after creating it), so a restart of the service
    // right after Start always finds the container. A client left behind by a killed service
    // goes on (killing podman halfway through a start leaves a container no `podman start`
    // can start); List() waits for such clients to get past creating their container.
    const std::string cid_file = StatePath(request.id, ".cid");
    std::vector<std::string> argv = RunArgs(request, cid_file);
    if (auto status = PrepareForStart(request); !status) return status;
    AppendMountsAndCommand(request, &argv);
    // Its host ports are listened on before it runs: they are this container's from now on.
    if (auto status = PublishPorts(request); !status) return status;
    spdlog::debug("local backend: {}", process::Describe(argv));
    auto child = process::Spawn(argv);
    if (!child) {
      forwarder_.Remove(request.id);
      return child.error();
    }
    auto handoff = std::make_shared<StartHandoff>();
    Follow(request.id, *child, std::move(on_exit), false, RuntimeFor(request.isolation), handoff);
    auto created = AwaitCreated(request, cid_file, child->pid, *handoff);
    if (!created) forwarder_.Remove(request.id);
    return created;
  }

  Status Watch(const std::string& id, ExitCallback on_exit) override {
    RestorePorts(id);
    auto child = process::Spawn({options_.podman, "wait", ContainerName(id)});
    if (!child) return child.error();
    Follow(id, *child, std::move(on_exit), true, "its OCI runtime");
    return Ok();
  }

  Status Resume(const std::string& id, ExitCallback on_exit) override {
    RestorePorts(id);
    // A client of the service that died may still be starting it: then only wait.
    auto clients = LiveRunClientIdFiles();
    if (std::find(clients.begin(), clients.end(), StatePath(id, ".cid")) != clients.end())
      return Watch(id, std::move(on_exit));
    // Attached start of a created container: its exit status is the container's, as for run.
    // The runtime flags it was created with apply again (runsc sets up its network at start).
    auto flags = Podman(
        {"inspect", "--type", "container", "--format",
         "{{index .Config.Labels \"" + std::string(kRuntimeFlagsLabel) + "\"}}", ContainerName(id)},
        30000, /*capture_stderr=*/false);
    if (!flags) return flags.error();
    if (flags->status != 0) return Classify("inspect " + id, *flags);
    std::vector<std::string> argv = {options_.podman};
    std::string joined = flags->output;
    while (!joined.empty() && (joined.back() == '\n' || joined.back() == ' '))
      joined.pop_back();
    if (joined == "<no value>") joined.clear();
    for (size_t at = 0; at < joined.size();) {
      size_t comma = std::min(joined.find(',', at), joined.size());
      argv.push_back("--runtime-flag");
      argv.push_back(joined.substr(at, comma - at));
      at = comma + 1;
    }
    argv.insert(argv.end(), {"start", "--attach", ContainerName(id)});
    auto child = process::Spawn(argv);
    if (!child) return child.error();
    Follow(id, *child, std::move(on_exit), false, "its OCI runtime");
    return Ok();
  }

  Status Stop(const std::string& id, std::chrono::seconds grace) override {
    auto outcome = Podman({"stop", "--time", std::to_string(grace.count()), ContainerName(id)},
                          static_cast<int>(grace.count()) * 1000 + 30000);
    if (!outcome) return outcome.error();
    if (outcome->status != 0) return Classify("stop " + id, *outcome);
    return Ok();
  }

  Result<BackendContainer> Inspect(const std::string& id) override {
    // State.StartedAt and State.FinishedAt are Go times: the zero time (year 1) when the
    // container never started or has not ended.
    auto outcome = Podman({"inspect", "--type", "container", "--format",
                           "{{.State.Status}} {{.State.ExitCode}} {{.State.StartedAt.UnixMilli}} "
                           "{{.State.FinishedAt.UnixMilli}}",
                           ContainerName(id)},
                          30000);
    if (!outcome) return outcome.error();
    if (outcome->status != 0) return Classify("inspect " + id, *outcome);
    auto container = ParseInspect(id, outcome->output);
    if (!container) return container.error();
    return *container;
  }

  Result<std::string> Logs(const std::string& id) override {
    constexpr size_t kMaxLog = 8 << 20;  // the last 8 MiB, as for `podman logs`
    const std::string path = StatePath(id, ".log");
    if (!path.empty()) {
      // The log podman writes for a container this service started: read without a podman call.
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        std::string text;
        off_t size = ::lseek(fd, 0, SEEK_END);
        off_t from = size > static_cast<off_t>(kMaxLog) ? size - static_cast<off_t>(kMaxLog) : 0;
        text.resize(static_cast<size_t>(size - from));
        ssize_t got = size > from ? ::pread(fd, text.data(), text.size(), from) : 0;
        ::close(fd);
        if (got >= 0) {
          text.resize(static_cast<size_t>(got));
          if (from > 0) text.erase(0, text.find('\n') + 1);  // drop the cut first record
          return TextOfCriLog(text);
        }
      }
    }
    process::Options options;
    options.timeout_ms = 30000;
    options.max_output = kMaxLog;
    auto outcome = process::Run({options_.podman, "logs", ContainerName(id)}, options);
    if (!outcome) return outcome.error();
    if (outcome->status != 0) return Classify("logs " + id, *outcome);
    return outcome->output;
  }

  // Offsets are bytes of the k8s-file log this service started it with; without one, `podman
  // logs`'s text (ContainerBackend's numbering).
  Result<LogPart> LogsFrom(const std::string& id, uint64_t offset) override {
    constexpr size_t kMaxPart = 8 << 20;  // as for Logs()
    const std::string path = StatePath(id, ".log");
    int fd = path.empty() ? -1 : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ContainerBackend::LogsFrom(id, offset);
    auto part = ReadCriLogFrom(fd, offset, kMaxPart);
    ::close(fd);
    return part;
  }

  Result<std::vector<BackendContainer>> List() override {
    WaitForRunClientsToCreate();
    auto outcome = Podman(
        {"ps", "--all", "--filter",
         "label=" + std::string(kInstanceLabel) + "=" + options_.instance, "--format", "json"},
        60000, /*capture_stderr=*/false);
    if (!outcome) return outcome.error();
    if (outcome->status != 0) return Classify("ps", *outcome);
    auto doc = nlohmann::json::parse(outcome->output, nullptr, false);
    if (doc.is_discarded() || !doc.is_array())
      return Internal("podman ps --format json: not a JSON array");
    std::vector<BackendContainer> out;
    for (const auto& entry : doc) {
      if (!entry.is_object() || !entry.contains("Labels") || !entry["Labels"].is_object()) continue;
      const auto& labels = entry["Labels"];
      if (!labels.contains(kIdLabel) || !labels[kIdLabel].is_string()) continue;
      BackendContainer container;
      container.id = labels[kIdLabel].get<std::string>();
      container.state = StateFromPodman(entry.value("State", ""));
      if (container.state == BackendState::kExited && entry.contains("ExitCode") &&
          entry["ExitCode"].is_number_integer())
        container.exit_code = entry["ExitCode"].get<int>();
      // Whole seconds here (Inspect has milliseconds); 0 or less: never.
      auto seconds = [&entry](const char* key) -> int64_t {
        auto value = entry.find(key);
        if (value == entry.end() || !value->is_number_integer()) return 0;
        const int64_t s = value->get<int64_t>();
        return s > 0 && s < INT64_MAX / 1000 ? s * 1000 : 0;
      };
      container.started_ms = seconds("StartedAt");
      container.finished_ms = seconds("ExitedAt");
      container.never_started =
          container.state != BackendState::kRunning && container.started_ms == 0;
      out.push_back(std::move(container));
    }
    return out;
  }

  // The ID podman wrote into the container's ID file when it created it (--cidfile).
  Result<std::string> RuntimeId(const std::string& id) override {
    const std::string cid_file = StatePath(id, ".cid");
    if (cid_file.empty()) return NotFound("local backend: no state dir for " + id);
    auto text = ReadWholeFile(cid_file);
    if (!text) return text.error();
    std::string runtime_id = text->substr(0, 64);
    if (runtime_id.size() != 64 ||
        runtime_id.find_first_not_of("0123456789abcdef") != std::string::npos)
      return NotFound("local backend: " + cid_file + " holds no container ID");
    return runtime_id;
  }

  Status PrepareTenancy(const std::string& tenancy,
                        const tenancy::StorageEntitlements& storage) override {
    std::lock_guard lock(tenancy_mutex_);
    if (options_.tenant_networks) {
      auto network = tenancy_.EnsureNetwork(tenancy);
      if (!network) return network.error();
      networks_ready_.insert(tenancy);
    }
    return tenancy_.SyncVolumes(tenancy, storage);
  }

  Status ReleaseTenancy(const std::string& tenancy) override {
    std::lock_guard lock(tenancy_mutex_);
    if (auto status = tenancy_.SyncVolumes(tenancy, {}); !status) return status;
    networks_ready_.erase(tenancy);
    if (!options_.tenant_networks) return Ok();
    // The service checked that the tenancy has no container left; podman checks it again.
    return tenancy_.RemoveNetwork(tenancy, true, 0);
  }

  Status Remove(const std::string& id) override {
    auto outcome = Podman({"rm", "--force", "--time", "5", ContainerName(id)}, 60000);
    if (!outcome) return outcome.error();
    if (outcome->status != 0) return Classify("rm " + id, *outcome);
    for (const char* suffix : {".cid", ".log"}) {
      std::string path = StatePath(id, suffix);
      if (!path.empty()) ::unlink(path.c_str());
    }
    return Ok();
  }

 private:
  static tenancy::PodmanTenancyOptions TenancyOptions(const LocalOptions& options) {
    tenancy::PodmanTenancyOptions out;
    out.podman = options.podman;
    out.iptables = options.iptables;
    out.firewall = options.tenant_firewall;
    return out;
  }

  // The tenancy's network (once per process: EnsureNetwork is idempotent but costs several
  // podman and iptables calls) and the volumes this container mounts.
  Status PrepareForStart(const StartRequest& request) {
    std::lock_guard lock(tenancy_mutex_);
    if (options_.tenant_networks && request.network == tenancy::NetworkMode::kTenancy &&
        !networks_ready_.count(request.tenancy)) {
      auto network = tenancy_.EnsureNetwork(request.tenancy);
      if (!network) return network.error();
      networks_ready_.insert(request.tenancy);
    }
    for (const auto& volume : request.volumes) {
      auto created = tenancy_.EnsureVolume(request.tenancy, volume.source);
      if (!created) return created.error();
    }
    return Ok();
  }

  struct Follower {
    std::string id;
    pid_t pid = -1;
    std::thread thread;
  };

  // podman --runtime-flag values (runsc only). runsc's default network (a netstack of its own,
  // "sandbox") fails under podman 4.3: "cannot run with network enabled in root network
  // namespace". network=host makes gVisor use the network namespace podman made for the container
  // (its tenancy's network, fenced as for runc); network=none gives it loopback only. GPUs need
  // nvproxy, which CheckIsolation made sure of.
  std::vector<std::string> RuntimeFlagsFor(const StartRequest& request) const {
    if (request.isolation != fleet::Isolation::kGvisor) return {};
    std::vector<std::string> flags;
    flags.push_back(request.network == tenancy::NetworkMode::kNone ? "network=none"
                                                                   : "network=host");
    if (!request.cdi_devices.empty()) flags.push_back("nvproxy=true");
    return flags;
  }

  std::string RuntimeFor(fleet::Isolation isolation) const {
    switch (isolation) {
      case fleet::Isolation::kGvisor:
        return options_.gvisor_runtime;
      case fleet::Isolation::kKata:
        return options_.kata_runtime;
      default:
        return options_.runc_runtime;
    }
  }

  // The listeners of its published ports (port_forwarder.h). UDP is not forwarded: refused.
  Status PublishPorts(const StartRequest& request) {
    for (const auto& port : request.ports)
      if (port.protocol != "tcp")
        return InvalidArgument("port " + std::to_string(port.container_port) + "/" + port.protocol +
                               ": the local backend publishes tcp ports only");
    if (request.ports.empty()) return Ok();
    return forwarder_.Add(request.id, request.ports);
  }

  // A container found after a restart: its ports are listened on again (from its label).
  void RestorePorts(const std::string& id) {
    auto label =
        Podman({"inspect", "--type", "container", "--format",
                "{{index .Config.Labels \"" + std::string(kPortsLabel) + "\"}}", ContainerName(id)},
               30000, /*capture_stderr=*/false);
    if (!label || label->status != 0) return;
    std::string text = label->output;
    while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
      text.pop_back();
    if (text.empty() || text == "<no value>") return;
    if (auto status = forwarder_.Add(id, PortsFromLabel(text)); !status)
      spdlog::warn("container {}: its published ports: {}", id, status.error().message);
  }

  // Where a running container is reached: its PID (network namespace) and its address.
  Result<ForwardTarget> Locate(const std::string& id) {
    auto inspected = Podman({"inspect", "--type", "container", "--format",
                             "{{.State.Pid}} {{range .NetworkSettings.Networks}}{{.IPAddress}} "
                             "{{end}}",
                             ContainerName(id)},
                            30000, /*capture_stderr=*/false);
    if (!inspected) return inspected.error();
    if (inspected->status != 0) return Classify("inspect " + id, *inspected);
    std::istringstream fields(inspected->output);
    ForwardTarget target;
    if (!(fields >> target.pid) || target.pid <= 0 || !(fields >> target.address))
      return Unavailable("container " + id + " is not running on a network");
    return target;
  }

  Result<process::Outcome> Podman(std::vector<std::string> args, int timeout_ms,
                                  bool capture_stderr = true) {
    args.insert(args.begin(), options_.podman);
    process::Options options;
    options.timeout_ms = timeout_ms;
    options.capture_stderr = capture_stderr;
    return process::Run(args, options);
  }

  // A container podman could not start: its error line with doctor's diagnosis and fix (podman's
  // whole output says less and may be long).
  static std::string Diagnosis(const std::string& runtime, const process::Outcome& outcome) {
    runtimes::ProbeOutcome probe{outcome.status, outcome.timed_out, outcome.output};
    runtimes::ProbeContext context;
    if (const char* conf = std::getenv("CONTAINERS_CONF")) context.containers_conf = conf;
    auto failure = runtimes::DiagnosePodmanFailure(runtime, probe, context);
    return failure.error + "; fix: " + failure.fix;
  }
  Error StartFailed(const StartRequest& request, const process::Outcome& outcome) const {
    std::string message =
        "podman run " + request.id + ": " + Diagnosis(RuntimeFor(request.isolation), outcome);
    if (outcome.timed_out) return Unavailable(message);
    return Internal(message);
  }

  static Error Classify(const std::string& what, const process::Outcome& outcome) {
    std::string message = "podman " + what + ": " + outcome.output;
    while (!message.empty() && (message.back() == '\n' || message.back() == ' '))
      message.pop_back();
    if (outcome.timed_out) return Unavailable(message + " (timed out)");
    if (outcome.output.find("no such container") != std::string::npos ||
        outcome.output.find("no container with name or ID") != std::string::npos)
      return NotFound(message);
    return Internal(message);
  }

  // Between Start and the thread following the `podman run` it spawned: whether podman ended
  // before the container existed, in which case Start reports the failure and on_exit is not
  // called.
  struct StartHandoff {
    std::mutex mutex;
    std::condition_variable changed;
    bool finished = false;       // podman ended (follower)
    process::Outcome outcome;    // how (follower)
    bool start_decided = false;  // Start has returned or is returning (Start)
    bool start_failed = false;   // ... with an error (Start)
  };

  // `podman run` up to its network: runtime flags, name, ID and log files, labels, runtime,
  // devices and environment.
  std::vector<std::string> RunArgs(const StartRequest& request, const std::string& cid_file) {
    const std::vector<std::string> runtime_flags = RuntimeFlagsFor(request);
    std::vector<std::string> argv = {options_.podman};
    for (const auto& flag : runtime_flags) {
      argv.push_back("--runtime-flag");
      argv.push_back(flag);
    }
    argv.insert(argv.end(), {"run", "--sig-proxy=false", "--name", ContainerName(request.id)});
    if (!cid_file.empty()) {
      ::unlink(cid_file.c_str());  // podman refuses an existing ID file
      argv.push_back("--cidfile=" + cid_file);
      argv.push_back("--log-driver=k8s-file");
      argv.push_back("--log-opt=path=" + StatePath(request.id, ".log"));
      if (options_.log_max_bytes > 0)
        argv.push_back("--log-opt=max-size=" + std::to_string(options_.log_max_bytes));
    }
    argv.push_back("--label=" + std::string(kIdLabel) + "=" + request.id);
    argv.push_back("--label=" + std::string(kInstanceLabel) + "=" + options_.instance);
    argv.push_back("--label=" + std::string(kTenancyLabel) + "=" + request.tenancy);
    if (!runtime_flags.empty()) {
      std::string joined;
      for (const auto& flag : runtime_flags)
        joined += (joined.empty() ? "" : ",") + flag;
      argv.push_back("--label=" + std::string(kRuntimeFlagsLabel) + "=" + joined);
    }
    if (auto ports = PortsToLabel(request.ports); !ports.empty())
      argv.push_back("--label=" + std::string(kPortsLabel) + "=" + ports);
    for (const auto& [key, value] : request.labels)
      argv.push_back("--label=" + key + "=" + value);
    argv.push_back("--runtime=" + RuntimeFor(request.isolation));
    for (const auto& arg : start_check_.get().run_args)
      argv.push_back(arg);
    for (const auto& device : request.cdi_devices)
      argv.push_back("--device=" + device);
    for (const auto& [key, value] : request.env)
      argv.push_back("--env=" + key + "=" + value);
    return argv;
  }

  // The rest of `podman run`: network, volumes, binds, extra arguments, the image and command.
  void AppendMountsAndCommand(const StartRequest& request, std::vector<std::string>* argv) const {
    if (options_.tenant_networks || request.network == tenancy::NetworkMode::kNone) {
      for (auto& arg : tenancy::ContainerNetworkArgs(request.tenancy, request.network))
        argv->push_back(std::move(arg));
    }
    for (auto& arg : tenancy::ContainerVolumeArgs(request.volumes))
      argv->push_back(std::move(arg));
    // A bind over /dev/shm replaces podman's own tmpfs there.
    for (const auto& bind : request.binds)
      argv->push_back("--mount=type=bind,source=" + bind.host_path +
                      ",destination=" + bind.container_path + (bind.read_only ? ",ro=true" : ""));
    for (const auto& arg : options_.extra_run_args)
      argv->push_back(arg);
    argv->push_back(request.image);
    for (const auto& arg : request.command)
      argv->push_back(arg);
  }

  // Until the ID file appears, or podman ends without one (nothing was created: Start fails
  // and the follower stays silent). The image pull, when needed, happens in here too.
  Status AwaitCreated(const StartRequest& request, const std::string& cid_file, pid_t pid,
                      StartHandoff& handoff) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    std::unique_lock lock(handoff.mutex);
    for (;;) {
      if (cid_file.empty() || IdFileWritten(cid_file)) break;
      if (handoff.finished) {
        if (IdFileWritten(cid_file)) break;  // created, and already ended
        handoff.start_failed = true;
        handoff.start_decided = true;
        handoff.changed.notify_all();
        return StartFailed(request, handoff.outcome);
      }
      if (std::chrono::steady_clock::now() > deadline) {
        lock.unlock();
        ::kill(pid, SIGKILL);  // the follower reports it as not run
        lock.lock();
        break;
      }
      handoff.changed.wait_for(lock, std::chrono::milliseconds(2));
    }
    handoff.start_decided = true;
    handoff.changed.notify_all();
    return Ok();
  }

  // A thread that reads the client's output, reaps it, and decides how the container ended.
  // `runtime` is what a diagnosis of a failed start names ("runc").
  void Follow(const std::string& id, process::Child child, ExitCallback on_exit, bool waited,
              std::string runtime, std::shared_ptr<StartHandoff> handoff = nullptr) {
    std::lock_guard lock(mutex_);
    // Reap followers that are done, so the list stays as long as the running set.
    for (auto it = followers_.begin(); it != followers_.end();) {
      if (it->pid == 0 && it->thread.get_id() != std::this_thread::get_id()) {
        it->thread.join();
        it = followers_.erase(it);
      } else {
        ++it;
      }
    }
    auto& follower = followers_.emplace_back();
    follower.id = id;
    follower.pid = child.pid;
    Follower* self = &follower;
    follower.thread = std::thread(
        [this, self, id, child, waited, runtime, handoff, on_exit = std::move(on_exit)] {
          process::Outcome outcome = process::Finish(child);
          // Its ports stop forwarding once it has ended (the service frees them then).
          forwarder_.Remove(id);
          {
            std::lock_guard lock(mutex_);
            self->pid = 0;
          }
          if (handoff) {
            std::unique_lock lock(handoff->mutex);
            handoff->finished = true;
            handoff->outcome = outcome;
            handoff->changed.notify_all();
            handoff->changed.wait(lock, [&] { return handoff->start_decided; });
            if (handoff->start_failed) return;
          }
          if (stopping_) return;
          on_exit(id, Conclude(id, outcome, waited, runtime));
        });
  }

  // <state_dir>/<id><suffix>, or empty without a state dir.
  std::string StatePath(const std::string& id, const char* suffix) const {
    if (options_.state_dir.empty()) return "";
    return options_.state_dir + "/" + id + suffix;
  }

  // The ID files that live `podman run` clients (of any process, e.g. a service that was
  // killed) were told to write into this state dir, found by their --cidfile argument.
  std::vector<std::string> LiveRunClientIdFiles() const {
    std::vector<std::string> out;
    if (options_.state_dir.empty()) return out;
    const std::string flag = "--cidfile=";
    const std::string prefix = flag + options_.state_dir + "/";
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
      std::string name = entry.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      int fd = ::open((entry.path() / "cmdline").c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char buffer[16384];
      ssize_t n = ::read(fd, buffer, sizeof(buffer));
      ::close(fd);
      if (n <= 0) continue;
      std::string_view cmdline(buffer, static_cast<size_t>(n));
      for (size_t at = 0; at < cmdline.size();) {
        size_t end = std::min(cmdline.find('\0', at), cmdline.size());
        std::string_view arg = cmdline.substr(at, end - at);
        if (arg.substr(0, prefix.size()) == prefix) {
          out.emplace_back(arg.substr(flag.size()));
          break;
        }
        at = end + 1;
      }
    }
    return out;
  }

  // A service killed while podman was creating a container leaves the client running; until it
  // has written the ID file, `podman ps` may not show the container yet, and the container would
  // look vanished. Waits (at most as long as Start would) for each such client to write its
  // ID file or end.
  void WaitForRunClientsToCreate() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    for (;;) {
      auto files = LiveRunClientIdFiles();
      bool creating = std::any_of(files.begin(), files.end(),
                                  [](const std::string& file) { return !IdFileWritten(file); });
      if (!creating || std::chrono::steady_clock::now() > deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  static bool IdFileWritten(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
  }

  // podman run exits with the container's status, or 125 when podman itself failed (126/127:
  // the command could not be run; 128+n: killed by signal n). Those are ambiguous, so podman is
  // asked what happened; `podman wait` (a followed container) prints the exit code.
  ExitInfo Conclude(const std::string& id, const process::Outcome& outcome, bool waited,
                    const std::string& runtime) {
    if (!waited && outcome.status >= 0 && outcome.status < 125) {
      return ExitInfo{outcome.status, false, ""};
    }
    if (waited && outcome.status == 0) {
      // `podman wait` prints the container's exit code.
      std::string text = outcome.output;
      while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
        text.pop_back();
      if (!text.empty() && text.size() < 10 &&
          text.find_first_not_of("-0123456789") == std::string::npos) {
        return ExitInfo{std::stoi(text), false, ""};
      }
    }
    auto inspected = Inspect(id);
    if (inspected && inspected->state == BackendState::kExited && inspected->exit_code) {
      ExitInfo info{inspected->exit_code, false, ""};
      info.finished_ms = inspected->finished_ms;
      info.never_started = inspected->never_started;
      return info;
    }
    const std::string reason = Diagnosis(runtime, outcome);
    ExitInfo info{std::nullopt, true, "container did not run: " + reason};
    if (!inspected && inspected.error().category == ErrorCategory::kNotFound)
      info.reason = "container could not be created: " + reason;
    // Created but never started (its command could not be run, say): nothing is billed.
    info.never_started = !inspected || inspected->never_started;
    if (inspected) info.finished_ms = inspected->finished_ms;
    return info;
  }

  LocalOptions options_;
  std::shared_future<StartCheck> start_check_;  // set at creation, ready once podman answered
  std::optional<runtimes::RunscInfo> runsc_;    // set at creation when runsc answered
  std::string runsc_error_;                     // why it did not, when installed
  tenancy::PodmanTenancy tenancy_;
  std::mutex tenancy_mutex_;              // serializes network/volume changes
  std::set<std::string> networks_ready_;  // tenancies whose network exists (tenancy_mutex_)
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;               // guards followers_
  std::list<Follower> followers_;  // stable addresses: each thread updates its own entry
  // Last: the followers (joined in the destructor's body) remove their containers' listeners.
  PortForwarder forwarder_{[this](const std::string& id) { return Locate(id); }};
};

}  // namespace

std::unique_ptr<ContainerBackend> CreateLocalBackend(LocalOptions options) {
  return std::make_unique<PodmanBackend>(std::move(options));
}

}  // namespace tessera::backends
