#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

#include "nn/composites.hpp"
#include "wholestep/nn.hpp"

namespace ws::nn {
namespace {
void check_name(const std::string& kind, const std::string& name) {
  if (name.empty() || name.find('.') != std::string::npos)
    throw Error(
        fmt::format("register_{}: name '{}' must be non-empty and contain no '.'", kind, name));
}
}  // namespace

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  check_name("parameter", name);
  if (!t.defined() || t.is_traced() || !is_floating(t.dtype()))
    throw Error(fmt::format(
        "register_parameter('{}'): a parameter must be a concrete floating-point "
        "tensor, got {}",
        name, t.defined() && !t.is_traced() ? t.str() : "a traced or undefined tensor"));
  for (auto& [n, p] : params_)
    if (n == name) throw Error(fmt::format("register_parameter: '{}' is already registered", name));
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  check_name("buffer", name);
  if (!t.defined() || t.is_traced())
    throw Error(fmt::format("register_buffer('{}'): a buffer must be a concrete tensor", name));
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, Module* m, std::shared_ptr<Module> owned) {
  check_name("module", name);
  if (m == this)
    throw Error(fmt::format("register_module('{}'): a module cannot contain itself", name));
  for (auto& [n, c] : children_)
    if (n == name) throw Error(fmt::format("register_module: '{}' is already registered", name));
  children_.emplace_back(name, m);
  if (owned) owned_.push_back(std::move(owned));
}

void Module::collect(const std::string& prefix, bool params, NamedTensors& out) const {
  for (auto& [n, t] : params ? params_ : buffers_) out.emplace_back(prefix + n, t);
  for (auto& [n, c] : children_) c->collect(prefix + n + ".", params, out);
}

static NamedTensors dedupe(NamedTensors all) {
  std::unordered_set<const void*> seen;
  NamedTensors out;
  for (auto& nt : all)
    if (seen.insert(nt.second.impl()).second) out.push_back(std::move(nt));
  return out;
}

NamedTensors Module::named_parameters() const {
  NamedTensors all;
  collect("", true, all);
  return dedupe(std::move(all));
}

NamedTensors Module::named_buffers() const {
  NamedTensors all;
  collect("", false, all);
  return dedupe(std::move(all));
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const { return children_; }

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

Linear::Linear(int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  if (in <= 0 || out <= 0)
    throw Error(fmt::format("Linear({}, {}): feature counts must be positive", in, out));
  double bound = 1.0 / std::sqrt(double(in));
  weight = register_parameter("weight", rand_uniform({out, in}, -bound, bound));
  if (with_bias) bias = register_parameter("bias", rand_uniform({out}, -bound, bound));
}

Tensor Linear::forward(const Tensor& x, Loc loc) {
  if (x.dim() < 1 || x.size(-1) != in_features)
    throw Error(fmt::format("Linear({}, {}): input {} must have {} features in its last dim{}",
                            in_features, out_features, x.str(), in_features,
                            at(SourceLoc::from(loc))));
  Tensor x2 = x.dim() == 2 ? x : x.reshape({x.numel() / in_features, in_features}, loc);
  Tensor y = matmul(x2, weight, false, true, loc);
  if (bias.defined()) y = add(y, bias, loc);
  if (x.dim() == 2) return y;
  Shape s = x.shape();
  s.back() = out_features;
  return y.reshape(s, loc);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, Loc loc) {
  if (logits.dim() != 2 || labels.dim() != 1 || labels.dtype() != DType::i64 ||
      labels.size(0) != logits.size(0))
    throw Error(
        fmt::format("cross_entropy: expected logits [N, C] and i64 labels [N], got {} and {}{}",
                    logits.str(), labels.str(), at(SourceLoc::from(loc))));
  return nll_loss(log_softmax(logits, -1, loc), labels, Tensor(), Reduction::mean, std::nullopt,
                  loc);
}

Tensor nll_loss(const Tensor& logp, const Tensor& labels, const Tensor& weight, Reduction reduction,
                std::optional<int64_t> ignore_index, Loc loc) {
  const bool shapes_fit = [&] {
    if (logp.dim() < 2 || labels.dtype() != DType::i64 || labels.dim() != logp.dim() - 1)
      return false;
    for (int64_t d = 0; d < labels.dim(); ++d)
      if (labels.size(d) != logp.size(d == 0 ? 0 : d + 1)) return false;
    return true;
  }();
  if (!shapes_fit)
    throw Error(
        fmt::format("nll_loss: expected log-probabilities [N, C, d...] and i64 labels "
                    "[N, d...], got {} and {}{}",
                    logp.str(), labels.str(), at(SourceLoc::from(loc))));
  const int64_t classes = logp.size(1);
  if (weight.defined() && (weight.dim() != 1 || weight.size(0) != classes))
    throw Error(fmt::format("nll_loss: weight {} must have one value per class ({}){}",
                            weight.str(), classes, at(SourceLoc::from(loc))));
  // Positions as rows, classes last: [M, C] and [M].
  Tensor rows = logp;
  if (logp.dim() > 2) {
    std::vector<int64_t> perm{0};
    for (int64_t d = 2; d < logp.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    rows = transpose(logp, perm, loc);
  }
  const int64_t m = labels.numel();
  rows = rows.reshape({m, classes}, loc);
  Tensor flat = labels.reshape({m}, loc);
  Tensor kept;  // bool [M]: the label is not ignore_index
  if (ignore_index) {
    kept = ne(flat, Tensor::scalar(double(*ignore_index), DType::i64), loc);
    flat = where(kept, flat, Tensor::scalar(0, DType::i64), loc);
  }
  // Each position's log-probability at its label: one gather from the
  // flattened rows (a product with the one-hot labels would make the loss
  // NaN wherever another class's log-probability is -inf, a masked logit),
  // the labels checked first (one outside [0, C) would read another row).
  const std::string range = fmt::format("{} [0, {})", kLabelRangeCheck, classes);
  flat = checked(flat, ge(flat, Tensor::scalar(0, DType::i64), loc), range, loc);
  flat = checked(flat, lt(flat, Tensor::scalar(double(classes), DType::i64), loc), range, loc);
  const Tensor starts =
      mul(iota({m}, 0, DType::i64, loc), Tensor::scalar(double(classes), DType::i64), loc);
  Tensor picked = gather(rows.reshape({m * classes}, loc), add(flat, starts, loc), loc);
  Tensor w;  // the weight of each position, undefined for 1
  if (weight.defined()) w = gather(weight, flat, loc);
  Tensor losses = neg(w.defined() ? mul(picked, w, loc) : picked, loc);
  const Tensor zero = Tensor::scalar(0, logp.dtype());
  if (kept.defined()) losses = where(kept, losses, zero, loc);
  if (reduction == Reduction::none) return losses.reshape(labels.shape(), loc);
  Tensor total = sum(losses, {0}, loc);
  if (reduction == Reduction::sum) return total;
  Tensor count;  // the sum of the weights of the positions not ignored
  if (w.defined())
    count = sum(kept.defined() ? where(kept, w, zero, loc) : w, {0}, loc);
  else if (kept.defined())
    count = sum(cast(kept, logp.dtype(), loc), {0}, loc);
  else
    count = Tensor::scalar(double(m), logp.dtype());
  return div(total, count, loc);
}

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank, Reduction reduction,
                bool zero_infinity, Loc loc) {
  Tensor losses =
      ws::ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity, loc);
  if (reduction == Reduction::none) return losses;
  if (reduction == Reduction::sum) return sum(losses, {0}, loc);
  const Tensor at_least_one = clamp(target_lengths, 1, std::nan(""), loc);
  Tensor per_target = div(losses, cast(at_least_one, losses.dtype(), loc), loc);
  return mean(per_target, {0}, loc);
}

}  // namespace ws::nn
