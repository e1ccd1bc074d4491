// tokenizer.add_tokens on the model side, without a Python reference: the embedding and LM head grow with new rows
// at the mean of the old ones (tied models stay tied), and under LoRA the rows of the added tokens are trainable
// token rows (PEFT's trainable_token_indices) that save, load and merge as PEFT does.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/pretrained.h"
#include "model/lora.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ft::test {
namespace {

constexpr int64_t kVocab = 50;

std::shared_ptr<model::Transformer> tiny_model(bool tied, uint64_t seed = 1) {
  ModelConfig cfg;
  cfg.architecture = tied ? ModelFamily::kQwen2 : ModelFamily::kLlama;
  cfg.vocab_size = kVocab;
  cfg.hidden_size = 32;
  cfg.intermediate_size = 48;
  cfg.num_layers = 2;
  cfg.num_heads = 4;
  cfg.num_kv_heads = 2;
  auto args = model::args_from_config(cfg, 0);
  args.tie_word_embeddings = tied;
  auto m = std::make_shared<model::Transformer>(args);
  model::init_weights(*m, 0.2, seed);
  return m;
}

// Token ids that use the added rows 50..52 and old ones.
at::Tensor sample_ids() {
  return at::tensor({3, 50, 11, 51, 9, 52, 40, 50, 1, 17}, at::kLong).view({2, 5});
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(AddedTokens, NewRowsAreTheMeanOfTheOldRows) {
  auto m = tiny_model(/*tied=*/false);
  const at::Tensor embed_before = m->embed_tokens().weight.detach().clone();
  const at::Tensor head_before = m->lm_head()->weight.detach().clone();
  // Rows 50..52 are new; row 7 is a new token inside the old matrix (a padded vocabulary).
  m->resize_token_embeddings(kVocab + 3, {7});
  EXPECT_EQ(m->args().vocab_size, kVocab + 3);
  for (const auto& [before, after] :
       {std::pair{embed_before, m->embed_tokens().weight}, std::pair{head_before, m->lm_head()->weight}}) {
    ASSERT_EQ(after.sizes(), (at::IntArrayRef{kVocab + 3, 32}));
    const at::Tensor mean = before.mean(0);  // over all old rows, row 7 included
    for (int64_t row : {7, 50, 51, 52}) EXPECT_TRUE(at::equal(after[row], mean)) << row;
    const at::Tensor kept = at::cat({after.narrow(0, 0, 7), after.narrow(0, 8, kVocab - 8)});
    const at::Tensor old = at::cat({before.narrow(0, 0, 7), before.narrow(0, 8, kVocab - 8)});
    EXPECT_TRUE(at::equal(kept, old));
  }
  // Each matrix has its own mean.
  EXPECT_FALSE(at::equal(m->embed_tokens().weight[50], m->lm_head()->weight[50]));
  at::NoGradGuard no_grad;
  EXPECT_EQ(m->forward(sample_ids()).size(-1), kVocab + 3);
}

TEST(AddedTokens, MeanIsComputedInF32ForBf16Weights) {
  auto m = tiny_model(/*tied=*/false);
  m->to(at::kBFloat16);
  const at::Tensor before = m->embed_tokens().weight.detach().clone();
  m->resize_token_embeddings(kVocab + 1);
  EXPECT_EQ(m->embed_tokens().weight.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(m->embed_tokens().weight[kVocab], before.to(at::kFloat).mean(0).to(at::kBFloat16)));
}

TEST(AddedTokens, TiedWeightsStayTiedThroughResizeSaveAndLoad) {
  auto m = tiny_model(/*tied=*/true);
  const at::Tensor embed = m->embed_tokens().weight;
  m->resize_token_embeddings(kVocab + 3);
  EXPECT_EQ(m->lm_head(), nullptr);
  // The same parameter object, grown in place, and it is the LM head.
  EXPECT_TRUE(m->embed_tokens().weight.is_same(embed));
  EXPECT_EQ(m->lm_head_weight().data_ptr(), m->embed_tokens().weight.data_ptr());
  EXPECT_EQ(m->named_parameters().size(), model::base_parameters(*m).size());

  TempDir dir;
  model::save_pretrained(*m, dir.path(), 0);
  const auto config = nlohmann::json::parse(read_file(dir / "config.json"));
  EXPECT_EQ(config["vocab_size"], kVocab + 3);
  EXPECT_EQ(config["tie_word_embeddings"], true);
  io::SafetensorsFile st(dir / "model.safetensors");
  EXPECT_FALSE(st.contains("lm_head.weight"));
  EXPECT_EQ(st.info("model.embed_tokens.weight").shape, (std::vector<int64_t>{kVocab + 3, 32}));

  auto loaded = model::load_pretrained(dir.path(), at::kCPU, at::kFloat);
  EXPECT_EQ(loaded->lm_head(), nullptr);
  at::NoGradGuard no_grad;
  EXPECT_TRUE(at::equal(loaded->forward(sample_ids()), m->forward(sample_ids())));
}

// Under LoRA the rows of the added tokens are parameters of their own, used for those ids in the embedding and for
// those logits, and the only part of the matrices that trains.
void check_token_rows(bool tied) {
  auto m = tiny_model(tied);
  m->resize_token_embeddings(kVocab + 3);
  LoraConfig cfg;
  cfg.targets = {"q_proj", "v_proj"};
  model::apply_lora(*m, cfg, 1);
  m->add_token_rows({52, 50, 51});
  at::Tensor before;
  {
    at::NoGradGuard no_grad;
    before = m->forward(sample_ids());
  }
  std::vector<std::string> trainable;
  for (const auto& p : m->named_parameters()) {
    if (p.value().requires_grad()) trainable.push_back(p.key());
  }
  const std::vector<std::string> rows =
      tied ? std::vector<std::string>{"model.embed_tokens.token_rows"}
           : std::vector<std::string>{"model.embed_tokens.token_rows", "lm_head.token_rows"};
  for (const auto& name : rows) {
    EXPECT_NE(std::find(trainable.begin(), trainable.end(), name), trainable.end()) << name;
  }
  EXPECT_EQ(trainable.size(), 2u * 2 * 2 + rows.size());
  for (const auto& [name, t] : model::base_parameters(*m)) {
    EXPECT_EQ(name.find("token_rows"), std::string::npos) << name;  // not saved as base weights
  }

  // A backward reaches the token rows; the base matrices stay frozen.
  const at::Tensor loss = m->forward(sample_ids()).logsumexp(-1).sum();
  loss.backward();
  const at::Tensor& embed_rows = m->embed_tokens().token_rows;
  ASSERT_TRUE(embed_rows.grad().defined());
  EXPECT_GT(embed_rows.grad().abs().sum().item<double>(), 0.0);
  EXPECT_FALSE(m->embed_tokens().weight.grad().defined());
  if (!tied) {
    EXPECT_GT(m->lm_head()->token_rows.grad().abs().sum().item<double>(), 0.0);
  }

  // Changing the rows changes exactly what those ids embed to and their logits' weights.
  at::NoGradGuard no_grad;
  EXPECT_TRUE(at::equal(m->forward(sample_ids()), before));  // the rows start as copies
  embed_rows.normal_(0, 0.5);
  if (!tied) m->lm_head()->token_rows.normal_(0, 0.5);
  const at::Tensor ids = at::tensor({50, 3, 52}, at::kLong);
  const at::Tensor embedded = m->embed_tokens().embed(ids);
  EXPECT_TRUE(at::equal(embedded[0], embed_rows[0]));
  EXPECT_TRUE(at::equal(embedded[1], m->embed_tokens().weight[3]));
  EXPECT_TRUE(at::equal(embedded[2], embed_rows[2]));
  const at::Tensor head = m->lm_head_weight();
  const at::Tensor& head_rows = tied ? embed_rows : m->lm_head()->token_rows;
  EXPECT_TRUE(at::equal(head.narrow(0, kVocab, 3), head_rows));
  const at::Tensor& head_base = tied ? m->embed_tokens().weight : m->lm_head()->weight;
  EXPECT_TRUE(at::equal(head.narrow(0, 0, kVocab), head_base.narrow(0, 0, kVocab)));
  const at::Tensor trained = m->forward(sample_ids());
  EXPECT_GT(max_diff(trained, before), 1e-3);

  // Merging writes the rows into the matrices (and keeps a tied model tied).
  const at::Tensor embed_copy = embed_rows.clone(), head_copy = head_rows.clone();
  model::merge_lora(*m);
  EXPECT_FALSE(m->embed_tokens().has_token_rows());
  EXPECT_TRUE(model::adapter_tensors(*m).empty());
  EXPECT_TRUE(at::equal(m->embed_tokens().weight.narrow(0, kVocab, 3), embed_copy));
  EXPECT_TRUE(at::equal(m->lm_head_weight().narrow(0, kVocab, 3), head_copy));
  EXPECT_LT(max_diff(m->forward(sample_ids()), trained), 2e-5);
  if (tied) {
    EXPECT_EQ(m->lm_head_weight().data_ptr(), m->embed_tokens().weight.data_ptr());
  }
}

TEST(AddedTokens, LoraTrainsOnlyTheTokenRowsUntied) {
  check_token_rows(false);
}
TEST(AddedTokens, LoraTrainsOnlyTheTokenRowsTied) {
  check_token_rows(true);
}

// save_adapter writes the rows as PEFT's trainable_tokens_delta with trainable_token_indices; load_adapter on the
// base model (the old vocabulary) grows it and gives the same outputs; the rows may come in any id order.
void check_adapter_round_trip(bool tied) {
  TempDir dir;
  auto base = tiny_model(tied);
  model::save_pretrained(*base, dir / "base", 0);

  auto m = model::load_pretrained(dir / "base", at::kCPU, at::kFloat);
  m->resize_token_embeddings(kVocab + 3);
  LoraConfig cfg;
  cfg.targets = {"q_proj", "down_proj"};
  model::apply_lora(*m, cfg, 1);
  m->add_token_rows({50, 51, 52});
  {
    at::NoGradGuard no_grad;
    for (auto& [name, t] : model::adapter_tensors(*m)) t.normal_(0, 0.3);
  }
  model::save_adapter(*m, cfg, dir / "adapter", (dir / "base").string());
  const auto config = nlohmann::json::parse(read_file(dir / "adapter" / "adapter_config.json"));
  const std::vector<int64_t> ids{50, 51, 52};
  if (tied) {
    EXPECT_EQ(config["trainable_token_indices"], nlohmann::json(ids));
  } else {
    EXPECT_EQ(config["trainable_token_indices"], (nlohmann::json{{"embed_tokens", ids}, {"lm_head", ids}}));
  }
  io::SafetensorsFile st(dir / "adapter" / "adapter_model.safetensors");
  EXPECT_TRUE(st.contains("base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta"));
  EXPECT_EQ(st.contains("base_model.model.lm_head.token_adapter.trainable_tokens_delta"), !tied);

  at::NoGradGuard no_grad;
  const at::Tensor expected = m->forward(sample_ids());
  auto reloaded = model::load_pretrained(dir / "base", at::kCPU, at::kFloat);
  model::load_adapter(*reloaded, dir / "adapter");
  EXPECT_EQ(reloaded->args().vocab_size, kVocab + 3);
  EXPECT_TRUE(at::equal(reloaded->forward(sample_ids()), expected));

  // The same adapter with the ids listed in another order and the rows stored in that order.
  auto tensors = io::read_safetensors(dir / "adapter" / "adapter_model.safetensors");
  const at::Tensor order = at::tensor({2, 0, 1}, at::kLong);
  for (auto& [name, t] : tensors) {
    if (name.find("trainable_tokens_delta") != std::string::npos) t = t.index_select(0, order);
  }
  std::filesystem::create_directories(dir / "shuffled");
  io::write_safetensors(dir / "shuffled" / "adapter_model.safetensors", tensors);
  auto shuffled = config;
  const std::vector<int64_t> listed{52, 50, 51};
  shuffled["trainable_token_indices"] =
      tied ? nlohmann::json(listed) : nlohmann::json{{"embed_tokens", listed}, {"lm_head", listed}};
  write_file(dir / "shuffled" / "adapter_config.json", shuffled.dump());
  auto again = model::load_pretrained(dir / "base", at::kCPU, at::kFloat);
  model::load_adapter(*again, dir / "shuffled");
  EXPECT_TRUE(at::equal(again->forward(sample_ids()), expected));
}

TEST(AddedTokens, AdapterRoundTripUntied) {
  check_adapter_round_trip(false);
}
TEST(AddedTokens, AdapterRoundTripTied) {
  check_adapter_round_trip(true);
}

TEST(AddedTokens, ResumeLoadsTheRowsIntoAModelThatHasThem) {
  TempDir dir;
  auto m = tiny_model(false);
  m->resize_token_embeddings(kVocab + 2);
  LoraConfig cfg;
  cfg.targets = {"q_proj"};
  model::apply_lora(*m, cfg, 1);
  m->add_token_rows({50, 51});
  {
    at::NoGradGuard no_grad;
    m->embed_tokens().token_rows.normal_(0, 1);
    m->lm_head()->token_rows.normal_(0, 1);
  }
  model::save_adapter(*m, cfg, dir.path(), "");
  // A resumed run has already grown its model and added adapters and rows (other values), then loads.
  auto resumed = tiny_model(false);
  resumed->resize_token_embeddings(kVocab + 2);
  model::apply_lora(*resumed, cfg, 2);
  resumed->add_token_rows({50, 51});
  const at::Tensor param = resumed->embed_tokens().token_rows;
  model::load_adapter(*resumed, dir.path());
  EXPECT_TRUE(resumed->embed_tokens().token_rows.is_same(param));  // the optimizer's tensor, filled in place
  EXPECT_TRUE(at::equal(resumed->embed_tokens().token_rows, m->embed_tokens().token_rows));
  EXPECT_TRUE(at::equal(resumed->lm_head()->token_rows, m->lm_head()->token_rows));
  // Other ids than the model's rows are refused.
  auto other = tiny_model(false);
  other->resize_token_embeddings(kVocab + 2);
  other->add_token_rows({49, 51});
  try {
    model::load_adapter(*other, dir.path());
    ADD_FAILURE() << "expected an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("trainable_token_indices"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ft::test
