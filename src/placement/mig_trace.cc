// MIG fleet traces: the reader (outside input: every line, field and value bounded), the writer
// and the synthetic generator.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/untrusted_text.h"
#include "placement/mig_fleet.h"
#include "placement/trace_text.h"

namespace tessera::placement {
namespace {

constexpr size_t kMaxTraceNumber = 32;

bool IsTraceName(std::string_view name, bool profile) {
  if (name.empty() || name.size() > kMaxMigTraceNameLength) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
              (profile && (c == '.' || c == '+'));
    if (!ok) return false;
  }
  return true;
}

Status ParseSize(std::string_view size, MigTraceRequest& request) {
  switch (request.kind) {
    case MigRequestKind::kWhole: {
      auto gpus = PlainDecimal(size, kMaxTraceNumber);
      if (!gpus || *gpus < 1 || *gpus > kMaxWholeGpus || *gpus != std::floor(*gpus))
        return InvalidArgument("whole size is not a GPU count 1.." + std::to_string(kMaxWholeGpus));
      request.gpus = static_cast<int>(*gpus);
      return {};
    }
    case MigRequestKind::kMig:
      if (!IsTraceName(size, true))
        return InvalidArgument("mig size is not a profile name (1..63 of a-z, 0-9, '.', '+', '-')");
      request.profile = std::string(size);
      return {};
    case MigRequestKind::kShare: {
      size_t colon = size.find(':');
      auto memory = PlainDecimal(size.substr(0, colon), kMaxTraceNumber);
      auto compute = colon == std::string_view::npos
                         ? std::nullopt
                         : PlainDecimal(size.substr(colon + 1), kMaxTraceNumber);
      if (!memory || !compute || *memory < 1 || *memory > kMaxShareMemoryGib || !(*compute > 0) ||
          *compute > 1) {
        return InvalidArgument("share size is not MEMORY_GIB:COMPUTE (1..80 GiB, compute (0, 1])");
      }
      request.share_memory_gib = *memory;
      request.share_compute = *compute;
      return {};
    }
  }
  return InvalidArgument("unknown kind");
}

Result<MigTraceRequest> ParseFields(const std::string_view (&fields)[5]) {
  MigTraceRequest request;
  auto arrival = PlainDecimal(fields[0], kMaxTraceNumber);
  if (!arrival || *arrival < 0 || *arrival > kMaxMigTraceSeconds)
    return InvalidArgument("arrival_s is not a number 0..1e9");
  if (!IsTraceName(fields[1], false))
    return InvalidArgument("tenancy is not 1..63 characters of a-z, 0-9 and '-'");
  if (fields[2] == "whole") {
    request.kind = MigRequestKind::kWhole;
  } else if (fields[2] == "mig") {
    request.kind = MigRequestKind::kMig;
  } else if (fields[2] == "share") {
    request.kind = MigRequestKind::kShare;
  } else {
    return InvalidArgument("kind is not whole, mig or share");
  }
  if (Status status = ParseSize(fields[3], request); !status.ok()) return status.error();
  auto duration = PlainDecimal(fields[4], kMaxTraceNumber);
  if (!duration || !(*duration > 0) || *duration > kMaxMigTraceSeconds)
    return InvalidArgument("duration_s is not a number in (0, 1e9]");
  request.arrival_s = *arrival;
  request.tenancy = std::string(fields[1]);
  request.duration_s = *duration;
  return request;
}

// Splits a line into exactly five fields; false on any other count.
bool SplitFields(std::string_view line, std::string_view (&fields)[5]) {
  size_t count = 0;
  while (true) {
    if (count == 5) return false;
    size_t comma = line.find(',');
    fields[count++] = TrimTraceField(line.substr(0, comma));
    if (comma == std::string_view::npos) break;
    line.remove_prefix(comma + 1);
  }
  return count == 5;
}

}  // namespace

const char* MigRequestKindName(MigRequestKind kind) {
  switch (kind) {
    case MigRequestKind::kWhole:
      return "whole";
    case MigRequestKind::kMig:
      return "mig";
    case MigRequestKind::kShare:
      return "share";
  }
  return "unknown";
}

Result<std::vector<MigTraceRequest>> ParseMigTrace(std::string_view text) {
  if (text.size() > kMaxMigTraceBytes) return InvalidArgument("trace larger than its bound");
  std::vector<MigTraceRequest> requests;
  size_t line_number = 0;
  bool seen_data = false;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view raw = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++line_number;
    const std::string where = "line " + std::to_string(line_number);
    if (raw.size() > kMaxMigTraceLineLength)
      return InvalidArgument(where + ": longer than " + std::to_string(kMaxMigTraceLineLength));
    std::string_view line = TrimTraceField(raw);
    if (line.empty() || line.front() == '#') continue;
    std::string_view fields[5];
    if (!SplitFields(line, fields)) {
      return InvalidArgument(where + ": expected 5 fields (arrival_s,tenancy,kind,size," +
                             "duration_s): " + Excerpt(line));
    }
    if (!seen_data && fields[0] == "arrival_s" && fields[1] == "tenancy" && fields[2] == "kind" &&
        fields[3] == "size" && fields[4] == "duration_s") {
      seen_data = true;
      continue;
    }
    seen_data = true;
    auto request = ParseFields(fields);
    if (!request) return InvalidArgument(where + ": " + request.error().message);
    if (requests.size() == kMaxMigTraceRequests)
      return InvalidArgument(where + ": more than " + std::to_string(kMaxMigTraceRequests) +
                             " requests");
    requests.push_back(std::move(*request));
  }
  return requests;
}

std::string MigTraceToText(const std::vector<MigTraceRequest>& requests) {
  std::string out = "arrival_s,tenancy,kind,size,duration_s\n";
  char line[kMaxMigTraceLineLength];
  for (const MigTraceRequest& r : requests) {
    std::string size;
    if (r.kind == MigRequestKind::kWhole) {
      size = std::to_string(r.gpus);
    } else if (r.kind == MigRequestKind::kMig) {
      size = r.profile;
    } else {
      std::snprintf(line, sizeof line, "%g:%g", r.share_memory_gib, r.share_compute);
      size = line;
    }
    std::snprintf(line, sizeof line, "%.3f,%s,%s,%s,%.3f\n", r.arrival_s, r.tenancy.c_str(),
                  MigRequestKindName(r.kind), size.c_str(), r.duration_s);
    out += line;
  }
  return out;
}

}  // namespace tessera::placement
