// What tessera-serve refuses at start, before it binds: a store it cannot trust (garbage in its
// pages, cut short, empty beside the admin token of an earlier run), a GPU whose lease record the
// store lost (its firmware baseline is never recorded again from today's ROM), and operator
// flags out of their ranges. Real processes, real files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "serve/serve_process.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class StartupRefusal : public ::testing::Test {
 protected:
  std::vector<std::string> Flags(std::vector<std::string> extra = {}) {
    if (root_.empty()) {
      // A private copy: a test here changes a GPU's ROM, which tests beside it must not see.
      host_ = std::make_unique<TempHost>("hgx-h100-dgx");
      root_ = host_->root();
      WriteGpuRoms(root_);
    }
    return NullBackendFlags(root_, dir_.path(), std::move(extra));
  }

  // A store with records in it, the service stopped.
  void RunOnce() {
    ServeProcess serve(dir_.path(), Flags());
    std::string log;
    ASSERT_TRUE(serve.Start(&log)) << log;
    auto admin = serve.Connect(serve.admin_token());
    for (int i = 0; i < 50; ++i) {
      int status = 0;
      CallJson(
          *admin, "POST", "/v1/containers",
          R"({"image":"busybox","tenancy":"team","env":{"PAD":")" + std::string(600, 'p') + "\"}}",
          &status);
      ASSERT_EQ(status, 202);
    }
    EXPECT_EQ(serve.Kill(SIGTERM), 0);
  }

  std::string Store() const { return dir_.path() + "/data/tessera.db"; }

  // Starts it, expecting a refusal whose message holds every one of `wanted`.
  void ExpectRefused(const std::vector<std::string>& wanted, std::vector<std::string> extra = {}) {
    for (const char* file : {"/serve.log", "/serve.out"})
      std::filesystem::remove(dir_.path() + file);
    ServeProcess serve(dir_.path(), Flags(std::move(extra)));
    std::string log;
    ASSERT_FALSE(serve.Start(&log)) << "it started";
    for (const auto& text : wanted)
      EXPECT_NE(log.find(text), std::string::npos) << text << "\n" << log;
  }

  std::unique_ptr<TempHost> host_;
  std::string root_;
  TempDir dir_;
};

TEST_F(StartupRefusal, GarbageInTheStoresPagesNamesTheFileTheProblemAndTheRecovery) {
  ASSERT_NO_FATAL_FAILURE(RunOnce());
  const auto size = std::filesystem::file_size(Store());
  {
    std::fstream file(Store(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(size / 2));
    const std::string garbage(8192, '\x5a');
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  ExpectRefused(
      {Store(), "cannot be trusted", "Restore a backup", "sqlite3 " + Store() + " .recover"});
}

TEST_F(StartupRefusal, AStoreCutShortIsRefused) {
  ASSERT_NO_FATAL_FAILURE(RunOnce());
  std::filesystem::resize_file(Store(), std::filesystem::file_size(Store()) / 2);
  ExpectRefused({Store(), "cannot be trusted", ".recover"});
}

TEST_F(StartupRefusal, AnEmptyStoreBesideTheAdminTokenIsALostStore) {
  ASSERT_NO_FATAL_FAILURE(RunOnce());
  std::filesystem::resize_file(Store(), 0);
  for (const char* suffix : {"-wal", "-shm"})
    std::filesystem::remove(Store() + suffix);
  ExpectRefused({Store(), "empty (0 bytes)", "admin token", ".recover"});
}

TEST_F(StartupRefusal, AGpuWhoseLeaseRecordIsLostKeepsItsBaselineAndIsNotServed) {
  ASSERT_NO_FATAL_FAILURE(RunOnce());
  auto baseline_of = [this](const std::string& pci) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(Store().c_str(), &db), SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(db, "SELECT baseline FROM firmware_baselines WHERE pci_address = ?1", -1,
                       &stmt, nullptr);
    sqlite3_bind_text(stmt, 1, pci.c_str(), -1, SQLITE_TRANSIENT);
    std::string baseline;
    if (sqlite3_step(stmt) == SQLITE_ROW)
      baseline = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return baseline;
  };
  const std::string gpu = WriteGpuRoms(root_).front();
  const std::string recorded = baseline_of(gpu);
  ASSERT_EQ(recorded.rfind("sha256:", 0), 0u) << recorded;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(Store().c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, ("DELETE FROM gpus WHERE pci_address = '" + gpu + "'").c_str(),
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  // The ROM changed meanwhile: had the GPU been taken for a new one, this would be its baseline.
  std::ofstream(root_ + "/sys/bus/pci/devices/" + gpu + "/rom", std::ios::trunc) << "ROM-v2-evil";
  ExpectRefused({"GPU " + gpu, "no lease record", "not served"});
  EXPECT_EQ(baseline_of(gpu), recorded);
}

TEST_F(StartupRefusal, OperatorFlagsOutOfTheirRangesAreRefusedBeforeBinding) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--io-threads", "100000"}, "--io-threads"},
      {{"--io-threads", "0"}, "--io-threads"},
      {{"--stop-grace-s", "-5"}, "--stop-grace-s"},
      {{"--firmware-check-timeout-ms", "-1"}, "--firmware-check-timeout-ms"},
      {{"--retain-finished", "0s"}, "--retain-finished"},
      {{"--retention-sweep-interval", "99999d"}, "--retention-sweep-interval"},
      {{"--fair-share-half-life", "0s"}, "--fair-share-half-life"},
      {{"--fabric-manager-timeout", "50ms"}, "--fabric-manager-timeout"},
      {{"--fabric-manager-timeout", "1h"}, "--fabric-manager-timeout"},
      {{"--default-pending-quota", "18446744073709551615"}, "--default-pending-quota"},
      {{"--start-workers", "0"}, "--start-workers"},
  };
  for (const auto& [flags, named] : cases) {
    SCOPED_TRACE(flags[0] + " " + flags[1]);
    ExpectRefused({named}, flags);
    EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/port"));
  }
}

}  // namespace
}  // namespace tessera::testing
