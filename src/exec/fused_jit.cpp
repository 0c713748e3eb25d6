// Fused loops compiled to machine code (fused_loop.hpp: FusedLoop::plan_jit):
// a loop of f32 sums, differences, products, quotients, negations,
// comparisons and selects runs as one pass over its operands, eight
// elements at a time, every value in a vector register, where the steps
// pass over the chunk once an op. Each instruction computes the IEEE
// operation the op's step computes on each element (a comparison as
// binary_value: false where an operand is NaN, but `ne`), so the bits are
// the steps'.
#include <xbyak/xbyak.h>
#include <xbyak/xbyak_util.h>

#include <algorithm>
#include <atomic>
#include <memory>

#include "exec/fused_loop.hpp"
#include "exec/parallel.hpp"

namespace ws::exec {
namespace {

using ir::Op;
using Kind = FusedLoop::Kind;

bool has_avx2() {
  static const bool yes = [] {
    Xbyak::util::Cpu cpu;
    return cpu.has(Xbyak::util::Cpu::tAVX2);
  }();
  return yes;
}

// vcmpps predicates of the comparisons, as binary_value compares: ordered
// (false with a NaN) but `ne`, unordered (true with a NaN).
int predicate(Op op) {
  switch (op) {
    case Op::eq: return 0x00;  // EQ_OQ
    case Op::ne: return 0x04;  // NEQ_UQ
    case Op::lt: return 0x11;  // LT_OQ
    case Op::le: return 0x12;  // LE_OQ
    case Op::gt: return 0x1E;  // GT_OQ
    case Op::ge: return 0x1D;  // GE_OQ
    default: return -1;
  }
}

bool arithmetic(Op op) {
  return op == Op::add || op == Op::sub || op == Op::mul || op == Op::div || op == Op::neg ||
         op == Op::sqrt;
}

std::atomic<bool> compile_loops{has_avx2()};

alignas(32) const uint32_t kSignBits[8] = {0x80000000u, 0x80000000u, 0x80000000u, 0x80000000u,
                                           0x80000000u, 0x80000000u, 0x80000000u, 0x80000000u};

}  // namespace

void set_compiled_loops(bool on) { compile_loops = on && has_avx2(); }
bool compiled_loops() { return compile_loops; }

// The code of one loop: void f(const void* const* ptr, int64_t n), n a
// positive multiple of 8, ptr the chunk's pointers of every body value.
struct FusedLoop::JitCode : Xbyak::CodeGenerator {
  // Grown as the code is written (a page to start): a step holds a few
  // hundred such loops.
  JitCode() : Xbyak::CodeGenerator(4096, Xbyak::AutoGrow) {}
};

// Computed values live in ymm0-ymm11 for the iteration; ymm12-ymm14 hold
// operands read from memory, ymm15 zero.
//
// Operands that move along rows (row_scalar: one value a row, row_array: a
// run along it) are read where the row piece the code runs over reads them:
// a chunk's segments are each one call (compiled_segments), the row's value
// held in a register as a one-element operand's is. The column code, which
// walks whole rows, loads a row's value at the start of each.
void FusedLoop::plan_jit(const std::vector<Op>& step_ops, const std::vector<DType>& step_types) {
  if (steps_.empty() || !compiled_loops()) return;
  constexpr int kValueRegs = 12;
  const size_t n = steps_.size();
  // What each step reads, checked: f32 values, a select's condition and a
  // comparison's result bool; arrays, one-element f32 operands and values
  // computed before.
  std::vector<int> computed_at(values_.size(), -1), last_read(values_.size(), -1);
  for (size_t i = 0; i < n; ++i) {
    const Step& st = steps_[i];
    const Op op = step_ops[i];
    if (!st.fn) return;
    const bool compare = predicate(op) >= 0;
    // f32 to f64: only a sum's operand (a mean summed in double), stored or
    // summed where it is computed.
    const bool widen = op == Op::convert && step_types[i] == DType::f64 &&
                       reductions_.size() == 1 && st.out == reductions_[0].src &&
                       values_[size_t(st.out)].kind == Kind::buffer;
    if (!(arithmetic(op) || compare || op == Op::select || widen)) return;
    if (!widen && step_types[i] != (compare ? DType::b8 : DType::f32)) return;
    for (int k = 0; k < 3; ++k) {
      const int32_t a = st.args[k];
      if (a < 0) continue;
      const Value& val = values_[size_t(a)];
      const int64_t want = op == Op::select && k == 0 ? 1 : 4;
      if (val.esize != want) return;
      switch (val.kind) {
        case Kind::input:
        case Kind::tiled:
        case Kind::gather:
        case Kind::row_array: break;
        case Kind::scalar:
        case Kind::constant:
        case Kind::row_scalar:
          if (want != 4) return;
          break;
        case Kind::buffer:
        case Kind::output:
          if (computed_at[size_t(a)] < 0) return;
          last_read[size_t(a)] = int(i);
          break;
        default: return;
      }
    }
    computed_at[size_t(st.out)] = int(i);
  }
  for (size_t i = 0; i < n; ++i)  // a widened value is read by no step
    if (step_ops[i] == Op::convert && last_read[size_t(steps_[i].out)] >= 0) return;
  std::vector<bool> stored(values_.size(), false);
  for (size_t v = 0; v < values_.size(); ++v) stored[v] = values_[v].kind == Kind::output;
  for (auto [v, j] : copy_outs_) stored[size_t(v)] = true;
  // A reduction reads its operand where the loop leaves it.
  for (const Reduction& r : reductions_) stored[size_t(r.src)] = true;
  // One-element operands each take a register for the whole loop (from
  // ymm11 down), the computed values the rest, each from its step to its
  // last read; arrays take a general register for their base.
  auto one_value = [&](int32_t a) {
    const Kind k = values_[size_t(a)].kind;
    return k == Kind::scalar || k == Kind::constant || k == Kind::row_scalar;
  };
  std::vector<int32_t> scalars;
  for (const Step& st : steps_)
    for (int32_t a : st.args)
      if (a >= 0 && one_value(a) && std::find(scalars.begin(), scalars.end(), a) == scalars.end())
        scalars.push_back(a);
  std::vector<int> reg(values_.size(), -1);
  if (int(scalars.size()) >= kValueRegs) return;
  for (size_t k = 0; k < scalars.size(); ++k) reg[size_t(scalars[k])] = kValueRegs - 1 - int(k);
  {
    std::vector<bool> busy(size_t(kValueRegs - int(scalars.size())), false);
    for (size_t i = 0; i < n; ++i) {
      for (int32_t a : steps_[i].args)
        if (a >= 0 && last_read[size_t(a)] == int(i)) busy[size_t(reg[size_t(a)])] = false;
      const int32_t v = steps_[i].out;
      const auto free = std::find(busy.begin(), busy.end(), false);
      if (free == busy.end()) return;  // more live values than registers
      reg[size_t(v)] = int(free - busy.begin());
      if (last_read[size_t(v)] > int(i)) *free = true;
    }
  }
  using namespace Xbyak;
  // The code of the loop over n elements (column false), or of n rows of a
  // column sum's walk (fill_rows): every array's base moving on by a row
  // after each (a tiled run stays), and the sum's operand, where the loop
  // would have stored it, added into lane r mod kSumLanes for row r
  // (`first`: +0 + the operand into lane r, each lane's first row), the
  // lanes a row of the walk apart from ptr[nv] to ptr[nv + 1]. Arrays need
  // a register each there.
  const int64_t nv = int64_t(values_.size());
  const int32_t src = reductions_.empty() ? -1 : reductions_[0].src;
  const int64_t cols = column_streamed_ ? col_width_ : 0;
  const int64_t lane_bytes =
      column_streamed_ ? cols * int64_t(dtype_size(reductions_[0].dtype)) : 0;
  auto emit = [&](bool column, bool first) -> std::shared_ptr<JitCode> {
    auto code = std::make_shared<JitCode>();
    JitCode& c = *code;
    const Reg64 ptr = c.rdi, count = c.rsi, i = c.r8, p = c.rax;
    const Reg64 bases[] = {c.rcx, c.rdx, c.r9,  c.r10, c.r11, c.rbx,
                           c.rbp, c.r12, c.r13, c.r14, c.r15};
    const size_t saved_from = 5;                              // rbx on are the caller's
    const size_t room = std::size(bases) - (column ? 1 : 0);  // column: the lane pointer
    std::vector<int> base(values_.size(), -1);
    size_t used = 0;
    bool all_based = true;
    auto array_base = [&](int32_t v) {
      if (base[size_t(v)] >= 0) return;
      if (used < room)
        base[size_t(v)] = int(used++);
      else
        all_based = false;
    };
    // In the column code a row's value is loaded from its base each row.
    if (column)
      for (int32_t a : scalars)
        if (values_[size_t(a)].kind == Kind::row_scalar) array_base(a);
    for (const Step& st : steps_) {
      for (int32_t a : st.args)
        if (a >= 0 && reg[size_t(a)] < 0) array_base(a);
      if (stored[size_t(st.out)] &&
          (!column || st.out != src || values_[size_t(src)].kind == Kind::output))
        array_base(st.out);
    }
    if (column && src >= 0 && reg[size_t(src)] < 0) array_base(src);
    if (column && !all_based) return nullptr;
    const Reg64 lane = bases[std::size(bases) - 1];
    const size_t pushed = column ? std::size(bases) : used;
    for (size_t k = saved_from; k < pushed; ++k) c.push(bases[k]);
    for (size_t v = 0; v < values_.size(); ++v)
      if (base[v] >= 0) c.mov(bases[base[v]], c.qword[ptr + 8 * int64_t(v)]);
    for (int32_t a : scalars) {
      if (base[size_t(a)] >= 0) continue;  // a row's value, loaded at the row's start
      c.mov(p, c.qword[ptr + 8 * a]);
      c.vbroadcastss(Ymm(reg[size_t(a)]), c.dword[p]);
    }
    // Where array value v's element i lies.
    auto at = [&](int32_t v) {
      if (base[size_t(v)] >= 0) return bases[base[size_t(v)]];
      c.mov(p, c.qword[ptr + 8 * v]);
      return p;
    };
    const Ymm zero = c.ymm15;
    c.vxorps(zero, zero, zero);
    // Lane bytes [at, at + 32) += x, the lane first (reduce_sum's order of
    // operands); +0 + x in a lane's first row.
    auto accumulate = [&](const Ymm& x, int64_t at, bool f64) {
      const Address l = c.yword[lane + i * (f64 ? 8 : 4) + at];
      if (first) {
        f64 ? c.vaddpd(c.ymm14, zero, x) : c.vaddps(c.ymm14, zero, x);
      } else {
        c.vmovups(c.ymm14, l);
        f64 ? c.vaddpd(c.ymm14, c.ymm14, x) : c.vaddps(c.ymm14, c.ymm14, x);
      }
      c.vmovups(l, c.ymm14);
    };
    Label row_top;
    if (column) {
      c.mov(lane, c.qword[ptr + 8 * nv]);
      c.L(row_top);
      for (int32_t a : scalars)
        if (base[size_t(a)] >= 0)
          c.vbroadcastss(Ymm(reg[size_t(a)]), c.dword[bases[base[size_t(a)]]]);
    }
    c.xor_(i, i);
    Label top;
    c.L(top);
    for (size_t s = 0; s < n; ++s) {
      const Step& st = steps_[s];
      const Op op = step_ops[s];
      Ymm in[3] = {c.ymm12, c.ymm13, c.ymm14};
      for (int k = 0; k < 3; ++k) {
        const int32_t a = st.args[k];
        if (a < 0) continue;
        const Ymm t(12 + k);
        if (reg[size_t(a)] >= 0) {
          in[k] = Ymm(reg[size_t(a)]);
        } else if (values_[size_t(a)].esize == 4) {
          c.vmovups(t, c.yword[at(a) + i * 4]);
        } else {  // a bool array: 0 or 1 a byte, widened to a lane mask
          c.vpmovzxbd(t, c.qword[at(a) + i]);
          c.vpcmpgtd(t, t, zero);
        }
      }
      const Ymm y(reg[size_t(st.out)]);
      if (op == Op::convert) {  // eight f32 to eight f64: two vectors
        c.vextractf128(c.xmm13, in[0], 1);
        c.vcvtps2pd(c.ymm13, c.xmm13);
        c.vcvtps2pd(c.ymm12, Xmm(in[0].getIdx()));
        if (!column) {
          c.vmovupd(c.yword[at(st.out) + i * 8], c.ymm12);
          c.vmovupd(c.yword[at(st.out) + i * 8 + 32], c.ymm13);
          continue;
        }
        accumulate(c.ymm12, 0, true);
        accumulate(c.ymm13, 32, true);
        continue;
      }
      switch (op) {
        case Op::add: c.vaddps(y, in[0], in[1]); break;
        case Op::sub: c.vsubps(y, in[0], in[1]); break;
        case Op::mul: c.vmulps(y, in[0], in[1]); break;
        case Op::div: c.vdivps(y, in[0], in[1]); break;
        case Op::neg:
          c.mov(p, reinterpret_cast<size_t>(kSignBits));
          c.vxorps(y, in[0], c.yword[p]);
          break;
        case Op::sqrt: c.vsqrtps(y, in[0]); break;
        case Op::select: c.vblendvps(y, in[2], in[1], in[0]); break;
        default: c.vcmpps(y, in[0], in[1], uint8_t(predicate(op))); break;
      }
      if (column && st.out == src) {  // while the operand is in its register
        accumulate(y, 0, false);
        if (values_[size_t(src)].kind != Kind::output) continue;
      }
      if (!stored[size_t(st.out)]) continue;
      if (values_[size_t(st.out)].esize == 4) {
        c.vmovups(c.yword[at(st.out) + i * 4], y);
      } else {  // a comparison's lane mask as bytes of 0 or 1
        c.vpsrld(c.ymm13, y, 31);
        c.vextracti128(c.xmm14, c.ymm13, 1);
        c.vpackusdw(c.xmm13, c.xmm13, c.xmm14);
        c.vpackuswb(c.xmm13, c.xmm13, c.xmm13);
        c.vmovq(c.qword[at(st.out) + i], c.xmm13);
      }
    }
    if (column && reg[size_t(src)] < 0) {  // an operand the loop reads
      c.vmovups(c.ymm13, c.yword[at(src) + i * 4]);
      accumulate(c.ymm13, 0, false);
    }
    c.add(i, 8);
    if (column)
      c.cmp(i, int32_t(cols));
    else
      c.cmp(i, count);
    c.jb(top);
    if (column) {
      // The next row: arrays move on by a row of the walk (tiled runs stay),
      // the lane pointer to the next lane, from the last back to the first.
      // A row's value moves on by its row stride (the walk is [rows,
      // cols]: fill_rows).
      for (size_t v = 0; v < values_.size(); ++v)
        if (base[v] >= 0 && values_[v].kind == Kind::row_scalar)
          c.add(bases[base[v]], int32_t(values_[v].strides[0] * values_[v].esize));
        else if (base[v] >= 0 && values_[v].kind != Kind::tiled)
          c.add(bases[base[v]], int32_t(cols * values_[v].esize));
      c.add(lane, int32_t(lane_bytes));
      Label same_round;
      c.cmp(lane, c.qword[ptr + 8 * (nv + 1)]);
      c.jb(same_round);
      c.sub(lane, int32_t(kSumLanes * lane_bytes));
      c.L(same_round);
      c.dec(count);
      c.jnz(row_top);
    }
    for (size_t k = pushed; k-- > saved_from;) c.pop(bases[k]);
    c.vzeroupper();
    c.ret();
    c.ready();
    return code;
  };
  jit_ = emit(false, false);
  jit_fn_ = jit_->getCode<JitFn>();
  // A column sum (of a value the loop computes or reads, f32 or widened to
  // f64, over rows a multiple of 8 long, nothing gathered or copied out,
  // tiled runs a row of the walk long) is summed as the code computes it.
  if (!column_streamed_ || reductions_.size() != 1 || !copy_outs_.empty() || cols % 8 != 0 ||
      kSumLanes * lane_bytes > INT32_MAX)
    return;
  const Kind sk = values_[size_t(src)].kind;
  if (sk != Kind::input && sk != Kind::buffer && sk != Kind::output) return;
  if (values_[size_t(src)].esize != 4 && sk != Kind::buffer) return;  // f64: only widened
  // Operands that move along rows: one value a row, the rows of the sum's
  // walk [rows, cols] the loop's own.
  const bool rows_are_walks =
      walk_.size() == 2 && walk_[1] == col_width_ && col_outer_ == 1 && col_blocks_ == 1;
  for (const Value& val : values_)
    if (val.kind == Kind::gather || (val.kind == Kind::tiled && row_len_ != col_width_) ||
        val.kind == Kind::row_array ||
        (val.kind == Kind::row_scalar &&
         (!rows_are_walks || val.strides[0] * val.esize > INT32_MAX)))
      return;
  column_jit_[0] = emit(true, true);
  column_jit_[1] = emit(true, false);
  if (column_jit_[0] && column_jit_[1]) {
    column_fn_[0] = column_jit_[0]->getCode<JitFn>();
    column_fn_[1] = column_jit_[1]->getCode<JitFn>();
  }
}

// Where each value of element e of the loop lies, for the code: arrays at
// e, one-element operands and constants where they are, a tiled run at its
// source (read by column, the same in every row), computed values in
// `bufs` (when given).
void FusedLoop::element_pointers(const void* const* ins, void* const* outs, int64_t e,
                                 std::byte (*bufs)[64], const void** ptr) const {
  for (size_t v = 0; v < values_.size(); ++v) {
    const Value& val = values_[v];
    switch (val.kind) {
      case Kind::scalar: ptr[v] = ins[val.index]; break;
      case Kind::constant: ptr[v] = &constants_[size_t(val.index)]; break;
      case Kind::buffer: ptr[v] = bufs ? bufs[val.buf] : nullptr; break;
      case Kind::input:
        ptr[v] = static_cast<const std::byte*>(ins[val.index]) + e * val.esize;
        break;
      case Kind::output:
        ptr[v] = static_cast<const std::byte*>(outs[val.index]) + e * val.esize;
        break;
      case Kind::tiled: ptr[v] = ins[val.index]; break;
      case Kind::row_scalar:
      case Kind::row_array: {
        int64_t at = 0;  // the broadcast operand's element read at element e
        for (size_t d = walk_.size(), rest = size_t(e); d-- > 0;) {
          at += int64_t(rest) % walk_[d] * val.strides[d];
          rest = size_t(int64_t(rest) / walk_[d]);
        }
        ptr[v] = static_cast<const std::byte*>(ins[val.index]) + at * val.esize;
        break;
      }
      default: ptr[v] = nullptr;
    }
  }
}

// Rows [row0, row0 + n) of the column sum's walk (n <= kSumBlock, row0 a
// block's first) through the code, their operand summed into `lanes` as
// ColumnStream::add_filled takes them: each lane's first row, then the
// rest.
void FusedLoop::fill_rows(const void* const* ins, void* const* outs, int64_t b, int64_t row0,
                          int64_t n, void* lanes) const {
  const size_t nv = values_.size();
  const int64_t lane_bytes = col_width_ * int64_t(dtype_size(reductions_[0].dtype));
  const void* ptr[kMaxFusedValues + 2];
  ptr[nv + 1] = static_cast<std::byte*>(lanes) + kSumLanes * lane_bytes;
  // Pieces of contiguous rows: each lane's first rows, then the rest, cut
  // where an image's rows of a blocked one end.
  for (int64_t j = 0; j < n;) {
    const int64_t m = row0 + j;
    const int64_t k =
        std::min({n - j, j < kSumLanes ? kSumLanes - j : n, col_inner_ - m % col_inner_});
    ptr[nv] = static_cast<std::byte*>(lanes) + j % kSumLanes * lane_bytes;
    element_pointers(ins, outs, column_row_at(b, m), nullptr, ptr);
    column_fn_[j < kSumLanes ? 0 : 1](ptr, k);
    j += k;
  }
}

// A loop over full-size arrays and one-element operands alone, every
// result written straight into its storage: each thread's range in one
// call, its last elements past a multiple of eight through the steps.
void FusedLoop::run_compiled(const void* const* ins, void* const* outs) const {
  parallel_for(numel_, grain_,
               [&](int64_t begin, int64_t end) { compiled_range(ins, outs, begin, end); });
}

void FusedLoop::compiled_range(const void* const* ins, void* const* outs, int64_t begin,
                               int64_t end) const {
  alignas(64) std::byte bufs[kMaxFusedBuffers][8 * 8];
  const void* ptr[kMaxFusedValues];
  auto point = [&](int64_t s) { element_pointers(ins, outs, s, bufs, ptr); };
  const int64_t whole = (end - begin) / 8 * 8;
  point(begin);
  if (whole > 0) jit_fn_(ptr, whole);
  if (begin + whole == end) return;
  point(begin + whole);
  run_steps(steps_.data(), steps_.data() + steps_.size(), ptr, end - begin - whole, begin + whole);
}

// The chunk [s, s + len) a segment at a time: every array from the
// segment's start, an operand moving along rows where the segment reads it,
// the segment's last elements past a multiple of eight through the steps.
void FusedLoop::compiled_segments(int64_t s, int64_t len, const void* const* ins,
                                  const void* const* ptr, Segments& sg) const {
  segments(s, len, ins, sg);
  const void* seg[kMaxFusedValues];
  for (int64_t k = 0; k < sg.n; ++k) {
    const int64_t n = sg.len[k], whole = n / 8 * 8;
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 0 && whole == 0) continue;
      if (pass == 1 && whole == n) break;
      const int64_t from = sg.start[k] + (pass == 0 ? 0 : whole);
      for (size_t v = 0; v < values_.size(); ++v) {
        const Value& val = values_[v];
        switch (val.kind) {
          case Kind::row_scalar: seg[v] = sg.at[val.slot][k]; break;
          case Kind::row_array:
            seg[v] = sg.at[val.slot][k] + (pass == 0 ? 0 : whole) * val.esize;
            break;
          case Kind::input:
          case Kind::output:
          case Kind::tiled:
          case Kind::gather:
          case Kind::buffer:
            seg[v] = static_cast<const std::byte*>(ptr[v]) + from * val.esize;
            break;
          default: seg[v] = ptr[v];
        }
      }
      if (pass == 0)
        jit_fn_(seg, whole);
      else
        run_steps(steps_.data(), steps_.data() + steps_.size(), seg, n - whole, s + from);
    }
  }
}

}  // namespace ws::exec
