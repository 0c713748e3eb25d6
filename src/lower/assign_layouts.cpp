#include "lower/assign_layouts.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "exec/dnnl_backend.hpp"
#include "ir/attr.hpp"
#include "ir/geometry.hpp"
#include "lower/rewrite.hpp"

namespace ws::lower {
namespace {

using ir::ImageLayout;
using ir::Op;
using ir::ValueId;

bool is_image(const ir::Type& t) { return t.rank() == 4; }

std::vector<ir::Type> operand_types(const ir::Graph& g, const ir::Node& n) {
  std::vector<ir::Type> in;
  for (ValueId a : n.args) in.push_back(g.type(a));
  return in;
}

// A 1x1 convolution at stride 1 without padding, groups or dilation: NHWC,
// it is a product of [N*H*W, C] rows (a view of the image) and the weight.
bool pointwise(const ir::Conv2dGeom& c) {
  return c.kh == 1 && c.kw == 1 && c.sh == 1 && c.sw == 1 && c.ph == 0 && c.pw == 0 &&
         c.groups == 1 && !c.volume;
}

// A 2-d f32 convolution stored NCHW that runs as well in the wanted layout
// (dnnl_backend.hpp: conv_keeps_nchw), its channels multiples of 8 for
// blocks: its images can be stored otherwise.
bool movable_conv(const ir::Graph& g, const ir::Node& n, bool blocked) {
  if (!ir::kConvOps.contains(n.op) || n.type.dtype != DType::f32) return false;
  const std::string* layout = ir::attr<ir::kConvOps, "layout">(n.attrs);
  if (layout && *layout != "nchw") return false;
  ir::Conv2dGeom c = ir::conv2d_node_geom(n.op, n.attrs, operand_types(g, n), n.type);
  if (c.volume) return false;
  if (!blocked && pointwise(c)) return true;  // a product (rewrite below)
  c.layout = blocked ? ImageLayout::nChw8c : ImageLayout::nhwc;
  if (exec::conv_keeps_nchw(n.op, c)) return false;
  return !blocked || (c.c % 8 == 0 && c.o % 8 == 0);
}

// The images of a blockable convolution: its image operands, and itself
// unless it is a weight gradient.
std::vector<ValueId> conv_images(ValueId v, const ir::Node& n) {
  if (n.op == Op::conv2d_weight_grad) return {n.args[0], n.args[1]};
  return {n.args[0], v};
}

// An elementwise op of [N, C, H, W] operands.
bool image_elementwise(const ir::Graph& g, const ir::Node& n) {
  if (ir::op_info(n.op).category != ir::OpCategory::elementwise || !is_image(n.type)) return false;
  return std::all_of(n.args.begin(), n.args.end(),
                     [&](ValueId a) { return g.type(a).shape == n.type.shape; });
}

// A max pooling of NCHW images (or its gradient): NHWC has kernels of its own.
bool image_max_pool(const ir::Node& n) {
  if (n.op != Op::max_pool2d && n.op != Op::max_pool2d_grad) return false;
  const std::string* layout =
      ir::attr<ir::OpSet{Op::max_pool2d, Op::max_pool2d_grad}, "layout">(n.attrs);
  return !layout || *layout == "nchw";
}

// A concatenation of images: along any dim, in the layout's place for it.
bool image_concat(const ir::Graph& g, const ir::Node& n) {
  return n.op == Op::concat && is_image(n.type) &&
         std::all_of(n.args.begin(), n.args.end(), [&](ValueId a) { return is_image(g.type(a)); });
}

// A slice of an image along any dim but, in blocks, the channels (its
// bounds need not fall on blocks).
bool image_slice(const ir::Graph& g, const ir::Node& n, bool blocked) {
  return n.op == Op::slice && is_image(n.type) && is_image(g.type(n.args[0])) &&
         !(blocked && ir::attr<Op::slice, "axis">(n.attrs) == 1);
}

// A broadcast to [N, C, H, W] that is the same broadcast at the blocked
// shape: of a value without the channel dim (source dims among N, H, W,
// which keep their places), or with it where every source dim placed at H
// or W has size 1 (a per-channel or per-image-and-channel value).
bool movable_broadcast(const ir::Graph& g, const ir::Node& n) {
  if (n.op != Op::broadcast || !is_image(n.type)) return false;
  const std::vector<int64_t>& dims = ir::attr<Op::broadcast, "dims">(n.attrs);
  const Shape& src = g.type(n.args[0]).shape;
  const auto c = std::find(dims.begin(), dims.end(), 1);
  if (c == dims.end() || src[size_t(c - dims.begin())] == 1)
    return std::is_sorted(dims.begin(), dims.end());
  for (size_t i = 0; i < dims.size(); ++i)
    if ((dims[i] == 2 || dims[i] == 3) && src[i] != 1) return false;
  return std::is_sorted(dims.begin(), dims.end());
}

// A reduction of an image over H and W (and perhaps N), keeping C: it runs
// over the blocked image, its result reshaped.
bool movable_reduction(const ir::Graph& g, const ir::Node& n) {
  if (!ir::kReduceOps.contains(n.op) || !is_image(g.type(n.args[0]))) return false;
  const std::vector<int64_t>& axes = ir::attr<ir::kReduceOps, "axes">(n.attrs);
  auto has = [&](int64_t a) { return std::find(axes.begin(), axes.end(), a) != axes.end(); };
  return has(2) && has(3) && !has(1);
}

struct UnionFind {
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  size_t find(size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void join(size_t a, size_t b) { parent[find(a)] = find(b); }
  std::vector<size_t> parent;
};

// Where dim d of an NCHW image is in layout l's stored shape, for the dims
// that keep their own (N, H, W; C too in NHWC).
int64_t stored_dim(ImageLayout l, int64_t d) {
  if (l == ImageLayout::nhwc) return d == 0 ? 0 : d == 1 ? 3 : d - 1;
  return d;
}

class Assign {
 public:
  Assign(const ir::Graph& g, ImageLayout want)
      : g_(g),
        want_(want),
        n_(g.nodes.size()),
        groups_(n_),
        inner_(n_, false),
        stored_(n_, ir::kNoValue),
        plain_(n_, ir::kNoValue),
        layout_(n_, ImageLayout::nchw) {}

  ir::Graph run(bool* changed) {
    group();
    if (std::all_of(layout_.begin(), layout_.end(),
                    [](ImageLayout l) { return l == ImageLayout::nchw; })) {
      *changed = false;
      return g_;
    }
    for (ValueId v = 0; v < ValueId(n_); ++v) rewrite(v);
    for (const ir::Output& o : g_.outputs) plain(o.value);  // outputs are NCHW
    ir::copy_interface(g_, plain_, out_);
    *changed = true;
    out_.name = g_.name;
    return simplify(out_);
  }

 private:
  // Groups of images joined by the ops that work in any layout; a group
  // with a convolution that can change layout gets one its channels allow.
  void group() {
    std::vector<bool> has_conv(n_, false);
    for (ValueId v = 0; v < ValueId(n_); ++v) {
      const ir::Node& n = g_.node(v);
      if (movable_conv(g_, n, want_ != ImageLayout::nhwc)) {
        const std::vector<ValueId> images = conv_images(v, n);
        groups_.join(size_t(images[0]), size_t(images[1]));
        has_conv[size_t(images[0])] = true;
        inner_[size_t(v)] = n.op != Op::conv2d_weight_grad;
      } else if (want_ == ImageLayout::nhwc && image_max_pool(n)) {
        for (ValueId a : n.args) groups_.join(size_t(a), size_t(v));
        inner_[size_t(v)] = true;
      } else if (image_elementwise(g_, n) || image_concat(g_, n) ||
                 image_slice(g_, n, want_ != ImageLayout::nhwc)) {
        for (ValueId a : n.args) groups_.join(size_t(a), size_t(v));
        inner_[size_t(v)] = true;
      } else if (is_image(n.type) && (n.op == Op::full || movable_broadcast(g_, n))) {
        inner_[size_t(v)] = true;
      }
    }
    // Per group: whether it has a convolution, and the largest block that
    // divides the channels of every image in it.
    std::vector<bool> conv(n_, false);
    std::vector<int64_t> block(n_, want_ == ImageLayout::nChw8c ? 8 : 16);
    for (size_t v = 0; v < n_; ++v) {
      if (!is_image(g_.type(ValueId(v)))) continue;
      const size_t r = groups_.find(v);
      conv[r] = conv[r] || has_conv[v];
      const int64_t c = g_.type(ValueId(v)).shape[1];
      block[r] = c % 16 == 0 ? block[r] : c % 8 == 0 ? std::min<int64_t>(block[r], 8) : 1;
    }
    for (size_t v = 0; v < n_; ++v)
      if (is_image(g_.type(ValueId(v)))) {
        const size_t r = groups_.find(v);
        if (!conv[r]) continue;
        if (want_ == ImageLayout::nhwc)
          layout_[v] = ImageLayout::nhwc;
        else if (block[r] > 1)
          layout_[v] = block[r] == 16 ? ImageLayout::nChw16c : ImageLayout::nChw8c;
      }
  }

  // The layout of v's group (nchw: v stays as it is).
  ImageLayout layout_of(ValueId v) const { return layout_[size_t(v)]; }

  ValueId append(ir::Node n) { return lower::append(out_, std::move(n)); }

  ValueId shape_op(Op op, ValueId x, const Shape& shape, ir::Attrs attrs, const ir::Node& at) {
    return append(ir::Node{
        op, {x}, std::move(attrs), ir::Type{out_.type(x).dtype, shape}, at.loc, at.stage, nullptr});
  }
  // x in `shape`: a reshape of it (of its source, when x is a reshape), or
  // that source itself when it has the shape.
  ValueId reshaped(ValueId x, const Shape& shape, const ir::Node& at) {
    if (out_.node(x).op == Op::reshape) x = out_.node(x).args[0];
    if (out_.type(x).shape == shape) return x;
    return shape_op(Op::reshape, x, shape, ir::make_attrs<Op::reshape>({{"shape", shape}}), at);
  }
  ValueId transposed(ValueId x, const Shape& perm, const ir::Node& at) {
    const Shape& s = out_.type(x).shape;
    Shape t;
    for (int64_t p : perm) t.push_back(s[size_t(p)]);
    return shape_op(Op::transpose, x, t, ir::make_attrs<Op::transpose>({{"perm", perm}}), at);
  }

  // The stored shape of image v.
  Shape stored(ValueId v) const {
    const Shape& s = g_.type(v).shape;
    return ir::stored_image(layout_of(v), s[0], s[1], s[2], s[3]);
  }

  // v (of g) as out's NCHW value: converted back once, where a reader
  // outside its group first needs it.
  ValueId plain(ValueId v) {
    if (plain_[size_t(v)] != ir::kNoValue) return plain_[size_t(v)];
    WS_CHECK(stored_[size_t(v)] != ir::kNoValue) << "value %" << v << " is not rewritten yet";
    const ir::Node& at = g_.node(v);
    if (layout_of(v) == ImageLayout::nhwc)
      return plain_[size_t(v)] = transposed(stored_[size_t(v)], {0, 3, 1, 2}, at);
    return plain_[size_t(v)] =
               reshaped(transposed(stored_[size_t(v)], {0, 1, 4, 2, 3}, at), g_.type(v).shape, at);
  }

  // v (of g, in a group with a layout) as out's stored value: converted
  // once, where a reader in its group first needs it.
  ValueId stored_value(ValueId v) {
    if (stored_[size_t(v)] != ir::kNoValue) return stored_[size_t(v)];
    WS_CHECK(layout_of(v) != ImageLayout::nchw) << "value %" << v << " has no layout";
    const ir::Node& at = g_.node(v);
    if (layout_of(v) == ImageLayout::nhwc)
      return stored_[size_t(v)] = transposed(plain(v), {0, 2, 3, 1}, at);
    const Shape& s = g_.type(v).shape;
    const int64_t b = ir::channel_block(layout_of(v));
    return stored_[size_t(v)] = transposed(reshaped(plain(v), {s[0], s[1] / b, b, s[2], s[3]}, at),
                                           {0, 1, 3, 4, 2}, at);
  }

  // Pointwise convolution v (NHWC) as a product of rows of pixels: y = x
  // w^T, dx = dy w, dw = dy^T x, over [N*H*W, C] and [N*H*W, O] views.
  void as_product(ValueId v, const ir::Conv2dGeom& c) {
    const ir::Node& old = g_.node(v);
    const int64_t rows = c.n * c.h * c.w;
    auto rows_of = [&](ValueId image, int64_t channels) {
      return reshaped(stored_value(image), {rows, channels}, old);
    };
    const ValueId w = reshaped(plain(old.args[1]), {c.o, c.c}, old);
    auto product = [&](ValueId a, ValueId b, bool ta, bool tb, const Shape& shape) {
      ir::Attrs attrs;
      if (ta) ir::set_attr<Op::matmul, "transpose_a">(attrs, 1);
      if (tb) ir::set_attr<Op::matmul, "transpose_b">(attrs, 1);
      return append(ir::Node{Op::matmul,
                             {a, b},
                             std::move(attrs),
                             ir::Type{DType::f32, shape},
                             old.loc,
                             old.stage,
                             nullptr});
    };
    if (old.op == Op::conv2d) {
      stored_[size_t(v)] =
          reshaped(product(rows_of(old.args[0], c.c), w, false, true, {rows, c.o}), stored(v), old);
    } else if (old.op == Op::conv2d_input_grad) {
      stored_[size_t(v)] = reshaped(
          product(rows_of(old.args[0], c.o), w, false, false, {rows, c.c}), stored(v), old);
    } else {
      plain_[size_t(v)] = reshaped(
          product(rows_of(old.args[1], c.o), rows_of(old.args[0], c.c), true, false, {c.o, c.c}),
          old.type.shape, old);
    }
  }

  // Node v of g into out_: at its stored shape when it is an inner op of a
  // group with a layout, else as it was, reading plain operands.
  void rewrite(ValueId v) {
    const ir::Node& old = g_.node(v);
    ir::Node n = old;
    const ImageLayout l = layout_of(v);
    const bool moved = inner_[size_t(v)] && l != ImageLayout::nchw;
    if (movable_conv(g_, old, want_ != ImageLayout::nhwc) &&
        layout_of(old.args[0]) != ImageLayout::nchw) {
      const ImageLayout cl = layout_of(old.args[0]);
      const ir::Conv2dGeom c =
          ir::conv2d_node_geom(old.op, old.attrs, operand_types(g_, old), old.type);
      if (cl == ImageLayout::nhwc && pointwise(c)) return as_product(v, c);
      ir::set_attr<ir::kConvOps, "layout">(n.attrs, std::string(ir::layout_name(cl)));
      if (old.op == Op::conv2d_weight_grad) {
        n.args = {stored_value(old.args[0]), stored_value(old.args[1])};
        plain_[size_t(v)] = append(std::move(n));
        return;
      }
      n.args = {stored_value(old.args[0]), plain(old.args[1])};
      n.type.shape = stored(v);
      if (old.op == Op::conv2d_input_grad)
        ir::set_attr<Op::conv2d_input_grad, "input_shape">(n.attrs, n.type.shape);
      stored_[size_t(v)] = append(std::move(n));
      return;
    }
    if (moved && old.op == Op::broadcast) {
      const Shape& src = g_.type(old.args[0]).shape;
      std::vector<int64_t> dims = ir::attr<Op::broadcast, "dims">(old.attrs);
      ValueId a = plain(old.args[0]);
      if (std::find(dims.begin(), dims.end(), 1) == dims.end()) {
        // Dims among N, H, W: the same elements, placed where the layout
        // keeps those dims.
        for (int64_t& d : dims) d = stored_dim(l, d);
      } else {
        // The source at the image's rank, its sizes where dims put them and
        // 1 elsewhere, then stored: the channels in their place (or one
        // channel, repeated). Its elements keep their order.
        Shape full{1, 1, 1, 1};
        for (size_t i = 0; i < dims.size(); ++i) full[size_t(dims[i])] = src[i];
        const Shape st = full[1] == 1 && l != ImageLayout::nhwc
                             ? Shape{full[0], 1, full[2], full[3], 1}
                             : ir::stored_image(l, full[0], full[1], full[2], full[3]);
        a = reshaped(a, st, old);
        dims.resize(st.size());
        std::iota(dims.begin(), dims.end(), 0);
      }
      n.args = {a};
      n.type.shape = stored(v);
      ir::set_attr<Op::broadcast, "dims">(n.attrs, dims);
      ir::set_attr<Op::broadcast, "shape">(n.attrs, n.type.shape);
      stored_[size_t(v)] = append(std::move(n));
      return;
    }
    if (moved) {  // elementwise, concat, or full
      for (ValueId& a : n.args) a = stored_value(a);
      n.type.shape = stored(v);
      if (old.op == Op::concat)
        ir::set_attr<Op::concat, "axis">(n.attrs,
                                         stored_dim(l, ir::attr<Op::concat, "axis">(old.attrs)));
      if (old.op == Op::max_pool2d || old.op == Op::max_pool2d_grad)
        ir::set_attr<ir::OpSet{Op::max_pool2d, Op::max_pool2d_grad}, "layout">(
            n.attrs, std::string(ir::layout_name(l)));
      if (old.op == Op::slice)
        ir::set_attr<Op::slice, "axis">(n.attrs,
                                        stored_dim(l, ir::attr<Op::slice, "axis">(old.attrs)));
      stored_[size_t(v)] = append(std::move(n));
      return;
    }
    const ValueId x = old.args.empty() ? ir::kNoValue : old.args[0];
    if (movable_reduction(g_, old) && layout_of(x) != ImageLayout::nchw && inner_[size_t(x)]) {
      // Over the stored image: the kept dims are the result's, in its order
      // (N, then C: whole, or as blocks and their channels).
      n.args = {stored_value(x)};
      std::vector<int64_t> axes = ir::attr<ir::kReduceOps, "axes">(old.attrs);
      for (int64_t& a : axes) a = stored_dim(layout_of(x), a);
      std::sort(axes.begin(), axes.end());
      const Shape st = out_.type(n.args[0]).shape;
      Shape kept;
      for (int64_t d = 0; d < int64_t(st.size()); ++d)
        if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(st[size_t(d)]);
      ir::set_attr<ir::kReduceOps, "axes">(n.attrs, axes);
      n.type.shape = kept;
      plain_[size_t(v)] = reshaped(append(std::move(n)), old.type.shape, old);
      return;
    }
    for (ValueId& a : n.args) a = plain(a);
    plain_[size_t(v)] = append(std::move(n));
  }

  const ir::Graph& g_;
  const ImageLayout want_;  // nhwc, or blocks (nChw16c: of 16 channels, else 8; nChw8c: of 8)
  const size_t n_;
  UnionFind groups_;
  std::vector<bool> inner_;              // computed at the stored shape when its group has a layout
  std::vector<ValueId> stored_, plain_;  // v's value in out_, stored or NCHW
  std::vector<ImageLayout> layout_;      // v's group's layout (nchw: none)
  ir::Graph out_;
};

}  // namespace

ir::Graph channels_last(const ir::Graph& g, bool* changed) {
  return Assign(g, ImageLayout::nhwc).run(changed);
}

ir::Graph blocked_layouts(const ir::Graph& g, bool* changed) {
  return Assign(g, ImageLayout::nChw16c).run(changed);
}

ir::Graph blocked_layouts_of_8(const ir::Graph& g, bool* changed) {
  return Assign(g, ImageLayout::nChw8c).run(changed);
}

std::string_view blocked_layouts_pass_for_this_cpu() {
  return exec::native_channel_block() == 16 ? "blocked_layouts" : "blocked_layouts_of_8";
}

ir::Graph blocked_layouts_for_this_cpu(const ir::Graph& g, bool* changed) {
  return blocked_layouts_pass_for_this_cpu() == "blocked_layouts"
             ? blocked_layouts(g, changed)
             : blocked_layouts_of_8(g, changed);
}

}  // namespace ws::lower
