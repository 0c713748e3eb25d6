// Matrix products as backend ops (dnnl_matmul.hpp).
#include "exec/dnnl_matmul.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "exec/dnnl_op.hpp"
#include "exec/dnnl_teams.hpp"
#include "exec/few_row_products.hpp"
#include "exec/short_products.hpp"
#include "exec/threads.hpp"
#include "ir/attr.hpp"

namespace ws::exec {
namespace {

using ir::Op;
using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// An operand of a product as oneDNN sees it: `shape` is the stored value's
// ([..., rows, cols]), read at element `strides` (row-major when empty); with
// `transposed` the matrix is the stored one's transpose, which is only a swap
// of the last two dims and their strides.
dnnl::memory::desc matrix(const Shape& shape, std::vector<int64_t> strides, bool transposed) {
  if (strides.empty()) strides = row_major_strides(shape);
  dims d(shape.begin(), shape.end()), st(strides.begin(), strides.end());
  if (transposed) {
    std::swap(d[d.size() - 1], d[d.size() - 2]);
    std::swap(st[st.size() - 1], st[st.size() - 2]);
  }
  return {d, dt::f32, st};
}

// One oneDNN matmul primitive for the team pinned now.
std::shared_ptr<DnnlOp> make_matmul_primitive(std::span<const ir::Type> in, const ir::Type& out,
                                              const ir::Attrs& attrs,
                                              std::span<const std::vector<int64_t>> strides,
                                              const std::vector<int64_t>& out_strides,
                                              bool accumulate, bool bias, bool residual) {
  const MatmulDims d = matmul_dims(in[0].shape, in[1].shape, attrs);
  auto op = std::make_shared<DnnlOp>();
  auto stride_of = [&](size_t i) {
    return i < strides.size() ? strides[i] : std::vector<int64_t>{};
  };
  const auto a = matrix(in[0].shape, stride_of(0), d.ta),
             b = matrix(in[1].shape, stride_of(1), d.tb), c = matrix(out.shape, out_strides, false);
  dnnl::primitive_attr attr = user_scratchpad();
  // An activation is applied by the kernel after the product
  // (kernels.cpp): oneDNN's relu post-op maps NaN to 0, PyTorch's relu
  // keeps it.
  const std::string* activation = ir::attr<Op::matmul_bias, "activation">(attrs);
  WS_CHECK(!activation || (*activation == "relu" && !accumulate))
      << "matmul: activation " << *activation;
  if (residual) {  // dst = dst + ((a @ b) + bias): the sum post-op with scale 1 is an add
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  // dst = dst + alpha * (a @ b), alpha given at run time (AccumulateOp):
  // the product times a one-element tensor, then the sum post-op. Not a
  // runtime output scale: oneDNN 2.6 runs that as gemm:jit, not the plain
  // product's brgemm, and gemm:jit sums otherwise for one row or column (a
  // gemv) and for a long K (blocks of K each scaled and added to dst).
  const dnnl::memory::desc alpha_md = matrix(Shape(out.shape.size(), 1), {}, false);
  if (accumulate) {
    dnnl::post_ops po;
    po.append_binary(dnnl::algorithm::binary_mul, alpha_md);
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  // A bias per column: [1, ..., 1, n], broadcast over the rows.
  Shape bias_shape(out.shape.size(), 1);
  bias_shape.back() = out.shape.back();
  const dnnl::memory::desc bias_md = matrix(bias_shape, {}, false);
  dnnl::matmul::primitive_desc pd(
      bias ? dnnl::matmul::desc(a, b, bias_md, c) : dnnl::matmul::desc(a, b, c), attr,
      dnnl_engine());
  op->add_operand(DNNL_ARG_SRC, 0, a, pd.src_desc());
  op->add_operand(DNNL_ARG_WEIGHTS, 1, b, pd.weights_desc());
  if (bias) op->add_operand(DNNL_ARG_BIAS, 3, bias_md, pd.bias_desc());
  if (accumulate)
    op->add_operand(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, 3, alpha_md, alpha_md);
  op->add_operand(DNNL_ARG_DST, 2, c, pd.dst_desc());
  op->set_main<dnnl::matmul>(pd, matmul_flops(d));
  op->finish(fmt::format("{} [{}x{}x{}] x{}{}{}{}",
                         accumulate || (residual && !bias) ? "matmul_add"
                         : residual                        ? "matmul_bias_add"
                         : bias                            ? "matmul_bias"
                                                           : "matmul",
                         d.m, d.k, d.n, d.batch, d.ta ? " ta" : "", d.tb ? " tb" : "",
                         strides.empty() && out_strides.empty() ? "" : " strided"));
  return op;
}

}  // namespace

std::shared_ptr<const DnnlOp> make_whole_matmul(std::span<const ir::Type> in, const ir::Type& out,
                                                const ir::Attrs& attrs) {
  auto op = make_matmul_primitive(in, out, attrs, {}, {}, false, false, false);
  op->sum_by_team();
  return op;
}

namespace {

// oneDNN 2.6's brgemm product with a transposed A (A stored [K, M]: every
// weight gradient X^T dY) splits its sums over K between the threads of the
// team it was made for when K exceeds 1024 and the output is small: 1 and 2
// threads round differently (found by the differential tester; a sweep of
// shapes found it in no other layout and for no K up to 1024). Such a
// product runs as fixed parts instead (dnnl_teams.hpp), each a primitive
// made for one thread summing over the whole K: each batch's matrix, or for
// one matrix up to four parts of its rows. Transposing A
// whole and running the plain product instead was 1.2-1.6x slower on one
// thread (oneDNN's copy of a transposed A suits its brgemm kernel better;
// gemm:jit's is the other way: make_matmul).
constexpr int64_t kLongestUnsplitK = 1024;
constexpr int64_t kTransposedAK = 256;        // make_matmul
constexpr int64_t kAliasingStride = 512;      // make_matmul
constexpr int64_t kStagedBRows = 64;          // make_matmul
constexpr int64_t kMatrixParts = 4;           // of one matrix's rows or columns
constexpr int64_t kColAlign = 16;             // columns split at multiples of this
constexpr int64_t kSmallMatrixFlops = 65536;  // make_matmul_in_parts
constexpr int64_t kBatchParts = 8;            // of a batch of small matrices

// Where each matrix of a [..., rows, cols] operand read at `strides` starts,
// the batch dims walked in row-major order.
std::vector<int64_t> batch_offsets(const Shape& shape, const std::vector<int64_t>& strides) {
  std::vector<int64_t> offsets{0};
  for (size_t i = 0; i + 2 < shape.size(); ++i) {
    std::vector<int64_t> next;
    for (int64_t o : offsets)
      for (int64_t j = 0; j < shape[i]; ++j) next.push_back(o + j * strides[i]);
    offsets = std::move(next);
  }
  return offsets;
}

// The strides of every dim of an operand: its own, or row-major.
std::vector<int64_t> full_strides(const Shape& shape, std::span<const std::vector<int64_t>> st,
                                  size_t i) {
  return i < st.size() && !st[i].empty() ? st[i] : row_major_strides(shape);
}

// How a part of a product reads a transposed A: where it lies, from a dense
// copy of its columns ([k, rows]), or from a dense copy of A itself ([rows,
// k]) by a primitive made for a plain A.
enum class DenseA { no, columns, transposed };

// A product as fixed parts on the pool: each batch's matrix (a batch of
// small matrices: up to kBatchParts parts of the batch), or for one matrix
// up to kMatrixParts parts of its rows or of its columns, each a one-thread
// primitive over the whole K. The parts depend on the shape
// alone, so the bits do not depend on the team. With `dense_a` each part's
// A (a transposed A's columns) is copied dense first; otherwise a part
// reads A where it lies.
std::shared_ptr<const BackendOp> make_matmul_in_parts(std::span<const ir::Type> in,
                                                      const ir::Type& out, const ir::Attrs& attrs,
                                                      std::span<const std::vector<int64_t>> strides,
                                                      const std::vector<int64_t>& out_strides,
                                                      bool accumulate, bool bias, bool residual,
                                                      DenseA dense, bool stage_b) {
  const bool dense_a = dense != DenseA::no;
  const MatmulDims d = matmul_dims(in[0].shape, in[1].shape, attrs);
  const size_t r = out.shape.size();
  const std::vector<int64_t> sa = full_strides(in[0].shape, strides, 0),
                             sb = full_strides(in[1].shape, strides, 1),
                             so = out_strides.empty() ? row_major_strides(out.shape) : out_strides;
  if (d.batch > 1 && !dense_a && matmul_flops(d) / d.batch <= kSmallMatrixFlops) {
    // Small matrices of a batch: parts of the batch's leading dim (the first
    // longer than 1), each one primitive over its matrices, not one part a
    // matrix: a call costs more than such a product. alexnet's adaptive
    // pooling over a 1x1 map runs 4 x 2048 products of 6x6 and smaller a
    // step; as 8 parts each, its products' time in the same run went from
    // 60.6 to 52.5 ms a step (AMD EPYC Zen 3; the step within the host's
    // noise), vit_b_16's attention (17 x 64 per head) within 1%.
    std::vector<MatrixPart> parts;
    TeamScope one(1);
    size_t lead = 0;
    while (lead + 2 < r && out.shape[lead] == 1) ++lead;
    const int64_t size = out.shape[lead], count = std::min(size, kBatchParts);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t b0 = size * i / count, b1 = size * (i + 1) / count;
      auto part = [&](Shape shape) {
        shape[lead] = b1 - b0;
        return ir::Type{DType::f32, shape};
      };
      MatrixPart p;
      p.a = b0 * sa[lead], p.b = b0 * sb[lead], p.out = b0 * so[lead];
      const std::vector<ir::Type> part_in{part(in[0].shape), part(in[1].shape)};
      const std::vector<std::vector<int64_t>> part_st{sa, sb};
      p.op = make_matmul_primitive(part_in, part(out.shape), attrs, part_st, so, accumulate, bias,
                                   residual);
      parts.push_back(std::move(p));
    }
    return make_matrix_parts(std::move(parts));
  }
  // A staged B ([k, n], one matrix, rows dense) is read from its copy at a
  // row stride that does not alias (make_matmul).
  StagedB staged;
  if (stage_b) {
    WS_CHECK(d.batch == 1 && !d.tb && sb[r - 1] == 1) << "matmul: a B that cannot be staged";
    int64_t padded = (d.n + kColAlign - 1) / kColAlign * kColAlign + kColAlign;
    if (padded % kAliasingStride == 0) padded += kColAlign;
    staged = {d.k, d.n, sb[r - 2], padded};
  }
  const std::vector<int64_t> oa = batch_offsets(in[0].shape, sa),
                             ob =
                                 stage_b ? std::vector<int64_t>{0} : batch_offsets(in[1].shape, sb),
                             oo = batch_offsets(out.shape, so);
  const std::vector<int64_t> a_st{sa[r - 2], sa[r - 1]},
      b_st = stage_b ? std::vector<int64_t>{staged.padded, 1}
                     : std::vector<int64_t>{sb[r - 2], sb[r - 1]},
      out_st{so[r - 2], so[r - 1]};
  // A row of the product is a row of A, or a column of A stored transposed;
  // a column is a column of B, or a row of B stored transposed.
  const int64_t row_step = d.ta ? sa[r - 1] : sa[r - 2];
  const int64_t col_step = d.tb ? sb[r - 2] : stage_b ? 1 : sb[r - 1];
  // One matrix is split along its longer side of the output: each part
  // copies its slice of one operand and the whole other one into the
  // kernel's blocks, so splitting the columns of a wide product (a
  // recurrent step's [32 x 256] x [256 x 1024]) copies B once a product
  // instead of once a part. Columns are split at multiples of 16 (whole
  // vectors of the kernel) where they can be.
  const bool by_cols = d.batch == 1 && !dense_a && d.n > d.m;
  const int64_t parts_per_matrix = d.batch > 1 ? 1
                                   : by_cols ? std::clamp<int64_t>(d.n / kColAlign, 1, kMatrixParts)
                                             : std::min(d.m, kMatrixParts);
  auto col_start = [&](int64_t i) {
    return i == parts_per_matrix ? d.n : d.n * i / parts_per_matrix / kColAlign * kColAlign;
  };
  std::vector<MatrixPart> parts;
  TeamScope one(1);
  for (int64_t batch = 0; batch < d.batch; ++batch)
    for (int64_t i = 0; i < parts_per_matrix; ++i) {
      int64_t m0 = 0, rows = d.m, n0 = 0, cols = d.n;
      if (by_cols)
        n0 = col_start(i), cols = col_start(i + 1) - n0;
      else
        m0 = d.m * i / parts_per_matrix, rows = d.m * (i + 1) / parts_per_matrix - m0;
      MatrixPart p;
      p.a = oa[size_t(batch)] + m0 * row_step;
      p.b = ob[size_t(batch)] + n0 * col_step;
      p.out = oo[size_t(batch)] + m0 * so[r - 2] + n0 * so[r - 1];
      if (bias) p.bias = n0;
      if (dense_a) p.dense_rows = rows, p.k = d.k, p.sk = sa[r - 2], p.sm = sa[r - 1];
      p.transpose_a = dense == DenseA::transposed;
      // An op of its own: parts run at once, and an op binds its operands'
      // pointers when it runs (oneDNN's cache shares the primitive itself).
      const bool ta = d.ta && !p.transpose_a;
      const std::vector<ir::Type> part_in{{DType::f32, ta ? Shape{d.k, rows} : Shape{rows, d.k}},
                                          {DType::f32, d.tb ? Shape{cols, d.k} : Shape{d.k, cols}}};
      const std::vector<std::vector<int64_t>> part_st{dense_a ? std::vector<int64_t>{} : a_st,
                                                      b_st};
      ir::Attrs part_attrs = attrs;
      if (p.transpose_a) ir::set_attr<Op::matmul, "transpose_a">(part_attrs, 0);
      p.op = make_matmul_primitive(part_in, {DType::f32, {rows, cols}}, part_attrs, part_st, out_st,
                                   accumulate, bias, residual);
      parts.push_back(std::move(p));
    }
  if (parts.size() == 1 && !dense_a && !stage_b) return parts[0].op;
  return make_matrix_parts(std::move(parts), staged);
}

}  // namespace

// A product over a short contraction or of few rows over a large B runs as
// our own loops (short_products.hpp, few_row_products.hpp); one whose
// primitive runs on one thread (gemm:jit, DnnlOp) in parts on the pool; one
// with a transposed A and a long K in parts, its parts' A dense; any other
// as oneDNN's one primitive.
//
// gemm:jit (oneDNN's products on CPUs without AVX-512) is slow with a
// transposed A when it cannot split the output's columns (as many rows as
// columns or more) in two cases. From a K of 256 on: on one thread of a
// 2-core AMD EPYC Zen 3 (AVX2), [2048 x 1024]^T x [1024 x 256] ran at 37
// GF/s where the plain product ran at 81 (OpenBLAS 81 either way); on two,
// [1024 x 256]^T x [256 x 256] at 65 GF/s as oneDNN's one primitive and at
// 119 as parts over A transposed in the scratch first (bert's step 1.11x
// faster in the same run). And for any K when the rows of the stored A lie
// a multiple of 512 floats (2 KiB) apart: its copy of A walks down columns,
// and rows that far apart fall into the same few L1 sets. On the same CPU,
// parts on two threads, transposed first against read where A lies:
// [1024 x 128]^T, [2048 x 128]^T, [3072 x 128]^T and [6144 x 64]^T times
// B's 256 or 512 columns 1.7-2.1x faster (a 1x1 convolution's weight
// gradient over a small map), a stride of 512 1.35x; strides of 640, 768,
// 1280 1.1x, 576, 896, 960, 1000 and 1152 within 3%, 384 0.93x, which is why
// the rule names the strides that alias rather than every transposed A. The
// steps in the same run: resnet50 1.03-1.04x, resnext50_32x4d 1.02x,
// bert, vit_b_16 and mobilenet_v2 within 1%. Such a product's parts
// transpose their rows of A into the scratch and run the plain product
// (DenseA::transposed).
//
// A plain B whose rows lie a multiple of 512 floats apart (B [k, n] with n
// = 512, 1024, ...: a weight read as it lies in a backward product, a 1x1
// convolution's weight with 512 or 1024 output channels) costs gemm:jit the
// same, for any K and any A: on the same CPU, parts on two threads of
// [1024 x 256] x [256 x 1024] ran at 70-90 GF/s as they lie and at 139-176
// with B at a row stride of 1040, [M x 512] x [512 x 1024] 1.8-2.0x for M
// from 8 to 256 (A's stride of 1024 changed nothing; how slow depends on
// where the operands lie relative to each other, which in a step is the
// arena's plan). Such a B is copied once, before the parts run, at a stride
// that does not alias (StagedB), when the output has at least 64 rows: the
// copy costs about 7 / M of the product (vgg16's [8 x 4096] x [4096 x
// 25088] would copy 411 MB a step for an 8-row product, 0.91x). Same run,
// steps against B read where it lies: bert 1.09-1.20x, vit_b_16 1.06-1.22x,
// resnext50_32x4d 1.01-1.15x, resnet50 0.98-1.05x, vgg16 1.03x, the models
// with no such product within noise.
std::shared_ptr<const BackendOp> make_matmul(std::span<const ir::Type> in, const ir::Type& out,
                                             const ir::Attrs& attrs,
                                             std::span<const std::vector<int64_t>> strides,
                                             const std::vector<int64_t>& out_strides,
                                             bool accumulate, bool bias, bool residual) {
  const MatmulDims d = matmul_dims(in[0].shape, in[1].shape, attrs);
  const size_t r = out.shape.size();
  const std::vector<int64_t> sa = full_strides(in[0].shape, strides, 0),
                             sb = full_strides(in[1].shape, strides, 1),
                             so = out_strides.empty() ? row_major_strides(out.shape) : out_strides;
  if (!accumulate && short_contraction(d))
    return make_short_product(short_product_of(d, sa, sb), batch_offsets(in[0].shape, sa),
                              batch_offsets(in[1].shape, sb), batch_offsets(out.shape, so),
                              so[r - 2], so[r - 1], bias, residual);
  if (FewRowProduct few; !accumulate && few_row_product_of(d, sa, sb, so, few))
    return make_few_row_product(few, bias, residual);
  auto in_parts = [&](DenseA dense, bool stage_b) {
    return make_matmul_in_parts(in, out, attrs, strides, out_strides, accumulate, bias, residual,
                                dense, stage_b);
  };
  auto whole =
      make_matmul_primitive(in, out, attrs, strides, out_strides, accumulate, bias, residual);
  if (whole->on_one_thread()) {
    const bool dense =
        d.ta && d.n <= d.m && (d.k >= kTransposedAK || sa[r - 2] % kAliasingStride == 0);
    const bool stage_b = d.batch == 1 && !d.tb && d.m >= kStagedBRows && sb[r - 1] == 1 &&
                         sb[r - 2] % kAliasingStride == 0;
    return in_parts(dense ? DenseA::transposed : DenseA::no, stage_b);
  }
  if (d.ta && d.k > kLongestUnsplitK) return in_parts(DenseA::columns, false);
  return whole;
}

int64_t matmul_flops(const MatmulDims& d) { return 2 * d.batch * d.m * d.n * d.k; }

}  // namespace ws::exec
