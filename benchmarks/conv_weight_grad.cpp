// Weight gradients of convolutions on small maps (the last stages of
// torchvision's regnets and resnexts at 64x64 inputs, batch 4) two ways:
// oneDNN's convolution over fixed batch parts, and im2col with one product a
// group (dnnl_teams.cpp), alternating shape by shape in one run; the median
// of many runs on the pool's threads:
//   build/benchmarks/conv_weight_grad [threads]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "exec/dnnl_teams.hpp"
#include "exec/threads.hpp"
#include "timing.hpp"

namespace {

using ws::bench::median;
using ws::bench::now_ms;

struct Case {
  int64_t n, c, hw, groups;
  const char* what;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace ws::exec;
  if (argc > 1) set_num_threads(std::atoi(argv[1]));
  pin_team();
  const Case cases[] = {
      {4, 432, 4, 9, "regnet_x_3_2gf block3 (group width 48)"},
      {4, 1008, 2, 21, "regnet_x_3_2gf block4"},
      {4, 720, 4, 6, "regnet_x_8gf block3 (120)"},
      {4, 1920, 2, 16, "regnet_x_8gf block4"},
      {4, 896, 4, 7, "regnet_x_16gf block3 (128)"},
      {4, 2048, 2, 16, "regnet_x_16gf block4"},
      {4, 1344, 4, 8, "regnet_x_32gf block3 (168)"},
      {4, 160, 4, 10, "regnet_x_400mf block3 (16)"},
      {4, 400, 2, 25, "regnet_x_400mf block4"},
      {4, 440, 4, 55, "regnet_y_400mf block3 (8)"},
      {4, 512, 4, 32, "resnext50_32x4d layer3 (16)"},
      {4, 768, 4, 32, "groups of 24 at 4x4"},
      {4, 1024, 4, 32, "groups of 32 at 4x4"},
      {4, 768, 2, 32, "groups of 24 at 2x2"},
      {4, 1024, 2, 32, "resnext50_32x4d layer4 (32)"},
  };
  std::printf("%d threads; ms per weight gradient, median of 40 runs\n", team());
  std::printf("%-42s %10s %10s %8s\n", "3x3, padding 1", "batch parts", "products", "ratio");
  for (const Case& k : cases) {
    ws::ir::Conv2dGeom g{.n = k.n, .c = k.c, .h = k.hw, .w = k.hw, .o = k.c, .kh = 3, .kw = 3};
    g.ph = g.pw = 1, g.oh = g.ow = k.hw, g.groups = k.groups;
    const auto parts = make_weight_grad_in_parts(g), cols = make_weight_grad_cols(g);
    std::vector<float> x(size_t(g.n * g.in_image()), 0.5f), dy(size_t(g.n * g.out_image()), 0.25f),
        dw(size_t(g.weight_numel()));
    std::vector<std::byte> scratch(
        size_t(std::max(parts->scratch_bytes(), cols->scratch_bytes()) + 64));
    auto* s =
        reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
    std::vector<double> a, b;
    for (int r = 0; r < 43; ++r)
      for (int which = 0; which < 2; ++which) {
        const double t0 = now_ms();
        (which ? cols : parts)->run(x.data(), dy.data(), dw.data(), s);
        if (r >= 3) (which ? b : a).push_back(now_ms() - t0);
      }
    std::printf("%-42s %10.3f %10.3f %7.2fx\n", k.what, median(a), median(b),
                median(a) / median(b));
  }
}
