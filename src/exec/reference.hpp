// Reference kernels: one obviously-correct kernel per op, for every dtype the
// op takes. They are the oracle for the optimized kernels, the eager Tensor
// path, the interpreter (mode `interpret`) and the f64 gradient checks.
//
// One exception: matrix products and convolutions run the compute backend's
// primitives in f32 (oneDNN; tested against the f64 loops) and blocked
// products of fixed summation order in f64 (f64_products.hpp; tested
// against the direct loops of nn_kernels.hpp and fma chains over slices of
// the sum per element). In f32 a product's rounding depends on its
// summation order, and Adam's normalized update turns those last-bit
// differences in near-zero gradients into visible parameter differences;
// with one product everywhere, the interpreter and the compiled modes
// differ only where the pipeline (partitioning, lowering, aliasing) does,
// which is what comparing them is for. For the same reason
// floating-point sums run one blocked summation order (reduce.hpp) and
// elementwise functions have one definition (elementwise.hpp) everywhere.
//
// What each mode is compared against, in the tests: the interpreter against
// f64 finite differences (gradcheck) and the f64 reference loops (the f32
// backend, math and reductions, each within a stated bound); the compiled
// modes against the interpreter, bit for bit, after many training steps.
#pragma once

#include <span>

#include "exec/nn_kernels.hpp"
#include "exec/strided_walk.hpp"
#include "ir/graph.hpp"

namespace ws::exec {

// Computes `op` over operands `in[i]` of types `in_types[i]` into `out`, which
// has type `out_type` and does not overlap the operands.
void run_reference(ir::Op op, const ir::Attrs& attrs, std::span<const ir::Type> in_types,
                   const void* const* in, const ir::Type& out_type, void* out,
                   const SourceLoc& loc = {});

// The product of dims [begin, end), without allocating (kernels call it).
int64_t dims_product(Shape::const_iterator begin, Shape::const_iterator end);

// Calls f(T{}) with the C++ type of `dt`.
template <class F>
void dispatch(DType dt, F&& f) {
  switch (dt) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::i64: return f(int64_t{});
    case DType::b8: return f(uint8_t{});
  }
}

// Row-major strides of a shape, in elements.
std::vector<int64_t> row_major_strides(const Shape& shape);

// merge_dims for several operands walking one shape: merges adjacent dims
// where every operand's strides allow it and drops size-1 dims (a rank-0
// shape becomes [1]); `strides` holds one vector per operand.
void merge_joint(Shape& shape, std::vector<std::vector<int64_t>>& strides);

// Merges adjacent dims that a strided walk can treat as one (the outer
// stride is the inner stride times the inner size), in place.
void merge_dims(Shape& shape, std::vector<int64_t>& strides);

// Strides (in the operand) for walking the result of a broadcast, transpose or
// reduction in row-major order.
std::vector<int64_t> broadcast_source_strides(const Shape& in, const Shape& out,
                                              const std::vector<int64_t>& dims);
std::vector<int64_t> transpose_source_strides(const Shape& in, const std::vector<int64_t>& perm);
// For a reduction: strides into the result for walking the operand (0 on
// reduced axes).
std::vector<int64_t> reduce_result_strides(const Shape& in, const std::vector<int64_t>& axes);

// Sizes of ops, from operand shapes and attributes (already validated by
// shape inference; convolutions and poolings: ir/geometry.hpp).
struct MatmulDims {
  int64_t batch = 1, m = 0, k = 0, n = 0;
  bool ta = false, tb = false;
};
MatmulDims matmul_dims(const Shape& a, const Shape& b, const ir::Attrs& attrs);
// A slice as `outer` rows: copy out_row elements from in_row-sized rows at
// `start` (all in elements).
struct SliceDims {
  int64_t outer = 1, in_row = 0, out_row = 0, start = 0;
};
SliceDims slice_dims(const Shape& x, const ir::Attrs& attrs);

}  // namespace ws::exec
