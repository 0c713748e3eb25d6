// Backend ops whose bits do not depend on the team.
//
// oneDNN makes a primitive for the team OpenMP would give when it is made,
// and the primitive keeps that team whatever OpenMP is told later. Two
// things follow. A step that runs on one thread under load (team_chooser.hpp)
// needs primitives made for one thread: TeamOrSoloOp holds both and runs the
// one team() asks for. And a primitive that splits a sum across its threads
// rounds differently for each team: of the backend ops the convolution
// weight gradient does, so it runs as fixed parts of the weight, each a
// one-thread primitive over the whole batch (WeightPartsOp), or sums fixed
// parts of the batch itself (BatchPartsOp), and so does a product with a
// transposed A and a long K, run as fixed parts of its output
// (MatrixPartsOp). oneDNN's
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

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "exec/dnnl_op.hpp"
#include "exec/parallel.hpp"

namespace ws::exec {
namespace {

// conv2d_weight_grad as a sum over parts of the batch fixed by the shape:
// kWeightGradParts parts (fewer for a small batch), each a primitive made
// for one thread, run in parallel over the parts and added in part order.
// On the cnn's two threads it runs as fast as oneDNN's own split, on one
// thread 3% slower (docs/performance.md, "A loaded machine"). The parts
// write their sums in the primitive's own (blocked) layout, where they are
// added, and one reorder brings the total to ours: a reorder a part moved
// the whole weight once a part (regnet_x_16gf at batch 4: 19 ms of
// oneDNN's thread time in a step, 2.6 ms since). Reorders copy, so the bits
// are those of adding plain parts.

class BatchPartsOp final : public BackendOp {
 public:
  explicit BatchPartsOp(const Conv2dGeom& g) {
    const int64_t parts = std::min(g.n, kWeightGradParts);
    x_image_ = g.in_image();
    dy_image_ = g.out_image();
    std::vector<BlockedWeightGrad> made;
    {
      TeamScope one(1);  // each part runs on one thread
      for (int64_t i = 0; i < parts; ++i) {
        Conv2dGeom gi = g;
        first_.push_back(g.n * i / parts);
        gi.n = g.n * (i + 1) / parts - first_.back();
        made.push_back(make_weight_grad_blocked(gi));
      }
      // Parts of one layout sum in it; else each reorders its own sum.
      const bool one_layout = std::all_of(
          made.begin(), made.end(), [&](const auto& m) { return m.blocked == made[0].blocked; });
      for (size_t i = 0; i < made.size() && !one_layout; ++i) {
        Conv2dGeom gi = g;
        gi.n = (i + 1 < made.size() ? first_[i + 1] : g.n) - first_[i];
        made[i].op = make_conv(ir::Op::conv2d_weight_grad, gi);
        made[i].blocked = made[i].plain;
      }
    }
    const dnnl::memory::desc &blocked = made[0].blocked, &plain = made[0].plain;
    const bool reordered = !(blocked == plain);
    sum_numel_ = int64_t(blocked.get_size()) / 4;
    for (int64_t i = 0; i < parts; ++i) {
      Part p{std::move(made[size_t(i)].op), scratch_bytes_, -1};
      scratch_bytes_ += align64(p.op->scratch_bytes());
      if (i > 0 || reordered)
        p.sum_offset = scratch_bytes_, scratch_bytes_ += align64(sum_numel_ * 4);
      flops_ += p.op->flops();
      parts_.push_back(std::move(p));
    }
    impl_ = fmt::format("{} batch parts, each {}", parts, parts_[0].op->impl());
    for (const Part& p : parts_) reorders_ += p.op->reorders();
    if (reordered) {
      reorders_.weights += 1;  // the sum's, to ours
      reorder_ = make_reorder(blocked, plain, "a weight gradient's reorder");
      reorder_offset_ = scratch_bytes_;
      scratch_bytes_ += align64(reorder_->scratch_bytes());
      impl_ += ", summed so, then " + reorder_->impl();
    }
  }
  int64_t scratch_bytes() const override { return scratch_bytes_; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return flops_; }
  Reorders reorders() const override { return reorders_; }

  void run(const void* a, const void* b, void* out, void* scratch, const void*,
           const void*) const override {
    const auto* x = static_cast<const float*>(a);
    const auto* dy = static_cast<const float*>(b);
    auto* base = static_cast<std::byte*>(scratch);
    auto sum = [&](size_t i) {
      return parts_[i].sum_offset < 0 ? static_cast<float*>(out)
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
    parallel_for(sum_numel_, kCheapGrain / int64_t(parts_.size()), [&](int64_t lo, int64_t hi) {
      for (size_t i = 1; i < parts_.size(); ++i) {
        const float* s = sum(i);
        for (int64_t j = lo; j < hi; ++j) dw[j] += s[j];
      }
    });
    if (reorder_) reorder_->run(dw, nullptr, out, base + reorder_offset_);
  }

 private:
  struct Part {
    std::shared_ptr<const BackendOp> op;
    int64_t scratch_offset = 0;
    int64_t sum_offset = -1;  // where its partial sum goes (the first: `out`)
  };
  std::vector<Part> parts_;
  std::vector<int64_t> first_;  // each part's first image
  int64_t x_image_ = 0, dy_image_ = 0, sum_numel_ = 0, scratch_bytes_ = 0, flops_ = 0;
  // From the parts' layout to ours, when they differ (the sums in the scratch).
  std::shared_ptr<const BackendOp> reorder_;
  int64_t reorder_offset_ = 0;
  std::string impl_;
  Reorders reorders_;
};

// conv2d_weight_grad as kWeightGradParts fixed parts of the weight, each
// over the whole batch: whole groups, or ranges of output channels (of a
// group, in blocks of 16). Each part is a primitive made for one thread
// reading its slices of x and dy and writing its part of the gradient: every
// element is one primitive's sum, nothing is added after. A part of a
// convolution without groups reads (and reorders) the whole x.
class WeightPartsOp final : public BackendOp {
 public:
  explicit WeightPartsOp(const Conv2dGeom& g) {
    const int64_t parts = kWeightGradParts;
    const int64_t cg = g.c / g.groups, og = g.o / g.groups;
    const int64_t kk = g.weight_numel() / g.o / cg;  // taps
    // Where channel c starts in an image: c planes on, or c elements on in
    // NHWC (a slice of channels is strided there: dnnl_conv.cpp).
    const bool last = g.layout == ir::ImageLayout::nhwc;
    const int64_t xp = last ? 1 : g.in_image() / g.c, yp = last ? 1 : g.out_image() / g.o;
    TeamScope one(1);
    auto add = [&](Conv2dGeom gi, int64_t c0, int64_t o0) {
      Part p{make_weight_grad_of_slice(gi, g.c, g.o), c0 * xp, o0 * yp, o0 * cg * kk,
             scratch_bytes_};
      scratch_bytes_ += align64(p.op->scratch_bytes());
      flops_ += p.op->flops();
      parts_.push_back(std::move(p));
    };
    if (g.groups >= parts) {  // whole groups
      for (int64_t i = 0; i < parts; ++i) {
        const int64_t g0 = g.groups * i / parts, g1 = g.groups * (i + 1) / parts;
        Conv2dGeom gi = g;
        gi.groups = g1 - g0, gi.c = gi.groups * cg, gi.o = gi.groups * og;
        add(gi, g0 * cg, g0 * og);
      }
    } else {  // ranges of each group's output channels, in blocks of 16
      const int64_t per = (parts + g.groups - 1) / g.groups, blocks = (og + 15) / 16;
      for (int64_t gr = 0; gr < g.groups; ++gr)
        for (int64_t i = 0; i < per; ++i) {
          const int64_t o0 = std::min(og, blocks * i / per * 16),
                        o1 = std::min(og, blocks * (i + 1) / per * 16);
          if (o1 <= o0) continue;
          Conv2dGeom gi = g;
          gi.groups = 1, gi.c = cg, gi.o = o1 - o0;
          add(gi, gr * cg, gr * og + o0);
        }
    }
    impl_ = fmt::format("{} weight parts, each {}", parts_.size(), parts_[0].op->impl());
    for (const Part& p : parts_) reorders_ += p.op->reorders();
  }
  int64_t scratch_bytes() const override { return scratch_bytes_; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return flops_; }
  Reorders reorders() const override { return reorders_; }
  void run(const void* a, const void* b, void* out, void* scratch, const void*,
           const void*) const override {
    auto* base = static_cast<std::byte*>(scratch);
    parallel_for(
        int64_t(parts_.size()), 1,
        [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) {
            const Part& p = parts_[size_t(i)];
            p.op->run(static_cast<const float*>(a) + p.x, static_cast<const float*>(b) + p.dy,
                      static_cast<float*>(out) + p.dw, base + p.scratch_offset);
          }
        },
        1);
  }

 private:
  struct Part {
    std::shared_ptr<const BackendOp> op;
    int64_t x = 0, dy = 0, dw = 0;  // element offsets of its slices
    int64_t scratch_offset = 0;
  };
  std::vector<Part> parts_;
  int64_t scratch_bytes_ = 0, flops_ = 0;
  std::string impl_;
  Reorders reorders_;
};

#if defined(__AVX__)
constexpr int64_t kLongRowsApart = 1024;  // floats: 4 KiB, a page

// y[c * sy + r] = x[r * sx + c] for r, c < 8: an 8x8 block transposed in
// registers.
void transpose8x8(const float* x, int64_t sx, float* y, int64_t sy) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + i * sx);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(y + i * sy, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(y + (i + 4) * sy, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
#endif

// y[m * k + j] = x[j * sk + m * sm] for m < rows, j < k: a [k, rows] matrix
// at strides (sk, sm) transposed into a dense [rows, k] one. Rows of x
// (sm = 1) in blocks of 16 (a cache line of each row of x), or of up to 256
// where they lie a page or more apart, 8x8 blocks through registers where
// the target has AVX; the rest in tiles that stay in L1 on both sides. A
// copy: the same bits either way.
void transpose_tiles(const float* x, int64_t k, int64_t rows, int64_t sk, int64_t sm, float* y) {
  int64_t done = 0;  // rows of y written
#if defined(__AVX__)
  if (sm == 1 && sk >= kLongRowsApart && rows >= 8) {
    // Rows of x far apart (a page or more): blocks of up to kBlockRows rows
    // of y by 16 of its columns through a tile in L1, each row of x read
    // kBlockRows floats at a time and each line of y written whole. bert's
    // [1024 x 8192]^T (its vocabulary's weight gradient), in four parts on
    // two threads of an AMD EPYC Zen 3: 8.7 ms against 15.1 in rows of 16
    // alone, its product 1.05-1.09x faster in the step (same run,
    // alternating); A's rows 1024 floats apart [1024 x 256]^T parts 1.07x
    // alone.
    constexpr int64_t kBlockRows = 256, kBlockCols = 16;
    alignas(64) float tile[kBlockRows * kBlockCols];
    const int64_t rows8 = rows / 8 * 8, cols16 = k / kBlockCols * kBlockCols;
    for (int64_t m0 = 0; m0 < rows8; m0 += kBlockRows) {
      const int64_t bm = std::min(kBlockRows, rows8 - m0);
      for (int64_t j0 = 0; j0 < cols16; j0 += kBlockCols) {
        for (int64_t j = 0; j < kBlockCols; j += 8)
          for (int64_t m = 0; m < bm; m += 8)
            transpose8x8(x + (j0 + j) * sk + m0 + m, sk, tile + m * kBlockCols + j, kBlockCols);
        for (int64_t m = 0; m < bm; ++m)
          std::memcpy(y + (m0 + m) * k + j0, tile + m * kBlockCols, size_t(kBlockCols) * 4);
      }
      for (int64_t m = m0; m < m0 + bm; ++m)
        for (int64_t j = cols16; j < k; ++j) y[m * k + j] = x[j * sk + m];
    }
    done = rows8;
  }
  if (sm == 1)
    for (; done + 16 <= rows; done += 16) {
      const int64_t m0 = done;
      int64_t j = 0;
      for (; j + 8 <= k; j += 8) {
        transpose8x8(x + j * sk + m0, sk, y + m0 * k + j, k);
        transpose8x8(x + j * sk + m0 + 8, sk, y + (m0 + 8) * k + j, k);
      }
      for (; j < k; ++j)
        for (int64_t m = m0; m < m0 + 16; ++m) y[m * k + j] = x[j * sk + m];
    }
#endif
  constexpr int64_t kTile = 16;
  for (int64_t j0 = 0; j0 < k; j0 += kTile)
    for (int64_t m0 = done; m0 < rows; m0 += kTile) {
      const int64_t j1 = std::min(j0 + kTile, k), m1 = std::min(m0 + kTile, rows);
      for (int64_t m = m0; m < m1; ++m)
        for (int64_t j = j0; j < j1; ++j) y[m * k + j] = x[j * sk + m * sm];
    }
}

// Parts of a product run in parallel (make_matrix_parts), each with its own
// scratch. A part's dense copy of A (a part of a row of a transposed A is
// not dense, and oneDNN would take its slow kernels) and a staged copy of B
// (made first, on the pool, read by every part) are copies only: the same
// bits on any team.
class MatrixPartsOp final : public BackendOp {
 public:
  MatrixPartsOp(std::vector<MatrixPart> parts, StagedB staged_b)
      : parts_(std::move(parts)), staged_b_(staged_b) {
    scratch_bytes_ = align64(staged_b_.rows * staged_b_.padded * 4);
    for (const MatrixPart& p : parts_) {
      dense_offsets_.push_back(scratch_bytes_);
      scratch_bytes_ += align64(p.dense_rows * p.k * 4);
      scratch_offsets_.push_back(scratch_bytes_);
      scratch_bytes_ += align64(p.op->scratch_bytes());
      flops_ += p.op->flops();
    }
    impl_ = fmt::format(
        "{} parts, each {}{}{}", parts_.size(), parts_[0].op->impl(),
        parts_[0].transpose_a ? ", A transposed into the scratch" : "",
        staged_b_.rows ? fmt::format(", B copied at row stride {} first", staged_b_.padded) : "");
    for (const MatrixPart& p : parts_) reorders_ += p.op->reorders();
  }
  int64_t scratch_bytes() const override { return scratch_bytes_; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return flops_; }
  Reorders reorders() const override { return reorders_; }
  void run(const void* a, const void* b, void* out, void* scratch, const void* extra,
           const void* extra2) const override {
    auto* base = static_cast<std::byte*>(scratch);
    if (staged_b_.rows > 0) {
      const auto* from = static_cast<const float*>(b);
      auto* to = reinterpret_cast<float*>(base);
      parallel_for(staged_b_.rows, std::max<int64_t>(1, kCheapGrain / staged_b_.cols),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t r = lo; r < hi; ++r)
                       std::memcpy(to + r * staged_b_.padded, from + r * staged_b_.stride,
                                   size_t(staged_b_.cols) * 4);
                   });
      b = to;
    }
    parallel_for(
        int64_t(parts_.size()), 1,
        [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) {
            const MatrixPart& p = parts_[size_t(i)];
            const float* x = static_cast<const float*>(a) + p.a;
            if (p.dense_rows > 0) {
              auto* dense = reinterpret_cast<float*>(base + dense_offsets_[size_t(i)]);
              if (p.transpose_a)
                transpose_tiles(x, p.k, p.dense_rows, p.sk, p.sm, dense);
              else
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
  StagedB staged_b_;                                      // at the start of the scratch
  std::vector<int64_t> dense_offsets_, scratch_offsets_;  // each part's copy of A and scratch
  int64_t scratch_bytes_ = 0, flops_ = 0;
  std::string impl_;
  Reorders reorders_;
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
  Reorders reorders() const override { return whole_->reorders(); }
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

std::shared_ptr<const BackendOp> make_weight_grad_in_weight_parts(const Conv2dGeom& g) {
  return std::make_shared<WeightPartsOp>(g);
}

std::shared_ptr<const BackendOp> make_matrix_parts(std::vector<MatrixPart> parts,
                                                   StagedB staged_b) {
  return std::make_shared<MatrixPartsOp>(std::move(parts), staged_b);
}

std::shared_ptr<const BackendOp> make_team_or_solo(std::shared_ptr<const BackendOp> whole,
                                                   std::shared_ptr<const BackendOp> solo) {
  return std::make_shared<TeamOrSoloOp>(std::move(whole), std::move(solo));
}

}  // namespace ws::exec
