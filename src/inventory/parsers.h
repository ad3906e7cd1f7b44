// Pure parsers for the kernel's text and binary formats the inventory reads. Bytes in, values out:
// no I/O, so each one is fuzzed directly (tests/fuzz/inventory_*.cc).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/pci_address.h"
#include "inventory/inventory.h"

namespace tessera::inventory {

// "0x10de" (sysfs vendor/device/class files) → value; rejects values wider than max_bits.
Result<uint32_t> ParseHexAttribute(std::string_view text, int max_bits);
// "-1", "0", "1" (numa_node) → value.
Result<int> ParseIntAttribute(std::string_view text);
// "226:128" (sysfs `dev`) → {major, minor}.
Result<std::pair<uint32_t, uint32_t>> ParseDevNumbers(std::string_view text);

// The `resource` file: one "start end flags" line per region; index 6 is the expansion ROM.
// Unused regions (all zero) are skipped.
Result<std::vector<Bar>> ParseResourceFile(std::string_view text);

// /proc/devices: the "Character devices:" section as name → major. A name may be listed once.
Result<std::map<std::string, uint32_t>> ParseProcDevices(std::string_view text);

// /proc/driver/nvidia/gpus/<bdf>/information.
struct NvidiaGpuInformation {
  std::string model;
  std::optional<std::string> uuid;  // "GPU-…"; absent on old drivers or "N/A"
  std::optional<int> device_minor;
  std::string bus_location;
};
Result<NvidiaGpuInformation> ParseNvidiaGpuInformation(std::string_view text);

// /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06 …")
// or /sys/module/nvidia/version ("580.65.06").
Result<std::string> ParseNvidiaDriverVersion(std::string_view text);

// /proc/driver/nvidia/capabilities/mig/{config,monitor}: "DeviceFileMinor: 1".
Result<uint32_t> ParseNvidiaCapabilityMinor(std::string_view text);

// The MIG capability files of one GPU, relative to /proc/driver/nvidia/capabilities/gpu<minor>/mig:
// "gi<g>/access" and "gi<g>/ci<c>/access", each with a "DeviceFileMinor:" line.
struct MigCapabilityFile {
  std::string relative_path;
  std::string content;
};
struct MigCapabilityMinors {
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  uint32_t gpu_instance_minor = 0;
  uint32_t compute_instance_minor = 0;
};
// One entry per compute instance whose GI and CI files both parse, sorted by GI then CI. A GPU
// instance without compute instances is no MIG device yet and is left out silently; a bad file
// becomes a warning naming its relative path.
std::vector<MigCapabilityMinors> ParseMigCapabilities(const std::vector<MigCapabilityFile>& files,
                                                      std::vector<std::string>& warnings);
// "gi12" with prefix "gi" → 12; nullopt for other names or numbers above 1023.
std::optional<uint32_t> ParseMigInstanceName(std::string_view name, std::string_view prefix);

// glibc ld.so.cache: the "glibc-ld.so.cache1.1" format, optionally after the legacy "ld.so-1.7.0"
// table. Each entry maps a library name (usually a SONAME) to the path the linker uses.
struct LdCacheEntry {
  std::string name;  // "libcuda.so.1"
  std::string path;  // "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
  uint32_t flags = 0;
  std::string arch() const;  // "x86_64", "i386", "aarch64", … from flags
};
Result<std::vector<LdCacheEntry>> ParseLdCache(std::string_view bytes);

// /etc/ld.so.conf and the files it includes: the directories ldconfig puts into the cache, and
// "include" glob patterns (relative ones are relative to the including file's directory).
// Comments, blank lines and "hwcap" lines are skipped; "DIR=TYPE" keeps DIR. At most 256
// directories and 256 includes per file.
struct LdSoConf {
  std::vector<std::string> directories;  // absolute, without trailing '/'
  std::vector<std::string> includes;
};
Result<LdSoConf> ParseLdSoConf(std::string_view text);

// The absolute directories of a search path, in order: LD_LIBRARY_PATH (':' or ';' between
// them) or PATH. Empty and relative elements, which depend on the working directory, are left
// out. At most 256.
std::vector<std::string> SplitSearchPath(std::string_view value);

// The architecture of an ELF file from its first 20 bytes, named as LdCacheEntry::arch() names
// it ("x86_64", "i386", "aarch64", …); nullopt when it is not a little-endian ELF file of one
// of those.
std::optional<std::string> ElfLibraryArch(std::string_view header);

// pci.ids: the vendor and device names for one ID pair, found without parsing the whole file.
struct PciNames {
  std::string vendor;
  std::string device;
};
PciNames LookupPciIds(std::string_view pci_ids, uint16_t vendor_id, uint16_t device_id);

using ::tessera::IsPciAddress;

}  // namespace tessera::inventory
