// Printing a Graph in its stable text form (the format is described in
// text.hpp). The printer never looks anything up in the graph beyond the node
// it prints, so it also prints invalid graphs (useful when verify() fails).
#include <cctype>
#include <string>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include "ir/text.hpp"

namespace ws::ir {

std::string escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// Names made of these characters print bare; anything else prints quoted.
bool is_ident(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  return true;
}

void put_string(std::string& out, std::string_view s) { out += '"' + escaped(s) + '"'; }

void put_name(std::string& out, std::string_view s) {
  if (is_ident(s))
    out += s;
  else
    put_string(out, s);
}

// Shortest text that reads back as the same double, always distinguishable
// from an integer: 0.0, 0.1, 1e-05, 1e+300, -0.0, inf, -inf, nan.
void put_double(std::string& out, double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".ein") == std::string::npos) s += ".0";
  out += s;
}

void put_attr_value(std::string& out, const AttrValue& value) {
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          out += fmt::format("{}", v);
        } else if constexpr (std::is_same_v<T, double>) {
          put_double(out, v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          out += fmt::format("[{}]", fmt::join(v, ","));
        } else if constexpr (std::is_same_v<T, std::string>) {
          put_string(out, v);
        } else {
          static_assert(std::is_same_v<T, std::vector<double>>);
          out += "f64[";
          for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ',';
            put_double(out, v[i]);
          }
          out += ']';
        }
      },
      value);
}

// The string attribute `name` of `n`, or nullptr.
const std::string* string_attr(const Node& n, const std::string& name) {
  return n.attrs.has(name) ? std::get_if<std::string>(&n.attrs.get(name)) : nullptr;
}

void put_lines(std::string& out, const Graph& g, const std::string& indent,
               const PrintOptions& opts);

void put_node(std::string& out, ValueId id, const Node& n, const std::string& indent,
              const PrintOptions& opts) {
  out += fmt::format("{}%{} = {}", indent, id, op_name(n.op));
  // `input <role> "<name>"` when the node has a well-formed role and name;
  // otherwise the generic form, which prints them as ordinary attributes.
  const std::string* role = n.op == Op::input ? string_attr(n, "role") : nullptr;
  const std::string* name = n.op == Op::input ? string_attr(n, "name") : nullptr;
  bool special = role && name && is_ident(*role);
  if (special) {
    out += ' ';
    out += *role;
    out += ' ';
    put_string(out, *name);
  }
  for (size_t i = 0; i < n.args.size(); ++i) out += fmt::format("{}%{}", i ? ", " : " ", n.args[i]);
  bool first = true;
  for (const auto& [key, value] : n.attrs.items()) {
    if (special && (key == "role" || key == "name")) continue;
    out += first ? " {" : ", ";
    first = false;
    put_name(out, key);
    out += '=';
    put_attr_value(out, value);
  }
  if (!first) out += '}';
  out += " : ";
  out += n.type.str();
  if (opts.locations && n.loc.known()) {
    out += " @ ";
    put_string(out, n.loc.file);
    out += fmt::format(":{}", n.loc.line);
  }
  if (n.body) {  // a fusion's body, one level deeper, closed by '}'
    out += " {\n";
    put_lines(out, *n.body, indent + "  ", opts);
    out += indent + "}";
  }
  out += '\n';
}

// The lines between a graph's braces.
void put_lines(std::string& out, const Graph& g, const std::string& indent,
               const PrintOptions& opts) {
  std::vector<ValueId> input_nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    put_node(out, ValueId(i), g.nodes[i], indent, opts);
    if (g.nodes[i].op == Op::input) input_nodes.push_back(ValueId(i));
  }
  // The input list is implied by the input nodes in order; it is spelled out
  // only when it differs, so that every graph round-trips exactly.
  if (g.inputs != input_nodes) {
    out += indent + "inputs";
    for (size_t i = 0; i < g.inputs.size(); ++i)
      out += fmt::format("{}%{}", i ? ", " : " ", g.inputs[i]);
    out += '\n';
  }
  for (const Output& o : g.outputs) {
    out += fmt::format("{}out {} %{}", indent, role_name(o.role), o.value);
    if (o.aliased_input != kNoValue) out += fmt::format(" -> %{}", o.aliased_input);
    out += ' ';
    put_string(out, o.name);
    out += '\n';
  }
}

}  // namespace

std::string print(const Graph& g, const PrintOptions& opts) {
  std::string out = "graph ";
  put_name(out, g.name);
  out += " {\n";
  put_lines(out, g, "  ", opts);
  out += "}\n";
  return out;
}

}  // namespace ws::ir
