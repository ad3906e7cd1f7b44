// The SQLite store (migrations, upserts, reload, group commit) and the lease state machine, in
// process on real files.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <thread>

#include "fleet/fleet.h"
#include "support/fixture_host.h"
#include "support/wait.h"

namespace tessera::fleet {
namespace {

using testing::TempDir;

std::unique_ptr<Store> Open(const std::string& path) {
  auto store = OpenSqliteStore(StoreOptions{path});
  EXPECT_TRUE(store.ok()) << (store.ok() ? "" : store.error().message);
  return store.ok() ? std::move(*store) : nullptr;
}

// Runs `sql` on the SQLite database at `path` (made when missing): a store as an earlier build
// left it.
void RunSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << (error ? error : "");
  sqlite3_close(db);
}

// Tables as schema versions 2 and 3 made them.
constexpr const char* kTenanciesAndContainersV2 =
    "CREATE TABLE tenancies (name TEXT PRIMARY KEY, created_ms INTEGER NOT NULL, doc TEXT NOT "
    "NULL);"
    "CREATE TABLE containers (id TEXT PRIMARY KEY, tenancy TEXT NOT NULL, state TEXT NOT NULL, "
    "created_ms INTEGER NOT NULL, doc TEXT NOT NULL, idempotency_key TEXT NOT NULL DEFAULT '');";
constexpr const char* kTokensV2 =
    "CREATE TABLE tokens (id TEXT PRIMARY KEY, sha256 TEXT NOT NULL UNIQUE, tenancy TEXT NOT NULL, "
    "created_ms INTEGER NOT NULL);";

TEST(SqliteStore, RecordsSurviveReopeningAndUpsertsReplace) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  ContainerRecord container;
  container.id = "c-1";
  container.spec = {"busybox",   "team-a", 2, Isolation::kGvisor, {"sh", "-c", "echo hi"},
                    {{"A", "1"}}};
  container.gpus = {"0000:18:00.0", "0000:2a:00.0"};
  container.tenancy_uid = "0123456789abcdef";
  container.idempotency_key = "k";
  container.created_ms = 5;
  GpuRecord gpu;
  gpu.pci_address = "0000:18:00.0";
  gpu.state = LeaseState::kActive;
  gpu.tenancy = "team-a";
  gpu.container_id = "c-1";
  gpu.firmware_baseline = "sha256:ab";
  Tenancy tenancy{"team-a", 3, {{"team", "ml"}}, {{"networks", "[\"n1\"]"}}, "0123456789abcdef"};
  TokenRecord token{"t-1", Sha256Hex("secret"), "team-a", 4, "0123456789abcdef"};
  {
    auto store = Open(path);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->CommitAndWait({tenancy, container, gpu, token}).ok());
    container.state = ContainerState::kExited;
    container.exit_code = 3;
    ASSERT_TRUE(store->CommitAndWait({container}).ok());
  }
  auto store = Open(path);
  ASSERT_TRUE(store);
  auto snapshot = store->Load();
  ASSERT_TRUE(snapshot.ok());
  ASSERT_EQ(snapshot->containers.size(), 1u);
  EXPECT_EQ(snapshot->containers[0], container);
  ASSERT_EQ(snapshot->gpus.size(), 1u);
  EXPECT_EQ(snapshot->gpus[0], gpu);
  ASSERT_EQ(snapshot->tenancies.size(), 1u);
  EXPECT_EQ(snapshot->tenancies[0], tenancy);
  ASSERT_EQ(snapshot->tokens.size(), 1u);
  EXPECT_EQ(snapshot->tokens[0], token);
}

TEST(SqliteStore, MigratesToTheCurrentSchemaAndRefusesANewerOne) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  { ASSERT_TRUE(Open(path)); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), SchemaVersion());
  sqlite3_finalize(stmt);
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  auto store = OpenSqliteStore(StoreOptions{path});
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().message.find("schema version 99"), std::string::npos);
}

TEST(SqliteStore, Version2GpusMigrateToThisHostAndNodesKeepTheirOwn) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  // A version 2 database, as the build before fleet placement left it.
  ASSERT_NO_FATAL_FAILURE(
      RunSql(path, std::string(kTenanciesAndContainersV2) +
                       "CREATE TABLE gpus (pci_address TEXT PRIMARY KEY, idx INTEGER NOT NULL, "
                       "doc TEXT NOT NULL);" +
                       kTokensV2 +
                       "INSERT INTO gpus VALUES ('0000:18:00.0', 0, "
                       "'{\"state\":\"quarantined\",\"reason\":\"rom changed\"}');"
                       "PRAGMA user_version=2;"));
  auto store = Open(path);
  ASSERT_TRUE(store);
  GpuRecord on_node;
  on_node.node = "node-b";
  on_node.pci_address = "0000:18:00.0";  // the same address on another node: another GPU
  on_node.state = LeaseState::kActive;
  ASSERT_TRUE(store->CommitAndWait({on_node}).ok());
  auto snapshot = store->Load();
  ASSERT_TRUE(snapshot.ok());
  ASSERT_EQ(snapshot->gpus.size(), 2u);
  EXPECT_EQ(snapshot->gpus[0].node, "");
  EXPECT_EQ(snapshot->gpus[0].id(), "0000:18:00.0");
  EXPECT_EQ(snapshot->gpus[0].state, LeaseState::kQuarantined);
  EXPECT_EQ(snapshot->gpus[0].reason, "rom changed");
  EXPECT_EQ(snapshot->gpus[1], on_node);
  EXPECT_EQ(snapshot->gpus[1].id(), "0000:18:00.0@node-b");
}

TEST(SqliteStore, Version3TenanciesGetAnIncarnationThatOnlyTheirLaterContainersJoin) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  // A version 3 database, as the build before tenancy incarnations left it: gamma was deleted
  // and created again at 1000; c-old is the earlier owner's, c-new and the token the current's.
  ASSERT_NO_FATAL_FAILURE(
      RunSql(path, std::string(kTenanciesAndContainersV2) +
                       "CREATE INDEX containers_by_idempotency ON containers (tenancy, "
                       "idempotency_key) WHERE idempotency_key != '';"
                       "CREATE TABLE gpus (node TEXT NOT NULL DEFAULT '', pci_address TEXT NOT "
                       "NULL, idx INTEGER NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (node, "
                       "pci_address));" +
                       kTokensV2 +
                       "INSERT INTO tenancies VALUES ('gamma', 1000, '{}'), ('delta', 5, '{}');"
                       "INSERT INTO containers VALUES "
                       "('c-old', 'gamma', 'exited', 500, '{\"image\":\"busybox\"}', 'k'),"
                       "('c-new', 'gamma', 'exited', 1000, '{\"image\":\"busybox\"}', 'k'),"
                       "('c-gone', 'omega', 'failed', 7, '{\"image\":\"busybox\"}', ''),"
                       "('c-delta', 'delta', 'exited', 6, '{\"image\":\"busybox\"}', '');"
                       "INSERT INTO tokens VALUES ('t-1', 'ab', 'gamma', 1200);"
                       "PRAGMA user_version=3;"));
  auto store = Open(path);
  ASSERT_TRUE(store);
  auto snapshot = store->Load();
  ASSERT_TRUE(snapshot.ok()) << snapshot.error().message;
  ASSERT_EQ(snapshot->tenancies.size(), 2u);
  const Tenancy& delta = snapshot->tenancies[0];
  const Tenancy& gamma = snapshot->tenancies[1];
  ASSERT_EQ(gamma.name, "gamma");
  EXPECT_EQ(gamma.uid.size(), 16u) << gamma.uid;
  EXPECT_EQ(delta.uid.size(), 16u) << delta.uid;
  EXPECT_NE(gamma.uid, delta.uid);
  std::map<std::string, std::string> uid_of;
  for (const auto& container : snapshot->containers)
    uid_of[container.id] = container.tenancy_uid;
  EXPECT_EQ(uid_of["c-old"], "");
  EXPECT_EQ(uid_of["c-new"], gamma.uid);
  EXPECT_EQ(uid_of["c-gone"], "");
  EXPECT_EQ(uid_of["c-delta"], delta.uid);
  ASSERT_EQ(snapshot->tokens.size(), 1u);
  EXPECT_EQ(snapshot->tokens[0].tenancy_uid, gamma.uid);
  // A later upsert keeps what the migration gave each record.
  ASSERT_TRUE(store->CommitAndWait({gamma}).ok());
  EXPECT_EQ(store->Load()->tenancies[1].uid, gamma.uid);
}

TEST(SqliteStore, SchedulingFieldsOfASubmissionAreKept) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  ContainerRecord container;
  container.id = "c-1";
  container.spec.tenancy = "t";
  container.spec.gpus = 8;
  container.spec.priority = -7;
  container.spec.max_duration_s = 3600;
  container.spec.preemptible = true;
  ASSERT_TRUE(Open(path)->CommitAndWait({container}).ok());
  auto snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok());
  ASSERT_EQ(snapshot->containers.size(), 1u);
  EXPECT_EQ(snapshot->containers[0], container);
}

TEST(SqliteStore, UsageRecordsOutliveTheirContainersAndLoadInTheOrderTheyEnded) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  ContainerRecord container;
  container.id = "c-1";
  container.spec.tenancy = "t";
  UsageRecord late{"c-1", "t", "u1", 2, 1000, 9000};
  UsageRecord early{"c-2", "t", "u1", 8, 500, 700};
  {
    auto store = Open(path);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->CommitAndWait({container, late}).ok());
    ASSERT_TRUE(store->CommitAndWait({early}).ok());
    // Retention removes the container record; the usage stays.
    ASSERT_TRUE(store->CommitAndWait({ContainerDeletion{"c-1"}}).ok());
  }
  auto snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok());
  EXPECT_TRUE(snapshot->containers.empty());
  ASSERT_EQ(snapshot->usage.size(), 2u);
  EXPECT_EQ(snapshot->usage[0], early);
  EXPECT_EQ(snapshot->usage[1], late);
}

// What a run was measured to use sits in its usage record, written once with it: a second record
// of the same run (other figures) leaves the first; a record nobody measured loads as unmeasured.
// A running container's figures live in its record and the GPUs' cursors beside them, the newest
// cursor replacing its GPU's.
TEST(SqliteStore, MeasuredUseJoinsTheRunsUsageRecordOnceAndCursorsReplaceTheirGpus) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  ContainerRecord running;
  running.id = "c-run";
  running.spec.tenancy = "t";
  running.measured = MeasuredUsage{12.5, 40.25, 3600.125};
  UsageRecord measured{"c-1", "t", "u1", 2, 1000, 9000};
  measured.measured = MeasuredUsage{7.5, 0.25, 1234.5};
  measured.gpu_model = "NVIDIA H100 80GB HBM3";
  measured.mode = "gpu";
  UsageRecord unmeasured{"c-2", "t", "u1", 1, 2000, 9500};
  UsageRecord again = measured;
  again.measured = MeasuredUsage{99, 99, 99};
  {
    auto store = Open(path);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store
                    ->CommitAndWait({running, measured, unmeasured,
                                     TelemetryCursor{"0000:18:00.0", 100, 5000, 10}})
                    .ok());
    ASSERT_TRUE(store->CommitAndWait({again, TelemetryCursor{"0000:18:00.0", 200, 7000, 20}}).ok());
  }
  auto snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok()) << snapshot.error().message;
  ASSERT_EQ(snapshot->usage.size(), 2u);
  EXPECT_EQ(snapshot->usage[0], measured);
  EXPECT_EQ(snapshot->usage[1], unmeasured);
  EXPECT_FALSE(snapshot->usage[1].measured);
  ASSERT_EQ(snapshot->containers.size(), 1u);
  EXPECT_EQ(snapshot->containers[0].measured, running.measured);
  EXPECT_EQ(snapshot->cursors, (std::vector<TelemetryCursor>{{"0000:18:00.0", 200, 7000, 20}}));
}

TEST(SqliteStore, MigRequestsTheirDevicesAndFractionalUsageRoundTrip) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  ContainerRecord container;
  container.id = "c-mig";
  container.spec.tenancy = "t";
  container.spec.mig = {"1g.10gb+me", 2};
  container.gpus = {"0000:18:00.0"};
  container.mig_devices = {"MIG-aaaa", "MIG-bbbb"};
  container.mig_gpus = 2.0 / 7.0;
  container.started = true;
  UsageRecord usage{"c-mig", "t", "u1", 2.0 / 7.0, 1000, 8000};
  ASSERT_TRUE(Open(path)->CommitAndWait({container, usage}).ok());
  auto snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok());
  ASSERT_EQ(snapshot->containers.size(), 1u);
  EXPECT_EQ(snapshot->containers[0], container);
  ASSERT_EQ(snapshot->usage.size(), 1u);
  EXPECT_EQ(snapshot->usage[0], usage);  // stored as REAL, read back exactly
}

TEST(SqliteStore, ASharesMigProfileAndSliceRoundTripAndOlderSharesHaveNone) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  ContainerRecord slice_share, gpu_share;
  slice_share.id = "c-slice";
  gpu_share.id = "c-gpu";
  slice_share.spec.tenancy = gpu_share.spec.tenancy = "t";
  sharing::Share share;
  share.memory_bytes = 10 * sharing::kGiB;
  share.compute_percent = 50;
  gpu_share.spec.share = share;
  gpu_share.gpus = {"0000:2a:00.0"};
  gpu_share.share_gpus = 0.5;
  share.mig_profile = "3g.40gb";
  slice_share.spec.share = share;
  slice_share.gpus = {"0000:18:00.0"};
  slice_share.mig_devices = {"MIG-8e2c3d4b-0001-4000-8000-000000000000"};
  slice_share.share_gpus = 0.5 * 3.0 / 7.0;
  slice_share.enforcement = "driver";
  slice_share.started = true;
  ASSERT_TRUE(Open(path)->CommitAndWait({slice_share, gpu_share}).ok());
  auto snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok());
  ASSERT_EQ(snapshot->containers.size(), 2u);
  for (const auto& loaded : snapshot->containers)
    EXPECT_EQ(loaded, loaded.id == slice_share.id ? slice_share : gpu_share);
  // A share written before shares of MIG slices (no "mig" in its document) is a whole GPU's.
  RunSql(path,
         "UPDATE containers SET doc = json_remove(doc, '$.share.mig', '$.mig_devices') WHERE "
         "id = 'c-slice'");
  snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok());
  for (const auto& loaded : snapshot->containers) {
    ASSERT_TRUE(loaded.spec.share);
    EXPECT_EQ(loaded.spec.share->mig_profile, "");
    EXPECT_TRUE(loaded.mig_devices.empty());
  }
}

TEST(SqliteStore, AContainerDeletionRemovesTheRecord) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  auto store = Open(path);
  ASSERT_TRUE(store);
  ContainerRecord kept, removed;
  kept.id = "c-kept";
  removed.id = "c-removed";
  kept.spec.tenancy = removed.spec.tenancy = "t";
  ASSERT_TRUE(store->CommitAndWait({kept, removed}).ok());
  ASSERT_TRUE(store->CommitAndWait({ContainerDeletion{"c-removed"}}).ok());
  store.reset();
  auto snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok());
  ASSERT_EQ(snapshot->containers.size(), 1u);
  EXPECT_EQ(snapshot->containers[0].id, "c-kept");
}

TEST(SqliteStore, TokensKeepTheirScopeExpiryAndLastUseAndARevocationDeletesOne) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  TokenRecord reader{"t-00000001",       Sha256Hex("a"),        "team-a", 4,
                     "0123456789abcdef", TokenScope::kReadOnly, 9000,     0};
  TokenRecord metrics{"t-00000002", Sha256Hex("b"), "", 5, "", TokenScope::kMetrics, 0, 0};
  {
    auto store = Open(path);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->CommitAndWait({reader, metrics}).ok());
    // A last use flushed later is kept; one older than what is stored never moves it back.
    reader.last_used_ms = 700;
    ASSERT_TRUE(store->CommitAndWait({reader}).ok());
    TokenRecord stale = reader;
    stale.last_used_ms = 600;
    ASSERT_TRUE(store->CommitAndWait({stale}).ok());
    ASSERT_TRUE(store->CommitAndWait({TokenDeletion{"t-00000002"}}).ok());
  }
  auto snapshot = Open(path)->Load();
  ASSERT_TRUE(snapshot.ok());
  ASSERT_EQ(snapshot->tokens.size(), 1u);
  EXPECT_EQ(snapshot->tokens[0], reader);
}

TEST(SqliteStore, Version7TokensBecomeTenancyTokensThatNeverExpire) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  { ASSERT_TRUE(Open(path)); }
  // The schema as version 7 left it: tokens without scope, expiry or last use, no audit trail,
  // and a token row written the way that version wrote it.
  const std::string hash = Sha256Hex("old");
  const std::string sql =
      "ALTER TABLE tokens DROP COLUMN scope; ALTER TABLE tokens DROP COLUMN expires_ms; "
      "ALTER TABLE tokens DROP COLUMN last_used_ms; DROP TRIGGER audit_append_only; "
      "DROP TABLE audit; ALTER TABLE gpus DROP COLUMN health_step; PRAGMA user_version=7; "
      "INSERT INTO tokens(id, sha256, tenancy, created_ms, tenancy_uid) VALUES('t-0000000a', '" +
      hash + "', 'team-a', 42, 'fedcba9876543210');";
  ASSERT_NO_FATAL_FAILURE(RunSql(path, sql));
  auto store = Open(path);
  ASSERT_TRUE(store);
  auto snapshot = store->Load();
  ASSERT_TRUE(snapshot.ok()) << snapshot.error().message;
  ASSERT_EQ(snapshot->tokens.size(), 1u);
  const TokenRecord expected{"t-0000000a",        hash, "team-a", 42, "fedcba9876543210",
                             TokenScope::kTenant, 0,    0};
  EXPECT_EQ(snapshot->tokens[0], expected);
}

TEST(SqliteStore, ConcurrentCommitsAreGroupedAndAllDurable) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  auto store = Open(path);
  ASSERT_TRUE(store);
  constexpr int kThreads = 8, kEach = 200;
  std::atomic<int> acknowledged{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        ContainerRecord c;
        c.id = "c-" + std::to_string(t) + "-" + std::to_string(i);
        c.spec.tenancy = "t";
        c.spec.image = "x";
        if (store->CommitAndWait({c}).ok()) acknowledged++;
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(acknowledged.load(), kThreads * kEach);
  auto stats = store->stats();
  EXPECT_EQ(stats.mutations, static_cast<uint64_t>(kThreads * kEach));
  // Eight writers waiting on each other's commits share transactions.
  EXPECT_LT(stats.groups, stats.mutations);
  store.reset();
  auto reopened = Open(path);
  EXPECT_EQ(reopened->Load()->containers.size(), static_cast<size_t>(kThreads * kEach));
}

TEST(SqliteStore, TheCheckpointThreadCopiesTheWalIntoTheDatabaseWhileCommitsGoOn) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  auto store = Open(path);
  ASSERT_TRUE(store);
  // Well past SQLite's 1000-page mark: about 4 KiB per record, one page each or more.
  const std::string big(4000, 'x');
  for (int group = 0; group < 60; ++group) {
    std::vector<Mutation> mutations;
    for (int i = 0; i < 40; ++i) {
      ContainerRecord c;
      c.id = "c-" + std::to_string(group) + "-" + std::to_string(i);
      c.spec.tenancy = "t";
      c.spec.image = "x";
      c.spec.env["PAD"] = big;
      mutations.push_back(c);
    }
    ASSERT_TRUE(store->CommitAndWait(std::move(mutations)).ok());
  }
  // The database file itself fills (the WAL's frames were copied back), without any commit
  // having run a checkpoint (wal_autocheckpoint=0 on the writer).
  uintmax_t db_size = 0;
  testing::WaitUntil([&] {
    db_size = std::filesystem::file_size(path);
    return db_size >= 4u << 20;
  });
  EXPECT_GE(db_size, 4u << 20);
  auto stats = store->stats();
  EXPECT_GT(stats.checkpoints, 0u);
  EXPECT_GT(stats.checkpointed_frames, 1000u);
  store.reset();
  EXPECT_EQ(Open(path)->Load()->containers.size(), 60u * 40u);
}

AuditRecord AuditAt(int64_t time_ms, std::string action, std::string tenancy) {
  AuditRecord record;
  record.time_ms = time_ms;
  record.token_id = "admin";
  record.scope = "admin";
  record.action = std::move(action);
  record.object_kind = "tenancy";
  record.object_id = tenancy;
  record.tenancy = std::move(tenancy);
  record.result = "ok";
  record.request_id = "r-" + std::to_string(time_ms);
  return record;
}

TEST(SqliteStore, AuditRecordsCommitWithTheirChangeAndAreReadAPageAtATime) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  auto store = Open(path);
  ASSERT_TRUE(store);
  Tenancy tenancy{"team-a", 3, {}, {}, "0123456789abcdef"};
  ASSERT_TRUE(store->CommitAndWait({tenancy, AuditAt(1000, "tenancy.put", "team-a")}).ok());
  // A commit that fails writes neither the change nor its record: a token whose hash is taken
  // breaks the transaction after the record was inserted.
  TokenRecord first{"t-1", Sha256Hex("one"), "team-a", 4, tenancy.uid};
  ASSERT_TRUE(store->CommitAndWait({first}).ok());
  TokenRecord clash{"t-2", first.sha256, "team-a", 5, tenancy.uid};
  EXPECT_FALSE(store->CommitAndWait({AuditAt(1500, "token.create", "team-a"), clash}).ok());
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(store->CommitAndWait({AuditAt(2000 + i, "container.create", "team-b")}).ok());

  AuditQuery query;
  auto all = store->QueryAudit(query);
  ASSERT_TRUE(all.ok()) << all.error().message;
  ASSERT_EQ(all->entries.size(), 6u);
  EXPECT_EQ(all->entries[0].record, AuditAt(1000, "tenancy.put", "team-a"));
  EXPECT_EQ(all->next, 0);
  query.limit = 4;
  auto page = store->QueryAudit(query);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->entries.size(), 4u);
  EXPECT_EQ(page->next, page->entries.back().seq);
  query.after = page->next;
  auto rest = store->QueryAudit(query);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->entries.size(), 2u);
  EXPECT_EQ(rest->next, 0);
  AuditQuery filtered;
  filtered.tenancy = "team-b";
  filtered.from_ms = 2001;
  filtered.to_ms = 2004;
  auto window = store->QueryAudit(filtered);
  ASSERT_TRUE(window.ok());
  ASSERT_EQ(window->entries.size(), 3u);
  EXPECT_EQ(window->entries.front().record.time_ms, 2001);
}

TEST(SqliteStore, AuditExpiryDeletesOnlyOlderRecordsAtMostABatchAtATime) {
  TempDir dir;
  auto store = Open(dir.path() + "/t.db");
  ASSERT_TRUE(store);
  std::vector<Mutation> records;
  for (int i = 0; i < 25; ++i)
    records.push_back(AuditAt(100 + i, "tenancy.put", "old"));
  records.push_back(AuditAt(10000, "tenancy.put", "new"));
  ASSERT_TRUE(store->CommitAndWait(records).ok());
  auto first = store->ExpireAudit(1000, 10);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 10u);
  auto page = store->QueryAudit(AuditQuery{});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->entries.size(), 16u);
  EXPECT_EQ(page->entries.front().record.time_ms, 110);  // the oldest went first
  EXPECT_EQ(*store->ExpireAudit(1000, 10), 10u);
  EXPECT_EQ(*store->ExpireAudit(1000, 10), 5u);
  EXPECT_EQ(*store->ExpireAudit(1000, 10), 0u);
  page = store->QueryAudit(AuditQuery{});
  ASSERT_EQ(page->entries.size(), 1u);
  EXPECT_EQ(page->entries[0].record.tenancy, "new");
  // Sequence numbers are never given again after a deletion.
  ASSERT_TRUE(store->CommitAndWait({AuditAt(20000, "tenancy.put", "newer")}).ok());
  page = store->QueryAudit(AuditQuery{});
  ASSERT_EQ(page->entries.size(), 2u);
  EXPECT_EQ(page->entries[1].seq, 27);
}

TEST(LeaseStateMachine, FollowsTheDocumentedPathsOnly) {
  using S = LeaseState;
  for (auto [from, to] : std::vector<std::pair<S, S>>{{S::kFree, S::kReserved},
                                                      {S::kReserved, S::kActive},
                                                      {S::kActive, S::kReleasing},
                                                      {S::kReleasing, S::kChecking},
                                                      {S::kChecking, S::kFree},
                                                      {S::kChecking, S::kQuarantined},
                                                      {S::kChecking, S::kDraining},
                                                      {S::kFree, S::kDraining},
                                                      {S::kDraining, S::kFree},
                                                      {S::kQuarantined, S::kFree}}) {
    EXPECT_TRUE(CheckLeaseTransition(from, to).ok())
        << LeaseStateName(from) << " -> " << LeaseStateName(to);
  }
  for (auto [from, to] : std::vector<std::pair<S, S>>{{S::kActive, S::kFree},
                                                      {S::kReleasing, S::kFree},
                                                      {S::kQuarantined, S::kReserved},
                                                      {S::kDraining, S::kReserved},
                                                      {S::kFree, S::kActive}}) {
    auto status = CheckLeaseTransition(from, to);
    EXPECT_FALSE(status.ok()) << LeaseStateName(from) << " -> " << LeaseStateName(to);
  }
}

TEST(ReplicaMerge, KeepsEitherStopRequestAndTheStatusFurtherAlong) {
  ContainerRecord ours;
  ours.id = "c-1";
  ours.state = ContainerState::kPending;
  ContainerRecord theirs = ours;
  theirs.state = ContainerState::kRunning;
  theirs.started = true;
  theirs.gpus = {"0000:18:00.0@n"};
  ours.stop_requested = true;
  ContainerRecord merged = MergeContainerRecords(ours, theirs);
  EXPECT_TRUE(merged.stop_requested);
  EXPECT_EQ(merged.state, ContainerState::kRunning);
  EXPECT_EQ(merged.gpus, theirs.gpus);
  // An ended record is never taken back to running, whichever side holds it.
  ContainerRecord ended = theirs;
  ended.state = ContainerState::kExited;
  ended.exit_code = 0;
  EXPECT_EQ(MergeContainerRecords(ended, theirs).state, ContainerState::kExited);
  EXPECT_EQ(MergeContainerRecords(theirs, ended).exit_code, 0);
  // Identity and spec stay ours.
  theirs.spec.image = "other";
  EXPECT_EQ(MergeContainerRecords(ours, theirs).spec.image, ours.spec.image);
}

TEST(IdempotentIds, DependOnTheIncarnationAndTheKeyAndLookLikeRandomOnes) {
  const std::string id = IdempotentContainerId("uid-1", "key");
  EXPECT_EQ(id, IdempotentContainerId("uid-1", "key"));
  EXPECT_NE(id, IdempotentContainerId("uid-2", "key"));
  EXPECT_EQ(id.size(), 18u);
  EXPECT_EQ(id.substr(0, 2), "c-");
}

TEST(TenancyNames, AreDnsLabels) {
  EXPECT_EQ(CheckTenancyName("team-a"), "");
  EXPECT_EQ(CheckTenancyName("a"), "");
  EXPECT_NE(CheckTenancyName(""), "");
  EXPECT_NE(CheckTenancyName("Team"), "");
  EXPECT_NE(CheckTenancyName("-a"), "");
  EXPECT_NE(CheckTenancyName("a_b"), "");
  EXPECT_NE(CheckTenancyName(std::string(64, 'a')), "");
}

}  // namespace
}  // namespace tessera::fleet
