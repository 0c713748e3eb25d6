// One oneDNN primitive as a BackendOp (dnnl_backend.hpp): the primitive,
// the reorders between our plain layouts and the ones it chose, and the
// scratch they all share, run on our buffers without creating anything.
// Internal to the backend: dnnl_backend.cpp builds the primitives.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <mutex>
#include <string>
#include <vector>

#include "exec/dnnl_backend.hpp"
#include "ir/geometry.hpp"

namespace ws::exec {

// Bytes rounded up to a cache line: where each part of a kernel's scratch starts.
inline int64_t align64(int64_t b) { return (b + 63) / 64 * 64; }

// The CPU engine every primitive is made for.
dnnl::engine& dnnl_engine();

// While one lives, oneDNN's primitive cache is off (the capacity it had
// comes back when it dies; one at a time). Every primitive of ours is made
// under one: with the cache, a step's rounding depended on what the process
// had run before (two differential-test cases in one process: the second's
// compiled step, given primitives the first's steps and eager ops had made,
// landed 10x further from float64 than the same case in a fresh process, or
// in the same sequence with the cache off), where a step must give the same
// bits however it is reached. A step makes each primitive once when it is
// compiled (resnet50's first step 1.44 s with the cache, 1.65 s without);
// the eager path keeps its own (dnnl_backend.cpp: eager_backend_op).
class UncachedPrimitives {
 public:
  UncachedPrimitives();
  ~UncachedPrimitives();

 private:
  std::lock_guard<std::mutex> lock_;  // (not copyable, as the lock)
  int saved_ = 0;
};

// A primitive made from `pd` outside oneDNN's cache (UncachedPrimitives).
template <class Primitive, class PD>
Primitive uncached(const PD& pd) {
  UncachedPrimitives off;
  return Primitive(pd);
}

// Primitive attributes with the scratchpad ours (in the kernel's scratch).
dnnl::primitive_attr user_scratchpad();

class DnnlOp final : public BackendOp {
 public:
  int64_t scratch_bytes() const override { return scratch_bytes_; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return flops_; }
  Reorders reorders() const override { return reorders_made_; }

  void run(const void* a, const void* b, void* out, void* scratch, const void* extra,
           const void*) const override;

  // Creates the operand for `arg`: `want` is what the primitive chose,
  // `user` our plain layout. `which` says which pointer of run() it is: 0:
  // a, 1: b, 2: out, 3: extra (a bias, or matmul_add's alpha).
  void add_operand(int arg, int which, const dnnl::memory::desc& user,
                   const dnnl::memory::desc& want);

  template <class Primitive, class PD>
  void set_main(const PD& pd, int64_t flops) {
    main_.prim = uncached<Primitive>(pd);
    main_.scratchpad = scratchpad(pd.scratchpad_desc());
    if (main_.scratchpad)
      main_.scratchpad_offset = reserve(int64_t(pd.scratchpad_desc().get_size()));
    flops_ = flops;
    impl_ = pd.impl_info_str();
  }

  // Call after every operand and the main primitive are set.
  void finish(const std::string& what);
  // Bytes of the buffer run() reads or writes as pointer `which` (0: a, 1:
  // b, 2: out, 3: extra): its user layout's size.
  int64_t operand_bytes(int which) const;
  // True for a primitive whose sums would depend on the team it runs on
  // (oneDNN's gemm:jit reads the OpenMP thread count when it runs, not when
  // it is made): such an op runs on the calling thread alone.
  bool on_one_thread() const { return one_thread_; }
  // Runs on the team it finds even where its sums then depend on it: the
  // floor's (floor.hpp), which times and trains nothing.
  void sum_by_team();

 private:
  // One operand of the main primitive. `user` describes our buffer; `inner`
  // the layout the primitive reads or writes. When they differ, a reorder
  // moves the data through a blocked copy in the scratch at `offset`.
  struct Operand {
    int arg = 0;  // DNNL_ARG_*
    int which = 0;
    dnnl::memory user, inner;
    dnnl::primitive reorder;  // empty when user and inner layouts agree
    int64_t offset = -1;
    int step = -1;                        // its reorder's index in reorders_
    mutable const void* bound = nullptr;  // the pointer `user` was last set to
  };

  // A primitive with a scratchpad of its own in the scratch.
  struct Step {
    dnnl::primitive prim;
    dnnl::memory scratchpad;
    int64_t scratchpad_offset = -1;
  };

  // A oneDNN reference implementation is correct but slow: say so once per
  // shape rather than run it silently.
  void warn_reference(const std::string& what) const;
  int64_t reserve(int64_t bytes);
  static dnnl::memory scratchpad(const dnnl::memory::desc& d);
  void bind_scratch(std::byte* base) const;
  void reorder(const Operand& o, bool in) const;

  Step main_;
  std::vector<Step> reorders_;  // in the order of the reordered operands
  std::vector<Operand> operands_;
  std::vector<dnnl_exec_arg_t> main_args_;
  int64_t scratch_bytes_ = 0, flops_ = 0;
  std::string impl_, reordered_;
  Reorders reorders_made_;
  bool one_thread_ = false;
  mutable std::byte* scratch_bound_ = nullptr;
};

// Floating-point operations of a convolution: two per multiply-add.
int64_t conv_flops(const ir::Conv2dGeom& g);

// conv2d_weight_grad writing the weight gradient in the layout its
// primitive picks (`blocked`, no reorder; `plain` is ours), for parts of a
// batch summed there before one reorder (dnnl_teams.cpp).
struct BlockedWeightGrad {
  std::shared_ptr<const BackendOp> op;
  dnnl::memory::desc blocked, plain;
};
BlockedWeightGrad make_weight_grad_blocked(const ir::Conv2dGeom& g);

// conv2d_weight_grad of a convolution over a slice of its images'
// channels: x and dy are slices of images of x_channels and y_channels
// channels (at the slice's first channel); the gradient in our layout.
std::shared_ptr<const BackendOp> make_weight_grad_of_slice(const ir::Conv2dGeom& g,
                                                           int64_t x_channels, int64_t y_channels);

// The floor's ops (floor.hpp): a convolution reading and writing every
// operand in the layout its primitive picks (its images in g's layout
// instead, with `stored_images`, when a jit kernel reads that), no
// reorder; a matrix product as one primitive over row-major operands
// (transposed ones read through strides) on the whole team, not in parts.
std::shared_ptr<const DnnlOp> make_native_conv(ir::Op op, const ir::Conv2dGeom& g,
                                               bool stored_images);
std::shared_ptr<const DnnlOp> make_whole_matmul(std::span<const ir::Type> in, const ir::Type& out,
                                                const ir::Attrs& attrs);

// A reorder between two layouts of one tensor, as a BackendOp: `a` is read
// in layout `from`, `out` written in layout `to`.
std::shared_ptr<const BackendOp> make_reorder(const dnnl::memory::desc& from,
                                              const dnnl::memory::desc& to,
                                              const std::string& what);

}  // namespace ws::exec
