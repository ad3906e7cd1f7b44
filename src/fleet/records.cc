// Names, validation and the lease state machine: pure logic over the records in fleet.h.
#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/random.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <future>
#include <regex>

#include "fleet/fleet.h"

namespace tessera::fleet {
namespace {

constexpr std::array<const char*, 3> kIsolationNames = {"runc", "gvisor", "kata"};
constexpr std::array<const char*, 4> kContainerStateNames = {"pending", "running", "exited",
                                                             "failed"};
constexpr std::array<const char*, 4> kTokenScopeNames = {"admin", "tenant", "read-only", "metrics"};
constexpr std::array<const char*, kLeaseStateCount> kLeaseStateNames = {
    "free", "reserved", "active", "releasing", "checking", "quarantined", "draining", "faulted"};

std::string Hex(const unsigned char* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(size * 2, '0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

}  // namespace

std::string CheckTenancyName(std::string_view name) {
  if (name.empty()) return "must not be empty";
  if (name.size() > 63) return "must be at most 63 characters";
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return "may contain only lowercase letters, digits and '-'";
    }
  }
  if (name.front() == '-' || name.back() == '-') return "must start and end with a letter or digit";
  return "";
}

const char* IsolationName(Isolation isolation) {
  return kIsolationNames[static_cast<int>(isolation)];
}

Result<Isolation> ParseIsolation(std::string_view name) {
  for (size_t i = 0; i < kIsolationNames.size(); ++i) {
    if (name == kIsolationNames[i]) return static_cast<Isolation>(i);
  }
  return InvalidArgument("isolation \"" + std::string(name) + "\": want runc, gvisor or kata");
}

const char* ContainerStateName(ContainerState state) {
  return kContainerStateNames[static_cast<int>(state)];
}

Result<ContainerState> ParseContainerState(std::string_view name) {
  for (size_t i = 0; i < kContainerStateNames.size(); ++i) {
    if (name == kContainerStateNames[i]) return static_cast<ContainerState>(i);
  }
  return InvalidArgument("container state \"" + std::string(name) + "\" is unknown");
}

const char* LeaseStateName(LeaseState state) {
  return kLeaseStateNames[static_cast<int>(state)];
}

Result<LeaseState> ParseLeaseState(std::string_view name) {
  for (size_t i = 0; i < kLeaseStateNames.size(); ++i) {
    if (name == kLeaseStateNames[i]) return static_cast<LeaseState>(i);
  }
  return InvalidArgument("lease state \"" + std::string(name) + "\" is unknown");
}

const char* TokenScopeName(TokenScope scope) {
  return kTokenScopeNames[static_cast<int>(scope)];
}

Result<TokenScope> ParseTokenScope(std::string_view name) {
  for (size_t i = 0; i < kTokenScopeNames.size(); ++i) {
    if (name == kTokenScopeNames[i]) return static_cast<TokenScope>(i);
  }
  return InvalidArgument("token scope: want admin, tenant, read-only or metrics");
}

Status CheckLeaseTransition(LeaseState from, LeaseState to) {
  using S = LeaseState;
  bool allowed = false;
  // A fault takes a GPU out from any state.
  if (to == S::kFaulted) return Ok();
  switch (from) {
    case S::kFree:
      allowed = to == S::kReserved || to == S::kDraining || to == S::kQuarantined;
      break;
    case S::kReserved:
      // A reservation whose container never started still gets its GPUs checked: the start
      // may have got as far as opening the device.
      allowed = to == S::kActive || to == S::kReleasing;
      break;
    case S::kActive:
      allowed = to == S::kReleasing;
      break;
    case S::kReleasing:
      allowed = to == S::kChecking;
      break;
    case S::kChecking:
      allowed = to == S::kFree || to == S::kQuarantined || to == S::kDraining;
      break;
    case S::kQuarantined:
      // An operator clears it (free), has it checked again, or parks it (draining).
      allowed = to == S::kFree || to == S::kChecking || to == S::kDraining;
      break;
    case S::kDraining:
      allowed = to == S::kFree || to == S::kQuarantined || to == S::kChecking;
      break;
    case S::kFaulted:
      // Recovered: the firmware check (releasing) decides; an operator's release frees it.
      allowed = to == S::kReleasing || to == S::kFree;
      break;
  }
  if (allowed) return Ok();
  return FailedPrecondition(std::string("lease cannot go from ") + LeaseStateName(from) + " to " +
                            LeaseStateName(to));
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return Hex(digest, sizeof(digest));
}

Result<std::string> RandomHex(int bytes) {
  std::string raw(static_cast<size_t>(bytes), '\0');
  size_t got = 0;
  while (got < raw.size()) {
    ssize_t n = ::getrandom(raw.data() + got, raw.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("getrandom", errno);
    }
    got += static_cast<size_t>(n);
  }
  return Hex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status Store::CommitAndWait(std::vector<Mutation> mutations) {
  std::promise<Status> promise;
  auto future = promise.get_future();
  Commit(std::move(mutations), [&promise](Status status) { promise.set_value(std::move(status)); });
  return future.get();
}

Result<AuditPage> Store::QueryAudit(const AuditQuery&) const {
  return FailedPrecondition("this store keeps no audit trail");
}

Result<size_t> Store::ExpireAudit(int64_t, size_t) {
  return size_t{0};
}

std::string CheckMigProfileName(std::string_view profile) {
  if (profile.empty()) return "must not be empty";
  if (profile.size() > kMaxMigProfileLength)
    return "must be at most " + std::to_string(kMaxMigProfileLength) + " characters";
  // [<c>c.]<g>g.<memory>gb[+me|-me|+gfx...]: the names NVML gives GPU and compute instance
  // profiles. Bounded above, so the regex runs on at most 32 characters.
  static const std::regex shape(
      R"(^([1-9][0-9]?c\.)?[1-9][0-9]?g\.[1-9][0-9]{0,3}gb([+-][a-z][a-z.]{0,15})?$)");
  if (!std::regex_match(profile.begin(), profile.end(), shape))
    return "is not a MIG profile name (like 1g.10gb, 1g.10gb+me or 1c.3g.40gb)";
  return "";
}

double GpuEquivalents(const ContainerRecord& container) {
  if (container.spec.mig.count > 0) return container.mig_gpus;
  if (container.spec.share) return container.share_gpus;
  return static_cast<double>(container.gpus.size());
}

std::string IdempotentContainerId(const std::string& tenancy_uid, const std::string& key,
                                  uint32_t generation) {
  std::string seed = tenancy_uid + '\n' + key;
  if (generation > 0) seed += '\n' + std::to_string(generation);
  return "c-" + Sha256Hex(seed).substr(0, 16);
}

namespace {
int Progress(const ContainerRecord& record) {
  const int state = IsTerminal(record.state) ? 4 : record.state == ContainerState::kRunning ? 2 : 0;
  return state + (record.started ? 1 : 0);
}
size_t PortsKnown(const ContainerRecord& record) {
  return static_cast<size_t>(std::count_if(record.published.begin(), record.published.end(),
                                           [](const PublishedPort& p) { return p.host_port > 0; }));
}
}  // namespace

ContainerRecord MergeContainerRecords(const ContainerRecord& ours, const ContainerRecord& theirs) {
  ContainerRecord merged = ours;
  merged.stop_requested = ours.stop_requested || theirs.stop_requested;
  if (Progress(theirs) > Progress(ours)) {
    merged.state = theirs.state;
    merged.gpus = theirs.gpus;
    merged.mig_devices = theirs.mig_devices;
    merged.mig_gpus = theirs.mig_gpus;
    merged.share_gpus = theirs.share_gpus;
    merged.enforcement = theirs.enforcement;
    merged.exit_code = theirs.exit_code;
    merged.reason = theirs.reason;
    merged.started = theirs.started;
    merged.started_ms = theirs.started_ms;
    merged.finished_ms = theirs.finished_ms;
    merged.published = theirs.published;
    merged.ready = theirs.ready;
  } else if (Progress(theirs) == Progress(ours) && !theirs.published.empty() &&
             PortsKnown(theirs) > PortsKnown(ours)) {
    // The same step, but the other copy knows more of where its ports are reached.
    merged.published = theirs.published;
  }
  // Measured use only grows: the larger of each figure.
  if (theirs.measured) {
    const MeasuredUsage mine = ours.measured.value_or(MeasuredUsage{});
    merged.measured =
        MeasuredUsage{std::max(mine.sm_seconds, theirs.measured->sm_seconds),
                      std::max(mine.memory_gib_seconds, theirs.measured->memory_gib_seconds),
                      std::max(mine.energy_joules, theirs.measured->energy_joules)};
  }
  return merged;
}

}  // namespace tessera::fleet
