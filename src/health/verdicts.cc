// Whether a GPU is fit to return to service: its NVML state after a reset, and its self-test.
#include <sstream>

#include "common/untrusted_text.h"
#include "health/health.h"

namespace tessera::health {

std::optional<Unfit> JudgeState(const GpuState& state) {
  if (state.lost) return Unfit{"the GPU is lost (fallen off the bus)", true};
  if (state.remap_failure.value_or(false)) {
    return Unfit{"row remap failure: the GPU cannot repair itself", false};
  }
  if (state.recovery_action == RecoveryAction::kNodeReboot) {
    return Unfit{"the driver asks for a node reboot", false};
  }
  if (state.recovery_action && *state.recovery_action != RecoveryAction::kNone) {
    return Unfit{std::string("the driver's recovery action is ") +
                     RecoveryActionName(*state.recovery_action),
                 true};
  }
  if (state.remap_pending.value_or(false)) return Unfit{"a row remap is still pending", true};
  if (state.retired_pages_pending.value_or(false)) {
    return Unfit{"page retirement is still pending", true};
  }
  if (state.uncorrected_volatile_ecc.value_or(0) > 0) {
    return Unfit{std::to_string(*state.uncorrected_volatile_ecc) +
                     " uncorrectable ECC errors since the reset",
                 true};
  }
  return std::nullopt;
}

namespace {

std::string Trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(begin, end - begin + 1));
}

// `dcgmi diag` prints a table: "| Memory | Pass |". Every result cell counts.
SelfTestVerdict JudgeDiag(std::string_view output) {
  int passes = 0, not_run = 0;
  std::istringstream lines{std::string(output)};
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '|') continue;
    size_t second = line.find('|', 1);
    if (second == std::string::npos) continue;
    size_t third = line.find('|', second + 1);
    std::string cell = Trim(std::string_view(line).substr(
        second + 1, (third == std::string::npos ? line.size() : third) - second - 1));
    std::string test = Trim(std::string_view(line).substr(1, second - 1));
    if (cell.rfind("Fail", 0) == 0) return {false, "dcgmi diag: " + Excerpt(test, 40) + " failed"};
    if (cell.rfind("Pass", 0) == 0) ++passes;
    if (cell.rfind("Skip", 0) == 0 || cell.rfind("Not Run", 0) == 0) ++not_run;
  }
  if (passes == 0) {
    return {false,
            "dcgmi diag: no test passed (" + std::to_string(not_run) + " skipped or not run)"};
  }
  return {true, "dcgmi diag: " + std::to_string(passes) + " passed"};
}

}  // namespace

SelfTestVerdict JudgeSelfTest(int exit_code, std::string_view output, bool dcgm_diag) {
  if (exit_code != 0) {
    std::string last = Trim(output.substr(output.size() > 4096 ? output.size() - 4096 : 0));
    size_t cut = last.find_last_of('\n');
    if (cut != std::string::npos) last = last.substr(cut + 1);
    return {false, "self-test failed (exit " + std::to_string(exit_code) + ")" +
                       (last.empty() ? "" : ": " + Excerpt(last, 80))};
  }
  if (dcgm_diag) return JudgeDiag(output.substr(0, 1 << 20));
  return {true, "self-test passed"};
}

}  // namespace tessera::health
