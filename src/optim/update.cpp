#include "optim/update.hpp"

#include <algorithm>

namespace ws::optim {
namespace {

using ir::Op;
using ir::ValueId;

ValueId hyper(const UpdateSpec& spec, const std::vector<ValueId>& hypers, const char* name) {
  auto it = std::find(spec.hyper_names.begin(), spec.hyper_names.end(), name);
  WS_CHECK(it != spec.hyper_names.end()) << "optimizer has no hyperparameter " << name;
  return hypers[size_t(it - spec.hyper_names.begin())];
}

ParamValues sgd(ir::Builder& b, const UpdateSpec& spec, const ParamValues& in,
                const std::vector<ValueId>& h) {
  ParamValues out;
  const DType dt = b.type(in.param).dtype;
  auto hv = [&](const char* n) { return b.convert(hyper(spec, h, n), dt); };
  ValueId d = in.grad;
  if (spec.weight_decay) d = b.binary(Op::add, d, b.scale(in.param, hv("weight_decay")));
  if (spec.momentum) {
    ValueId buf =
        b.binary(Op::add, b.scale(in.state[0], hv("momentum")), b.scale(d, hv("dampening_factor")));
    out.state.push_back(buf);
    d = spec.nesterov ? b.binary(Op::add, d, b.scale(buf, hv("momentum"))) : buf;
  }
  out.param = b.binary(Op::sub, in.param, b.scale(d, hv("lr")));
  return out;
}

}  // namespace

std::vector<ParamValues> build_updates(ir::Builder& b, const UpdateSpec& spec,
                                       const std::vector<ParamValues>& in,
                                       const std::vector<ValueId>& hypers) {
  WS_CHECK(hypers.size() == spec.hyper_names.size()) << "hyper count";
  std::vector<ParamValues> out;
  for (const ParamValues& p : in) {
    WS_CHECK(p.state.size() == spec.state_slots.size()) << "state count";
    b.loc = {};
    if (spec.kind == "sgd")
      out.push_back(sgd(b, spec, p, hypers));
    else
      throw Error("optimizer '" + spec.kind + "' has no update builder");
  }
  return out;
}

}  // namespace ws::optim
