// The bounded readers every file and YAML document from outside goes through.
//  - First byte even: the input is YAML for LoadBoundedYaml under small bounds, and a document
//    it accepts is walked in full as a converter would walk it (every alias expanded): the walk
//    must stay within the bounds the reader measured, or the reader let a bomb through.
//  - First byte odd: the input is a file's content (second byte the limit) read through
//    ReadBoundedFile from a memfd: the content when it fits, a refusal when it does not.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/bounded_file.h"
#include "common/bounded_yaml.h"

namespace {

constexpr tessera::YamlBounds kBounds{5000, 16};

// Nodes a walk visits under `node`; traps when the walk goes past the bounds.
size_t Walk(const YAML::Node& node, int depth, size_t* visited) {
  if (++*visited > kBounds.max_nodes) __builtin_trap();
  if (node.IsSequence() || node.IsMap()) {
    if (depth + 1 > kBounds.max_depth) __builtin_trap();
    for (const auto& item : node) {
      if (node.IsMap()) {
        Walk(item.first, depth + 1, visited);
        Walk(item.second, depth + 1, visited);
      } else {
        Walk(item, depth + 1, visited);
      }
    }
  }
  return *visited;
}

void ReadThroughFile(std::string_view content, size_t limit) {
  int fd = ::memfd_create("fuzz", MFD_CLOEXEC);
  if (fd < 0) return;
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  auto text = tessera::ReadBoundedFile("/proc/self/fd/" + std::to_string(fd), limit);
  ::close(fd);
  if (written != content.size()) return;
  if (content.size() <= limit) {
    if (!text || *text != content) __builtin_trap();
  } else if (text || text.error().category != tessera::ErrorCategory::kInvalidArgument) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  if (data[0] & 1) {
    ReadThroughFile(rest, data[1] * 16);
    return 0;
  }
  auto node = tessera::LoadBoundedYaml(rest, kBounds);
  if (!node) {
    if (node.error().message.rfind("YAML: ", 0) != 0) __builtin_trap();
    return 0;
  }
  size_t visited = 0;
  Walk(*node, 0, &visited);
  return 0;
}
