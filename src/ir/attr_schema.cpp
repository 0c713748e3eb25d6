#include "ir/attr_schema.hpp"

#include "ir/attr.hpp"

#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>

namespace ws::ir {

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

namespace attr_detail {

std::vector<int64_t> int_list(std::string_view text) {
  std::vector<int64_t> v;
  schema_detail::for_each_int(text, [&](int64_t i) { v.push_back(i); });
  return v;
}

void check_op(OpSet ops, Op op, std::string_view name) {
  WS_CHECK(ops.contains(op)) << "attribute '" << name << "' read from a " << op_name(op)
                             << " node, outside the ops the code names";
}

}  // namespace attr_detail

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
    if (s.required && !attrs.find(s.name))
      return fmt::format("{} needs {} attribute '{}'", op_name(op), attr_kind_name(s.kind), s.name);
  return "";
}

}  // namespace ws::ir
