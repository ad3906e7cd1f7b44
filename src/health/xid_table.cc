// The Xid classification table: the built-in one (data/xid-table.yaml) and an operator's file
// over it. The file comes from outside the process, so every field is checked and bounded.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <stdexcept>

#include "common/bounded_file.h"
#include "common/bounded_yaml.h"
#include "common/untrusted_text.h"
#include "health/health.h"

namespace tessera::health {
namespace {

constexpr size_t kMaxRules = 4096;
constexpr size_t kMaxName = 120;
constexpr uint64_t kMaxXid = 1'000'000;  // NVIDIA's catalogue is in the hundreds
constexpr size_t kMaxTableFile = 1 << 20;

// A malformed table, with where and why; caught once in Parse.
struct TableError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void RejectUnknownFields(const YAML::Node& map, std::initializer_list<std::string_view> known,
                         const std::string& where) {
  for (const auto& entry : map) {
    if (!entry.first.IsScalar()) throw TableError(where + ": want text keys");
    std::string key = entry.first.Scalar();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw TableError(where + "." + Excerpt(key, 40) + ": unknown field");
    }
  }
}

FaultClass ClassField(const YAML::Node& node, const std::string& where) {
  if (!node || !node.IsScalar()) throw TableError(where + ": want a class name");
  auto parsed = ParseFaultClass(node.Scalar());
  if (!parsed) throw TableError(where + ": " + parsed.error().message);
  return *parsed;
}

XidRule RuleAt(const YAML::Node& entry, const std::string& where) {
  if (!entry.IsMap()) throw TableError(where + ": want a mapping");
  RejectUnknownFields(entry, {"xid", "name", "class", "reset"}, where);
  XidRule rule;
  const YAML::Node& xid = entry["xid"];
  if (!xid || !xid.IsScalar()) throw TableError(where + ".xid: want a number");
  const std::string& digits = xid.Scalar();
  if (digits.empty() || digits.size() > 7 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    throw TableError(where + ".xid: want a number 1.." + std::to_string(kMaxXid));
  }
  rule.xid = std::stoull(digits);
  if (rule.xid == 0 || rule.xid > kMaxXid) {
    throw TableError(where + ".xid: want a number 1.." + std::to_string(kMaxXid));
  }
  const YAML::Node& name = entry["name"];
  if (!name || !name.IsScalar() || name.Scalar().empty() || name.Scalar().size() > kMaxName ||
      Excerpt(name.Scalar(), kMaxName) != name.Scalar()) {
    throw TableError(where + ".name: want 1.." + std::to_string(kMaxName) +
                     " printable characters");
  }
  rule.name = name.Scalar();
  rule.fault_class = ClassField(entry["class"], where + ".class");
  if (const YAML::Node& reset = entry["reset"]) {
    if (!reset.IsScalar() || (reset.Scalar() != "true" && reset.Scalar() != "false")) {
      throw TableError(where + ".reset: want true or false");
    }
    rule.reset = reset.Scalar() == "true";
  }
  return rule;
}

}  // namespace

Result<XidTable> XidTable::Parse(std::string_view yaml, const XidTable* base) {
  auto loaded = LoadBoundedYaml(yaml);
  if (!loaded) return loaded.error().WithContext("Xid table");
  const YAML::Node& doc = *loaded;
  XidTable table;
  if (base) table = *base;
  try {
    if (!doc.IsMap()) throw TableError("want a mapping with `xids`");
    RejectUnknownFields(doc, {"xids", "default"}, "Xid table");
    if (const YAML::Node& fallback = doc["default"]) {
      if (!fallback.IsMap()) throw TableError("default: want {class: ...}");
      RejectUnknownFields(fallback, {"class"}, "default");
      table.unknown_ = ClassField(fallback["class"], "default.class");
    }
    const YAML::Node& xids = doc["xids"];
    if (xids && (!xids.IsSequence() || xids.size() > kMaxRules)) {
      throw TableError("xids: want a list of at most " + std::to_string(kMaxRules));
    }
    for (size_t i = 0; xids && i < xids.size(); ++i) {
      XidRule rule = RuleAt(xids[i], "xids[" + std::to_string(i) + "]");
      auto at = std::lower_bound(table.rules_.begin(), table.rules_.end(), rule.xid,
                                 [](const XidRule& r, uint64_t xid) { return r.xid < xid; });
      if (at != table.rules_.end() && at->xid == rule.xid) {
        *at = std::move(rule);  // the later entry (an override) wins
      } else {
        table.rules_.insert(at, std::move(rule));
      }
    }
    if (table.rules_.size() > kMaxRules) throw TableError("more than 4096 Xids");
  } catch (const TableError& error) {
    return InvalidArgument(std::string("Xid table: ") + error.what());
  } catch (const YAML::Exception& error) {
    return InvalidArgument(std::string("Xid table: ") + Excerpt(error.what(), 120));
  }
  return table;
}

Result<XidTable> XidTable::Load(const std::string& override_path) {
  auto text = ReadBoundedFile(override_path, kMaxTableFile);
  if (!text) return text.error();
  auto table = Parse(*text, &Default());
  if (!table) return table.error().WithContext(override_path);
  return table;
}

XidRule XidTable::Find(uint64_t xid) const {
  auto at = std::lower_bound(rules_.begin(), rules_.end(), xid,
                             [](const XidRule& r, uint64_t value) { return r.xid < value; });
  if (at != rules_.end() && at->xid == xid) return *at;
  return XidRule{xid, "unknown Xid", unknown_, true};
}

}  // namespace tessera::health
