// The floor under a step's time (wholestep/floor.hpp), measured.
#pragma once

#include <span>
#include <vector>

#include "ir/graph.hpp"
#include "wholestep/floor.hpp"

namespace ws::exec {

// Runs every f32 matmul and convolution node of `graphs` (in their order,
// each shape on buffers of its own) `rounds` times and returns each shape
// with the median time of its runs; most time first.
std::vector<FloorPart> measure_floor(std::span<const ir::Graph> graphs, int rounds);

}  // namespace ws::exec
