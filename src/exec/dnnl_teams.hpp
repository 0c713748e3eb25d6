// Backend ops whose results do not depend on the team that runs them, and
// the one-thread twins a step switches to under load (dnnl_teams.cpp).
// Internal to the backend: dnnl_conv.cpp and dnnl_matmul.cpp build the
// primitives.
#pragma once

#include <memory>
#include <vector>

#include "exec/dnnl_backend.hpp"
#include "exec/nn_kernels.hpp"

namespace ws::exec {

// One oneDNN convolution primitive (any direction) for the team pinned now
// (dnnl_conv.cpp).
std::shared_ptr<const BackendOp> make_conv(ir::Op op, const Conv2dGeom& g);

// Parts a weight gradient runs as, over the batch or over the weight.
constexpr int64_t kWeightGradParts = 4;

// conv2d_weight_grad summed over fixed parts of the batch in a fixed order:
// the same bits on any team.
std::shared_ptr<const BackendOp> make_weight_grad_in_parts(const Conv2dGeom& g);

// conv2d_weight_grad as fixed parts of the weight (whole groups, or ranges
// of output channels), each over the whole batch: the same bits on any
// team.
std::shared_ptr<const BackendOp> make_weight_grad_in_weight_parts(const Conv2dGeom& g);

// Convolution `op` (conv2d, conv2d_input_grad or conv2d_weight_grad, not
// 3-d) as products over the unfolded input, one a group, each split into
// fixed parts: the weight read where it lies, no reorder; faster on small
// maps; the same bits on any team (conv_products.cpp).
std::shared_ptr<const BackendOp> make_conv_products(ir::Op op, const Conv2dGeom& g);

// A product as fixed parts of its output, each `op` (made for one thread)
// reading A, B and writing the output at these element offsets of the
// whole's pointers; the parts run in parallel: the same bits on any team.
// A part with `dense_rows` reads its A from a dense copy in the scratch,
// made from the columns at `a` (strides sk along K, sm along M) of an A
// stored transposed: [k, dense_rows] as it lies, or with `transpose_a`
// [dense_rows, k], A itself, for an `op` made for a plain A
// (dnnl_matmul.cpp says when a product needs which). A part of the output's
// columns reads the bias (a product's `extra` operand, when it has one) from
// `bias` on.
struct MatrixPart {
  std::shared_ptr<const BackendOp> op;
  int64_t a = 0, b = 0, out = 0, bias = 0;
  int64_t dense_rows = 0, k = 0, sk = 0, sm = 0;
  bool transpose_a = false;
};
// B copied, before the parts run, into the scratch at another row stride:
// its `rows` rows of `cols` elements, `stride` apart where B lies, `padded`
// apart in the copy, which the parts then read (their `b` offsets into the
// copy). `rows` 0: the parts read B where it lies.
struct StagedB {
  int64_t rows = 0, cols = 0, stride = 0, padded = 0;
};
std::shared_ptr<const BackendOp> make_matrix_parts(std::vector<MatrixPart> parts,
                                                   StagedB staged_b = {});

// Runs `whole` (made for the whole pool) or `solo` (made for one thread),
// as team() asks.
std::shared_ptr<const BackendOp> make_team_or_solo(std::shared_ptr<const BackendOp> whole,
                                                   std::shared_ptr<const BackendOp> solo);

}  // namespace ws::exec
