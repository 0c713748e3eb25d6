// The differential tester of the compiler: random training steps
// (step_spec.hpp) compiled in every configuration and held to the
// interpreter, to a float64 evaluation, and to themselves.
//
// For each spec, two steps run from the same initial state in each
// configuration: the interpreter in float64 (the truth) and in float32 (the
// reference), then single_graph and three_graph, fused and not, without
// aliasing, without recomputation, with images stored channels last or in
// blocks, on 1 and 2 threads. Every parameter's
// change over the two steps, every buffer and every loss is compared:
//  - configurations that run the same kernels give the same bits: the same
//    program twice, and on 1 or 2 threads;
//  - every other configuration lies within 4x the float32 interpreter's
//    distance from float64, plus 2e-5 of the tensor's own scale (another
//    summation order of the same products), plus, for a parameter's
//    change, one unit in the last place of the parameter per step (a
//    change much smaller than its parameter is the difference of two
//    float32 roundings of it).
// A case that the float32 interpreter cannot run, or whose float32 or
// float64 result is not finite, is not counted. A mismatch must show on two
// inputs (a kink of relu or max met within rounding flips on one input
// alone); it is then shrunk to the smallest spec that still fails, printed,
// and written to --save DIR as <seed>.spec, which --replay runs again.
//
//   difftest --seconds 120 [--seed S] [--max-ops N] [--save DIR]
//                                (WS_DIFFTEST_SECONDS, when set, is the time)
//   difftest --replay DIR|FILE...
//   difftest --bisect GRAPH.ir   (the first lowering pass, or the program,
//                                 that changes the graph's bits)
//   difftest --kernels GRAPH.ir  (each fused kernel alone against the interpreter)
// Exit status 1 when any case failed. To look into a case: WS_DIFFTEST_CONFIG
// runs one configuration (by name; with WS_DUMP, its IR after every pass),
// WS_DIFFTEST_STEPS the number of steps (2), WS_DIFFTEST_VERBOSE prints
// every compared value of a mismatch and why a case was not runnable, and
// WS_DIFFTEST_PROGRAMS each compiled program.
//
// Not generated: ceil-mode pooling and bf16 (the IR has neither), integer
// data (gather, one_hot, cross-entropy: the losses here are tanh means),
// data parallelism (its collectives are tested under mpirun), and ops on
// more than 32768 elements (a case must take milliseconds).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "../lower/lowered_program.hpp"
#include "exec/interpreter.hpp"
#include "exec/program.hpp"
#include "ir/attr.hpp"
#include "ir/text.hpp"
#include "ir/verify.hpp"
#include "lower/lower.hpp"
#include "lower/pipeline.hpp"
#include "step_spec.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws::difftest {
namespace {

struct Config {
  const char* name;
  StepOptions opts;
  int threads;
};

// What two steps of one configuration leave: each loss, each parameter's
// change and each buffer, by name.
struct Outcome {
  std::vector<double> losses;
  std::vector<std::pair<std::string, std::vector<double>>> tensors;
  // Per tensor, the difference its storage alone can make: a parameter's
  // change is compared, and the parameter itself is rounded to float32 at
  // every step (one unit in the last place of its largest value, per step;
  // 0 for a buffer, compared as it is).
  std::vector<double> floors;
  bool finite = true;
};

std::unique_ptr<optim::Optimizer> make_optimizer(const Spec& s, nn::Module& m) {
  const double clip = s.clip ? 0.5 : 0;
  if (s.opt == OptKind::sgd)
    return std::make_unique<optim::SGD>(m,
                                        optim::SgdOptions{.lr = 0.1,
                                                          .momentum = s.momentum ? 0.9 : 0,
                                                          .dampening = s.nesterov ? 0 : 0.1,
                                                          .weight_decay = s.weight_decay ? 0.05 : 0,
                                                          .nesterov = s.nesterov,
                                                          .max_grad_norm = clip});
  // eps well above float32's rounding of a gradient that is zero in float64.
  optim::AdamOptions o{.lr = 0.01,
                       .eps = 1e-4,
                       .weight_decay = s.weight_decay ? 0.05 : 0,
                       .amsgrad = s.amsgrad,
                       .max_grad_norm = clip};
  if (s.opt == OptKind::adamw) return std::make_unique<optim::AdamW>(m, o);
  return std::make_unique<optim::Adam>(m, o);
}

Outcome run(const Spec& s, DType dtype, const Config& c, uint64_t data_seed) {
  set_num_threads(c.threads);
  std::unique_ptr<SpecModel> m = make_model(s, dtype);
  std::vector<std::pair<std::string, std::vector<double>>> before;
  for (const auto& [name, t] : m->named_parameters()) before.emplace_back(name, t.to_vector());
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(s, *m);
  set_random_stream({s.seed, 0});
  StepOptions o = c.opts;
  o.on_nonfinite = s.nonfinite == 1 ? NonFinite::skip : NonFinite::ignore;
  o.memory_budget = o.mode == StepMode::interpret ? 0 : s.memory_budget;
  o.adapt_threads = false;
  SpecModel* model = m.get();
  TrainStep step = compile_train_step(
      *m, *opt, [model](const Tensor& x) { return model->loss(x); }, o);
  Outcome out;
  const int steps =
      std::getenv("WS_DIFFTEST_STEPS") ? std::atoi(std::getenv("WS_DIFFTEST_STEPS")) : 2;
  for (int k = 0; k < steps; ++k) {
    const StepResult r = step(make_input(s, data_seed + uint64_t(k), dtype));
    out.losses.push_back(r.loss);
    out.finite = out.finite && std::isfinite(r.loss);
  }
  if (std::getenv("WS_DIFFTEST_PROGRAMS")) fmt::print("{}\n", step.programs_text());
  size_t i = 0;
  for (const auto& [name, t] : m->named_parameters()) {
    std::vector<double> d = t.to_vector();
    double largest = 0;
    for (size_t j = 0; j < d.size(); ++j) {
      largest = std::max(largest, std::abs(d[j]));
      d[j] -= before[i].second[j];
    }
    ++i;
    out.tensors.emplace_back(name, d);
    out.floors.push_back(steps * std::ldexp(largest, -23));
  }
  for (const auto& [name, t] : m->named_buffers()) {
    out.tensors.emplace_back(name, t.to_vector());
    out.floors.push_back(0);
  }
  for (const auto& [name, v] : out.tensors)
    for (double x : v) out.finite = out.finite && std::isfinite(x);
  return out;
}

const std::vector<Config>& configs() {
  static const std::vector<Config> c = [] {
    using M = StepMode;
    using L = ImageLayouts;
    return std::vector<Config>{
        {"single_graph", {.mode = M::single_graph}, 2},
        {"single_graph, 1 thread", {.mode = M::single_graph}, 1},
        {"single_graph, again", {.mode = M::single_graph}, 2},
        {"single_graph unfused", {.mode = M::single_graph, .fuse = false}, 2},
        {"single_graph, no aliasing", {.mode = M::single_graph, .aliasing = false}, 2},
        {"three_graph", {.mode = M::three_graph}, 2},
        {"single_graph nchw", {.mode = M::single_graph, .layouts = L::nchw}, 2},
        {"three_graph blocked", {.mode = M::three_graph, .layouts = L::blocked}, 2},
        {"three_graph unfused, no recompute",
         {.mode = M::three_graph, .fuse = false, .recompute = false},
         1},
    };
  }();
  return c;
}

// The largest element distance of two outcomes' tensor `t` (or loss).
double dist(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t j = 0; j < a.size(); ++j) d = std::max(d, std::abs(a[j] - b[j]));
  return d;
}
double scale(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

// Why configuration `got` disagrees, or "".
std::string disagreement(const Outcome& truth, const Outcome& ref, const Outcome& got,
                         bool same_bits, const Outcome* twin) {
  auto within = [](const std::vector<double>& t, const std::vector<double>& r,
                   const std::vector<double>& g, double floor) {
    return dist(g, t) <= 4 * dist(r, t) + 2e-5 * scale(t) + floor + 1e-12;
  };
  if (!within(truth.losses, ref.losses, got.losses, 0))
    return fmt::format("loss {} (float64 {}, float32 interpreter {})", got.losses.back(),
                       truth.losses.back(), ref.losses.back());
  for (size_t i = 0; i < got.tensors.size(); ++i) {
    const auto& [name, g] = got.tensors[i];
    if (!within(truth.tensors[i].second, ref.tensors[i].second, g, truth.floors[i]))
      return fmt::format("{}: {:.3g} from float64 (float32 interpreter {:.3g}, scale {:.3g})", name,
                         dist(g, truth.tensors[i].second),
                         dist(ref.tensors[i].second, truth.tensors[i].second),
                         scale(truth.tensors[i].second));
    if (same_bits && twin && twin->tensors[i].second != g)
      return fmt::format("{}: not the same bits as single_graph ({:.3g} apart)", name,
                         dist(g, twin->tensors[i].second));
  }
  if (same_bits && twin && twin->losses != got.losses) return "loss: not the same bits";
  return "";
}

enum class Verdict { pass, fail, invalid };

struct CaseResult {
  Verdict verdict = Verdict::pass;
  std::string what;                // the failing configuration and why
  const Config* config = nullptr;  // the failing configuration
  uint64_t data_seed = 0;
};

CaseResult check_once(const Spec& s, uint64_t data_seed) {
  Outcome truth, ref;
  try {
    ref = run(s, DType::f32, {"interpret", {.mode = StepMode::interpret}, 2}, data_seed);
    truth = run(s, DType::f64, {"interpret f64", {.mode = StepMode::interpret}, 2}, data_seed);
  } catch (const Error& e) {
    if (std::getenv("WS_DIFFTEST_VERBOSE")) fmt::print("not runnable: {}\n", e.what());
    return {Verdict::invalid, ""};
  }
  if (!ref.finite || !truth.finite) return {Verdict::invalid, ""};
  const Outcome* first = nullptr;
  Outcome single;
  const char* only = std::getenv("WS_DIFFTEST_CONFIG");  // one configuration (to dump it)
  for (const Config& c : configs()) {
    if (only && c.name != std::string(only)) continue;
    Outcome got;
    try {
      got = run(s, DType::f32, c, data_seed);
    } catch (const std::exception& e) {
      return {Verdict::fail, fmt::format("{}: {}", c.name, e.what()), &c, data_seed};
    }
    const bool same_bits = std::string(c.name).starts_with("single_graph,");
    const std::string why = disagreement(truth, ref, got, same_bits, first);
    if (!why.empty() && std::getenv("WS_DIFFTEST_VERBOSE")) {
      for (const Outcome* o : {&truth, &ref, &got}) {
        fmt::print("losses {}\n", fmt::join(o->losses, " "));
        for (const auto& [name, v] : o->tensors) fmt::print("  {}: {}\n", name, fmt::join(v, " "));
      }
    }
    if (!why.empty()) return {Verdict::fail, fmt::format("{}: {}", c.name, why), &c, data_seed};
    if (!first) single = got, first = &single;
  }
  return {Verdict::pass, ""};
}

// A failure that shows on two inputs.
CaseResult check(const Spec& s) {
  CaseResult a = check_once(s, 1);
  if (a.verdict != Verdict::fail) return a;
  CaseResult b = check_once(s, 2);
  return b.verdict == Verdict::fail ? a : CaseResult{Verdict::pass, ""};
}

// The smallest spec found that still fails, greedily.
Spec shrink(Spec s, CaseResult& r) {
  for (bool progress = true; progress;) {
    progress = false;
    for (const Spec& t : shrink_candidates(s)) {
      CaseResult c = check(t);
      if (c.verdict == Verdict::fail) {
        s = t, r = c, progress = true;
        break;
      }
    }
  }
  return s;
}

std::vector<std::filesystem::path> spec_files(const std::vector<std::string>& args) {
  std::vector<std::filesystem::path> out;
  for (const std::string& a : args) {
    if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::directory_iterator(a))
        if (e.path().extension() == ".spec") out.push_back(e.path());
    } else {
      out.emplace_back(a);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The graph lowering received in the failing configuration of `s`, as the
// golden tests of tests/lower/ read it; empty for three graphs.
std::string failing_graph(const Spec& s, const CaseResult& r) {
  if (!r.config || r.config->opts.mode != StepMode::single_graph) return "";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("difftest-{}", s.seed);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  setenv("WS_DUMP", dir.c_str(), 1);
  try {
    run(s, DType::f32, *r.config, r.data_seed);
  } catch (const std::exception&) {
  }
  unsetenv("WS_DUMP");
  std::filesystem::path last;  // the step graph before the passes, dumped last
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().string().ends_with("-step.ir") && e.path() > last) last = e.path();
  const std::string text =
      last.empty() ? "" : ir::print(ir::parse(read(last)), {.locations = false});
  std::filesystem::remove_all(dir);
  return text;
}

int replay(const std::vector<std::string>& args) {
  int failed = 0, passed = 0;
  for (const auto& p : spec_files(args)) {
    const CaseResult r = check(parse_spec(read(p)));
    if (r.verdict == Verdict::fail) {
      ++failed;
      fmt::print("FAIL {}: {}\n", p.string(), r.what);
    } else {
      ++passed;
      fmt::print("ok   {}{}\n", p.string(), r.verdict == Verdict::invalid ? " (not runnable)" : "");
    }
  }
  fmt::print("{} passed, {} failed\n", passed, failed);
  return failed ? 1 : 0;
}

// Interprets `file`'s graph after each lowering pass in turn, on the same
// random inputs, and names the first pass after which the outputs are not
// the same bits.
int bisect(const std::string& file) {
  ir::Graph g = ir::parse(read(file));
  std::vector<Tensor> in;
  manual_seed(1);
  for (ir::ValueId v : g.inputs) {
    const ir::Type& t = g.type(v);
    // Near 1, as the golden tests' inputs: positive learning rates, moments
    // and step counts.
    in.push_back(is_floating(t.dtype) ? randn(t.shape, 1.0, 0.25, t.dtype)
                                      : Tensor::zeros(t.shape, t.dtype));
  }
  auto bits = [&](const ir::Graph& h) {
    std::vector<std::vector<double>> out;
    for (const Tensor& t : exec::interpret(h, in)) out.push_back(t.to_vector());
    return out;
  };
  // The same bits, a NaN equal to a NaN.
  auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
    for (size_t j = 0; j < a.size(); ++j)
      if (a[j] != b[j] && !(std::isnan(a[j]) && std::isnan(b[j]))) return false;
    return a.size() == b.size();
  };
  const auto want = bits(g);
  for (const lower::Pass& p : lower::graph_passes({})) {
    bool changed = false;
    ir::Graph next = p.run(g, &changed);
    g = std::move(next);
    if (!changed) continue;
    ir::verify(g);
    const auto got = bits(g);
    for (size_t o = 0; o < got.size(); ++o)
      if (!same(got[o], want[o])) {
        fmt::print("{}: output {} ({}) changed, {:.6g} against {:.6g}\n{}", p.name, o,
                   g.outputs[o].name, dist(got[o], want[o]), scale(want[o]), ir::print(g));
        return 1;
      }
    fmt::print("{}: the same bits\n", p.name);
  }
  // Then the lowered programs, fused and not, once, on copies of the inputs.
  const ir::Graph orig = ir::parse(read(file));
  bool bad = false;
  for (int variant = 0; variant < 3; ++variant) {
    const bool fuse = variant != 1;
    bool differs = false;
    testing::LoweredRun e(orig, in, {.in_place_updates = variant != 2, .fuse = fuse});
    try {
      e.run();
    } catch (const std::exception&) {
      fmt::print("{} program:\n{}", fuse ? "fused" : "unfused", e.program().str());
      throw;
    }
    for (size_t i = 0; i < orig.outputs.size(); ++i) {
      const ir::Output& o = orig.outputs[i];
      const std::vector<double> got = e.result(i).to_vector();
      if (!same(got, want[i])) {
        fmt::print("{} program{}: output {} ({}) differs, {:.6g} against {:.6g}\n{}",
                   fuse ? "fused" : "unfused", variant == 2 ? " (updates copied)" : "", i, o.name,
                   dist(got, want[i]), scale(want[i]), e.program().str());
        differs = bad = true;
        break;
      }
    }
    if (!differs)
      fmt::print("{} program{}: the same bits\n", fuse ? "fused" : "unfused",
                 variant == 2 ? " (updates copied)" : "");
  }
  return bad ? 1 : 0;
}

// Each fusion of `file`'s graph after the graph passes, alone: its operands
// random inputs, its results outputs, the lowered kernel against the
// interpreted node. Names the first that differs.
int kernels(const std::string& file) {
  const ir::Graph fused = lower::run_passes(ir::parse(read(file)), lower::graph_passes({}));
  for (ir::ValueId v = 0; v < fused.size(); ++v) {
    const ir::Node& n = fused.node(v);
    if (n.op != ir::Op::fusion) continue;
    ir::Graph g;
    g.name = "kernel";
    ir::Node f = n;
    for (size_t i = 0; i < n.args.size(); ++i) {
      g.nodes.push_back(
          ir::input_node(ir::InputRole::data, fmt::format("x{}", i), fused.type(n.args[i])));
      g.inputs.push_back(ir::ValueId(i));
      f.args[i] = ir::ValueId(i);
    }
    g.nodes.push_back(f);
    const ir::ValueId fv = ir::ValueId(g.nodes.size() - 1);
    g.outputs.push_back({ir::OutputRole::user, fv, ir::kNoValue, "r0"});
    for (size_t j = 1; j < n.body->outputs.size(); ++j) {
      g.nodes.push_back(ir::Node{ir::Op::fusion_result,
                                 {fv},
                                 ir::make_attrs<ir::Op::fusion_result>({{"index", int64_t(j)}}),
                                 n.body->type(n.body->outputs[j].value),
                                 {},
                                 n.stage,
                                 nullptr});
      g.outputs.push_back({ir::OutputRole::user, ir::ValueId(g.nodes.size() - 1), ir::kNoValue,
                           fmt::format("r{}", j)});
    }
    std::vector<Tensor> in;
    manual_seed(uint64_t(v) + 1);
    for (ir::ValueId x : g.inputs) {
      const ir::Type& t = g.type(x);
      in.push_back(is_floating(t.dtype) ? randn(t.shape, 1.0, 0.25, t.dtype)
                                        : Tensor::zeros(t.shape, t.dtype));
    }
    const std::vector<Tensor> want = exec::interpret(g, in);
    exec::Executable e(lower::lower(g, {}));
    for (size_t i = 0; i < in.size(); ++i) e.bind_input(i, in[i].impl()->storage->data);
    std::vector<Tensor> out;
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      out.push_back(
          Tensor::zeros(g.type(g.outputs[i].value).shape, g.type(g.outputs[i].value).dtype));
      e.bind_output(i, out.back().impl()->storage->data);
    }
    e.run();
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i].to_vector() != want[i].to_vector()) {
        fmt::print("%{}: result {} differs, {:.6g}\n{}", v, i,
                   dist(out[i].to_vector(), want[i].to_vector()), ir::print(g));
        if (std::getenv("WS_DIFFTEST_VERBOSE"))
          fmt::print("got  {}\nwant {}\n{}", fmt::join(out[i].to_vector(), " "),
                     fmt::join(want[i].to_vector(), " "), e.program().str());
        return 1;
      }
  }
  fmt::print("every fusion alone: the same bits\n");
  return 0;
}

int explore(double seconds, uint64_t seed, int max_ops, const std::string& save) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  fmt::print("difftest: seed {}, {} s, up to {} ops a step\n", seed, seconds, max_ops);
  std::fflush(stdout);
  int64_t tried = 0, invalid = 0, failed = 0, first_failure = -1;
  for (uint64_t k = 0; elapsed() < seconds; ++k) {
    const Spec s = generate(seed + k, max_ops);
    CaseResult r = check(s);
    ++tried;
    if (r.verdict == Verdict::invalid) ++invalid;
    if (r.verdict != Verdict::fail) continue;
    ++failed;
    if (first_failure < 0) first_failure = tried;
    fmt::print("FAIL seed {} ({} ops): {}\n", s.seed, s.ops.size(), r.what);
    const Spec small = shrink(s, r);
    fmt::print("shrunk to {} ops: {}\n{}\n", small.ops.size(), r.what, small.str());
    if (!save.empty()) {
      std::filesystem::create_directories(save);
      const std::string path = fmt::format("{}/{}.spec", save, s.seed);
      std::ofstream(path) << "# " << r.what << "\n" << small.str();
      fmt::print("written {}\n", path);
      // The step graph too, for tests/lower/<pass>/ (the golden tests run
      // every lowering of it against the interpreter).
      if (const std::string g = failing_graph(small, r); !g.empty()) {
        const std::string ir = fmt::format("{}/{}.in.ir", save, s.seed);
        std::string what = r.what;
        std::replace(what.begin(), what.end(), '\n', ' ');
        std::ofstream(ir) << "# difftest seed " << s.seed << ": " << what << "\n" << g;
        fmt::print("written {}\n", ir);
      }
    }
    std::fflush(stdout);
  }
  const int64_t valid = tried - invalid;
  fmt::print(
      "difftest: {} steps tried, {} not runnable, {} compared, {} failed ({:.2f} per "
      "thousand){}\n",
      tried, invalid, valid, failed, valid ? 1000.0 * double(failed) / double(valid) : 0.0,
      first_failure > 0 ? fmt::format("; first failure at step {}", first_failure) : "");
  fmt::print("{} passed, {} failed\n", valid - failed, failed);
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace ws::difftest

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  double seconds = 120;
  uint64_t seed = uint64_t(std::chrono::system_clock::now().time_since_epoch().count()) % 1000000;
  int max_ops = 8;
  std::string save;
  std::vector<std::string> rest;
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      auto next = [&]() -> const std::string& {
        if (i + 1 >= args.size()) throw ws::Error(args[i] + " needs a value");
        return args[++i];
      };
      if (args[i] == "--seconds")
        seconds = std::stod(next());
      else if (args[i] == "--seed")
        seed = std::stoull(next());
      else if (args[i] == "--max-ops")
        max_ops = std::stoi(next());
      else if (args[i] == "--save")
        save = next();
      else if (args[i] == "--bisect")
        return ws::difftest::bisect(next());
      else if (args[i] == "--kernels")
        return ws::difftest::kernels(next());
      else if (args[i] == "--replay") {
        for (++i; i < args.size(); ++i) rest.push_back(args[i]);
        return ws::difftest::replay(rest);
      } else
        throw ws::Error("unknown argument " + args[i]);
    }
    if (const char* env = std::getenv("WS_DIFFTEST_SECONDS")) seconds = std::stod(env);
    return ws::difftest::explore(seconds, seed, max_ops, save);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "difftest: %s\n", e.what());
    return 2;
  }
}
