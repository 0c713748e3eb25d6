#include "optim/update.hpp"

#include <algorithm>

namespace ws::optim {
namespace {

using ir::Op;
using ir::ValueId;

class UpdateBuilder {
 public:
  UpdateBuilder(ir::Builder& b, const UpdateSpec& spec, const UpdateInputs& in)
      : b_(b), spec_(spec), in_(in) {}

  UpdateOutputs run() {
    UpdateOutputs out;
    b_.loc = {};
    std::vector<ValueId> grads;
    for (const ParamValues& p : in_.params) grads.push_back(p.grad);
    if (spec_.clip) clip(grads);
    const bool is_adam = spec_.kind == "adam" || spec_.kind == "adamw";
    if (is_adam && !per_param_step()) {
      WS_CHECK(!spec_.global_slots.empty() && spec_.global_slots[0] == kStepSlot)
          << "Adam's spec has no step slot";
      ValueId t = bin(Op::add, in_.globals.at(0), one());
      out.globals.push_back(t);
      adam_scalars(t);
    }
    for (size_t i = 0; i < in_.params.size(); ++i) {
      ParamValues p = in_.params[i];
      WS_CHECK(p.state.size() == spec_.state_slots.size()) << "state count";
      p.grad = spec_.maximize ? b_.unary(Op::neg, grads[i]) : grads[i];
      if (spec_.kind == "sgd")
        out.params.push_back(sgd(p));
      else if (spec_.kind == "adam" || spec_.kind == "adamw")
        out.params.push_back(adam(p));
      else
        throw Error("optimizer '" + spec_.kind + "' has no update builder");
    }
    WS_CHECK(out.globals.size() == spec_.global_slots.size()) << "global state count";
    return out;
  }

 private:
  ValueId hyper(const char* name) const {
    auto it = std::find(spec_.hyper_names.begin(), spec_.hyper_names.end(), name);
    WS_CHECK(it != spec_.hyper_names.end()) << "optimizer has no hyperparameter " << name;
    return in_.hypers[size_t(it - spec_.hyper_names.begin())];
  }
  // A hyperparameter (a 0-d f64 input) rounded once to dtype dt.
  ValueId hv(const char* name, DType dt) { return b_.convert(hyper(name), dt); }
  ValueId bin(Op op, ValueId a, ValueId c) { return b_.binary(op, a, c); }
  ValueId one(DType dt = DType::f32) { return b_.scalar(1.0, dt); }
  // The scalars torch computes in Python floats (1 - beta2, the bias
  // corrections, 1 - lr * wd) are computed here in f64 from the f64
  // hyperparameters and rounded once where a tensor reads them: in f32,
  // 1 - 0.999f is 1.3e-5 from 1 - 0.999, and Adam's second moment with it.

  // torch.nn.utils.clip_grad_norm_: g *= min(1, max_norm / (||g||₂ + 1e-6)),
  // the norm over all gradients together, accumulated in f32.
  void clip(std::vector<ValueId>& grads) {
    ValueId total = b_.scalar(0.0);
    for (ValueId g : grads) {
      const ir::Type t = b_.type(g);
      std::vector<int64_t> axes;
      for (int64_t d = 0; d < t.rank(); ++d) axes.push_back(d);
      ValueId sq = bin(Op::mul, g, g);
      ValueId s = axes.empty() ? sq : b_.reduce(Op::reduce_sum, sq, axes);
      total = bin(Op::add, total, b_.convert(s, DType::f32));
    }
    if (in_.sharded) total = b_.all_reduce(total, "sum");
    ValueId norm = b_.unary(Op::sqrt, total);
    ValueId coef =
        bin(Op::div, hv("max_grad_norm", DType::f32), bin(Op::add, norm, b_.scalar(1e-6)));
    ValueId clamped = b_.add(Op::select, {bin(Op::lt, coef, one()), coef, one()});
    for (ValueId& g : grads) g = b_.scale(g, b_.convert(clamped, b_.type(g).dtype));
  }

  ParamValues sgd(const ParamValues& in) {
    ParamValues out;
    const DType dt = b_.type(in.param).dtype;
    ValueId d = in.grad;
    if (spec_.weight_decay) d = bin(Op::add, d, b_.scale(in.param, hv("weight_decay", dt)));
    if (spec_.momentum) {
      ValueId buf = bin(Op::add, b_.scale(in.state[0], hv("momentum", dt)),
                        b_.scale(d, hv("dampening_factor", dt)));
      out.state.push_back(buf);
      d = spec_.nesterov ? bin(Op::add, d, b_.scale(buf, hv("momentum", dt))) : buf;
    }
    out.param = bin(Op::sub, in.param, b_.scale(d, hv("lr", dt)));
    return out;
  }

  bool per_param_step() const {
    return !spec_.state_slots.empty() && spec_.state_slots[0] == kStepSlot;
  }

  // The step count t (already advanced) gives the bias corrections, in f64:
  // step_size = lr / (1 - β1^t), sqrt(1 - β2^t).
  void adam_scalars(ValueId t) {
    const DType d = DType::f64;
    t = b_.convert(t, d);
    ValueId bc1 = bin(Op::sub, one(d), bin(Op::pow, hyper("beta1"), t));
    ValueId bc2 = bin(Op::sub, one(d), bin(Op::pow, hyper("beta2"), t));
    step_size_ = bin(Op::div, hyper("lr"), bc1);
    sqrt_bc2_ = b_.unary(Op::sqrt, bc2);
  }

  ParamValues adam(const ParamValues& in) {
    ParamValues out;
    // With a step per parameter, the state is (step, exp_avg, exp_avg_sq
    // [, max_exp_avg_sq]) and the bias corrections are this parameter's.
    size_t s0 = 0;
    if (per_param_step()) {
      ValueId t = bin(Op::add, in.state[0], one());
      out.state.push_back(t);
      adam_scalars(t);
      s0 = 1;
    }
    const DType dt = b_.type(in.param).dtype;
    auto s = [&](ValueId v) { return b_.convert(v, dt); };
    ValueId p = in.param, g = in.grad;
    if (spec_.weight_decay) {
      if (spec_.kind == "adamw")  // p *= 1 - lr·wd
        p = b_.scale(
            p, s(bin(Op::sub, one(DType::f64), bin(Op::mul, hyper("lr"), hyper("weight_decay")))));
      else
        g = bin(Op::add, g, b_.scale(p, hv("weight_decay", dt)));
    }
    ValueId b1 = hyper("beta1"), b2 = hyper("beta2");
    ValueId m = bin(Op::add, b_.scale(in.state[s0], s(b1)),
                    b_.scale(g, s(bin(Op::sub, one(DType::f64), b1))));
    ValueId v = bin(Op::add, b_.scale(in.state[s0 + 1], s(b2)),
                    b_.scale(bin(Op::mul, g, g), s(bin(Op::sub, one(DType::f64), b2))));
    out.state.push_back(m);
    out.state.push_back(v);
    ValueId v_used = v;
    if (spec_.amsgrad) {
      v_used = bin(Op::maximum, in.state[s0 + 2], v);
      out.state.push_back(v_used);
    }
    // denom = sqrt(v) / sqrt(1 - β2^t) + eps; p -= step_size · m / denom
    const Shape shape = b_.type(p).shape;  // a copy: hv() may append, moving the nodes
    ValueId denom =
        bin(Op::add, bin(Op::div, b_.unary(Op::sqrt, v_used), b_.broadcast_to(s(sqrt_bc2_), shape)),
            b_.broadcast_to(hv("eps", dt), shape));
    out.param = bin(Op::sub, p, b_.scale(bin(Op::div, m, denom), s(step_size_)));
    return out;
  }

  ir::Builder& b_;
  const UpdateSpec& spec_;
  const UpdateInputs& in_;
  ValueId step_size_ = ir::kNoValue, sqrt_bc2_ = ir::kNoValue;
};

}  // namespace

UpdateOutputs build_updates(ir::Builder& b, const UpdateSpec& spec, const UpdateInputs& in) {
  WS_CHECK(in.hypers.size() == spec.hyper_names.size()) << "hyper count";
  WS_CHECK(in.globals.size() == spec.global_slots.size()) << "global state count";
  const char* const caller = b.internal;
  b.internal = "the optimizer update";
  UpdateOutputs out = UpdateBuilder(b, spec, in).run();
  b.internal = caller;
  return out;
}

}  // namespace ws::optim
