// The attribute schema of every op, read from the last column of ops.def.
//
// An op's attributes are part of its meaning: a kernel reads `stride`, the
// printer prints whatever is there. A misspelt or stray attribute would be
// carried along silently and a missing one found only by the kernel that
// needs it, so the verifier checks every node's attributes against the
// schema: each known, of the right kind, every required one present. Code
// reads and writes them through attr.hpp, checked against the same schema
// when it compiles.
//
// The schema is parsed at compile time: a malformed ops.def line does not
// compile (the error points at the `throw` below naming what is wrong).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ir/graph.hpp"

namespace ws::ir {

enum class AttrKind : uint8_t { int_, float_, ints, floats, string };

struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  bool required;
  // An optional attribute's value when it is absent, as IR text (`1`,
  // `[0]`; integer kinds only), or empty: absence then means something of
  // its own (a pooling's stride is its kernel, a product's activation none).
  std::string_view default_text;
};

// Attributes any op may carry, beside its own: `recompute=N` marks the N-th
// clone the partitioner made of a value to compute again, so that CSE keeps
// it apart from the original.
inline constexpr std::string_view kCommonAttrs = "recompute?:int";

namespace schema_detail {

constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }

// An integer in IR text: `-`? digits.
constexpr int64_t parse_int(std::string_view s) {
  const bool neg = s.starts_with('-');
  if (neg) s.remove_prefix(1);
  if (s.empty()) throw std::invalid_argument("ops.def: a default integer has no digits");
  int64_t v = 0;
  for (char c : s) {
    if (!is_digit(c)) throw std::invalid_argument("ops.def: a default integer has a non-digit");
    v = v * 10 + (c - '0');
  }
  return neg ? -v : v;
}

// The entries of an integer list in IR text, `[1,2]`, each passed to f.
template <class F>
constexpr void for_each_int(std::string_view s, F&& f) {
  if (s.size() < 2 || !s.starts_with('[') || !s.ends_with(']'))
    throw std::invalid_argument("ops.def: a default integer list is not in brackets");
  s = s.substr(1, s.size() - 2);
  while (!s.empty()) {
    const size_t end = std::min(s.find(','), s.size());
    f(parse_int(s.substr(0, end)));
    s.remove_prefix(std::min(end + 1, s.size()));
  }
}

constexpr size_t count_ints(std::string_view s) {
  size_t n = 0;
  for_each_int(s, [&](int64_t) { ++n; });
  return n;
}

// One word of a schema: `name:kind`, `name?:kind` or `name?:kind=default`.
constexpr AttrSpec parse_word(std::string_view word) {
  const size_t colon = word.find(':');
  if (colon == std::string_view::npos)
    throw std::invalid_argument("ops.def: an attribute has no kind");
  std::string_view name = word.substr(0, colon), kind = word.substr(colon + 1), dflt;
  const bool optional = name.ends_with('?');
  if (optional) name.remove_suffix(1);
  if (const size_t eq = kind.find('='); eq != std::string_view::npos) {
    dflt = kind.substr(eq + 1);
    kind = kind.substr(0, eq);
    if (!optional || dflt.empty())
      throw std::invalid_argument("ops.def: a default needs an optional attribute and a value");
  }
  AttrKind k{};
  if (kind == "int")
    k = AttrKind::int_;
  else if (kind == "float")
    k = AttrKind::float_;
  else if (kind == "ints")
    k = AttrKind::ints;
  else if (kind == "floats")
    k = AttrKind::floats;
  else if (kind == "string")
    k = AttrKind::string;
  else
    throw std::invalid_argument("ops.def: an attribute has an unknown kind");
  if (k == AttrKind::int_ && !dflt.empty()) parse_int(dflt);
  if (k == AttrKind::ints && !dflt.empty()) count_ints(dflt);
  if (k != AttrKind::int_ && k != AttrKind::ints && !dflt.empty())
    throw std::invalid_argument("ops.def: only int and ints attributes have defaults");
  return {name, k, !optional, dflt};
}

inline constexpr size_t kMaxAttrs = 8;

struct OpSchema {
  std::array<AttrSpec, kMaxAttrs> specs{};
  size_t size = 0;
};

// Words separated by spaces, appended to `out`; each name once.
constexpr void parse_schema(std::string_view text, OpSchema& out) {
  while (!text.empty()) {
    const size_t end = std::min(text.find(' '), text.size());
    const std::string_view word = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    if (word.empty()) continue;
    if (out.size == kMaxAttrs)
      throw std::invalid_argument("ops.def: an op has too many attributes");
    const AttrSpec spec = parse_word(word);
    for (size_t i = 0; i < out.size; ++i)
      if (out.specs[i].name == spec.name)
        throw std::invalid_argument("ops.def: an op names an attribute twice");
    out.specs[out.size++] = spec;
  }
}

}  // namespace schema_detail

// Every op's schema: its own attributes followed by the common ones.
inline constexpr std::array<schema_detail::OpSchema, kNumOps> kOpSchemas = [] {
  std::array<schema_detail::OpSchema, kNumOps> t{};
  for (const OpInfo& info : kOpTable) {
    schema_detail::parse_schema(info.attrs, t[size_t(info.op)]);
    schema_detail::parse_schema(kCommonAttrs, t[size_t(info.op)]);
  }
  return t;
}();

// The op's own attributes followed by the common ones, in the order written.
constexpr std::span<const AttrSpec> attr_schema(Op op) {
  const schema_detail::OpSchema& s = kOpSchemas[size_t(op)];
  return {s.specs.data(), s.size};
}

// The op's attribute `name`, or nothing when its schema has none. A value,
// not a pointer into the table: with -fsanitize=undefined, GCC does not
// take a test of such a pointer as a constant expression.
constexpr std::optional<AttrSpec> find_attr_spec(Op op, std::string_view name) {
  for (const AttrSpec& s : attr_schema(op))
    if (s.name == name) return s;
  return std::nullopt;
}

AttrKind attr_kind(const AttrValue& v);
// "an integer", "a float", "an integer list", "a float list", "a string".
const char* attr_kind_name(AttrKind k);

// An empty string when `attrs` fits the op's schema, else what is wrong,
// naming the attribute: "unknown attribute 'strides' (conv2d takes stride,
// padding, dilation, groups, recompute)".
std::string check_attrs(Op op, const Attrs& attrs);

}  // namespace ws::ir
