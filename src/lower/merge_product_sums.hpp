// merge_product_sums: a sum of matrix products with the same operand
// layouts and result shape is one product over the concatenated sums.
//
//   y = add(add(matmul(a1, b1), matmul(a2, b2)), matmul(a3, b3))
//     =>  y = matmul(concat(a1, a2, a3), concat(b1, b2, b3))
//
// (each a_i, b_i concatenated along its contraction axis). A weight shared
// by the steps of a recurrent network gets one gradient product per time
// step, each a short sum (the batch) written out as a whole weight-sized
// matrix and then added up; merged, it is one product over batch x steps,
// the kind oneDNN runs fastest, and no weight-sized temporaries. A product
// joins when copying its operands moves less than its result would:
// K * (M + N) <= M * N; products used elsewhere, batched products and
// other terms of the sum are left as they are (the other terms added to
// the merged product). The sum is the same but for rounding: its terms are
// added in another order.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph merge_product_sums(const ir::Graph& g, bool* changed = nullptr);

}  // namespace ws::lower
