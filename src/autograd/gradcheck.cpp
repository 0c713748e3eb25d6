#include "autograd/gradcheck.hpp"

#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "autograd/reverse.hpp"
#include "exec/interpreter.hpp"

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

}  // namespace

ir::Graph promote_to_f64(const ir::Graph& g) {
  ir::Graph out = g;
  for (ir::Node& n : out.nodes) {
    if (n.type.dtype == DType::f32) n.type.dtype = DType::f64;
    if (n.attrs.has("dtype") && n.attrs.s("dtype") == "f32")
      n.attrs.set("dtype", std::string("f64"));
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

  check::GradcheckResult r;
  std::mt19937_64 gen(0);
  auto loss_at = [&]() { return exec::interpret(fwd, inputs)[0].item(); };
  for (size_t w = 0; w < wrt.size(); ++w) {
    const int idx = fwd.input_index(wrt[w]);
    WS_CHECK(idx >= 0) << "gradcheck: %" << wrt[w] << " is not an input";
    Tensor& x = inputs[size_t(idx)];
    double* xd = x.data<double>();
    const double* gd = analytic[w + 1].data<double>();
    const int64_t n = x.numel();
    std::vector<int64_t> elems;
    if (n <= opts.max_elements) {
      for (int64_t i = 0; i < n; ++i) elems.push_back(i);
    } else {
      for (int64_t i = 0; i < opts.max_elements; ++i) elems.push_back(int64_t(gen() % uint64_t(n)));
    }
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
