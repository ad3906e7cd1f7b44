// Runtime files from CopyToVm* registry values: which DriverStore files a container needs in
// System32/SysWOW64, as read-only bind mounts.
//
// The values live under the adapter's driver key in CopyToVmOverwrite, CopyToVmWhenNewer (into
// System32) and their Wow64 twins (into SysWOW64), also nested one level as
// "<component>\CopyToVm*". Each is REG_MULTI_SZ {source[, destination]} or REG_SZ source, the
// source relative to the adapter's DriverStore folder, the destination a bare file name.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

#include "windows/text.h"
#include "windows/windows.h"

namespace tessera::windows {
namespace {

using text::Lower;
using text::Quote;

constexpr const char* kSystem32 = "C:\\Windows\\System32";
constexpr const char* kSysWow64 = "C:\\Windows\\SysWOW64";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A source relative to the DriverStore folder, with '/' turned into '\' and "." parts dropped.
Result<std::string> NormalizeSource(const std::string& source) {
  if (source.empty()) return InvalidArgument("source is empty");
  for (char c : source) {
    if (static_cast<unsigned char>(c) < 0x20) {
      return InvalidArgument("source " + Quote(source) + " contains a control character");
    }
  }
  std::string s = source;
  std::replace(s.begin(), s.end(), '/', '\\');
  if (s.front() == '\\' || s.find(':') != std::string::npos) {
    return InvalidArgument("source " + Quote(source) +
                           " escapes the DriverStore (absolute path, drive or stream)");
  }
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find('\\', start);
    if (end == std::string::npos) end = s.size();
    std::string part = s.substr(start, end - start);
    if (part == "..") {
      return InvalidArgument("source " + Quote(source) + " escapes the DriverStore ('..')");
    }
    if (!part.empty() && part != ".") parts.push_back(part);
    start = end + 1;
  }
  if (parts.empty()) return InvalidArgument("source " + Quote(source) + " names no file");
  std::string out;
  for (const std::string& p : parts)
    out += (out.empty() ? "" : "\\") + p;
  return out;
}

Status CheckDestination(const std::string& dest) {
  if (dest.empty()) return InvalidArgument("destination is empty");
  if (dest == "." || dest == "..") {
    return InvalidArgument("destination " + Quote(dest) + " is not a file name");
  }
  for (char c : dest) {
    if (static_cast<unsigned char>(c) < 0x20 ||
        std::string("\\/:*?\"<>|").find(c) != std::string::npos) {
      return InvalidArgument("destination " + Quote(dest) +
                             " is not a bare file name (it must not contain \\ / : * ? \" < > | "
                             "or control characters)");
    }
  }
  if (dest.back() == ' ' || dest.back() == '.') {
    return InvalidArgument("destination " + Quote(dest) + " ends with a space or dot");
  }
  return Ok();
}

std::string Leaf(const std::string& subkey) {
  size_t slash = subkey.rfind('\\');
  return slash == std::string::npos ? subkey : subkey.substr(slash + 1);
}

std::string Origin(const CopyToVmValue& v) {
  return v.subkey + "\\" + (v.name.empty() ? std::string("(default)") : v.name);
}

std::string JoinHostPath(std::string dir, const std::string& file) {
  while (!dir.empty() && (dir.back() == '\\' || dir.back() == '/'))
    dir.pop_back();
  return dir + "\\" + file;
}

// Overwrite values always win over WhenNewer values: a bind mount cannot compare file versions,
// and Overwrite is the driver saying "this exact file".
enum class Priority { kWhenNewer = 0, kOverwrite = 1 };

struct Candidate {
  FileMount mount;
  Priority priority = Priority::kWhenNewer;
};

// Turns one value into a candidate mount, or the reason it is rejected.
Result<Candidate> ValueToCandidate(const CopyToVmValue& v, const std::string& store) {
  std::vector<std::string> strings;
  if (v.type == RegistryType::kSz) {
    strings = v.strings;
  } else if (v.type == RegistryType::kMultiSz) {
    strings = v.strings;
    if (strings.empty() || strings.size() > 2) {
      return InvalidArgument("REG_MULTI_SZ holds " + std::to_string(strings.size()) +
                             " strings; expected source[, destination]");
    }
  } else {
    return InvalidArgument(std::string("type ") + RegistryTypeName(v.type) +
                           " is not REG_SZ or REG_MULTI_SZ");
  }
  if (strings.empty()) return InvalidArgument("value holds no string");
  auto source = NormalizeSource(strings[0]);
  if (!source.ok()) return source.error();
  std::string dest = strings.size() == 2 ? strings[1] : source->substr(source->rfind('\\') + 1);
  Status dest_ok = CheckDestination(dest);
  if (!dest_ok.ok()) return dest_ok.error();
  std::string leaf = Leaf(v.subkey);
  bool wow64 = EndsWith(leaf, "Wow64");
  Candidate c;
  c.mount.source = JoinHostPath(store, *source);
  c.mount.destination = std::string(wow64 ? kSysWow64 : kSystem32) + "\\" + dest;
  c.mount.origin = Origin(v);
  c.mount.read_only = true;
  c.priority =
      leaf.rfind("CopyToVmOverwrite", 0) == 0 ? Priority::kOverwrite : Priority::kWhenNewer;
  return c;
}

}  // namespace

VendorFiles DefaultVendorFiles() {
  return {{0x10de, {"nvidia-smi.exe"}}};
}

Result<std::pair<uint16_t, std::string>> ParseVendorFile(const std::string& text) {
  size_t eq = text.find('=');
  std::string vendor = text.substr(0, eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || vendor.size() != 4 ||
      !std::all_of(vendor.begin(), vendor.end(),
                   [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
    return InvalidArgument(
        "vendor file " + Quote(text) +
        " is not VENDOR=FILE with a 4-hex-digit PCI vendor ID (e.g. 10de=nvidia-smi.exe)");
  }
  std::string file = text.substr(eq + 1);
  auto source = NormalizeSource(file);
  if (!source.ok()) return source.error().WithContext("vendor file " + Quote(text));
  return std::make_pair(static_cast<uint16_t>(std::stoul(vendor, nullptr, 16)), *source);
}

RuntimeFiles PlanRuntimeFiles(const Adapter& adapter, const VendorFiles& vendor_files) {
  RuntimeFiles out;
  std::vector<const CopyToVmValue*> ordered;
  for (const CopyToVmValue& v : adapter.copy_to_vm)
    ordered.push_back(&v);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const CopyToVmValue* a, const CopyToVmValue* b) {
                     bool a_nested = a->subkey.find('\\') != std::string::npos;
                     bool b_nested = b->subkey.find('\\') != std::string::npos;
                     return a_nested < b_nested;
                   });
  std::vector<std::string> vendor_list;
  auto vendor_it = vendor_files.find(adapter.vendor_id);
  if (vendor_it != vendor_files.end()) vendor_list = vendor_it->second;

  if (adapter.driver_store_path.empty()) {
    if (!ordered.empty() || !vendor_list.empty()) {
      out.problems.push_back("no DriverStore path: " + std::to_string(ordered.size()) +
                             " CopyToVm* values and " + std::to_string(vendor_list.size()) +
                             " vendor files skipped");
    }
    return out;
  }

  std::vector<Candidate> kept;
  std::map<std::string, size_t> by_destination;  // lowercase: Windows paths ignore case
  auto add = [&](Candidate c) {
    std::string key = Lower(c.mount.destination);
    auto it = by_destination.find(key);
    if (it == by_destination.end()) {
      by_destination[key] = kept.size();
      kept.push_back(std::move(c));
      return;
    }
    Candidate& old = kept[it->second];
    if (Lower(old.mount.source) == Lower(c.mount.source)) return;  // same file named twice
    if (c.priority > old.priority) {
      out.problems.push_back(old.mount.origin + ": destination " + old.mount.destination +
                             " conflicts with " + c.mount.origin +
                             "; the CopyToVmOverwrite value wins");
      old = std::move(c);
      return;
    }
    out.problems.push_back(c.mount.origin + ": destination " + c.mount.destination +
                           " already comes from " + old.mount.origin + "; dropped");
  };

  for (const CopyToVmValue* v : ordered) {
    auto c = ValueToCandidate(*v, adapter.driver_store_path);
    if (!c.ok()) {
      out.problems.push_back(Origin(*v) + ": " + c.error().message);
      continue;
    }
    add(std::move(*c));
  }
  char vendor_name[16];
  std::snprintf(vendor_name, sizeof(vendor_name), "vendor %04x", adapter.vendor_id);
  for (const std::string& file : vendor_list) {
    auto source = NormalizeSource(file);
    if (!source.ok()) {
      out.problems.push_back(std::string(vendor_name) + ": " + source.error().message);
      continue;
    }
    Candidate c;
    c.mount.source = JoinHostPath(adapter.driver_store_path, *source);
    c.mount.destination = std::string(kSystem32) + "\\" + source->substr(source->rfind('\\') + 1);
    c.mount.origin = vendor_name;
    add(std::move(c));
  }
  for (Candidate& c : kept)
    out.mounts.push_back(std::move(c.mount));
  return out;
}

RuntimeFiles PlanRuntimeFiles(const std::vector<const Adapter*>& adapters,
                              const VendorFiles& vendor_files) {
  RuntimeFiles out;
  std::map<std::string, size_t> by_destination;
  std::vector<std::string> owner;  // adapter label per kept mount
  for (const Adapter* a : adapters) {
    std::string label = "adapter " + FormatLuid(a->luid) + " (" + a->description + ")";
    RuntimeFiles one = PlanRuntimeFiles(*a, vendor_files);
    for (const std::string& p : one.problems)
      out.problems.push_back(label + ": " + p);
    for (FileMount& m : one.mounts) {
      std::string key = Lower(m.destination);
      auto it = by_destination.find(key);
      if (it == by_destination.end()) {
        by_destination[key] = out.mounts.size();
        owner.push_back(label);
        out.mounts.push_back(std::move(m));
        continue;
      }
      const FileMount& old = out.mounts[it->second];
      if (Lower(old.source) == Lower(m.source)) continue;  // same driver, same file
      out.problems.push_back(label + ": " + m.origin + ": destination " + m.destination +
                             " already comes from " + owner[it->second] + " (" + old.source +
                             "); dropped " + m.source);
    }
  }
  return out;
}

}  // namespace tessera::windows
