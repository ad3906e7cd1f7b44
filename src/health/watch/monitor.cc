// The Monitor: one thread that waits for NVML events (critical Xids, double-bit ECC errors) and
// hands each to the sink at once, then reads the GPU's state; between events it reads every
// GPU's NVML state and the sysfs view of GPUs no driver holds on the poll interval, and hands
// over each fact that turned bad. Suspend() closes NVML for a reset.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "health/watch/signals.h"
#include "health/watch/watch.h"

namespace tessera::health {

namespace monitor_detail {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One watched GPU and what was last read of it (the thread's baseline for changes).
struct Watched {
  WatchedGpu gpu;
  std::optional<nvml::Gpu> handle;  // NVML GPUs, while NVML is open and knows the GPU
  bool read = false;                // a first state was read
  GpuState state;                   // NVML GPUs
  SysfsState sysfs;                 // GPUs without the driver
};

// The NVML state of one GPU (a lost GPU answers GPU_IS_LOST to every read).
GpuState ReadNvmlState(const nvml::Library& library, nvml::Gpu gpu) {
  GpuState state;
  auto note = [&state](nvml::ReadStatus status) {
    if (status == nvml::ReadStatus::kGpuLost) state.lost = true;
  };
  auto rows = library.RemappedRows(gpu);
  note(rows.status);
  if (rows.ok()) {
    state.remap_pending = rows.value.pending;
    state.remap_failure = rows.value.failure;
  }
  auto retired = library.RetiredPagesPending(gpu);
  note(retired.status);
  if (retired.ok()) state.retired_pages_pending = retired.value;
  auto ecc = library.VolatileUncorrectedEcc(gpu);
  note(ecc.status);
  if (ecc.ok()) state.uncorrected_volatile_ecc = ecc.value;
  auto action = library.RecoveryAction(gpu);
  note(action.status);
  if (action.ok()) state.recovery_action = RecoveryActionOf(action.value);
  if (!state.lost) {
    if (auto processes = library.RunningProcessCount(gpu)) state.processes = *processes;
  }
  return state;
}

class NvmlMonitor final : public Monitor {
 public:
  NvmlMonitor(MonitorOptions options, std::vector<WatchedGpu> gpus, Sink sink)
      : options_(std::move(options)), sink_(std::move(sink)) {
    for (auto& gpu : gpus)
      gpus_.push_back(Watched{std::move(gpu), std::nullopt, false, {}, {}});
  }

  ~NvmlMonitor() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Status Begin();
  GpuState ReadState(const std::string& pci_address) override;
  void Suspend() override;
  void Resume() override;

 private:
  bool WantsNvml() const {
    for (const Watched& watched : gpus_)
      if (watched.gpu.nvidia_driver) return true;
    return false;
  }
  Status OpenNvml();
  bool FindHandle(Watched& watched, bool* lost);
  GpuState ReadWatched(Watched& watched);
  void Poll(Watched& watched, int64_t now_ms, std::vector<Signal>& out);
  void PollAll(std::vector<Signal>& out);
  std::optional<Signal> OnEvent(const nvml::Event& event, Watched** watched);
  void Emit(std::unique_lock<std::mutex>& lock, std::vector<Signal>& signals);
  void WaitForEvent(std::unique_lock<std::mutex>& lock, std::vector<Signal>& out, bool& poll_now);
  void Run();

  const MonitorOptions options_;
  const Sink sink_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_ = false;
  bool suspended_ = false;
  bool parked_ = false;  // the thread waits for Resume and holds no NVML
  bool events_ = false;  // some GPU is registered for events
  std::shared_ptr<nvml::Library> library_;
  std::vector<Watched> gpus_;
  std::vector<Signal> first_signals_;  // Begin's first read, handed over by the thread
  std::thread thread_;
};

Status NvmlMonitor::OpenNvml() {
  auto opened = nvml::Library::Open(options_.nvml_library);
  if (!opened) return opened.error();
  library_ = std::shared_ptr<nvml::Library>(std::move(*opened));
  events_ = false;
  for (Watched& watched : gpus_) {
    watched.handle.reset();
    bool lost = false;
    if (watched.gpu.nvidia_driver) FindHandle(watched, &lost);
  }
  return Ok();
}

// Looks the GPU up in NVML and registers it for events; `lost` when NVML answers GPU_IS_LOST.
bool NvmlMonitor::FindHandle(Watched& watched, bool* lost) {
  auto handle = library_->HandleByPci(watched.gpu.pci_address);
  *lost = handle.status == nvml::ReadStatus::kGpuLost;
  if (!handle.ok()) return false;
  watched.handle = handle.value;
  constexpr uint64_t kTypes = nvml::kEventXidCriticalError | nvml::kEventDoubleBitEccError;
  if (library_->RegisterEvents(handle.value, kTypes).ok()) events_ = true;
  return true;
}

// The GPU's state now, from NVML or sysfs (mutex_ held).
GpuState NvmlMonitor::ReadWatched(Watched& watched) {
  if (!watched.gpu.nvidia_driver) {
    SysfsState sysfs = ReadSysfs(options_.root, watched.gpu.pci_address);
    GpuState state;
    state.lost = sysfs.gone || sysfs.config_ones;
    return state;
  }
  if (!library_) return watched.state;  // suspended, or no NVML: what was read last
  bool lost = false;
  if (!watched.handle && !FindHandle(watched, &lost)) {
    GpuState state;
    state.lost = lost;
    return state;
  }
  return ReadNvmlState(*library_, *watched.handle);
}

// Reads one GPU and adds a signal for each fact that turned bad since the last read. The first
// read compares with a healthy GPU, except for the counters (their totals before the watch
// began are no news).
void NvmlMonitor::Poll(Watched& watched, int64_t now_ms, std::vector<Signal>& out) {
  const std::string& pci = watched.gpu.pci_address;
  if (!watched.gpu.nvidia_driver) {
    SysfsState now = ReadSysfs(options_.root, pci);
    SysfsState before = watched.read ? watched.sysfs : SysfsState{};
    if (!watched.read) before.aer_fatal = now.aer_fatal;
    for (Signal& signal : SysfsSignals(pci, before, now, now_ms))
      out.push_back(std::move(signal));
    if (!now.aer_fatal && !now.gone) now.aer_fatal = before.aer_fatal;
    watched.sysfs = now;
    watched.read = true;
    return;
  }
  if (!library_) return;
  GpuState now = ReadWatched(watched);
  GpuState before = watched.read ? watched.state : GpuState{};
  if (!watched.read) before.uncorrected_volatile_ecc = now.uncorrected_volatile_ecc;
  for (Signal& signal : StateSignals(pci, before, now, now_ms))
    out.push_back(std::move(signal));
  // A count that could not be read this time keeps the last one to compare with.
  if (!now.uncorrected_volatile_ecc) now.uncorrected_volatile_ecc = before.uncorrected_volatile_ecc;
  watched.state = now;
  watched.read = true;
}

void NvmlMonitor::PollAll(std::vector<Signal>& out) {
  if (!library_ && WantsNvml()) (void)OpenNvml();  // NVML back after it failed to open
  const int64_t now_ms = NowMs();
  for (Watched& watched : gpus_)
    Poll(watched, now_ms, out);
}

// The event's signal (with the recovery action read now, where the driver has it) and the GPU
// it names; nullopt for an event of a GPU not watched or of another type.
std::optional<Signal> NvmlMonitor::OnEvent(const nvml::Event& event, Watched** found) {
  *found = nullptr;
  for (Watched& watched : gpus_)
    if (watched.handle && watched.handle->handle() == event.gpu) *found = &watched;
  if (!*found && library_ && event.gpu) {
    // A handle of another kind (a MIG device's): the GPU by its PCI address.
    auto pci = library_->PciAddress(nvml::Gpu(event.gpu));
    for (Watched& watched : gpus_)
      if (pci.ok() && watched.handle && watched.gpu.pci_address == pci.value) *found = &watched;
  }
  if (!*found) return std::nullopt;
  auto signal = EventSignal(event, (*found)->gpu.pci_address, NowMs());
  if (!signal) return std::nullopt;
  if (library_) {
    auto action = library_->RecoveryAction(*(*found)->handle);
    if (action.ok()) signal->recovery_action = RecoveryActionOf(action.value);
  }
  return signal;
}

// Hands `signals` to the sink without the lock (the sink may call ReadState).
void NvmlMonitor::Emit(std::unique_lock<std::mutex>& lock, std::vector<Signal>& signals) {
  if (signals.empty()) return;
  std::vector<Signal> batch;
  batch.swap(signals);
  lock.unlock();
  for (Signal& signal : batch)
    sink_(std::move(signal));
  lock.lock();
}

// One wait for an NVML event (or, without events, for the wait's length); an event's signal
// goes out at once, then the GPU's state is read into `out`.
void NvmlMonitor::WaitForEvent(std::unique_lock<std::mutex>& lock, std::vector<Signal>& out,
                               bool& poll_now) {
  std::shared_ptr<nvml::Library> library = events_ ? library_ : nullptr;
  if (!library) {
    changed_.wait_for(lock, options_.event_wait, [this] { return stop_ || suspended_; });
    return;
  }
  lock.unlock();
  const auto wait_ms = static_cast<uint32_t>(
      std::clamp<int64_t>(options_.event_wait.count(), 0, std::numeric_limits<uint32_t>::max()));
  nvml::Read<nvml::Event> read = library->WaitEvent(wait_ms);
  library.reset();  // Suspend may be waiting to close NVML
  lock.lock();
  if (read.status == nvml::ReadStatus::kGpuLost) poll_now = true;
  if (read.status == nvml::ReadStatus::kFailed || read.status == nvml::ReadStatus::kNotSupported)
    changed_.wait_for(lock, options_.event_wait, [this] { return stop_ || suspended_; });
  if (!read.ok()) return;
  Watched* watched = nullptr;
  auto signal = OnEvent(read.value, &watched);
  if (!signal) return;
  std::vector<Signal> first{std::move(*signal)};
  Emit(lock, first);
  if (!stop_ && !suspended_ && watched) Poll(*watched, NowMs(), out);
}

void NvmlMonitor::Run() {
  std::unique_lock lock(mutex_);
  // Begin read every GPU once: what it found goes out first.
  auto next_poll = std::chrono::steady_clock::now() + options_.poll_interval;
  std::vector<Signal> out;
  out.swap(first_signals_);
  while (!stop_) {
    if (suspended_) {
      parked_ = true;
      changed_.notify_all();
      changed_.wait(lock, [this] { return stop_ || !suspended_; });
      parked_ = false;
      continue;
    }
    bool poll_now = false;
    if (std::chrono::steady_clock::now() < next_poll) WaitForEvent(lock, out, poll_now);
    if (stop_ || suspended_) continue;
    if (poll_now || std::chrono::steady_clock::now() >= next_poll) {
      PollAll(out);
      next_poll = std::chrono::steady_clock::now() + options_.poll_interval;
    }
    Emit(lock, out);
  }
}

Status NvmlMonitor::Begin() {
  if (gpus_.empty()) return Unavailable("health watch: no GPUs to watch");
  bool sysfs_gpus = false;
  for (const Watched& watched : gpus_)
    sysfs_gpus = sysfs_gpus || !watched.gpu.nvidia_driver;
  {
    std::lock_guard lock(mutex_);
    if (WantsNvml()) {
      Status opened = OpenNvml();
      if (!opened && !sysfs_gpus) return opened.error().WithContext("health watch");
    }
    // The baseline before Start returns: a change after it is news.
    PollAll(first_signals_);
  }
  thread_ = std::thread([this] { Run(); });
  return Ok();
}

GpuState NvmlMonitor::ReadState(const std::string& pci_address) {
  std::lock_guard lock(mutex_);
  for (Watched& watched : gpus_)
    if (watched.gpu.pci_address == pci_address) return ReadWatched(watched);
  return GpuState{};
}

void NvmlMonitor::Suspend() {
  std::unique_lock lock(mutex_);
  if (suspended_) return;
  suspended_ = true;
  changed_.notify_all();
  // The thread lets go of NVML between two waits (at most one event wait); called from the
  // sink, it is this thread, between waits already.
  if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id())
    changed_.wait(lock, [this] { return parked_ || stop_; });
  for (Watched& watched : gpus_)
    watched.handle.reset();
  events_ = false;
  library_.reset();  // nvmlShutdown: no handle left open
}

void NvmlMonitor::Resume() {
  {
    std::lock_guard lock(mutex_);
    if (!suspended_) return;
    if (WantsNvml()) (void)OpenNvml();  // failing, the next poll tries again
    suspended_ = false;
  }
  changed_.notify_all();
}

}  // namespace monitor_detail

Result<std::unique_ptr<Monitor>> Monitor::Start(MonitorOptions options,
                                                std::vector<WatchedGpu> gpus, Sink sink) {
  auto monitor = std::make_unique<monitor_detail::NvmlMonitor>(std::move(options), std::move(gpus),
                                                               std::move(sink));
  if (Status begun = monitor->Begin(); !begun) return begun.error();
  return std::unique_ptr<Monitor>(std::move(monitor));
}

}  // namespace tessera::health
