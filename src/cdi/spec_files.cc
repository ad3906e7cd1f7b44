// Spec files on disk: validating files and directories the way a runtime loads them, and
// writing specs atomically.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "cdi/cdi.h"
#include "common/atomic_file.h"
#include "common/bounded_file.h"

namespace tessera::cdi {
namespace {

bool HasSpecExtension(const std::string& name) {
  auto ends_with = [&](const char* suffix) {
    size_t n = std::strlen(suffix);
    return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
  };
  return ends_with(".json") || ends_with(".yaml");
}

// A spec file's qualified devices ("vendor/class=name"), for conflict detection.
struct LoadedSpec {
  std::string file;
  Spec spec;
};

void CheckFile(const std::string& file, std::vector<FileProblem>* problems,
               std::vector<LoadedSpec>* loaded) {
  // A runtime reads every file of a spec dir: a FIFO or a device planted there is a problem to
  // report, not a read that blocks or never ends.
  auto text = ReadBoundedFile(file, kMaxSpecFileBytes);
  if (!text) {
    problems->push_back({file, {"-", "-", text.error().message}});
    return;
  }
  ParsedSpec parsed = ParseSpec(*text);
  std::vector<Problem> found = std::move(parsed.problems);
  if (found.empty()) found = ValidateSpec(parsed.spec);
  for (auto& problem : found)
    problems->push_back({file, std::move(problem)});
  if (found.empty() && loaded) loaded->push_back({file, std::move(parsed.spec)});
}

// Devices defined by two specs of one directory conflict: a runtime drops both (pkg/cdi
// cache.go, resolveConflict with equal priority).
void CheckConflicts(const std::vector<LoadedSpec>& specs, std::vector<FileProblem>* problems) {
  std::map<std::string, const std::string*> owner;
  for (const auto& loaded : specs) {
    for (const auto& device : loaded.spec.devices) {
      std::string qualified = loaded.spec.kind + "=" + device.name;
      auto [it, inserted] = owner.emplace(qualified, &loaded.file);
      if (inserted) continue;
      problems->push_back({loaded.file,
                           {device.name, "name",
                            "conflicting device " + qualified + " (also in " + *it->second + ")"}});
      problems->push_back({*it->second,
                           {device.name, "name",
                            "conflicting device " + qualified + " (also in " + loaded.file + ")"}});
    }
  }
}

}  // namespace

std::string FormatFileProblem(const FileProblem& problem) {
  return problem.file + ": " + FormatProblem(problem.problem);
}

std::vector<FileProblem> ValidatePaths(const std::vector<std::string>& paths) {
  std::vector<FileProblem> problems;
  for (const auto& path : paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      problems.push_back({path, {"-", "-", ErrnoError("stat", errno).message}});
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      CheckFile(path, &problems, nullptr);
      continue;
    }
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path.c_str()), &::closedir);
    if (!dir) {
      problems.push_back({path, {"-", "-", ErrnoError("open directory", errno).message}});
      continue;
    }
    std::vector<std::string> files;
    while (dirent* entry = ::readdir(dir.get())) {
      std::string name = entry->d_name;
      if (!HasSpecExtension(name)) continue;
      std::string file = path + (path.back() == '/' ? "" : "/") + name;
      struct stat file_st;
      if (::stat(file.c_str(), &file_st) == 0 && S_ISDIR(file_st.st_mode)) continue;
      files.push_back(std::move(file));
    }
    std::sort(files.begin(), files.end());
    std::vector<LoadedSpec> loaded;
    for (const auto& file : files)
      CheckFile(file, &problems, &loaded);
    CheckConflicts(loaded, &problems);
  }
  return problems;
}

Result<Format> ParseFormat(std::string_view name) {
  if (name == "json") return Format::kJson;
  if (name == "yaml") return Format::kYaml;
  return InvalidArgument("format \"" + std::string(name) + "\": want json or yaml");
}

std::string Serialize(const Spec& spec, Format format) {
  return format == Format::kYaml ? ToYaml(spec) : ToJson(spec);
}

std::string SpecFileName(const Spec& spec, Format format) {
  return spec.Vendor() + "-" + spec.Class() + (format == Format::kYaml ? ".yaml" : ".json");
}

Result<bool> WriteSpecFile(const std::string& path, const std::string& content,
                           Durability durability) {
  auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    std::string dir = path.substr(0, slash);
    // Create missing parents one level at a time (mkdir -p).
    for (size_t i = 1; i <= dir.size(); ++i) {
      if (i == dir.size() || dir[i] == '/') {
        std::string part = dir.substr(0, i);
        if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
          return ErrnoError("create directory " + part, errno);
        }
      }
    }
  }
  // Whatever is there now is either the same bytes or to be replaced: never read past them.
  if (auto existing = ReadBoundedFile(path, content.size()); existing && *existing == content) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 07777) == 0644) return false;
  }
  if (auto status = WriteFileAtomically(path, content, 0644, durability); !status)
    return status.error();
  return true;
}

}  // namespace tessera::cdi
