#include "autograd/gradcheck.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "autograd/reverse.hpp"
#include "exec/interpreter.hpp"
#include "ir/attr.hpp"

namespace ws::autograd {
namespace {

// The index of the flat position `i` in a row-major tensor of `shape`.
Shape unravel(int64_t i, const Shape& shape) {
  Shape at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    at[d] = i % shape[d];
    i /= shape[d];
  }
  return at;
}

// The part of `fwd` that depends on its input `x`, as a graph of its own:
// the values that part reads and that do not depend on x become its inputs
// (x first), so a perturbed x recomputes only what it changes. `reads[i]`
// is the value of `fwd` its input i stands for. Nullopt when the loss (the
// first output) does not depend on x.
struct Downstream {
  ir::Graph graph;
  std::vector<ir::ValueId> reads;
};

std::optional<Downstream> downstream(const ir::Graph& fwd, ir::ValueId x) {
  const size_t n = fwd.nodes.size();
  std::vector<bool> dep(n, false);
  dep[size_t(x)] = true;
  for (ir::ValueId v = x + 1; v < fwd.size(); ++v)
    for (ir::ValueId a : fwd.node(v).args) dep[size_t(v)] = dep[size_t(v)] || dep[size_t(a)];
  const ir::ValueId loss = fwd.outputs[0].value;
  if (!dep[size_t(loss)]) return std::nullopt;
  Downstream d;
  d.graph.name = fwd.name;
  std::vector<ir::ValueId> map(n, ir::kNoValue);
  auto bind = [&](ir::ValueId v) {
    if (map[size_t(v)] != ir::kNoValue) return;
    d.graph.nodes.push_back(
        ir::input_node(ir::InputRole::data, fmt::format("v{}", v), fwd.type(v)));
    map[size_t(v)] = ir::ValueId(d.graph.nodes.size() - 1);
    d.graph.inputs.push_back(map[size_t(v)]);
    d.reads.push_back(v);
  };
  bind(x);
  for (ir::ValueId v = x + 1; v < fwd.size(); ++v) {
    if (!dep[size_t(v)]) continue;
    for (ir::ValueId a : fwd.node(v).args)
      if (!dep[size_t(a)]) bind(a);
    map[size_t(v)] = ir::append_renamed(d.graph, fwd.node(v), map);
  }
  d.graph.outputs.push_back(
      ir::Output{ir::OutputRole::loss, map[size_t(loss)], ir::kNoValue, "loss"});
  return d;
}

// The elements of a tensor of `n` elements to check, at most `count`, each
// once, in increasing order. When there are more, half are drawn among
// those with a nonzero analytic gradient `g` and the rest among the others,
// so a check of a sparse gradient (an embedding whose batch reads a few
// rows) compares where the loss depends on the tensor, and also where the
// rule says it does not.
std::vector<int64_t> sample_elements(const double* g, int64_t n, int64_t count,
                                     std::mt19937_64& gen) {
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[size_t(i)] = i;
  if (n <= count) return all;
  // Nonzero gradients first, each part in a seeded random order.
  const auto zero =
      std::stable_partition(all.begin(), all.end(), [&](int64_t i) { return g[i] != 0; });
  std::shuffle(all.begin(), zero, gen);
  std::shuffle(zero, all.end(), gen);
  const int64_t nonzero = zero - all.begin();
  const int64_t from_nonzero = std::min(nonzero, std::max(count / 2, count - (n - nonzero)));
  std::vector<int64_t> picked(all.begin(), all.begin() + from_nonzero);
  picked.insert(picked.end(), zero, zero + (count - from_nonzero));
  std::sort(picked.begin(), picked.end());
  return picked;
}

}  // namespace

ir::Graph promote_to_f64(const ir::Graph& g) {
  constexpr ir::OpSet kDtypeOps = ir::ops_with_attr("dtype");
  ir::Graph out = g;
  for (ir::Node& n : out.nodes) {
    if (n.type.dtype == DType::f32) n.type.dtype = DType::f64;
    if (kDtypeOps.contains(n.op) && ir::attr<kDtypeOps, "dtype">(n) == "f32")
      ir::set_attr<kDtypeOps, "dtype">(n.attrs, "f64");
  }
  return out;
}

check::GradcheckResult gradcheck_graph(const ir::Graph& forward,
                                       const std::vector<ir::ValueId>& wrt,
                                       const std::vector<Tensor>& values,
                                       const check::GradcheckOptions& opts) {
  ir::Graph fwd = promote_to_f64(forward);
  WS_CHECK(!fwd.outputs.empty()) << "gradcheck needs a loss output";
  fwd.outputs.resize(1);
  std::vector<Tensor> inputs;
  for (const Tensor& t : values)
    inputs.push_back(t.dtype() == DType::f32 ? cast(t, DType::f64).clone() : t.clone());

  ir::Graph joint = fwd;
  std::vector<ir::ValueId> grads = append_backward(joint, fwd.outputs[0].value, wrt);
  for (size_t w = 0; w < grads.size(); ++w)
    joint.outputs.push_back(ir::Output{ir::OutputRole::grad, grads[w], ir::kNoValue,
                                       "grad." + joint.input_name(wrt[w])});
  std::vector<Tensor> analytic = exec::interpret(joint, inputs);

  // Each checked input perturbs only what depends on it: the values the
  // rest of the graph gives it are computed once, here.
  std::vector<std::optional<Downstream>> parts;
  ir::Graph base = fwd;
  std::vector<ir::ValueId> computed;  // values of `base`'s outputs after the loss
  for (ir::ValueId x : wrt) {
    WS_CHECK(fwd.input_index(x) >= 0) << "gradcheck: %" << x << " is not an input";
    parts.push_back(downstream(fwd, x));
    for (ir::ValueId v : parts.back() ? parts.back()->reads : std::vector<ir::ValueId>{})
      if (fwd.node(v).op != ir::Op::input &&
          std::find(computed.begin(), computed.end(), v) == computed.end()) {
        computed.push_back(v);
        base.outputs.push_back(ir::Output{ir::OutputRole::user, v, ir::kNoValue, ""});
      }
  }
  const std::vector<Tensor> base_values = exec::interpret(base, inputs);
  auto value_of = [&](ir::ValueId v) -> Tensor {
    if (fwd.node(v).op == ir::Op::input) return inputs[size_t(fwd.input_index(v))];
    return base_values[1 +
                       size_t(std::find(computed.begin(), computed.end(), v) - computed.begin())];
  };

  check::GradcheckResult r;
  std::mt19937_64 gen(0);
  for (size_t w = 0; w < wrt.size(); ++w) {
    Tensor& x = inputs[size_t(fwd.input_index(wrt[w]))];
    std::vector<Tensor> bound;
    for (ir::ValueId v : parts[w] ? parts[w]->reads : std::vector<ir::ValueId>{})
      bound.push_back(value_of(v));  // bound[0] is x itself, perturbed in place below
    // Without a path to the loss, the loss does not change with x.
    auto loss_at = [&]() {
      return parts[w] ? exec::interpret(parts[w]->graph, bound)[0].item() : 0.0;
    };
    double* xd = x.data<double>();
    const double* gd = analytic[w + 1].data<double>();
    const int64_t n = x.numel();
    const std::vector<int64_t> elems = sample_elements(gd, n, opts.max_elements, gen);
    check::ParamCheck p;
    p.name = fwd.input_name(wrt[w]);
    p.shape = x.shape();
    double worst = -1;  // the worst element's error over its tolerance
    int64_t worst_i = 0;
    for (int64_t i : elems) {
      const double saved = xd[i];
      xd[i] = saved + opts.eps;
      const double up = loss_at();
      xd[i] = saved - opts.eps;
      const double down = loss_at();
      xd[i] = saved;
      const double numeric = (up - down) / (2 * opts.eps), err = std::abs(numeric - gd[i]);
      const double allowed = opts.atol + opts.rtol * std::abs(numeric);
      ++p.checked;
      p.max_abs_error = std::max(p.max_abs_error, err);
      // How far outside the tolerance; a NaN (which fails) is the worst.
      const double ratio = std::isnan(err) || (err > 0 && allowed <= 0)
                               ? std::numeric_limits<double>::infinity()
                               : (err > 0 ? err / allowed : 0.0);
      if (ratio > worst) {
        worst = ratio;
        worst_i = i;
        p.analytic = gd[i];
        p.numeric = numeric;
        p.error = err;
      }
      if (!(err <= allowed)) {
        if (r.ok || std::count(r.report.begin(), r.report.end(), '\n') < 20)
          r.report += fmt::format("{}[{}]: analytic {:.10g}, numeric {:.10g}, error {:.3g}\n",
                                  p.name, i, gd[i], numeric, err);
        r.ok = false;
        p.ok = false;
      }
    }
    if (p.checked > 0) p.at = unravel(worst_i, p.shape);
    r.checked += p.checked;
    r.max_abs_error = std::max(r.max_abs_error, p.max_abs_error);
    r.params.push_back(std::move(p));
  }
  return r;
}

}  // namespace ws::autograd
