// Device strings as docker, ctr and OCI windows.devices spell them.
#include <algorithm>
#include <cctype>

#include "windows/text.h"
#include "windows/windows.h"

namespace tessera::windows {
namespace {

using text::Quote;

struct Scheme {
  const char* name;
  DeviceIdType type;
};
constexpr Scheme kSchemes[] = {
    {"class", DeviceIdType::kClass},
    {"vpci-class-guid", DeviceIdType::kVpciClassGuid},
    {"vpci-location-path", DeviceIdType::kVpciLocationPath},
    {"vpci-instance-id", DeviceIdType::kVpciInstanceId},
    {"vpci", DeviceIdType::kVpci},
    {"gpu", DeviceIdType::kGpu},
};

bool IsHex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

// 8-4-4-4-12 hex digits, optionally in braces. Returns the canonical uppercase form.
Result<std::string> NormalizeGuid(const std::string& text) {
  std::string g = text;
  if (!g.empty() && g.front() == '{') {
    if (g.back() != '}') return InvalidArgument("GUID " + Quote(text) + " has an unclosed brace");
    g = g.substr(1, g.size() - 2);
  }
  static constexpr size_t kGroups[] = {8, 4, 4, 4, 12};
  size_t pos = 0;
  for (size_t i = 0; i < 5; ++i) {
    for (size_t k = 0; k < kGroups[i]; ++k, ++pos) {
      if (pos >= g.size() || !IsHex(g[pos])) {
        return InvalidArgument("GUID " + Quote(text) +
                               " is not 8-4-4-4-12 hex digits (problem at character " +
                               std::to_string(pos + 1) + ")");
      }
    }
    if (i < 4) {
      if (pos >= g.size() || g[pos] != '-') {
        return InvalidArgument("GUID " + Quote(text) +
                               " is not 8-4-4-4-12 hex digits (expected '-' at character " +
                               std::to_string(pos + 1) + ")");
      }
      ++pos;
    }
  }
  if (pos != g.size()) {
    return InvalidArgument("GUID " + Quote(text) + " has trailing characters");
  }
  std::transform(g.begin(), g.end(), g.begin(), [](char c) {
    return static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  });
  return g;
}

// A Windows location path: NAME(ARGS)#NAME(ARGS)..., e.g. PCIROOT(0)#PCI(0100)#PCI(0000) or
// ACPI(_SB_)#ACPI(PCI0). HCS takes the PCIROOT form.
Status CheckLocationPath(const std::string& path) {
  if (path.rfind("PCIROOT(", 0) != 0) {
    return InvalidArgument("location path " + Quote(path) +
                           " does not start at a PCI root (expected PCIROOT(n)#PCI(ddff)...)");
  }
  size_t start = 0;
  int index = 0;
  while (start <= path.size()) {
    size_t end = path.find('#', start);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(start, end - start);
    ++index;
    size_t open = part.find('(');
    std::string where = "location path " + Quote(path) + " component " + std::to_string(index);
    if (part.empty()) return InvalidArgument(where + " is empty");
    if (open == std::string::npos || open == 0 || part.back() != ')') {
      return InvalidArgument(where + " " + Quote(part) + " is not NAME(ARGS)");
    }
    std::string name = part.substr(0, open);
    std::string args = part.substr(open + 1, part.size() - open - 2);
    if (!std::all_of(name.begin(), name.end(), [](char c) {
          return std::isupper(static_cast<unsigned char>(c)) ||
                 std::isdigit(static_cast<unsigned char>(c)) || c == '_';
        })) {
      return InvalidArgument(where + " name " + Quote(name) +
                             " is not uppercase letters, digits or '_'");
    }
    if (args.empty() || args.find_first_of("()#") != std::string::npos ||
        !std::all_of(args.begin(), args.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
      return InvalidArgument(where + " " + Quote(part) + " has empty or invalid arguments");
    }
    if (end == path.size()) break;
    start = end + 1;
  }
  return Ok();
}

// PnP device instance IDs: printable ASCII without spaces, at most MAX_DEVICE_ID_LEN (200)
// characters, with an enumerator before the first backslash (PCI\..., PCIP\...).
Status CheckInstanceId(const std::string& id) {
  if (id.size() > 200) {
    return InvalidArgument("instance ID is " + std::to_string(id.size()) +
                           " characters; Windows allows at most 200");
  }
  for (size_t i = 0; i < id.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(id[i]);
    if (c <= 0x20 || c >= 0x7f || c == ',') {
      return InvalidArgument("instance ID " + Quote(id) + " has an invalid character at position " +
                             std::to_string(i + 1));
    }
  }
  size_t slash = id.find('\\');
  if (slash == std::string::npos || slash == 0 || slash + 1 == id.size()) {
    return InvalidArgument(
        "instance ID " + Quote(id) +
        " is not ENUMERATOR\\DEVICE\\INSTANCE (e.g. PCIP\\VEN_10DE&DEV_1EB8...\\...)");
  }
  return Ok();
}

}  // namespace

const char* DeviceIdTypeName(DeviceIdType type) {
  for (const Scheme& s : kSchemes) {
    if (s.type == type) return s.name;
  }
  return "class";
}

bool DeviceRef::IsHyperVOnly() const {
  return type == DeviceIdType::kVpciInstanceId || type == DeviceIdType::kVpci ||
         type == DeviceIdType::kGpu;
}

Result<DeviceRef> ParseDeviceString(const std::string& text) {
  if (text.empty()) return InvalidArgument("device string is empty");
  std::string scheme;
  std::string id;
  size_t sep = text.find("://");
  if (sep != std::string::npos) {
    scheme = text.substr(0, sep);
    id = text.substr(sep + 3);
  } else if (text.rfind("class/", 0) == 0) {
    scheme = "class";  // docker's spelling
    id = text.substr(6);
  } else {
    return InvalidArgument("device string " + Quote(text) +
                           " has no type: expected class/GUID or TYPE://ID with TYPE one of class, "
                           "vpci-class-guid, vpci-location-path, vpci-instance-id, vpci, gpu");
  }
  const Scheme* found = nullptr;
  for (const Scheme& s : kSchemes) {
    if (scheme == s.name) found = &s;
  }
  if (found == nullptr) {
    std::string lower = scheme;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](char c) {
      return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    });
    for (const Scheme& s : kSchemes) {
      if (lower == s.name) {
        return InvalidArgument("device type " + Quote(scheme) + " must be lowercase: " + s.name);
      }
    }
    return InvalidArgument("unknown device type " + Quote(scheme) +
                           " (expected class, vpci-class-guid, vpci-location-path, "
                           "vpci-instance-id, vpci or gpu)");
  }
  if (id.empty()) return InvalidArgument("device string " + Quote(text) + " has an empty ID");
  DeviceRef ref{found->type, id};
  switch (ref.type) {
    case DeviceIdType::kClass:
    case DeviceIdType::kVpciClassGuid: {
      auto guid = NormalizeGuid(id);
      if (!guid.ok()) return guid.error().WithContext(std::string(found->name) + " device");
      ref.id = *guid;
      break;
    }
    case DeviceIdType::kVpciLocationPath: {
      Status s = CheckLocationPath(id);
      if (!s.ok()) return s.error();
      break;
    }
    case DeviceIdType::kVpciInstanceId:
    case DeviceIdType::kVpci:
    case DeviceIdType::kGpu: {
      Status s = CheckInstanceId(id);
      if (!s.ok()) return s.error().WithContext(std::string(found->name) + " device");
      break;
    }
  }
  return ref;
}

std::string FormatDeviceString(const DeviceRef& ref) {
  return std::string(DeviceIdTypeName(ref.type)) + "://" + ref.id;
}

}  // namespace tessera::windows
