// Text from a trained Gpt: one token at a time through a compiled forward.
#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "base/random.hpp"
#include "wholestep/models.hpp"

namespace ws::models {
namespace {

// The index of the token drawn from `logits` (greedy at temperature 0).
int64_t pick(const float* logits, int64_t vocab, double temperature, base::SplitMix64& rng,
             int64_t position) {
  for (int64_t v = 0; v < vocab; ++v)
    if (!std::isfinite(logits[v]))
      throw Error(
          fmt::format("generate: the logit of token {} at generated position {} is {}; the model's "
                      "parameters are not finite",
                      v, position, logits[v]));
  const float* top = std::max_element(logits, logits + vocab);
  if (temperature == 0) return top - logits;
  std::vector<double> p(static_cast<size_t>(vocab));
  double total = 0;
  for (int64_t v = 0; v < vocab; ++v)
    total += p[size_t(v)] = std::exp((double(logits[v]) - double(*top)) / temperature);
  double u = rng.uniform() * total;
  for (int64_t v = 0; v < vocab; ++v) {
    if (u < p[size_t(v)]) return v;
    u -= p[size_t(v)];
  }
  return top - logits;  // u landed on the sum's last rounding: the likeliest token
}

}  // namespace

std::vector<int64_t> generate(Gpt& model, std::span<const int64_t> prompt,
                              const SampleOptions& options) {
  const int64_t context = model.config.context, vocab = model.config.vocab;
  if (prompt.empty())
    throw Error("generate: the prompt is empty; it needs at least one token to continue");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      throw Error(fmt::format("generate: prompt token {} at position {} is outside [0, {})",
                              prompt[i], i, vocab));
  if (options.length < 0)
    throw Error(fmt::format("generate: length {} must be at least 0", options.length));
  if (!(std::isfinite(options.temperature) && options.temperature >= 0))
    throw Error(fmt::format(
        "generate: temperature {} must be a finite number >= 0 (0: the most likely token)",
        options.temperature));
  std::vector<int64_t> out;
  if (options.length == 0) return out;
  Forward forward = compile_forward(model, [&](const Tensor& x) { return model(x); });
  // The newest `context` tokens of prompt + output, from the left.
  std::vector<int64_t> seq(prompt.end() - std::min<int64_t>(int64_t(prompt.size()), context),
                           prompt.end());
  base::SplitMix64 rng(base::mix64(options.seed));
  out.reserve(size_t(options.length));
  for (int64_t n = 0; n < options.length; ++n) {
    if (options.stop && options.stop()) break;
    const int64_t len = int64_t(seq.size());
    std::vector<int64_t> window = seq;
    window.resize(size_t(context), 0);
    const Tensor logits = forward(Tensor::from_vector(window, {1, context}));
    const int64_t next =
        pick(logits.data<float>() + (len - 1) * vocab, vocab, options.temperature, rng, n);
    out.push_back(next);
    if (len == context) seq.erase(seq.begin());
    seq.push_back(next);
  }
  return out;
}

}  // namespace ws::models
