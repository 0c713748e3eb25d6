#include "lower/alias.hpp"

#include <algorithm>

namespace ws::lower {

bool can_update_in_place(const UpdateCandidate& c) {
  if (c.producer_pos < 0) return false;
  if (c.producer_reads_old && !c.producer_elementwise) return false;
  return std::all_of(c.old_reader_pos.begin(), c.old_reader_pos.end(),
                     [&](int64_t p) { return p < c.producer_pos; });
}

}  // namespace ws::lower
