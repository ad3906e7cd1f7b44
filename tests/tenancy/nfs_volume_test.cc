// NFS entitlements made real as far as this machine allows: podman volumes with the local
// driver's NFS options, and the exports they name served by a real user-space NFS server
// (nfs-ganesha, VFS backend) and reached with libnfs tools over the same server/port/path.
// The kernel here has no NFS client, so a container's mount is proven only as far as the kernel.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/file_text.h"
#include "support/podman_harness.h"
#include "support/wait.h"
#include "tenancy/tenancy.h"

namespace tessera::tenancy {
namespace {

namespace fs = std::filesystem;
using tessera::testing::Podman;
using tessera::testing::ReadText;
using tessera::testing::RunArgv;

uint16_t FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool Accepts(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// ganesha.nfsd in the foreground (-F) as a child of the test, exporting two directories over
// NFSv4/TCP on a free port: one read-write, one read-only. Stopped (and reaped) in the destructor.
class Ganesha {
 public:
  Ganesha() : dir_(fs::temp_directory_path() / ("tessera-ganesha-" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "rw");
    fs::create_directories(dir_ / "ro");
    fs::create_directories(dir_ / "recovery");
    std::ofstream(dir_ / "rw" / "hello.txt") << "hello over nfs\n";
    std::ofstream(dir_ / "ro" / "model.bin") << "weights\n";
    port_ = FreePort();
    std::ofstream conf(dir_ / "ganesha.conf");
    conf << "NFS_CORE_PARAM { NFS_Port = " << port_
         << "; Protocols = 4; Enable_NLM = false; Enable_RQUOTA = false; }\n"
         << "NFSv4 { Graceless = true; RecoveryRoot = " << (dir_ / "recovery").string() << "; }\n";
    int id = 1;
    for (const char* name : {"rw", "ro"}) {
      std::string path = (dir_ / name).string();
      conf << "EXPORT { Export_Id = " << id++ << "; Path = " << path << "; Pseudo = " << path
           << "; Access_Type = " << (std::string(name) == "rw" ? "RW" : "RO")
           << "; Squash = No_Root_Squash; Protocols = 4; Transports = TCP; SecType = sys;"
           << " FSAL { Name = VFS; } }\n";
    }
    conf.close();
    pid_ = ::fork();
    if (pid_ == 0) {
      std::string config = (dir_ / "ganesha.conf").string();
      std::string log = (dir_ / "ganesha.log").string();
      std::string pid_file = (dir_ / "ganesha.pid").string();
      ::execlp("ganesha.nfsd", "ganesha.nfsd", "-F", "-f", config.c_str(), "-L", log.c_str(), "-p",
               pid_file.c_str(), "-N", "NIV_EVENT", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Until it accepts connections or has exited.
    tessera::testing::WaitUntil(
        [&] {
          int status = 0;
          if (::waitpid(pid_, &status, WNOHANG) == pid_) pid_ = -1;
          return pid_ <= 0 || Accepts(port_);
        },
        tessera::testing::kEventTimeout, std::chrono::milliseconds(100));
    ready_ = pid_ > 0 && Accepts(port_);
  }
  ~Ganesha() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 50; ++i) {
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
    }
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  bool ready() const { return ready_; }
  uint16_t port() const { return port_; }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::string log() const { return ReadText((dir_ / "ganesha.log").string()); }

 private:
  fs::path dir_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
  bool ready_ = false;
};

// Reads server, port, path and mode back from a volume's local-driver options, so the NFS
// client below uses exactly what the volume names.
NfsExport FromVolumeOptions(const VolumeInfo& volume) {
  NfsExport nfs;
  nfs.name = volume.name;
  std::string device = volume.options.at("device");
  nfs.path = device.substr(device.find(":/") + 1);
  std::stringstream options(volume.options.at("o"));
  std::string option;
  while (std::getline(options, option, ',')) {
    if (option.rfind("addr=", 0) == 0) nfs.server = option.substr(5);
    if (option.rfind("port=", 0) == 0)
      nfs.port = static_cast<uint16_t>(std::stoi(option.substr(5)));
    if (option == "ro") nfs.read_only = true;
  }
  return nfs;
}

class NfsVolumes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Podman::Get().ready()) GTEST_FAIL() << "podman: " << Podman::Get().setup_error();
  }
};

TEST_F(NfsVolumes, EntitledExportsBecomeNfsVolumesThatNameAServedExport) {
  Ganesha server;
  ASSERT_TRUE(server.ready()) << server.log();
  const std::string tenancy = "tt" + std::to_string(::getpid()) + "-nfs";
  StorageEntitlements entitlements;
  entitlements.nfs.push_back({"scratch", "127.0.0.1", server.path("rw"), server.port(), false});
  entitlements.nfs.push_back({"models", "127.0.0.1", server.path("ro"), server.port(), true});

  PodmanTenancy effects;
  struct RemoveVolumes {
    std::string tenancy;
    ~RemoveVolumes() {
      PodmanTenancy cleanup;
      for (const char* name : {"scratch", "models"})
        (void)cleanup.RemoveVolume(PodmanVolumeName(tenancy, name));
    }
  } remove{tenancy};
  auto synced = effects.SyncVolumes(tenancy, entitlements);
  ASSERT_TRUE(synced.ok()) << synced.error().message;

  // podman volume inspect: the local driver with the NFS options, labelled for the tenancy.
  auto scratch = effects.InspectVolume(PodmanVolumeName(tenancy, "scratch"));
  ASSERT_TRUE(scratch.ok()) << scratch.error().message;
  EXPECT_EQ(scratch->driver, "local");
  EXPECT_EQ(scratch->options.at("type"), "nfs");
  EXPECT_EQ(scratch->options.at("o"), "addr=127.0.0.1,port=" + std::to_string(server.port()));
  EXPECT_EQ(scratch->options.at("device"), "127.0.0.1:" + server.path("rw"));
  EXPECT_EQ(scratch->labels.at(std::string(kTenancyLabel)), tenancy);
  auto models = effects.InspectVolume(PodmanVolumeName(tenancy, "models"));
  ASSERT_TRUE(models.ok());
  EXPECT_EQ(models->options.at("o"),
            "addr=127.0.0.1,port=" + std::to_string(server.port()) + ",ro");

  // The same server/port/path, through a real NFS client: list, read, write.
  NfsExport rw = FromVolumeOptions(*scratch);
  auto listed = RunArgv({"nfs-ls", NfsUrl(rw)});
  ASSERT_EQ(listed.status, 0) << listed.output << server.log();
  EXPECT_NE(listed.output.find("hello.txt"), std::string::npos) << listed.output;
  const std::string upload = server.path("upload.txt");
  std::ofstream(upload) << "written by a tenant\n";
  auto written = RunArgv({"nfs-cp", upload, NfsUrl(rw, "result.txt")});
  ASSERT_EQ(written.status, 0) << written.output;
  EXPECT_EQ(ReadText(server.path("rw") + "/result.txt"), "written by a tenant\n");

  // The read-only export: readable, and a write is refused by the server.
  NfsExport ro = FromVolumeOptions(*models);
  EXPECT_TRUE(ro.read_only);
  const std::string copy = server.path("model.copy");
  auto read = RunArgv({"nfs-cp", NfsUrl(ro, "model.bin"), copy});
  ASSERT_EQ(read.status, 0) << read.output;
  EXPECT_EQ(ReadText(copy), "weights\n");
  auto refused = RunArgv({"nfs-cp", upload, NfsUrl(ro, "sneaky.txt")});
  EXPECT_NE(refused.status, 0) << refused.output;
  EXPECT_FALSE(fs::exists(server.path("ro") + "/sneaky.txt"));

  // Inside a container: podman → mount(8) → mount.nfs → the kernel. This kernel has no NFS
  // client, so the mount must get as far as the kernel and fail there ("No such device"), which
  // shows the options are accepted by everything before it. With an NFS client it must work.
  auto resolved = ResolveVolumes(tenancy, entitlements, {{"scratch", "/data", std::nullopt}});
  ASSERT_TRUE(resolved.ok());
  std::vector<std::string> run = {"run", "--rm", "--network", "none"};
  for (const auto& flag : ContainerVolumeArgs(*resolved))
    run.push_back(flag);
  run.insert(run.end(), {Podman::Get().image(), "cat", "/data/hello.txt"});
  auto in_container = Podman::Get().Run(run);
  if (ReadText("/proc/filesystems").find("\tnfs\n") != std::string::npos) {
    EXPECT_EQ(in_container.status, 0) << in_container.output;
    EXPECT_NE(in_container.output.find("hello over nfs"), std::string::npos);
  } else {
    EXPECT_NE(in_container.status, 0);
    // mount.nfs (nfs-common, a dependency of nfs-ganesha) says "No such device"; mount(8)
    // without the helper says "unknown filesystem type".
    EXPECT_TRUE(in_container.output.find("No such device") != std::string::npos ||
                in_container.output.find("unknown filesystem type") != std::string::npos)
        << in_container.output;
  }

  // Entitlement withdrawn: its volume goes; an export changed to read-only is recreated so.
  entitlements.nfs.erase(entitlements.nfs.begin());
  entitlements.nfs[0].read_only = false;
  ASSERT_TRUE(effects.SyncVolumes(tenancy, entitlements).ok());
  EXPECT_EQ(effects.InspectVolume(PodmanVolumeName(tenancy, "scratch")).error().category,
            ErrorCategory::kNotFound);
  auto changed = effects.InspectVolume(PodmanVolumeName(tenancy, "models"));
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(changed->options.at("o"), "addr=127.0.0.1,port=" + std::to_string(server.port()));
}

}  // namespace
}  // namespace tessera::tenancy
