#include "common/bounded_yaml.h"

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <istream>
#include <streambuf>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessera {
namespace {

// A stream over the caller's bytes, without a copy.
class ViewBuffer : public std::streambuf {
 public:
  explicit ViewBuffer(std::string_view text) {
    char* begin = const_cast<char*>(text.data());
    setg(begin, begin, begin + text.size());
  }
};

struct BoundCrossed {
  std::string message;
};

// Counts the nodes and depth a walk would see, from the parser's events. Per anchor it keeps
// the size and height of the subtree it names, so an alias costs one lookup here however large
// its expansion is.
class Measure final : public YAML::EventHandler {
 public:
  explicit Measure(const YamlBounds& bounds) : bounds_(bounds) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { Leaf(anchor); }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    Leaf(anchor);
  }
  void OnAlias(const YAML::Mark&, YAML::anchor_t anchor) override {
    auto it = subtrees_.find(anchor);
    if (it == subtrees_.end()) {
      // yaml-cpp registers an anchor when its node starts: an alias inside that node makes a
      // cycle that a walk would follow for ever.
      throw BoundCrossed{"an alias refers to a node that contains it"};
    }
    Add(it->second.nodes);
    Reach(open_.size() + it->second.height);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Subtree {
    size_t nodes = 0;
    size_t height = 0;  // collections below and including its root
  };
  struct Frame {
    YAML::anchor_t anchor;
    size_t nodes_before;
    size_t deepest;  // the most collections open at once while this one was
  };

  void Add(size_t nodes) {
    if (nodes > bounds_.max_nodes - nodes_) {
      throw BoundCrossed{"more than " + std::to_string(bounds_.max_nodes) +
                         " nodes with its aliases expanded"};
    }
    nodes_ += nodes;
  }
  void Reach(size_t depth) {
    if (depth > static_cast<size_t>(bounds_.max_depth)) {
      throw BoundCrossed{"nested deeper than " + std::to_string(bounds_.max_depth) +
                         " levels with its aliases expanded"};
    }
    if (!open_.empty()) open_.back().deepest = std::max(open_.back().deepest, depth);
  }
  void Leaf(YAML::anchor_t anchor) {
    Add(1);
    if (anchor != YAML::NullAnchor) subtrees_[anchor] = Subtree{1, 0};
  }
  void Open(YAML::anchor_t anchor) {
    Add(1);
    const size_t depth = open_.size() + 1;
    Reach(depth);
    open_.push_back(Frame{anchor, nodes_ - 1, depth});
  }
  void Close() {
    Frame frame = open_.back();
    open_.pop_back();
    if (!open_.empty()) open_.back().deepest = std::max(open_.back().deepest, frame.deepest);
    if (frame.anchor != YAML::NullAnchor) {
      subtrees_[frame.anchor] = Subtree{nodes_ - frame.nodes_before, frame.deepest - open_.size()};
    }
  }

  YamlBounds bounds_;
  size_t nodes_ = 0;
  std::vector<Frame> open_;
  std::unordered_map<YAML::anchor_t, Subtree> subtrees_;
};

}  // namespace

Result<YAML::Node> LoadBoundedYaml(std::string_view text, const YamlBounds& bounds) {
  try {
    {
      ViewBuffer buffer(text);
      std::istream in(&buffer);
      YAML::Parser parser(in);
      Measure measure(bounds);
      parser.HandleNextDocument(measure);
    }
    ViewBuffer buffer(text);
    std::istream in(&buffer);
    return YAML::Load(in);
  } catch (const BoundCrossed& crossed) {
    return InvalidArgument("YAML: " + crossed.message);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("YAML: ") + e.what());
  }
}

}  // namespace tessera
