// Adam, AdamW and gradient clipping in the compiled step against PyTorch's
// update formulas written out by hand in double.
#include <cmath>

#include <gtest/gtest.h>

#include "test_util.hpp"
#include "wholestep/step.hpp"

namespace ws {
namespace {

using testing::error_of;

// loss = sum(c * w): the gradient of w is c, known exactly.
struct Linear1 : nn::Module {
  Tensor w =
      register_parameter("w", Tensor::from_vector(std::vector<float>{0.5f, -1.0f, 2.0f}, {3}));
};

const std::vector<std::vector<double>> kGrads = {
    {0.1, -0.2, 0.3}, {-0.4, 0.5, 0.05}, {1.0, 2.0, -3.0}};

// PyTorch's Adam step for one element, in double.
struct AdamRef {
  double lr, b1, b2, eps, wd;
  bool decoupled, amsgrad;
  double m = 0, v = 0, vmax = 0;
  int t = 0;
  double step(double p, double g) {
    ++t;
    if (decoupled)
      p *= 1 - lr * wd;
    else
      g += wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    vmax = std::max(vmax, v);
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    const double denom = std::sqrt(amsgrad ? vmax : v) / std::sqrt(bc2) + eps;
    return p - lr / bc1 * m / denom;
  }
};

void expect_matches_reference(optim::AdamOptions o, bool decoupled, StepMode mode) {
  Linear1 model;
  optim::Adam opt(model, o, decoupled);
  TrainStep step = compile_train_step(
      model, opt, [&](const Tensor& x) { return sum(mul(x, model.w), {0}); }, {.mode = mode});
  std::vector<double> p = {0.5, -1.0, 2.0};
  std::vector<AdamRef> ref(
      3, AdamRef{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, decoupled, o.amsgrad});
  for (const auto& g : kGrads) {
    std::vector<float> gf(g.begin(), g.end());
    step(Tensor::from_vector(gf, {3}));
    double scale = 1;
    if (o.max_grad_norm > 0) {
      const double norm = std::sqrt(g[0] * g[0] + g[1] * g[1] + g[2] * g[2]);
      scale = std::min(1.0, o.max_grad_norm / (norm + 1e-6));
    }
    for (size_t i = 0; i < 3; ++i) p[i] = ref[i].step(p[i], g[i] * scale);
    std::vector<double> got = model.w.to_vector();
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], p[i], 2e-6 * (1 + std::abs(p[i]))) << i;
  }
  EXPECT_EQ(opt.state().back().second.item(), 3.0);  // the step count is state
}

TEST(Adam, MatchesPyTorchFormulaInEveryMode) {
  for (StepMode mode : {StepMode::interpret, StepMode::three_graph, StepMode::single_graph}) {
    SCOPED_TRACE(mode_name(mode));
    expect_matches_reference({.lr = 0.1}, false, mode);
    expect_matches_reference({.lr = 0.1, .weight_decay = 0.1}, false, mode);
    expect_matches_reference({.lr = 0.1, .beta1 = 0.8, .beta2 = 0.9, .amsgrad = true}, false, mode);
  }
}

TEST(AdamW, DecouplesWeightDecay) {
  for (StepMode mode : {StepMode::interpret, StepMode::single_graph})
    expect_matches_reference({.lr = 0.1, .weight_decay = 0.5}, true, mode);
}

TEST(GradientClipping, ScalesByGlobalNormWhenAboveTheLimit) {
  // The third gradient has norm ~3.7, above 1; the first two are below.
  for (StepMode mode : {StepMode::interpret, StepMode::three_graph, StepMode::single_graph})
    expect_matches_reference({.lr = 0.1, .max_grad_norm = 1.0}, false, mode);
}

TEST(GradientClipping, AppliesToSgdToo) {
  Linear1 model;
  optim::SGD opt(model, {.lr = 1.0, .max_grad_norm = 0.5});
  TrainStep step =
      compile_train_step(model, opt, [&](const Tensor& x) { return sum(mul(x, model.w), {0}); });
  step(Tensor::from_vector(std::vector<float>{3, 0, 4}, {3}));  // norm 5 -> scaled by 0.1
  std::vector<double> w = model.w.to_vector();
  EXPECT_NEAR(w[0], 0.5 - 0.3, 1e-6);
  EXPECT_NEAR(w[1], -1.0, 1e-6);
  EXPECT_NEAR(w[2], 2.0 - 0.4, 1e-6);
}

// StepResult::grad_norm is the norm before clipping (what
// torch.nn.utils.clip_grad_norm_ returns), in every mode; none without
// clipping.
TEST(GradientClipping, TheStepReportsTheNormItClippedBy) {
  for (StepMode mode : {StepMode::interpret, StepMode::three_graph, StepMode::single_graph}) {
    SCOPED_TRACE(mode_name(mode));
    Linear1 model;
    optim::SGD opt(model, {.lr = 1.0, .max_grad_norm = 0.5});
    TrainStep step = compile_train_step(
        model, opt, [&](const Tensor& x) { return sum(mul(x, model.w), {0}); }, {.mode = mode});
    const StepResult r = step(Tensor::from_vector(std::vector<float>{3, 0, 4}, {3}));
    ASSERT_TRUE(r.grad_norm.has_value());
    EXPECT_NEAR(*r.grad_norm, 5.0, 1e-6);
    EXPECT_FALSE(r.skipped);
  }
  Linear1 model;
  optim::SGD opt(model, {.lr = 1.0});
  TrainStep step =
      compile_train_step(model, opt, [&](const Tensor& x) { return sum(mul(x, model.w), {0}); });
  EXPECT_FALSE(step(Tensor::from_vector(std::vector<float>{3, 0, 4}, {3})).grad_norm.has_value());
}

// A NaN norm makes the clipping coefficient NaN, so every gradient, finite
// ones too, as torch's clamp(max_norm / (norm + 1e-6), max=1) does.
TEST(GradientClipping, ANanNormMakesEveryGradientNan) {
  Linear1 model;
  optim::SGD opt(model, {.lr = 1.0, .max_grad_norm = 0.5});
  TrainStep step =
      compile_train_step(model, opt, [&](const Tensor& x) { return sum(mul(x, model.w), {0}); },
                         {.on_nonfinite = NonFinite::ignore});
  const StepResult r = step(Tensor::from_vector(std::vector<float>{3, NAN, 4}, {3}));
  EXPECT_TRUE(std::isnan(*r.grad_norm));
  for (double w : model.w.to_vector()) EXPECT_TRUE(std::isnan(w));
}

TEST(AdamErrors, BadOptionsAreNamed) {
  Linear1 model;
  EXPECT_EQ(error_of([&] { optim::Adam(model, {.beta1 = 1.0}); }),
            "Adam: betas (1, 0.999) must be in [0, 1)");
  EXPECT_EQ(error_of([&] { optim::AdamW(model, {.eps = -1}); }),
            "AdamW: eps -1 and weight_decay 0 must be finite numbers >= 0");
  optim::Adam adam(model, {});
  EXPECT_NE(error_of([&] { adam.set_weight_decay(0.1); }).find("cannot change between zero"),
            std::string::npos);
}

}  // namespace
}  // namespace ws
