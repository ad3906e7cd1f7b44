// What checking the store before trusting it costs at start: a store of N container records (and
// a usage record each, as after N runs), closed, then opened again (PRAGMA quick_check, then the
// full load with every read checked to its end). Printed per N, with the file's size.
//
// Usage: store_check_bench [N...] (default 10000 100000)
#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "fleet/fleet.h"
#include "support/fixture_host.h"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i)
    sizes.push_back(std::stoi(argv[i]));
  if (sizes.empty()) sizes = {10000, 100000};
  for (int records : sizes) {
    testing::TempDir dir;
    const std::string path = dir.path() + "/tessera.db";
    {
      auto store = fleet::OpenSqliteStore(fleet::StoreOptions{path});
      if (!store) {
        std::fprintf(stderr, "%s\n", store.error().message.c_str());
        return 1;
      }
      std::vector<fleet::Mutation> batch;
      for (int i = 0; i < records; ++i) {
        fleet::ContainerRecord c;
        char id[19];
        std::snprintf(id, sizeof(id), "c-%016x", i);
        c.id = id;
        c.spec.image = "registry.example/team/train:2024.1";
        c.spec.tenancy = "team-" + std::to_string(i % 50);
        c.spec.gpus = 1 + i % 8;
        c.spec.command = {"python3", "train.py", "--epochs", "10"};
        c.spec.env = {{"SEED", "1"}, {"RUN", "bench"}};
        c.tenancy_uid = "00000000000000" + std::to_string(10 + i % 50);
        c.state = fleet::ContainerState::kExited;
        c.exit_code = 0;
        c.created_ms = 1700000000000 + i;
        c.started_ms = c.created_ms + 10;
        c.finished_ms = c.started_ms + 60000;
        batch.push_back(c);
        batch.push_back(fleet::UsageRecord{c.id, c.spec.tenancy, c.tenancy_uid,
                                           static_cast<double>(c.spec.gpus), c.started_ms,
                                           c.finished_ms});
        if (batch.size() >= 1000) {
          if (auto s = (*store)->CommitAndWait(std::move(batch)); !s) return 1;
          batch.clear();
        }
      }
      if (!batch.empty() && !(*store)->CommitAndWait(std::move(batch))) return 1;
    }
    const auto bytes = std::filesystem::file_size(path);
    // PRAGMA quick_check alone, on a connection of its own (cold page cache aside: the file was
    // just written).
    sqlite3* db = nullptr;
    sqlite3_open(path.c_str(), &db);
    const auto check_start = Clock::now();
    sqlite3_exec(db, "PRAGMA quick_check", nullptr, nullptr, nullptr);
    const double check_ms = Ms(Clock::now() - check_start);
    sqlite3_close(db);
    // Open (quick_check, pragmas, migrations) and load everything, as tessera-serve starts.
    const auto open_start = Clock::now();
    auto store = fleet::OpenSqliteStore(fleet::StoreOptions{path});
    const double open_ms = Ms(Clock::now() - open_start);
    const auto load_start = Clock::now();
    auto snapshot = (*store)->Load();
    const double load_ms = Ms(Clock::now() - load_start);
    std::printf(
        "%d containers + %d usage records, %.1f MB: PRAGMA quick_check %.1f ms; open "
        "(with the check) %.1f ms; load %.1f ms (%zu containers read)\n",
        records, records, static_cast<double>(bytes) / 1e6, check_ms, open_ms, load_ms,
        snapshot ? snapshot->containers.size() : 0);
  }
  return 0;
}
