// models::Evaluator: a classifier's f64 cross-entropy and accuracy over a
// whole labelled set and a language model's mean loss over fixed windows
// of a text, both in eval mode as eager forwards give them; each run sees
// the parameters as trained so far; a stop hook asked before each batch
// ends it with nothing; an empty set is an error.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/idx_files.hpp"
#include "wholestep/evaluate.hpp"

namespace ws {
namespace {

using data::test_util::idx_bytes;
using data::test_util::ScratchDir;
using data::test_util::write_gzip;
using data::test_util::write_plain;

// A test split of `n` examples ("t10k" files) with scrambled pixels and
// labels.
data::FashionMnist test_set(const ScratchDir& dir, uint32_t n) {
  std::vector<uint8_t> images(size_t(n) * 784), labels(n);
  for (size_t i = 0; i < images.size(); ++i) images[i] = uint8_t((i * 2654435761u) >> 13);
  for (uint32_t i = 0; i < n; ++i) labels[i] = uint8_t((i * 7 + 3) % 10);
  write_gzip(dir.file("t10k-images-idx3-ubyte.gz"), idx_bytes({n, 28, 28}, images));
  write_gzip(dir.file("t10k-labels-idx1-ubyte.gz"), idx_bytes({n}, labels));
  return data::FashionMnist("test", dir.str());
}

// The mean cross-entropy and accuracy of eager forwards in eval mode.
models::EvalResult eager_classify(models::Model& m, const data::FashionMnist& test) {
  m.eval();
  double loss = 0;
  int64_t correct = 0;
  for (const data::Batch& b : test.batches(100, 0)) {
    const std::vector<double> z = m(b.images).to_vector();
    const std::vector<double> y = b.labels.to_vector();
    for (size_t i = 0; i < y.size(); ++i) {
      const auto row = z.begin() + std::ptrdiff_t(i * 10);
      const auto top = std::max_element(row, row + 10);
      double sum = 0;
      for (auto v = row; v != row + 10; ++v) sum += std::exp(*v - *top);
      loss += *top + std::log(sum) - row[std::ptrdiff_t(y[i])];
      correct += top - row == std::ptrdiff_t(y[i]);
    }
  }
  m.train();
  const double n = double(test.size());
  return {.loss = loss / n, .accuracy = double(correct) / n};
}

TEST(Evaluator, AClassifiersLossAndAccuracyOverTheWholeSet) {
  ScratchDir dir;
  const data::FashionMnist test = test_set(dir, 1203);  // batches of 500, 500 and 203
  manual_seed(3);
  models::Mlp m({784, 32, 10});
  models::Evaluator eval(m, test);
  const std::optional<models::EvalResult> r = eval.run();
  ASSERT_TRUE(r && r->accuracy);
  const models::EvalResult want = eager_classify(m, test);
  EXPECT_NEAR(r->loss, want.loss, 1e-5 * want.loss);
  EXPECT_DOUBLE_EQ(*r->accuracy, *want.accuracy);
}

TEST(Evaluator, EachRunSeesTheParametersAsTrainedSoFar) {
  ScratchDir dir;
  const data::FashionMnist test = test_set(dir, 600);
  manual_seed(4);
  models::Mlp m({784, 16, 10});
  models::Evaluator eval(m, test);
  const models::EvalResult before = *eval.run();
  optim::SGD opt(m, {.lr = 0.1});
  TrainStep step(m, opt, models::loss_fn(m));
  const data::Batch b = test.batch(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  step.run({b.images, b.labels});
  const models::EvalResult after = *eval.run();
  EXPECT_NE(after.loss, before.loss);
  // The same bits as an evaluator compiled after the step.
  const models::EvalResult fresh = *models::Evaluator(m, test).run();
  EXPECT_EQ(after.loss, fresh.loss);
  EXPECT_EQ(after.accuracy, fresh.accuracy);
}

TEST(Evaluator, ALanguageModelsMeanLossOverFixedWindowsInEvalMode) {
  ScratchDir dir;
  std::string text;
  for (int i = 0; i < 4000; ++i) text += char('a' + (i * 7 + i / 13) % 26);
  write_plain(dir.file("t.txt"), text);
  const data::ByteText val = data::ByteText(dir.file("t.txt")).split("val");
  manual_seed(5);
  models::Gpt m(models::GptConfig{.context = 8, .d_model = 32, .heads = 2, .layers = 1});
  models::Evaluator eval(m, val, 4, 8);
  const std::optional<models::EvalResult> r = eval.run();
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->accuracy);
  // Dropout is off: eager forwards in eval mode over the same 20 windows.
  m.eval();
  double want = 0;
  for (int i = 0; i < 20; ++i) {
    const data::TextBatch b = val.sample(4, 8, 12345, i);
    want += m.loss(b.inputs, b.targets).item();
  }
  m.train();
  EXPECT_NEAR(r->loss, want / 20, 1e-5 * want / 20);
  EXPECT_EQ(eval.run()->loss, r->loss);  // the same windows every run
}

TEST(Evaluator, AStopHookAskedBeforeEachBatchEndsItWithNothing) {
  ScratchDir dir;
  const data::FashionMnist test = test_set(dir, 1001);  // 3 batches
  manual_seed(6);
  models::Mlp m({784, 8, 10});
  models::Evaluator eval(m, test);
  int asked = 0;
  EXPECT_TRUE(eval.run([&] { return ++asked > 3; }));
  EXPECT_EQ(asked, 3);
  asked = 0;
  EXPECT_FALSE(eval.run([&] { return ++asked == 2; }));
  EXPECT_EQ(asked, 2);
}

TEST(Evaluator, AnEmptyTestSetIsAnError) {
  ScratchDir dir;
  const data::FashionMnist empty = test_set(dir, 0);
  models::Mlp m({784, 10});
  EXPECT_EQ(testing::error_of([&] { models::Evaluator(m, empty); }),
            "Evaluator: the test set holds no examples");
}

}  // namespace
}  // namespace ws
