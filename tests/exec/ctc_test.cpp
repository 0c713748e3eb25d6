// ctc_loss and ctc_loss_grad against their definition: the probability of
// a target is the sum, over every frame-by-frame path of classes that
// collapses to it (repeats merged, then blanks dropped), of the product of
// the path's probabilities, enumerated here for small sizes.
#include "exec/ctc.hpp"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "exec/threads.hpp"

namespace ws::exec {
namespace {

using Vec = std::vector<double>;

// log-softmax of random logits: [T, N, C].
Vec random_log_probs(int64_t t, int64_t n, int64_t c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> d;
  Vec lp(size_t(t * n * c));
  for (int64_t r = 0; r < t * n; ++r) {
    double sum = 0;
    for (int64_t k = 0; k < c; ++k) sum += std::exp(lp[size_t(r * c + k)] = d(gen));
    for (int64_t k = 0; k < c; ++k) lp[size_t(r * c + k)] -= std::log(sum);
  }
  return lp;
}

// -log of the summed probability of every path of `frames` frames of
// sample n that collapses to `target`.
double brute_force_nll(const Vec& lp, int64_t n_count, int64_t c, int64_t n, int64_t frames,
                       const std::vector<int64_t>& target, int64_t blank) {
  std::vector<int64_t> path(size_t(frames), 0);
  double total = 0;
  for (;;) {
    std::vector<int64_t> collapsed;
    for (int64_t t = 0; t < frames; ++t)
      if (path[size_t(t)] != blank && (t == 0 || path[size_t(t)] != path[size_t(t - 1)]))
        collapsed.push_back(path[size_t(t)]);
    if (collapsed == target) {
      double log_p = 0;
      for (int64_t t = 0; t < frames; ++t)
        log_p += lp[size_t((t * n_count + n) * c + path[size_t(t)])];
      total += std::exp(log_p);
    }
    int64_t t = 0;  // the next path, as a number in base c
    while (t < frames && ++path[size_t(t)] == c) path[size_t(t++)] = 0;
    if (t == frames) break;
  }
  return -std::log(total);
}

struct Case {
  CtcShape shape;
  Vec lp;
  std::vector<int64_t> targets, in_len, tgt_len;
};

// Three samples, padded targets [3, 3]: one with a repeated class (a blank
// must separate its repeats), one of one target, one empty.
Case padded_case(int64_t blank) {
  Case k;
  k.shape = {.frames = 5, .batch = 3, .classes = 3, .row = 3, .targets = 9, .blank = blank};
  k.lp = random_log_probs(5, 3, 3, 7);
  const int64_t a = (blank + 1) % 3, b = (blank + 2) % 3;
  k.targets = {a, a, b, b, 0, 0, 0, 0, 0};
  k.in_len = {5, 4, 3};
  k.tgt_len = {3, 1, 0};
  return k;
}

TEST(CtcLoss, EqualsTheSumOverEveryPathThatCollapsesToTheTarget) {
  for (int64_t blank : {0, 2}) {
    const Case k = padded_case(blank);
    Vec loss(3);
    ctc_loss(k.shape, k.lp.data(), k.targets.data(), k.in_len.data(), k.tgt_len.data(), loss.data(),
             {});
    for (int64_t n = 0; n < 3; ++n) {
      const std::vector<int64_t> target(k.targets.begin() + n * 3,
                                        k.targets.begin() + n * 3 + k.tgt_len[size_t(n)]);
      EXPECT_NEAR(loss[size_t(n)],
                  brute_force_nll(k.lp, 3, 3, n, k.in_len[size_t(n)], target, blank), 1e-12)
          << "blank " << blank << " sample " << n;
    }
  }
}

TEST(CtcLoss, ConcatenatedTargetsGiveThePaddedLosses) {
  const Case k = padded_case(0);
  CtcShape flat = k.shape;
  flat.row = -1;
  flat.targets = 4;
  const std::vector<int64_t> targets = {k.targets[0], k.targets[1], k.targets[2], k.targets[3]};
  Vec padded(3), concatenated(3);
  ctc_loss(k.shape, k.lp.data(), k.targets.data(), k.in_len.data(), k.tgt_len.data(), padded.data(),
           {});
  ctc_loss(flat, k.lp.data(), targets.data(), k.in_len.data(), k.tgt_len.data(),
           concatenated.data(), {});
  EXPECT_EQ(padded, concatenated);
}

TEST(CtcLoss, NoAlignmentIsInfiniteOrZeroWithZeroInfinity) {
  // Two repeats need three frames; two are given.
  CtcShape s{.frames = 2, .batch = 1, .classes = 3, .row = 2, .targets = 2, .blank = 0};
  const Vec lp = random_log_probs(2, 1, 3, 3);
  const std::vector<int64_t> targets = {1, 1}, in_len = {2}, tgt_len = {2};
  Vec loss(1), grad(6);
  const Vec dloss = {1.0};
  ctc_loss(s, lp.data(), targets.data(), in_len.data(), tgt_len.data(), loss.data(), {});
  EXPECT_EQ(loss[0], std::numeric_limits<double>::infinity());
  s.zero_infinity = true;
  ctc_loss(s, lp.data(), targets.data(), in_len.data(), tgt_len.data(), loss.data(), {});
  ctc_loss_grad(s, lp.data(), targets.data(), in_len.data(), tgt_len.data(), dloss.data(),
                grad.data(), {});
  EXPECT_EQ(loss[0], 0.0);
  EXPECT_EQ(grad, Vec(6, 0.0));
}

// The loss's own derivative by central differences, plus exp(lp) dloss:
// the gradient torch gives.
TEST(CtcLossGrad, IsTheDerivativePlusTorchsSoftmaxTerm) {
  const Case k = padded_case(1);
  const Vec dloss = {0.5, -1.25, 2.0};
  Vec grad(k.lp.size());
  ctc_loss_grad(k.shape, k.lp.data(), k.targets.data(), k.in_len.data(), k.tgt_len.data(),
                dloss.data(), grad.data(), {});
  auto weighted_loss = [&](const Vec& lp) {
    Vec loss(3);
    ctc_loss(k.shape, lp.data(), k.targets.data(), k.in_len.data(), k.tgt_len.data(), loss.data(),
             {});
    return loss[0] * dloss[0] + loss[1] * dloss[1] + loss[2] * dloss[2];
  };
  const double h = 1e-6;
  for (size_t i = 0; i < k.lp.size(); ++i) {
    Vec up = k.lp, down = k.lp;
    up[i] += h, down[i] -= h;
    const double derivative = (weighted_loss(up) - weighted_loss(down)) / (2 * h);
    const int64_t t = int64_t(i) / 9, n = int64_t(i) / 3 % 3;
    const double softmax_term = t < k.in_len[size_t(n)] ? std::exp(k.lp[i]) * dloss[size_t(n)] : 0;
    EXPECT_NEAR(grad[i], derivative + softmax_term, 1e-7) << "element " << i;
  }
}

TEST(CtcLoss, SameBitsOnOneThreadAndTwo) {
  const Case k = padded_case(0);
  std::vector<float> lp(k.lp.begin(), k.lp.end());
  const std::vector<float> dloss = {1.0f, 0.5f, -2.0f};
  std::vector<float> loss1(3), loss2(3), grad1(lp.size()), grad2(lp.size());
  auto run = [&](std::vector<float>& loss, std::vector<float>& grad) {
    ctc_loss(k.shape, lp.data(), k.targets.data(), k.in_len.data(), k.tgt_len.data(), loss.data(),
             {});
    ctc_loss_grad(k.shape, lp.data(), k.targets.data(), k.in_len.data(), k.tgt_len.data(),
                  dloss.data(), grad.data(), {});
  };
  {
    TeamScope one(1);
    run(loss1, grad1);
  }
  {
    TeamScope two(2);
    run(loss2, grad2);
  }
  EXPECT_EQ(loss1, loss2);
  EXPECT_EQ(grad1, grad2);
}

TEST(CtcLoss, LengthsAndTargetsOutOfRangeAreErrorsNamingThem) {
  const Case k = padded_case(0);
  Vec loss(3, -7.0);
  auto fails = [&](std::vector<int64_t> targets, std::vector<int64_t> in_len,
                   std::vector<int64_t> tgt_len, const std::string& says) {
    try {
      ctc_loss(k.shape, k.lp.data(), targets.data(), in_len.data(), tgt_len.data(), loss.data(),
               {});
      ADD_FAILURE() << "no error for " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  fails(k.targets, {5, 6, 3}, k.tgt_len, "input_lengths[1] is 6, outside [0, 5]");
  fails(k.targets, k.in_len, {3, 4, 0}, "target_lengths[1] is 4, outside [0, 3]");
  fails({1, 1, 3, 2, 0, 0, 0, 0, 0}, k.in_len, k.tgt_len, "target 2 of sample 0 is class 3");
  EXPECT_EQ(loss, Vec(3, -7.0));  // nothing written
}

}  // namespace
}  // namespace ws::exec
