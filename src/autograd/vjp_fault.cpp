#include "autograd/vjp_fault.hpp"

#include <optional>

#include <fmt/format.h>

#include "autograd/vjp.hpp"

namespace ws::autograd {
namespace {

struct Active {
  ir::Op op;
  double factor;
  VjpRule real;
};
std::optional<Active> g_fault;

void scaled_rule(const VjpContext& c, std::vector<ir::ValueId>& dargs) {
  g_fault->real(c, dargs);
  for (ir::ValueId& d : dargs)
    if (d != ir::kNoValue) d = c.b.scale(d, c.b.scalar(g_fault->factor, c.b.type(d).dtype));
}

}  // namespace

VjpFault::VjpFault(std::string_view op, double factor) {
  const std::optional<ir::Op> o = ir::op_from_name(op);
  if (!o || !ir::op_info(*o).differentiable)
    throw Error(fmt::format("VjpFault: '{}' is not a differentiable op", op));
  WS_CHECK(!g_fault) << "one VjpFault at a time";
  g_fault = Active{*o, factor, replace_vjp_rule(*o, scaled_rule)};
}

VjpFault::~VjpFault() {
  replace_vjp_rule(g_fault->op, g_fault->real);
  g_fault.reset();
}

}  // namespace ws::autograd
