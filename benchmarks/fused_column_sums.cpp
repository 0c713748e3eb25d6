// BatchNorm's column sums over NHWC rows as fused loops: the mean summed in
// f64, the variance's sum of squares, a sum of products, ReLU's gradient
// with its sum (writing the gradient too), each a FusedLoop alone over
// [rows, cols], compiled (a compiled loop's column sum summed as the code
// computes it, where the rows make a group of blocks for each thread)
// against the same loop with compiled loops off (its steps over chunks,
// the sum read back from a buffer), alternating in one run; median
// microseconds of `reps` runs on the pool's threads.
//   build/benchmarks/fused_column_sums [rows cols [reps]]
//   (without arguments: mobilenet_v2's shapes at batch 8, 64x64 images)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "exec/fused_loop.hpp"
#include "exec/reduce.hpp"
#include "exec/threads.hpp"
#include "ir/text.hpp"

namespace {

using namespace ws;

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Case {
  const char* name;
  const char* body;  // fmt text over {0} rows, {1} cols
};

const Case kCases[] = {
    {"mean in f64", R"(graph body {{
  %0 = input data "x" : f32[{0},{1}]
  %1 = convert %0 {{dtype="f64"}} : f64[{0},{1}]
  %2 = reduce_sum %1 {{axes=[0]}} : f64[{1}]
  out user %2 "s"
}})"},
    {"variance", R"(graph body {{
  %0 = input data "x" : f32[{0},{1}]
  %1 = input data "m" : f32[{1}]
  %2 = broadcast %1 {{dims=[1], shape=[{0},{1}]}} : f32[{0},{1}]
  %3 = sub %0, %2 : f32[{0},{1}]
  %4 = mul %3, %3 : f32[{0},{1}]
  %5 = reduce_sum %4 {{axes=[0]}} : f32[{1}]
  out user %5 "s"
}})"},
    {"sum of products", R"(graph body {{
  %0 = input data "x" : f32[{0},{1}]
  %1 = input data "y" : f32[{0},{1}]
  %2 = mul %0, %1 : f32[{0},{1}]
  %3 = reduce_sum %2 {{axes=[0]}} : f32[{1}]
  out user %3 "s"
}})"},
    {"relu grad + sum", R"(graph body {{
  %0 = input data "dy" : f32[{0},{1}]
  %1 = input data "m" : bool[{0},{1}]
  %2 = full {{value=0.0}} : f32[{0},{1}]
  %3 = select %1, %2, %0 : f32[{0},{1}]
  %4 = reduce_sum %3 {{axes=[0]}} : f32[{1}]
  out user %3 "g"
  out user %4 "s"
}})"},
};

void run_shape(int64_t rows, int64_t cols, int reps) {
  const size_t n = size_t(rows * cols);
  std::vector<float> x(n, 1.5f), y(n, 0.5f), g(n), m(static_cast<size_t>(cols), 0.25f);
  std::vector<uint8_t> mask(n, 1);
  std::vector<double> sums(static_cast<size_t>(cols));
  for (const Case& c : kCases) {
    const ir::Graph body = ir::parse(fmt::format(fmt::runtime(c.body), rows, cols));
    std::vector<int32_t> in_slots, out_slots;
    for (size_t i = 0; i < body.inputs.size(); ++i) in_slots.push_back(int32_t(i));
    for (size_t j = 0; j < body.outputs.size(); ++j)
      out_slots.push_back(int32_t(body.inputs.size() + j));
    // The second input and the outputs of each case, in body order.
    const void* second = std::string(c.name) == "sum of products" ? y.data()
                         : std::string(c.name) == "relu grad + sum"
                             ? static_cast<const void*>(mask.data())
                             : m.data();
    const void* ins[] = {x.data(), second};
    void* outs[2] = {sums.data(), nullptr};
    if (body.outputs.size() == 2) outs[0] = g.data(), outs[1] = sums.data();
    std::vector<std::byte> scratch(size_t(exec::fused_scratch_bytes(body)) + 64);
    std::vector<exec::FusedLoop> loops;
    for (bool compiled : {true, false}) {
      exec::set_compiled_loops(compiled);
      loops.emplace_back(body, in_slots, out_slots);
    }
    exec::set_compiled_loops(true);
    std::vector<double> t[2];
    for (int r = 0; r < reps; ++r)
      for (int k = 0; k < 2; ++k) {
        const double t0 = now_us();
        loops[size_t(k)].run(ins, outs, scratch.data());
        t[k].push_back(now_us() - t0);
      }
    for (auto& v : t) std::sort(v.begin(), v.end());
    std::printf("%-16s [%6ld x %4ld]  compiled %7.1f us (%s)  steps %7.1f us\n", c.name, rows, cols,
                t[0][t[0].size() / 2],
                loops[0].sums_compiled() && exec::column_groups(rows).groups >= exec::num_threads()
                    ? "sum as computed"
                    : "sum by another path",
                t[1][t[1].size() / 2]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 3 ? std::atoi(argv[3]) : 400;
  std::printf("threads %d\n", exec::num_threads());
  if (argc > 2) {
    run_shape(std::atol(argv[1]), std::atol(argv[2]), reps);
    return 0;
  }
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {8192, 32}, {8192, 96}, {2048, 144}, {512, 192}, {128, 384}})
    run_shape(rows, cols, reps);
  return 0;
}
