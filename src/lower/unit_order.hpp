// The order the fuser places its units in (a unit: one node, or a group of
// nodes that becomes one fusion). Hard edges are data: a unit after every
// unit it reads. Soft edges keep every other reader of an old parameter
// before the unit that writes its update, so the update can be written in
// place; where soft edges form a cycle one is broken, and that update is
// copied instead.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.hpp"

namespace ws::lower {

struct UnitGraph {
  explicit UnitGraph(size_t units)
      : succ(units),
        soft_succ(units),
        hard(units, 0),
        soft(units, 0),
        key(units, -1),
        present(units, false) {}

  void hard_edge(int64_t from, int64_t to) {
    if (from == to) return;
    succ[size_t(from)].push_back(to);
    ++hard[size_t(to)];
  }
  void soft_edge(int64_t from, int64_t to) {
    soft_succ[size_t(from)].push_back(to);
    ++soft[size_t(to)];
  }

  std::vector<std::vector<int64_t>> succ, soft_succ;
  std::vector<int> hard, soft;   // unplaced predecessors of each kind
  std::vector<ir::ValueId> key;  // the unit's place in the old order: its last node
  std::vector<bool> present;     // units to place
};

// The present units in topological order, the smallest key first among
// those ready. Units in a cycle of hard edges are left out: the caller
// checks that every present unit was placed.
std::vector<int64_t> order_units(UnitGraph g);

}  // namespace ws::lower
