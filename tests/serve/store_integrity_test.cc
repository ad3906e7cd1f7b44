// The store checked before it is trusted, usage that is never replaced, container IDs that are
// never given twice, and writes on a full disk: the SQLite store in process on real files (and a
// real small tmpfs).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fleet/fleet.h"
#include "serve/small_tmpfs.h"
#include "support/fixture_host.h"

namespace tessera::fleet {
namespace {

using testing::SmallTmpfs;
using testing::TempDir;

std::unique_ptr<Store> Open(const std::string& path, bool refuse_empty = false) {
  StoreOptions options{path};
  options.refuse_empty = refuse_empty;
  auto store = OpenSqliteStore(options);
  EXPECT_TRUE(store.ok()) << (store.ok() ? "" : store.error().message);
  return store.ok() ? std::move(*store) : nullptr;
}

ContainerRecord Container(const std::string& id, size_t doc_bytes = 0) {
  ContainerRecord c;
  c.id = id;
  c.spec.tenancy = "t";
  c.spec.image = "busybox";
  if (doc_bytes) c.spec.env["PAD"] = std::string(doc_bytes, 'x');
  return c;
}

void Exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

// A closed store of `count` container records (about 400 bytes each): its WAL in the file.
void WriteContainers(const std::string& path, int count) {
  auto store = Open(path);
  ASSERT_TRUE(store);
  std::vector<Mutation> records;
  for (int i = 0; i < count; ++i)
    records.push_back(Container("c-" + std::to_string(i), 400));
  ASSERT_TRUE(store->CommitAndWait(std::move(records)).ok());
}

// Refused at open, the message naming the file, the problem and the way back.
void ExpectRefused(const std::string& path, const std::string& problem, bool refuse_empty = false) {
  StoreOptions options{path};
  options.refuse_empty = refuse_empty;
  auto store = OpenSqliteStore(options);
  ASSERT_FALSE(store.ok()) << "opened " << path;
  const std::string& message = store.error().message;
  EXPECT_EQ(store.error().category, ErrorCategory::kFailedPrecondition) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find(problem), std::string::npos) << message;
  EXPECT_NE(message.find("Restore a backup"), std::string::npos) << message;
  EXPECT_NE(message.find("sqlite3 " + path + " .recover"), std::string::npos) << message;
}

TEST(StoreUsage, EveryRunHasItsOwnRecordAndNoneIsReplaced) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  // One container ID, two runs (a key used again after retention, as a build before retired
  // IDs allowed): both bills stay, and writing the first again changes nothing.
  UsageRecord eight{"c-0123456789abcdef", "t", "u1", 8, 1000, 61000};
  UsageRecord one{"c-0123456789abcdef", "t", "u1", 1, 70000, 71000};
  {
    auto store = Open(path);
    ASSERT_TRUE(store->CommitAndWait({eight}).ok());
    ASSERT_TRUE(store->CommitAndWait({one}).ok());
    ASSERT_TRUE(store->CommitAndWait({eight}).ok());
    // The same run with other figures is a fault elsewhere: the stored bill stays.
    UsageRecord other = eight;
    other.gpus = 1;
    ASSERT_TRUE(store->CommitAndWait({other}).ok());
  }
  auto snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok());
  ASSERT_EQ(snapshot->usage.size(), 2u);
  EXPECT_EQ(snapshot->usage[0], eight);
  EXPECT_EQ(snapshot->usage[1], one);
}

TEST(StoreUsage, ARetiredContainerIdIsKeptForGood) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  {
    auto store = Open(path);
    ASSERT_TRUE(store->CommitAndWait({Container("c-1"), Container("c-2")}).ok());
    ASSERT_TRUE(
        store->CommitAndWait({ContainerDeletion{"c-1", true}, ContainerDeletion{"c-2"}}).ok());
  }
  auto snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok());
  EXPECT_TRUE(snapshot->containers.empty());
  EXPECT_EQ(snapshot->retired_ids, std::vector<std::string>{"c-1"});
}

TEST(StoreUsage, Version5UsageMovesToRunsAndRetiresTheIdsOfRemovedContainers) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  // A version 5 database as the build before per-run usage left it.
  Exec(path, R"sql(
CREATE TABLE tenancies (name TEXT PRIMARY KEY, created_ms INTEGER NOT NULL, doc TEXT NOT NULL,
  uid TEXT NOT NULL DEFAULT '');
CREATE TABLE containers (id TEXT PRIMARY KEY, tenancy TEXT NOT NULL, state TEXT NOT NULL,
  created_ms INTEGER NOT NULL, doc TEXT NOT NULL, idempotency_key TEXT NOT NULL DEFAULT '',
  tenancy_uid TEXT NOT NULL DEFAULT '');
CREATE TABLE gpus (node TEXT NOT NULL DEFAULT '', pci_address TEXT NOT NULL, idx INTEGER NOT NULL,
  doc TEXT NOT NULL, PRIMARY KEY (node, pci_address));
CREATE TABLE tokens (id TEXT PRIMARY KEY, sha256 TEXT NOT NULL UNIQUE, tenancy TEXT NOT NULL,
  created_ms INTEGER NOT NULL, tenancy_uid TEXT NOT NULL DEFAULT '');
CREATE TABLE usage (container_id TEXT PRIMARY KEY, tenancy TEXT NOT NULL,
  tenancy_uid TEXT NOT NULL, gpus INTEGER NOT NULL, started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL);
INSERT INTO containers VALUES ('c-kept', 't', 'exited', 1, '{}', '', 'u1');
INSERT INTO usage VALUES ('c-kept', 't', 'u1', 2, 10, 20);
INSERT INTO usage VALUES ('c-gone', 't', 'u1', 1.5, 30, 40);
INSERT INTO gpus VALUES ('', '0000:18:00.0', 0, '{"firmware_baseline":"sha256:ab","state":"free"}');
PRAGMA user_version=5;
)sql");
  auto snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok()) << snapshot.error().message;
  ASSERT_EQ(snapshot->usage.size(), 2u);
  EXPECT_EQ(snapshot->usage[1], (UsageRecord{"c-gone", "t", "u1", 1.5, 30, 40}));
  // The run of a container retention removed: its ID is never given again.
  EXPECT_EQ(snapshot->retired_ids, std::vector<std::string>{"c-gone"});
  EXPECT_EQ(snapshot->firmware_baselines.at("0000:18:00.0"), "sha256:ab");
}

TEST(StoreIntegrity, GarbageInItsPagesIsRefusedNamingTheFileAndTheRecovery) {
  TempDir dir;
  const std::string path = dir.path() + "/tessera.db";
  ASSERT_NO_FATAL_FAILURE(WriteContainers(path, 200));
  // Garbage over a stretch of its pages.
  const auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 40000u);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(size / 2));
    const std::string garbage(16384, '\xa5');
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  ExpectRefused(path, "cannot be trusted");
}

TEST(StoreIntegrity, ATruncatedStoreIsRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/tessera.db";
  ASSERT_NO_FATAL_FAILURE(WriteContainers(path, 200));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 3);
  ExpectRefused(path, "cannot be trusted");
}

TEST(StoreIntegrity, AFileThatIsNoDatabaseIsRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/tessera.db";
  std::ofstream(path) << std::string(8192, 'z');
  ExpectRefused(path, "cannot be read");
}

TEST(StoreIntegrity, AnEmptyFileIsALostStoreOnceTheServiceRanWithIt) {
  TempDir dir;
  const std::string path = dir.path() + "/tessera.db";
  std::ofstream(path).close();
  ExpectRefused(path, "empty (0 bytes)", /*refuse_empty=*/true);
  // Without a trace of an earlier run it is a new store.
  EXPECT_TRUE(Open(path));
}

TEST(StoreIntegrity, FirmwareBaselinesAreKeptApartFromTheLeaseRecords) {
  TempDir dir;
  const std::string path = dir.path() + "/tessera.db";
  GpuRecord gpu;
  gpu.pci_address = "0000:18:00.0";
  gpu.firmware_baseline = "sha256:ab";
  ASSERT_TRUE(Open(path)->CommitAndWait({gpu}).ok());
  Exec(path, "DELETE FROM gpus");
  auto snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok());
  EXPECT_TRUE(snapshot->gpus.empty());
  EXPECT_EQ(snapshot->firmware_baselines.at("0000:18:00.0"), "sha256:ab");
}

TEST(StoreWrites, OnAFullDiskTheyFailSayingWhyUntilOneSucceedsAgain) {
  SmallTmpfs disk("1m");
  ASSERT_TRUE(disk.mounted()) << disk.error();
  const std::string path = disk.path() + "/tessera.db";
  auto store = Open(path);
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->WriteFailure());
  const std::string filler = disk.Fill();
  Status failed = Ok();
  for (int i = 0; i < 200 && failed.ok(); ++i)
    failed = store->CommitAndWait({Container("c-" + std::to_string(i), 8000)});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().category, ErrorCategory::kUnavailable) << failed.error().message;
  auto why = store->WriteFailure();
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("full"), std::string::npos) << *why;
  // While it cannot write, a barrier tries a write of its own and reports its outcome.
  EXPECT_FALSE(store->CommitAndWait({}).ok());
  ::unlink(filler.c_str());
  EXPECT_TRUE(store->CommitAndWait({}).ok());
  EXPECT_FALSE(store->WriteFailure());
  EXPECT_TRUE(store->CommitAndWait({Container("c-after", 100)}).ok());
}

}  // namespace
}  // namespace tessera::fleet
