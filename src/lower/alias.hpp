// alias: where each in-place update is written.
//
// An output that updates input j is written straight into j's storage when
// that is safe: the value is computed by a kernel (not an input, not already
// another output), every other reader of j's old value runs before that
// kernel, and if the kernel itself reads j it is elementwise (each element is
// read before it is overwritten). Otherwise the value is computed elsewhere
// and copied into j after the last kernel, and the copy is counted.
#pragma once

#include <cstdint>
#include <vector>

namespace ws::lower {

struct UpdateCandidate {
  int64_t producer_pos;     // kernel computing the new value
  bool producer_reads_old;  // that kernel reads the old value too
  bool producer_elementwise;
  std::vector<int64_t> old_reader_pos;  // every other reader of the old value
};

bool can_update_in_place(const UpdateCandidate& c);

}  // namespace ws::lower
