// Backend ops whose results do not depend on the team that runs them, and
// the one-thread twins a step switches to under load (dnnl_teams.cpp).
// Internal to the backend: dnnl_backend.cpp builds the primitives.
#pragma once

#include <memory>

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

// Runs `whole` (made for the whole pool) or `solo` (made for one thread),
// as team() asks.
std::shared_ptr<const BackendOp> make_team_or_solo(std::shared_ptr<const BackendOp> whole,
                                                   std::shared_ptr<const BackendOp> solo);

}  // namespace ws::exec
