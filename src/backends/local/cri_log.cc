// podman's k8s-file log format (the CRI container log format): one record per line,
// "<timestamp> <stream> <tag> <text>", tag F for a full line and P for a partial one that the
// next record continues (the runtime splits long lines).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "backends/local/local.h"

namespace tessera::backends {
namespace {

// Splits off the next space-separated field; empty when there is no space left.
std::string_view NextField(std::string_view& rest) {
  auto space = rest.find(' ');
  if (space == std::string_view::npos) return {};
  std::string_view field = rest.substr(0, space);
  rest.remove_prefix(space + 1);
  return field;
}

}  // namespace

std::string TextOfCriLog(std::string_view log) {
  std::string out;
  out.reserve(log.size());
  while (!log.empty()) {
    auto newline = log.find('\n');
    std::string_view line = log.substr(0, newline);
    log = newline == std::string_view::npos ? std::string_view() : log.substr(newline + 1);
    const bool terminated = newline != std::string_view::npos;
    std::string_view rest = line;
    std::string_view time = NextField(rest);
    std::string_view stream = NextField(rest);
    std::string_view tag = NextField(rest);
    // The text may itself be empty ("... stdout F " is an empty line), so the tag may end the
    // line without a trailing space.
    if (tag.empty() && (rest == "F" || rest == "P")) {
      tag = rest;
      rest = {};
    }
    bool record = !time.empty() && time.find('T') != std::string_view::npos &&
                  (stream == "stdout" || stream == "stderr") && (tag == "F" || tag == "P");
    if (!record) {
      out.append(line);
      if (terminated) out.push_back('\n');
      continue;
    }
    out.append(rest);
    if (tag == "F") out.push_back('\n');
  }
  return out;
}

namespace {

// Whether byte `at` of the log starts a record: the byte before it ends one, and what follows
// begins with "<time> stdout|stderr ". At the end of the log only the first can be seen.
bool AtRecordStart(int fd, uint64_t at, uint64_t size) {
  if (at == 0) return true;
  char before = 0;
  if (::pread(fd, &before, 1, static_cast<off_t>(at - 1)) != 1 || before != '\n') return false;
  if (at == size) return true;
  char head[64];
  ssize_t got = ::pread(fd, head, sizeof(head), static_cast<off_t>(at));
  if (got <= 0) return false;
  std::string_view rest(head, static_cast<size_t>(got));
  std::string_view time = NextField(rest);
  std::string_view stream = NextField(rest);
  if (stream.empty()) return rest.size() < 8;  // too little to tell: a record being written
  return time.find('T') != std::string_view::npos && (stream == "stdout" || stream == "stderr");
}

}  // namespace

Result<LogPart> ReadCriLogFrom(int fd, uint64_t offset, size_t max_bytes) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return ErrnoError("log", errno);
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  LogPart part;
  uint64_t from = offset;
  if (from > size || !AtRecordStart(fd, from, size)) {
    part.cut = true;
    from = 0;
  }
  bool skip_first = false;
  if (size - from > max_bytes) {
    part.cut = true;
    from = size - max_bytes;
    skip_first = !AtRecordStart(fd, from, size);
  }
  std::string raw(static_cast<size_t>(size - from), '\0');
  ssize_t got = raw.empty() ? 0 : ::pread(fd, raw.data(), raw.size(), static_cast<off_t>(from));
  if (got < 0) return ErrnoError("log", errno);
  raw.resize(static_cast<size_t>(got));  // shorter when emptied meanwhile
  size_t begin = 0;
  if (skip_first) {
    auto newline = raw.find('\n');
    begin = newline == std::string::npos ? raw.size() : newline + 1;
  }
  auto last = raw.rfind('\n');
  size_t stop = last == std::string::npos || last < begin ? begin : last + 1;
  part.text = TextOfCriLog(std::string_view(raw).substr(begin, stop - begin));
  part.end = from + stop;
  return part;
}

}  // namespace tessera::backends
