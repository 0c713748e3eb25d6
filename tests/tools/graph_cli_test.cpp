// `wholestep graph`: the SVG Graphviz renders holds every node of every
// compiled graph (and of every fused kernel's body), coloured by stage,
// with each in-place update and each value passed between graphs; without
// Graphviz the DOT file is written with a hint; bad flags are usage errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "lower/lower.hpp"
#include "partition/min_cut.hpp"
#include "step/capture_step.hpp"
#include "wholestep/models.hpp"

namespace ws {
namespace {

using namespace testing;

// One `<g class="node">` of a Graphviz SVG: its title (the DOT node name),
// its text lines joined by '\n', and its first fill colour.
struct SvgNode {
  std::string title, text, fill;
};

std::string unescape(std::string s) {
  const std::pair<const char*, const char*> entities[] = {{"&#45;", "-"}, {"&gt;", ">"},
                                                          {"&lt;", "<"},  {"&quot;", "\""},
                                                          {"&#39;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : entities)
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + 1))
      s.replace(p, std::string(from).size(), to);
  return s;
}

// Each piece of s between `open` and `close`.
std::vector<std::string> pieces(const std::string& s, const std::string& open,
                                const std::string& close) {
  std::vector<std::string> out;
  for (size_t a = s.find(open); a != std::string::npos; a = s.find(open, a + 1)) {
    const size_t b = s.find(close, a + open.size());
    out.push_back(s.substr(a + open.size(), b - a - open.size()));
  }
  return out;
}

// Graphviz writes each node as <g id="nodeN" class="node"><title>..</title>
// shapes.. <text ..>..</text>..</g>, with no nested groups.
std::vector<SvgNode> svg_nodes(const std::string& svg) {
  std::vector<SvgNode> nodes;
  const std::string marker = "class=\"node\">";
  for (size_t p = svg.find(marker); p != std::string::npos; p = svg.find(marker, p + 1)) {
    const std::string group = svg.substr(p, svg.find("</g>", p) - p);
    SvgNode n{unescape(pieces(group, "<title>", "</title>").at(0)), "",
              pieces(group, "fill=\"", "\"").at(0)};
    for (const std::string& t : pieces(group, "<text", "</text>"))
      n.text += (n.text.empty() ? "" : "\n") + unescape(t.substr(t.find('>') + 1));
    nodes.push_back(n);
  }
  return nodes;
}

// "forward_12" -> {"forward", 12, -1}; "forward_12_3" -> {"forward", 12, 3};
// anything else (outputs, the legend) -> {"", -1, -1}.
struct NodeName {
  std::string graph;
  int value = -1, body_value = -1;
};
NodeName parse_name(const std::string& title, const std::vector<std::string>& graphs) {
  for (const std::string& g : graphs) {
    if (title.rfind(g + "_", 0) != 0) continue;
    const std::string rest = title.substr(g.size() + 1);
    size_t used = 0;
    if (rest.empty() || !std::isdigit(static_cast<unsigned char>(rest[0]))) return {};
    NodeName n{g, std::stoi(rest, &used)};
    if (used == rest.size()) return n;
    if (rest[used] != '_') return {};
    n.body_value = std::stoi(rest.substr(used + 1));
    return n;
  }
  return {};
}

// The graphs the command line compiles for mlp (SGD with momentum 0.9, its
// default), partitioned as TrainStep does, and lowered.
struct MlpGraphs {
  MlpGraphs() {
    manual_seed(0);
    const models::Spec spec = models::spec("mlp");
    auto model = models::make(spec);
    optim::SGD opt(*model, {.lr = spec.lr, .momentum = 0.9});
    std::vector<ir::Type> types;
    for (const Tensor& t : models::random_batch(spec, 0)) types.push_back({t.dtype(), t.shape()});
    step::CapturedStep cap = step::capture_step(*model, opt, models::loss_fn(*model), types, {});
    const partition::RematPlan plan = partition::min_cut(cap.joint);
    joint_nodes = cap.joint.graph.size();
    saved = int64_t(plan.saved.size());
    partition::ThreeGraphs three = partition::three_graphs(cap.joint, plan);
    partitioned = {three.forward, three.backward, three.optimizer};
    for (const ir::Graph& g : partitioned) {
      lowered.emplace_back();
      lower::lower(g, {}, &lowered.back());
    }
    lower::lower(partition::single_graph(partition::recompute_in_backward(cap.joint, plan)), {},
                 &single_lowered);
  }
  std::vector<ir::Graph> partitioned, lowered;
  ir::Graph single_lowered;
  int64_t joint_nodes = 0, saved = 0;  // the joint graph, and the values its forward saves
};

std::vector<SvgNode> render(const std::string& args, const std::string& file) {
  const std::string dir = temp_dir("graph");
  const Result r = run(fmt::format("graph --model mlp --threads 1 {} -o {}/{}", args, dir, file));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("wrote " + dir + "/" + file), std::string::npos) << r.out;
  const std::string svg = slurp(dir + "/" + file);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << svg.substr(0, 200);
  return svg_nodes(svg);
}

// Every node of the forward, backward and optimizer graphs is drawn once,
// in its graph's colour (a copy the backward recomputes in the forward's),
// with the outputs: updates written in place, values passed on with their
// bytes.
TEST(CliGraph, ThreeGraphSvgDrawsEveryNodeOfEachGraph) {
  const MlpGraphs want;
  const std::vector<SvgNode> nodes = render("--mode three_graph --stage partitioned", "s.svg");
  const std::vector<std::string> names = {"forward", "backward", "optimizer"};
  const char* colour[] = {"lightblue", "lightpink", "palegreen"};
  std::map<std::string, int> count, outputs;
  std::vector<std::string> legend;
  for (const SvgNode& n : nodes) {
    const NodeName nn = parse_name(n.title, names);
    if (n.title.rfind("legend_", 0) == 0) legend.push_back(n.title);
    if (nn.graph.empty()) {
      for (const std::string& g : names) outputs[g] += n.title.rfind(g + "_out", 0) == 0;
      continue;
    }
    EXPECT_EQ(nn.body_value, -1) << n.title;
    ++count[nn.graph];
    const size_t k = size_t(std::find(names.begin(), names.end(), nn.graph) - names.begin());
    const ir::Graph& g = want.partitioned[k];
    const ir::Node& node = g.node(nn.value);
    const std::string head = fmt::format(
        "%{} {}", nn.value,
        node.op == ir::Op::input ? ir::role_name(g.input_role(nn.value)) : ir::op_name(node.op));
    EXPECT_EQ(n.text.rfind(head, 0), 0u) << n.title << ": " << n.text;
    if (node.op == ir::Op::input || node.op == ir::Op::full || node.op == ir::Op::constant)
      continue;
    EXPECT_EQ(n.fill, node.attrs.has("recompute") ? colour[0] : colour[k]) << n.title << n.text;
  }
  for (const char* entry : {"forward", "backward", "optimizer", "param", "update", "between"})
    EXPECT_NE(std::find(legend.begin(), legend.end(), std::string("legend_") + entry), legend.end())
        << entry;
  for (size_t k = 0; k < 3; ++k) {
    SCOPED_TRACE(names[k]);
    EXPECT_EQ(count[names[k]], want.partitioned[k].size());
    EXPECT_EQ(outputs[names[k]], int(want.partitioned[k].outputs.size()));
  }
  // The optimizer writes 6 parameters and 6 momentum buffers in place; the
  // forward's saved values are labelled with their bytes.
  int in_place = 0, saved = 0;
  for (const SvgNode& n : nodes)
    in_place += n.text.find("written in place of %") != std::string::npos;
  EXPECT_EQ(in_place, 12);
  for (size_t i = 0; i < want.partitioned[0].outputs.size(); ++i) {
    const ir::Output& o = want.partitioned[0].outputs[i];
    if (o.role != ir::OutputRole::saved) continue;
    ++saved;
    const size_t b = want.partitioned[0].type(o.value).bytes();
    const std::string bytes = b < 1024        ? fmt::format("{} B", b)
                              : b < (1 << 20) ? fmt::format("{:.1f} KiB", double(b) / 1024)
                                              : fmt::format("{:.2f} MiB", double(b) / (1 << 20));
    bool found = false;
    for (const SvgNode& n : nodes)
      found = found || (n.title == fmt::format("forward_out{}", i) &&
                        n.text == fmt::format("out {}\n{}", o.name, bytes));
    EXPECT_TRUE(found) << o.name << " " << bytes;
  }
  EXPECT_GT(saved, 0);
}

// Lowered, each fused kernel is a cluster with its body's ops.
TEST(CliGraph, LoweredSvgDrawsEachFusedKernelsBody) {
  const MlpGraphs want;
  const std::vector<SvgNode> nodes = render("--mode three_graph --stage lowered", "l.svg");
  const std::vector<std::string> names = {"forward", "backward", "optimizer"};
  std::map<std::pair<std::string, int>, int> body_nodes;
  std::map<std::string, int> count;
  for (const SvgNode& n : nodes) {
    const NodeName nn = parse_name(n.title, names);
    if (nn.graph.empty()) continue;
    if (nn.body_value >= 0)
      ++body_nodes[{nn.graph, nn.value}];
    else
      ++count[nn.graph];
  }
  int fusions = 0;
  for (size_t k = 0; k < 3; ++k) {
    const ir::Graph& g = want.lowered[k];
    EXPECT_EQ(count[names[k]], g.size()) << names[k];
    for (ir::ValueId v = 0; v < g.size(); ++v)
      if (g.node(v).body) {
        ++fusions;
        EXPECT_EQ(body_nodes[std::make_pair(names[k], v)], g.node(v).body->size())
            << names[k] << " %" << v;
      }
  }
  EXPECT_GT(fusions, 0);
}

// The single graph, lowered: all three stages keep their colour through the
// passes; SGD's update accumulated into its gradient's product
// (matmul_add) is the optimizer's.
TEST(CliGraph, SingleGraphLoweredKeepsEachNodesStage) {
  const MlpGraphs want;
  int64_t want_products = 0;
  for (const ir::Node& n : want.single_lowered.nodes) want_products += n.op == ir::Op::matmul_add;
  const std::vector<SvgNode> nodes = render("--mode single_graph --stage lowered", "g.svg");
  std::map<std::string, int> fills;
  int products_into_weights = 0;
  for (const SvgNode& n : nodes) {
    if (n.title.rfind("step_", 0) != 0 || n.title.rfind("step_out", 0) == 0) continue;
    ++fills[n.fill];
    if (n.text.find(" matmul_add\n") != std::string::npos) {
      ++products_into_weights;
      EXPECT_EQ(n.fill, "palegreen") << n.text;
    }
  }
  EXPECT_GT(fills["lightblue"], 0);
  EXPECT_GT(fills["lightpink"], 0);
  EXPECT_GT(fills["palegreen"], 0);
  EXPECT_EQ(products_into_weights, want_products);
  EXPECT_GT(want_products, 0);
}

// The joint graph as DOT: every node once, what the forward keeps for the
// backward double-bordered.
TEST(CliGraph, JointDotMarksWhatTheForwardKeeps) {
  const MlpGraphs want;
  const std::string dir = temp_dir("joint");
  const Result r = run(fmt::format(
      "graph --model mlp --threads 1 --mode three_graph --stage joint -o {}/j.dot", dir));
  EXPECT_EQ(r.status, 0) << r.err;
  const std::string dot = slurp(dir + "/j.dot");
  std::filesystem::remove_all(dir);
  int64_t nodes = 0, saved = 0;
  for (size_t p = dot.find("\n  joint_"); p != std::string::npos;
       p = dot.find("\n  joint_", p + 1)) {
    const std::string line = dot.substr(p + 1, dot.find('\n', p + 1) - p - 1);
    const std::string name = line.substr(2, line.find(' ', 2) - 2);
    if (line.find(" -> ") != std::string::npos || name.rfind("joint_out", 0) == 0) continue;
    ++nodes;
    saved += line.find("peripheries=2") != std::string::npos;
  }
  EXPECT_EQ(nodes, want.joint_nodes);
  EXPECT_EQ(saved, want.saved);
  EXPECT_GT(saved, 0);
}

// Without Graphviz on PATH, an .svg request writes the DOT file beside it
// and says how to render it.
TEST(CliGraph, WithoutGraphvizWritesTheDotFileAndAHint) {
  const std::string dir = temp_dir("nodot");
  const Result r =
      run(fmt::format("graph --model tiny_mlp --threads 1 -o {}/t.svg", dir), "PATH=" + dir);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("apt-get install graphviz"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("dot -Tsvg {}/t.dot -o {}/t.svg", dir, dir)), std::string::npos)
      << r.out;
  EXPECT_EQ(slurp(dir + "/t.dot").rfind("digraph step {", 0), 0u);
  EXPECT_FALSE(std::filesystem::exists(dir + "/t.svg"));
  std::filesystem::remove_all(dir);
}

TEST(CliGraph, BadFlagsAreUsageErrors) {
  const std::string dir = temp_dir("graph_flags");
  const std::string out = " -o " + dir + "/x.svg";
  expect_usage_error("graph --mode interpret" + out, "--mode interpret: graph draws a compiled");
  expect_usage_error("graph --mode fast" + out,
                     "--mode fast: must be interpret, three_graph or single_graph");
  expect_usage_error("graph --stage final" + out,
                     "--stage final: expected joint, partitioned or lowered");
  expect_usage_error("graph --model resnet" + out, "--model resnet: unknown model 'resnet'");
  expect_usage_error("graph -o " + dir + "/x.png",
                     "-o " + dir + "/x.png: expected a file name ending in .svg or .dot");
  expect_usage_error("graph -o " + dir + "/no/such/x.svg", "cannot write in");
  expect_usage_error("graph --model mlp", "--output is required");
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ws
