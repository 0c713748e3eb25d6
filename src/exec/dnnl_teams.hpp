// Backend ops whose results do not depend on the team that runs them, and
// the one-thread twins a step switches to under load (dnnl_teams.cpp).
// Internal to the backend: dnnl_backend.cpp builds the primitives.
#pragma once

#include <memory>
#include <vector>

#include "exec/dnnl_backend.hpp"
#include "exec/nn_kernels.hpp"

namespace ws::exec {

// One oneDNN convolution primitive (any direction) for the team pinned now
// (dnnl_backend.cpp).
std::shared_ptr<const BackendOp> make_conv(ir::Op op, const Conv2dGeom& g);

// conv2d_weight_grad summed over fixed parts of the batch in a fixed order:
// the same bits on any team.
std::shared_ptr<const BackendOp> make_weight_grad_in_parts(const Conv2dGeom& g);

// conv2d_weight_grad as im2col and one matrix product split over fixed row
// parts (groups of 1): faster on small maps, the same bits on any team.
std::shared_ptr<const BackendOp> make_weight_grad_cols(const Conv2dGeom& g);

// A product with a transposed A (stored [..., K, M]) as fixed parts, each
// `op` (made for one thread) computing `rows` rows from m0 of batch matrix
// `batch` over the whole K, from that part of A copied dense ([K, rows]);
// the parts run in parallel: the same bits on any team (dnnl_backend.cpp
// says when a product needs it).
struct TransposedAPart {
  std::shared_ptr<const BackendOp> op;
  int64_t batch = 0, m0 = 0, rows = 0;
};
// In elements: where each batch's matrix of A, B and the output starts; A's
// strides along K and M; the output's row stride.
struct TransposedALayout {
  std::vector<int64_t> a, b, out;
  int64_t k = 0, sk = 0, sm = 0, out_row = 0;
};
std::shared_ptr<const BackendOp> make_transposed_a_in_parts(std::vector<TransposedAPart> parts,
                                                            TransposedALayout layout);

// Runs `whole` (made for the whole pool) or `solo` (made for one thread),
// as team() asks.
std::shared_ptr<const BackendOp> make_team_or_solo(std::shared_ptr<const BackendOp> whole,
                                                   std::shared_ptr<const BackendOp> solo);

}  // namespace ws::exec
