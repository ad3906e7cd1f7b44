// The MPS daemon manager against the stand-in nvidia-cuda-mps-control and the stand-in NVML:
// order, marker, shm, takeover, config change, crash, hang, slow start, fault, teardown.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "mps/mps.h"
#include "nvml/nvml.h"
#include "support/fake_mps.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "support/wait.h"

namespace tessera::mps {
namespace {

using testing::FakeMps;

constexpr char kUuid[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr char kPci[] = "0000:18:00.0";
// A second GPU: another tenancy's daemon, which nothing done to the first may reach.
constexpr char kOtherUuid[] = "GPU-99999999-8888-7777-6666-555555555555";
constexpr char kOtherPci[] = "0000:2a:00.0";
constexpr uint64_t kGiB = uint64_t{1} << 30;

// Whether `pid` runs (a zombie nobody reaped yet has ended).
bool Running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z' &&
         text[close + 2] != 'X';
}

// Where a transcript line is, or npos.
size_t IndexOf(const std::vector<std::string>& lines, const std::string& needle) {
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find(needle) != std::string::npos) return i;
  return std::string::npos;
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

class MpsDaemon : public ::testing::Test {
 protected:
  void SetUp() override {
    nvml_state_.Append(std::string("gpu ") + kPci + " board=h100-80gb uuid=" + kUuid);
    nvml_state_.Append(std::string("gpu ") + kOtherPci + " board=h100-80gb uuid=" + kOtherUuid);
    mps_ = std::make_unique<FakeMps>();  // after the NVML state: it takes over the call log
    auto library = nvml::Library::Open(FAKE_NVML);
    ASSERT_TRUE(library) << library.error().message;
    nvml_ = std::move(*library);
    options_.root = root_.path() + "/mps";
    options_.control_binary = FakeMps::Binary();
    options_.shm_bytes = 8 << 20;
    options_.command_timeout = std::chrono::milliseconds(1500);
    options_.start_timeout = std::chrono::milliseconds(10000);
    config_ = {kUuid, kPci, 20 * kGiB, 25};
    paths_ = *PathsFor(options_.root, kUuid);
    mps_->Watch(paths_.ready);
  }
  void TearDown() override {
    // Whatever a test left running goes.
    if (daemon_) (void)daemon_->Stop();
    if (other_) (void)other_->Stop();
    for (const auto& paths : {paths_, *PathsFor(options_.root, kOtherUuid)}) {
      (void)UnmountShm(paths.shm);
      (void)UnmountShm(paths.pipe);
    }
  }

  Status OpenOther() {
    auto daemon = Daemon::Open(options_, *nvml_, {kOtherUuid, kOtherPci, 10 * kGiB, 50});
    if (!daemon) return daemon.error();
    other_ = std::move(*daemon);
    return Ok();
  }

  // A client of the daemon sends `command` through the pipe directory, as a container holding
  // the control socket can; its exit status.
  int Tenant(const std::string& command) const {
    int status = 0;
    testing::RunCommand("echo '" + command + "' | CUDA_MPS_PIPE_DIRECTORY=" + paths_.pipe + " " +
                            FakeMps::Binary() + " >/dev/null 2>&1",
                        &status);
    return status;
  }

  size_t OtherCommands() const { return mps_->Lines(std::string(kOtherUuid) + " cmd ").size(); }

  Status OpenDaemon() {
    auto daemon = Daemon::Open(options_, *nvml_, config_);
    if (!daemon) return daemon.error();
    daemon_ = std::move(*daemon);
    return Ok();
  }

  testing::FakeNvmlState nvml_state_{""};
  std::unique_ptr<FakeMps> mps_;
  testing::TempDir root_;
  std::unique_ptr<nvml::Library> nvml_;
  Options options_;
  DaemonConfig config_;
  Paths paths_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<Daemon> other_;
};

TEST_F(MpsDaemon, StartsComputeModeThenDaemonThenLimitsThenMarker) {
  ASSERT_TRUE(OpenDaemon());
  const auto lines = Split(mps_->Transcript());
  const size_t mode = IndexOf(lines, std::string("nvmlDeviceSetComputeMode ") + kPci + " 3 -> 0");
  const size_t start = IndexOf(lines, " -f ");
  const size_t memory = IndexOf(lines, "cmd set_default_device_pinned_mem_limit 0 20480M");
  const size_t threads = IndexOf(lines, "cmd set_default_active_thread_percentage 25");
  ASSERT_NE(mode, std::string::npos) << mps_->Transcript();
  ASSERT_NE(start, std::string::npos) << mps_->Transcript();
  ASSERT_NE(memory, std::string::npos) << mps_->Transcript();
  ASSERT_NE(threads, std::string::npos) << mps_->Transcript();
  EXPECT_LT(mode, start);
  EXPECT_LT(start, memory);
  EXPECT_LT(memory, threads);
  // No marker while the limits went in; the marker holds this config's hash now.
  EXPECT_NE(lines[memory].find("[watch absent]"), std::string::npos) << lines[memory];
  EXPECT_NE(lines[threads].find("[watch absent]"), std::string::npos) << lines[threads];
  EXPECT_EQ(ReadReadyMarker(paths_), ConfigHash(config_));
  EXPECT_EQ(daemon_->hash(), ConfigHash(config_));
  EXPECT_EQ(mps_->ComputeMode(kPci), 3);
  // The daemon ran for this GPU only, with its own pipe and log directories.
  EXPECT_TRUE(daemon_->ControlPid());
  const LogFacts facts = daemon_->ReadLog();
  EXPECT_EQ(facts.control_version, 13000u);
  struct stat st {};
  EXPECT_EQ(::stat((paths_.pipe + "/control").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_NE(mps_->Transcript().find(std::string("nvidia-cuda-mps-control ") + kUuid + " -f"),
            std::string::npos);
}

TEST_F(MpsDaemon, ShmIsAPrivateSizedTmpfsWithoutSuidDevicesOrExec) {
  ASSERT_TRUE(OpenDaemon());
  ASSERT_TRUE(IsMountPoint(paths_.shm));
  int status = 0;
  const std::string options =
      testing::RunCommand("findmnt -n -o FSTYPE,OPTIONS --target " + paths_.shm, &status);
  ASSERT_EQ(status, 0);
  EXPECT_EQ(options.rfind("tmpfs", 0), 0u) << options;
  for (const char* option : {"nosuid", "nodev", "noexec", "size=8192k"})
    EXPECT_NE(options.find(option), std::string::npos) << options;
}

TEST_F(MpsDaemon, TakesOverADaemonThatStillAnswersInsteadOfStartingAnother) {
  ASSERT_TRUE(OpenDaemon());
  const auto pid = daemon_->ControlPid();
  daemon_.reset();  // tessera restarts; the daemon and its clients go on
  ASSERT_TRUE(OpenDaemon());
  EXPECT_EQ(daemon_->ControlPid(), pid);
  EXPECT_EQ(mps_->Lines(" -f ").size(), 1u) << mps_->Transcript();
  EXPECT_EQ(ReadReadyMarker(paths_), ConfigHash(config_));
}

TEST_F(MpsDaemon, AConfigChangeDropsTheMarkerFirstAndReachesRunningServers) {
  ASSERT_TRUE(OpenDaemon());
  const std::string old_hash = ConfigHash(config_);
  mps_->SetClients(kUuid, {4242});  // a server with one client runs
  DaemonConfig changed = config_;
  changed.pinned_memory_limit_bytes = 30 * kGiB;
  changed.active_thread_percentage = 40;
  ASSERT_TRUE(daemon_->Apply(changed));
  const auto lines = Split(mps_->Transcript());
  const size_t defaults = IndexOf(lines, "cmd set_default_device_pinned_mem_limit 0 30720M");
  const size_t server_memory = IndexOf(lines, "cmd set_device_pinned_mem_limit ");
  const size_t server_threads = IndexOf(lines, "cmd set_active_thread_percentage ");
  ASSERT_NE(defaults, std::string::npos) << mps_->Transcript();
  ASSERT_NE(server_memory, std::string::npos) << mps_->Transcript();
  ASSERT_NE(server_threads, std::string::npos) << mps_->Transcript();
  EXPECT_NE(lines[server_memory].find(" 0 30720M"), std::string::npos);
  EXPECT_NE(lines[server_threads].find(" 40 "), std::string::npos);
  // Neither the old marker nor any marker while the new limits went in.
  for (size_t i : {defaults, server_memory, server_threads}) {
    EXPECT_EQ(lines[i].find(old_hash), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find("[watch absent]"), std::string::npos) << lines[i];
  }
  EXPECT_EQ(ReadReadyMarker(paths_), ConfigHash(changed));
  // The same config again changes nothing.
  const size_t before = Split(mps_->Transcript()).size();
  ASSERT_TRUE(daemon_->Apply(changed));
  EXPECT_EQ(Split(mps_->Transcript()).size(), before);
}

TEST_F(MpsDaemon, ADeadDaemonFailsTheCheckAndRestartsWithItsLimitsBeforeTheMarker) {
  ASSERT_TRUE(OpenDaemon());
  const auto pid = daemon_->ControlPid();
  ASSERT_TRUE(daemon_->Check());
  mps_->SetBehaviour(kUuid, "exit");
  ASSERT_TRUE(testing::WaitUntil([&] { return !mps_->Lines(" died ").empty(); }));
  ASSERT_TRUE(testing::WaitUntil([&] { return !daemon_->Check(); }));
  auto check = daemon_->Check();
  ASSERT_FALSE(check);
  EXPECT_NE(check.error().message.find("is gone"), std::string::npos) << check.error().message;
  mps_->SetBehaviour(kUuid, "");
  ASSERT_TRUE(daemon_->Restart());
  EXPECT_NE(daemon_->ControlPid(), pid);
  EXPECT_TRUE(daemon_->Check());
  EXPECT_EQ(mps_->Lines(" -f ").size(), 2u);
  const auto lines = Split(mps_->Transcript());
  size_t restart = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find(" -f ") != std::string::npos) restart = i;
  bool limits_after = false;
  for (size_t i = restart; i < lines.size(); ++i) {
    if (lines[i].find("cmd set_default_device_pinned_mem_limit 0 20480M") != std::string::npos) {
      limits_after = true;
      EXPECT_NE(lines[i].find("[watch absent]"), std::string::npos) << lines[i];
    }
  }
  EXPECT_TRUE(limits_after) << mps_->Transcript();
  EXPECT_EQ(ReadReadyMarker(paths_), ConfigHash(config_));
}

TEST_F(MpsDaemon, AHungDaemonFailsTheCheckWithinTheTimeoutAndIsReplaced) {
  ASSERT_TRUE(OpenDaemon());
  mps_->SetBehaviour(kUuid, "hang");
  ASSERT_TRUE(testing::WaitUntil([&] { return !mps_->Lines(" hangs ").empty(); }));
  auto check = daemon_->Check();
  ASSERT_FALSE(check);
  EXPECT_NE(check.error().message.find("stopped answering"), std::string::npos)
      << check.error().message;
  EXPECT_EQ(ReadReadyMarker(paths_), ConfigHash(config_));  // the caller drains first
  mps_->SetBehaviour(kUuid, "");
  const auto hung = daemon_->ControlPid();
  ASSERT_TRUE(daemon_->Restart());
  EXPECT_NE(daemon_->ControlPid(), hung);
  EXPECT_FALSE(Running(static_cast<pid_t>(*hung)));  // killed, not left behind
  EXPECT_TRUE(daemon_->Check());
}

TEST_F(MpsDaemon, AServerFaultFailsTheCheckOnce) {
  ASSERT_TRUE(OpenDaemon());
  mps_->SetBehaviour(kUuid, "fault");
  ASSERT_TRUE(testing::WaitUntil([&] { return !mps_->Lines(" server fault ").empty(); }));
  auto check = daemon_->Check();
  ASSERT_FALSE(check);
  EXPECT_NE(check.error().message.find("fatal exception"), std::string::npos);
  EXPECT_TRUE(daemon_->Check());
}

TEST_F(MpsDaemon, ASlowStartIsWaitedForAndATooSlowOneLeavesNothingBehind) {
  mps_->SetStartDelayMs(kUuid, 400);
  ASSERT_TRUE(OpenDaemon());
  EXPECT_EQ(ReadReadyMarker(paths_), ConfigHash(config_));
  ASSERT_TRUE(daemon_->Stop());
  daemon_.reset();

  mps_->SetStartDelayMs(kUuid, 3000);
  options_.start_timeout = std::chrono::milliseconds(300);
  auto opened = OpenDaemon();
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().category, ErrorCategory::kUnavailable);
  EXPECT_NE(opened.error().message.find("no control socket"), std::string::npos)
      << opened.error().message;
  EXPECT_EQ(ReadReadyMarker(paths_), "");
  EXPECT_FALSE(IsMountPoint(paths_.shm));
  EXPECT_EQ(mps_->ComputeMode(kPci), 0);
}

TEST_F(MpsDaemon, AComputeModeNvmlRefusesStartsNoDaemon) {
  mps_->FailSetComputeMode(4);  // NVML_ERROR_NO_PERMISSION
  auto opened = OpenDaemon();
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().category, ErrorCategory::kPermissionDenied) << opened.error().message;
  EXPECT_TRUE(mps_->Lines(" -f ").empty());
  EXPECT_EQ(ReadReadyMarker(paths_), "");
}

TEST_F(MpsDaemon, TerminatesAClientOnEachServer) {
  ASSERT_TRUE(OpenDaemon());
  auto none = daemon_->TerminateClient(4242);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().category, ErrorCategory::kNotFound);
  mps_->SetClients(kUuid, {4242, 4343});
  ASSERT_TRUE(daemon_->TerminateClient(4242));
  const auto lines = mps_->Lines("cmd terminate_client ");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(" 4242 "), std::string::npos);
}

TEST_F(MpsDaemon, TeardownQuitsRestoresComputeModeUnmountsAndRemoves) {
  ASSERT_TRUE(OpenDaemon());
  const auto pid = daemon_->ControlPid();
  ASSERT_TRUE(daemon_->Stop());
  const auto lines = Split(mps_->Transcript());
  const size_t quit = IndexOf(lines, "cmd quit");
  const size_t mode = IndexOf(lines, std::string("nvmlDeviceSetComputeMode ") + kPci + " 0 -> 0");
  ASSERT_NE(quit, std::string::npos) << mps_->Transcript();
  ASSERT_NE(mode, std::string::npos) << mps_->Transcript();
  EXPECT_LT(quit, mode);
  EXPECT_EQ(mps_->ComputeMode(kPci), 0);
  EXPECT_FALSE(IsMountPoint(paths_.shm));
  struct stat st {};
  EXPECT_NE(::stat(paths_.dir.c_str(), &st), 0);
  EXPECT_TRUE(testing::WaitUntil([&] { return !Running(static_cast<pid_t>(*pid)); }));
  daemon_.reset();
}

// ---- The pipe directory is a tenant's to write (where a runtime lets it): nothing there steers
// the service.

TEST_F(MpsDaemon, AControlSymlinkToAnotherGpusDaemonIsNeverFollowed) {
  ASSERT_TRUE(OpenDaemon());
  ASSERT_TRUE(OpenOther());
  const std::string other_socket = other_->paths().pipe + "/control";
  const std::string socket = paths_.pipe + "/control";
  ASSERT_EQ(::unlink(socket.c_str()), 0);
  ASSERT_EQ(::symlink(other_socket.c_str(), socket.c_str()), 0);
  const size_t before = OtherCommands();
  auto check = daemon_->Check();
  ASSERT_FALSE(check);
  EXPECT_NE(check.error().message.find("not the daemon's socket"), std::string::npos)
      << check.error().message;
  // Neither the check, nor the restart, nor the teardown sent the other daemon a word.
  ASSERT_TRUE(daemon_->Restart());
  ASSERT_TRUE(daemon_->Stop());
  daemon_.reset();
  EXPECT_EQ(OtherCommands(), before) << mps_->Transcript();
  EXPECT_TRUE(mps_->Lines(std::string(kOtherUuid) + " quit").empty());
  EXPECT_TRUE(other_->Check());
}

TEST_F(MpsDaemon, AFifoOrAHugeFileInThePipeDirectoryNeitherBlocksNorIsRead) {
  ASSERT_TRUE(OpenDaemon());
  const std::string pid_file = paths_.pipe + "/nvidia-cuda-mps-control.pid";
  ::unlink(pid_file.c_str());
  ASSERT_EQ(::mkfifo(pid_file.c_str(), 0644), 0);
  int status = 0;
  testing::RunCommand("truncate -s 64G " + paths_.pipe + "/huge", &status);
  ASSERT_EQ(status, 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(daemon_->Check());
  EXPECT_TRUE(daemon_->ControlPid());
  // A FIFO where the control socket was: refused by its type, at once.
  const std::string socket = paths_.pipe + "/control";
  ASSERT_EQ(::unlink(socket.c_str()), 0);
  ASSERT_EQ(::mkfifo(socket.c_str(), 0666), 0);
  auto check = daemon_->Check();
  ASSERT_FALSE(check);
  EXPECT_NE(check.error().message.find("a FIFO"), std::string::npos) << check.error().message;
  // Generous: a blocking open would never return at all.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  ASSERT_TRUE(daemon_->Restart());  // a fresh pipe file system: the junk is gone
  struct stat st {};
  EXPECT_NE(::stat((paths_.pipe + "/huge").c_str(), &st), 0);
  EXPECT_TRUE(daemon_->Check());
}

TEST_F(MpsDaemon, ARewrittenPidFileNeverAimsTheTeardownAtAnotherDaemon) {
  ASSERT_TRUE(OpenDaemon());
  ASSERT_TRUE(OpenOther());
  const auto other_pid = other_->ControlPid();
  ASSERT_TRUE(other_pid);
  {
    std::ofstream pid_file(paths_.pipe + "/nvidia-cuda-mps-control.pid", std::ios::trunc);
    pid_file << *other_pid << "\n";
  }
  const auto own_pid = daemon_->ControlPid();
  ASSERT_TRUE(daemon_->Stop());
  daemon_.reset();
  EXPECT_TRUE(Running(static_cast<pid_t>(*other_pid)));
  EXPECT_TRUE(other_->Check());
  // Its own daemon is what went, not leaked.
  EXPECT_TRUE(testing::WaitUntil([&] { return !Running(static_cast<pid_t>(*own_pid)); }));
}

TEST_F(MpsDaemon, LimitsMovedThroughTheControlSocketAreRestoredWithinOneCheck) {
  ASSERT_TRUE(OpenDaemon());
  EXPECT_EQ(daemon_->limits_restored(), 0u);
  ASSERT_EQ(Tenant("set_default_active_thread_percentage 100"), 0);
  ASSERT_EQ(Tenant("set_default_device_pinned_mem_limit 0 80G"), 0);
  const size_t moved = Split(mps_->Transcript()).size();
  ASSERT_TRUE(daemon_->Check());
  EXPECT_EQ(daemon_->limits_restored(), 1u);
  // Put back after the tenant's commands, and read back as the config says.
  const auto lines = Split(mps_->Transcript());
  bool threads = false, memory = false;
  for (size_t i = moved; i < lines.size(); ++i) {
    threads = threads ||
              lines[i].find("cmd set_default_active_thread_percentage 25") != std::string::npos;
    memory = memory ||
             lines[i].find("cmd set_default_device_pinned_mem_limit 0 20480M") != std::string::npos;
  }
  EXPECT_TRUE(threads && memory) << mps_->Transcript();
  auto now = daemon_->Command("get_default_active_thread_percentage");
  ASSERT_TRUE(now);
  EXPECT_EQ(*now, "25.0\n");
  // Nothing moved since: the next check restores nothing.
  ASSERT_TRUE(daemon_->Check());
  EXPECT_EQ(daemon_->limits_restored(), 1u);
}

TEST_F(MpsDaemon, ThePipeDirectoryIsASizedFileSystemOfItsOwn) {
  options_.pipe_bytes = 1 << 20;
  ASSERT_TRUE(OpenDaemon());
  ASSERT_TRUE(IsMountPoint(paths_.pipe));
  int status = 0;
  const std::string mount =
      testing::RunCommand("findmnt -n -o FSTYPE,OPTIONS --target " + paths_.pipe, &status);
  ASSERT_EQ(status, 0);
  EXPECT_EQ(mount.rfind("tmpfs", 0), 0u) << mount;
  for (const char* option : {"nosuid", "nodev", "noexec", "size=1024k"})
    EXPECT_NE(mount.find(option), std::string::npos) << mount;
  // Filling it fills only it: the daemon's root and shm keep their room.
  testing::RunCommand("dd if=/dev/zero of=" + paths_.pipe + "/fill bs=64k count=64 2>&1", &status);
  EXPECT_NE(status, 0);  // ENOSPC after 1 MiB
  std::ofstream probe(paths_.dir + "/probe");
  probe << "room";
  probe.close();
  EXPECT_TRUE(probe.good());
  EXPECT_TRUE(daemon_->Check());
}

TEST_F(MpsDaemon, ATakeOverTrustsOnlyTheServicesStateFileAndAnUnreadableOneStartsAfresh) {
  ASSERT_TRUE(OpenDaemon());
  const auto first = daemon_->ControlPid();
  ASSERT_TRUE(first);
  daemon_.reset();  // the service restarts
  ASSERT_EQ(::unlink(paths_.state.c_str()), 0);
  ASSERT_EQ(::mkfifo(paths_.state.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(OpenDaemon());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_NE(daemon_->ControlPid(), first);
  EXPECT_EQ(mps_->Lines(" -f ").size(), 2u) << mps_->Transcript();
  EXPECT_TRUE(daemon_->Check());
  ::kill(static_cast<pid_t>(*first), SIGKILL);  // the one nobody could vouch for
}

// Two MIG devices of one GPU: a daemon each, named by its MIG UUID (its CUDA_VISIBLE_DEVICES),
// with directories of its own and the same limit commands as a whole GPU's; neither touches the
// GPU's compute mode, and stopping one leaves the other answering.
TEST_F(MpsDaemon, EachMigDeviceHasItsOwnDaemonAndTheComputeModeStaysAsItWas) {
  const std::string first = "MIG-8e2c3d4b-0001-4000-8000-000000000000";
  const std::string second = "MIG-8e2c3d4b-0005-4000-8004-000000000000";
  auto a = Daemon::Open(options_, *nvml_, {first, kPci, 10 * kGiB, 50});
  ASSERT_TRUE(a) << a.error().message;
  auto b = Daemon::Open(options_, *nvml_, {second, kPci, 4 * kGiB, 25});
  ASSERT_TRUE(b) << b.error().message;
  const std::string transcript = mps_->Transcript();
  EXPECT_NE(transcript.find("nvidia-cuda-mps-control " + first + " -f"), std::string::npos)
      << transcript;
  EXPECT_NE(transcript.find("nvidia-cuda-mps-control " + second + " -f"), std::string::npos)
      << transcript;
  EXPECT_NE(transcript.find(first + " cmd set_default_device_pinned_mem_limit 0 10240M"),
            std::string::npos)
      << transcript;
  EXPECT_NE(transcript.find(second + " cmd set_default_device_pinned_mem_limit 0 4096M"),
            std::string::npos)
      << transcript;
  EXPECT_EQ(transcript.find("nvmlDeviceSetComputeMode"), std::string::npos) << transcript;
  EXPECT_EQ((*a)->paths().pipe, options_.root + "/" + first + "/pipe");
  EXPECT_EQ((*b)->paths().pipe, options_.root + "/" + second + "/pipe");
  EXPECT_EQ(ReadReadyMarker((*a)->paths()), (*a)->hash());
  EXPECT_EQ(ReadReadyMarker((*b)->paths()), (*b)->hash());
  EXPECT_EQ(mps_->ComputeMode(kPci), 0);
  ASSERT_TRUE((*a)->Stop());
  EXPECT_TRUE((*b)->Check());
  EXPECT_EQ(mps_->ComputeMode(kPci), 0);
  EXPECT_EQ(mps_->Transcript().find("nvmlDeviceSetComputeMode"), std::string::npos);
  ASSERT_TRUE((*b)->Stop());
  EXPECT_FALSE(std::filesystem::exists(options_.root + "/" + second));
}

}  // namespace
}  // namespace tessera::mps
