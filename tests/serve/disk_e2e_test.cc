// A disk no tenant can fill: a real tessera-serve whose podman container prints without end keeps
// its log under --container-log-max (podman's conmon empties it at the cap) while the logs API
// still gives the latest lines and the store goes on taking other tenancies' work; and the
// store's reserve (--store-reserve) on a real small file system: work is refused with 503 below
// it, while a DELETE still writes, and taken again once space is freed.
#include <gtest/gtest.h>
#include <sys/statvfs.h>

#include <cctype>
#include <filesystem>
#include <fstream>

#include "serve/container_wait.h"
#include "serve/podman_serve_fixture.h"
#include "serve/serve_process.h"
#include "serve/small_tmpfs.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

// N of the last whole "count N " in `text` (the container prints them in increasing order);
// -1 when none.
int64_t LastCount(const std::string& text) {
  for (size_t at = text.rfind("count "); at != std::string::npos;
       at = at == 0 ? std::string::npos : text.rfind("count ", at - 1)) {
    size_t end = at + 6;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])))
      ++end;
    if (end > at + 6 && end < text.size() && text[end] == ' ')
      return std::stoll(text.substr(at + 6, end - at - 6));
  }
  return -1;
}

json Submission(const std::string& image, const std::string& tenancy, const std::string& script) {
  return {
      {"image", image}, {"tenancy", tenancy}, {"gpus", 0}, {"command", {"/bin/sh", "-c", script}}};
}

class DiskE2e : public PodmanServeTest {
 protected:
  DiskE2e() : PodmanServeTest("disk") {}
};

TEST_F(DiskE2e, AContainerPrintingWithoutEndCostsOnlyItsCappedLog) {
  constexpr uint64_t kCap = 256 << 10;
  StartServe({"--container-log-max", "256Ki"});
  int status = 0;
  // ~250-byte records (with podman's time stamp): the cap holds about 1000 of them.
  const std::string script =
      "i=0; p=" + std::string(200, '.') + "; while :; do i=$((i+1)); echo \"count $i $p\"; done";
  const json printer = CallJson(*admin_, "POST", "/v1/containers",
                                Submission(image_, "printer", script).dump(), &status);
  ASSERT_EQ(status, 202) << printer;
  const std::string id = printer["id"];
  WaitForContainerState(*admin_, *serve_, id, {"running"});
  const std::string log_file = serve_->data_dir() + "/containers/" + id + ".log";

  // It prints well past the cap (four times over), the file never above it (+ one record).
  uint64_t largest = 0;
  std::string latest;
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::error_code error;
        const uint64_t size = std::filesystem::file_size(log_file, error);
        if (!error) largest = std::max(largest, size);
        auto response = admin_->Call("GET", "/v1/containers/" + id + "/logs");
        latest = response && response->status == 200 ? response->body : "";
        return LastCount(latest) > 4000;
      },
      std::chrono::seconds(60), std::chrono::milliseconds(200)))
      << "last count " << LastCount(latest) << "\n"
      << serve_->log();
  EXPECT_GT(largest, 0u);
  EXPECT_LE(largest, kCap + 4096);
  // The logs API gives the latest output, not the first: the start is gone, and what it shows
  // reaches at least as far as the file did just before the call.
  EXPECT_EQ(latest.find("count 1 "), std::string::npos);
  EXPECT_LE(latest.size(), kCap);
  std::string file_text;
  int64_t in_file = -1, shown = -1;
  ASSERT_TRUE(WaitUntil([&] {
    std::ifstream in(log_file);
    file_text.assign(std::istreambuf_iterator<char>(in), {});
    in_file = LastCount(file_text);
    shown = LastCount(admin_->Call("GET", "/v1/containers/" + id + "/logs")->body);
    return in_file > 0 && shown > 0;  // neither read right after conmon emptied the file
  }));
  EXPECT_GE(shown, in_file);

  // The store goes on writing: another tenancy's submission, then the printer's DELETE.
  const json other = CallJson(*admin_, "POST", "/v1/containers",
                              Submission(image_, "quiet", "echo still-served").dump(), &status);
  EXPECT_EQ(status, 202) << other;
  json gone = CallJson(*admin_, "DELETE", "/v1/containers/" + id, "", &status);
  EXPECT_TRUE(status == 200 || status == 202) << status << " " << gone;
  gone = WaitForContainerState(*admin_, *serve_, id, {"exited", "failed"});
  EXPECT_LE(std::filesystem::file_size(log_file), kCap + 4096);
  const json quiet = WaitForContainerState(*admin_, *serve_, other["id"], {"exited"});
  EXPECT_EQ(quiet.value("exit_code", -1), 0) << quiet;
}

// The reserve, on a real 64 MiB file system holding the data directory (null backend: nothing
// runs, the store's writes are what counts).
TEST(StoreReserve, WorkIsRefusedBelowTheReserveWhileDeleteStillWrites) {
  SmallTmpfs disk("64m");
  ASSERT_TRUE(disk.mounted()) << disk.error();
  const std::string root = MaterializeHost("hgx-h100-dgx");
  ServeProcess serve(disk.path(), NullBackendFlags(root, disk.path(), {"--store-reserve", "32Mi"}));
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  auto admin = serve.Connect(serve.admin_token());
  // One GPU drained: a container asking for all eight waits, to be deleted later.
  int status = 0;
  const auto gpus = CallJson(*admin, "GET", "/v1/gpus", "", &status)["gpus"];
  ASSERT_EQ(status, 200);
  CallJson(*admin, "POST", "/v1/gpus/" + gpus[0]["id"].get<std::string>() + "/drain", "", &status);
  ASSERT_EQ(status, 200);
  const std::string submission = json{
      {"image", "busybox"},
      {"tenancy", "team-a"},
      {"gpus", 8},
      {"command", {"sleep", "1"}}}.dump();
  const json waiting = CallJson(*admin, "POST", "/v1/containers", submission, &status);
  ASSERT_EQ(status, 202) << waiting;

  // Leave 16 MiB free: under the 32 MiB reserve.
  struct statvfs fs {};
  ASSERT_EQ(::statvfs(disk.path().c_str(), &fs), 0);
  const uint64_t free_bytes = uint64_t{fs.f_bavail} * fs.f_frsize;
  ASSERT_GT(free_bytes, uint64_t{16} << 20);
  const std::string filler = disk.path() + "/filler";
  {
    std::ofstream out(filler, std::ios::binary);
    const std::string block(1 << 20, '\0');
    for (uint64_t left = free_bytes - (uint64_t{16} << 20); left >= block.size();
         left -= block.size())
      out.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
  const json refused = CallJson(*admin, "POST", "/v1/containers", submission, &status);
  EXPECT_EQ(status, 503) << refused;
  EXPECT_NE(refused.dump().find("--store-reserve"), std::string::npos) << refused;
  CallJson(*admin, "PUT", "/v1/tenancies/team-b", "{}", &status);
  EXPECT_EQ(status, 503);
  // What frees or ends work still writes into the reserve.
  const json deleted =
      CallJson(*admin, "DELETE", "/v1/containers/" + waiting["id"].get<std::string>(), "", &status);
  EXPECT_EQ(status, 200) << deleted;
  EXPECT_EQ(CallJson(*admin, "GET", "/v1/containers/" + waiting["id"].get<std::string>())["state"],
            "failed");

  std::filesystem::remove(filler);
  const json taken = CallJson(*admin, "POST", "/v1/containers", submission, &status);
  EXPECT_EQ(status, 202) << taken;
}

}  // namespace
}  // namespace tessera::testing
