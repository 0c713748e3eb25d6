// models::generate: greedy decoding picks the argmax of each step's last
// position (through the compiled, padded window, as an exact-length eager
// forward would), sampling is fixed by its seed, a prompt longer than the
// context keeps its newest tokens, a stop hook ends it early, and bad
// arguments are errors naming them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "wholestep/models.hpp"

namespace ws {
namespace {

using testing::error_of;

// A small Gpt (one layer, context 8) from a fixed seed.
std::unique_ptr<models::Gpt> small_gpt() {
  manual_seed(11);
  return std::make_unique<models::Gpt>(
      models::GptConfig{.context = 8, .d_model = 32, .heads = 2, .layers = 1});
}

// Greedy decoding by eager forwards on exactly the newest tokens (no
// padding); also checks each choice is not a near tie.
std::vector<int64_t> eager_greedy(models::Gpt& m, std::vector<int64_t> seq, int64_t length) {
  const int64_t context = m.config.context, vocab = m.config.vocab;
  m.eval();
  std::vector<int64_t> out;
  for (int64_t n = 0; n < length; ++n) {
    const int64_t len = std::min<int64_t>(int64_t(seq.size()), context);
    const std::vector<int64_t> window(seq.end() - len, seq.end());
    const std::vector<double> z = m(Tensor::from_vector(window, {1, len})).to_vector();
    std::vector<double> last(z.end() - vocab, z.end());
    const auto top = std::max_element(last.begin(), last.end());
    const int64_t pick = top - last.begin();
    *top = -std::numeric_limits<double>::infinity();
    EXPECT_GT(z[size_t((len - 1) * vocab + pick)] - *std::max_element(last.begin(), last.end()),
              1e-4)
        << "a near tie at step " << n;
    out.push_back(pick);
    seq.push_back(pick);
  }
  m.train();
  return out;
}

// The stop hook is asked before each token: generation ends there with the
// tokens made so far, the same as the start of an unstopped run.
TEST(Generate, AStopHookEndsGenerationWithTheTokensMadeSoFar) {
  auto m = small_gpt();
  const std::vector<int64_t> prompt = {72, 101, 108};
  const std::vector<int64_t> whole = models::generate(*m, prompt, {.length = 12});
  int asked = 0;
  const std::vector<int64_t> part =
      models::generate(*m, prompt, {.length = 12, .stop = [&] { return ++asked > 5; }});
  EXPECT_EQ(asked, 6);
  EXPECT_EQ(part, std::vector<int64_t>(whole.begin(), whole.begin() + 5));
  EXPECT_TRUE(models::generate(*m, prompt, {.length = 12, .stop = [] { return true; }}).empty());
}

TEST(Generate, GreedyPicksTheArgmaxOfTheLastPositionEvenPastTheContext) {
  auto m = small_gpt();
  const std::vector<int64_t> prompt = {72, 101, 108};
  const std::vector<int64_t> out = models::generate(*m, prompt, {.length = 12});
  EXPECT_EQ(out, eager_greedy(*m, prompt, 12));  // 3 + 12 tokens slide past context 8
  EXPECT_TRUE(m->is_training());                 // the mode is restored
  // A temperature near 0 is greedy too.
  EXPECT_EQ(models::generate(*m, prompt, {.length = 12, .temperature = 1e-6, .seed = 3}), out);
}

TEST(Generate, TheSameSeedGivesTheSameTextAndAnotherSeedAnother) {
  auto m = small_gpt();
  const std::vector<int64_t> prompt = {1, 2, 3, 4};
  const models::SampleOptions o{.length = 40, .temperature = 1, .seed = 5};
  const std::vector<int64_t> a = models::generate(*m, prompt, o);
  ASSERT_EQ(a.size(), 40u);
  EXPECT_EQ(models::generate(*m, prompt, o), a);
  EXPECT_NE(models::generate(*m, prompt, {.length = 40, .temperature = 1, .seed = 6}), a);
  EXPECT_NE(a, models::generate(*m, prompt, {.length = 40}));  // not greedy
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](int64_t t) { return t >= 0 && t < 256; }));
}

TEST(Generate, ReturnsLengthTokensAndALongPromptKeepsItsNewestContextTokens) {
  auto m = small_gpt();
  std::vector<int64_t> prompt(20);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int64_t(i * 7 % 256);
  const models::SampleOptions o{.length = 5, .temperature = 0.7, .seed = 1};
  const std::vector<int64_t> out = models::generate(*m, prompt, o);
  EXPECT_EQ(out.size(), 5u);
  EXPECT_EQ(out, models::generate(*m, std::vector<int64_t>(prompt.end() - 8, prompt.end()), o));
  EXPECT_TRUE(models::generate(*m, prompt, {.length = 0}).empty());
}

TEST(GenerateErrors, BadArgumentsAreNamed) {
  auto m = small_gpt();
  const std::vector<int64_t> ok = {65};
  EXPECT_EQ(error_of([&] { models::generate(*m, std::vector<int64_t>{}); }),
            "generate: the prompt is empty; it needs at least one token to continue");
  EXPECT_EQ(error_of([&] {
              models::generate(*m, std::vector<int64_t>{65, 256});
            }),
            "generate: prompt token 256 at position 1 is outside [0, 256)");
  EXPECT_EQ(error_of([&] { models::generate(*m, std::vector<int64_t>{-1}); }),
            "generate: prompt token -1 at position 0 is outside [0, 256)");
  EXPECT_EQ(error_of([&] { models::generate(*m, ok, {.length = -1}); }),
            "generate: length -1 must be at least 0");
  for (double t : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()})
    EXPECT_NE(error_of([&] {
                models::generate(*m, ok, {.temperature = t});
              }).find(fmt::format("generate: temperature {} must be a finite number >= 0", t)),
              std::string::npos);
}

TEST(GenerateErrors, NonFiniteParametersAreAnErrorNotText) {
  auto m = small_gpt();
  float* w = m->head.weight.data<float>();
  w[0] = std::numeric_limits<float>::quiet_NaN();
  const std::string msg = error_of([&] { models::generate(*m, std::vector<int64_t>{65}); });
  EXPECT_NE(msg.find("generate: the logit of token 0 at generated position 0 is nan"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace ws
