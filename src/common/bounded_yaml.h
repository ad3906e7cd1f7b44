// Loading YAML that came from outside the process (an operator's file, a spec) with bounds on
// what its node graph can cost. yaml-cpp builds aliases as shared nodes, so a billion-laughs
// document of a few hundred bytes loads cheaply and only explodes when something converts or
// walks it. This reader measures the document as a walk would see it first, from the parser's
// events and before any node is built: nodes counted with every alias expanded, nesting depth
// with aliases expanded, and an alias inside the node it names (a cycle) refused.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <string_view>

#include "common/error.h"

namespace tessera {

struct YamlBounds {
  // Nodes as a walk visits them (keys, values, items; an alias counts its whole subtree every
  // time it is used). Configs, tables and kubeconfigs hold hundreds to thousands.
  size_t max_nodes = 100'000;
  // Nested sequences and mappings, aliases expanded.
  int max_depth = 64;
};

// The first document of `text`, or InvalidArgument "YAML: ..." (a syntax error with its line
// and column, or the bound that was crossed). Converting or walking the node afterwards visits
// at most bounds.max_nodes nodes at most bounds.max_depth deep.
Result<YAML::Node> LoadBoundedYaml(std::string_view text, const YamlBounds& bounds = {});

}  // namespace tessera
