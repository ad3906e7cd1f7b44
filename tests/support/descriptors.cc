#include "support/descriptors.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "support/file_text.h"

namespace tessera::testing {
namespace {

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  std::unique_ptr<DIR, int (*)(DIR*)> handle(::opendir(dir.c_str()), &::closedir);
  if (!handle) return out;
  while (const dirent* entry = ::readdir(handle.get())) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  return out;
}

bool IsNumber(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

std::vector<pid_t> AllProcesses() {
  std::vector<pid_t> out;
  for (const auto& name : Entries("/proc"))
    if (IsNumber(name)) out.push_back(static_cast<pid_t>(std::stol(name)));
  return out;
}

// Field 4 of /proc/<pid>/stat (after the name, which may hold any bytes: from the last ')').
pid_t ParentOf(pid_t pid) {
  const std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 1));
  std::string state;
  pid_t parent = -1;
  fields >> state >> parent;
  return parent;
}

bool Comparable(const std::string& target) {
  return !target.empty() && target.rfind("anon_inode:", 0) != 0 && target != "/dev/null";
}

}  // namespace

std::vector<OpenDescriptor> DescriptorsOf(pid_t pid) {
  std::vector<OpenDescriptor> out;
  const std::string base = "/proc/" + std::to_string(pid);
  for (const auto& name : Entries(base + "/fd")) {
    if (!IsNumber(name)) continue;
    char target[4096];
    const ssize_t n = ::readlink((base + "/fd/" + name).c_str(), target, sizeof target - 1);
    if (n < 0) continue;  // closed meanwhile
    OpenDescriptor descriptor;
    descriptor.fd = std::stoi(name);
    descriptor.target.assign(target, static_cast<size_t>(n));
    // "flags:\t02100002": octal open flags, O_CLOEXEC (02000000) set by the kernel from the
    // descriptor's close-on-exec bit.
    const std::string info = ReadText(base + "/fdinfo/" + name);
    const size_t at = info.find("flags:");
    if (at != std::string::npos)
      descriptor.close_on_exec = (std::strtoul(info.c_str() + at + 6, nullptr, 8) & O_CLOEXEC) != 0;
    out.push_back(std::move(descriptor));
  }
  return out;
}

std::set<std::string> ListeningSockets(uint16_t port) {
  std::set<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(ReadText(table));
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line)) {
      // "sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ..."
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      const size_t colon = local.rfind(':');
      if (colon == std::string::npos || state != "0A") continue;  // 0A: TCP_LISTEN
      if (std::stoul(local.substr(colon + 1), nullptr, 16) == port)
        out.insert("socket:[" + inode + "]");
    }
  }
  return out;
}

std::vector<pid_t> HoldersOf(const std::string& target, pid_t except) {
  std::vector<pid_t> out;
  for (pid_t pid : AllProcesses()) {
    if (pid == except) continue;
    for (const auto& descriptor : DescriptorsOf(pid))
      if (descriptor.target == target) {
        out.push_back(pid);
        break;
      }
  }
  return out;
}

std::vector<pid_t> ProcessesWithCommandLine(const std::string& needle) {
  std::vector<pid_t> out;
  for (pid_t pid : AllProcesses()) {
    std::string cmdline = ReadText("/proc/" + std::to_string(pid) + "/cmdline");
    for (char& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(needle) != std::string::npos) out.push_back(pid);
  }
  return out;
}

std::vector<pid_t> DescendantsOf(pid_t pid) {
  std::multimap<pid_t, pid_t> children;
  for (pid_t each : AllProcesses())
    children.emplace(ParentOf(each), each);
  std::vector<pid_t> out;
  std::vector<pid_t> next = {pid};
  while (!next.empty()) {
    const pid_t parent = next.back();
    next.pop_back();
    auto [begin, end] = children.equal_range(parent);
    for (auto it = begin; it != end; ++it) {
      out.push_back(it->second);
      next.push_back(it->second);
    }
  }
  return out;
}

std::vector<std::string> InheritedFrom(pid_t owner, pid_t child) {
  std::set<std::string> owned;
  for (const auto& descriptor : DescriptorsOf(owner))
    if (descriptor.fd > 2 && Comparable(descriptor.target)) owned.insert(descriptor.target);
  std::vector<std::string> out;
  for (const auto& descriptor : DescriptorsOf(child))
    if (descriptor.fd > 2 && owned.count(descriptor.target))
      out.push_back("fd " + std::to_string(descriptor.fd) + " -> " + descriptor.target);
  return out;
}

std::vector<WitnessReport> WitnessReports(const std::string& dir) {
  std::vector<WitnessReport> out;
  for (const auto& name : Entries(dir)) {
    WitnessReport report;
    report.name = name;
    std::istringstream lines(ReadText(dir + "/" + name));
    std::string line;
    while (std::getline(lines, line)) {
      const int fd = std::atoi(line.c_str());
      if (fd > 2) report.extra.push_back(line);
    }
    out.push_back(std::move(report));
  }
  return out;
}

}  // namespace tessera::testing
