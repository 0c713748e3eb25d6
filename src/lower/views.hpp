// What lowering reads instead of a value, found before any kernel is made:
// the one value of a `full` or of a broadcast one-element value (read as a
// scalar operand), and the storage a view reads.
//
// A reshape is a view: row-major data keeps its bytes, so the reshaped value
// is read from its operand's storage, with no kernel and no copy. So is a
// slice of contiguous rows (every dim before its axis of size 1: a
// collective's bucket cut back into gradients), read `offset` bytes into its
// operand's storage. Views that are graph outputs stay copies: the caller
// owns that storage.
#pragma once

#include <vector>

#include "ir/graph.hpp"

namespace ws::lower {

// The value supplying v's single value when v is a `full` or a broadcast of
// a one-element value, else kNoValue; per value of g.
std::vector<ir::ValueId> scalar_sources(const ir::Graph& g);

struct View {
  ir::ValueId root;    // the value whose storage it reads (itself if not a view)
  int64_t offset = 0;  // bytes into the root's storage
};
// Per value of g.
std::vector<View> view_roots(const ir::Graph& g);

}  // namespace ws::lower
