#include "common/untrusted_text.h"

#include <algorithm>
#include <vector>

namespace tessera {
namespace {

// One open array or object while scanning: where in it the scanner is, for the error's path.
struct Frame {
  bool object = false;
  bool expect_key = false;  // object: the next string is a key
  size_t index = 0;         // array: the element being read
  std::string key;          // object: the member being read (an excerpt)
};

constexpr size_t kMaxPath = 120;

std::string PathOf(const std::vector<Frame>& frames, std::string_view what) {
  std::string path;
  for (const auto& frame : frames) {
    if (frame.object) {
      if (!path.empty()) path += '.';
      path += frame.key;
    } else {
      path += '[' + std::to_string(frame.index) + ']';
    }
    if (path.size() > kMaxPath) {
      path.resize(kMaxPath);
      path += "...";
      break;
    }
  }
  return path.empty() ? std::string(what) : path;
}

}  // namespace

Status CheckJsonNesting(std::string_view text, std::string_view what, int max_depth) {
  std::vector<Frame> frames;
  frames.reserve(static_cast<size_t>(max_depth) + 1);
  bool in_string = false;
  bool escaped = false;
  std::string string_text;  // the string being read, when it may be a key (bounded)
  bool collecting = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
        if (collecting) {
          frames.back().key = Excerpt(string_text, 40);
          frames.back().expect_key = false;
        }
        collecting = false;
        continue;
      }
      if (collecting && string_text.size() <= 40) string_text.push_back(c);
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        collecting = !frames.empty() && frames.back().object && frames.back().expect_key;
        string_text.clear();
        break;
      case '{':
      case '[':
        if (static_cast<int>(frames.size()) >= max_depth) {
          return InvalidArgument(PathOf(frames, what) + ": nested deeper than " +
                                 std::to_string(max_depth) + " levels");
        }
        frames.push_back(Frame{c == '{', c == '{', 0, {}});
        break;
      case '}':
      case ']':
        if (!frames.empty()) frames.pop_back();
        break;
      case ',':
        if (!frames.empty()) {
          if (frames.back().object)
            frames.back().expect_key = true;
          else
            ++frames.back().index;
        }
        break;
      default:
        break;
    }
  }
  return Ok();
}

std::string Excerpt(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 3);
  for (unsigned char c : text.substr(0, max_bytes))
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  if (text.size() > max_bytes) out += "...";
  return out;
}

}  // namespace tessera
