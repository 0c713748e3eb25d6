// The floor under a step's time (TrainStep::floor): its convolutions and
// matrix products alone, each one oneDNN primitive that reads and writes
// every operand in the layout the primitive picks (no reorder before or
// after it; a convolution over images the step stores NHWC or in blocks:
// the faster of that and a jit kernel reading them where they lie), on the
// whole pool. What a step spends beyond its floor is
// everything else: reorders to and from its layouts, elementwise and
// normalization passes, the optimizer, waits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ws {

// One shape of contraction: every node of one op, operand types and
// attributes.
struct FloorPart {
  std::string what;   // "conv2d [8,64,16,16] [64,64,3,3] -> [8,64,16,16] stride 1x1x1 ..."
  std::string impl;   // oneDNN's implementation, e.g. "brg:avx512_core"
  int64_t calls = 0;  // nodes of this shape in the step
  double ms = 0;      // per step: the median time of one run, times calls
  int64_t flops = 0;  // per step, all calls
};

struct StepFloor {
  double ms = 0;                 // the sum of the parts' ms
  std::vector<FloorPart> parts;  // most time first
};

}  // namespace ws
