// Convolutions on small maps (the last stages of torchvision's regnets,
// resnets and resnexts at 64x64 inputs, batch 4), each direction two ways,
// the weight gradient three: oneDNN's convolution (its weight gradient over
// fixed parts of the batch, and over fixed parts of the weight) and products
// over the unfolded input (conv_products.cpp), alternating way by way in
// one run; the median of many runs on the pool's threads. Each
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

#include <fmt/format.h>

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

// Milliseconds of one run of each way, medians, alternating way by way.
std::vector<double> compare(Op op, const Conv2dGeom& g, bool verbose) {
  using namespace ws::exec;
  std::vector<std::shared_ptr<const BackendOp>> ways;
  if (op == Op::conv2d_weight_grad) {
    ways = {make_weight_grad_in_parts(g), make_weight_grad_in_weight_parts(g)};
  } else {
    ways = {make_conv(op, g)};
  }
  ways.push_back(make_conv_products(op, g));
  int64_t scratch = 0;
  for (const auto& k : ways) {
    scratch = std::max(scratch, k->scratch_bytes());
    if (verbose) std::printf("  %s\n", k->impl().c_str());
  }
  const int64_t w = g.weight_numel(), x = g.n * g.in_image(), y = g.n * g.out_image();
  const int64_t copies = std::max<int64_t>(2, kWeightBytes / (w * 4));
  std::vector<float> weights(size_t(copies * w + 16), 0.5f), xs(size_t(x + 16), 0.25f),
      ys(size_t(y + 16), 0.125f);
  std::vector<float> scratch_v(size_t(scratch / 4 + 16));
  std::vector<std::vector<double>> t(ways.size());
  int64_t next = 0;
  for (int r = 0; r < kRuns + kWarm; ++r)
    for (size_t which = 0; which < ways.size(); ++which) {
      float* wc = aligned(weights) + next++ % copies * w;
      const BackendOp& k = *ways[which];
      const double t0 = now_ms();
      if (op == Op::conv2d) k.run(aligned(xs), wc, aligned(ys), aligned(scratch_v));
      if (op == Op::conv2d_input_grad) k.run(aligned(ys), wc, aligned(xs), aligned(scratch_v));
      if (op == Op::conv2d_weight_grad) k.run(aligned(xs), aligned(ys), wc, aligned(scratch_v));
      if (r >= kWarm) t[which].push_back(now_ms() - t0);
    }
  std::vector<double> ms;
  for (auto& v : t) ms.push_back(median(v));
  return ms;
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
      {4, 256, 16, 256, 3, 2, "regnet_x_16gf block1 3x3 (16x16)"},
      {4, 64, 16, 64, 3, 1, "resnet18 layer1 3x3 (16x16)"},
      {4, 32, 32, 32, 3, 1, "a 3x3 on 32x32 maps"},
      {4, 64, 8, 64, 3, 4, "regnet_x_400mf block2 (8x8, groups of 16)"},
      {4, 32, 32, 32, 3, 32, "depthwise 3x3 on 32x32 maps"},
      {4, 96, 16, 96, 3, 96, "depthwise 3x3 on 16x16 maps"},
      {4, 384, 8, 384, 3, 384, "depthwise 3x3 on 8x8 maps"},
      {4, 960, 4, 960, 5, 960, "depthwise 5x5 on 4x4 maps"},
      {4, 144, 16, 144, 3, 144, "mobilenet_v2 depthwise 16x16"},
      {4, 192, 8, 192, 3, 192, "mobilenet_v2 depthwise 8x8"},
      {4, 384, 4, 384, 3, 384, "mobilenet_v2 depthwise 4x4"},
      {4, 576, 4, 576, 3, 576, "mobilenet_v2 depthwise 4x4 (576)"},
      {4, 960, 2, 960, 3, 960, "mobilenet_v2 depthwise 2x2"},
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
  std::printf("%-44s %-6s %9s %9s %9s\n", "padding k/2, stride 1", "", "oneDNN", "w parts",
              "products");
  const char* only = argc > 2 ? argv[2] : nullptr;
  for (const Case& k : cases) {
    if (only && !std::strstr(k.what, only)) continue;
    Conv2dGeom g{.n = k.n, .c = k.c, .h = k.hw, .w = k.hw, .o = k.o, .kh = k.k, .kw = k.k};
    g.ph = g.pw = k.k / 2, g.oh = g.ow = k.hw, g.groups = k.groups;
    for (Op op : {Op::conv2d, Op::conv2d_input_grad, Op::conv2d_weight_grad}) {
      const std::vector<double> ms = compare(op, g, only != nullptr);
      std::printf("%-44s %-6s %9.3f %9s %9.3f\n", k.what,
                  op == Op::conv2d              ? "fwd"
                  : op == Op::conv2d_input_grad ? "dx"
                                                : "dw",
                  ms[0], ms.size() > 2 ? fmt::format("{:.3f}", ms[1]).c_str() : "-", ms.back());
    }
  }
}
