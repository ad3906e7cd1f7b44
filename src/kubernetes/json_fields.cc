// Typed reads of the API server's JSON that never throw.

#include "kubernetes/client.h"

namespace tessera::k8s {
namespace {

const Json* Member(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

}  // namespace

std::string StringField(const Json& object, std::string_view key, std::string_view fallback) {
  const Json* value = Member(object, key);
  if (!value || !value->is_string()) return std::string(fallback);
  return value->get_ref<const std::string&>();
}

const Json& ObjectField(const Json& object, std::string_view key) {
  static const Json kEmpty = Json::object();
  const Json* value = Member(object, key);
  return value && value->is_object() ? *value : kEmpty;
}

const Json& ArrayField(const Json& object, std::string_view key) {
  static const Json kEmpty = Json::array();
  const Json* value = Member(object, key);
  return value && value->is_array() ? *value : kEmpty;
}

}  // namespace tessera::k8s
