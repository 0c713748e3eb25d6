// The reference models, defined once and used by tests, benchmarks, examples
// and the command line: mlp, tiny_mlp, cnn and gpt.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "wholestep/compare.hpp"
#include "wholestep/nn.hpp"
#include "wholestep/optim.hpp"
#include "wholestep/step.hpp"

namespace ws::models {

// A reference model: forward gives logits, loss is the training loss on a
// batch (inputs, targets).
class Model : public nn::Layer {
 public:
  // Mean cross-entropy of forward(x) against i64 targets.
  virtual Tensor loss(const Tensor& x, const Tensor& y, Loc loc = Loc::current());
};

// Linear layers of the given widths with ReLU between them; the input is
// flattened to [B, sizes[0]].
class Mlp : public Model {
 public:
  explicit Mlp(const std::vector<int64_t>& sizes);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  std::vector<std::shared_ptr<nn::Linear>> layers;
};

// Conv(1,32,3,pad 1)+BN+ReLU, Conv(32,64,3,stride 2,pad 1)+BN+ReLU,
// Conv(64,64,3,stride 2,pad 1)+BN+ReLU, global average pool, Linear(64,10).
// Input [B, 784] or [B, 1, 28, 28]. The convolutions have no bias: the
// BatchNorm after each removes it.
class Cnn : public Model {
 public:
  Cnn();
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  nn::Sequential net;
};

struct GptConfig {
  int64_t vocab = 256, context = 64, d_model = 128, heads = 4, layers = 2;
  int64_t mlp_ratio = 4;
  double dropout = 0.1;
};

// One pre-LayerNorm transformer block: x + drop(attn(ln1(x))), then
// x + drop(fc2(gelu(fc1(ln2(x))))).
class GptBlock : public nn::Layer {
 public:
  explicit GptBlock(const GptConfig& c);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  nn::LayerNorm ln1, ln2;
  nn::CausalSelfAttention attn;
  nn::Linear fc1, fc2;
  nn::GELU act;
  nn::Dropout drop;
};

// A byte-level GPT: token and learned position embeddings, blocks, a final
// LayerNorm and a linear head. forward: i64 tokens [B, T] (T <= context) ->
// logits [B, T, vocab]; loss: next-token cross-entropy against targets [B, T].
class Gpt : public Model {
 public:
  explicit Gpt(const GptConfig& c = {});
  Tensor forward(const Tensor& tokens, Loc loc = Loc::current()) override;
  Tensor loss(const Tensor& tokens, const Tensor& targets, Loc loc = Loc::current()) override;
  GptConfig config;
  nn::Embedding tok, pos;
  std::vector<std::shared_ptr<GptBlock>> blocks;
  nn::LayerNorm ln_f;
  nn::Linear head;
};

// How generate picks each next token.
struct SampleOptions {
  int64_t length = 200;    // tokens to generate
  double temperature = 0;  // 0: greedy (the most likely token); > 0: drawn from
                           // softmax(logits / temperature)
  uint64_t seed = 0;       // the draws' stream (splitmix64): the same seed, the same text
  // Asked before each token (when set): true ends generation there, and
  // generate returns the tokens made so far (a program stopping on a signal).
  std::function<bool()> stop;
};

// Continues `prompt` (tokens in [0, vocab), at least one) by
// `options.length` tokens, each from the logits at the last position of the
// newest `context` tokens, and returns the new tokens (the prompt not
// included). The forward is compiled once (eval mode: dropout off) over a
// window of `context` tokens; a shorter sequence fills the window from the
// left and the positions after it, which causal attention keeps from
// affecting it, are padding. A prompt longer than the context keeps its
// last `context` tokens. Bad arguments throw ws::Error naming them. Fewer
// than `options.length` tokens come back only when `options.stop` said so.
std::vector<int64_t> generate(Gpt& model, std::span<const int64_t> prompt,
                              const SampleOptions& options = {});

enum class DataKind {
  fashion_mnist,  // images f32 [B, 784], labels i64 [B]
  text,           // tokens i64 [B, T], next tokens i64 [B, T]
  synthetic,      // inputs f32 [B, sizes[0]], labels i64 [B]
};

// A model ready to train: its architecture, batch, data and default
// optimizer.
struct Spec {
  std::string name;
  int64_t batch = 0;
  DataKind data = DataKind::fashion_mnist;
  std::vector<int64_t> sizes;  // mlp and tiny_mlp
  GptConfig gpt;               // gpt
  std::string optimizer = "sgd";
  double lr = 0.05;
};

// "mlp", "tiny_mlp", "cnn" or "gpt"; throws ws::Error for other names.
Spec spec(const std::string& name);
const std::vector<std::string>& names();
std::unique_ptr<Model> make(const Spec& s);

// The model's training loss over (inputs, targets), for compile_train_step.
LossFn loss_fn(Model& m);

// The optimizer a model trains with, as the command line's --optimizer,
// --lr, --momentum, --weight-decay and --max-grad-norm choose it.
struct OptimizerChoice {
  std::string name;          // "sgd", "adam" or "adamw"; empty: the spec's
  std::optional<double> lr;  // unset: the spec's
  double momentum = 0.9;     // SGD's
  double weight_decay = -1;  // < 0: the optimizer's default (AdamW 0.01, else 0)
  double max_grad_norm = 0;  // global-norm clipping; 0: off
};

// The model `s` describes (initialized from the random stream, see
// manual_seed), the optimizer `o` chooses over its parameters, and its loss:
// what the command line trains. An unknown optimizer name throws ws::Error.
TrainSetup make_setup(const Spec& s, const OptimizerChoice& o = {});

// One batch of random data with the shapes and value ranges of the model's
// real batches, from `seed` (the same seed gives the same batch).
std::vector<Tensor> random_batch(const Spec& s, uint64_t seed);

}  // namespace ws::models
