// Train an MLP on Fashion-MNIST with one compiled step per batch.
#include <cstdio>

#include <wholestep/wholestep.hpp>

struct Mlp : ws::nn::Module {
  ws::nn::Linear fc1{784, 512}, fc2{512, 512}, fc3{512, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  ws::Tensor forward(const ws::Tensor& x) { return fc3(ws::relu(fc2(ws::relu(fc1(x))))); }
};

int main() {
  ws::manual_seed(0);
  Mlp model;
  ws::optim::SGD opt(model, {.lr = 0.05, .momentum = 0.9});
  auto step = ws::compile_train_step(model, opt,
                                     [&](const ws::Tensor& x, const ws::Tensor& y) {
                                       return ws::nn::cross_entropy(model.forward(x), y);
                                     },
                                     {.mode = ws::StepMode::single_graph});
  for (const ws::data::Batch& b :
       ws::data::FashionMnist("train").batches(128, /*shuffle_seed=*/0)) {
    ws::StepResult r = step(b.images, b.labels);  // forward + backward + SGD, in place
    if (r.step % 100 == 0) std::printf("step %lld  loss %.4f\n", (long long)r.step, r.loss);
    if (r.step == 300) opt.set_lr(0.02);  // a graph input: no new trace
  }
  std::printf("traces: %lld\n", (long long)step.traces());
}
