// The baseline file format (pure) and the directory that holds one file per device.
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <filesystem>

#include "common/atomic_file.h"
#include "firmware/firmware.h"

namespace tessera::firmware {
namespace {

constexpr std::string_view kMagic = "tessera-firmware-baseline 1";
// Four short lines; anything longer is not ours.
constexpr size_t kMaxBaselineBytes = 512;

// The value of line `index` (1-based) "<key> <value>"; errors name the line and key.
Result<std::string_view> Field(std::string_view line, size_t index, std::string_view key) {
  const std::string where = "line " + std::to_string(index) + " (" + std::string(key) + ")";
  if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ' ')
    return InvalidArgument(where + ": want \"" + std::string(key) + " <value>\"");
  return line.substr(key.size() + 1);
}

// File names come from PCI addresses: only canonical ones, so no name leaves the directory.
Status CheckFileName(const std::string& pci_address) {
  auto canonical = CanonicalPciAddress(pci_address, "PCI address");
  if (!canonical) return canonical.error();
  if (*canonical != pci_address)
    return InvalidArgument("PCI address \"" + pci_address + "\": want " + *canonical);
  return Ok();
}

}  // namespace

std::string FormatBaseline(const Baseline& baseline) {
  return std::string(kMagic) + "\npci_address " + baseline.pci_address + "\noption_rom " +
         baseline.option_rom + "\nrecorded_unix_s " + std::to_string(baseline.recorded_unix_s) +
         "\n";
}

Result<Baseline> ParseBaseline(std::string_view text) {
  if (text.size() > kMaxBaselineBytes)
    return InvalidArgument("larger than " + std::to_string(kMaxBaselineBytes) + " bytes");
  if (text.empty() || text.back() != '\n') return InvalidArgument("does not end with a newline");
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (lines.size() != 4)
    return InvalidArgument("want 4 lines, found " + std::to_string(lines.size()));
  if (lines[0] != kMagic) return InvalidArgument("line 1: want \"" + std::string(kMagic) + "\"");

  Baseline baseline;
  auto pci = Field(lines[1], 2, "pci_address");
  if (!pci) return pci.error();
  auto canonical = CanonicalPciAddress(*pci, "line 2 (pci_address)");
  if (!canonical) return canonical.error();
  if (*canonical != *pci)
    return InvalidArgument("line 2 (pci_address): not in canonical form (want " + *canonical + ")");
  baseline.pci_address = std::move(*canonical);

  auto rom = Field(lines[2], 3, "option_rom");
  if (!rom) return rom.error();
  if (!IsDigest(*rom))
    return InvalidArgument("line 3 (option_rom): want sha256:<64 lowercase hex> or absent");
  baseline.option_rom = std::string(*rom);

  auto recorded = Field(lines[3], 4, "recorded_unix_s");
  if (!recorded) return recorded.error();
  const char* first = recorded->data();
  const char* last = first + recorded->size();
  bool digits = !recorded->empty() && recorded->size() <= 18 &&
                (recorded->size() == 1 || recorded->front() != '0');
  for (char c : *recorded)
    digits = digits && c >= '0' && c <= '9';
  if (!digits || std::from_chars(first, last, baseline.recorded_unix_s).ptr != last)
    return InvalidArgument("line 4 (recorded_unix_s): want a decimal number of seconds");
  return baseline;
}

std::string BaselineStore::PathFor(const std::string& pci_address) const {
  return dir_ + "/" + pci_address + ".baseline";
}

Result<Baseline> BaselineStore::Read(const std::string& pci_address) const {
  if (auto name = CheckFileName(pci_address); !name) return name.error();
  const std::string path = PathFor(pci_address);
  auto text = ReadWholeFile(path);
  if (!text) return text.error();
  auto baseline = ParseBaseline(*text);
  if (!baseline) return baseline.error().WithContext(path);
  if (baseline->pci_address != pci_address)
    return InvalidArgument(path + ": line 2 (pci_address): names " + baseline->pci_address +
                           ", not " + pci_address);
  return baseline;
}

Status BaselineStore::Record(const Baseline& baseline) const {
  if (auto name = CheckFileName(baseline.pci_address); !name) return name.error();
  if (!IsDigest(baseline.option_rom))
    return InvalidArgument("option_rom \"" + baseline.option_rom + "\": not a digest");
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error) return Internal("create " + dir_ + ": " + error.message());
  return CreateFileAtomically(PathFor(baseline.pci_address), FormatBaseline(baseline), 0644);
}

}  // namespace tessera::firmware
