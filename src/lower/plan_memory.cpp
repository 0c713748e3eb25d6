#include "lower/plan_memory.hpp"

#include <algorithm>
#include <map>

#include "wholestep/error.hpp"

namespace ws::lower {

namespace {

int64_t rounded_size(int64_t b, int64_t alignment) {
  return std::max<int64_t>(alignment, (b + alignment - 1) / alignment * alignment);
}

// Largest first: each range, biggest first, takes the lowest offset where it
// overlaps no placed range that is alive at the same time (XLA's "global
// decreasing size" heap placement). Quadratic in the ranges, at compile time.
std::vector<int64_t> place_by_size(const std::vector<LiveRange>& ranges, int64_t alignment,
                                   int64_t* arena) {
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ranges[a].bytes > ranges[b].bytes; });
  std::vector<int64_t> offsets(ranges.size(), -1);
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of overlapping placed ranges
  *arena = 0;
  for (size_t r : order) {
    busy.clear();
    for (size_t q : placed)
      if (ranges[q].def <= ranges[r].last && ranges[r].def <= ranges[q].last)
        busy.push_back({offsets[q], offsets[q] + rounded_size(ranges[q].bytes, alignment)});
    std::sort(busy.begin(), busy.end());
    const int64_t size = rounded_size(ranges[r].bytes, alignment);
    int64_t off = 0;
    for (const auto& [b, e] : busy) {
      if (b - off >= size) break;
      off = std::max(off, e);
    }
    offsets[r] = off;
    *arena = std::max(*arena, off + size);
    placed.push_back(r);
  }
  return offsets;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<LiveRange>& ranges, int64_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(ranges.size(), -1);
  auto rounded = [&](int64_t b) { return rounded_size(b, alignment); };

  // Events by position: allocate at def, free after last.
  std::vector<size_t> by_def(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    WS_CHECK(ranges[i].last >= ranges[i].def) << "range " << i;
    by_def[i] = i;
  }
  std::stable_sort(by_def.begin(), by_def.end(),
                   [&](size_t a, size_t b) { return ranges[a].def < ranges[b].def; });

  std::map<int64_t, int64_t> free_blocks;       // offset -> size
  std::multimap<int64_t, size_t> pending_free;  // last position -> range
  int64_t live = 0;
  auto release = [&](size_t r) {
    int64_t off = plan.offsets[r], size = rounded(ranges[r].bytes);
    live -= ranges[r].bytes;
    auto next = free_blocks.lower_bound(off);
    if (next != free_blocks.end() && next->first == off + size) {
      size += next->second;
      next = free_blocks.erase(next);
    }
    if (next != free_blocks.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        prev->second += size;
        return;
      }
    }
    free_blocks[off] = size;
  };

  for (size_t r : by_def) {
    const LiveRange& lr = ranges[r];
    // Free everything whose last reader ran before this definition.
    while (!pending_free.empty() && pending_free.begin()->first < lr.def) {
      release(pending_free.begin()->second);
      pending_free.erase(pending_free.begin());
    }
    const int64_t size = rounded(lr.bytes);
    auto best = free_blocks.end();
    for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it)
      if (it->second >= size && (best == free_blocks.end() || it->second < best->second)) best = it;
    if (best != free_blocks.end()) {
      plan.offsets[r] = best->first;
      if (best->second > size) free_blocks[best->first + size] = best->second - size;
      free_blocks.erase(best);
    } else {
      // Grow, absorbing a free block at the end of the arena.
      int64_t off = plan.arena_bytes;
      if (!free_blocks.empty()) {
        auto last = std::prev(free_blocks.end());
        if (last->first + last->second == plan.arena_bytes) {
          off = last->first;
          free_blocks.erase(last);
        }
      }
      plan.offsets[r] = off;
      plan.arena_bytes = off + size;
    }
    live += lr.bytes;
    plan.max_live = std::max(plan.max_live, live);
    pending_free.emplace(lr.last, r);
  }
  // Two placements, the smaller arena wins.
  int64_t by_size_arena = 0;
  std::vector<int64_t> by_size = place_by_size(ranges, alignment, &by_size_arena);
  if (by_size_arena < plan.arena_bytes) {
    plan.offsets = std::move(by_size);
    plan.arena_bytes = by_size_arena;
  }
  return plan;
}

}  // namespace ws::lower
