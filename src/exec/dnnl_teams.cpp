// Backend ops whose bits do not depend on the team.
//
// oneDNN makes a primitive for the team OpenMP would give when it is made,
// and the primitive keeps that team whatever OpenMP is told later. Two
// things follow. A step that runs on one thread under load (team_chooser.hpp)
// needs primitives made for one thread: TeamOrSoloOp holds both and runs the
// one team() asks for. And a primitive that splits a sum across its threads
// rounds differently for each team: of the backend ops the convolution
// weight gradient does, so it sums fixed parts of the batch itself
// (BatchPartsOp), and so does a product with a transposed A and a long K,
// run as fixed parts of its output (MatrixPartsOp). oneDNN's
// gemm:jit kernels (its products on CPUs without AVX-512, some
// convolutions) read the team when they run, not when they are made, and
// split their sums by it: DnnlOp runs them on one thread, and a product
// runs as fixed parts of its output on the pool (MatrixPartsOp). The other
// products and convolutions compute each output whole on one thread. With
// these, a step gives the same bits on any team.
#include "exec/dnnl_teams.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "exec/dnnl_op.hpp"
#include "exec/parallel.hpp"

namespace ws::exec {
namespace {

// conv2d_weight_grad as a sum over parts of the batch fixed by the shape:
// kWeightGradParts parts (fewer for a small batch), each a primitive made
// for one thread, run in parallel over the parts and added in part order.
// On the cnn's two threads it runs as fast as oneDNN's own split, on one
// thread 3% slower (docs/performance.md, "A loaded machine").
constexpr int64_t kWeightGradParts = 4;

class BatchPartsOp final : public BackendOp {
 public:
  explicit BatchPartsOp(const Conv2dGeom& g) {
    const int64_t parts = std::min(g.n, kWeightGradParts);
    x_image_ = g.in_image();
    dy_image_ = g.out_image();
    dw_numel_ = g.weight_numel();
    TeamScope one(1);  // each part runs on one thread
    for (int64_t i = 0; i < parts; ++i) {
      Conv2dGeom gi = g;
      first_.push_back(g.n * i / parts);
      gi.n = g.n * (i + 1) / parts - first_.back();
      Part p{make_conv(ir::Op::conv2d_weight_grad, gi), scratch_bytes_, -1};
      scratch_bytes_ += align64(p.op->scratch_bytes());
      if (i > 0) p.sum_offset = scratch_bytes_, scratch_bytes_ += align64(dw_numel_ * 4);
      flops_ += p.op->flops();
      parts_.push_back(std::move(p));
    }
    impl_ = fmt::format("{} batch parts, each {}", parts, parts_[0].op->impl());
  }
  int64_t scratch_bytes() const override { return scratch_bytes_; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return flops_; }

  void run(const void* a, const void* b, void* out, void* scratch, const void*,
           const void*) const override {
    const auto* x = static_cast<const float*>(a);
    const auto* dy = static_cast<const float*>(b);
    auto* base = static_cast<std::byte*>(scratch);
    auto sum = [&](size_t i) {
      return i == 0 ? static_cast<float*>(out)
                    : reinterpret_cast<float*>(base + parts_[i].sum_offset);
    };
    parallel_for(
        int64_t(parts_.size()), 1,
        [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) {
            const Part& p = parts_[size_t(i)];
            p.op->run(x + first_[size_t(i)] * x_image_, dy + first_[size_t(i)] * dy_image_,
                      sum(size_t(i)), base + p.scratch_offset);
          }
        },
        1);
    float* dw = sum(0);
    parallel_for(dw_numel_, kCheapGrain / int64_t(parts_.size()), [&](int64_t lo, int64_t hi) {
      for (size_t i = 1; i < parts_.size(); ++i) {
        const float* s = sum(i);
        for (int64_t j = lo; j < hi; ++j) dw[j] += s[j];
      }
    });
  }

 private:
  struct Part {
    std::shared_ptr<const BackendOp> op;
    int64_t scratch_offset = 0;
    int64_t sum_offset = -1;  // where its partial sum goes (the first: `out`)
  };
  std::vector<Part> parts_;
  std::vector<int64_t> first_;  // each part's first image
  int64_t x_image_ = 0, dy_image_ = 0, dw_numel_ = 0, scratch_bytes_ = 0, flops_ = 0;
  std::string impl_;
};

// conv2d_weight_grad as matrix products, one a group: dw[O/G, C/G*KH*KW] of
// group g = dy^T[its O/G rows, N*S] @ cols[N*S, its C/G*KH*KW columns]
// (S = OH*OW, cols the unfolded input, zeros where a tap reads padding), for
// small maps: there oneDNN's convolution spends its time reordering the
// weights and the batch parts add whole weight copies. Each group's rows of
// dw are split into fixed parts (at least kWeightGradParts parts in all),
// each a one-thread product, so every element is one primitive's sum over
// N*S whatever the team: the same bits on any team.
class ColsWeightGradOp final : public BackendOp {
 public:
  explicit ColsWeightGradOp(const Conv2dGeom& g) : g_(g) {
    const int64_t ns = g.n * g.oh * g.ow, ckk = g.c * g.kh * g.kw;
    const int64_t og = g.o / g.groups, gk = ckk / g.groups;  // a group's rows and columns
    const int64_t per_group =
        std::min(og, (kWeightGradParts + g.groups - 1) / g.groups);  // row parts of a group
    dyt_offset_ = 0;
    cols_offset_ = align64(g.o * ns * 4);
    scratch_bytes_ = cols_offset_ + align64(ns * ckk * 4);
    TeamScope one(1);
    using dims = dnnl::memory::dims;
    using dt = dnnl::memory::data_type;
    // An op a part (a DnnlOp binds its pointers: parts run at once).
    auto product = [&](int64_t rows) -> std::shared_ptr<const BackendOp> {
      const dnnl::memory::desc a(dims{rows, ns}, dt::f32, dims{ns, 1}),
          b(dims{ns, gk}, dt::f32, dims{ckk, 1}), c(dims{rows, gk}, dt::f32, dims{gk, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), user_scratchpad(),
                                      dnnl_engine());
      auto op = std::make_shared<DnnlOp>();
      op->add_operand(DNNL_ARG_SRC, 0, a, pd.src_desc());
      op->add_operand(DNNL_ARG_WEIGHTS, 1, b, pd.weights_desc());
      op->add_operand(DNNL_ARG_DST, 2, c, pd.dst_desc());
      op->set_main<dnnl::matmul>(pd, 2 * rows * ns * gk);
      op->finish(fmt::format("conv2d_weight_grad matmul [{}x{}x{}]", rows, ns, gk));
      return op;
    };
    for (int64_t group = 0; group < g.groups; ++group)
      for (int64_t i = 0; i < per_group; ++i) {
        const int64_t o0 = group * og + og * i / per_group,
                      rows = group * og + og * (i + 1) / per_group - o0;
        parts_.push_back({product(rows), scratch_bytes_, o0, group * gk});
        flops_ += parts_.back().op->flops();
        scratch_bytes_ += align64(parts_.back().op->scratch_bytes());
      }
    impl_ = fmt::format("im2col + {} row parts{}, each {}", parts_.size(),
                        g.groups > 1 ? fmt::format(" of {} groups", g.groups) : "",
                        parts_[0].op->impl());
  }
  int64_t scratch_bytes() const override { return scratch_bytes_; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return flops_; }

  void run(const void* a, const void* b, void* out, void* scratch, const void*,
           const void*) const override {
    const Conv2dGeom& g = g_;
    const auto* x = static_cast<const float*>(a);
    const auto* dy = static_cast<const float*>(b);
    auto* base = static_cast<std::byte*>(scratch);
    auto* dyt = reinterpret_cast<float*>(base + dyt_offset_);
    auto* cols = reinterpret_cast<float*>(base + cols_offset_);
    const int64_t s = g.oh * g.ow, ns = g.n * s, ckk = g.c * g.kh * g.kw, gk = ckk / g.groups;
    // dyt[o, n*S + p] = dy[n, o, p]; cols[n*S + p, (c*KH + ky)*KW + kx] = x at
    // the tap, or 0 in the padding. Copies only: any split gives the same bits.
    parallel_for(
        g.o, grain_for(ns),
        [&](int64_t lo, int64_t hi) {
          for (int64_t o = lo; o < hi; ++o)
            for (int64_t n = 0; n < g.n; ++n)
              std::memcpy(dyt + o * ns + n * s, dy + (n * g.o + o) * s, size_t(s) * 4);
        },
        1);
    parallel_for(
        ns, grain_for(ckk),
        [&](int64_t lo, int64_t hi) {
          for (int64_t r = lo; r < hi; ++r) {
            const int64_t n = r / s, oy = r % s / g.ow, ox = r % g.ow;
            float* row = cols + r * ckk;
            for (int64_t c = 0; c < g.c; ++c)
              for (int64_t ky = 0; ky < g.kh; ++ky) {
                const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
                const float* xr = x + ((n * g.c + c) * g.h + iy) * g.w;
                for (int64_t kx = 0; kx < g.kw; ++kx) {
                  const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
                  *row++ = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? xr[ix] : 0.0f;
                }
              }
          }
        },
        1);
    parallel_for(
        int64_t(parts_.size()), 1,
        [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) {
            const Part& p = parts_[size_t(i)];
            p.op->run(dyt + p.o0 * ns, cols + p.col0, static_cast<float*>(out) + p.o0 * gk,
                      base + p.scratch_offset);
          }
        },
        1);
  }

 private:
  struct Part {
    std::shared_ptr<const BackendOp> op;
    int64_t scratch_offset = 0;
    int64_t o0 = 0;    // its first row of dw
    int64_t col0 = 0;  // its group's first column of cols
  };
  Conv2dGeom g_;
  std::vector<Part> parts_;
  int64_t dyt_offset_ = 0, cols_offset_ = 0, scratch_bytes_ = 0, flops_ = 0;
  std::string impl_;
};

// Parts of a product run in parallel (make_matrix_parts), each with its own
// scratch. A part's dense copy of A (a part of a row of a transposed A is
// not dense, and oneDNN would take its slow kernels) is copies only: the
// same bits on any team.
class MatrixPartsOp final : public BackendOp {
 public:
  explicit MatrixPartsOp(std::vector<MatrixPart> parts) : parts_(std::move(parts)) {
    for (const MatrixPart& p : parts_) {
      dense_offsets_.push_back(scratch_bytes_);
      scratch_bytes_ += align64(p.dense_rows * p.k * 4);
      scratch_offsets_.push_back(scratch_bytes_);
      scratch_bytes_ += align64(p.op->scratch_bytes());
      flops_ += p.op->flops();
    }
    impl_ = fmt::format("{} parts, each {}", parts_.size(), parts_[0].op->impl());
  }
  int64_t scratch_bytes() const override { return scratch_bytes_; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return flops_; }
  void run(const void* a, const void* b, void* out, void* scratch, const void* extra,
           const void* extra2) const override {
    auto* base = static_cast<std::byte*>(scratch);
    parallel_for(
        int64_t(parts_.size()), 1,
        [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) {
            const MatrixPart& p = parts_[size_t(i)];
            const float* x = static_cast<const float*>(a) + p.a;
            if (p.dense_rows > 0) {
              auto* dense = reinterpret_cast<float*>(base + dense_offsets_[size_t(i)]);
              for (int64_t k = 0; k < p.k; ++k)
                if (p.sm == 1)
                  std::memcpy(dense + k * p.dense_rows, x + k * p.sk, size_t(p.dense_rows) * 4);
                else
                  for (int64_t m = 0; m < p.dense_rows; ++m)
                    dense[k * p.dense_rows + m] = x[k * p.sk + m * p.sm];
              x = dense;
            }
            const void* part_extra =
                extra && p.bias ? static_cast<const float*>(extra) + p.bias : extra;
            p.op->run(x, static_cast<const float*>(b) + p.b, static_cast<float*>(out) + p.out,
                      base + scratch_offsets_[size_t(i)], part_extra, extra2);
          }
        },
        1);
  }

 private:
  std::vector<MatrixPart> parts_;
  std::vector<int64_t> dense_offsets_, scratch_offsets_;  // each part's copy of A and scratch
  int64_t scratch_bytes_ = 0, flops_ = 0;
  std::string impl_;
};

// A backend op made for the whole pool and for one thread, running the one
// team() asks for.
class TeamOrSoloOp final : public BackendOp {
 public:
  TeamOrSoloOp(std::shared_ptr<const BackendOp> whole, std::shared_ptr<const BackendOp> solo)
      : whole_(std::move(whole)), solo_(std::move(solo)) {}
  int64_t scratch_bytes() const override {
    return std::max(whole_->scratch_bytes(), solo_->scratch_bytes());
  }
  const std::string& impl() const override { return whole_->impl(); }
  int64_t flops() const override { return whole_->flops(); }
  void run(const void* a, const void* b, void* out, void* scratch, const void* extra,
           const void* extra2) const override {
    (team() == 1 ? solo_ : whole_)->run(a, b, out, scratch, extra, extra2);
  }

 private:
  std::shared_ptr<const BackendOp> whole_, solo_;
};

}  // namespace

std::shared_ptr<const BackendOp> make_weight_grad_in_parts(const Conv2dGeom& g) {
  return std::make_shared<BatchPartsOp>(g);
}

std::shared_ptr<const BackendOp> make_weight_grad_cols(const Conv2dGeom& g) {
  return std::make_shared<ColsWeightGradOp>(g);
}

std::shared_ptr<const BackendOp> make_matrix_parts(std::vector<MatrixPart> parts) {
  return std::make_shared<MatrixPartsOp>(std::move(parts));
}

std::shared_ptr<const BackendOp> make_team_or_solo(std::shared_ptr<const BackendOp> whole,
                                                   std::shared_ptr<const BackendOp> solo) {
  return std::make_shared<TeamOrSoloOp>(std::move(whole), std::move(solo));
}

}  // namespace ws::exec
