// tessera-windows-discover.exe: writes this Windows host's snapshot (docs/windows-snapshot.md)
// to stdout or to --output FILE; warnings go to stderr. Feed the snapshot to
// `tessera windows ... --snapshot FILE`.
#include <cstdio>
#include <cstring>
#include <string>

#include "inventory/windows/discover.h"
#include "windows/snapshot.h"

int main(int argc, char** argv) {
  std::string output;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--output") == 0 && i + 1 < argc) {
      output = argv[++i];
    } else if (std::strcmp(argv[i], "--help") == 0) {
      std::puts("usage: tessera-windows-discover [--output FILE]");
      return 0;
    } else {
      std::fprintf(stderr, "tessera-windows-discover: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  auto discovery = tessera::windows::native::DiscoverHost();
  if (!discovery.ok()) {
    std::fprintf(stderr, "tessera-windows-discover: %s\n", discovery.error().message.c_str());
    return 4;
  }
  for (const std::string& w : discovery->warnings) {
    std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  std::string json = tessera::windows::SnapshotToJson(discovery->snapshot);
  FILE* out = output.empty() ? stdout : std::fopen(output.c_str(), "wb");
  if (out == nullptr) {
    std::fprintf(stderr, "tessera-windows-discover: cannot write %s\n", output.c_str());
    return 5;
  }
  std::fwrite(json.data(), 1, json.size(), out);
  if (out != stdout) std::fclose(out);
  return 0;
}
