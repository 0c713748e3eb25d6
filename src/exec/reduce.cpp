// The walk of a reduction (reduce_walk.hpp): its kept and reduced dims.
#include "exec/reduce.hpp"

#include "exec/reduce_walk.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {

namespace reduce_detail {

Walk analyze(const Shape& shape, const std::vector<int64_t>& strides) {
  const int r = int(shape.size());
  WS_CHECK(r <= kMaxRank) << "rank " << r << " is above the supported " << kMaxRank;
  WS_CHECK(strides.size() == shape.size()) << strides.size() << " strides for rank " << r;
  int64_t in_stride[kMaxRank], s = 1;
  for (int d = r - 1; d >= 0; --d) in_stride[d] = s, s *= shape[size_t(d)];
  Walk w;
  for (int d = 0; d < r; ++d) {
    const int64_t n = shape[size_t(d)];
    if (n == 1) continue;
    w.inner_kept = strides[size_t(d)] != 0;
    if (w.inner_kept) {
      w.ksize[w.nk] = n, w.kin[w.nk] = in_stride[d], w.kout[w.nk] = strides[size_t(d)];
      ++w.nk;
      w.results *= n;
    } else {
      w.rsize[w.nr] = n, w.rin[w.nr] = in_stride[d];
      ++w.nr;
      w.length *= n;
    }
  }
  return w;
}

}  // namespace reduce_detail

const char* reduce_walk_name(const Shape& shape, const std::vector<int64_t>& strides) {
  const reduce_detail::Walk w = reduce_detail::analyze(shape, strides);
  if (w.nr == 0) return "none";
  if (w.inner_kept) return "columns";
  return w.nk == 0 && w.nr == 1 ? "all" : "rows";
}

}  // namespace ws::exec
