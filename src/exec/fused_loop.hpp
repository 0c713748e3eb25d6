// The kernel of a loop fusion.
//
// A loop fusion's body (ir/graph.hpp) computes element i of every result
// from element i of its full-size operands (and number i of a random draw's
// stream). The kernel walks the result in chunks of at most kFusedChunk
// elements; within a chunk it runs the body's ops one after another over
// small buffers that stay in L1, so a chain of n ops reads its operands and
// writes its results once instead of n times, in one parallel region
// instead of n. Each op runs the array function its single-op kernel runs
// (elementwise.hpp, loops.hpp, the Philox stream), so a fused and an
// unfused program compute identical bits.
//
// Rows: the result shape with dims merged wherever every broadcast operand
// allows it (merge_joint), so a row is as long as it can be while each
// broadcast operand moves along it by one fixed stride. Operands: a
// full-size operand is read where it lies; a one-element operand (a `full`
// of the body, or a broadcast of a one-element operand) is read as one
// value; a broadcast operand is, within a row, one value (a per-channel or
// per-row statistic: stride 0) or a contiguous run (a bias along a row:
// stride 1), or else gathered into a buffer; a run the same in every row (a
// per-channel value over NHWC rows, a LayerNorm weight) is tiled into a
// buffer once a run of the kernel, a chunk and a row long, and read as an
// array from the chunk's place in its row. Chunks run across rows; a
// chunk is cut into segments, the pieces of rows it covers, and a step
// reading any other broadcast operand runs once per segment, reading it as
// one value or a run there: a chunk of LayerNorm's 128-element rows runs a
// step reading the rows' means 16 times, each as the single-op broadcast
// kernel runs a row. Rows
// shorter than kMinSegment would pay a call per few elements: then every
// broadcast operand is gathered. A result is written straight into its
// storage, unless a later op of the body reads an operand stored there (a
// parameter updated in place, or a result given a dying operand's block):
// then it goes through a buffer, copied out when the chunk is done.
//
// A reduce fusion (kind "reduce"; its walks are in fused_reduce.cpp) ends
// its loop in reductions: its loop values have the shape S of the
// reductions' operand, every reduction sums (or takes the maximum) over the
// same axes, and elementwise ops on the reduced values (the epilogue: a
// mean's division, a variance's epsilon, a parameter's update) follow. The
// kernel walks the reduced results in parallel: the elements of each
// result's sequence, a run at a time, go through the loop in chunks and
// into a SumStream or MaxStream (reduce.hpp), which give the bits
// reduce_sum and reduce_max give; then the epilogue runs on the values of a
// run of results, as arrays. A sum that keeps the operand's innermost dim
// (columns: a bias's gradient over [M, K], BatchNorm's statistics of an
// NHWC image [N*H*W, C], or of a blocked one [N, C/8, H*W, 8], each block
// of 8 channels then a column sum over N*H*W rows) gives each column
// reduce_sum's bits one of two ways (fused_reduce.cpp says which when):
// streamed, chunks of whole rows through the loop into a ColumnStream
// (reduce.hpp), threads taking aligned groups of a block's rows (each a
// subtree of every column's carry tree) combined in order; or in three
// phases, the loop writing the operand (into its result when something
// reads it, else into the kernel's scratch), reduce_sum summing its
// columns. Streamed, a compiled loop (below) sums its operand as it
// computes it, in the same order. Every way, the epilogue then runs over
// runs of columns.
//
// A loop (nothing read per segment) whose steps are all f32 arithmetic,
// comparisons and selects runs as machine code made for it (fused_jit.cpp):
// eight elements at a time through every step in vector registers, a
// reduction's operand stored where the sum reads it; with no broadcast
// operand and no reduction (an optimizer's update), over each thread's
// whole range at once. Where it is not compiled (a CPU without
// AVX2), a streaming loop (no broadcast operand, no reduction) whose steps
// are all f32 additions, subtractions, products, quotients and square
// roots runs instead as a block program (fused_blocks.cpp): short blocks,
// each step's loop inlined, no call per step.
//
// Buffers live on the stack (no allocation per step): at most
// kMaxFusedBuffers at once, which the fuse pass guarantees by bounding a
// group's size (fused_buffers_needed).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/fused_loop_rules.hpp"
#include "exec/program.hpp"
#include "exec/reduce.hpp"
#include "exec/short_products.hpp"
#include "exec/strided_walk.hpp"
#include "ir/graph.hpp"

namespace ws::exec {

// Elements a chunk holds. Measured on the developer machine (AMD EPYC Zen
// 5, 2 threads), whole gpt and cnn steps, fused against unfused in the same
// run: chunks of 256 elements lost 10-25% to per-chunk overhead, 512 lost
// 5-15%, 2048 broke even (streaming loops aside: below).
constexpr int64_t kFusedChunk = 2048;
// Elements a chunk of a streaming loop holds: one with no broadcast operand
// and no reduction (an optimizer's update, an activation's gradient), whose
// operands are full-size arrays read once, from memory when they are large.
// A chunk's first step reads one array at a time, and on 2048 elements it
// waits for memory; shorter chunks, each asking for the next one's elements
// of every array before it runs, keep several arrays' reads in flight. Measured
// on the developer machine (AMD EPYC Zen 5, 2 threads), the SGD update with
// momentum and weight decay of a 7350x7350 weight: 26.7 ms a step with 2048
// elements, 16.7 with 256 (a plain loop over the five arrays at once: 10.9);
// regnet_x_16gf's update loops 20.1 against 14.7 ms; the cnn, gpt and mlp
// steps within noise.
constexpr int64_t kStreamChunk = 256;
// Elements a block of a block program holds (see FusedLoop::run_blocks).
constexpr int64_t kFusedBlock = 128;
// Body values a fused loop holds at most.
constexpr size_t kMaxFusedValues = 128;

class FusedLoop {
 public:
  // in_slots[i], out_slots[j]: where operand i and result j live (-1 for a
  // result nobody reads), used only to see which share storage.
  FusedLoop(const ir::Graph& body, const std::vector<int32_t>& in_slots,
            const std::vector<int32_t>& out_slots);

  // ins[i]: operand i; outs[j]: result j (null when unused); scratch:
  // scratch_bytes() of the kernel's temporaries.
  void run(const void* const* ins, void* const* outs, void* scratch = nullptr) const;
  // A streaming loop (neither broadcast operand nor reduction, no random
  // draw): elements [begin, end) on the calling thread.
  void run_range(const void* const* ins, void* const* outs, int64_t begin, int64_t end) const;
  bool streaming() const { return reductions_.empty() && broadcasts_.empty() && !draws_; }

  // "fused(mul,add,sqrt,div,+3)": the ops, for listings and profiles.
  const std::string& name() const { return name_; }
  int64_t chunk() const { return chunk_; }  // elements a chunk of the loop holds
  int64_t numel() const { return numel_; }
  // Whether it runs as a block program (see block_steps_).
  bool block_program() const { return !block_steps_.empty(); }
  // Whether its column sum can read its operand through the op that computes
  // it (see column_load_).
  bool reads_column_operand() const { return column_load_.on; }
  // Steps that compute two of the body's ops (see pair_steps).
  int paired_steps() const { return paired_; }
  // Whether it runs as machine code made for it (see plan_jit).
  bool compiled() const { return jit_fn_ != nullptr; }
  // Whether its column sum is summed as that code computes it (see
  // column_jit_).
  bool sums_compiled() const { return column_fn_[0] != nullptr; }

  // Which kind of storage each body value is read from during a chunk.
  enum class Kind : uint8_t {
    input,       // a full-size operand
    scalar,      // a one-element operand
    constant,    // a `full` of the body
    row_scalar,  // a broadcast operand, one value along each row
    row_array,   // a broadcast operand, contiguous along each row
    gather,      // a broadcast operand, gathered into a buffer
    tiled,       // a broadcast operand, one run repeated along every row: tiled once
    buffer,      // a computed value
    output,      // a computed value written straight into its result
    // Values of a reduce fusion's epilogue, one per reduced result:
    reduced,     // a reduction's value, or an epilogue value not written out
    red_input,   // an operand of the reduced shape
    red_output,  // an epilogue value written straight into its result
  };
  struct Value {
    Kind kind = Kind::buffer;
    int32_t index = -1;  // input, output or constant number
    int32_t buf = -1;    // buffer number (buffer and gather)
    int64_t esize = 4;
    std::vector<int64_t> strides;  // broadcast operands: source strides over walk_
    int64_t inner = 0;             // the last of them: along a row
    int8_t slot = -1;              // row_scalar and row_array: its slot (Segments::at)
  };
  using StepFn = FusedStepFn;
  using DrawFn = FusedDrawFn;
  struct Step {
    StepFn fn = nullptr;
    DrawFn draw = nullptr;           // a random draw (fn null): args are the seed and the offset
    int64_t skip = 0;                // the draw's numbers start at offset + skip
    int32_t args[3] = {-1, -1, -1};  // body values read
    int32_t out = -1;                // body value written
    int arrays = 0;                  // bit i: operand i is an array, not one value
    bool per_segment = false;        // reads a broadcast operand that moves along rows
    // Per segment, how operand i (and the result) is found: 0 where ptr
    // says, 1 that plus the segment's start times es[i] bytes, 2 at
    // Segments::at[slot[i]].
    int8_t cls[3] = {0, 0, 0};
    int8_t slot[3] = {-1, -1, -1};
    int32_t es[4] = {0, 0, 0, 0};  // es[3]: the result's
  };
  struct Reduction {
    int32_t value;  // the reduce node
    int32_t src;    // its operand
    bool is_max;
    DType dtype;
  };

 private:
  // The plan of a loop body (fused_loop_plan.cpp).
  void plan(const ir::Graph& body, const std::vector<int32_t>& in_slots,
            const std::vector<int32_t>& out_slots);
  // A product loop (fusion kind "product", fused_product.cpp): its body's
  // first two operands' matrix product over a short contraction
  // (short_products.hpp), read by a streaming loop of its shape (an
  // optimizer's update of the weight whose gradient it is). The kernel
  // stages B in the scratch, then each thread computes the product a tile
  // (kProductRows rows by kProductCols columns, or whole rows) at a time,
  // and runs the loop over the tile before the next: the product is never
  // stored. The loop is planned as the body with the product an operand
  // (its first), read from the tile.
  static constexpr int64_t kProductRows = 4, kProductCols = 2048;
  ShortProduct product_;  // k 0: not a product loop
  // Bytes an element of the loop's operands (0: one value) and results take.
  std::vector<int64_t> operand_bytes_, result_bytes_;
  void plan_product(const ir::Graph& body, ir::ValueId product,
                    const std::vector<int32_t>& in_slots, const std::vector<int32_t>& out_slots);
  void run_product(const void* const* ins, void* const* outs, void* scratch) const;
  bool draws_ = false;  // the loop draws random numbers (where depends on the element)
  int64_t numel_ = 0;
  Shape walk_;           // the result shape, merged
  int64_t row_len_ = 1;  // walk_'s last dim
  int64_t grain_ = 1;    // elements (results, for a reduction) worth a thread
  std::string name_;
  std::vector<Value> values_;
  std::vector<Step> steps_;
  std::vector<int32_t> broadcasts_;                     // row_scalar, row_array and gather values
  std::vector<std::pair<int32_t, int32_t>> copy_outs_;  // (value, output) after a chunk
  std::vector<double> constants_;                       // storage of `full` values (8 bytes each)
  // Reduce fusions: the reductions, the epilogue, and the walk of a result's
  // sequence (kept dims select the result, reduced dims its runs).
  std::vector<Reduction> reductions_;
  std::vector<Step> epilogue_;
  std::vector<std::pair<int32_t, int32_t>> red_copy_outs_;  // (value, output) after a result
  int64_t results_ = 0;                                     // reduced results
  Shape kept_, reduced_;                           // dims, outer to inner; reduced_ ends in the run
  std::vector<int64_t> kept_stride_, red_stride_;  // their strides in the operand
  void run_reduce(const void* const* ins, void* const* outs) const;  // fused_reduce.cpp
  bool columns_ = false;                                             // a column sum (see above)
  Shape column_walk_;  // the operand's walk (reduce_sum's), merged
  // Its rows in blocks, when it has them (else it runs in phases, or read
  // through its op): row m = r1 * col_inner_ + r2 of block b has its
  // col_width_ columns at element ((r1 * col_blocks_ + b) * col_inner_ + r2)
  // * col_width_. A sum over [M, K]'s M is one block of M rows; BatchNorm's
  // statistics of blocked images [N, C/8, H*W, 8] are C/8 blocks of N*H*W
  // rows of 8.
  bool column_streamed_ = false;
  int64_t col_outer_ = 1, col_blocks_ = 1, col_inner_ = 1, col_width_ = 1;
  int64_t column_row_at(int64_t b, int64_t m) const {
    return ((m / col_inner_ * col_blocks_ + b) * col_inner_ + m % col_inner_) * col_width_;
  }
  ColumnGroups column_groups_;                    // of a block's rows
  std::vector<int64_t> column_strides_ = {0, 1};  // the sums' strides over column_walk_
  void run_columns(const void* const* ins, void* const* outs, void* scratch) const;
  // A column sum whose operand is one op over stored arrays of the loop's
  // shape (operands the loop does not overwrite, or results it writes): f32
  // converted to f64 (a mean summed in double), a square or a product of
  // two (a variance's sum, a gradient's sum of dy x). Where it is not
  // streamed (fewer groups of a block's rows than threads, or a walk
  // without rows in blocks: run_columns would run in phases), it is
  // summed as it is read (column_sums), after the loop if the loop writes
  // results: the operand read once, where in phases the loop wrote it to
  // scratch and reduce_sum read it back (8 more bytes an element of a mean
  // in f64, 8 more of an f32 product). Streamed row groups keep their walk:
  // column tiles split the rows' columns between threads where the loops
  // before and after split the rows, and each thread then read the other's
  // rows from its cache (the variance passes of mobilenet_v2 and resnet50
  // 1.4-1.6x slower, same run).
  struct ColumnLoad {
    bool on = false;
    ColumnOperand op = ColumnOperand::widened;
    int32_t a = -1, b = -1;  // the stored values read
  };
  ColumnLoad column_load_;
  bool loop_writes_ = false;  // the loop writes a result (else only the sum runs)
  void plan_column_load(const ir::Graph& body, const std::vector<int32_t>& in_slots,
                        const std::vector<int32_t>& out_slots);
  void run_column_load(const void* const* ins, void* const* outs, std::byte* scratch) const;
  void run_column_phases(const void* const* ins, void* const* outs, std::byte* scratch) const;
  void run_column_streams(const void* const* ins, void* const* outs, std::byte* scratch) const;
  // The loop over every element, in parallel chunks; with `kept`, value
  // `keep` of each chunk is copied there too (at its element offset).
  void run_loop(const void* const* ins, void* const* outs, int64_t grain, int32_t keep,
                std::byte* kept) const;
  // One thread's range [begin, end) of run_loop, run_blocks, run_compiled.
  void loop_range(const void* const* ins, void* const* outs, int64_t begin, int64_t end,
                  int32_t keep, std::byte* kept) const;
  void blocks_range(const void* const* ins, void* const* outs, int64_t begin, int64_t end) const;
  void compiled_range(const void* const* ins, void* const* outs, int64_t begin, int64_t end) const;
  // Results whose epilogue runs as one: each epilogue value is an array of
  // them.
  static constexpr int64_t kEpilogueRun = 128;
  // The epilogue of results [k0, k0 + n), n <= kEpilogueRun: reduction i's
  // values at red[i]; values it computes in vals.
  void run_epilogue(int64_t k0, int64_t n, const void* const* ins, void* const* outs,
                    const void** ptr, std::byte (*vals)[kEpilogueRun * 8],
                    const std::byte* const* red) const;
  // Asks for elements [s, e) of every stream.
  void prefetch(int64_t s, int64_t e, const void* const* ins, void* const* outs) const;
  // Runs `steps` over one chunk of `len` elements starting at element s of
  // the loop (one per result when len is 1).
  static void run_steps(const Step* first, const Step* last, const void* const* ptr, int64_t len,
                        int64_t s);
  // Results going through a buffer, written out for elements [s, s + len).
  void copy_out(int64_t s, int64_t len, const void* const* ptr, void* const* outs) const;
  std::vector<int32_t> moving_;      // values whose pointer moves with the chunk
  std::vector<int32_t> per_result_;  // values whose pointer moves with the result
  void fixed_pointers(const void* const* ins, std::byte (*bufs)[kFusedChunk * 8],
                      const void** ptr) const;
  void chunk_pointers(int64_t s, int64_t len, const void* const* ins, void* const* outs,
                      std::byte (*bufs)[kFusedChunk * 8], const void** ptr) const;
  // Segments: when broadcast operands move along rows of at least
  // kMinSegment, a chunk's row pieces, and where each such operand (a slot)
  // is read in each.
  static constexpr int64_t kMaxSegments = kFusedChunk / kMinSegment + 2;
  struct Segments {
    int64_t n = 0;
    int64_t start[kMaxSegments];  // first element, relative to the chunk
    int64_t len[kMaxSegments];
    const std::byte* at[kMaxFusedBuffers][kMaxSegments];
  };
  bool segmented_ = false;
  bool per_segment_ = false;     // a step reads a broadcast operand per segment
  int64_t chunk_ = kFusedChunk;  // elements a chunk holds
  // The full-size operands and results a streaming loop (one with neither
  // broadcast operand nor reduction, walked in chunks of kStreamChunk)
  // asks for one chunk ahead; empty for the other loops.
  struct Stream {
    bool result;    // in outs, else in ins
    int32_t index;  // in ins or outs
    int64_t esize;
  };
  std::vector<Stream> streams_;
  // A streaming loop whose steps are all f32 additions, subtractions,
  // products, quotients and square roots (an optimizer's update) runs as a
  // block program: every step over one block of kFusedBlock elements, then
  // the next block, each step's loop inlined (run_blocks, fused_blocks.cpp).
  // Chunks of steps each a call over kStreamChunk elements read one array at
  // a time: on the SGD update of a [4096, 4096] weight (5 arrays of 64 MB),
  // AMD EPYC Zen 3, 2 threads, the chunked loop ran at 20-27 GB/s against
  // 40-50 for a compiled loop over the same arrays in the same process
  // (chunk length, prefetch distance and prefetch hint changed nothing),
  // and as a block program at 1.26-1.37x the compiled loop's time (blocks
  // of 32: 2.4x, 64: 1.4-1.8x, 256: 1.8-2.2x, 512: 2.3x). Each step computes
  // the same IEEE operation on each element as its array function, so the
  // bits are the chunked loop's.
  struct BlockStep {
    uint8_t op;       // BlockOp
    uint8_t scalars;  // bit i: operand i is one value
    int16_t a, b, y;  // body values (b: -1 for a square root)
  };
  std::vector<BlockStep> block_steps_;  // empty: not a block program
  // Two steps in a row, y = o2(o1(a, b), c) where o1's value is read by o2
  // alone and kept nowhere (not a result, a reduction's operand, a column
  // sum's or a copy's source), are one step (fused_pair_fn): the chunk is
  // read and written once for both. Each op computes what its own step
  // does, so the bits are the same. Each step passes over L1 buffers at
  // about 0.12 ns an element (AMD EPYC Zen 3); pairing mobilenet_v2's
  // normalize + ReLU6 loop's product and sum took it from 115 to 97 us (2
  // threads). Not for steps read per segment (their operands' pointers
  // move by segment), nor for block programs or compiled loops (which
  // run every step in one pass already).
  int paired_ = 0;
  // A loop whose steps are all f32 sums, differences, products, quotients,
  // negations, square roots, comparisons and selects, over arrays, tiled
  // runs, gathered values, one-element operands and operands that move
  // along rows (one value or a run a row: the code is called once per
  // segment), with at most 12 values live at once, runs as machine code
  // made for it (fused_jit.cpp, on CPUs with AVX2): eight elements at a
  // time through every step in vector registers, a chunk's last elements
  // past a multiple of eight through the steps. BatchNorm's normalize +
  // ReLU6 over [8, 32, 32, 32], 2 threads, AMD EPYC Zen 3, same run: 98 us
  // as steps, 51 compiled, 44 written by hand in AVX2 intrinsics. Loops
  // reading per-row values (LayerNorm's normalize, a softmax's and a
  // cross-entropy's backward) compiled against run per segment as steps,
  // same run, steps alternating: bert 1.02x, vit_b_16 1.01x,
  // mobilenet_v2 1.03x.
  struct JitCode;
  using JitFn = void (*)(const void* const* ptr, int64_t n);
  std::shared_ptr<const JitCode> jit_;
  JitFn jit_fn_ = nullptr;
  void plan_jit(const std::vector<ir::Op>& step_ops, const std::vector<DType>& step_types);
  void run_compiled(const void* const* ins, void* const* outs) const;
  // The column sum of a compiled loop (f32, or f32 widened to f64; rows a
  // multiple of 8 long, nothing gathered or copied out), streamed over
  // whole rows (run_column_streams), is summed as the code computes its
  // operand: a block of rows at a time into the ColumnStream's lanes
  // (fill_rows; column_fn_[0] for each lane's first row, [1] for the rest),
  // where the loop stored a chunk of it for the stream to read back.
  // mobilenet_v2's loops alone (benchmarks/fused_column_sums.cpp, 2
  // threads, AMD EPYC Zen 3): the mean in f64 over [8192, 32] 80 -> 43 us,
  // over [2048, 96] 54 -> 32; in the step, ReLU6's gradient with its sum
  // over [8, 32, 32, 96] 288 -> 149 us, the variance over [8, 32, 32, 32]
  // 79 -> 45.
  std::shared_ptr<const JitCode> column_jit_[2];  // a lane's first row; the rest
  JitFn column_fn_[2] = {nullptr, nullptr};
  void fill_rows(const void* const* ins, void* const* outs, int64_t b, int64_t row0, int64_t n,
                 void* lanes) const;
  void element_pointers(const void* const* ins, void* const* outs, int64_t e, std::byte (*bufs)[64],
                        const void** ptr) const;
  // Runs the code over a chunk's segments, each one call with the
  // operands that move along rows where that row piece reads them.
  void compiled_segments(int64_t s, int64_t len, const void* const* ins, const void* const* ptr,
                         Segments& sg) const;
  void pair_steps(const std::vector<ir::Op>& step_ops, const std::vector<DType>& step_types);
  void plan_blocks(const std::vector<ir::Op>& step_ops, const std::vector<DType>& step_types);
  void run_blocks(const void* const* ins, void* const* outs) const;
  struct SlotWalk {
    int32_t index;             // the operand
    int64_t stride[kMaxRank];  // bytes per step of each dim of walk_
  };
  std::vector<SlotWalk> slots_;
  void segments(int64_t s, int64_t len, const void* const* ins, Segments& sg) const;
  // Runs the loop's steps over the chunk [s, s + len).
  void run_chunk(int64_t s, int64_t len, const void* const* ins, void* const* outs,
                 std::byte (*bufs)[kFusedChunk * 8], const void** ptr, Segments& sg) const;
};

// Whether fused loops are compiled to machine code where they can be
// (FusedLoop::plan_jit): by default on CPUs with AVX2. For loops made after
// the call; tests turn it off to run the steps and block programs CPUs
// without AVX2 run.
void set_compiled_loops(bool on);
bool compiled_loops();

// Fills k.fn, k.name and k.loop for a fusion node's kernel whose operand
// and result slots (k.in, k.out, k.extra_out) are set.
void choose_fused_kernel(Kernel& k, const ir::Graph& body);

}  // namespace ws::exec
