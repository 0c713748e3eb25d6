// The shape and stride arithmetic the kernels share (declared in
// reference.hpp): merged dims, row-major, broadcast, transpose and reduction
// strides, and the dims of products and slices.
#include <algorithm>

#include "exec/reference.hpp"
#include "ir/attr.hpp"

namespace ws::exec {

using ir::Op;

int64_t dims_product(Shape::const_iterator begin, Shape::const_iterator end) {
  int64_t n = 1;
  for (auto it = begin; it != end; ++it) n *= *it;
  return n;
}

// Merges adjacent dims where every operand's strides allow it, and drops
// size-1 dims; `strides` holds one vector per operand.
void merge_joint(Shape& shape, std::vector<std::vector<int64_t>>& strides) {
  Shape s;
  std::vector<std::vector<int64_t>> st(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !s.empty();
    for (size_t i = 0; merge && i < strides.size(); ++i)
      merge = st[i].back() == strides[i][d] * shape[d];
    if (merge) {
      s.back() *= shape[d];
      for (size_t i = 0; i < strides.size(); ++i) st[i].back() = strides[i][d];
    } else {
      s.push_back(shape[d]);
      for (size_t i = 0; i < strides.size(); ++i) st[i].push_back(strides[i][d]);
    }
  }
  if (s.empty()) {
    s = {1};
    for (auto& v : st) v = {0};
  }
  shape = std::move(s);
  strides = std::move(st);
}

void merge_dims(Shape& shape, std::vector<int64_t>& strides) {
  Shape s;
  std::vector<int64_t> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1 && shape.size() > 1) continue;  // size-1 dims walk nothing
    if (!s.empty() && st.back() == strides[d] * shape[d]) {
      s.back() *= shape[d];
      st.back() = strides[d];
    } else {
      s.push_back(shape[d]);
      st.push_back(strides[d]);
    }
  }
  if (s.empty() && !shape.empty()) s = {1}, st = {0};
  shape = std::move(s);
  strides = std::move(st);
}

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    s[size_t(d)] = s[size_t(d + 1)] * shape[size_t(d + 1)];
  return s;
}

std::vector<int64_t> broadcast_source_strides(const Shape& in, const Shape& out,
                                              const std::vector<int64_t>& dims) {
  std::vector<int64_t> in_strides = row_major_strides(in), s(out.size(), 0);
  for (size_t i = 0; i < dims.size(); ++i)
    if (in[i] != 1) s[size_t(dims[i])] = in_strides[i];
  return s;
}

std::vector<int64_t> transpose_source_strides(const Shape& in, const std::vector<int64_t>& perm) {
  std::vector<int64_t> in_strides = row_major_strides(in), s;
  for (int64_t p : perm) s.push_back(in_strides[size_t(p)]);
  return s;
}

std::vector<int64_t> reduce_result_strides(const Shape& in, const std::vector<int64_t>& axes) {
  std::vector<bool> reduced(in.size(), false);
  for (int64_t a : axes) reduced[size_t(a < 0 ? a + int64_t(in.size()) : a)] = true;
  Shape out;
  for (size_t d = 0; d < in.size(); ++d)
    if (!reduced[d]) out.push_back(in[d]);
  std::vector<int64_t> out_strides = row_major_strides(out), s(in.size(), 0);
  size_t j = 0;
  for (size_t d = 0; d < in.size(); ++d)
    if (!reduced[d]) s[d] = out_strides[j++];
  return s;
}

MatmulDims matmul_dims(const Shape& a, const Shape& b, const ir::Attrs& attrs) {
  const size_t r = a.size();
  MatmulDims d;
  d.ta = ir::attr<ir::kMatmulOps, "transpose_a">(attrs);
  d.tb = ir::attr<ir::kMatmulOps, "transpose_b">(attrs);
  d.batch = dims_product(a.begin(), a.end() - 2);
  d.m = a[r - 2 + d.ta], d.k = a[r - 1 - d.ta], d.n = b[r - 1 - d.tb];
  return d;
}

SliceDims slice_dims(const Shape& x, const ir::Attrs& attrs) {
  const int64_t start = ir::attr<Op::slice, "start">(attrs),
                end = ir::attr<Op::slice, "end">(attrs);
  int64_t axis = ir::attr<Op::slice, "axis">(attrs);
  if (axis < 0) axis += int64_t(x.size());
  const int64_t inner = dims_product(x.begin() + axis + 1, x.end());
  SliceDims d;
  d.outer = dims_product(x.begin(), x.begin() + axis);
  d.in_row = x[size_t(axis)] * inner;
  d.out_row = (end - start) * inner;
  d.start = start * inner;
  return d;
}

}  // namespace ws::exec
