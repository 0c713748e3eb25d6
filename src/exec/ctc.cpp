#include "exec/ctc.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "exec/parallel.hpp"

namespace ws::exec {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// log(exp(a) + exp(b)), -inf when both are.
double log_add(double a, double b) {
  const double m = std::max(a, b);
  if (m == kNegInf) return kNegInf;
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

double log_add(double a, double b, double c) {
  const double m = std::max({a, b, c});
  if (m == kNegInf) return kNegInf;
  return m + std::log(std::exp(a - m) + std::exp(b - m) + std::exp(c - m));
}

// Where each sample's targets start in the targets operand, after every
// length and target is checked.
std::vector<int64_t> target_starts(const CtcShape& s, const int64_t* targets,
                                   const int64_t* input_lengths, const int64_t* target_lengths,
                                   const SourceLoc& loc) {
  std::vector<int64_t> start(size_t(s.batch));
  int64_t next = 0;
  for (int64_t n = 0; n < s.batch; ++n) {
    const int64_t t = input_lengths[n], l = target_lengths[n];
    if (t < 0 || t > s.frames)
      throw Error(
          fmt::format("ctc_loss: input_lengths[{}] is {}, outside [0, {}] (the frames of "
                      "log_probs [{}, {}, {}]){}",
                      n, t, s.frames, s.frames, s.batch, s.classes, at(loc)));
    if (l < 0 || (s.row >= 0 && l > s.row))
      throw Error(fmt::format("ctc_loss: target_lengths[{}] is {}, outside [0, {}] (the {}){}", n,
                              l, s.row >= 0 ? s.row : s.targets,
                              s.row >= 0
                                  ? fmt::format("columns of targets [{}, {}]", s.batch, s.row)
                                  : "elements of the targets",
                              at(loc)));
    start[size_t(n)] = s.row >= 0 ? n * s.row : next;
    next += l;
    if (s.row < 0 && next > s.targets)
      throw Error(
          fmt::format("ctc_loss: the target lengths of samples 0 to {} add up to {}, more "
                      "than the {} concatenated targets{}",
                      n, next, s.targets, at(loc)));
    for (int64_t i = 0; i < l; ++i) {
      const int64_t c = targets[start[size_t(n)] + i];
      if (c < 0 || c >= s.classes)
        throw Error(
            fmt::format("ctc_loss: target {} of sample {} is class {}, outside [0, {}) "
                        "(log_probs [{}, {}, {}]){}",
                        i, n, c, s.classes, s.frames, s.batch, s.classes, at(loc)));
    }
  }
  return start;
}

// One sample's recursions, over its targets with blanks around them
// (positions 0..2L, the odd ones its targets).
template <class T>
class Sample {
 public:
  Sample(const CtcShape& s, const T* lp, const int64_t* tgt, int64_t n, int64_t frames, int64_t len)
      : s_(s), lp_(lp), tgt_(tgt), n_(n), t_(frames), l_(len), w_(2 * len + 1) {}

  int64_t label(int64_t p) const { return p % 2 == 0 ? s_.blank : tgt_[p / 2]; }
  double lp(int64_t t, int64_t c) const {
    return double(lp_[(t * s_.batch + n_) * s_.classes + c]);
  }
  // A path may skip the blank before position p (to a different target).
  bool skips_to(int64_t p) const { return p % 2 == 1 && p > 1 && label(p) != label(p - 2); }

  // alpha[t * w + p]: log-probability of the first t+1 frames ending at p.
  double forward(std::vector<double>& alpha) const {
    if (t_ == 0) return l_ == 0 ? 0.0 : kNegInf;
    alpha.assign(size_t(t_ * w_), kNegInf);
    alpha[0] = lp(0, s_.blank);
    if (l_ > 0) alpha[1] = lp(0, label(1));
    for (int64_t t = 1; t < t_; ++t) {
      const double* prev = &alpha[size_t((t - 1) * w_)];
      double* cur = &alpha[size_t(t * w_)];
      for (int64_t p = 0; p < w_; ++p) {
        const double a = prev[p], b = p > 0 ? prev[p - 1] : kNegInf,
                     c = skips_to(p) ? prev[p - 2] : kNegInf;
        cur[p] = log_add(a, b, c) + lp(t, label(p));
      }
    }
    const double* last = &alpha[size_t((t_ - 1) * w_)];
    return log_add(last[w_ - 1], l_ > 0 ? last[w_ - 2] : kNegInf);
  }

  // beta[t * w + p]: log-probability of frames t.. starting at p (frame t's
  // own probability included, as in alpha).
  void backward(std::vector<double>& beta) const {
    beta.assign(size_t(t_ * w_), kNegInf);
    double* last = &beta[size_t((t_ - 1) * w_)];
    last[w_ - 1] = lp(t_ - 1, s_.blank);
    if (l_ > 0) last[w_ - 2] = lp(t_ - 1, label(w_ - 2));
    for (int64_t t = t_ - 2; t >= 0; --t) {
      const double* next = &beta[size_t((t + 1) * w_)];
      double* cur = &beta[size_t(t * w_)];
      for (int64_t p = 0; p < w_; ++p) {
        const double a = next[p], b = p + 1 < w_ ? next[p + 1] : kNegInf,
                     c = p + 2 < w_ && skips_to(p + 2) ? next[p + 2] : kNegInf;
        cur[p] = log_add(a, b, c) + lp(t, label(p));
      }
    }
  }

 private:
  const CtcShape& s_;
  const T* lp_;
  const int64_t* tgt_;
  int64_t n_, t_, l_, w_;
};

// A sample without an alignment whose loss zero_infinity makes 0 (and its
// gradient with it).
bool zeroed(const CtcShape& s, double nll) { return s.zero_infinity && std::isinf(nll); }

}  // namespace

template <class T>
void ctc_loss(const CtcShape& s, const T* log_probs, const int64_t* targets,
              const int64_t* input_lengths, const int64_t* target_lengths, T* loss,
              const SourceLoc& loc) {
  const std::vector<int64_t> start = target_starts(s, targets, input_lengths, target_lengths, loc);
  parallel_for(
      s.batch, 1,
      [&](int64_t lo, int64_t hi) {
        thread_local std::vector<double> alpha;
        for (int64_t n = lo; n < hi; ++n) {
          const Sample<T> one(s, log_probs, targets + start[size_t(n)], n, input_lengths[n],
                              target_lengths[n]);
          const double nll = -one.forward(alpha);
          loss[n] = T(zeroed(s, nll) ? 0.0 : nll);
        }
      },
      1);
}

template <class T>
void ctc_loss_grad(const CtcShape& s, const T* log_probs, const int64_t* targets,
                   const int64_t* input_lengths, const int64_t* target_lengths, const T* dloss,
                   T* dlog_probs, const SourceLoc& loc) {
  const std::vector<int64_t> start = target_starts(s, targets, input_lengths, target_lengths, loc);
  const int64_t c = s.classes;
  parallel_for(
      s.batch, 1,
      [&](int64_t lo, int64_t hi) {
        thread_local std::vector<double> alpha, beta, by_class;
        for (int64_t n = lo; n < hi; ++n) {
          const int64_t frames = input_lengths[n];
          auto row = [&](int64_t t) { return dlog_probs + (t * s.batch + n) * c; };
          for (int64_t t = frames; t < s.frames; ++t) std::fill_n(row(t), c, T(0));
          if (frames == 0) continue;
          const Sample<T> one(s, log_probs, targets + start[size_t(n)], n, frames,
                              target_lengths[n]);
          const double nll = -one.forward(alpha);
          if (zeroed(s, nll)) {
            for (int64_t t = 0; t < frames; ++t) std::fill_n(row(t), c, T(0));
            continue;
          }
          one.backward(beta);
          const int64_t w = 2 * target_lengths[n] + 1;
          const double g = double(dloss[n]);
          for (int64_t t = 0; t < frames; ++t) {
            by_class.assign(size_t(c), kNegInf);
            for (int64_t p = 0; p < w; ++p) {
              double& k = by_class[size_t(one.label(p))];
              k = log_add(k, alpha[size_t(t * w + p)] + beta[size_t(t * w + p)]);
            }
            T* out = row(t);
            for (int64_t k = 0; k < c; ++k) {
              const double lp = one.lp(t, k);
              out[k] = T((std::exp(lp) - std::exp(by_class[size_t(k)] + nll - lp)) * g);
            }
          }
        }
      },
      1);
}

#define WS_CTC_KERNELS(T)                                                                   \
  template void ctc_loss<T>(const CtcShape&, const T*, const int64_t*, const int64_t*,      \
                            const int64_t*, T*, const SourceLoc&);                          \
  template void ctc_loss_grad<T>(const CtcShape&, const T*, const int64_t*, const int64_t*, \
                                 const int64_t*, const T*, T*, const SourceLoc&);

WS_CTC_KERNELS(float)
WS_CTC_KERNELS(double)
#undef WS_CTC_KERNELS

}  // namespace ws::exec
