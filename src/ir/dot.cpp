#include "ir/dot.hpp"

#include <cctype>

#include <fmt/format.h>

#include "ir/attr.hpp"
#include "ir/text.hpp"

namespace ws::ir {
namespace {

constexpr const char* kStageColor[] = {"lightblue", "lightpink", "palegreen"};
// The looks the nodes and the legend share.
constexpr const char* kBetweenLook = "fillcolor=lavender, peripheries=2, penwidth=2";
constexpr const char* kRecomputedStyle = "style=\"filled,dashed\"";
std::string stage_look(Stage s) { return fmt::format("fillcolor={}", kStageColor[size_t(s)]); }
// A parameter, or other state kept across steps (buffer, optimizer state,
// random stream); `update`: the output written in its place.
std::string stored_look(bool param, bool update = false) {
  return fmt::format("shape=cylinder, fillcolor={}{}", param ? "gold" : "khaki",
                     update ? ", penwidth=3" : "");
}

std::string bytes_str(size_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < (1 << 20)) return fmt::format("{:.1f} KiB", double(b) / 1024);
  return fmt::format("{:.2f} MiB", double(b) / (1 << 20));
}

// A Graphviz name made of letters, digits and '_'.
std::string ident(std::string_view s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

bool is_source(const Node& n) {
  return n.op == Op::input || n.op == Op::full || n.op == Op::constant;
}

bool persistent(InputRole r) {
  return r == InputRole::param || r == InputRole::buffer || r == InputRole::opt_state ||
         r == InputRole::rng;
}

// Shape and fill of a value by what it is.
std::string look(const Graph& g, ValueId v, DotMark mark) {
  const Node& n = g.node(v);
  if (n.op == Op::input) {
    const InputRole r = g.input_role(v);
    if (persistent(r)) return stored_look(r == InputRole::param);
    if (r == InputRole::saved || r == InputRole::grad) return kBetweenLook;
    return "shape=ellipse, fillcolor=white";
  }
  if (is_source(n)) return "shape=ellipse, fillcolor=white, fontsize=8";
  std::string s = stage_look(n.stage);
  if (n.op == Op::fusion) s += ", shape=box3d";
  if (mark == DotMark::recomputed || attr<kAllOps, "recompute">(n))
    s += std::string(", ") + kRecomputedStyle;
  if (mark == DotMark::saved) s += ", peripheries=2, penwidth=2";
  return s;
}

std::string label(const Graph& g, ValueId v, DotMark mark) {
  const Node& n = g.node(v);
  std::string head = fmt::format("%{} {}", v, op_name(n.op));
  if (n.op == Op::input)
    head = fmt::format("%{} {}\\n{}", v, role_name(g.input_role(v)), escaped(g.input_name(v)));
  else if (n.op == Op::full)
    head += fmt::format(" {}", attr<Op::full, "value">(n));
  else if (n.op == Op::fusion)
    head += fmt::format(" ({})", attr<Op::fusion, "kind">(n));
  else if (n.op == Op::matmul_bias && attr<Op::matmul_bias, "activation">(n))
    head += fmt::format(" +{}", escaped(*attr<Op::matmul_bias, "activation">(n)));
  std::string s = head + "\\n" + n.type.str();
  const bool between = n.op == Op::input &&
                       (g.input_role(v) == InputRole::saved || g.input_role(v) == InputRole::grad);
  if (mark == DotMark::saved || between) s += "\\n" + bytes_str(n.type.bytes());
  if (mark == DotMark::recomputed || attr<kAllOps, "recompute">(n)) s += "\\nrecomputed";
  return s;
}

class Writer {
 public:
  explicit Writer(const DotOptions& o) : opts_(o) {}

  // The nodes of `g` (and its fusions' bodies) named "<prefix>_<id>".
  void nodes(const Graph& g, const std::string& prefix, const std::vector<DotMark>& marks,
             const std::string& indent) {
    auto mark_of = [&](ValueId v) {
      return size_t(v) < marks.size() ? marks[size_t(v)] : DotMark::none;
    };
    auto drawn = [&](ValueId v) { return opts_.sources || !is_source(g.node(v)); };
    for (ValueId v = 0; v < g.size(); ++v) {
      const Node& n = g.node(v);
      if (!drawn(v)) continue;
      const std::string name = fmt::format("{}_{}", prefix, v);
      std::string in = indent;
      if (n.body) {  // a cluster of the body's ops around the fusion node
        out += fmt::format(
            "{}subgraph cluster_{} {{\n{}  label=\"fused kernel %{}\"; style=\"rounded,dashed\"; "
            "color=gray40; fontsize=9;\n",
            indent, name, indent, v);
        in += "  ";
        nodes(*n.body, name, {}, in);
        for (const Output& o : n.body->outputs)
          if (opts_.sources || !is_source(n.body->node(o.value)))
            out += fmt::format("{}{}_{} -> {} [style=dotted];\n", in, name, o.value, name);
      }
      out += fmt::format("{}{} [label=\"{}\", {}];\n", in, name, label(g, v, mark_of(v)),
                         look(g, v, mark_of(v)));
      if (n.body) out += indent + "}\n";
      for (size_t i = 0; i < n.args.size(); ++i) {
        const ValueId a = n.args[i];
        if (!drawn(a)) continue;
        // A fusion's operand i feeds its body's input i.
        const bool into_body = n.body && opts_.sources;
        out += fmt::format("{}{}_{} -> {}{}{};\n", indent, prefix, a, name,
                           into_body ? fmt::format("_{}", n.body->inputs[i]) : "",
                           into_body ? " [style=dotted]" : "");
      }
    }
  }

  void outputs(const Graph& g, const std::string& prefix, const std::string& indent) {
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      const Output& o = g.outputs[i];
      const std::string name = fmt::format("{}_out{}", prefix, i);
      std::string style = "shape=oval, fillcolor=white, penwidth=2";
      std::string text = fmt::format("out {} {}", role_name(o.role), escaped(o.name));
      if (o.role == OutputRole::saved || o.role == OutputRole::grad) {
        text = fmt::format("out {}", escaped(o.name));  // named "saved.%12", "grad.fc1.weight"
        style = kBetweenLook;
        text += fmt::format("\\n{}", bytes_str(g.type(o.value).bytes()));
      } else if (o.role == OutputRole::update) {
        style = stored_look(g.input_role(o.aliased_input) == InputRole::param, true);
        text += fmt::format("\\nwritten in place of %{}", o.aliased_input);
      }
      out += fmt::format("{}{} [label=\"{}\", {}];\n", indent, name, text, style);
      if (opts_.sources || !is_source(g.node(o.value)))
        out += fmt::format("{}{}_{} -> {};\n", indent, prefix, o.value, name);
    }
  }

  // Dashed edges from each value a graph sends (saved, grad) to the input
  // of that name in a later graph.
  void interfaces(const std::vector<DotGraph>& graphs, const std::vector<std::string>& prefixes) {
    for (size_t k = 1; k < graphs.size(); ++k) {
      const Graph& g = *graphs[k].graph;
      for (ValueId v : g.inputs) {
        if (g.input_role(v) != InputRole::saved && g.input_role(v) != InputRole::grad) continue;
        for (size_t j = 0; j < k; ++j)
          for (size_t i = 0; i < graphs[j].graph->outputs.size(); ++i)
            if (graphs[j].graph->outputs[i].name == g.input_name(v))
              out += fmt::format("  {}_out{} -> {}_{} [style=dashed, color=gray40];\n", prefixes[j],
                                 i, prefixes[k], v);
      }
    }
  }

  void legend() {
    struct Entry {
      const char* name;
      const char* text;
      std::string look;
    };
    const Entry entries[] = {
        {"forward", "forward op", stage_look(Stage::forward)},
        {"backward", "backward op", stage_look(Stage::backward)},
        {"optimizer", "optimizer op", stage_look(Stage::optimizer)},
        {"recomputed", "forward op recomputed\\nin the backward",
         stage_look(Stage::forward) + ", " + kRecomputedStyle},
        {"param", "parameter (input)", stored_look(true)},
        {"update", "update written in place\\nof its input (output)", stored_look(true, true)},
        {"state", "buffer, optimizer state,\\nrandom stream", stored_look(false)},
        {"between", "value passed between\\ngraphs, with its bytes", kBetweenLook},
        {"other", "data, hyperparameter,\\nconstant", "shape=ellipse, fillcolor=white"},
        {"fusion", "fused kernel: a dashed box\\nof its ops, then the fusion",
         stage_look(Stage::forward) + ", shape=box3d"},
    };
    out += "  subgraph cluster_legend {\n    label=\"legend\"; style=rounded;\n";
    for (const Entry& e : entries)
      out += fmt::format("    legend_{} [label=\"{}\", {}];\n", e.name, e.text, e.look);
    for (size_t i = 1; i < std::size(entries); ++i)
      out += fmt::format("    legend_{} -> legend_{} [style=invis];\n", entries[i - 1].name,
                         entries[i].name);
    out += "  }\n";
  }

  std::string out;

 private:
  const DotOptions& opts_;
};

}  // namespace

std::string to_dot(const std::vector<DotGraph>& graphs, const DotOptions& opts) {
  Writer w(opts);
  w.out =
      fmt::format("digraph {} {{\n  rankdir=TB;\n  node [shape=box, style=filled, fontsize=10];\n",
                  ident(opts.name));
  std::vector<std::string> prefixes;
  for (size_t k = 0; k < graphs.size(); ++k) {
    std::string p = ident(graphs[k].graph->name);
    for (const std::string& q : prefixes)
      if (q == p) p += fmt::format("{}", k);
    prefixes.push_back(p);
  }
  for (size_t k = 0; k < graphs.size(); ++k) {
    const DotGraph& dg = graphs[k];
    std::string indent = "  ";
    if (dg.cluster) {
      w.out += fmt::format(
          "  subgraph cluster_{} {{\n    label=\"{} graph\"; fontsize=16; style=rounded;\n",
          prefixes[k], escaped(dg.graph->name));
      indent += "  ";
    }
    w.nodes(*dg.graph, prefixes[k], dg.marks, indent);
    if (opts.outputs) w.outputs(*dg.graph, prefixes[k], indent);
    if (dg.cluster) w.out += "  }\n";
  }
  if (opts.outputs && opts.sources) w.interfaces(graphs, prefixes);
  if (opts.legend) w.legend();
  w.out += "}\n";
  return w.out;
}

}  // namespace ws::ir
