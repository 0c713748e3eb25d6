// The weight gradient of a convolution in narrow groups (depthwise, or
// resnext's groups of 4 channels) over NHWC images, as a kernel of ours.
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
#include <string>

#include <fmt/format.h>

#include "exec/parallel.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {
namespace {

// Output channels a task's lanes hold.
constexpr int64_t kLanes = 16;
// Window taps times channels of a group a task's sums hold at most (a 7x7
// window in groups of 8).
constexpr int64_t kMaxSums = 7 * 8;

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
    const int64_t per_task = g_.n * g_.oh * g_.ow * kLanes * cpg_ * g_.kw;
    parallel_for(
        blocks * g_.kh, std::max<int64_t>(1, kCheapGrain / std::max<int64_t>(1, per_task)),
        [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t o0 = t / g_.kh * kLanes, ky = t % g_.kh;
            const int64_t width = std::min(kLanes, g_.o - o0);
            switch (cpg_ * 8 + (cpg_ == 1 && (g_.kw == 3 || g_.kw == 5) ? g_.kw : 0)) {
              case 1 * 8 + 3: task<1, 3>(x, dy, dw, o0, width, ky); break;
              case 1 * 8 + 5: task<1, 5>(x, dy, dw, o0, width, ky); break;
              case 1 * 8: task<1, 0>(x, dy, dw, o0, width, ky); break;
              case 2 * 8: task<2, 0>(x, dy, dw, o0, width, ky); break;
              case 4 * 8: task<4, 0>(x, dy, dw, o0, width, ky); break;
              default: task<8, 0>(x, dy, dw, o0, width, ky); break;
            }
          }
        },
        1);
  }

 private:
  // The sums of output channels [o0, o0 + width), width <= kLanes, at
  // window row ky: total[kx * G + i][l] is the weight of output channel o0 +
  // l, input channel i of its group, tap (ky, kx). KW: the window's width
  // where it is compiled in (depthwise 3 and 5: the taps of an output column
  // inside the row then unroll, 1.5-2x), else 0.
  template <int64_t G, int64_t KW>
  void task(const float* x, const float* dy, float* dw, int64_t o0, int64_t width,
            int64_t ky) const {
    constexpr int64_t N = kLanes;
    const int64_t kw = KW ? KW : g_.kw, sums = kw * G;
    alignas(64) float total[kMaxSums][N] = {}, row[kMaxSums][N];
    // Output columns whose taps all read inside the row.
    const int64_t lo = std::min(g_.ow, (g_.pw + g_.sw - 1) / g_.sw);
    const int64_t last = g_.w - 1 + g_.pw - (kw - 1) * g_.dw;
    const int64_t hi = last < 0 ? 0 : std::max(lo, std::min(g_.ow, last / g_.sw + 1));
    for (int64_t n = 0; n < g_.n; ++n)
      for (int64_t oy = 0; oy < g_.oh; ++oy) {
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
        if (KW && width == N) {
          for (int64_t ox = lo; ox < hi; ++ox) {
            const float* d = drow + ox * g_.o;
            const float* xp = xrow + (ox * g_.sw - g_.pw) * g_.c;
            for (int64_t kx = 0; kx < KW; ++kx)
              for (int64_t i = 0; i < G; ++i)
                for (int64_t l = 0; l < N; ++l)
                  row[kx * G + i][l] += d[l] * xp[kx * g_.dw * g_.c + l / G * G + i];
          }
        } else {
          for (int64_t ox = lo; ox < hi; ++ox) taps(ox);
        }
        for (int64_t ox = std::max(lo, hi); ox < g_.ow; ++ox) taps(ox);
        for (int64_t s = 0; s < sums; ++s)
          for (int64_t l = 0; l < N; ++l) total[s][l] += row[s][l];
      }
    // dw [o, G, kh, kw]
    for (int64_t l = 0; l < width; ++l)
      for (int64_t i = 0; i < G; ++i)
        for (int64_t kx = 0; kx < kw; ++kx)
          dw[(((o0 + l) * G + i) * g_.kh + ky) * kw + kx] = total[kx * G + i][l];
  }

  Conv2dGeom g_;
  int64_t cpg_ = 1;
  std::string impl_;
};

}  // namespace

bool narrow_group_weight_grad(const Conv2dGeom& g) {
  if (g.volume || g.groups < 2 || g.c != g.o || g.layout != ir::ImageLayout::nhwc) return false;
  const int64_t cpg = g.c / g.groups;
  return (cpg == 1 || cpg == 2 || cpg == 4 || cpg == 8) && kLanes % cpg == 0 &&
         g.kw * cpg <= kMaxSums;
}

std::shared_ptr<const BackendOp> make_narrow_group_weight_grad(const Conv2dGeom& g) {
  WS_CHECK(narrow_group_weight_grad(g))
      << "a weight gradient in narrow groups for a convolution of " << g.groups << " groups of "
      << g.c << " channels to " << g.o;
  return std::make_shared<NarrowGroupWeightGrad>(g);
}

}  // namespace ws::exec
