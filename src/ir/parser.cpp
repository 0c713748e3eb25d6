// Parsing the text form of a Graph (see text.hpp): a hand-written lexer and a
// recursive-descent parser over lines. The parser computes nothing: types come
// from the text and verify() judges the result.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "ir/text.hpp"
#include "ir/verify.hpp"

namespace ws::ir {
namespace {

enum class Tok { end, newline, ident, number, value, string, punct };

struct Token {
  Tok kind = Tok::end;
  std::string text;  // identifier, number, digits after '%', unescaped string, punctuation
  int line = 1;
};

[[noreturn]] void fail_at(int line, const std::string& what) {
  throw Error(fmt::format("parse error at line {}: {}", line, what));
}

std::string describe(const Token& t) {
  std::string text = t.text.size() > 24 ? t.text.substr(0, 24) + "..." : t.text;
  switch (t.kind) {
    case Tok::end: return "end of input";
    case Tok::newline: return "end of line";
    case Tok::value: return "'%" + text + "'";
    case Tok::string: return "string \"" + text + "\"";
    default: return "'" + text + "'";
  }
}

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  const Token& peek() {
    if (!has_) tok_ = lex(), has_ = true;
    return tok_;
  }
  Token next() {
    peek();
    has_ = false;
    return std::move(tok_);
  }

 private:
  char at(size_t i) const { return i < s_.size() ? s_[i] : '\0'; }

  Token lex() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '#')  // a comment, to the end of the line
      while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
    Token t{Tok::end, "", line_};
    if (pos_ >= s_.size()) return t;
    size_t start = pos_;
    char c = s_[pos_];
    if (c == '\n') {
      ++pos_, ++line_;
      t.kind = Tok::newline;
    } else if (is_ident_start(c)) {
      while (pos_ < s_.size() && is_ident_char(s_[pos_])) ++pos_;
      t.kind = Tok::ident;
    } else if (is_digit(c) ||
               (c == '-' && (is_digit(at(pos_ + 1)) || is_ident_start(at(pos_ + 1))))) {
      // Numbers: 12, -3, 0.5, 1e-05, -inf. The run is checked when converted.
      ++pos_;
      while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) ||
                                  s_[pos_] == '.' || s_[pos_] == '+' || s_[pos_] == '-'))
        ++pos_;
      t.kind = Tok::number;
    } else if (c == '%') {
      ++pos_;
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
      if (pos_ == start + 1) fail_at(line_, "expected a value number after '%'");
      t.kind = Tok::value;
      ++start;
    } else if (c == '"') {
      t.kind = Tok::string;
      t.text = lex_string();
      return t;
    } else if (c == '-' && at(pos_ + 1) == '>') {
      pos_ += 2;
      t.kind = Tok::punct;
    } else if (std::string_view("={}:,[]@").find(c) != std::string_view::npos) {
      ++pos_;
      t.kind = Tok::punct;
    } else {
      bool printable = std::isprint(static_cast<unsigned char>(c));
      fail_at(line_, printable ? fmt::format("unexpected character '{}'", c)
                               : fmt::format("unexpected byte 0x{:02x}", uint8_t(c)));
    }
    t.text = std::string(s_.substr(start, pos_ - start));
    return t;
  }

  std::string lex_string() {
    std::string out;
    for (++pos_;; ++pos_) {
      if (pos_ >= s_.size() || s_[pos_] == '\n') fail_at(line_, "unterminated string");
      char c = s_[pos_];
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        continue;
      }
      char e = at(++pos_);
      if (e == '"' || e == '\\')
        out += e;
      else if (e == 'n')
        out += '\n';
      else
        fail_at(line_, "unknown escape in string (only \\\" \\\\ \\n are allowed)");
    }
    ++pos_;
    return out;
  }

  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
  Token tok_;
  bool has_ = false;
};

bool is_int_text(std::string_view s) {
  if (!s.empty() && s[0] == '-') s.remove_prefix(1);
  if (s.empty()) return false;
  for (char c : s)
    if (!is_digit(c)) return false;
  return true;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : lex_(text) {}

  Graph parse() {
    skip_blank_lines();
    expect_keyword("graph", "at the start of the text");
    Graph g;
    g.name = parse_name("after 'graph'");
    expect_punct("{", "after the graph name");
    expect_eol("after '{'");
    parse_lines(g);
    skip_blank_lines();
    if (lex_.peek().kind != Tok::end) fail(lex_.peek(), "expected end of input after '}'");
    return g;
  }

 private:
  // The lines between a graph's braces, and the closing '}'.
  void parse_lines(Graph& g) {
    bool has_inputs_line = false;
    for (;;) {
      skip_blank_lines();
      const Token& t = lex_.peek();
      if (t.kind == Tok::value && !has_inputs_line && g.outputs.empty()) {
        parse_node(g);
      } else if (is_keyword(t, "inputs") && !has_inputs_line && g.outputs.empty()) {
        parse_inputs(g);
        has_inputs_line = true;
      } else if (is_keyword(t, "out")) {
        parse_output(g);
      } else if (t.kind == Tok::punct && t.text == "}") {
        lex_.next();
        break;
      } else {
        const char* what = g.outputs.empty() && !has_inputs_line
                               ? "a node '%N = ...', 'inputs', 'out' or '}'"
                               : "an 'out' line or '}' (nodes and 'inputs' come before outputs)";
        fail(t, fmt::format("expected {}", what));
      }
    }
    if (!has_inputs_line)
      for (size_t i = 0; i < g.nodes.size(); ++i)
        if (g.nodes[i].op == Op::input) g.inputs.push_back(ValueId(i));
  }

  [[noreturn]] void fail(const Token& t, const std::string& what) {
    fail_at(t.line, fmt::format("{}, got {}", what, describe(t)));
  }
  static bool is_keyword(const Token& t, std::string_view word) {
    return t.kind == Tok::ident && t.text == word;
  }
  bool accept_punct(std::string_view p) {
    if (lex_.peek().kind != Tok::punct || lex_.peek().text != p) return false;
    lex_.next();
    return true;
  }
  void expect_punct(std::string_view p, std::string_view context) {
    if (!accept_punct(p)) fail(lex_.peek(), fmt::format("expected '{}' {}", p, context));
  }
  void expect_keyword(std::string_view word, std::string_view context) {
    if (!is_keyword(lex_.peek(), word))
      fail(lex_.peek(), fmt::format("expected '{}' {}", word, context));
    lex_.next();
  }
  Token expect(Tok kind, std::string_view what, std::string_view context) {
    if (lex_.peek().kind != kind) fail(lex_.peek(), fmt::format("expected {} {}", what, context));
    return lex_.next();
  }
  void expect_eol(std::string_view context) {
    Tok k = lex_.peek().kind;
    if (k != Tok::newline && k != Tok::end)
      fail(lex_.peek(), fmt::format("expected end of line {}", context));
    if (k == Tok::newline) lex_.next();
  }
  void skip_blank_lines() {
    while (lex_.peek().kind == Tok::newline) lex_.next();
  }

  std::string parse_name(std::string_view context) {
    Tok k = lex_.peek().kind;
    if (k != Tok::ident && k != Tok::string)
      fail(lex_.peek(), fmt::format("expected a name {}", context));
    return lex_.next().text;
  }

  // `%N` where N < limit (the node being parsed, or the number of nodes).
  ValueId parse_value(ValueId limit, std::string_view context, std::string_view why = "") {
    Token t = expect(Tok::value, "a value '%N'", context);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec != std::errc() || v >= limit)
      fail_at(t.line, fmt::format("%{} {} is not defined{}", t.text, context, why));
    return ValueId(v);
  }

  int64_t to_int(const Token& t, std::string_view context) {
    if (t.kind != Tok::number || !is_int_text(t.text))
      fail(t, fmt::format("expected an integer {}", context));
    int64_t v = 0;
    auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec != std::errc()) fail_at(t.line, fmt::format("integer {} is out of range", t.text));
    return v;
  }
  int64_t parse_int(std::string_view context) { return to_int(lex_.next(), context); }

  // A float: a number (integers allowed inside float lists), inf or nan.
  double to_double(const Token& t, std::string_view context) {
    bool named = t.kind == Tok::ident && (t.text == "inf" || t.text == "nan");
    if (t.kind != Tok::number && !named) fail(t, fmt::format("expected a number {}", context));
    double v = 0;
    const char* end = t.text.data() + t.text.size();
    auto [p, ec] = std::from_chars(t.text.data(), end, v);
    if (ec != std::errc() || p != end)
      fail_at(t.line, fmt::format("malformed number '{}'", t.text));
    return v;
  }

  Type parse_type() {
    Token t = expect(Tok::ident, "a type like f32[2,3]", "after ':'");
    Type type;
    bool found = false;
    for (DType d : {DType::f32, DType::f64, DType::i64, DType::b8})
      if (t.text == dtype_name(d)) type.dtype = d, found = true;
    if (!found) fail_at(t.line, fmt::format("unknown dtype '{}'", t.text));
    expect_punct("[", "after the dtype");
    if (accept_punct("]")) return type;
    do type.shape.push_back(parse_int("as a dimension"));
    while (accept_punct(","));
    expect_punct("]", "after the dimensions");
    return type;
  }

  AttrValue parse_attr_value() {
    Token t = lex_.next();
    if (t.kind == Tok::string) return t.text;
    if (t.kind == Tok::number && is_int_text(t.text)) return to_int(t, "");
    if (t.kind == Tok::number || is_keyword(t, "inf") || is_keyword(t, "nan"))
      return to_double(t, "");
    if (is_keyword(t, "f64")) {
      std::vector<double> values;
      expect_punct("[", "after 'f64' in a float list");
      if (accept_punct("]")) return values;
      do values.push_back(to_double(lex_.next(), "in a float list"));
      while (accept_punct(","));
      expect_punct("]", "after a float list");
      return values;
    }
    if (t.kind == Tok::punct && t.text == "[") {
      std::vector<int64_t> values;
      if (accept_punct("]")) return values;
      do values.push_back(parse_int("in an integer list"));
      while (accept_punct(","));
      expect_punct("]", "after an integer list");
      return values;
    }
    fail(t, "expected an attribute value (integer, float, [ints], f64[floats] or string)");
  }

  // `{` was read: `name=value, ...}` appended to `attrs`, which may hold
  // attributes already (an input's role and name).
  struct ParsedAttr {
    std::string name;
    int line;
    AttrValue value;
  };
  void parse_attrs(std::vector<ParsedAttr>& attrs) {
    if (accept_punct("}")) return;
    do {
      int line = lex_.peek().line;
      std::string key = parse_name("as an attribute name");
      expect_punct("=", "after the attribute name");
      attrs.push_back({std::move(key), line, parse_attr_value()});
    } while (accept_punct(","));
    expect_punct("}", "after attributes");
  }

  // Sorted once by name (a stable sort keeps each name's occurrences in text
  // order), so many attributes parse in n log n, not one insertion each.
  static Attrs sorted_attrs(std::vector<ParsedAttr> attrs) {
    std::stable_sort(attrs.begin(), attrs.end(),
                     [](const ParsedAttr& a, const ParsedAttr& b) { return a.name < b.name; });
    std::vector<std::pair<std::string, AttrValue>> kv;
    kv.reserve(attrs.size());
    for (size_t i = 0; i < attrs.size(); ++i) {
      if (!kv.empty() && attrs[i].name == kv.back().first)
        fail_at(attrs[i].line, fmt::format("duplicate attribute '{}'", attrs[i].name));
      kv.emplace_back(std::move(attrs[i].name), std::move(attrs[i].value));
    }
    return Attrs::from_sorted(std::move(kv));
  }

  void parse_node(Graph& g) {
    ValueId id = ValueId(g.nodes.size());
    Token t = lex_.next();
    if (t.text != std::to_string(id))
      fail_at(t.line,
              fmt::format("expected node %{} (nodes are numbered in order), got %{}", id, t.text));
    expect_punct("=", "after the node id");
    Token op_tok = expect(Tok::ident, "an op name", "after '='");
    std::optional<Op> op = op_from_name(op_tok.text);
    if (!op) fail_at(op_tok.line, fmt::format("unknown op '{}'", op_tok.text));
    Node n{*op, {}, {}, {}, {}, Stage::forward, nullptr};
    std::vector<ParsedAttr> attrs;
    if (*op == Op::input && lex_.peek().kind == Tok::ident) {
      Token role = lex_.next();
      InputRole r{};
      if (!parse_role(role.text, &r))
        fail_at(role.line, fmt::format("unknown input role '{}'", role.text));
      attrs.push_back({"role", role.line, role.text});
      attrs.push_back(
          {"name", role.line, expect(Tok::string, "a quoted input name", "after the role").text});
    }
    if (lex_.peek().kind == Tok::value) {
      do n.args.push_back(parse_value(id, "used as an operand", " yet (forward reference)"));
      while (accept_punct(","));
    }
    if (accept_punct("{")) parse_attrs(attrs);
    expect_punct(":", attrs.empty() ? "before the type" : "after attributes");
    n.attrs = sorted_attrs(std::move(attrs));
    n.type = parse_type();
    if (accept_punct("@")) {
      n.loc.file = expect(Tok::string, "a quoted file name", "after '@'").text;
      if (n.loc.file.empty()) fail_at(t.line, "the file name of a location must not be empty");
      expect_punct(":", "after the file name");
      int64_t line = parse_int("as the line number");
      if (line < 0 || line > std::numeric_limits<int>::max())
        fail_at(t.line, fmt::format("line number {} is out of range", line));
      n.loc.line = int(line);
    }
    if (accept_punct("{")) {  // a fusion's body, closed by '}' on a line of its own
      if (*op != Op::fusion)
        fail_at(t.line, fmt::format("only a fusion has a body, not {}", op_tok.text));
      expect_eol("after '{' opening a body");
      auto body = std::make_shared<Graph>();
      body->name = kBodyName;
      parse_lines(*body);
      n.body = std::move(body);
    }
    expect_eol("after the node");
    g.nodes.push_back(std::move(n));
  }

  void parse_inputs(Graph& g) {
    lex_.next();
    ValueId limit = ValueId(g.nodes.size());
    if (lex_.peek().kind == Tok::value) {
      do g.inputs.push_back(parse_value(limit, "in the input list"));
      while (accept_punct(","));
    }
    expect_eol("after the input list");
  }

  void parse_output(Graph& g) {
    lex_.next();
    Token role = expect(Tok::ident, "an output role", "after 'out'");
    Output o{};
    if (!parse_role(role.text, &o.role))
      fail_at(role.line, fmt::format("unknown output role '{}'", role.text));
    ValueId limit = ValueId(g.nodes.size());
    o.value = parse_value(limit, "used as an output");
    if (accept_punct("->")) o.aliased_input = parse_value(limit, "used as the aliased input");
    o.name = expect(Tok::string, "a quoted output name", "after the value").text;
    expect_eol("after the output");
    g.outputs.push_back(std::move(o));
  }

  Lexer lex_;
};

}  // namespace

Graph parse(std::string_view text) {
  Graph g = Parser(text).parse();
  try {
    verify(g);
  } catch (const InternalError& e) {
    throw Error(std::string("parsed graph is invalid: ") + e.what());
  }
  return g;
}

}  // namespace ws::ir
