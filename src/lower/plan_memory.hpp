// plan_memory: offsets for temporaries in one arena.
//
// Each value lives from the kernel that writes it to the last kernel that
// reads it (a kernel computing in place extends its operand's range instead
// of asking for one). Two placements are made and the smaller arena kept:
// in definition order, each value taking the smallest free block that fits
// (best fit) or growing the arena; and largest first, each value at the
// lowest offset free for its whole life. Ranges that are alive at the same
// time never share bytes. `max_live` is the largest total size alive at
// once: a lower bound that no placement for this schedule can beat.
#pragma once

#include <cstdint>
#include <vector>

namespace ws::lower {

struct LiveRange {
  int64_t bytes;
  int64_t def;   // position of the writing kernel
  int64_t last;  // position of the last reader (>= def)
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per range
  int64_t arena_bytes = 0;
  int64_t max_live = 0;
};

MemoryPlan plan_memory(const std::vector<LiveRange>& ranges, int64_t alignment = 64);

}  // namespace ws::lower
