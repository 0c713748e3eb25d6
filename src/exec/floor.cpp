// measure_floor (floor.hpp): one primitive per shape, buffers in its own
// layouts, timed in graph order.
#include "exec/floor.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "exec/dnnl_op.hpp"
#include "exec/threads.hpp"
#include "ir/attr.hpp"

namespace ws::exec {
namespace {

using ir::Op;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

// A buffer of `bytes` (64-byte aligned, at least one line) holding small
// values: no denormals, no infinities.
Buffer filled(int64_t bytes) {
  const size_t size = size_t(align64(std::max<int64_t>(bytes, 64)));
  Buffer b(static_cast<std::byte*>(std::aligned_alloc(64, size)));
  if (!b) throw Error(fmt::format("floor: out of memory allocating {} bytes", size));
  float* f = reinterpret_cast<float*>(b.get());
  for (size_t i = 0; i < size / sizeof(float); ++i) f[i] = 0.01f * float(int(i % 7) - 3);
  return b;
}

struct Contraction {
  FloorPart part;
  std::shared_ptr<const DnnlOp> op;
  Buffer a, b, out, scratch;
  std::vector<double> ms;  // one entry per run
};

std::string dims(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ",")); }

// A key and a label for the node's contraction.
std::string describe(const ir::Graph& g, const ir::Node& n) {
  std::string s = std::string(ir::op_name(n.op));
  for (ir::ValueId a : n.args) s += " " + dims(g.type(a).shape);
  s += " -> " + dims(n.type.shape);
  if (n.op == Op::matmul) {
    if (ir::attr<Op::matmul, "transpose_a">(n.attrs)) s += " ta";
    if (ir::attr<Op::matmul, "transpose_b">(n.attrs)) s += " tb";
    return s;
  }
  std::vector<ir::Type> in;
  for (ir::ValueId a : n.args) in.push_back(g.type(a));
  const Conv2dGeom c = conv2d_node_geom(n.op, n.attrs, in, n.type);
  s += fmt::format(" stride {}x{}x{} padding {}x{}x{} dilation {}x{}x{} groups {}", c.sd, c.sh,
                   c.sw, c.pd, c.ph, c.pw, c.dd, c.dh, c.dw, c.groups);
  return s;
}

}  // namespace

std::vector<FloorPart> measure_floor(std::span<const ir::Graph> graphs, int rounds) {
  require_outside_parallel("floor");
  TeamScope whole(num_threads());
  pin_team();
  std::map<std::string, size_t> index;
  std::vector<std::unique_ptr<Contraction>> shapes;
  std::vector<size_t> order;  // each contraction node, as the shape it is
  for (const ir::Graph& g : graphs)
    for (const ir::Node& n : g.nodes) {
      const bool contraction = n.op == Op::matmul || n.op == Op::conv2d ||
                               n.op == Op::conv2d_input_grad || n.op == Op::conv2d_weight_grad;
      if (!contraction || n.type.dtype != DType::f32 || n.type.numel() == 0) continue;
      std::vector<ir::Type> in;
      for (ir::ValueId a : n.args) in.push_back(g.type(a));
      if (std::any_of(in.begin(), in.end(), [](const ir::Type& t) { return t.numel() == 0; }))
        continue;
      const std::string key = describe(g, n);
      auto [it, added] = index.emplace(key, shapes.size());
      if (added) {
        auto s = std::make_unique<Contraction>();
        s->part.what = key;
        s->op = n.op == Op::matmul
                    ? make_whole_matmul(in, n.type, n.attrs)
                    : make_native_conv(n.op, conv2d_node_geom(n.op, n.attrs, in, n.type));
        s->part.impl = s->op->impl();
        s->a = filled(s->op->operand_bytes(0));
        s->b = filled(s->op->operand_bytes(1));
        s->out = filled(s->op->operand_bytes(2));
        s->scratch = filled(s->op->scratch_bytes());
        shapes.push_back(std::move(s));
      }
      Contraction& s = *shapes[it->second];
      ++s.part.calls;
      s.part.flops += s.op->flops();
      order.push_back(it->second);
    }
  using clock = std::chrono::steady_clock;
  for (int r = 0; r < rounds + 1; ++r)  // the first round warms up
    for (size_t i : order) {
      Contraction& s = *shapes[i];
      const auto t0 = clock::now();
      s.op->run(s.a.get(), s.b.get(), s.out.get(), s.scratch.get(), nullptr, nullptr);
      const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
      if (r > 0) s.ms.push_back(ms);
    }
  std::vector<FloorPart> parts;
  for (auto& s : shapes) {
    std::vector<double>& v = s->ms;
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    s->part.ms = v[v.size() / 2] * double(s->part.calls);
    parts.push_back(s->part);
  }
  std::sort(parts.begin(), parts.end(),
            [](const FloorPart& x, const FloorPart& y) { return x.ms > y.ms; });
  return parts;
}

}  // namespace ws::exec
