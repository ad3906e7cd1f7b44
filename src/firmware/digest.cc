// Digests and PCI addresses: pure, plus the one host read (through the inventory).
// The low-level SHA256_* calls are deprecated in OpenSSL 3 in favour of EVP, but EVP drags the
// provider machinery (and ~1 MB) into a static link; these take only the SHA-256 objects.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#include "firmware/firmware.h"
#include "inventory/inventory.h"

namespace tessera::firmware {
namespace {

constexpr std::string_view kSha256Prefix = "sha256:";

bool IsLowerHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

}  // namespace

std::string DigestOf(std::string_view rom) {
  SHA256_CTX context;
  SHA256_Init(&context);
  SHA256_Update(&context, rom.data(), rom.size());
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256_Final(digest, &context);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(kSha256Prefix);
  for (unsigned char byte : digest) {
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xf]);
  }
  return out;
}

bool IsDigest(std::string_view text) {
  if (text == kNoRom) return true;
  if (text.size() != kSha256Prefix.size() + 2 * SHA256_DIGEST_LENGTH) return false;
  if (text.substr(0, kSha256Prefix.size()) != kSha256Prefix) return false;
  for (char c : text.substr(kSha256Prefix.size()))
    if (!IsLowerHex(c)) return false;
  return true;
}

Result<std::string> CanonicalPciAddress(std::string_view text, std::string_view field) {
  std::string address(text);
  for (char& c : address)
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  if (address.size() == 7) address = "0000:" + address;
  // dddd:bb:dd.f, the function 0-7.
  bool ok = address.size() == 12;
  for (size_t i = 0; ok && i < address.size(); ++i) {
    char c = address[i];
    if (i == 4 || i == 7)
      ok = c == ':';
    else if (i == 10)
      ok = c == '.';
    else if (i == 11)
      ok = c >= '0' && c <= '7';
    else
      ok = IsLowerHex(c);
  }
  // Device numbers stop at 0x1f.
  if (ok && address[8] > '1') ok = false;
  if (!ok) {
    std::string shown;
    for (char c : text.substr(0, 64))
      shown.push_back(c >= 0x20 && c < 0x7f ? c : '?');
    return InvalidArgument(std::string(field) + " \"" + shown +
                           "\": not a PCI address (want dddd:bb:dd.f, e.g. 0000:18:00.0)");
  }
  return address;
}

Result<std::string> HashOptionRom(const std::string& root, const std::string& pci_address) {
  auto rom = inventory::ReadOptionRom(root, pci_address);
  if (!rom) return rom.error();
  if (!rom->has_value()) return std::string(kNoRom);
  return DigestOf(**rom);
}

}  // namespace tessera::firmware
