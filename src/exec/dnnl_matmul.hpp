// Matrix products as backend ops, from oneDNN's matmul primitive: whole, or
// in fixed parts where oneDNN's own split would depend on the team
// (dnnl_matmul.cpp says when). Internal to the backend: dnnl_backend.cpp
// dispatches to them.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "exec/dnnl_backend.hpp"
#include "exec/reference.hpp"

namespace ws::exec {

// A product `in[0] @ in[1]` (attrs: transpose_a, transpose_b) into `out`,
// its operands read at `strides` and the result written at `out_strides`
// (empty: row-major); with `accumulate` it adds alpha times the product to
// out (alpha and beta given at run time), with `bias` a bias per column,
// with `residual` out's old value.
std::shared_ptr<const BackendOp> make_matmul(std::span<const ir::Type> in, const ir::Type& out,
                                             const ir::Attrs& attrs,
                                             std::span<const std::vector<int64_t>> strides,
                                             const std::vector<int64_t>& out_strides,
                                             bool accumulate, bool bias, bool residual = false);

// Multiply-adds of a product, counted twice.
int64_t matmul_flops(const MatmulDims& d);

}  // namespace ws::exec
