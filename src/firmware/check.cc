// The comparison (pure), one GPU's check or record (composed from the effects), and reports.
#include <nlohmann/json.hpp>

#include "firmware/firmware.h"

namespace tessera::firmware {

Verdict CompareWithBaseline(std::string_view baseline, std::string_view now) {
  if (baseline == now) {
    if (now == kNoRom) return {true, "no option ROM, as at the baseline"};
    return {true, "option ROM matches its baseline (" + std::string(now) + ")"};
  }
  return {false, "option ROM changed (baseline " + std::string(baseline) + ", now " +
                     std::string(now) + ")"};
}

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kPass:
      return "pass";
    case Outcome::kFail:
      return "fail";
    case Outcome::kRecorded:
      return "recorded";
    case Outcome::kKept:
      return "kept";
  }
  return "fail";
}

GpuReport CheckGpu(const std::string& root, const BaselineStore& store,
                   const std::string& pci_address) {
  GpuReport report;
  report.pci_address = pci_address;
  auto baseline = store.Read(pci_address);
  auto now = HashOptionRom(root, pci_address);
  if (now) report.option_rom = *now;
  if (!baseline) {
    if (baseline.error().category == ErrorCategory::kNotFound) {
      report.reason = "no baseline recorded in " + store.dir() +
                      " (`tessera gpu-check --record` records it before the GPU's first lease)";
    } else {
      report.reason = "cannot read the baseline: " + baseline.error().message;
    }
    return report;
  }
  report.baseline = baseline->option_rom;
  if (!now) {
    report.reason = "cannot read the option ROM: " + now.error().message;
    return report;
  }
  Verdict verdict = CompareWithBaseline(baseline->option_rom, *now);
  report.outcome = verdict.passed ? Outcome::kPass : Outcome::kFail;
  report.reason = std::move(verdict.reason);
  return report;
}

GpuReport RecordGpu(const std::string& root, const BaselineStore& store,
                    const std::string& pci_address, int64_t now_unix_s) {
  GpuReport report;
  report.pci_address = pci_address;
  auto now = HashOptionRom(root, pci_address);
  if (now) report.option_rom = *now;
  auto kept = [&](const Baseline& existing) {
    report.outcome = Outcome::kKept;
    report.baseline = existing.option_rom;
    report.reason = "baseline " + store.PathFor(pci_address) + " already recorded, left as it is";
    if (!now)
      report.reason += "; the option ROM cannot be read now: " + now.error().message;
    else if (*now != existing.option_rom)
      report.reason += "; the option ROM now differs (" + *now + "), so checks will fail";
    return report;
  };
  auto existing = store.Read(pci_address);
  if (existing) return kept(*existing);
  if (existing.error().category != ErrorCategory::kNotFound) {
    report.reason = "cannot read the baseline: " + existing.error().message +
                    " (a baseline is never overwritten; remove a bad one to record again)";
    return report;
  }
  if (!now) {
    report.reason = "cannot read the option ROM: " + now.error().message;
    return report;
  }
  auto status = store.Record(Baseline{pci_address, *now, now_unix_s});
  if (!status && status.error().category == ErrorCategory::kAlreadyExists) {
    // Another recorder won the race: its baseline stands.
    if (auto theirs = store.Read(pci_address)) return kept(*theirs);
  }
  if (!status) {
    report.reason = "cannot record the baseline: " + status.error().message;
    return report;
  }
  report.outcome = Outcome::kRecorded;
  report.baseline = *now;
  report.reason = "baseline " + *now + " recorded in " + store.PathFor(pci_address);
  return report;
}

bool AnyFailed(const std::vector<GpuReport>& reports) {
  for (const auto& report : reports)
    if (report.outcome == Outcome::kFail) return true;
  return false;
}

std::string ToText(const std::vector<GpuReport>& reports) {
  std::string out;
  for (const auto& report : reports)
    out += report.pci_address + " " + OutcomeName(report.outcome) + ": " + report.reason + "\n";
  return out;
}

std::string ToJson(const std::vector<GpuReport>& reports) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& report : reports) {
    gpus.push_back({{"pci_address", report.pci_address},
                    {"outcome", OutcomeName(report.outcome)},
                    {"reason", report.reason},
                    {"option_rom", report.option_rom},
                    {"baseline", report.baseline}});
  }
  nlohmann::json doc = {{"passed", !AnyFailed(reports)}, {"gpus", std::move(gpus)}};
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace tessera::firmware
