// Convolutions in narrow groups (depthwise, or resnext's groups of 4
// channels) over NHWC images, as kernels of ours: the weight gradient, and
// the forward and input gradient in groups of 2 and 4 (below).
//
// oneDNN 2.6 on CPUs without AVX-512 serves these with its gemm kernels over
// NCHW images (an unfolded input per group, a product of a few channels a
// group: a few GFLOP/s), which on the seeds' table were the slowest kernels
// of their steps: resnext50_32x4d's groups of 4 on 16x16 maps 16 ms a step
// at 1.7 GFLOP/s, mobilenet_v2's depthwise 3x3 over 960 channels on 2x2
// maps 11 ms (AMD EPYC Zen 3, 2 threads, DNNL_VERBOSE). Here each output
// channel's sums run along its own lane: a task takes a block of
// neighbouring output channels (whole groups) and one row of the window,
// and for every output position adds dy times the input channel its lane's
// group reads at each tap, vectorized across the block. Every weight's sum
// runs over the output positions in order, summed a row of them at a time
// and the rows' sums added in order, so the bits do not depend on the team
// and the error grows with a row's length plus the rows, not their product.
// Same run, alternating steps against oneDNN's kernels (AMD EPYC Zen 3, 2
// threads, the table's batch): mnasnet1_0's step 1.67x faster,
// mobilenet_v2's 1.14x, resnext50_32x4d's 1.03x; the kernel alone runs at
// 10-40 GFLOP/s on those shapes.
#include "exec/narrow_groups.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "exec/parallel.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {
namespace {

using ir::Op;

// Output channels a task's lanes hold.
constexpr int64_t kLanes = 16;
// Window taps times channels of a group a task's sums hold at most (a 7x7
// window in groups of 8).
constexpr int64_t kMaxSums = 7 * 8;
// Window taps a forward or input-gradient task packs weights for at most.
constexpr int64_t kMaxTaps = 7 * 7;

class NarrowGroupWeightGrad final : public BackendOp {
 public:
  explicit NarrowGroupWeightGrad(const Conv2dGeom& g) : g_(g) {
    cpg_ = g.c / g.groups;
    impl_ = fmt::format("narrow groups of {} ({} lanes)", cpg_, kLanes);
  }
  int64_t scratch_bytes() const override { return 0; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return 2 * g_.n * g_.oh * g_.ow * g_.o * cpg_ * g_.kh * g_.kw; }

  void run(const void* a, const void* b, void* out, void*, const void*,
           const void*) const override {
    const float* x = static_cast<const float*>(a);
    const float* dy = static_cast<const float*>(b);
    float* dw = static_cast<float*>(out);
    const int64_t blocks = (g_.o + kLanes - 1) / kLanes;
    // A task: a block of output channels and rows of the window, all of
    // them where their sums fit, the maps are large and the blocks alone
    // give every thread work, so each reads its channels of x and dy once
    // (a row of x then serves the window rows of consecutive output rows
    // from the cache) where a task per window row read them kh times. With
    // the interior's sums in registers (below) and a task's one window row
    // compiled as one, the kernel alone (AMD EPYC Zen 3, 2 threads, the
    // kernel before in the same run): mobilenet_v2's 3x3 depthwise weight
    // gradients over [8, 96, 32, 32] 1.38-1.49x faster, [8, 144, 32, 32] at
    // stride 2 1.19-1.25x, [8, 192, 8, 8] to [8, 960, 2, 2] 1.22-1.44x,
    // [8, 144, 16, 16] 0.99-1.01x; mnasnet1_0's 5x5 over [8, 120, 16, 16]
    // 1.12x, over 8x8 and 4x4 maps 0.94-0.98x.
    const int64_t rows =
        g_.oh * g_.ow >= 128 && g_.kh * g_.kw * cpg_ <= kMaxSums && blocks >= team() ? g_.kh : 1;
    const int64_t parts = g_.kh / rows;
    const int64_t per_task = g_.n * g_.oh * g_.ow * kLanes * cpg_ * g_.kw * rows;
    parallel_for(
        blocks * parts, std::max<int64_t>(1, kCheapGrain / std::max<int64_t>(1, per_task)),
        [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t o0 = t / parts * kLanes, ky0 = t % parts * rows;
            const int64_t width = std::min(kLanes, g_.o - o0);
            if (rows > 1)
              dispatch<true>(x, dy, dw, o0, width, ky0, ky0 + rows);
            else
              dispatch<false>(x, dy, dw, o0, width, ky0, ky0 + 1);
          }
        },
        1);
  }

 private:
  // The sums of output channels [o0, o0 + width), width <= kLanes, at
  // window rows [ky0, ky1): total[(ky - ky0) * kw * G + kx * G + i][l] is
  // the weight of output channel o0 + l, input channel i of its group, tap
  // (ky, kx). KW: the window's width where it is compiled in (depthwise 3
  // and 5: the taps of an output column inside the row then unroll,
  // 1.5-2x), else 0. Each weight's sum is the same whichever rows a task
  // takes: over output rows in order, each row's own sum added.
  template <bool All>
  void dispatch(const float* x, const float* dy, float* dw, int64_t o0, int64_t width, int64_t ky0,
                int64_t ky1) const {
    switch (cpg_ * 8 + (cpg_ == 1 && (g_.kw == 3 || g_.kw == 5) ? g_.kw : 0)) {
      case 1 * 8 + 3: return task<1, 3, All>(x, dy, dw, o0, width, ky0, ky1);
      case 1 * 8 + 5: return task<1, 5, All>(x, dy, dw, o0, width, ky0, ky1);
      case 1 * 8: return task<1, 0, All>(x, dy, dw, o0, width, ky0, ky1);
      case 2 * 8: return task<2, 0, All>(x, dy, dw, o0, width, ky0, ky1);
      case 4 * 8: return task<4, 0, All>(x, dy, dw, o0, width, ky0, ky1);
      default: return task<8, 0, All>(x, dy, dw, o0, width, ky0, ky1);
    }
  }

  // All: rows [ky0, ky1), else the one row ky0 (its loop compiled away: a
  // loop of unknown length around the row's cost small maps 5-10%).
  template <int64_t G, int64_t KW, bool All>
  void task(const float* x, const float* dy, float* dw, int64_t o0, int64_t width, int64_t ky0,
            int64_t ky_end) const {
    const int64_t ky1 = All ? ky_end : ky0 + 1;
    constexpr int64_t N = kLanes;
    const int64_t kw = KW ? KW : g_.kw, sums = kw * G;
    alignas(64) float total[kMaxSums][N] = {}, row[kMaxSums][N];
    // Output columns whose taps all read inside the row.
    const int64_t lo = std::min(g_.ow, (g_.pw + g_.sw - 1) / g_.sw);
    const int64_t last = g_.w - 1 + g_.pw - (kw - 1) * g_.dw;
    const int64_t hi = last < 0 ? 0 : std::max(lo, std::min(g_.ow, last / g_.sw + 1));
    for (int64_t n = 0; n < g_.n; ++n)
      for (int64_t oy = 0; oy < g_.oh; ++oy)
        for (int64_t ky = ky0; ky < ky1; ++ky) {
          const int64_t iy = oy * g_.sh - g_.ph + ky * g_.dh;
          if (iy < 0 || iy >= g_.h) continue;  // the row's taps all read padding
          for (int64_t s = 0; s < sums; ++s) std::fill_n(row[s], N, 0.0f);
          const float* xrow = x + (n * g_.h + iy) * g_.w * g_.c + o0;
          const float* drow = dy + (n * g_.oh + oy) * g_.ow * g_.o + o0;
          auto taps = [&](int64_t ox) {  // every tap, skipping those in the padding
            const float* d = drow + ox * g_.o;
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t ix = ox * g_.sw - g_.pw + kx * g_.dw;
              if (ix < 0 || ix >= g_.w) continue;
              const float* xp = xrow + ix * g_.c;
              for (int64_t i = 0; i < G; ++i) {
                float* r = row[kx * G + i];
                if (width == N) {  // a trip count the compiler sees: vectorized
                  for (int64_t l = 0; l < N; ++l) r[l] += d[l] * xp[l / G * G + i];
                } else {
                  for (int64_t l = 0; l < width; ++l) r[l] += d[l] * xp[l / G * G + i];
                }
              }
            }
          };
          for (int64_t ox = 0; ox < lo; ++ox) taps(ox);
          if (KW && width == N && hi - lo < 8) {
            for (int64_t ox = lo; ox < hi; ++ox) {
              const float* d = drow + ox * g_.o;
              const float* xp = xrow + (ox * g_.sw - g_.pw) * g_.c;
              for (int64_t kx = 0; kx < KW; ++kx)
                for (int64_t i = 0; i < G; ++i)
                  for (int64_t l = 0; l < N; ++l)
                    row[kx * G + i][l] += d[l] * xp[kx * g_.dw * g_.c + l / G * G + i];
            }
          } else if (KW && width == N) {
            // A longer interior's sums in a local array the compiler keeps
            // in registers across the columns (in the row buffer, each sum
            // waited for its own store a column before). The same loop as
            // the short interior's above, written out: one lambda for both
            // ran the 5x5 windows over small maps at 0.6x.
            float acc[KW * G][N];
            for (int64_t k = 0; k < KW * G; ++k)
              for (int64_t l = 0; l < N; ++l) acc[k][l] = row[k][l];
            for (int64_t ox = lo; ox < hi; ++ox) {
              const float* d = drow + ox * g_.o;
              const float* xp = xrow + (ox * g_.sw - g_.pw) * g_.c;
              for (int64_t kx = 0; kx < KW; ++kx)
                for (int64_t i = 0; i < G; ++i)
                  for (int64_t l = 0; l < N; ++l)
                    acc[kx * G + i][l] += d[l] * xp[kx * g_.dw * g_.c + l / G * G + i];
            }
            for (int64_t k = 0; k < KW * G; ++k)
              for (int64_t l = 0; l < N; ++l) row[k][l] = acc[k][l];
          } else {
            for (int64_t ox = lo; ox < hi; ++ox) taps(ox);
          }
          for (int64_t ox = std::max(lo, hi); ox < g_.ow; ++ox) taps(ox);
          for (int64_t s = 0; s < sums; ++s)
            for (int64_t l = 0; l < N; ++l) total[(ky - ky0) * sums + s][l] += row[s][l];
        }
    // dw [o, G, kh, kw]
    for (int64_t ky = ky0; ky < ky1; ++ky)
      for (int64_t l = 0; l < width; ++l)
        for (int64_t i = 0; i < G; ++i)
          for (int64_t kx = 0; kx < kw; ++kx)
            dw[(((o0 + l) * G + i) * g_.kh + ky) * kw + kx] =
                total[(ky - ky0) * sums + kx * G + i][l];
  }

  Conv2dGeom g_;
  int64_t cpg_ = 1;
  std::string impl_;
};

// A convolution (conv2d) or its input gradient (conv2d_input_grad) in
// groups of 2 or 4 channels, as a gather: each result channel's lane sums,
// for one result position, the taps that read the source image (x forward,
// dy for the input gradient) times its weights packed for the block, the
// taps in (ky, kx) order and a group's channels inner, from zero: every
// result element the same sum on any team. A group's channel reaches its
// lanes by a shuffle within 8 lanes; interior positions run 4 at a time,
// sharing the weights' loads. oneDNN 2.6 without AVX-512 runs the forward
// over NHWC as gemm over NCHW copies; ours ran 4-8x faster (31-68 GFLOP/s,
// resnext50's shapes at batch 8, AMD EPYC Zen 3, 2 threads), the input
// gradient at stride 1 1.4-2.2x faster than its jit:avx2 kernel (at stride
// 2, 0.5-0.8x: not taken); groups of 8, where oneDNN has a jit kernel,
// measured even, and depthwise 2-6x slower than its jit_dw: not taken.
// resnext50_32x4d's step 1.06x (same run, alternating).
using V8 = float __attribute__((vector_size(32)));
using I8 = int32_t __attribute__((vector_size(32)));

V8 load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Each lane's group's channel I, from 8 channels (whole groups of G).
template <int64_t G, int64_t I>
V8 pick(V8 v) {
  static_assert(8 % G == 0 && I < G);
  constexpr I8 m = {0 / G * G + I, 1 / G * G + I, 2 / G * G + I, 3 / G * G + I,
                    4 / G * G + I, 5 / G * G + I, 6 / G * G + I, 7 / G * G + I};
  return __builtin_shuffle(v, m);
}

class NarrowGroupConv final : public BackendOp {
 public:
  NarrowGroupConv(Op op, const Conv2dGeom& g) : g_(g), grad_(op == Op::conv2d_input_grad) {
    cpg_ = g.c / g.groups;
    impl_ = fmt::format("narrow groups of {} ({} lanes)", cpg_, kLanes);
    // the result's rows and columns, and the source's, by direction
    rh_ = grad_ ? g.h : g.oh, rw_ = grad_ ? g.w : g.ow;
    srch_ = grad_ ? g.oh : g.h, srcw_ = grad_ ? g.ow : g.w;
    // result columns whose taps all read inside the source's row
    if (!grad_) {
      lo_ = std::min(g.ow, (g.pw + g.sw - 1) / g.sw);
      const int64_t last = g.w - 1 + g.pw - (g.kw - 1) * g.dw;
      hi_ = last < 0 ? 0 : std::max(lo_, std::min(g.ow, last / g.sw + 1));
    } else {
      lo_ = std::min(g.w, std::max<int64_t>(0, (g.kw - 1) * g.dw - g.pw));
      hi_ = std::max(lo_, std::min(g.w, g.ow - g.pw));
    }
  }
  int64_t scratch_bytes() const override { return 0; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return 2 * g_.n * g_.oh * g_.ow * g_.o * cpg_ * g_.kh * g_.kw; }

  void run(const void* a, const void* b, void* out, void*, const void*,
           const void*) const override {
    const float* src = static_cast<const float*>(a);
    const float* w = static_cast<const float*>(b);
    float* y = static_cast<float*>(out);
    const int64_t blocks = (g_.c + kLanes - 1) / kLanes;
    const int64_t per_task = rw_ * kLanes * cpg_ * g_.kh * g_.kw;
    parallel_for(
        blocks * g_.n * rh_, std::max<int64_t>(1, kCheapGrain / std::max<int64_t>(1, per_task)),
        [&](int64_t t0, int64_t t1) {
          if (cpg_ == 2)
            tasks<2>(src, w, y, t0, t1);
          else
            tasks<4>(src, w, y, t0, t1);
        },
        1);
  }

 private:
  // Source position of result position r at tap k along one dim (stride
  // st, padding p, dilation d, source size n), or -1 where the tap reads
  // padding (for the input gradient, at stride 1: no output position).
  int64_t source(int64_t r, int64_t k, int64_t st, int64_t p, int64_t d, int64_t n) const {
    if (!grad_) {
      const int64_t s = r * st - p + k * d;
      return s >= 0 && s < n ? s : -1;
    }
    const int64_t t = r + p - k * d;  // stride 1 (narrow_group_conv)
    return t >= 0 && t < n ? t : -1;
  }

  // Tasks [t0, t1): (block of kLanes result channels, image, result row),
  // the block outermost; each block's weights packed once a range.
  template <int64_t G>
  void tasks(const float* src, const float* w, float* y, int64_t t0, int64_t t1) const {
    constexpr int64_t N = kLanes;
    const int64_t taps = g_.kh * g_.kw, c = g_.c;
    alignas(64) float packed[kMaxTaps * 4][N];
    int64_t packed_block = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t block = t / (g_.n * rh_), n = t / rh_ % g_.n, ry = t % rh_;
      const int64_t c0 = block * N, width = std::min(N, c - c0);
      if (block != packed_block) {
        // packed[tap * G + i][l]: the weight lane l's sum takes for its
        // group's channel i at that tap
        for (int64_t tap = 0; tap < taps; ++tap)
          for (int64_t i = 0; i < G; ++i)
            for (int64_t l = 0; l < N; ++l) {
              const int64_t ch = c0 + l;
              float v = 0.0f;
              if (l < width)
                v = grad_ ? w[((ch / G * G + i) * G + ch % G) * taps + tap]
                          : w[(ch * G + i) * taps + tap];
              packed[tap * G + i][l] = v;
            }
        packed_block = block;
      }
      // the source rows each window row reads (nullptr: padding)
      const float* rows[kMaxTaps];
      for (int64_t ky = 0; ky < g_.kh; ++ky) {
        const int64_t sy = source(ry, ky, g_.sh, g_.ph, g_.dh, srch_);
        rows[ky] = sy < 0 ? nullptr : src + ((n * srch_ + sy) * srcw_) * c + c0;
      }
      float* yrow = y + ((n * rh_ + ry) * rw_) * c + c0;
      if (width == N)
        row<G, true>(packed, rows, yrow, width);
      else
        row<G, false>(packed, rows, yrow, width);
    }
  }

  // acc[q] += the tap's weights `p` times its source channels at s[q]: for
  // each of the group's channels i in order, a product and a sum a lane.
  template <int64_t G, int64_t Q>
  static void accumulate(V8 (&acc)[Q][2], const float (*p)[kLanes], const float* const (&s)[Q]) {
    V8 sv[Q][2];
    for (int64_t q = 0; q < Q; ++q) {
      sv[q][0] = load8(s[q]);
      sv[q][1] = load8(s[q] + 8);
    }
    [&]<int64_t... I>(std::integer_sequence<int64_t, I...>) {
      (
          [&] {
            const V8 p0 = load8(p[I]), p1 = load8(p[I] + 8);
            for (int64_t q = 0; q < Q; ++q) {
              acc[q][0] += p0 * pick<G, I>(sv[q][0]);
              acc[q][1] += p1 * pick<G, I>(sv[q][1]);
            }
          }(),
          ...);
    }
    (std::make_integer_sequence<int64_t, G>{});
  }

  // One result row of a block: lanes [0, width) of each position.
  template <int64_t G, bool Full>
  void row(const float (*packed)[kLanes], const float* const* rows, float* yrow,
           int64_t width) const {
    constexpr int64_t N = kLanes, Q = 4;
    const int64_t c = g_.c, kw = g_.kw;
    // a position whose taps may read padding: each tap checked
    auto checked = [&](int64_t rx) {
      if constexpr (Full) {
        V8 acc[1][2] = {};
        for (int64_t ky = 0; ky < g_.kh; ++ky) {
          if (!rows[ky]) continue;
          for (int64_t kx = 0; kx < kw; ++kx) {
            const int64_t sx = source(rx, kx, g_.sw, g_.pw, g_.dw, srcw_);
            if (sx < 0) continue;
            const float* const at[1] = {rows[ky] + sx * c};
            accumulate<G, 1>(acc, packed + (ky * kw + kx) * G, at);
          }
        }
        std::memcpy(yrow + rx * c, acc[0], sizeof acc[0]);
      } else {
        float acc[N] = {};
        for (int64_t ky = 0; ky < g_.kh; ++ky) {
          if (!rows[ky]) continue;
          for (int64_t kx = 0; kx < kw; ++kx) {
            const int64_t sx = source(rx, kx, g_.sw, g_.pw, g_.dw, srcw_);
            if (sx < 0) continue;
            const float* s = rows[ky] + sx * c;
            const float(*p)[N] = packed + (ky * kw + kx) * G;
            for (int64_t i = 0; i < G; ++i)
              for (int64_t l = 0; l < width; ++l) acc[l] += p[i][l] * s[l / G * G + i];
          }
        }
        std::copy_n(acc, width, yrow + rx * c);
      }
    };
    // the source column of tap 0 and the step a tap moves it, in the
    // interior [lo_, hi_)
    const int64_t at = grad_ ? 1 : g_.sw, off = grad_ ? g_.pw : -g_.pw;
    const int64_t step = (grad_ ? -g_.dw : g_.dw) * c;
    int64_t rx = 0;
    for (; rx < lo_; ++rx) checked(rx);
    if constexpr (Full) {
      for (; rx + Q <= hi_; rx += Q) {
        V8 acc[Q][2] = {};
        for (int64_t ky = 0; ky < g_.kh; ++ky) {
          if (!rows[ky]) continue;
          const float* s0 = rows[ky] + (rx * at + off) * c;
          for (int64_t kx = 0; kx < kw; ++kx) {
            const float* s = s0 + kx * step;
            const float* const from[Q] = {s, s + at * c, s + 2 * at * c, s + 3 * at * c};
            accumulate<G, Q>(acc, packed + (ky * kw + kx) * G, from);
          }
        }
        for (int64_t q = 0; q < Q; ++q) std::memcpy(yrow + (rx + q) * c, acc[q], sizeof acc[q]);
      }
    }
    for (; rx < rw_; ++rx) checked(rx);
  }

  Conv2dGeom g_;
  bool grad_;
  int64_t cpg_ = 1, rh_ = 0, rw_ = 0, srch_ = 0, srcw_ = 0, lo_ = 0, hi_ = 0;
  std::string impl_;
};

}  // namespace

bool narrow_group_weight_grad(const Conv2dGeom& g) {
  if (g.volume || g.groups < 2 || g.c != g.o || g.layout != ir::ImageLayout::nhwc) return false;
  const int64_t cpg = g.c / g.groups;
  return (cpg == 1 || cpg == 2 || cpg == 4 || cpg == 8) && kLanes % cpg == 0 &&
         g.kw * cpg <= kMaxSums;
}

bool narrow_group_conv(Op op, const Conv2dGeom& g) {
  if (op != Op::conv2d && op != Op::conv2d_input_grad) return false;
  if (g.volume || g.groups < 2 || g.c != g.o || g.layout != ir::ImageLayout::nhwc) return false;
  const int64_t cpg = g.c / g.groups;
  return (cpg == 2 || cpg == 4) && g.kh <= 7 && g.kw <= 7 &&
         (op == Op::conv2d || (g.sh == 1 && g.sw == 1));
}

std::shared_ptr<const BackendOp> make_narrow_group_conv(Op op, const Conv2dGeom& g) {
  WS_CHECK(narrow_group_conv(op, g)) << ir::op_name(op) << " in narrow groups for a convolution of "
                                     << g.groups << " groups of " << g.c << " channels to " << g.o;
  return std::make_shared<NarrowGroupConv>(op, g);
}

std::shared_ptr<const BackendOp> make_narrow_group_weight_grad(const Conv2dGeom& g) {
  WS_CHECK(narrow_group_weight_grad(g))
      << "a weight gradient in narrow groups for a convolution of " << g.groups << " groups of "
      << g.c << " channels to " << g.o;
  return std::make_shared<NarrowGroupWeightGrad>(g);
}

}  // namespace ws::exec
