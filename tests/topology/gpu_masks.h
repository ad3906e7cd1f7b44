// GPU masks written as lists of GPU indices in tests.
#pragma once

#include <initializer_list>

#include "topology/topology.h"

namespace tessera::topology {

// The mask with bit i set for each GPU index i in `indices`.
inline GpuMask GpuMaskOf(std::initializer_list<int> indices) {
  GpuMask mask = 0;
  for (int i : indices)
    mask |= GpuMask{1} << i;
  return mask;
}

}  // namespace tessera::topology
