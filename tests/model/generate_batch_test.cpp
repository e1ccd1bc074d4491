// Batched greedy generation (model::generate_batch): prompts of different lengths left-padded into one KV-cached
// batch give exactly what generate() gives one prompt at a time, under plain, sliding-window, soft-capped and
// grouped-query attention; the padding mask is KVCache::first_real's.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/generate.h"
#include "model/pretrained.h"
#include "model/tiny_config.h"
#include "util/error.h"

namespace ft::test {
namespace {

std::shared_ptr<model::Transformer> random_model(const model::ModelArgs& args) {
  auto m = std::make_shared<model::Transformer>(args);
  model::init_weights(*m, 0.2, 3);
  return m;
}

model::ModelArgs tiny(const std::string& family) {
  return model::args_from_config(tiny_model_config(family), 0);
}

// Lengths 1, 5, 17, 5 and 3: padding of every size, and two rows of one length.
std::vector<std::vector<int64_t>> prompts() {
  std::vector<std::vector<int64_t>> out;
  int64_t id = 7;
  for (int64_t length : {1, 5, 17, 5, 3}) {
    std::vector<int64_t> p;
    for (int64_t i = 0; i < length; ++i) p.push_back(id = (id * 31 + 11) % 50);
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::vector<int64_t>> one_at_a_time(model::Transformer& m, const std::vector<std::vector<int64_t>>& ps,
                                                const model::GenerateOptions& o) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& p : ps) out.push_back(model::generate(m, p, o));
  return out;
}

// A stop id that ends row `row` earlier than some other row: a token of its output whose first occurrence there
// comes before its first occurrence in another row (or that row never emits it).
int64_t early_stop_for(const std::vector<std::vector<int64_t>>& generated, size_t row) {
  auto first = [](const std::vector<int64_t>& ids, int64_t id) {
    return std::find(ids.begin(), ids.end(), id) - ids.begin();
  };
  for (int64_t id : generated[row]) {
    for (size_t other = 0; other < generated.size(); ++other) {
      if (first(generated[other], id) > first(generated[row], id)) return id;
    }
  }
  return -1;
}

void expect_batch_equals_single(const model::ModelArgs& args) {
  auto m = random_model(args);
  model::GenerateOptions o;
  o.max_new_tokens = 12;
  const auto ps = prompts();
  const auto expected = one_at_a_time(*m, ps, o);
  EXPECT_EQ(model::generate_batch(*m, ps, o), expected);
  EXPECT_EQ(model::generate_batch(*m, ps, o, /*max_rows=*/2), expected);  // three batches

  // One row stops at its stop id (included) while the others go on.
  const int64_t stop = early_stop_for(expected, 1);
  ASSERT_GE(stop, 0) << "no token ends row 1 before the others";
  o.stop_ids = {stop};
  const auto stopped = one_at_a_time(*m, ps, o);
  ASSERT_EQ(stopped[1].back(), stop);
  ASSERT_TRUE(std::any_of(stopped.begin(), stopped.end(),
                          [&](const std::vector<int64_t>& g) { return g.size() > stopped[1].size(); }));
  EXPECT_EQ(model::generate_batch(*m, ps, o), stopped);
  EXPECT_TRUE(m->is_training());  // the mode is restored
}

TEST(ModelGenerateBatch, EqualsGenerateOnePromptAtATime) {
  expect_batch_equals_single(tiny("llama"));
}

TEST(ModelGenerateBatch, SlidingWindowShorterThanTheSequence) {
  auto args = tiny("mistral");
  args.sliding_window = 6;  // prompts up to 17 tokens, 12 more generated
  expect_batch_equals_single(args);
}

TEST(ModelGenerateBatch, SoftCappedAttentionWithSlidingLayers) {
  auto args = tiny("gemma2");
  args.sliding_window = 6;
  args.sliding_layers = {true, false};
  args.attn_logit_softcapping = 20.0;
  args.final_logit_softcapping = 10.0;
  expect_batch_equals_single(args);
}

TEST(ModelGenerateBatch, GroupedQueryAttention) {
  auto config = tiny_model_config("qwen2");
  config.num_heads = 4;
  config.num_kv_heads = 1;  // four query heads share each key head
  expect_batch_equals_single(model::args_from_config(config, 0));
}

TEST(ModelGenerateBatch, GreedyOnlyAndTheChecksOfGenerate) {
  auto m = random_model(tiny("llama"));
  model::GenerateOptions o;
  EXPECT_TRUE(model::generate_batch(*m, {}, o).empty());
  o.max_new_tokens = 0;
  EXPECT_EQ(model::generate_batch(*m, {{1, 2}, {3}}, o), (std::vector<std::vector<int64_t>>{{}, {}}));
  o.temperature = 0.7;
  EXPECT_THROW(model::generate_batch(*m, {{1, 2}}, o), ConfigError);
  o.temperature = 0.0;
  EXPECT_THROW(model::generate_batch(*m, {{1, 2}}, o, /*max_rows=*/0), ConfigError);
  EXPECT_THROW(model::generate_batch(*m, {{1, 2}, {}}, o), Error);
  EXPECT_THROW(model::generate_batch(*m, {{1, 50}}, o), Error);
}

}  // namespace
}  // namespace ft::test
