// Float64 matrix products and convolutions: a blocked product (packed
// panels, a register-tiled inner kernel) and convolutions as column matrices
// times weights. oneDNN has no f64 primitives, and the direct loops run at a
// fraction of a GFLOP/s, which made a float64 step of a ResNet take seconds:
// float64 steps are the sharp check of a model against float64 torch
// (wholestep.torch.check(..., dtype=torch.float64)), so they must be cheap.
//
// The order of every sum is fixed by the shapes alone: each element of a
// product is, for each 256-long slice of k in order, one chain of fused
// multiply-adds over the slice from zero, the slices' sums added in order
// to the first (or to the element's old value when accumulating), whatever
// the blocking and however the threads split the output. So results are
// the same bits on any number of threads. One chain over all of k would
// round k times in a row: over a long contraction (a weight gradient summed
// over 12544 tokens) ours was 5-10x further from the exact products than
// OpenBLAS's dgemm, which float64 torch uses, and a float64 step failed
// its check (mvit_v2_s); by slices, 256 + k/256 roundings.
// The direct loops (nn_kernels.hpp, tests) are the oracle they are tested
// against.
#pragma once

#include <cstdint>

#include "ir/geometry.hpp"

namespace ws::exec {

// A matrix operand: element (i, j) at p[i * rs + j * cs].
struct MatF64 {
  const double* p = nullptr;
  int64_t rs = 0, cs = 1;
};

// c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0) + sum over q < k of
// a(i, q) * b(q, j), for i < m, j < n: one fma per term, in order of q in
// each slice of 256, the slices' sums added in order (see above).
void gemm_f64(int64_t m, int64_t n, int64_t k, MatF64 a, MatF64 b, double* c, int64_t ldc,
              bool accumulate);

// `batch` products c[i] = a[i] b[i] of [m, k] and [k, n] matrices stored
// one after another, a[i] stored [k, m] when ta, b[i] stored [n, k] when tb.
void matmul_f64(int64_t batch, int64_t m, int64_t n, int64_t k, const double* a, bool ta,
                const double* b, bool tb, double* c);

// The convolutions of nn_kernels.hpp (2-d and 3-d, any stride, padding,
// dilation and groups), through column matrices. Each output element is one
// fma chain over its taps, in the direct loops' order for conv2d_f64 and the
// weight gradient (over channels and taps, over images and positions).
void conv2d_f64(const ir::Conv2dGeom& g, const double* x, const double* w, double* y);
void conv2d_input_grad_f64(const ir::Conv2dGeom& g, const double* dy, const double* w, double* dx);
void conv2d_weight_grad_f64(const ir::Conv2dGeom& g, const double* x, const double* dy, double* dw);

}  // namespace ws::exec
