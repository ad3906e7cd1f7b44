// Strict field readers shared by the snapshot's JSON parsers (snapshot_json.cc and
// snapshot_hyperv_json.cc); internal to src/windows. A FieldError carries the first problem, named
// by the field's path, to ParseSnapshot, which turns it into a value; nothing escapes the module.
// Values quoted in messages are excerpts: a snapshot is a file from outside.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "windows/snapshot.h"
#include "windows/text.h"

namespace tessera::windows::snapshot_json {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

struct FieldError {
  std::string message;
};

[[noreturn]] void Throw(const std::string& path, const std::string& problem);
std::string Join(const std::string& path, const std::string& key);
std::string Index(const std::string& path, size_t i);  // "path[i]"
// A short printable excerpt of a value for a message.
std::string Quote(const std::string& value);

// The object's keys are exactly `fields`: an unknown or a missing one is an error.
void ExpectObject(const json& j, const std::string& path,
                  std::initializer_list<const char*> fields);
std::string GetString(const json& j, const std::string& path, const char* key);
bool GetBool(const json& j, const std::string& path, const char* key);
uint64_t GetUnsigned(const json& j, const std::string& path, const char* key, uint64_t max);
std::vector<std::string> GetStringArray(const json& j, const std::string& path, const char* key,
                                        size_t max_items = 4096);
// An array of at most `max_items` elements (an error otherwise).
const json& GetArray(const json& j, const std::string& path, const char* key, size_t max_items);
// Fixed-width lowercase-or-uppercase hex without 0x ("10de").
uint64_t GetHex(const json& j, const std::string& path, const char* key, size_t digits);
// null, or what `read` makes of the value.
template <typename T, typename Read>
std::optional<T> GetNullable(const json& j, const char* key, Read read) {
  if (j.at(key).is_null()) return std::nullopt;
  return read();
}

using text::Hex;

// Format 2's facts (snapshot_hyperv_json.cc): read from, and written into, the top-level object.
HyperVFacts ParseHyperVFacts(const json& root);
void WriteHyperVFacts(const HyperVFacts& facts, ojson& root);

}  // namespace tessera::windows::snapshot_json
