#include "ir/attr_schema.hpp"

#include <array>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>

namespace ws::ir {
namespace {

// "name:kind" or "name?:kind" words, separated by spaces.
void parse_specs(std::string_view text, std::vector<AttrSpec>& out) {
  while (!text.empty()) {
    const size_t end = std::min(text.find(' '), text.size());
    std::string_view word = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    if (word.empty()) continue;
    const size_t colon = word.find(':');
    WS_CHECK(colon != std::string_view::npos) << "ops.def: attribute '" << word << "' has no kind";
    std::string_view name = word.substr(0, colon), kind = word.substr(colon + 1);
    const bool optional = name.ends_with('?');
    if (optional) name.remove_suffix(1);
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
      WS_CHECK(false) << "ops.def: attribute '" << word << "' has an unknown kind";
    out.push_back({name, k, !optional});
  }
}

const std::array<std::vector<AttrSpec>, kNumOps>& schemas() {
  static const auto table = [] {
    std::array<std::vector<AttrSpec>, kNumOps> t;
    for (const OpInfo& info : kOpTable) {
      parse_specs(info.attrs, t[size_t(info.op)]);
      parse_specs(kCommonAttrs, t[size_t(info.op)]);
    }
    return t;
  }();
  return table;
}

}  // namespace

std::span<const AttrSpec> attr_schema(Op op) { return schemas()[size_t(op)]; }

AttrKind attr_kind(const AttrValue& v) {
  return std::visit(
      [](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) return AttrKind::int_;
        if constexpr (std::is_same_v<T, double>) return AttrKind::float_;
        if constexpr (std::is_same_v<T, std::vector<int64_t>>) return AttrKind::ints;
        if constexpr (std::is_same_v<T, std::vector<double>>) return AttrKind::floats;
        if constexpr (std::is_same_v<T, std::string>) return AttrKind::string;
      },
      v);
}

const char* attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::int_: return "an integer";
    case AttrKind::float_: return "a float";
    case AttrKind::ints: return "an integer list";
    case AttrKind::floats: return "a float list";
    case AttrKind::string: return "a string";
  }
  return "?";
}

std::string check_attrs(Op op, const Attrs& attrs) {
  const std::span<const AttrSpec> schema = attr_schema(op);
  for (const auto& [name, value] : attrs.items()) {
    const AttrSpec* spec = nullptr;
    for (const AttrSpec& s : schema)
      if (s.name == name) spec = &s;
    if (!spec) {
      std::vector<std::string_view> names;
      for (const AttrSpec& s : schema) names.push_back(s.name);
      return fmt::format("unknown attribute '{}' ({} takes {})", name, op_name(op),
                         fmt::join(names, ", "));
    }
    if (attr_kind(value) != spec->kind)
      return fmt::format("attribute '{}' must be {}, got {}", name, attr_kind_name(spec->kind),
                         attr_kind_name(attr_kind(value)));
  }
  for (const AttrSpec& s : schema)
    if (s.required && !attrs.has(std::string(s.name)))
      return fmt::format("{} needs {} attribute '{}'", op_name(op), attr_kind_name(s.kind), s.name);
  return "";
}

}  // namespace ws::ir
