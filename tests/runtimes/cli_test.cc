// `tessera doctor` and `tessera runtime-config` as processes: exit codes and formats.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "mps/mps.h"
#include "process/process.h"
#include "support/fixture_host.h"

namespace {

namespace fs = std::filesystem;
using tessera::testing::RunCommand;
using tessera::testing::TempDir;
using tessera::testing::TempHost;
using tessera::testing::TesseraBinary;

void Write(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << content;
}

// An HGX host with a fresh CDI spec, a 6.8 kernel and a gVisor containerd config.
struct HealthyHost {
  HealthyHost() : host("hgx-h100-dgx") {
    Write(root() + "/proc/sys/kernel/osrelease", "6.8.0\n");
    int status = 0;
    RunCommand(TesseraBinary() + " cdi generate --root " + root() + " --mode driver --output-dir " +
                   root() + "/var/run/cdi >/dev/null 2>&1",
               &status);
    EXPECT_EQ(status, 0);
    Write(root() + "/etc/containerd/config.toml",
          RunCommand(TesseraBinary() + " runtime-config containerd --runtime gvisor"));
    Write(root() + "/etc/containerd/runsc.toml",
          RunCommand(TesseraBinary() + " runtime-config runsc-toml"));
  }
  const std::string& root() const { return host.root(); }
  std::string Doctor(const std::string& extra, int* status, const std::string& env = "") {
    return RunCommand(env + TesseraBinary() + " doctor --root " + root() +
                          " --containerd-version 1.7.20 --podman-version 4.3.1 " + extra,
                      status);
  }
  TempHost host;
};

TEST(DoctorCli, HealthyHostExitsZero) {
  HealthyHost host;
  int status = -1;
  std::string out = host.Doctor("", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("0 failed"), std::string::npos) << out;
  EXPECT_NE(out.find("PASS  gvisor.nvproxy.runsc"), std::string::npos) << out;
}

TEST(DoctorCli, AnyFailExitsOneAndJsonNamesIt) {
  HealthyHost host;
  Write(host.root() + "/etc/containerd/runsc.toml", "[runsc_config]\n");
  int status = -1;
  std::string out = host.Doctor("--format json", &status);
  EXPECT_EQ(status, 1) << out;
  auto doc = nlohmann::json::parse(out);
  EXPECT_TRUE(doc["failed"].get<bool>());
  bool found = false;
  for (const auto& check : doc["checks"]) {
    if (check["id"] == "gvisor.nvproxy.runsc") {
      found = true;
      EXPECT_EQ(check["verdict"], "FAIL");
      EXPECT_FALSE(check["fix"].get<std::string>().empty());
    }
  }
  EXPECT_TRUE(found) << out;
}

TEST(DoctorCli, ReportsEachMpsDaemonItsEnforcementAndAHostWidePipeDirectory) {
  HealthyHost host;
  const std::string mps = host.root() + "/run/tessera/mps";
  // One ready daemon (this test process, as the service's state file knows it: it runs), one
  // whose process is gone. A pid file in the pipe directory is no evidence of either.
  const std::string ready = mps + "/GPU-5e4b7c10-3c2a-4d8e-9f10-a1b2c3d4e5f0";
  std::ifstream self_stat("/proc/self/stat");
  const std::string self((std::istreambuf_iterator<char>(self_stat)),
                         std::istreambuf_iterator<char>());
  const auto started = tessera::process::ParseProcStat(self);
  ASSERT_TRUE(started);
  Write(ready + "/daemon.state",
        tessera::mps::FormatDaemonState({static_cast<uint32_t>(::getpid()), started->start_time}));
  Write(ready + "/pipe/nvidia-cuda-mps-control.pid", "1\n");
  Write(ready + "/ready", "sha256:0123\n");
  Write(ready + "/log/control.log",
        "[2026-02-06 09:34:17.770 Control   261] CUDA MPS Control binary version: 13000\n");
  Write(ready + "/log/server.log",
        "[2026-04-28 18:20:41.986 Server 4428] Active Threads Percentage set to 25.0\n"
        "[2026-04-28 18:20:41.986 Server 4428] Device pinned memory limit for device 0 set to "
        "0x500000000 bytes\n");
  const std::string gone = mps + "/GPU-5e4b7c11-3c2a-4d8e-9f10-a1b2c3d4e5f1";
  int status = -1;
  const std::string pid = RunCommand("sh -c 'echo $$'", &status);  // an ended process
  Write(gone + "/daemon.state", tessera::mps::FormatDaemonState(
                                    {static_cast<uint32_t>(std::stoul(pid)), started->start_time}));
  fs::create_directories(host.root() + "/tmp/nvidia-mps");
  std::string out = host.Doctor("--format json", &status);
  EXPECT_EQ(status, 1) << out;
  auto doc = nlohmann::json::parse(out);
  std::map<std::string, nlohmann::json> by_title;
  for (const auto& check : doc["checks"])
    by_title[check["title"].get<std::string>()] = check;
  const auto& healthy = by_title
      ["MPS daemon of GPU-5e4b7c10-3c2a-4d8e-9f10-a1b2c3d4e5f0 (enforcement driver: its "
       "memory and thread limits; the watchdog holds each container)"];
  EXPECT_EQ(healthy["verdict"], "PASS") << out;
  for (const char* seen : {"(running)", "marker sha256:0123", "version 13000", "20480 MiB",
                           "a server applied 20480 MiB and 25% threads"})
    EXPECT_NE(healthy["evidence"].get<std::string>().find(seen), std::string::npos)
        << seen << " in " << healthy;
  bool failed = false;
  for (const auto& [title, check] : by_title) {
    if (title.find("GPU-5e4b7c11") == std::string::npos) continue;
    failed = true;
    EXPECT_EQ(check["verdict"], "FAIL") << check;
    EXPECT_NE(check["evidence"].get<std::string>().find("(not running)"), std::string::npos);
  }
  EXPECT_TRUE(failed) << out;
  const auto& pipe = by_title["no host-wide MPS pipe directory (/tmp/nvidia-mps)"];
  EXPECT_EQ(pipe["verdict"], "WARN") << out;
  EXPECT_NE(pipe["fix"].get<std::string>().find("binds it into every GPU container"),
            std::string::npos);
}

TEST(DoctorCli, ExplicitConfigFileAndMissingOne) {
  HealthyHost host;
  TempDir dir;
  Write(dir.path() + "/bad.toml",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]\n"
        "  runtime_type = \"io.containerd.runc.v2\"\n"
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc.options]\n"
        "  BinaryName = \"runsc\"\n");
  int status = -1;
  std::string out = host.Doctor("--containerd-config " + dir.path() + "/bad.toml", &status);
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("FAIL  containerd.runtime_type.runsc"), std::string::npos) << out;
  host.Doctor("--containerd-config " + dir.path() + "/missing.toml 2>/dev/null", &status);
  EXPECT_EQ(status, 3);  // not found
}

// Answers every request on 127.0.0.1 with `body` (200, JSON), as tessera serve answers GET
// /v1/gpus, and keeps the request lines and Authorization headers it got.
class CannedApi {
 public:
  explicit CannedApi(std::string body) : body_(std::move(body)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
        ::listen(fd_, 8) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size))
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~CannedApi() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void Serve() {
    for (;;) {
      const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      std::string request;
      char buffer[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::read(client, buffer, sizeof buffer);
        if (n <= 0) break;
        request.append(buffer, static_cast<size_t>(n));
      }
      {
        std::lock_guard lock(mutex_);
        requests_ += request;
      }
      const std::string answer =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
          "Content-Length: " +
          std::to_string(body_.size()) + "\r\n\r\n" + body_;
      (void)!::write(client, answer.data(), answer.size());
      ::close(client);
    }
  }

  std::string body_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::string requests_;
};

// Two GPUs as GET /v1/gpus shows them (records_json.cc's shape): one resetting after Xid 79,
// one out after a remap failure; and a healthy one.
nlohmann::json FaultedListing(bool with_out) {
  using nlohmann::json;
  json gpus = json::array();
  gpus.push_back({{"id", "0000:18:00.0"},
                  {"model", "NVIDIA H100 80GB HBM3"},
                  {"health", {{"step", "healthy"}, {"reason", ""}, {"last_fault", nullptr}}}});
  gpus.push_back(
      {{"id", "0000:9d:00.0"},
       {"model", "NVIDIA H100 80GB HBM3"},
       {"health",
        {{"step", "resetting"},
         {"reason", "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0"},
         {"attempts", 1},
         {"faulted_ms", 1700000001000},
         {"last_fault",
          {{"at_ms", 1700000001000},
           {"signal", "xid"},
           {"xid", 79},
           {"class", "gpu"},
           {"action", "stop-gpu"},
           {"reason", "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0"}}}}}});
  if (with_out)
    gpus.push_back({{"id", "0000:ab:00.0"},
                    {"model", "NVIDIA H100 80GB HBM3"},
                    {"health",
                     {{"step", "out"},
                      {"reason", "remap failure: the GPU cannot repair itself"},
                      {"attempts", 0},
                      {"faulted_ms", 1700000005000},
                      {"last_fault",
                       {{"signal", "remap-failure"},
                        {"xid", nullptr},
                        {"class", "gpu"},
                        {"action", "out"}}}}}});
  return {{"gpus", gpus}};
}

TEST(DoctorCli, WithAServerListsFaultedGpusAndWhy) {
  HealthyHost host;
  CannedApi api(FaultedListing(true).dump());
  int status = -1;
  std::string out =
      host.Doctor("--server " + api.url() + " --format json", &status, "TESSERA_TOKEN=tsa_reader ");
  EXPECT_EQ(status, 1) << out;  // one GPU stays out
  EXPECT_NE(api.requests().find("GET /v1/gpus HTTP/1.1"), std::string::npos) << api.requests();
  EXPECT_NE(api.requests().find("Bearer tsa_reader"), std::string::npos) << api.requests();
  auto doc = nlohmann::json::parse(out);
  std::map<std::string, nlohmann::json> faults;
  for (const auto& check : doc["checks"])
    if (check["id"] == "gpu.fault") faults[check["title"].get<std::string>()] = check;
  ASSERT_EQ(faults.size(), 2u) << out;
  const auto& resetting =
      faults["GPU 0000:9d:00.0 (NVIDIA H100 80GB HBM3) is out of service after a fault"];
  EXPECT_EQ(resetting["verdict"], "WARN") << out;
  for (const char* seen : {"step resetting", "2023-11-14 22:13:21Z", "fallen off the bus",
                           "Xid 79, class gpu, action stop-gpu", "1 failed recoveries"})
    EXPECT_NE(resetting["evidence"].get<std::string>().find(seen), std::string::npos)
        << seen << " in " << resetting;
  const auto& out_gpu =
      faults["GPU 0000:ab:00.0 (NVIDIA H100 80GB HBM3) is out of service after a fault"];
  EXPECT_EQ(out_gpu["verdict"], "FAIL") << out;
  EXPECT_NE(out_gpu["evidence"].get<std::string>().find("remap failure"), std::string::npos);
  EXPECT_NE(out_gpu["fix"].get<std::string>().find("/v1/gpus/0000:ab:00.0/release"),
            std::string::npos);
}

TEST(DoctorCli, WithAServerARecoveringGpuWarnsAndAllHealthyPasses) {
  HealthyHost host;
  {
    CannedApi api(FaultedListing(false).dump());
    int status = -1;
    std::string out = host.Doctor("--server " + api.url(), &status, "TESSERA_TOKEN=t ");
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find("WARN  gpu.fault"), std::string::npos) << out;
  }
  CannedApi healthy(R"({"gpus":[{"id":"0000:18:00.0","health":{"step":"healthy"}}]})");
  int status = -1;
  std::string out = host.Doctor("--server " + healthy.url(), &status, "TESSERA_TOKEN=t ");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("PASS  gpu.faults"), std::string::npos) << out;
  EXPECT_NE(out.find("1 GPUs, none out after a fault"), std::string::npos) << out;
  // A server that does not answer is a failure naming it.
  out = host.Doctor("--server http://127.0.0.1:1", &status, "TESSERA_TOKEN=t ");
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("FAIL  gpu.faults"), std::string::npos) << out;
}

TEST(RuntimeConfigCli, PrintsForEachTarget) {
  int status = -1;
  std::string podman =
      RunCommand(TesseraBinary() + " runtime-config --for podman --runtime kata", &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(podman.find("kata = ["), std::string::npos);
  std::string kata =
      RunCommand(TesseraBinary() + " runtime-config containerd --runtime kata", &status);
  EXPECT_NE(kata.find("io.containerd.kata-qemu-nvidia-gpu.v2"), std::string::npos);
  RunCommand(TesseraBinary() + " runtime-config containerd --runtime lxc 2>/dev/null", &status);
  EXPECT_NE(status, 0);
}

}  // namespace
