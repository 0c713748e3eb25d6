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
      WS_CHECK(p.state.size() + (p.steps.empty() ? 0 : 1) == spec_.state_slots.size())
          << "state count";
      if (spec_.maximize) p.grad = b_.unary(Op::neg, p.grad);
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

  // Packed parameters with a step count each (ParamValues::steps): each
  // count advanced, and the step size and sqrt(1 - β2^t) of every element
  // of this rank's part, as dtype dt: each parameter's scalar repeated over
  // its elements, packed as the parameters are (the padding 1, never read).
  void packed_adam_scalars(const ParamValues& in, ParamValues& out, DType dt) {
    std::vector<ValueId> sizes, roots;
    int64_t n = 0;
    for (size_t j = 0; j < in.steps.size(); ++j) {
      ValueId t = bin(Op::add, in.steps[j], one());
      out.steps.push_back(t);
      adam_scalars(t);
      const Shape shape = in.packed[j].shape;
      sizes.push_back(b_.broadcast_to(b_.convert(step_size_, dt), shape));
      roots.push_back(b_.broadcast_to(b_.convert(sqrt_bc2_, dt), shape));
      n += in.packed[j].numel();
    }
    const int64_t padded = (n + in.world - 1) / in.world * in.world;
    if (padded > n) {
      sizes.push_back(b_.full(1.0, ir::Type{dt, {padded - n}}));
      roots.push_back(b_.full(1.0, ir::Type{dt, {padded - n}}));
    }
    step_size_ = b_.local_shard(sizes, in.world);
    sqrt_bc2_ = b_.local_shard(roots, in.world);
  }

  ParamValues adam(const ParamValues& in) {
    ParamValues out;
    // With a step per parameter, the state is (step, exp_avg, exp_avg_sq
    // [, max_exp_avg_sq]) and the bias corrections are this parameter's;
    // packed (ZeRO), the steps are apart and the corrections per element.
    size_t s0 = 0;
    const DType dt = b_.type(in.param).dtype;
    const bool packed = !in.steps.empty();
    if (packed) {
      packed_adam_scalars(in, out, dt);
    } else if (per_param_step()) {
      ValueId t = bin(Op::add, in.state[0], one());
      out.state.push_back(t);
      adam_scalars(t);
      s0 = 1;
    }
    // A scalar as dtype dt; the packed corrections are so already.
    auto s = [&](ValueId v) { return packed && b_.type(v).rank() > 0 ? v : b_.convert(v, dt); };
    auto times = [&](ValueId x, ValueId f) {
      return b_.type(f).rank() > 0 ? bin(Op::mul, x, f) : b_.scale(x, f);
    };
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
    const ValueId root = s(sqrt_bc2_);
    ValueId denom = bin(Op::add,
                        bin(Op::div, b_.unary(Op::sqrt, v_used),
                            b_.type(root).rank() > 0 ? root : b_.broadcast_to(root, shape)),
                        b_.broadcast_to(hv("eps", dt), shape));
    out.param = bin(Op::sub, p, times(bin(Op::div, m, denom), s(step_size_)));
    return out;
  }

  ir::Builder& b_;
  const UpdateSpec& spec_;
  const UpdateInputs& in_;
  ValueId step_size_ = ir::kNoValue, sqrt_bc2_ = ir::kNoValue;
};

}  // namespace

Clipped clip_by_global_norm(ir::Builder& b, std::vector<ValueId> grads, ValueId max_norm,
                            bool sharded) {
  const char* const caller = b.internal;
  const SourceLoc loc = b.loc;
  b.internal = "global-norm gradient clipping";
  b.loc = {};
  // torch's norm is in the widest dtype of the gradients: f32, or f64
  // when one of them is f64.
  DType dt = DType::f32;
  for (ValueId g : grads)
    if (b.type(g).dtype == DType::f64) dt = DType::f64;
  ValueId total = b.scalar(0.0, dt);
  for (ValueId g : grads) {
    const ir::Type t = b.type(g);  // a copy: appending moves the nodes
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < t.rank(); ++d) axes.push_back(d);
    ValueId sq = b.binary(Op::mul, g, g);
    ValueId s = axes.empty() ? sq : b.reduce(Op::reduce_sum, sq, axes);
    total = b.binary(Op::add, total, b.convert(s, dt));
  }
  if (sharded) total = b.all_reduce(total, "sum");
  const ValueId norm = b.unary(Op::sqrt, total);
  const ValueId coef =
      b.binary(Op::div, b.convert(max_norm, dt), b.binary(Op::add, norm, b.scalar(1e-6, dt)));
  // clamp(coef, max=1): a NaN coefficient stays NaN (torch's clamp).
  const ValueId one = b.scalar(1.0, dt);
  const ValueId clamped = b.add(Op::select, {b.binary(Op::gt, coef, one), one, coef});
  for (ValueId& g : grads) g = b.scale(g, b.convert(clamped, b.type(g).dtype));
  b.internal = caller;
  b.loc = loc;
  return {std::move(grads), norm};
}

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
