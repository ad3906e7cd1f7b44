// The recovery commands: the GPU's reset and its active self-test, each a configured argv run
// without a shell, with a time limit and bounded output. RunReset's errors: FailedPrecondition
// when no reset is configured or the GPU is still in use ("In use by another client": drain it
// first), Unavailable when the reset failed or did not finish in time, and the start's error
// when the program could not be started.
#include <algorithm>
#include <chrono>
#include <limits>
#include <sstream>

#include "common/untrusted_text.h"
#include "health/watch/signals.h"
#include "health/watch/watch.h"
#include "process/process.h"

namespace tessera::health {

namespace {

constexpr size_t kMaxCommandOutput = 64 * 1024;  // the last bytes are kept
constexpr size_t kReasonBytes = 200;             // of the output, in a reason

void ReplaceAll(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

process::Options CommandOptions(const RecoveryCommands& commands) {
  process::Options options;
  options.timeout_ms = static_cast<int>(std::min<int64_t>(
      std::max<int64_t>(commands.timeout.count(), 1), std::numeric_limits<int>::max()));
  options.max_output = kMaxCommandOutput;
  return options;
}

std::string Seconds(std::chrono::milliseconds duration) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(duration).count()) + " s";
}

bool IsDcgmi(const std::string& program) {
  const size_t slash = program.rfind('/');
  return (slash == std::string::npos ? program : program.substr(slash + 1)) == "dcgmi";
}

}  // namespace

std::vector<std::string> ExpandCommand(const std::vector<std::string>& argv,
                                       const std::string& uuid, const std::string& pci, int index) {
  std::vector<std::string> out = argv;
  for (std::string& arg : out) {
    ReplaceAll(arg, "{uuid}", uuid);
    ReplaceAll(arg, "{pci}", pci);
    ReplaceAll(arg, "{index}", std::to_string(index));
  }
  return out;
}

Status RunReset(const RecoveryCommands& commands, const WatchedGpu& gpu, int index) {
  if (commands.reset.empty()) return FailedPrecondition("no reset command is configured");
  const std::string uuid = gpu.uuid.empty() ? gpu.pci_address : gpu.uuid;
  const auto argv = ExpandCommand(commands.reset, uuid, gpu.pci_address, index);
  auto outcome = process::Run(argv, CommandOptions(commands));
  if (!outcome) return outcome.error().WithContext("reset " + gpu.pci_address);
  const std::string command = process::Describe(argv);
  if (outcome->timed_out)
    return Unavailable(command + ": no answer within " + Seconds(commands.timeout));
  if (outcome->status != 0) {
    std::string why = command + ": exit status " + std::to_string(outcome->status) + ": " +
                      Excerpt(outcome->output, kReasonBytes);
    // "In use by another client": a process (or an NVML client) still holds the GPU, so the
    // GPU is not drained yet (FailedPrecondition); any other failure is the reset's own.
    if (outcome->output.find("In use by another client") != std::string::npos)
      return FailedPrecondition(std::move(why));
    return Unavailable(std::move(why));
  }
  return Ok();
}

SelfTestVerdict RunSelfTest(const RecoveryCommands& commands, const WatchedGpu& gpu, int index) {
  if (commands.self_test.empty()) return {true, "no self-test is configured"};
  const std::string uuid = gpu.uuid.empty() ? gpu.pci_address : gpu.uuid;
  const auto argv = ExpandCommand(commands.self_test, uuid, gpu.pci_address, index);
  auto outcome = process::Run(argv, CommandOptions(commands));
  if (!outcome) return {false, "self-test did not start: " + outcome.error().message};
  if (outcome->timed_out) {
    return {false, process::Describe(argv) + ": no answer within " + Seconds(commands.timeout)};
  }
  return JudgeSelfTest(outcome->status, outcome->output, IsDcgmi(argv.front()));
}

std::vector<std::string> CommandWords(std::string_view text) {
  std::vector<std::string> words;
  std::istringstream in{std::string(text)};
  for (std::string word; in >> word;)
    words.push_back(word);
  return words;
}

}  // namespace tessera::health
