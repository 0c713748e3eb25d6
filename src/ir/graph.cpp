#include "ir/graph.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "ir/attr.hpp"

namespace ws {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i64: return "i64";
    case DType::b8: return "bool";
  }
  return "?";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i64: return 8;
    case DType::b8: return 1;
  }
  return 0;
}

bool is_floating(DType d) { return d == DType::f32 || d == DType::f64; }

int64_t numel(const Shape& s) {
  // A zero anywhere is no element, without multiplying the other dims
  // (checked_numel bounds their product, not a prefix of it with a zero).
  if (std::find(s.begin(), s.end(), 0) != s.end()) return 0;
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ",")); }

namespace {
thread_local const SourceLoc* g_scoped_loc = nullptr;
}  // namespace

SourceLoc SourceLoc::from(const std::source_location& l) {
  return g_scoped_loc ? *g_scoped_loc : SourceLoc{l.file_name(), int(l.line())};
}

ScopedSourceLoc::ScopedSourceLoc(SourceLoc loc) : prev_(g_scoped_loc), loc_(std::move(loc)) {
  g_scoped_loc = &loc_;
}
ScopedSourceLoc::~ScopedSourceLoc() { g_scoped_loc = prev_; }

std::string SourceLoc::str() const { return known() ? fmt::format("{}:{}", file, line) : ""; }

std::string at(const SourceLoc& loc) { return loc.known() ? " (at " + loc.str() + ")" : ""; }

namespace detail {
CheckFailure::CheckFailure(const char* file, int line, const char* cond) {
  msg_ << "internal error in wholestep at " << file << ":" << line << ": check failed: " << cond
       << ". ";
}
CheckFailure::~CheckFailure() noexcept(false) { throw InternalError(msg_.str()); }
}  // namespace detail

namespace ir {

std::optional<int64_t> checked_numel(const Shape& s, int64_t elem_size) {
  int64_t n = elem_size;
  bool empty = false;
  for (int64_t d : s) {
    if (d < 0) return std::nullopt;
    if (d == 0)
      empty = true;
    else if (__builtin_mul_overflow(n, d, &n))
      return std::nullopt;
  }
  return empty ? 0 : n;
}

std::string Type::str() const { return std::string(dtype_name(dtype)) + shape_str(shape); }

Attrs::Attrs(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  for (auto& [k, v] : kv) set(k, v);
}

void Attrs::set(const std::string& name, AttrValue v) {
  auto it = std::lower_bound(kv_.begin(), kv_.end(), name,
                             [](const auto& p, const std::string& n) { return p.first < n; });
  if (it != kv_.end() && it->first == name)
    it->second = std::move(v);
  else
    kv_.insert(it, {name, std::move(v)});
}

Attrs Attrs::from_sorted(std::vector<std::pair<std::string, AttrValue>> kv) {
  for (size_t i = 1; i < kv.size(); ++i)
    WS_CHECK(kv[i - 1].first < kv[i].first)
        << "attributes not sorted or repeated at '" << kv[i].first << "'";
  Attrs a;
  a.kv_ = std::move(kv);
  return a;
}

const AttrValue* Attrs::find(std::string_view name) const {
  auto it = std::lower_bound(kv_.begin(), kv_.end(), name,
                             [](const auto& p, std::string_view n) { return p.first < n; });
  return it != kv_.end() && it->first == name ? &it->second : nullptr;
}

bool Attrs::has(const std::string& name) const { return find(name) != nullptr; }

const AttrValue& Attrs::get(const std::string& name) const {
  const AttrValue* v = find(name);
  WS_CHECK(v) << "missing attribute '" << name << "'";
  return *v;
}

static constexpr const char* kInputRoles[] = {"param", "buffer", "opt_state", "hyper",
                                              "rng",   "data",   "saved",     "grad"};
static constexpr const char* kOutputRoles[] = {"loss", "user", "grad", "saved", "update"};

Node input_node(InputRole role, const std::string& name, Type t, SourceLoc loc, Stage stage) {
  return Node{Op::input,
              {},
              make_attrs<Op::input>({{"name", name}, {"role", std::string(role_name(role))}}),
              std::move(t),
              std::move(loc),
              stage};
}

const char* stage_name(Stage s) {
  static constexpr const char* kStages[] = {"forward", "backward", "optimizer"};
  return kStages[size_t(s)];
}

const char* role_name(InputRole r) { return kInputRoles[size_t(r)]; }
const char* role_name(OutputRole r) { return kOutputRoles[size_t(r)]; }

bool parse_role(std::string_view s, InputRole* out) {
  for (size_t i = 0; i < std::size(kInputRoles); ++i)
    if (s == kInputRoles[i]) return *out = InputRole(i), true;
  return false;
}
bool parse_role(std::string_view s, OutputRole* out) {
  for (size_t i = 0; i < std::size(kOutputRoles); ++i)
    if (s == kOutputRoles[i]) return *out = OutputRole(i), true;
  return false;
}

InputRole Graph::input_role(ValueId v) const {
  const Node& n = node(v);
  WS_CHECK(n.op == Op::input) << "%" << v << " is not an input";
  InputRole r{};
  const std::string& role = attr<Op::input, "role">(n);
  WS_CHECK(parse_role(role, &r)) << "bad role " << role;
  return r;
}

const std::string& Graph::input_name(ValueId v) const { return attr<Op::input, "name">(node(v)); }

int Graph::input_index(ValueId v) const {
  auto it = std::find(inputs.begin(), inputs.end(), v);
  return it == inputs.end() ? -1 : int(it - inputs.begin());
}

std::vector<ValueId> Graph::inputs_with_role(InputRole r) const {
  std::vector<ValueId> out;
  for (ValueId v : inputs)
    if (input_role(v) == r) out.push_back(v);
  return out;
}

const Output* Graph::output_with_role(OutputRole r) const {
  for (const Output& o : outputs)
    if (o.role == r) return &o;
  return nullptr;
}

std::vector<int> use_counts(const Graph& g) {
  std::vector<int> uses(g.nodes.size(), 0);
  for (const Node& n : g.nodes)
    for (ValueId a : n.args) ++uses[size_t(a)];
  for (const Output& o : g.outputs) ++uses[size_t(o.value)];
  return uses;
}

ValueId append_renamed(Graph& out, Node n, const std::vector<ValueId>& map) {
  for (ValueId& a : n.args) a = map[size_t(a)];
  out.nodes.push_back(std::move(n));
  return ValueId(out.nodes.size() - 1);
}

void copy_interface(const Graph& g, const std::vector<ValueId>& map, Graph& out) {
  for (ValueId v : g.inputs) out.inputs.push_back(map[size_t(v)]);
  for (Output o : g.outputs) {
    o.value = map[size_t(o.value)];
    if (o.aliased_input != kNoValue) o.aliased_input = map[size_t(o.aliased_input)];
    out.outputs.push_back(std::move(o));
  }
}

}  // namespace ir
}  // namespace ws
