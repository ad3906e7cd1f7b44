#include "common/pci_address.h"

namespace tessera {

bool IsPciAddress(std::string_view text) {
  // dddd:bb:dd.f
  if (text.size() != 12) return false;
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == 4 || i == 7) {
      if (text[i] != ':') return false;
    } else if (i == 10) {
      if (text[i] != '.') return false;
    } else if (i == 11) {
      if (text[i] < '0' || text[i] > '7') return false;
    } else if (!hex(text[i])) {
      return false;
    }
  }
  return true;
}

}  // namespace tessera
