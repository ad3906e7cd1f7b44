// glibc's ld.so.cache binary format (elf/cache.c, sysdeps/generic/ldconfig.h): a legacy
// "ld.so-1.7.0" table may come first, then the "glibc-ld.so.cache1.1" header, a table of
// fixed-size entries, and the strings the entries point into.
#include <cstring>

#include "inventory/parsers.h"

namespace tessera::inventory {

namespace {

constexpr std::string_view kOldMagic = "ld.so-1.7.0";
constexpr std::string_view kNewMagic = "glibc-ld.so.cache1.1";
constexpr size_t kOldHeaderSize = 16;  // magic[11], padding, uint32 nlibs
constexpr size_t kOldEntrySize = 12;   // int32 flags, uint32 key, uint32 value
constexpr size_t kNewHeaderSize = 48;  // magic+version[20], nlibs, len_strings, flags, ext, unused
constexpr size_t kNewEntrySize = 24;   // flags, key, value, osversion, uint64 hwcap

uint32_t LoadU32(std::string_view bytes, size_t offset) {
  uint32_t value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;  // ld.so.cache is written in host byte order; we read caches of our own arch
}

}  // namespace

std::string LdCacheEntry::arch() const {
  // glibc ldconfig.h: FLAG_ELF_LIBC6 = 3 in the low byte, the ABI in bits 8..15.
  switch (flags & 0xff00) {
    case 0x0000:
      return (flags & 0xff) == 0x03 ? "i386" : "unknown";
    case 0x0300:
      return "x86_64";
    case 0x0800:
      return "x32";
    case 0x0a00:
      return "aarch64";
    case 0x0500:
      return "ppc64";
    case 0x0400:
      return "s390x";
    case 0x0900:
      return "armhf";
    default:
      return "unknown";
  }
}

Result<std::vector<LdCacheEntry>> ParseLdCache(std::string_view bytes) {
  size_t new_start = 0;
  if (bytes.substr(0, kOldMagic.size()) == kOldMagic) {
    if (bytes.size() < kOldHeaderSize) return InvalidArgument("legacy header truncated");
    uint64_t old_count = LoadU32(bytes, 12);
    uint64_t old_end = kOldHeaderSize + old_count * kOldEntrySize;
    // The new-format table follows, aligned to 8 bytes (alignof(struct cache_file_new)).
    new_start = (old_end + 7) & ~uint64_t{7};
    if (new_start > bytes.size()) return InvalidArgument("legacy table runs past end of file");
  }
  std::string_view cache = bytes.substr(new_start);
  if (cache.substr(0, kNewMagic.size()) != kNewMagic) {
    return InvalidArgument("no \"glibc-ld.so.cache1.1\" header");
  }
  if (cache.size() < kNewHeaderSize) return InvalidArgument("header truncated");
  uint64_t count = LoadU32(cache, 20);
  uint64_t table_end = kNewHeaderSize + count * kNewEntrySize;
  if (table_end > cache.size()) {
    return InvalidArgument("entry table (" + std::to_string(count) +
                           " entries) runs past end of file");
  }
  // String offsets are relative to the start of the new-format header.
  auto read_string = [&](uint32_t offset, std::string& out) -> bool {
    if (offset < table_end || offset >= cache.size()) return false;
    size_t end = cache.find('\0', offset);
    if (end == std::string_view::npos) return false;
    out.assign(cache.data() + offset, end - offset);
    return true;
  };
  std::vector<LdCacheEntry> entries;
  entries.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    size_t at = kNewHeaderSize + i * kNewEntrySize;
    LdCacheEntry entry;
    entry.flags = LoadU32(cache, at);
    if (!read_string(LoadU32(cache, at + 4), entry.name) ||
        !read_string(LoadU32(cache, at + 8), entry.path)) {
      return InvalidArgument("entry " + std::to_string(i) +
                             ": string offset outside the string table");
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

}  // namespace tessera::inventory
