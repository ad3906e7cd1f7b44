// What the dynamic loader is configured with, as text and bytes: /etc/ld.so.conf and the files
// it includes (glibc elf/ldconfig.c, parse_conf), LD_LIBRARY_PATH, and the ELF header that says
// which architecture a library is built for.
#include <cstring>

#include "common/untrusted_text.h"
#include "inventory/parsers.h"

namespace tessera::inventory {
namespace {

constexpr size_t kMaxLoaderEntries = 256;  // directories or includes per file, or path elements

std::string_view Trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\r'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r'))
    text.remove_suffix(1);
  return text;
}

// "/usr/lib/" → "/usr/lib"; "/" stays.
std::string WithoutTrailingSlashes(std::string_view path) {
  while (path.size() > 1 && path.back() == '/')
    path.remove_suffix(1);
  return std::string(path);
}

}  // namespace

Result<LdSoConf> ParseLdSoConf(std::string_view text) {
  LdSoConf conf;
  int line_number = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = Trimmed(line);
    if (line.empty()) continue;
    auto where = [&] { return "line " + std::to_string(line_number) + ": "; };
    if (line.substr(0, 7) == "include" && line.size() > 7 && (line[7] == ' ' || line[7] == '\t')) {
      // Several patterns may follow one "include", separated by blanks.
      std::string_view rest = line.substr(8);
      while (!(rest = Trimmed(rest)).empty()) {
        size_t blank = rest.find_first_of(" \t");
        std::string_view pattern = rest.substr(0, blank);
        rest = blank == std::string_view::npos ? std::string_view() : rest.substr(blank);
        if (conf.includes.size() >= kMaxLoaderEntries)
          return InvalidArgument(where() + "more than " + std::to_string(kMaxLoaderEntries) +
                                 " includes");
        conf.includes.emplace_back(pattern);
      }
      continue;
    }
    if (line.substr(0, 5) == "hwcap" && line.size() > 5 && (line[5] == ' ' || line[5] == '\t'))
      continue;  // ignored by current glibc
    // A directory, optionally "=TYPE" (libc5-era library types, still accepted by ldconfig).
    std::string_view dir = line.substr(0, line.find('='));
    dir = Trimmed(dir);
    if (dir.empty() || dir.front() != '/')
      return InvalidArgument(where() + "not an absolute directory: " + Excerpt(line));
    if (dir.find('\0') != std::string_view::npos)
      return InvalidArgument(where() + "NUL byte in a directory");
    if (conf.directories.size() >= kMaxLoaderEntries)
      return InvalidArgument(where() + "more than " + std::to_string(kMaxLoaderEntries) +
                             " directories");
    conf.directories.push_back(WithoutTrailingSlashes(dir));
  }
  return conf;
}

std::vector<std::string> SplitSearchPath(std::string_view value) {
  // glibc accepts ':' and ';' between elements. Empty elements mean the working directory and
  // relative ones depend on it: neither names a host directory, so both are left out.
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size() && out.size() < kMaxLoaderEntries) {
    size_t end = value.find_first_of(":;", start);
    if (end == std::string_view::npos) end = value.size();
    std::string_view element = value.substr(start, end - start);
    start = end + 1;
    if (!element.empty() && element.front() == '/' && element.find('\0') == std::string_view::npos)
      out.push_back(WithoutTrailingSlashes(element));
  }
  return out;
}

std::optional<std::string> ElfLibraryArch(std::string_view header) {
  // e_ident: "\x7fELF", EI_CLASS (1 = 32-bit, 2 = 64-bit), EI_DATA (1 = little endian); then
  // e_type (2 bytes) and e_machine (2 bytes) at offset 18.
  if (header.size() < 20 || header.substr(0, 4) !=
                                "\x7f"
                                "ELF")
    return std::nullopt;
  const auto elf_class = static_cast<unsigned char>(header[4]);
  const auto data = static_cast<unsigned char>(header[5]);
  if (data != 1) return std::nullopt;  // the architectures ld.so.cache names here are LE
  const unsigned machine = static_cast<unsigned char>(header[18]) |
                           static_cast<unsigned>(static_cast<unsigned char>(header[19])) << 8;
  // The names ld.so.cache's flags give (LdCacheEntry::arch), so both sources compare.
  if (machine == 3 && elf_class == 1) return "i386";     // EM_386
  if (machine == 62 && elf_class == 2) return "x86_64";  // EM_X86_64
  if (machine == 62 && elf_class == 1) return "x32";
  if (machine == 183 && elf_class == 2) return "aarch64";  // EM_AARCH64
  if (machine == 21 && elf_class == 2) return "ppc64";     // EM_PPC64 (ppc64le)
  return std::nullopt;
}

}  // namespace tessera::inventory
