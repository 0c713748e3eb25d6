// measure_floor (floor.hpp): one primitive per shape (the faster of two for
// a convolution over NHWC or blocked images), buffers in its own layouts,
// timed in graph order.
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

// One way to run a contraction: a primitive on buffers of its own.
struct Way {
  std::shared_ptr<const DnnlOp> op;
  Buffer a, b, out, scratch;
  std::vector<double> ms;  // one entry per run
};

Way way_of(std::shared_ptr<const DnnlOp> op) {
  Way w;
  w.a = filled(op->operand_bytes(0));
  w.b = filled(op->operand_bytes(1));
  w.out = filled(op->operand_bytes(2));
  w.scratch = filled(op->scratch_bytes());
  w.op = std::move(op);
  return w;
}

// A contraction's shape: its ways (a convolution over images the step
// stores NHWC or in blocks: oneDNN's picked layouts, and those images
// where they lie when a jit kernel reads them), the faster one counting.
struct Contraction {
  FloorPart part;
  std::vector<Way> ways;
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
        if (n.op == Op::matmul) {
          s->ways.push_back(way_of(make_whole_matmul(in, n.type, n.attrs)));
        } else {
          const Conv2dGeom c = conv2d_node_geom(n.op, n.attrs, in, n.type);
          s->ways.push_back(way_of(make_native_conv(n.op, c, false)));
          if (c.layout != ir::ImageLayout::nchw) {
            Way stored = way_of(make_native_conv(n.op, c, true));
            if (stored.op->impl() != s->ways[0].op->impl()) s->ways.push_back(std::move(stored));
          }
        }
        shapes.push_back(std::move(s));
      }
      Contraction& s = *shapes[it->second];
      ++s.part.calls;
      s.part.flops += s.ways[0].op->flops();
      order.push_back(it->second);
    }
  using clock = std::chrono::steady_clock;
  for (int r = 0; r < rounds + 1; ++r)  // the first round warms up
    for (size_t i : order)
      for (Way& w : shapes[i]->ways) {
        const auto t0 = clock::now();
        w.op->run(w.a.get(), w.b.get(), w.out.get(), w.scratch.get(), nullptr, nullptr);
        const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
        if (r > 0) w.ms.push_back(ms);
      }
  std::vector<FloorPart> parts;
  for (auto& s : shapes) {
    s->part.ms = -1;
    for (Way& w : s->ways) {
      std::vector<double>& v = w.ms;
      std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
      const double ms = v[v.size() / 2] * double(s->part.calls);
      if (s->part.ms < 0 || ms < s->part.ms) s->part.ms = ms, s->part.impl = w.op->impl();
    }
    parts.push_back(s->part);
  }
  std::sort(parts.begin(), parts.end(),
            [](const FloorPart& x, const FloorPart& y) { return x.ms > y.ms; });
  return parts;
}

}  // namespace ws::exec
