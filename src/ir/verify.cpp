// The graph verifier (see verify.hpp). It never trusts an id before checking
// its range, so it reports, rather than trips over, any malformed graph.
#include "ir/verify.hpp"

#include "ir/text.hpp"

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "ir/attr.hpp"
#include "ir/attr_schema.hpp"
#include "ir/builder.hpp"

namespace ws::ir {
namespace {

// The attribute `name` of `n` when it is a T, else nullptr: describe()
// trusts no node.
template <class T>
const T* attr_if(const Node& n, const std::string& name) {
  const AttrValue* v = n.attrs.find(name);
  return v ? std::get_if<T>(v) : nullptr;
}

// "%12 = add %3, %4 : f32[2]": enough to find the node in a printed graph.
std::string describe(const Graph& g, ValueId id) {
  const Node& n = g.nodes[size_t(id)];
  std::string s = fmt::format("%{} = {}", id, op_name(n.op));
  const std::string* role = attr_if<std::string>(n, "role");
  const std::string* name = attr_if<std::string>(n, "name");
  if (n.op == Op::input && role && name) s += fmt::format(" {} \"{}\"", *role, *name);
  for (size_t i = 0; i < n.args.size(); ++i) s += fmt::format("{}%{}", i ? ", " : " ", n.args[i]);
  return s + " : " + n.type.str() + at(n.loc);
}

[[noreturn]] void fail(const Graph& g, const std::string& what) {
  throw InternalError(fmt::format("invalid graph '{}': {}", g.name, what));
}

[[noreturn]] void fail_node(const Graph& g, ValueId id, const std::string& rule) {
  fail(g, fmt::format("{}: {}", describe(g, id), rule));
}

bool in_range(const Graph& g, ValueId v) { return v >= 0 && v < g.size(); }

bool is_input(const Graph& g, ValueId v) { return in_range(g, v) && g.node(v).op == Op::input; }

// Source ops carry their type; check the attributes their kernels rely on
// (their presence and kinds are checked already, against the schema).
void check_source(const Graph& g, ValueId id) {
  const Node& n = g.node(id);
  if (n.op == Op::input) {
    InputRole r{};
    if (!parse_role(attr<Op::input, "role">(n), &r))
      fail_node(g, id, "an input needs a string attribute 'role' naming a known input role");
    if (attr<Op::input, "name">(n).empty())
      fail_node(g, id, "an input needs a non-empty string attribute 'name'");
  } else if (n.op == Op::constant) {
    const std::vector<double>& values = attr<Op::constant, "value">(n);
    if (int64_t(values.size()) != n.type.numel())
      fail_node(
          g, id,
          fmt::format("constant has {} values for {} elements", values.size(), n.type.numel()));
  } else if (n.op == Op::iota) {
    const int64_t axis = attr<Op::iota, "axis">(n);
    if (axis < 0 || axis >= n.type.rank())
      fail_node(g, id, "iota needs an integer attribute 'axis' naming one of its dims");
  } else if (n.op != Op::full) {  // a full's float value is all it needs
    fail_node(g, id, "unknown source op");
  }
}

// Body node v of fusion `id` has the fusion's shape.
void check_fusion_shape(const Graph& g, ValueId id, ValueId v) {
  const Shape &body = g.node(id).body->type(v).shape, &fusion = g.type(id).shape;
  if (body != fusion)
    fail_node(g, id,
              fmt::format("body node %{} has shape {}, not the fusion's {}", v, shape_str(body),
                          shape_str(fusion)));
}

// A loop fusion computes one element of every result from the same element
// of its full-size operands (broadcast operands read through strides):
// its body holds inputs, fulls, broadcasts of inputs, elementwise ops and
// random draws (element i of a draw is the stream's number i), every
// result of which has the fusion's shape.
void check_loop_body(const Graph& g, ValueId id) {
  const Node& n = g.node(id);
  const Graph& b = *n.body;
  for (ValueId v = 0; v < b.size(); ++v) {
    const Node& m = b.node(v);
    const OpCategory c = op_info(m.op).category;
    if (m.op == Op::input || m.op == Op::full) continue;
    if (m.op == Op::broadcast && b.node(m.args[0]).op == Op::input) continue;
    if (c != OpCategory::elementwise && m.op != Op::random_uniform)
      fail_node(g, id,
                fmt::format("body node %{} is a {}: a loop body holds only inputs, fulls, "
                            "broadcasts of inputs, elementwise ops and random draws",
                            v, op_name(m.op)));
    check_fusion_shape(g, id, v);
  }
}

// A product fusion computes the matrix product of its first two operands
// (2-d, f32) and a loop body over it, at the product's shape: the body's
// other nodes are what a loop body holds, less random draws, broadcasts
// only of one-element inputs (the loop reads its full-size operands and
// the product element by element), and only the product reads those two
// operands.
void check_product_body(const Graph& g, ValueId id) {
  const Node& n = g.node(id);
  const Graph& b = *n.body;
  ValueId product = kNoValue;
  for (ValueId v = 0; v < b.size(); ++v)
    if (b.node(v).op != Op::input) {
      product = v;
      break;
    }
  if (product == kNoValue || b.inputs.size() < 2 || b.node(product).op != Op::matmul ||
      b.node(product).args != std::vector<ValueId>{b.inputs[0], b.inputs[1]} ||
      b.type(product).dtype != DType::f32 || b.type(product).rank() != 2 ||
      b.type(b.inputs[0]).rank() != 2)
    fail_node(g, id,
              "a product fusion's body starts with a matmul of its first two inputs (2-d, f32)");
  if (b.type(product).shape != n.type.shape)
    fail_node(g, id,
              fmt::format("its product has shape {}, not the fusion's {}",
                          shape_str(b.type(product).shape), shape_str(n.type.shape)));
  for (ValueId v = product + 1; v < b.size(); ++v) {
    const Node& m = b.node(v);
    for (ValueId a : m.args)
      if (a == b.inputs[0] || a == b.inputs[1])
        fail_node(g, id, fmt::format("body node %{} reads an operand of the product", v));
    if (m.op == Op::input || m.op == Op::full) continue;
    if (m.op == Op::broadcast && b.node(m.args[0]).op == Op::input &&
        b.type(m.args[0]).numel() == 1)
      continue;
    if (op_info(m.op).category != OpCategory::elementwise)
      fail_node(g, id,
                fmt::format("body node %{} is a {}: after its product, a product body holds only "
                            "fulls, broadcasts of one-element inputs and elementwise ops",
                            v, op_name(m.op)));
    check_fusion_shape(g, id, v);
  }
  for (size_t i = 2; i < b.inputs.size(); ++i) {
    const Type& t = b.type(b.inputs[i]);
    if (t.numel() != 1 && t.shape != n.type.shape)
      fail_node(g, id,
                fmt::format("operand {} is {}: a product body's operands after the product's "
                            "two have its shape or one element",
                            i, t.str()));
  }
}

// A reduce fusion's loop ends in reductions: it holds what a loop body
// holds (random draws included), at the shape S of the reductions' operand,
// then reductions, all over the same axes of S, then elementwise ops of the
// reduced shape (and broadcasts of one-element inputs to it).
void check_reduce_body(const Graph& g, ValueId id) {
  const Graph& b = *g.node(id).body;
  ValueId first = kNoValue;
  for (ValueId v = 0; v < b.size() && first == kNoValue; ++v)
    if (b.node(v).op == Op::reduce_sum || b.node(v).op == Op::reduce_max) first = v;
  if (first == kNoValue) fail_node(g, id, "a reduce fusion's body has no reduction");
  const Shape& in = b.type(b.node(first).args[0]).shape;
  const Shape& out = b.type(first).shape;
  for (ValueId v = 0; v < b.size(); ++v) {
    const Node& m = b.node(v);
    if (m.op == Op::input || m.op == Op::full) continue;
    const bool red = m.op == Op::reduce_sum || m.op == Op::reduce_max;
    if (red && (b.type(m.args[0]).shape != in ||
                attr<kReduceOps, "axes">(m) != attr<kReduceOps, "axes">(b.node(first))))
      fail_node(
          g, id,
          fmt::format("body node %{} reduces another shape or other axes than %{}", v, first));
    if (red) continue;
    if (m.op == Op::broadcast && b.node(m.args[0]).op == Op::input &&
        (m.type.shape == in || b.type(m.args[0]).numel() == 1))
      continue;
    if (m.op == Op::random_uniform && m.type.shape == in) continue;
    if (op_info(m.op).category != OpCategory::elementwise ||
        (m.type.shape != in && m.type.shape != out))
      fail_node(
          g, id,
          fmt::format("body node %{} is a {} of shape {}: a reduce body holds a loop of "
                      "shape {}, its reductions, and elementwise ops of shape {}",
                      v, op_name(m.op), shape_str(m.type.shape), shape_str(in), shape_str(out)));
  }
}

void check_fusion(const Graph& g, ValueId id) {
  const Node& n = g.node(id);
  if (!n.body) fail_node(g, id, "a fusion needs a body");
  const Graph& b = *n.body;
  try {
    verify(b);
  } catch (const InternalError& e) {
    fail_node(g, id, fmt::format("its body is invalid: {}", e.what()));
  }
  if (b.inputs.size() != n.args.size())
    fail_node(
        g, id,
        fmt::format("{} operands but its body has {} inputs", n.args.size(), b.inputs.size()));
  for (size_t i = 0; i < n.args.size(); ++i)
    if (b.type(b.inputs[i]) != g.type(n.args[i]))
      fail_node(g, id,
                fmt::format("operand {} is {} but body input %{} is {}", i, g.type(n.args[i]).str(),
                            b.inputs[i], b.type(b.inputs[i]).str()));
  if (b.outputs.empty()) fail_node(g, id, "its body has no outputs");
  if (b.type(b.outputs[0].value) != n.type)
    fail_node(g, id,
              fmt::format("the type differs from its body's result 0, {}",
                          b.type(b.outputs[0].value).str()));
  const std::string& kind = attr<Op::fusion, "kind">(n);
  if (kind == "loop")
    check_loop_body(g, id);
  else if (kind == "reduce")
    check_reduce_body(g, id);
  else if (kind == "product")
    check_product_body(g, id);
  else
    fail_node(g, id,
              "a fusion needs a string attribute 'kind' (\"loop\", \"reduce\" or \"product\")");
}

void check_fusion_result(const Graph& g, ValueId id) {
  const Node& n = g.node(id);
  const Node& f = g.node(n.args[0]);
  if (f.op != Op::fusion || !f.body)
    fail_node(g, id, "the operand of fusion_result must be a fusion");
  const int64_t index = attr<Op::fusion_result, "index">(n);
  if (index < 1 || index >= int64_t(f.body->outputs.size()))
    fail_node(g, id,
              fmt::format("needs an integer attribute 'index' in [1, {}) naming a result of "
                          "the fusion",
                          f.body->outputs.size()));
  const Type& want = f.body->type(f.body->outputs[size_t(index)].value);
  if (n.type != want)
    fail_node(g, id,
              fmt::format("the type differs from the fusion's result {}, {}", index, want.str()));
}

void check_node(const Graph& g, ValueId id) {
  const Node& n = g.node(id);
  if (size_t(n.op) >= size_t(kNumOps))
    fail(g, fmt::format("%{} has an invalid op {}", id, int(n.op)));
  for (int64_t d : n.type.shape)
    if (d < 0) fail_node(g, id, "the type has a negative dimension");
  if (!checked_numel(n.type.shape, int64_t(dtype_size(n.type.dtype))))
    fail_node(g, id, "the type is too large: its size in bytes does not fit in 64 bits");
  const OpInfo& info = op_info(n.op);
  if (info.arity >= 0 && int64_t(n.args.size()) != info.arity)
    fail_node(g, id,
              fmt::format("{} takes {} operands, got {}", info.name, info.arity, n.args.size()));
  for (ValueId a : n.args) {
    if (a == id) fail_node(g, id, "the node uses itself");
    if (a > id && a < g.size())
      fail_node(g, id, fmt::format("operand %{} is defined later (forward reference)", a));
    if (!in_range(g, a)) fail_node(g, id, fmt::format("operand %{} does not exist", a));
  }
  if (n.body && n.op != Op::fusion) fail_node(g, id, "only a fusion has a body");
  if (std::string wrong = check_attrs(n.op, n.attrs); !wrong.empty()) fail_node(g, id, wrong);
  if (info.category == OpCategory::source) return check_source(g, id);
  if (n.op == Op::fusion) return check_fusion(g, id);
  if (n.op == Op::fusion_result) return check_fusion_result(g, id);

  std::vector<Type> arg_types;
  for (ValueId a : n.args) arg_types.push_back(g.type(a));
  Type inferred;
  try {
    inferred = infer_type(n.op, arg_types, n.attrs, n.loc);
  } catch (const Error& e) {
    fail_node(g, id, fmt::format("operands or attributes do not fit: {}", e.what()));
  } catch (const InternalError& e) {
    fail_node(g, id, fmt::format("type inference failed: {}", e.what()));
  }
  if (inferred != n.type)
    fail_node(
        g, id,
        fmt::format("the type {} differs from the inferred type {}", n.type.str(), inferred.str()));
}

// Names are how users, checkpoints and the three graphs' interfaces find an
// input or an output: each names one.
void check_inputs(const Graph& g) {
  std::vector<int> listed(g.nodes.size(), 0);
  std::unordered_map<std::string_view, ValueId> named;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    ValueId v = g.inputs[i];
    if (!is_input(g, v)) fail(g, fmt::format("inputs[{}] = %{} is not an input node", i, v));
    if (listed[size_t(v)]++) fail(g, fmt::format("input %{} is listed twice in inputs", v));
    const std::string& name = attr<Op::input, "name">(g.node(v));
    if (auto [it, fresh] = named.emplace(name, v); !fresh)
      fail_node(g, v, fmt::format("input name \"{}\" is taken by %{} already", name, it->second));
  }
  for (ValueId v = 0; v < g.size(); ++v)
    if (g.node(v).op == Op::input && !listed[size_t(v)])
      fail_node(g, v, "this input node is missing from the graph's inputs list");
}

void check_outputs(const Graph& g) {
  std::vector<int> aliased_by(g.nodes.size(), -1);
  std::unordered_map<std::string_view, size_t> named;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Output& o = g.outputs[i];
    std::string what = fmt::format("output {} \"{}\"", i, o.name);
    if (size_t(o.role) > size_t(OutputRole::update))
      fail(g, fmt::format("{} has an invalid role {}", what, int(o.role)));
    if (auto [it, fresh] = named.emplace(o.name, i); !fresh)
      fail(g, fmt::format("{}: the name is taken by output {} already", what, it->second));
    what = fmt::format("output {} ({} %{} \"{}\")", i, role_name(o.role), o.value, o.name);
    if (!in_range(g, o.value)) fail(g, what + " refers to a value that does not exist");
    if (o.role != OutputRole::update) {
      if (o.aliased_input != kNoValue)
        fail(g, fmt::format("{} aliases %{}, but only update outputs alias inputs", what,
                            o.aliased_input));
      continue;
    }
    ValueId a = o.aliased_input;
    if (a == kNoValue) fail(g, what + " is an update but names no aliased input");
    if (!is_input(g, a))
      fail(g, fmt::format("{} aliases %{}, which is not an input node", what, a));
    if (g.type(a) != g.type(o.value))
      fail(g, fmt::format("{} has type {} but aliases input %{} of type {}", what,
                          g.type(o.value).str(), a, g.type(a).str()));
    if (aliased_by[size_t(a)] >= 0)
      fail(g,
           fmt::format("{} and output {} both update input %{}", what, aliased_by[size_t(a)], a));
    aliased_by[size_t(a)] = int(i);
  }
}

// Collectives have an effect and an order: every rank starts them in the
// same order, so their seq grows in node order, and nothing but its wait
// reads a start's buffer while the collective may still write it. A
// fusion's body holds none.
void check_collectives(const Graph& g, bool in_body) {
  int64_t last_seq = -1;
  std::vector<int> waits(g.nodes.size(), 0);
  for (ValueId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (op_info(n.op).category == OpCategory::collective && in_body)
      fail_node(g, id, "a fusion's body holds no collective");
    if (kCollectiveStarts.contains(n.op)) {
      const int64_t seq = attr<kCollectiveStarts, "seq">(n);
      if (seq <= last_seq)
        fail_node(g, id,
                  fmt::format("collective seq {} follows seq {}: collectives must keep the order "
                              "every rank starts them in",
                              seq, last_seq));
      last_seq = seq;
    }
    for (ValueId a : n.args) {
      if (!kCollectiveStarts.contains(g.node(a).op)) continue;
      if (n.op != Op::wait)
        fail_node(g, id, fmt::format("reads the buffer of collective %{} before a wait for it", a));
      if (waits[size_t(a)]++)
        fail_node(g, id, fmt::format("collective %{} is waited for twice", a));
    }
    if (n.op == Op::wait && !kCollectiveStarts.contains(g.node(n.args[0]).op))
      fail_node(g, id, fmt::format("waits for %{}, which is not a collective's start", n.args[0]));
  }
  for (ValueId id = 0; id < g.size(); ++id)
    if (kCollectiveStarts.contains(g.node(id).op) && waits[size_t(id)] == 0)
      fail_node(g, id, "this collective is started but never waited for");
  for (const Output& o : g.outputs)
    if (in_range(g, o.value) && kCollectiveStarts.contains(g.node(o.value).op))
      fail(g, fmt::format("output \"{}\" is the buffer of collective %{}, not its wait", o.name,
                          o.value));
}

bool initially_enabled() {
  const char* env = std::getenv("WS_VERIFY");
  if (env && std::string_view(env) == "1") return true;
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> flag{initially_enabled()};
  return flag;
}

}  // namespace

void verify(const Graph& g) {
  for (ValueId id = 0; id < g.size(); ++id) check_node(g, id);
  check_inputs(g);
  check_outputs(g);
  check_collectives(g, false);
  for (const Node& n : g.nodes)
    if (n.body) check_collectives(*n.body, true);
}

bool verify_enabled() { return enabled_flag().load(std::memory_order_relaxed); }

void set_verify_enabled(bool on) { enabled_flag().store(on, std::memory_order_relaxed); }

void verify_with_round_trip(const Graph& g) {
  verify(g);
  const std::string text = print(g);
  WS_CHECK(print(parse(text)) == text)
      << "graph '" << g.name << "' does not survive a text round trip";
}

}  // namespace ws::ir
