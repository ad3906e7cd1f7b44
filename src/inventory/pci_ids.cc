// Names from the pci.ids database (the format of /usr/share/misc/pci.ids).
#include "inventory/parsers.h"

namespace tessera::inventory {
namespace {

std::string_view TrimSpaces(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  return text;
}

}  // namespace

PciNames LookupPciIds(std::string_view ids, uint16_t vendor_id, uint16_t device_id) {
  // Vendor lines start at column 0 ("10de  NVIDIA Corporation"), devices with one tab,
  // subsystems with two. Search for the vendor line directly instead of parsing 30k lines.
  static const char kHex[] = "0123456789abcdef";
  char vendor_key[7] = {'\n',
                        kHex[(vendor_id >> 12) & 15],
                        kHex[(vendor_id >> 8) & 15],
                        kHex[(vendor_id >> 4) & 15],
                        kHex[vendor_id & 15],
                        ' ',
                        ' '};
  char device_key[7] = {'\n',
                        '\t',
                        kHex[(device_id >> 12) & 15],
                        kHex[(device_id >> 8) & 15],
                        kHex[(device_id >> 4) & 15],
                        kHex[device_id & 15],
                        ' '};
  PciNames names;
  size_t vendor_at = ids.find(std::string_view(vendor_key, sizeof vendor_key));
  if (vendor_at == std::string_view::npos) return names;
  size_t name_start = vendor_at + sizeof vendor_key;
  size_t name_end = ids.find('\n', name_start);
  if (name_end == std::string_view::npos) name_end = ids.size();
  names.vendor = std::string(TrimSpaces(ids.substr(name_start, name_end - name_start)));
  // The vendor's block ends at the next line that starts with a non-tab, non-comment character.
  size_t pos = name_end;
  while (pos < ids.size()) {
    size_t line_start = pos + 1;
    if (line_start >= ids.size()) break;
    char first = ids[line_start];
    if (first != '\t' && first != '#' && first != '\n') break;
    if (ids.substr(pos, sizeof device_key) == std::string_view(device_key, sizeof device_key)) {
      size_t start = pos + sizeof device_key;
      size_t end = ids.find('\n', start);
      if (end == std::string_view::npos) end = ids.size();
      names.device = std::string(TrimSpaces(ids.substr(start, end - start)));
      break;
    }
    pos = ids.find('\n', line_start);
    if (pos == std::string_view::npos) break;
  }
  return names;
}

}  // namespace tessera::inventory
