// The gradients of composite layers round as an eager framework's one-op
// backward does: a normalization's gradient to its input is one value (its
// opposite terms cancel before it meets the input's other gradients), and
// no gradient flows through a softmax's shift. Each case is a step whose
// exact gradient is known, compared bit for bit or element by element with
// float64.
#include <cmath>

#include <gtest/gtest.h>

#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

// One parameter p, a loss of it, and the gradient the step computed.
struct OneParam : nn::Module {
  Tensor p;
  explicit OneParam(Tensor init) { p = register_parameter("p", std::move(init)); }
};

std::vector<double> gradient_of(OneParam& m, const std::function<Tensor(const Tensor&)>& loss) {
  optim::SGD opt(m, {.lr = 0.0});
  TrainStep step =
      compile_train_step(m, opt, [&](const Tensor& x) { return loss(add(m.p, mul(x, 0.0))); },
                         {.mode = StepMode::three_graph});
  step(Tensor::zeros(m.p.shape(), m.p.dtype()));
  for (const auto& [name, g] : step.gradients())
    if (name == "grad.p") return g.to_vector();
  ADD_FAILURE() << "the step holds no gradient of p";
  return {};
}

std::vector<int64_t> all_axes(const Tensor& t) {
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < t.dim(); ++i) axes.push_back(i);
  return axes;
}

// sum((x + norm(x)) * c) where norm's output does not depend on x (one
// element per normalized group): the gradient is c exactly.
void expect_residual_gradient_exactly(const Shape& shape,
                                      const std::function<Tensor(const Tensor&)>& norm) {
  manual_seed(3);
  OneParam m(randn(shape));
  Tensor c = randn(shape);
  std::vector<double> g =
      gradient_of(m, [&](const Tensor& x) { return sum(mul(add(x, norm(x)), c), all_axes(x)); });
  EXPECT_EQ(g, c.to_vector());
}

TEST(GradientRounding, LayerNormOfOneElementAddsNothingToAResidualsGradient) {
  expect_residual_gradient_exactly(
      {4, 1}, [](const Tensor& x) { return nn::layer_norm(x, Tensor(), Tensor()); });
}

TEST(GradientRounding, GroupNormOfOneElementPerGroupAddsNothingToAResidualsGradient) {
  expect_residual_gradient_exactly(
      {2, 4, 1, 1}, [](const Tensor& x) { return nn::group_norm(x, 4, Tensor(), Tensor()); });
}

TEST(GradientRounding, VarianceOfOneElementAddsNothingToAResidualsGradient) {
  expect_residual_gradient_exactly(
      {3, 1}, [](const Tensor& x) { return nn::var(x, {1}, 0, /*keepdim=*/true); });
}

// Cross-entropy over many classes: each logit's gradient (softmax - onehot)
// / N within 2e-6 of its own size, the largest logit's included (measured:
// 3.4e-7 at worst; 1.7e-5 when a gradient through the shift's maximum sent
// that logit the rounding of a sum of a thousand terms that is 0).
TEST(GradientRounding, CrossEntropyOverManyClassesMatchesFloat64ElementByElement) {
  manual_seed(4);
  const int64_t n = 2, classes = 1000;
  OneParam m(randn({n, classes}));
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{3, 999}, {n});
  std::vector<double> g =
      gradient_of(m, [&](const Tensor& x) { return nn::cross_entropy(x, labels); });
  const std::vector<double> p = m.p.to_vector();
  const int64_t label[] = {3, 999};
  for (int64_t r = 0; r < n; ++r) {
    double top = -INFINITY, total = 0;
    for (int64_t j = 0; j < classes; ++j) top = std::max(top, p[size_t(r * classes + j)]);
    for (int64_t j = 0; j < classes; ++j) total += std::exp(p[size_t(r * classes + j)] - top);
    for (int64_t j = 0; j < classes; ++j) {
      const size_t i = size_t(r * classes + j);
      const double want = (std::exp(p[i] - top) / total - (j == label[r] ? 1 : 0)) / double(n);
      EXPECT_NEAR(g[i], want, 2e-6 * std::abs(want)) << "row " << r << ", class " << j;
    }
  }
}

// Cross-entropy at a saturated softmax (the labelled logit 12 to 40 above
// the others, p within 6e-6 to 4e-18 of 1): the labelled logit's gradient
// (p - 1) / N is minus the other probabilities' sum, which 1 - p taken
// from p would keep to 4 digits in float64 and to none in float32. Each
// element within a few roundings of its exact value, in both precisions.
TEST(GradientRounding, CrossEntropyAtASaturatedSoftmaxKeepsEveryDigit) {
  const std::vector<double> logits = {30, 0, -1, 2, 40, 1, 0.5, 12, -3, 25, 1, 0.25};
  const std::vector<int64_t> label = {0, 1, 1, 0};  // each row's largest
  const int64_t n = 4, classes = 3;
  for (const bool f64 : {true, false}) {
    SCOPED_TRACE(f64 ? "float64" : "float32");
    std::vector<float> narrow(logits.begin(), logits.end());
    OneParam m(f64 ? Tensor::from_vector(logits, {n, classes})
                   : Tensor::from_vector(narrow, {n, classes}));
    Tensor labels = Tensor::from_vector(label, {n});
    std::vector<double> g =
        gradient_of(m, [&](const Tensor& x) { return nn::cross_entropy(x, labels); });
    const double tolerance = f64 ? 4e-16 : 4e-7;
    for (int64_t r = 0; r < n; ++r) {
      const double* row = &logits[size_t(r * classes)];
      const double top = row[label[size_t(r)]];
      double rest = 0;  // the other probabilities' terms, each small
      for (int64_t j = 0; j < classes; ++j)
        if (row[j] != top) rest += std::exp(row[j] - top);
      for (int64_t j = 0; j < classes; ++j) {
        const double want = row[j] == top ? -rest / (1 + rest) / double(n)
                                          : std::exp(row[j] - top) / (1 + rest) / double(n);
        EXPECT_NEAR(g[size_t(r * classes + j)], want, tolerance * std::abs(want))
            << "row " << r << ", class " << j;
      }
    }
  }
}

}  // namespace
}  // namespace ws
