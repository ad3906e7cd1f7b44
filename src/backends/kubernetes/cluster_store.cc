#include "backends/kubernetes/cluster_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "backends/kubernetes/audit_objects.h"
#include "backends/kubernetes/objects.h"
#include "backends/kubernetes/state_objects.h"
#include "common/untrusted_text.h"

namespace tessera::k8s {
namespace {

using fleet::ContainerRecord;
using fleet::Mutation;

constexpr int kMergeAttempts = 8;
constexpr int kPageSize = 500;       // objects per list page
constexpr size_t kAuditWriters = 8;  // audit records of one round written at once

// A query parameter value: unreserved characters as they are, everything else %XX.
std::string QueryValue(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += {'%', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return out;
}
constexpr const char* kManagedSelector = "app.kubernetes.io/managed-by=tessera";

// The API calls resourceVersion opaque; etcd's revisions (and the scripted server's) are one
// counter that only grows, so a larger one is a later write of the object. 0: unreadable.
uint64_t VersionOf(const Json& object) {
  const Json metadata = object.is_object() ? object.value("metadata", Json::object()) : Json();
  const std::string text = metadata.is_object() ? metadata.value("resourceVersion", "") : "";
  uint64_t version = 0;
  std::from_chars(text.data(), text.data() + text.size(), version);
  return version;
}

size_t HashOf(const Json& value) {
  return std::hash<std::string>{}(value.dump());
}

// What the writer compares to skip unchanged halves of a GpuContainer.
size_t SpecHash(const Json& object) {
  return HashOf(Json::array({object["metadata"]["labels"], object["spec"]}));
}
size_t StatusHash(const Json& object) {
  return HashOf(object["status"]);
}

enum class Kind { kContainer, kTenancy, kToken, kGpus, kUsage, kRetired };
constexpr Kind kKinds[] = {Kind::kTenancy, Kind::kToken, Kind::kContainer,
                           Kind::kGpus,    Kind::kUsage, Kind::kRetired};

std::string KeyOf(Kind kind, const std::string& name) {
  static constexpr const char* kPrefix[] = {"c/", "t/", "s/", "g/", "u/", "r/"};
  return kPrefix[static_cast<int>(kind)] + name;
}

// The query's exact terms (its labels selected by hash when the values were not label-safe).
bool AuditMatches(const fleet::AuditQuery& query, const fleet::AuditEntry& entry) {
  const fleet::AuditRecord& record = entry.record;
  if (entry.seq <= query.after) return false;
  if (!query.tenancy.empty() && record.tenancy != query.tenancy) return false;
  if (!query.action.empty() && record.action != query.action) return false;
  if (query.from_ms && record.time_ms < *query.from_ms) return false;
  if (query.to_ms && record.time_ms >= *query.to_ms) return false;
  return true;
}

// A commit's outcome once its round is written.
struct Queued {
  std::vector<Mutation> mutations;
  std::function<void(Status)> done;
};

class ClusterStoreImpl final : public ClusterStore {
  struct Known {
    uint64_t version = 0;
    size_t spec_hash = 0;
    size_t status_hash = 0;
    // A container's stop request as last written or seen: never taken back by a write made
    // from a model that has not heard of it yet.
    bool stop_requested = false;
  };

 public:
  explicit ClusterStoreImpl(ClusterStoreOptions options)
      : options_(std::move(options)), client_(options_.client) {
    writer_ = std::thread([this] { WriterLoop(); });
  }

  ~ClusterStoreImpl() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    writer_.join();
    Unfollow();
  }

  Result<fleet::StoreSnapshot> Load() override {
    fleet::StoreSnapshot snapshot;
    std::lock_guard client_lock(client_mu_);
    for (Kind kind : kKinds) {
      auto listed = ListPages(client_, kind, [&](const Json& item) {
        std::vector<Mutation> records;
        if (!See(kind, item, /*leading_drops_gpus=*/false, &records)) return;
        for (auto& record : records) {
          std::visit(
              [&snapshot](auto& value) {
                using T = std::decay_t<decltype(value)>;
                if constexpr (std::is_same_v<T, fleet::Tenancy>) {
                  snapshot.tenancies.push_back(std::move(value));
                } else if constexpr (std::is_same_v<T, fleet::TokenRecord>) {
                  snapshot.tokens.push_back(std::move(value));
                } else if constexpr (std::is_same_v<T, ContainerRecord>) {
                  snapshot.containers.push_back(std::move(value));
                } else if constexpr (std::is_same_v<T, fleet::GpuRecord>) {
                  snapshot.gpus.push_back(std::move(value));
                } else if constexpr (std::is_same_v<T, fleet::UsageRecord>) {
                  snapshot.usage.push_back(std::move(value));
                } else if constexpr (std::is_same_v<T, fleet::ContainerDeletion>) {
                  if (value.tombstone) snapshot.retired_ids.push_back(value.id);
                }
              },
              record);
        }
      });
      if (!listed) return listed.error().WithContext("cluster store: list");
    }
    std::sort(snapshot.containers.begin(), snapshot.containers.end(),
              [](const ContainerRecord& a, const ContainerRecord& b) {
                return std::tie(a.created_ms, a.id) < std::tie(b.created_ms, b.id);
              });
    std::sort(snapshot.usage.begin(), snapshot.usage.end(),
              [](const fleet::UsageRecord& a, const fleet::UsageRecord& b) {
                return std::tie(a.finished_ms, a.container_id) <
                       std::tie(b.finished_ms, b.container_id);
              });
    std::sort(snapshot.gpus.begin(), snapshot.gpus.end(),
              [](const fleet::GpuRecord& a, const fleet::GpuRecord& b) {
                return std::tie(a.node, a.index) < std::tie(b.node, b.index);
              });
    return snapshot;
  }

  void Commit(std::vector<Mutation> mutations, std::function<void(Status)> done) override {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(Queued{std::move(mutations), std::move(done)});
    }
    wake_.notify_one();
  }

  fleet::StoreStats stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

  void Follow(ChangeCallback on_change) override {
    {
      std::lock_guard lock(emit_mu_);
      on_change_ = std::move(on_change);
    }
    for (Kind kind : kKinds)
      watches_.emplace_back([this, kind] { WatchLoop(kind); });
  }

  void Unfollow() override {
    stop_watches_ = true;
    for (auto& watch : watches_)
      if (watch.joinable()) watch.join();
    std::lock_guard lock(emit_mu_);
    on_change_ = nullptr;
  }

  bool Synced() const override { return static_cast<std::size_t>(synced_) == std::size(kKinds); }

  Status Resync() override {
    if (auto status = CommitAndWait({}); !status) return status;
    k8s::Client client(options_.client);
    for (Kind kind : kKinds) {
      // The new leader takes the GPU records its predecessor wrote.
      auto listed = Relist(client, kind, false);
      if (!listed) return listed.error().WithContext("cluster store: relist");
    }
    return Ok();
  }

  // A page of the trail: the audit ConfigMaps the query's labels select, read page by page on a
  // client of its own (beside the writer), the `limit` + 1 first after the cursor kept. The API
  // server lists a namespace's objects in name order (its storage's key order), which is the
  // records' order: the list stops once a page is complete; should a list come out of order,
  // the whole of it is read.
  Result<fleet::AuditPage> QueryAudit(const fleet::AuditQuery& query) const override {
    const size_t limit = std::clamp<size_t>(query.limit, 1, fleet::AuditQuery::kMaxLimit);
    k8s::Client client(options_.client);
    auto later = [](const fleet::AuditEntry& a, const fleet::AuditEntry& b) {
      return a.seq < b.seq;
    };
    std::vector<fleet::AuditEntry> kept;  // a max-heap by seq of at most limit + 1
    int64_t previous = -1;
    bool ordered = true;
    auto listed = ListSelected(client, Resource::ConfigMaps().Path(options_.ns),
                               AuditSelector(query), [&](const Json& item) {
                                 auto entry = AuditEntryOf(item);
                                 if (!entry) {
                                   spdlog::warn("cluster store: {}", entry.error().message);
                                   return true;
                                 }
                                 ordered = ordered && entry->seq >= previous;
                                 previous = entry->seq;
                                 if (kept.size() > limit && entry->seq > kept.front().seq)
                                   return !ordered;
                                 if (!AuditMatches(query, *entry)) return true;
                                 kept.push_back(std::move(*entry));
                                 std::push_heap(kept.begin(), kept.end(), later);
                                 if (kept.size() > limit + 1) {
                                   std::pop_heap(kept.begin(), kept.end(), later);
                                   kept.pop_back();
                                 }
                                 return true;
                               });
    if (!listed) return listed.error().WithContext("cluster store: audit records");
    std::sort_heap(kept.begin(), kept.end(), later);
    fleet::AuditPage page;
    if (kept.size() > limit) {
      kept.pop_back();
      page.next = kept.back().seq;
    }
    page.entries = std::move(kept);
    return page;
  }

  // Retention (the leader's sweep): at most `limit` records named before `before_ms` (their
  // time), each deleted on its own; the sweep calls again until fewer than `limit` go.
  Result<size_t> ExpireAudit(int64_t before_ms, size_t limit) override {
    const int64_t bound = std::max<int64_t>(before_ms, 0) * kAuditSeqPerMs;
    k8s::Client client(options_.client);
    std::vector<std::string> expired;
    int64_t previous = -1;
    bool ordered = true;
    auto listed = ListSelected(client, Resource::ConfigMaps().Path(options_.ns),
                               AuditSelector(fleet::AuditQuery()), [&](const Json& item) {
                                 const std::string name =
                                     item.value("metadata", Json::object()).value("name", "");
                                 auto seq = AuditSeqOfName(name);
                                 if (!seq) return true;
                                 ordered = ordered && *seq >= previous;
                                 previous = *seq;
                                 if (*seq >= bound)
                                   return !ordered;  // in name order, the rest are newer still
                                 expired.push_back(name);
                                 return expired.size() < limit;
                               });
    if (!listed) return listed.error().WithContext("cluster store: audit records");
    size_t removed = 0;
    for (const auto& name : expired) {
      auto deleted = client.Delete(Resource::ConfigMaps(), options_.ns, name);
      if (!deleted && deleted.error().category != ErrorCategory::kNotFound)
        return deleted.error().WithContext("cluster store: audit record " + name);
      ++removed;
    }
    return removed;
  }

  Result<std::optional<std::string>> AdminTokenHash() override {
    std::lock_guard client_lock(client_mu_);
    auto secret = client_.Get(Resource::Secrets(), options_.ns, kAdminTokenSecret);
    if (!secret) {
      if (secret.error().category == ErrorCategory::kNotFound) return std::optional<std::string>();
      return secret.error();
    }
    auto hash = k8s::AdminTokenHashOf(*secret);
    if (!hash) return hash.error();
    return std::optional<std::string>(std::move(*hash));
  }

  Status PutAdminTokenHash(const std::string& sha256, bool replace) override {
    std::lock_guard client_lock(client_mu_);
    Json desired = AdminTokenSecret(sha256, options_.ns);
    for (int attempt = 0; attempt < kMergeAttempts; ++attempt) {
      auto created = client_.Create(Resource::Secrets(), options_.ns, desired);
      if (created) return Ok();
      if (created.error().category != ErrorCategory::kAlreadyExists || !replace)
        return created.error();
      auto live = client_.Get(Resource::Secrets(), options_.ns, kAdminTokenSecret);
      if (!live) continue;
      if (auto hash = AdminTokenHashOf(*live); hash && *hash == sha256) return Ok();
      desired["metadata"]["resourceVersion"] = (*live)["metadata"].value("resourceVersion", "");
      auto replaced = client_.Replace(Resource::Secrets(), options_.ns, kAdminTokenSecret, desired);
      if (replaced) return Ok();
      if (replaced.error().category != ErrorCategory::kFailedPrecondition) return replaced.error();
    }
    return Unavailable("admin token Secret: conflicts on every attempt");
  }

 private:
  static Resource ResourceOf(Kind kind) {
    switch (kind) {
      case Kind::kContainer:
        return Resource::GpuContainers();
      case Kind::kTenancy:
        return Resource::Tenancies();
      case Kind::kToken:
        return Resource::Secrets();
      case Kind::kGpus:
      case Kind::kUsage:
      case Kind::kRetired:
        return Resource::ConfigMaps();
    }
    return Resource::GpuContainers();
  }
  std::string NamespaceOf(Kind kind) const {
    return kind == Kind::kToken || kind == Kind::kGpus || kind == Kind::kUsage ||
                   kind == Kind::kRetired
               ? options_.ns
               : "";
  }
  static std::string SelectorOf(Kind kind) {
    if (kind == Kind::kToken) return std::string(kTokenSecretLabel) + "=tenancy";
    if (kind == Kind::kUsage) return std::string(kUsageLabel) + "=container";
    if (kind == Kind::kRetired) return std::string(kRetiredLabel) + "=container";
    return kManagedSelector;
  }

  bool Leading() const { return !options_.leading || options_.leading(); }

  void Emit(const Mutation& change) {
    std::lock_guard lock(emit_mu_);
    if (on_change_) on_change_(change);
  }

  // One object as listed or watched: its records when it is newer than what this replica last
  // wrote or saw (nothing otherwise), remembering its version. A leader ignores GPU records:
  // it is their only writer.
  bool See(Kind kind, const Json& object, bool leading_drops_gpus, std::vector<Mutation>* out) {
    const uint64_t version = VersionOf(object);
    const std::string name =
        object.is_object() ? object.value("metadata", Json::object()).value("name", "") : "";
    if (kind == Kind::kGpus && !name.starts_with("tessera-gpus-")) return false;
    std::lock_guard known_lock(known_mu_);
    Known& known = known_[KeyOf(kind, name)];
    if (version != 0 && version <= known.version) return false;
    known.version = version;
    switch (kind) {
      case Kind::kContainer: {
        auto record = ContainerRecordOf(object);
        if (!record) {
          spdlog::warn("cluster store: GpuContainer {}: {}", name, record.error().message);
          return false;
        }
        Json normal = GpuContainerObject(*record);
        known.spec_hash = SpecHash(normal);
        known.status_hash = StatusHash(normal);
        known.stop_requested = record->stop_requested;
        out->push_back(std::move(*record));
        return true;
      }
      case Kind::kTenancy: {
        auto record = TenancyRecordOf(object);
        if (!record) {
          spdlog::warn("cluster store: Tenancy {}: {}", name, record.error().message);
          return false;
        }
        out->push_back(std::move(*record));
        return true;
      }
      case Kind::kToken: {
        auto record = TokenRecordOf(object);
        if (!record) {
          spdlog::warn("cluster store: token Secret {}: {}", name, record.error().message);
          return false;
        }
        out->push_back(std::move(*record));
        return true;
      }
      case Kind::kGpus: {
        if (leading_drops_gpus && Leading()) return false;
        auto records = GpuRecordsOf(object);
        if (!records) {
          spdlog::warn("cluster store: {}: {}", name, records.error().message);
          return false;
        }
        for (auto& gpu : *records)
          out->push_back(std::move(gpu));
        return true;
      }
      case Kind::kUsage: {
        auto record = UsageRecordOf(object);
        if (!record) {
          spdlog::warn("cluster store: {}: {}", name, record.error().message);
          return false;
        }
        out->push_back(std::move(*record));
        return true;
      }
      case Kind::kRetired: {
        auto id = RetiredIdOf(object);
        if (!id) {
          spdlog::warn("cluster store: {}: {}", name, id.error().message);
          return false;
        }
        out->push_back(fleet::ContainerDeletion{std::move(*id), true});
        return true;
      }
    }
    return false;
  }

  // One list of `kind`, page by page (so that no more than a page of objects is ever parsed at
  // once: a replica's memory stays that of its model however many objects there are), `each`
  // called per item. Returns the list's resourceVersion.
  Result<std::string> ListPages(k8s::Client& client, Kind kind,
                                const std::function<void(const Json&)>& each) {
    return ListSelected(client, ResourceOf(kind).Path(NamespaceOf(kind)), SelectorOf(kind),
                        [&each](const Json& item) {
                          each(item);
                          return true;
                        });
  }

  // The objects under `base` that `selector` selects, page by page, until `each` returns false.
  static Result<std::string> ListSelected(k8s::Client& client, const std::string& base,
                                          const std::string& selector,
                                          const std::function<bool(const Json&)>& each) {
    std::string token, version;
    do {
      std::string path =
          base + "?labelSelector=" + QueryValue(selector) + "&limit=" + std::to_string(kPageSize);
      if (!token.empty()) path += "&continue=" + QueryValue(token);
      auto text = client.GetText(path);
      if (!text) return text.error();
      if (auto nesting = CheckJsonNesting(*text, path); !nesting) return nesting.error();
      const Json page = Json::parse(*text, nullptr, false);
      if (!page.is_object()) return Unavailable("GET " + path + ": not a JSON object");
      const Json metadata = page.value("metadata", Json::object());
      if (!metadata.is_object()) return Unavailable("GET " + path + ": no list metadata");
      if (version.empty()) version = metadata.value("resourceVersion", "");
      token = metadata.value("continue", "");
      auto items = page.find("items");
      if (items != page.end() && items->is_array())
        for (const auto& item : *items)
          if (!each(item)) return version;
    } while (!token.empty());
    return version;
  }

  // A (re)list: every newer object reported, and every container or tenancy this replica knew
  // that the list (taken at its resourceVersion) no longer holds reported deleted.
  Result<std::string> Relist(k8s::Client& client, Kind kind, bool leading_drops_gpus) {
    std::vector<Mutation> changes;
    std::set<std::string> listed;
    auto version = ListPages(client, kind, [&](const Json& item) {
      listed.insert(KeyOf(kind, item.value("metadata", Json::object()).value("name", "")));
      See(kind, item, leading_drops_gpus, &changes);
      // Reported page by page: the changes of a whole relist are not held at once.
      for (const auto& change : changes)
        Emit(change);
      changes.clear();
    });
    if (!version) return version;
    if (kind == Kind::kContainer || kind == Kind::kTenancy) {
      uint64_t at = 0;
      std::from_chars(version->data(), version->data() + version->size(), at);
      const std::string prefix = KeyOf(kind, "");
      std::lock_guard known_lock(known_mu_);
      for (auto it = known_.begin(); it != known_.end();) {
        // Written after the list was taken: not missing, only newer than the list.
        if (!it->first.starts_with(prefix) || listed.count(it->first) || it->second.version > at ||
            it->second.version == 0) {
          ++it;
          continue;
        }
        const std::string name = it->first.substr(prefix.size());
        if (kind == Kind::kContainer) changes.push_back(fleet::ContainerDeletion{name});
        if (kind == Kind::kTenancy) changes.push_back(fleet::TenancyDeletion{name});
        it = known_.erase(it);
      }
    }
    for (const auto& change : changes)
      Emit(change);
    return version;
  }

  void SleepUnlessStopping(std::chrono::milliseconds delay) {
    for (auto waited = std::chrono::milliseconds(0); waited < delay && !stop_watches_;
         waited += std::chrono::milliseconds(50))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // List, then watch from the list's version for as long as the server streams; list again
  // after 410 Gone (history compacted) or an error.
  void WatchLoop(Kind kind) {
    k8s::Client client(options_.client);
    bool first = true;
    auto on_event = [&](const WatchEvent& event) {
      if (event.type == "ADDED" || event.type == "MODIFIED") {
        std::vector<Mutation> changes;
        See(kind, event.object, true, &changes);
        for (const auto& change : changes)
          Emit(change);
      } else if (event.type == "DELETED") {
        const std::string name = event.object.value("metadata", Json::object()).value("name", "");
        bool known = false;
        {
          std::lock_guard known_lock(known_mu_);
          known = known_.erase(KeyOf(kind, name)) > 0;
        }
        // This replica's own deletions forgot the object first.
        if (known && kind == Kind::kContainer) Emit(fleet::ContainerDeletion{name});
        if (known && kind == Kind::kTenancy) Emit(fleet::TenancyDeletion{name});
        if (known && kind == Kind::kToken) Emit(fleet::TokenDeletion{TokenIdOfSecretName(name)});
      }
      return !stop_watches_.load();
    };
    while (!stop_watches_) {
      auto version = Relist(client, kind, true);
      if (!version) {
        spdlog::warn("cluster store list: {}", version.error().message);
        SleepUnlessStopping(std::chrono::seconds(1));
        continue;
      }
      if (first) {
        first = false;
        ++synced_;
      }
      std::string at = *version;
      while (!stop_watches_) {
        auto status = client.WatchOnce(ResourceOf(kind), NamespaceOf(kind), at, "", on_event,
                                       &stop_watches_, &at, SelectorOf(kind));
        if (status) continue;
        if (client.last_error().http_status == 410) break;  // list again
        spdlog::warn("cluster store watch: {}", status.error().message);
        SleepUnlessStopping(std::chrono::seconds(1));
      }
    }
  }

  // ---- The writer ----

  void WriterLoop() {
    std::unique_lock lock(mu_);
    while (true) {
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      std::vector<Queued> round;
      size_t count = 0;
      while (!queue_.empty() && (round.empty() || count < options_.max_group)) {
        count += queue_.front().mutations.size();
        round.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      lock.unlock();
      std::vector<Status> results = WriteRound(round);
      lock.lock();
      stats_.groups++;
      stats_.mutations += count;
      stats_.largest_group = std::max<uint64_t>(stats_.largest_group, count);
      lock.unlock();
      for (size_t i = 0; i < round.size(); ++i)
        if (round[i].done) round[i].done(results[i]);
      lock.lock();
    }
  }

  // Records first, GPU records last (one patch per node): a crash in between leaves a placement
  // the next leader sees as started without a lease, never a GPU held by a pending container.
  std::vector<Status> WriteRound(std::vector<Queued>& round) {
    std::vector<Status> results(round.size(), Ok());
    std::map<std::string, std::map<std::string, fleet::GpuRecord>> gpus;  // node -> pci -> record
    std::vector<std::set<std::string>> gpu_nodes(round.size());
    std::lock_guard client_lock(client_mu_);
    // The audit records before the changes they record: a change is never in the cluster
    // without its record, and a record that cannot be written fails its commit unmade.
    WriteAudits(round, results);
    for (size_t i = 0; i < round.size(); ++i) {
      if (!results[i]) continue;
      std::map<std::string, std::string> uid_remap;  // a tenancy incarnation another replica won
      for (auto& mutation : round[i].mutations) {
        Status status = std::visit(Writer{*this, uid_remap,
                                          [&](const fleet::GpuRecord& gpu) {
                                            gpus[gpu.node][gpu.pci_address] = gpu;
                                            gpu_nodes[i].insert(gpu.node);
                                          }},
                                   mutation);
        if (!status && results[i]) results[i] = status;
      }
    }
    if (!gpus.empty() && !Leading()) {
      // Only the leader writes lease records; a follower's operator action is refused, and the
      // follower hears the live records again (its model took the change already).
      for (size_t i = 0; i < round.size(); ++i)
        if (!gpu_nodes[i].empty() && results[i])
          results[i] = FailedPrecondition(
              "GPU records are written by the leading replica; this one does not lead");
      for (const auto& [node, records] : gpus) {
        auto live = client_.Get(Resource::ConfigMaps(), options_.ns, GpuRecordsName(node));
        Result<std::vector<fleet::GpuRecord>> parsed = std::vector<fleet::GpuRecord>();
        if (live) {
          parsed = GpuRecordsOf(*live);
        } else if (live.error().category != ErrorCategory::kNotFound) {
          continue;  // unknown: heard at the next relist or event
        }
        if (!parsed) continue;
        for (const auto& [pci, refused] : records) {
          fleet::GpuRecord restored = refused;
          restored.state = fleet::LeaseState::kFree;
          restored.reason.clear();
          restored.tenancy.clear();
          restored.container_id.clear();
          restored.drain_requested = restored.quarantine_requested = false;
          for (const auto& gpu : *parsed)
            if (gpu.pci_address == pci) restored = gpu;
          Emit(restored);
        }
      }
      return results;
    }
    for (const auto& [node, records] : gpus) {
      Status status = WriteGpus(node, records);
      if (status) continue;
      spdlog::warn("cluster store: GPU records of node {}: {}", node, status.error().message);
      for (size_t i = 0; i < round.size(); ++i)
        if (gpu_nodes[i].count(node) && results[i]) results[i] = status;
    }
    return results;
  }

  // Every Mutation alternative has its overload; the deleted template makes a new alternative
  // fail to compile here until it is written to the cluster.
  struct Writer {
    ClusterStoreImpl& store;
    std::map<std::string, std::string>& uid_remap;
    std::function<void(const fleet::GpuRecord&)> queue_gpu;

    Status operator()(const fleet::Tenancy& tenancy) {
      return store.WriteTenancy(tenancy, uid_remap);
    }
    Status operator()(ContainerRecord container) {
      if (auto it = uid_remap.find(container.tenancy_uid); it != uid_remap.end()) {
        container.tenancy_uid = it->second;
        store.Emit(container);
      }
      return store.WriteContainer(container);
    }
    Status operator()(const fleet::GpuRecord& gpu) {
      queue_gpu(gpu);
      return Ok();
    }
    Status operator()(fleet::TokenRecord token) {
      if (auto it = uid_remap.find(token.tenancy_uid); it != uid_remap.end()) {
        token.tenancy_uid = it->second;
        store.Emit(token);
      }
      return store.WriteToken(token);
    }
    Status operator()(const fleet::TenancyDeletion& deletion) {
      return store.DeleteTenancy(deletion.name);
    }
    Status operator()(const fleet::ContainerDeletion& deletion) {
      // The tombstone first: a container ID is never free again, even when the deletion fails.
      if (deletion.tombstone)
        if (auto status = store.WriteRetired(deletion.id); !status) return status;
      return store.DeleteContainer(deletion.id);
    }
    Status operator()(const fleet::UsageRecord& usage) { return store.WriteUsage(usage); }
    // This host's GPU telemetry cursors: in Kubernetes mode each node agent keeps its GPUs' in
    // their GpuLeases (status.measured); the control plane has none to keep.
    Status operator()(const fleet::TelemetryCursor&) { return Ok(); }
    Status operator()(const fleet::TokenDeletion& deletion) {
      return store.DeleteToken(deletion.id);
    }
    // Written before the commit's other mutations (WriteAudits).
    Status operator()(const fleet::AuditRecord&) { return Ok(); }
    template <typename T>
    Status operator()(const T&) = delete;
  };

  // Every audit record of the round, several at once (the client takes a connection per
  // thread): a round costs about one more round trip to the API server, not one per record. A
  // commit whose record failed has that failure as its result.
  void WriteAudits(const std::vector<Queued>& round, std::vector<Status>& results) {
    std::vector<std::pair<size_t, const fleet::AuditRecord*>> records;
    for (size_t i = 0; i < round.size(); ++i)
      for (const auto& mutation : round[i].mutations)
        if (auto* record = std::get_if<fleet::AuditRecord>(&mutation))
          records.emplace_back(i, record);
    if (records.empty()) return;
    std::vector<Status> written(records.size(), Ok());
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t k = next++; k < records.size(); k = next++)
        written[k] = WriteAudit(*records[k].second);
    };
    std::vector<std::thread> helpers;
    for (size_t n = 1; n < std::min(records.size(), kAuditWriters); ++n)
      helpers.emplace_back(work);
    work();
    for (auto& helper : helpers)
      helper.join();
    for (size_t k = 0; k < records.size(); ++k)
      if (!written[k] && results[records[k].first])
        results[records[k].first] = written[k].error().WithContext("audit record");
  }

  // One ConfigMap, named by the record's time and content: one already there with the same
  // entries is this record written before (a retried commit); another record of the same
  // millisecond that drew the same name moves this one to the next.
  Status WriteAudit(const fleet::AuditRecord& record) {
    for (int probe = 0; probe < kMergeAttempts; ++probe) {
      Json desired = AuditConfigMap(record, AuditSeqOf(record, probe), options_.ns);
      auto created = client_.Create(Resource::ConfigMaps(), options_.ns, desired);
      if (created) return Ok();
      if (created.error().category != ErrorCategory::kAlreadyExists) return created.error();
      auto live = client_.Get(Resource::ConfigMaps(), options_.ns, desired["metadata"]["name"]);
      if (!live) {
        if (live.error().category == ErrorCategory::kNotFound) continue;  // retention took it
        return live.error();
      }
      if (live->value("data", Json()) == desired["data"]) return Ok();
    }
    return Unavailable("audit record: its name is taken on every attempt");
  }

  // Written once per run and never replaced (as in the embedded store): a record of that run
  // already there is either this one written again (a retry) or, from a fault elsewhere, one
  // that stays the bill.
  Status WriteUsage(const fleet::UsageRecord& usage) {
    Json desired = UsageConfigMap(usage, options_.ns);
    const std::string name = UsageConfigMapName(usage);
    // Its version is remembered so that this replica's own record is not heard back (and
    // metered twice) from the watch.
    std::lock_guard known_lock(known_mu_);
    Known& known = known_[KeyOf(Kind::kUsage, name)];
    auto created = client_.Create(Resource::ConfigMaps(), options_.ns, desired);
    if (created) {
      known.version = VersionOf(*created);
      return Ok();
    }
    if (created.error().category != ErrorCategory::kAlreadyExists) return created.error();
    auto live = client_.Get(Resource::ConfigMaps(), options_.ns, name);
    if (!live) return live.error();
    known.version = std::max(known.version, VersionOf(*live));
    if (live->value("data", Json()) != desired["data"])
      spdlog::error("cluster store: usage ConfigMap {} holds other figures; it is kept", name);
    return Ok();
  }

  // The tombstone of a container ID retention removed.
  Status WriteRetired(const std::string& id) {
    Json desired = RetiredIdConfigMap(id, options_.ns);
    std::lock_guard known_lock(known_mu_);
    auto created = client_.Create(Resource::ConfigMaps(), options_.ns, desired);
    if (created) {
      known_[KeyOf(Kind::kRetired, desired["metadata"]["name"].get<std::string>())].version =
          VersionOf(*created);
      return Ok();
    }
    if (created.error().category == ErrorCategory::kAlreadyExists) return Ok();
    return created.error();
  }

  Status WriteTenancy(const fleet::Tenancy& tenancy, std::map<std::string, std::string>& remap) {
    const std::string key = KeyOf(Kind::kTenancy, tenancy.name);
    Json desired = TenancyObject(tenancy);
    std::unique_lock known_lock(known_mu_);
    for (int attempt = 0; attempt < kMergeAttempts; ++attempt) {
      auto found = known_.find(key);
      if (found == known_.end() || found->second.version == 0) {
        auto created = client_.Create(Resource::Tenancies(), "", desired);
        if (created) {
          known_[key].version = VersionOf(*created);
          return Ok();
        }
        if (created.error().category != ErrorCategory::kAlreadyExists) return created.error();
      } else {
        desired["metadata"]["resourceVersion"] = std::to_string(found->second.version);
        auto replaced = client_.Replace(Resource::Tenancies(), "", tenancy.name, desired);
        if (replaced) {
          known_[key].version = VersionOf(*replaced);
          return Ok();
        }
        if (replaced.error().category == ErrorCategory::kNotFound) {
          known_.erase(key);
          continue;
        }
        if (replaced.error().category != ErrorCategory::kFailedPrecondition)
          return replaced.error();
      }
      // Someone else wrote it: the same incarnation is updated over its latest version; another
      // incarnation created at the same moment by another replica wins, and this commit's
      // records follow it.
      auto live = client_.Get(Resource::Tenancies(), "", tenancy.name);
      if (!live) {
        if (live.error().category == ErrorCategory::kNotFound) continue;
        return live.error();
      }
      auto theirs = TenancyRecordOf(*live);
      known_[key].version = VersionOf(*live);
      if (theirs && theirs->uid != tenancy.uid) {
        remap[tenancy.uid] = theirs->uid;
        known_lock.unlock();
        Emit(*theirs);
        return Ok();
      }
    }
    return Unavailable("Tenancy " + tenancy.name + ": conflicts on every attempt");
  }

  Status WriteToken(const fleet::TokenRecord& token) {
    Json secret = TokenSecret(token, options_.ns);
    std::lock_guard known_lock(known_mu_);
    auto created = client_.Create(Resource::Secrets(), options_.ns, secret);
    if (!created && created.error().category != ErrorCategory::kAlreadyExists)
      return created.error();
    if (created)
      known_[KeyOf(Kind::kToken, secret["metadata"]["name"])].version = VersionOf(*created);
    return Ok();
  }

  // Revocation: the token's Secret goes; other replicas hear its deletion from their watch.
  Status DeleteToken(const std::string& id) {
    const std::string name = TokenSecretName(id);
    std::lock_guard known_lock(known_mu_);
    known_.erase(KeyOf(Kind::kToken, name));
    auto status = client_.Delete(Resource::Secrets(), options_.ns, name);
    if (!status && status.error().category != ErrorCategory::kNotFound) return status;
    return Ok();
  }

  Status DeleteContainer(const std::string& id) {
    std::lock_guard known_lock(known_mu_);
    known_.erase(KeyOf(Kind::kContainer, id));
    auto status = client_.Delete(Resource::GpuContainers(), "", id);
    if (!status && status.error().category != ErrorCategory::kNotFound) return status;
    return Ok();
  }

  Status DeleteTenancy(const std::string& name) {
    std::lock_guard known_lock(known_mu_);
    known_.erase(KeyOf(Kind::kTenancy, name));
    auto status = client_.Delete(Resource::Tenancies(), "", name);
    if (!status && status.error().category != ErrorCategory::kNotFound) return status;
    auto secrets =
        client_.List(Resource::Secrets(), options_.ns,
                     std::string(kTokenSecretLabel) + "=tenancy," + kTenancyLabel + "=" + name);
    if (!secrets) return secrets.error();
    for (const auto& secret : (*secrets)["items"]) {
      const std::string secret_name = secret["metadata"].value("name", "");
      known_.erase(KeyOf(Kind::kToken, secret_name));
      auto deleted = client_.Delete(Resource::Secrets(), options_.ns, secret_name);
      if (!deleted && deleted.error().category != ErrorCategory::kNotFound) return deleted;
    }
    return Ok();
  }

  // Creates the GpuContainer, or writes the halves (spec, status) that changed since the version
  // this replica knows, each with that version as precondition. Only the leader writes status.
  Status WriteContainer(ContainerRecord container) {
    const std::string key = KeyOf(Kind::kContainer, container.id);
    const bool leading = Leading();
    std::unique_lock known_lock(known_mu_);
    auto found = known_.find(key);
    if (found != known_.end() && found->second.stop_requested) container.stop_requested = true;
    Json desired = GpuContainerObject(container);
    const size_t spec_hash = SpecHash(desired);
    const size_t status_hash = StatusHash(desired);
    if (found == known_.end() || found->second.version == 0) {
      auto created = client_.Create(Resource::GpuContainers(), "", desired);
      if (created) {
        Known& known = known_[key];
        known.version = VersionOf(*created);
        known.spec_hash = spec_hash;
        known.stop_requested = container.stop_requested;
        // The API server drops status on create (status subresource).
        auto created_record = ContainerRecordOf(*created);
        known.status_hash = created_record ? StatusHash(GpuContainerObject(*created_record)) : 0;
        if (known.status_hash == status_hash || !leading) return Ok();
        if (PutStatus(desired, known)) return Ok();
      } else if (created.error().category != ErrorCategory::kAlreadyExists) {
        return created.error();
      }
      return MergeContainer(container, known_lock);
    }
    Known& known = found->second;
    if (known.spec_hash != spec_hash) {
      desired["metadata"]["resourceVersion"] = std::to_string(known.version);
      auto replaced = client_.Replace(Resource::GpuContainers(), "", container.id, desired);
      if (!replaced) {
        if (replaced.error().category == ErrorCategory::kFailedPrecondition)
          return MergeContainer(container, known_lock);
        if (replaced.error().category == ErrorCategory::kNotFound) {
          known_.erase(key);
          return Ok();  // deleted by retention meanwhile
        }
        return replaced.error();
      }
      known.version = VersionOf(*replaced);
      known.spec_hash = spec_hash;
      known.stop_requested = container.stop_requested;
    }
    if (known.status_hash == status_hash) return Ok();
    if (!leading) {
      // Not this replica's to write: it hears the live status instead.
      return MergeContainer(container, known_lock);
    }
    if (PutStatus(desired, known)) return Ok();
    return MergeContainer(container, known_lock);
  }

  // PUT .../status with the known version; false on a conflict (or any failure: merged next).
  bool PutStatus(Json desired, Known& known) {
    desired["metadata"]["resourceVersion"] = std::to_string(known.version);
    // PUT .../gpucontainers/<name>/status: the status subresource.
    const std::string name = desired["metadata"]["name"];
    auto written = client_.Replace(Resource::GpuContainers(), "", name + "/status", desired);
    if (!written) return false;
    known.version = VersionOf(*written);
    known.status_hash = StatusHash(desired);
    return true;
  }

  // The live object read and merged with this replica's record; what differs written over the
  // live version. The merged record is reported when it is not what the caller had.
  Status MergeContainer(const ContainerRecord& ours, std::unique_lock<std::mutex>& known_lock) {
    const std::string key = KeyOf(Kind::kContainer, ours.id);
    for (int attempt = 0; attempt < kMergeAttempts; ++attempt) {
      auto live = client_.Get(Resource::GpuContainers(), "", ours.id);
      if (!live) {
        if (live.error().category != ErrorCategory::kNotFound) return live.error();
        known_.erase(key);
        if (attempt == 0 && ours.state == fleet::ContainerState::kPending && !ours.started) {
          // Not created yet after all (a create raced a delete): create it.
          auto created = client_.Create(Resource::GpuContainers(), "", GpuContainerObject(ours));
          if (created) {
            known_[key].version = VersionOf(*created);
            return Ok();
          }
        }
        return Ok();
      }
      auto theirs = ContainerRecordOf(*live);
      if (!theirs) return theirs.error();
      const bool leading = Leading();
      ContainerRecord merged = fleet::MergeContainerRecords(ours, *theirs);
      if (!leading) {
        // The status is the leader's.
        ContainerRecord status_of = *theirs;
        status_of.stop_requested = merged.stop_requested;
        merged = std::move(status_of);
      }
      const Json live_normal = GpuContainerObject(*theirs);
      Json desired = GpuContainerObject(merged);
      Known& known = known_[key];
      known.version = VersionOf(*live);
      known.spec_hash = SpecHash(live_normal);
      known.status_hash = StatusHash(live_normal);
      known.stop_requested = theirs->stop_requested;
      bool conflict = false;
      if (SpecHash(desired) != known.spec_hash) {
        desired["metadata"]["resourceVersion"] = std::to_string(known.version);
        auto replaced = client_.Replace(Resource::GpuContainers(), "", ours.id, desired);
        if (!replaced) {
          if (replaced.error().category != ErrorCategory::kFailedPrecondition &&
              replaced.error().category != ErrorCategory::kNotFound)
            return replaced.error();
          conflict = true;
        } else {
          known.version = VersionOf(*replaced);
          known.spec_hash = SpecHash(desired);
          known.stop_requested = merged.stop_requested;
        }
      }
      if (!conflict && leading && StatusHash(desired) != known.status_hash)
        conflict = !PutStatus(desired, known);
      if (conflict) continue;
      if (!(merged == ours)) {
        known_lock.unlock();
        Emit(merged);
        known_lock.lock();
      }
      return Ok();
    }
    return Unavailable("GpuContainer " + ours.id + ": conflicts on every attempt");
  }

  // One merge patch of this node's ConfigMap with the entries of `records`, over the version
  // this replica knows (read first when it knows none; created when missing).
  Status WriteGpus(const std::string& node,
                   const std::map<std::string, fleet::GpuRecord>& records) {
    const std::string name = GpuRecordsName(node);
    const std::string key = KeyOf(Kind::kGpus, name);
    Json data = Json::object();
    for (const auto& [pci, gpu] : records)
      data[GpuRecordKey(pci)] = GpuRecordText(gpu);
    std::lock_guard known_lock(known_mu_);
    for (int attempt = 0; attempt < kMergeAttempts; ++attempt) {
      uint64_t version = known_[key].version;
      if (version == 0) {
        auto live = client_.Get(Resource::ConfigMaps(), options_.ns, name);
        if (!live && live.error().category != ErrorCategory::kNotFound) return live.error();
        if (!live) {
          Json object = GpuRecordsObject(node, options_.ns);
          object["data"] = data;
          auto created = client_.Create(Resource::ConfigMaps(), options_.ns, object);
          if (created) {
            known_[key].version = VersionOf(*created);
            return Ok();
          }
          if (created.error().category != ErrorCategory::kAlreadyExists) return created.error();
          continue;
        }
        version = VersionOf(*live);
      }
      Json patch = {{"metadata", {{"resourceVersion", std::to_string(version)}}}, {"data", data}};
      auto patched = client_.Patch(Resource::ConfigMaps(), options_.ns, name, patch);
      if (patched) {
        known_[key].version = VersionOf(*patched);
        return Ok();
      }
      if (patched.error().category != ErrorCategory::kFailedPrecondition &&
          patched.error().category != ErrorCategory::kNotFound)
        return patched.error();
      known_[key].version = 0;  // read again
    }
    return Unavailable("GPU records " + name + ": conflicts on every attempt");
  }

  ClusterStoreOptions options_;
  std::mutex client_mu_;  // guards client_ (the writer's, Load's and the admin calls')
  k8s::Client client_;

  mutable std::mutex mu_;  // guards queue_, stopping_, stats_
  std::condition_variable wake_;
  std::deque<Queued> queue_;
  bool stopping_ = false;
  fleet::StoreStats stats_;
  std::thread writer_;

  // The version of every object this replica wrote or saw last, by kind/name. Held across each
  // write, so the watch never takes this replica's own write for someone else's.
  std::mutex known_mu_;
  std::unordered_map<std::string, Known> known_;

  std::mutex emit_mu_;  // guards on_change_ (set by Follow, cleared by Unfollow) and its calls
  ChangeCallback on_change_;
  std::atomic<int> synced_{0};
  std::atomic<bool> stop_watches_{false};
  std::vector<std::thread> watches_;
};

}  // namespace

std::unique_ptr<ClusterStore> ClusterStore::Open(ClusterStoreOptions options) {
  return std::make_unique<ClusterStoreImpl>(std::move(options));
}

}  // namespace tessera::k8s
