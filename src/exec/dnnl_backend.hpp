// The compute backend for matrix products and convolutions: oneDNN.
//
// oneDNN picks its kernels from the CPU's instruction-set flags, so it runs
// its AVX-512 or AVX2 code on CPUs a BLAS build does not know by model number.
//
// A BackendOp is one node's oneDNN work, created once when a Program is
// lowered: the primitive; for a convolution, the reorders between our plain
// layouts (NCHW activations, [O, C/groups, KH, KW] weights) and the blocked
// layouts oneDNN runs fastest in; and the bytes of temporary memory all of
// them need (scratchpads and blocked copies), which the lowering plans in the
// arena like any value. A matrix product reads transposed operands, and
// operands whose batch dims are permuted (attention heads), through strides,
// never through a copy.
//
// Running a BackendOp creates nothing and allocates nothing of ours: it points
// oneDNN's memory objects at the kernel's buffers (once, while they stay put)
// and executes through the C API with argument arrays on the stack. oneDNN
// 2.6 itself builds a small map of the arguments inside every execute call;
// `in_backend_execute()` lets the allocation test tell those apart.
//
// The f32 reference kernels (the interpreter, eager tensors) run the same
// primitives, built per call (oneDNN caches them), so every mode computes a
// product identically and modes differ only where the pipeline does.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "ir/geometry.hpp"
#include "ir/graph.hpp"

namespace ws::exec {

class BackendOp {
 public:
  virtual ~BackendOp() = default;
  // Temporary bytes run() needs, 64-byte aligned.
  virtual int64_t scratch_bytes() const = 0;
  // The oneDNN implementation(s) chosen, e.g. "brg:avx512_core" or
  // "jit:avx512_core (reorders: src, dst)".
  virtual const std::string& impl() const = 0;
  // Floating-point operations per run.
  virtual int64_t flops() const = 0;
  // The layout conversions a run makes between our layouts and the ones
  // oneDNN's primitives picked: of weights (a convolution's weight, or its
  // gradient on the way out) and of other operands (images, matrices).
  struct Reorders {
    int64_t weights = 0, other = 0;
    Reorders& operator+=(const Reorders& r) {
      weights += r.weights;
      other += r.other;
      return *this;
    }
  };
  virtual Reorders reorders() const { return {}; }
  // out = op(a, b); `scratch` holds scratch_bytes() bytes, 64-byte aligned.
  // `extra` is matmul_add's alpha and `extra2` its beta (out = *beta * out +
  // *alpha * (a @ b): out holds the accumulator), or `extra` matmul_bias's
  // bias (out = (a @ b) + bias).
  virtual void run(const void* a, const void* b, void* out, void* scratch,
                   const void* extra = nullptr, const void* extra2 = nullptr) const = 0;
};

// True for what oneDNN computes: f32 matmul, matmul_add (the product
// scaled by a runtime alpha and added to its destination: a multiply and a
// sum post-op), matmul_bias (the product plus a bias per column), conv2d,
// conv2d_input_grad and conv2d_weight_grad.
bool is_backend_op(ir::Op op, DType dt);

// The node's BackendOp (is_backend_op must hold). A shape oneDNN can only
// serve with its reference implementation is reported on stderr once.
// `in_strides` (matmul only; empty: row-major) gives each operand's element
// strides over its shape, so a transposed view is read where it lies;
// `out_strides` likewise places the result.
std::shared_ptr<const BackendOp> make_backend_op(
    ir::Op op, const ir::Attrs& attrs, std::span<const ir::Type> in_types, const ir::Type& out_type,
    std::span<const std::vector<int64_t>> in_strides = {},
    const std::vector<int64_t>& out_strides = {});

// Whether the CPU runs oneDNN's AVX-512 convolution kernels (its jit
// kernels cover more layouts and groups there than with AVX2 alone).
bool avx512_convolutions();

// Whether convolution `op` of geometry g is better left NCHW than stored in
// g.layout: NCHW, it runs as kernels of our own (products over the
// unfolded input, the weight gradient in parts of the weight), which NHWC
// images serve too, where in blocks it would run oneDNN's primitive alone.
bool conv_keeps_nchw(ir::Op op, const ir::Conv2dGeom& g);

// Floating-point operations of a matmul or convolution node (any dtype):
// two per multiply-add.
int64_t backend_flops(ir::Op op, const ir::Attrs& attrs, std::span<const ir::Type> in_types,
                      const ir::Type& out_type);

// Builds and runs the node's BackendOp with scratch of its own: the eager
// path of the reference kernels.
void run_backend(ir::Op op, const ir::Attrs& attrs, std::span<const ir::Type> in_types,
                 const void* const* in, const ir::Type& out_type, void* out);

// "oneDNN 2.6.3, ISA avx512_core_bf16 (...)": the version and the instruction
// set its kernels dispatch to on this CPU.
std::string backend_isa();

// The channels a block of oneDNN's blocked images holds on this CPU: 16 with
// AVX-512 (its direct convolutions read nChw16c), else 8 (AVX2's read
// nChw8c and reorder nChw16c around every call).
int64_t native_channel_block();

// True while some thread is inside a oneDNN execute call.
bool in_backend_execute();

}  // namespace ws::exec
