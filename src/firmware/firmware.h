// The post-lease firmware check: a GPU's option ROM hashed now against a baseline recorded
// before any tenant used the GPU. Shared by `tessera serve` (baselines in its store) and
// `tessera gpu-check` (baselines in a directory, one file per PCI address; the Kubernetes
// node agent records them and the firmware-check Job compares with them).
//
// Pure parts (digests, the baseline file format, the comparison, the reports) are separate from
// the effects (reading the ROM through the inventory's host root, the baseline directory).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::firmware {

// The digest of a device without an option ROM: a valid baseline, and a change when it differs.
inline constexpr std::string_view kNoRom = "absent";
inline constexpr char kDefaultBaselineDir[] = "/var/lib/tessera/firmware";

// "sha256:<64 lowercase hex>" of the ROM's bytes.
std::string DigestOf(std::string_view rom);
// DigestOf's form or kNoRom.
bool IsDigest(std::string_view text);
// "0000:18:00.0"; also takes upper case and the short "18:00.0" (domain 0000). Errors name
// `field`.
Result<std::string> CanonicalPciAddress(std::string_view text, std::string_view field);

// The option ROM's digest now: DigestOf(ROM), or kNoRom when the device exposes none.
Result<std::string> HashOptionRom(const std::string& root, const std::string& pci_address);

// One baseline file. Its text (FormatBaseline) is exactly four lines:
//   tessera-firmware-baseline 1
//   pci_address 0000:18:00.0
//   option_rom sha256:<hex>        (or "absent")
//   recorded_unix_s 1732390000
struct Baseline {
  std::string pci_address;
  std::string option_rom;  // a digest (IsDigest)
  int64_t recorded_unix_s = 0;
  bool operator==(const Baseline&) const = default;
};
std::string FormatBaseline(const Baseline& baseline);
// Strict: only FormatBaseline's exact shape is accepted; errors name the line and field.
Result<Baseline> ParseBaseline(std::string_view text);

struct Verdict {
  bool passed = false;
  std::string reason;
};
// Both are digests; the reason says what matched or what changed.
Verdict CompareWithBaseline(std::string_view baseline, std::string_view now);

// A directory of baseline files, <dir>/<pci_address>.baseline.
class BaselineStore {
 public:
  explicit BaselineStore(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }
  std::string PathFor(const std::string& pci_address) const;
  // NotFound when none was recorded; InvalidArgument, naming the file, when it is malformed or
  // belongs to another device.
  Result<Baseline> Read(const std::string& pci_address) const;
  // Writes the baseline (creating the directory) unless one exists for the device: then
  // AlreadyExists and the file is left as it was. A baseline must predate every tenant, so it
  // is never replaced here; an operator who accepts new firmware deletes the file first.
  Status Record(const Baseline& baseline) const;

 private:
  std::string dir_;
};

// What `tessera gpu-check` says about one GPU.
enum class Outcome {
  kPass,      // the ROM matches its baseline
  kFail,      // it does not, no baseline, or the ROM or baseline could not be read
  kRecorded,  // --record: a baseline was written
  kKept,      // --record: a baseline existed and was left alone
};
const char* OutcomeName(Outcome outcome);  // "pass", "fail", "recorded", "kept"

struct GpuReport {
  std::string pci_address;
  Outcome outcome = Outcome::kFail;
  std::string reason;
  std::string option_rom;  // the digest now, when it could be read
  std::string baseline;    // the baseline's digest, when there is one
};

GpuReport CheckGpu(const std::string& root, const BaselineStore& store,
                   const std::string& pci_address);
GpuReport RecordGpu(const std::string& root, const BaselineStore& store,
                    const std::string& pci_address, int64_t now_unix_s);

bool AnyFailed(const std::vector<GpuReport>& reports);
// One line per GPU: "<pci> <outcome>: <reason>".
std::string ToText(const std::vector<GpuReport>& reports);
// {"passed": bool, "gpus": [{"pci_address", "outcome", "reason", "option_rom", "baseline"}]}.
std::string ToJson(const std::vector<GpuReport>& reports);

}  // namespace tessera::firmware
