// Convolutions on small maps (the last stages of torchvision's regnets,
// resnets and resnexts at 64x64 inputs, batch 4), each direction two ways:
// oneDNN's convolution (its weight gradient over fixed batch parts) and
// products over the unfolded input (conv_products.cpp), alternating shape
// by shape in one run; the median of many runs on the pool's threads. Each
// run reads another copy of the weight (and, for the weight gradient,
// writes another), at least 256 MB of them in turn, so that the weights
// come from memory as in a step, not from a cache:
//   build/benchmarks/conv_small_maps [threads [case]]
// (a case: the cases whose description contains it, each way's kernel named).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "exec/dnnl_teams.hpp"
#include "exec/threads.hpp"
#include "timing.hpp"

namespace {

using ws::bench::median;
using ws::bench::now_ms;
using ws::exec::Conv2dGeom;
using ws::ir::Op;

struct Case {
  int64_t n, c, hw, o, k, groups;
  const char* what;
};

constexpr int64_t kWeightBytes = int64_t(256) << 20;
constexpr int kRuns = 30, kWarm = 3;

float* aligned(std::vector<float>& v) {
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) / 64 * 64);
}

// Milliseconds of one run of each way, medians.
std::pair<double, double> compare(Op op, const Conv2dGeom& g, bool verbose) {
  using namespace ws::exec;
  const auto dnnl = op == Op::conv2d_weight_grad ? make_weight_grad_in_parts(g) : make_conv(op, g);
  const auto products = make_conv_products(op, g);
  if (verbose)
    std::printf("  oneDNN: %s\n  products: %s\n", dnnl->impl().c_str(), products->impl().c_str());
  const int64_t w = g.weight_numel(), x = g.n * g.in_image(), y = g.n * g.out_image();
  const int64_t copies = std::max<int64_t>(2, kWeightBytes / (w * 4));
  std::vector<float> weights(size_t(copies * w + 16), 0.5f), xs(size_t(x + 16), 0.25f),
      ys(size_t(y + 16), 0.125f);
  std::vector<float> scratch(
      size_t(std::max(dnnl->scratch_bytes(), products->scratch_bytes()) / 4 + 16));
  std::vector<double> t[2];
  for (int r = 0; r < kRuns + kWarm; ++r)
    for (int which = 0; which < 2; ++which) {
      float* wc = aligned(weights) + (2 * r + which) % copies * w;
      const BackendOp& k = which ? *products : *dnnl;
      const double t0 = now_ms();
      if (op == Op::conv2d) k.run(aligned(xs), wc, aligned(ys), aligned(scratch));
      if (op == Op::conv2d_input_grad) k.run(aligned(ys), wc, aligned(xs), aligned(scratch));
      if (op == Op::conv2d_weight_grad) k.run(aligned(xs), aligned(ys), wc, aligned(scratch));
      if (r >= kWarm) t[which].push_back(now_ms() - t0);
    }
  return {median(t[0]), median(t[1])};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ws::exec;
  if (argc > 1) set_num_threads(std::atoi(argv[1]));
  pin_team();
  const Case cases[] = {
      {4, 432, 4, 432, 3, 9, "regnet_x_3_2gf block3 3x3 (groups of 48)"},
      {4, 1008, 2, 1008, 3, 21, "regnet_x_3_2gf block4 3x3"},
      {4, 432, 4, 432, 1, 1, "regnet_x_3_2gf block3 1x1"},
      {4, 1008, 2, 1008, 1, 1, "regnet_x_3_2gf block4 1x1"},
      {4, 896, 4, 896, 3, 7, "regnet_x_16gf block3 3x3 (128)"},
      {4, 2048, 2, 2048, 3, 16, "regnet_x_16gf block4 3x3"},
      {4, 896, 4, 896, 1, 1, "regnet_x_16gf block3 1x1"},
      {4, 2048, 2, 2048, 1, 1, "regnet_x_16gf block4 1x1"},
      {4, 512, 8, 512, 1, 1, "regnet_x_16gf block2 1x1 (8x8)"},
      {4, 512, 8, 512, 3, 4, "regnet_x_16gf block2 3x3 (8x8)"},
      {4, 256, 16, 256, 1, 1, "regnet_x_16gf block1 1x1 (16x16)"},
      {4, 160, 4, 160, 3, 10, "regnet_x_400mf block3 (groups of 16)"},
      {4, 512, 2, 512, 3, 1, "resnet18 layer4 3x3"},
      {4, 256, 4, 256, 3, 1, "resnet18 layer3 3x3"},
      {4, 128, 8, 128, 3, 1, "resnet18 layer2 3x3 (8x8)"},
      {4, 512, 2, 2048, 1, 1, "resnet50 layer4 1x1 expand"},
      {4, 2048, 2, 512, 1, 1, "resnet50 layer4 1x1 reduce"},
      {8, 512, 2, 512, 3, 1, "resnet18 layer4 3x3, batch 8"},
      {16, 512, 2, 512, 3, 1, "resnet18 layer4 3x3, batch 16"},
      {8, 2048, 2, 2048, 1, 1, "regnet_x_16gf block4 1x1, batch 8"},
      {16, 2048, 2, 2048, 1, 1, "regnet_x_16gf block4 1x1, batch 16"},
      {8, 2048, 2, 512, 1, 1, "resnet50 layer4 1x1 reduce, batch 8"},
      {4, 1024, 2, 1024, 3, 32, "resnext50_32x4d layer4 (32)"},
      {4, 512, 4, 512, 3, 32, "resnext50_32x4d layer3 (16)"},
  };
  std::printf("%d threads; ms per convolution, median of %d runs (weights from memory)\n", team(),
              kRuns);
  std::printf("%-44s %-6s %9s %9s %7s\n", "padding k/2, stride 1", "", "oneDNN", "products",
              "ratio");
  const char* only = argc > 2 ? argv[2] : nullptr;
  for (const Case& k : cases) {
    if (only && !std::strstr(k.what, only)) continue;
    Conv2dGeom g{.n = k.n, .c = k.c, .h = k.hw, .w = k.hw, .o = k.o, .kh = k.k, .kw = k.k};
    g.ph = g.pw = k.k / 2, g.oh = g.ow = k.hw, g.groups = k.groups;
    for (Op op : {Op::conv2d, Op::conv2d_input_grad, Op::conv2d_weight_grad}) {
      const auto [a, b] = compare(op, g, only != nullptr);
      std::printf("%-44s %-6s %9.3f %9.3f %6.2fx\n", k.what,
                  op == Op::conv2d              ? "fwd"
                  : op == Op::conv2d_input_grad ? "dx"
                                                : "dw",
                  a, b, a / b);
    }
  }
}
