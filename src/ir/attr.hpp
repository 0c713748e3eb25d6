// Typed attribute access, checked against the op table's schema (ops.def,
// attr_schema.hpp) when the code compiles:
//
//   const int64_t groups = ir::attr<Op::conv2d, "groups">(n);  // 1 when absent
//   for (int64_t a : ir::attr<Op::reduce_sum, "axes">(n.attrs)) ...
//   if (const std::string* act = ir::attr<Op::matmul_bias, "activation">(n)) ...
//
// A name the op's schema lacks does not compile (HasAttr is not satisfied),
// and the result has the schema's kind, so an attribute cannot be read as
// another: the type is
//   required                     int64_t, double, const std::vector<int64_t>&,
//                                const std::vector<double>&, const std::string&
//   optional, with a default     the same, the default (ops.def) when absent
//   optional, without one        a pointer to it, nullptr when absent
// Code shared by several ops names them all, `ir::attr<ir::kConvOps,
// "stride">` or `ir::attr<ir::OpSet{Op::a, Op::b}, "x">`: their schemas
// must agree on the attribute. Reading from a Node also checks at run time
// that its op is one of them.
//
// Writers: ir::set_attr<Op::slice, "axis">(attrs, 1) takes the schema's
// kind; ir::make_attrs<Op::slice>({{"axis", 1}, {"start", 0}, {"end", 2}})
// checks the names when it compiles and the kinds when it runs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ir/attr_schema.hpp"
#include "ir/graph.hpp"

namespace ws::ir {

// The ops a read is for: one op, or several whose schemas agree on the
// attribute (converts from an Op).
struct OpSet {
  uint64_t bits[2] = {0, 0};  // op k is bit k % 64 of word k / 64
  constexpr OpSet() = default;
  constexpr OpSet(Op op) { bits[unsigned(op) / 64] = uint64_t(1) << (unsigned(op) % 64); }
  constexpr OpSet(std::initializer_list<Op> ops) {
    for (Op op : ops) add(op);
  }
  constexpr void add(Op op) { bits[unsigned(op) / 64] |= uint64_t(1) << (unsigned(op) % 64); }
  constexpr bool contains(Op op) const {
    return (bits[unsigned(op) / 64] >> (unsigned(op) % 64)) & 1;
  }
};
static_assert(kNumOps <= 128, "OpSet holds one bit per op");

inline constexpr OpSet kMatmulOps{Op::matmul, Op::matmul_add, Op::matmul_bias, Op::matmul_bias_add};
inline constexpr OpSet kConvOps{Op::conv2d, Op::conv2d_input_grad, Op::conv2d_weight_grad};
inline constexpr OpSet kPoolOps{Op::max_pool2d, Op::max_pool2d_grad, Op::avg_pool2d,
                                Op::avg_pool2d_grad};
inline constexpr OpSet kReduceOps{Op::reduce_sum, Op::reduce_max};
// A collective's start: its wait completes it; each has a seq.
inline constexpr OpSet kCollectiveStarts{Op::all_reduce_start, Op::reduce_scatter_start,
                                         Op::all_gather_start};
// The ops whose schema has attribute `name`.
constexpr OpSet ops_with_attr(std::string_view name) {
  OpSet s;
  for (const OpInfo& info : kOpTable)
    if (find_attr_spec(info.op, name)) s.add(info.op);
  return s;
}
// Every op: for the common attributes (kCommonAttrs).
inline constexpr OpSet kAllOps = [] {
  OpSet s;
  for (const OpInfo& info : kOpTable) s.add(info.op);
  return s;
}();

// An attribute name as a template argument: `"groups"`.
template <size_t N>
struct AttrName {
  char text[N]{};
  consteval AttrName(const char (&s)[N]) { std::copy_n(s, N, text); }
  constexpr std::string_view view() const { return {text, N - 1}; }
};

// The C++ type of an attribute kind (an alternative of AttrValue).
template <AttrKind>
struct AttrTypeOf;
template <>
struct AttrTypeOf<AttrKind::int_> {
  using type = int64_t;
};
template <>
struct AttrTypeOf<AttrKind::float_> {
  using type = double;
};
template <>
struct AttrTypeOf<AttrKind::ints> {
  using type = std::vector<int64_t>;
};
template <>
struct AttrTypeOf<AttrKind::floats> {
  using type = std::vector<double>;
};
template <>
struct AttrTypeOf<AttrKind::string> {
  using type = std::string;
};
template <AttrKind k>
using AttrType = typename AttrTypeOf<k>::type;

namespace attr_detail {

// The spec of `name` in the first op of `ops`: `declared` when every op of
// `ops` has one, `agree` when they are the same.
struct Lookup {
  AttrSpec spec{};
  bool declared = false, agree = true;
};
constexpr Lookup lookup(OpSet ops, std::string_view name) {
  Lookup r;
  bool first = true;
  for (const OpInfo& info : kOpTable) {
    if (!ops.contains(info.op)) continue;
    const std::optional<AttrSpec> s = find_attr_spec(info.op, name);
    if (!s) return {};
    if (!first)
      r.agree = r.agree && s->kind == r.spec.kind && s->required == r.spec.required &&
                s->default_text == r.spec.default_text;
    else
      r.spec = *s;
    first = false;
  }
  r.declared = !first;
  return r;
}
constexpr bool has_attr(OpSet ops, std::string_view name) {
  const Lookup r = lookup(ops, name);
  return r.declared && r.agree;
}

template <class T>
const T* find(const Attrs& a, std::string_view name) {
  const AttrValue* v = a.find(name);
  if (!v) return nullptr;
  const T* p = std::get_if<T>(v);
  WS_CHECK(p) << "attribute '" << name << "' has the wrong kind";
  return p;
}

std::vector<int64_t> int_list(std::string_view text);

void check_op(OpSet ops, Op op, std::string_view name);

}  // namespace attr_detail

// Whether every op of `ops` has attribute `name`, of one kind and default:
// what a read or write needs to compile.
template <OpSet ops, AttrName name>
concept HasAttr = attr_detail::has_attr(ops, name.view());

// The schema's spec of attribute `name` of `ops` (when HasAttr).
template <OpSet ops, AttrName name>
inline constexpr AttrSpec kAttrSpec = attr_detail::lookup(ops, name.view()).spec;

// What attr<ops, name> returns (see the top of this file).
template <AttrKind kind, bool pointer, class T = AttrType<kind>>
using AttrResult =
    std::conditional_t<pointer, const T*, std::conditional_t<std::is_scalar_v<T>, T, const T&>>;
template <OpSet ops, AttrName name>
using AttrRead =
    AttrResult<kAttrSpec<ops, name>.kind,
               !kAttrSpec<ops, name>.required && kAttrSpec<ops, name>.default_text.empty()>;

template <OpSet ops, AttrName name>
AttrRead<ops, name> attr(const Attrs& a) requires HasAttr<ops, name> {
  constexpr AttrSpec spec = kAttrSpec<ops, name>;
  using T = AttrType<spec.kind>;
  const T* v = attr_detail::find<T>(a, name.view());
  if constexpr (spec.required) {
    WS_CHECK(v) << "missing attribute '" << name.view() << "'";
    return *v;
  } else if constexpr (spec.default_text.empty()) {
    return v;
  } else if constexpr (spec.kind == AttrKind::int_) {
    return v ? *v : schema_detail::parse_int(spec.default_text);
  } else {
    static const T dflt = attr_detail::int_list(spec.default_text);
    return v ? *v : dflt;
  }
}

template <OpSet ops, AttrName name>
AttrRead<ops, name> attr(const Node& n) requires HasAttr<ops, name> {
  attr_detail::check_op(ops, n.op, name.view());
  return attr<ops, name>(n.attrs);
}

template <OpSet ops, AttrName name>
void set_attr(Attrs& a, AttrType<kAttrSpec<ops, name>.kind> v) requires HasAttr<ops, name> {
  a.set(std::string(name.view()), std::move(v));
}

// A name the ops of `ops` all declare, checked when it compiles (a
// misspelt one is not a constant expression), and its kind.
template <OpSet ops>
struct AttrKey {
  std::string_view name;
  AttrKind kind;
  template <size_t N>
  consteval AttrKey(const char (&s)[N])
      : name(s, N - 1), kind(attr_detail::lookup(ops, name).spec.kind) {
    if (!attr_detail::has_attr(ops, name))
      throw std::invalid_argument("ops.def gives the ops no such attribute, or differing ones");
  }
};

template <OpSet ops>
struct AttrInit {
  AttrKey<ops> key;
  AttrValue value;
};

template <OpSet ops>
Attrs make_attrs(std::initializer_list<AttrInit<ops>> kv) {
  Attrs a;
  for (const AttrInit<ops>& e : kv) {
    WS_CHECK(attr_kind(e.value) == e.key.kind)
        << "attribute '" << e.key.name << "' must be " << attr_kind_name(e.key.kind);
    a.set(std::string(e.key.name), e.value);
  }
  return a;
}

}  // namespace ws::ir
