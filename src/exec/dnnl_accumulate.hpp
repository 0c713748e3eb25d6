// matmul_add's accumulation around oneDNN's products, and the product
// over an empty dimension (dnnl_accumulate.cpp). Internal to the backend.
#pragma once

#include <memory>

#include "exec/dnnl_backend.hpp"

namespace ws::exec {

// Zeros of `bytes` bytes (a matmul_add's destination only scaled by beta).
std::shared_ptr<const BackendOp> make_zero_product(int64_t bytes, bool add);
// out = beta * out + alpha * (a @ b) with the product's post-ops: `scaled`
// adds alpha * (a @ b), `unit` a @ b.
std::shared_ptr<const BackendOp> make_accumulate_in_post_ops(
    std::shared_ptr<const BackendOp> scaled, std::shared_ptr<const BackendOp> unit, int64_t n);
// The same with the plain product into the scratch, then our loops.
std::shared_ptr<const BackendOp> make_accumulate_after(std::shared_ptr<const BackendOp> product,
                                                       int64_t n);

}  // namespace ws::exec
