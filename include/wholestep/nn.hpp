// Modules, layers and losses, in the spirit of PyTorch's C++ frontend.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "wholestep/tensor.hpp"

namespace ws::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A Module owns parameters and buffers and has child modules. Children
// registered by reference (members of the parent) are not owned; a Module is
// therefore neither copyable nor movable.
class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <class M>
  M& register_module(const std::string& name, M& m) {
    add_child(name, &m, nullptr);
    return m;
  }
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m.get(), m);
    return m;
  }

  // Recursive, in registration order, named by module path ("fc1.weight").
  // A tensor registered under two names (tied) is listed once, first name.
  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

 private:
  void add_child(const std::string& name, Module* m, std::shared_ptr<Module> owned);
  void collect(const std::string& prefix, bool params, NamedTensors& out) const;
  NamedTensors params_, buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::vector<std::shared_ptr<Module>> owned_;
  bool training_ = true;
};

// A module with one input and one output: what Sequential chains.
class Layer : public Module {
 public:
  virtual Tensor forward(const Tensor& x, Loc loc = Loc::current()) = 0;
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) { return forward(x, loc); }
};

// y = x Wᵀ + b, with W stored [out, in] and PyTorch's default initialization:
// W and b uniform in ±1/sqrt(in).
class Linear : public Layer {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias;
  int64_t in_features, out_features;
};

// 2-d convolution over NCHW input, as torch.nn.Conv2d: weight
// [out, in/groups, k, k] and bias uniform in ±1/sqrt(in/groups·k·k).
struct Conv2dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};
class Conv2d : public Layer {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions opts = {});
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias;
  int64_t in_channels, out_channels, kernel_size;
  Conv2dOptions opts;
};

// Batch normalization over [N, C, H, W] per channel, as torch.nn.BatchNorm2d.
// Training: batch statistics (biased variance) normalize, and the running
// statistics are updated in place, running = (1 - momentum)·running +
// momentum·batch, with the unbiased batch variance. Eval: running statistics.
class BatchNorm2d : public Layer {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias, running_mean, running_var;
  int64_t channels;
  double eps, momentum;
};

// Normalization over the last dim, with an affine weight (1) and bias (0).
class LayerNorm : public Layer {
 public:
  explicit LayerNorm(int64_t features, double eps = 1e-5);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias;
  int64_t features;
  double eps;
};

// A lookup table [num, dim] initialized N(0, 1); i64 indices [...] -> [..., dim].
class Embedding : public Layer {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices, Loc loc = Loc::current()) override;
  Tensor weight;
  int64_t num_embeddings, embedding_dim;
};

// Zeroes elements with probability p in training and scales the rest by
// 1/(1-p); the identity in eval. Masks come from the counter-based stream.
class Dropout : public Layer {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  double p;
};

// GELU, exact (erf) or with PyTorch's tanh approximation.
class GELU : public Layer {
 public:
  explicit GELU(bool tanh_approximation = false) : tanh_approximation(tanh_approximation) {}
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  bool tanh_approximation;
};

class ReLU : public Layer {
 public:
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
};

// Mean over the spatial dims: [N, C, H, W] -> [N, C].
class GlobalAvgPool2d : public Layer {
 public:
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
};

// Layers applied in order; children are named "0", "1", ...
class Sequential : public Layer {
 public:
  Sequential() = default;
  Sequential& add(std::shared_ptr<Layer> layer);
  template <class L, class... A>
  Sequential& emplace(A&&... args) {
    return add(std::make_shared<L>(std::forward<A>(args)...));
  }
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  size_t size() const { return layers_.size(); }
  Layer& operator[](size_t i) { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
};

// Multi-head self-attention over [B, T, D] with a causal mask (position t
// attends to positions <= t): one Linear(D, 3D) projection to queries, keys
// and values, softmax(q kᵀ / sqrt(D/heads)) v per head, and an output
// Linear(D, D); dropout on the attention weights.
class CausalSelfAttention : public Layer {
 public:
  CausalSelfAttention(int64_t d_model, int64_t heads, double dropout = 0.0);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Linear qkv, proj;
  Dropout attn_dropout;
  int64_t d_model, heads;
};

// Mean over the batch of -log softmax(logits)[label]; logits [N, C], labels
// i64 [N]. A label outside [0, C) is an error naming it (checked at the
// step boundary in a compiled step).
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, Loc loc = Loc::current());

// The negative log-likelihood of labels under log-probabilities logp, as
// torch's nll_loss: logp [N, C] or [N, C, d...] and i64 labels [N] or
// [N, d...]; each position's loss is -weight[label]·logp[label] (weight
// undefined: 1), 0 where the label is ignore_index (when given). Reduction
// none: the losses, labels' shape; sum; mean: their sum divided by the sum of
// the weights of the positions not ignored (NaN when every one is).
enum class Reduction { none, mean, sum };
Tensor nll_loss(const Tensor& logp, const Tensor& labels, const Tensor& weight = Tensor(),
                Reduction reduction = Reduction::mean,
                std::optional<int64_t> ignore_index = std::nullopt, Loc loc = Loc::current());

// torch's F.ctc_loss over log_probs [T, N, C] (log_softmax's output):
// ws::ctc_loss's per-sample losses; Reduction none: those, sum: their sum,
// mean: the mean of each divided by its target length (1 when 0).
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank = 0,
                Reduction reduction = Reduction::mean, bool zero_infinity = false,
                Loc loc = Loc::current());

// Functional forms. Softmaxes and normalizations are numerically stable
// (the max is subtracted, outside the gradient: the result does not depend
// on it; variance from centered values).
Tensor log_softmax(const Tensor& x, int64_t axis = -1, Loc loc = Loc::current());
Tensor softmax(const Tensor& x, int64_t axis = -1, Loc loc = Loc::current());
Tensor gelu(const Tensor& x, bool tanh_approximation = false, Loc loc = Loc::current());
// x minus its mean over `axes` (the centering of every normalization and of
// var), its gradient to x one value: dy minus its mean (see identity()).
Tensor center(const Tensor& x, const std::vector<int64_t>& axes, Loc loc = Loc::current());
// The variance over `axes`, its sum of squares divided by count - correction
// (torch.var; std is its sqrt), kept as size-1 dims when keepdim.
Tensor var(const Tensor& x, const std::vector<int64_t>& axes, double correction = 1,
           bool keepdim = false, Loc loc = Loc::current());
// x normalized over its last dim, then x·weight + bias (either may be undefined).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5,
                  Loc loc = Loc::current());
// x normalized over its last `normalized_dims` dims (LayerNorm's
// normalized_shape), then x·weight + bias.
Tensor layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight,
                  const Tensor& bias, double eps = 1e-5, Loc loc = Loc::current());
// x [N, C, ...] normalized over each group of C/groups channels (and every
// other dim but N), then weight and bias per channel (either undefined).
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                  double eps = 1e-5, Loc loc = Loc::current());
// batch_norm over [N, C, ...] of any rank, the running statistics' new values
// returned instead of written (undefined in eval, or when running_mean and
// running_var are undefined: no running statistics); sync_world > 1 averages
// the batch statistics over that many ranks (synchronized BatchNorm).
struct BatchNormResult {
  Tensor y, running_mean, running_var;
};
BatchNormResult batch_norm_functional(const Tensor& x, const Tensor& running_mean,
                                      const Tensor& running_var, const Tensor& weight,
                                      const Tensor& bias, bool training, double momentum = 0.1,
                                      double eps = 1e-5, int64_t sync_world = 1,
                                      Loc loc = Loc::current());
// As BatchNorm2d::forward; running statistics are updated when training.
Tensor batch_norm(const Tensor& x, Tensor& running_mean, Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5,
                  Loc loc = Loc::current());
Tensor dropout(const Tensor& x, double p, bool training, Loc loc = Loc::current());
// scores [..., T, S] with entries above the diagonal (s > t) set to -inf.
Tensor causal_mask(const Tensor& scores, Loc loc = Loc::current());

// 2-d pooling over x [N, C, H, W] as torch's MaxPool2d and AvgPool2d: pairs
// are {height, width} (one value: both); stride defaults to the kernel.
// ceil_mode adds a last window where the input leaves part of one (never
// one starting in the right padding); average pooling divides by the
// window's size within the padded input (count_include_pad) or within the
// input, or by divisor_override when it is not 0.
struct Pool2dOptions {
  std::vector<int64_t> kernel, stride, padding{0}, dilation{1};
  bool ceil_mode = false, count_include_pad = true;
  int64_t divisor_override = 0;
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o, Loc loc = Loc::current());
// max_pool2d's values and, as torch's return_indices gives them, each kept
// element's position in its [H, W] plane (i64).
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dOptions& o,
                                                  Loc loc = Loc::current());
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o, Loc loc = Loc::current());

// x's elements at positions `index` (each in [0, x.size(dim))) along dim, in
// that order: one gather with a constant index, whose gradient sums into the
// positions read (a flip, a slice with a step, the windows of a pooling).
Tensor take(const Tensor& x, int64_t dim, const std::vector<int64_t>& index,
            Loc loc = Loc::current());

// x padded as torch's F.pad: `pads` holds (before, after) pairs, the last
// dim's first; constant padding fills with value (a negative pad crops),
// reflect mirrors without repeating the edge (each pad below the dim's
// size), replicate repeats the edge, circular wraps around (at most once).
enum class PadMode { constant, reflect, replicate, circular };
PadMode pad_mode(const std::string& name, Loc loc = Loc::current());
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode = PadMode::constant,
           double value = 0, Loc loc = Loc::current());
// x [N, C, spatial...] resized to `sizes` (one per spatial dim) as torch's
// F.interpolate: nearest (torch's floor(o * scale) source index), linear
// (bilinear, trilinear) or cubic (bicubic, A = -0.75, taps clamped to the
// edge), align_corners as torch's; `scales` are the scale_factors torch
// was given (empty, or 0 for a dim: none), which set the source positions.
enum class ResizeMode { nearest, nearest_exact, linear, cubic };
ResizeMode resize_mode(const std::string& name, Loc loc = Loc::current());
Tensor interpolate(const Tensor& x, const std::vector<int64_t>& sizes,
                   ResizeMode mode = ResizeMode::nearest, bool align_corners = false,
                   const std::vector<double>& scales = {}, Loc loc = Loc::current());

// Activations, each as PyTorch computes it, its gradient included where the
// function has a kink (the value torch's backward gives at the kink itself).
// x if x > 0, else negative_slope·x.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01, Loc loc = Loc::current());
// scale·x if x > 0, else scale·alpha·(exp(input_scale·x) - 1): ELU (scale and
// input_scale 1), SELU and CELU (input_scale 1/alpha).
Tensor elu(const Tensor& x, double alpha = 1.0, double scale = 1.0, double input_scale = 1.0,
           Loc loc = Loc::current());
// x clamped to [min_value, max_value]; the gradient is 0 at both ends.
Tensor hardtanh(const Tensor& x, double min_value = -1.0, double max_value = 1.0,
                Loc loc = Loc::current());
// min(max(x, min_value), max_value), either bound absent (NaN: none); the
// gradient is 1 at both bounds (torch's clamp, unlike hardtanh).
Tensor clamp(const Tensor& x, double min_value, double max_value, Loc loc = Loc::current());
// relu6(x + 3) / 6 and x · relu6(x + 3) / 6 (MobileNetV3's).
Tensor hardsigmoid(const Tensor& x, Loc loc = Loc::current());
Tensor hardswish(const Tensor& x, Loc loc = Loc::current());
// log(1 + exp(beta·x)) / beta, x itself where beta·x > threshold.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0,
                Loc loc = Loc::current());
// x · tanh(softplus(x)).
Tensor mish(const Tensor& x, Loc loc = Loc::current());
// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), exact at both tails.
Tensor log_sigmoid(const Tensor& x, Loc loc = Loc::current());
// x · sigmoid(x).
Tensor silu(const Tensor& x, Loc loc = Loc::current());
// x if x > 0, else weight·x; weight has one value or one per channel (dim 1).
Tensor prelu(const Tensor& x, const Tensor& weight, Loc loc = Loc::current());

}  // namespace ws::nn
