// tokenizer.add_tokens end to end: a tiny random Llama whose byte-level tokenizer.json has no chat markers
// (tests/train/ref/add_tokens_roundtrip.py) is fine-tuned on chat data with data.template chatml and
// tokenizer.add_tokens: [<|im_start|>, <|im_end|>], with LoRA (untied and tied embeddings) and as a full fine-tune.
// transformers (+ PEFT) loads what the run wrote: its tokenizer encodes the training data and the chat prompt to our
// ids, and greedy generation gives `finetune generate`'s ids (also after `finetune export` merges the adapter).
// A LoRA run with added tokens resumes bit-exactly, and a sentencepiece tokenizer keeps its added tokens through
// the export (tokenizer_config.json's added_tokens_decoder), read back by us and by transformers alike.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "data/tokenizer_train.h"
#include "tokenizer/tokenizer.h"
#include "train/train_support.h"
#include "util/error.h"

namespace ft::test {
namespace {

const char* const kPrompt = "Reverse: red cat sun";
const char* const kChatPrompt = "<|im_start|>user\nReverse: red cat sun<|im_end|>\n<|im_start|>assistant\n";

std::filesystem::path script_path() {
  return source_dir() / "tests/train/ref/add_tokens_roundtrip.py";
}

std::string script() {
  return shell_quote(script_path().string());
}

// The JSON object a command printed last (logs go before it).
nlohmann::json json_output(const CommandResult& r) {
  const auto at = r.output.rfind("\n{");
  return nlohmann::json::parse(r.output.substr(at == std::string::npos ? r.output.find('{') : at + 1));
}

std::string ids_string(const nlohmann::json& ids) {
  std::string s;
  for (const auto& id : ids) s += (s.empty() ? "" : " ") + std::to_string(id.get<int64_t>());
  return s;
}

class AddTokens : public ::testing::Test {
 protected:
  // The tiny models and chat data (model, model_tied, chat.jsonl), made once per content of the script and copied
  // into the test's directory; false (with the test skipped) when the reference packages are missing.
  bool make() {
    std::filesystem::path made;
    try {
      made = made_once("ft-addtok-refs", read_file(script_path()) + python(), [](const std::filesystem::path& out) {
        return run(python() + " " + script() + " make " + shell_quote(out.string()));
      });
    } catch (const std::runtime_error& e) {
      skip_reason_ = std::string("reference packages missing: ") + std::string(e.what()).substr(0, 300);
      return false;
    }
    std::filesystem::copy(made, dir_.path(), std::filesystem::copy_options::recursive);
    return true;
  }

  // The random model `name` after a full fine-tune on the conversations in the plain template (no markers): a
  // "pretrained" base that knows the task but not the chat markers, so LoRA has something to adapt. Its
  // directory, `name`-base/model.
  std::filesystem::path pretrain(const std::string& name) {
    const auto config = write_config(name + "-base", dir_.path() / name, /*lora=*/false, /*markers=*/false);
    const auto trained = run(train_cmd(config));
    EXPECT_EQ(trained.exit_code, 0) << trained.output;
    return dir_.path() / (name + "-base") / "model";
  }

  // A run of `name` in the directory of the test on the model in `model`: with `markers`, chatml with
  // tokenizer.add_tokens: [<|im_start|>, <|im_end|>]; else the plain template (no markers, nothing added).
  std::filesystem::path write_config(const std::string& name, const std::filesystem::path& model, bool lora,
                                     bool markers = true) {
    const auto d = dir_.path();
    const auto config = d / (name + ".yaml");
    std::ofstream(config) << "run: {name: " << name << ", output_dir: " << (d / name).string()
                          << ", seed: 0, device: cpu, deterministic: true}\n"
                          << "model: {path: " << model.string() << "}\n"
                          << "lora: {enabled: " << (lora ? "true" : "false")
                          << ", rank: 8, alpha: 16, dropout: 0.0, targets: [q_proj, v_proj, o_proj, down_proj]}\n"
                          << (markers ? "tokenizer: {add_tokens: [\"<|im_start|>\", \"<|im_end|>\"]}\n" : "")
                          << "data: {train: [{path: " << (d / "chat.jsonl").string() << ", format: chat}],\n"
                          << "       template: " << (markers ? "chatml" : "plain")
                          << ", seq_len: 64, cache_dir: " << (d / (name + "-cache")).string() << "}\n"
                          << "train: {max_steps: 40, micro_batch_size: 16, precision: fp32}\n"
                          << "optimizer: {lr: " << (lora ? "1.0e-2" : "3.0e-3") << ", weight_decay: 0.0}\n"
                          << "scheduler: {type: constant}\n"
                          << "checkpoint: {every_steps: 0, resume: never}\neval: {every_steps: 0}\n"
                          << "logging: {every_steps: 1, progress: \"off\"}\n";
    return config;
  }

  TempDir dir_{"ft-addtok"};
  std::string skip_reason_;
};

class AddTokensRoundTrip : public AddTokens, public ::testing::WithParamInterface<std::string> {};

TEST_P(AddTokensRoundTrip, TransformersLoadsTheExportWithTheSameIdsAndGenerations) {
  if (!make()) GTEST_SKIP() << skip_reason_;
  const std::string mode = GetParam();
  const bool lora = mode.rfind("lora", 0) == 0;
  const std::string model = mode.find("tied") != std::string::npos ? "model_tied" : "model";
  const auto d = dir_.path();
  const auto base = pretrain(model);
  const auto config = write_config("rt", base, lora);
  // The pre-flight and the dataset view add the tokens as training does.
  const auto validated = run_finetune("config validate --config " + shell_quote(config.string()));
  EXPECT_EQ(validated.exit_code, 0) << validated.output;
  const auto inspected = run_finetune("data inspect --config " + shell_quote(config.string()) + " --n 1");
  EXPECT_EQ(inspected.exit_code, 0) << inspected.output;
  EXPECT_NE(inspected.output.find("<|im_end|>#"), std::string::npos) << inspected.output;
  const auto trained = run(train_cmd(config));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_NE(trained.output.find("tokenizer.add_tokens: 2 new (<|im_start|> #"), std::string::npos) << trained.output;
  EXPECT_NE(trained.output.find("start as the mean of the old rows"), std::string::npos) << trained.output;

  const auto exported = d / "rt" / (lora ? "adapter" : "model");
  // Our tokenizer, loaded back from what the run wrote, knows the markers as single special tokens.
  const auto encoded = run_finetune("tokenizer encode --tokenizer " + shell_quote(exported.string()) + " --text " +
                                    shell_quote(kChatPrompt) + " --json");
  ASSERT_EQ(encoded.exit_code, 0) << encoded.output;
  const auto prompt_ids = json_output(encoded)["ids"];

  nlohmann::json ours;
  ours["chat"] = (d / "chat.jsonl").string();
  ours["cache"] = (d / "rt-cache").string();
  const std::string n = " --max-new-tokens 10 --json";
  if (lora) {
    // The base model with the adapter: the vocabulary grows as its trainable_token_indices say, and the prompt is
    // written with the adapter's tokenizer and chat template.
    const auto generated =
        run_finetune("generate --model " + shell_quote(base.string()) + " --adapter " + shell_quote(exported.string()) +
                     " --chat --prompt " + shell_quote(kPrompt) + n);
    ASSERT_EQ(generated.exit_code, 0) << generated.output;
    EXPECT_EQ(json_output(generated)["prompt_ids"], prompt_ids);
    ours["prompt_ids"] = prompt_ids;
    ours["generated_ids"] = json_output(generated)["generated_ids"];
    // The same from the ids, with the base model's weights only (no tokenizer at all).
    const auto weights = d / "base-weights";
    std::filesystem::create_directories(weights);
    for (const char* name : {"config.json", "model.safetensors"}) {
      std::filesystem::copy_file(base / name, weights / name);
    }
    const auto from_ids =
        run_finetune("generate --model " + shell_quote(weights.string()) + " --adapter " +
                     shell_quote(exported.string()) + " --prompt-ids " + shell_quote(ids_string(prompt_ids)) + n);
    ASSERT_EQ(from_ids.exit_code, 0) << from_ids.output;
    EXPECT_EQ(json_output(from_ids)["generated_ids"], ours["generated_ids"]);
    // Merged into a model of its own, with the adapter's tokenizer.
    const auto merged = d / "merged";
    const auto exported_merged =
        run_finetune("export --model " + shell_quote(base.string()) + " --adapter " + shell_quote(exported.string()) +
                     " --out " + shell_quote(merged.string()));
    ASSERT_EQ(exported_merged.exit_code, 0) << exported_merged.output;
    const auto chat = run_finetune("generate --model " + shell_quote(merged.string()) + " --chat --prompt " +
                                   shell_quote(kPrompt) + n);
    ASSERT_EQ(chat.exit_code, 0) << chat.output;
    ours["merged"] = json_output(chat);
    EXPECT_EQ(ours["merged"]["prompt_ids"], prompt_ids);
  } else {
    const auto chat = run_finetune("generate --model " + shell_quote(exported.string()) + " --chat --prompt " +
                                   shell_quote(kPrompt) + n);
    ASSERT_EQ(chat.exit_code, 0) << chat.output;
    const auto out = json_output(chat);
    EXPECT_EQ(out["prompt_ids"], prompt_ids);
    ours["prompt_ids"] = out["prompt_ids"];
    ours["generated_ids"] = out["generated_ids"];
  }
  // The model learned to close its turn with the new token (its rows were trained): "sun cat red<|im_end|>".
  const auto marker =
      run_finetune("tokenizer encode --tokenizer " + shell_quote(exported.string()) + " --text '<|im_end|>' --json");
  ASSERT_EQ(marker.exit_code, 0) << marker.output;
  const auto im_end = json_output(marker)["ids"];
  ASSERT_EQ(im_end.size(), 1u) << im_end;
  EXPECT_NE(std::find(prompt_ids.begin(), prompt_ids.end(), im_end[0]), prompt_ids.end()) << prompt_ids;
  const auto& gen = ours["generated_ids"];
  EXPECT_NE(std::find(gen.begin(), gen.end(), im_end[0]), gen.end()) << gen;

  write_file(d / "ours.json", ours.dump());
  std::string args = lora ? "lora " : "full ";
  args += shell_quote(base.string()) + " " + shell_quote(exported.string()) + " ";
  if (lora) args += shell_quote((d / "merged").string()) + " ";
  const auto checked = run(python() + " " + script() + " check " + args + shell_quote((d / "ours.json").string()));
  EXPECT_EQ(checked.exit_code, 0) << "ours: " << ours.dump() << "\ntransformers: " << checked.output;
}

INSTANTIATE_TEST_SUITE_P(Modes, AddTokensRoundTrip, ::testing::Values("lora", "lora_tied", "full", "full_tied"));

// SIGTERM in the middle of a LoRA run with added tokens, then resume: the same losses as without the stop (the
// grown vocabulary, the token rows and their optimizer state come back exactly).
TEST_F(AddTokens, LoraRunResumesBitExactly) {
  if (!make()) GTEST_SKIP() << skip_reason_;
  const std::string steps =
      "train.max_steps=16 train.micro_batch_size=8 checkpoint.every_steps=5 checkpoint.keep_last=2 "
      "checkpoint.resume=auto ";
  const auto base = pretrain("model");
  const auto reference = write_config("reference", base, true);
  ASSERT_EQ(run(train_cmd(reference, steps)).exit_code, 0);
  const auto expected = losses(dir_.path() / "reference");
  ASSERT_EQ(expected.size(), 16u);

  const auto term = write_config("term", base, true);
  EXPECT_EQ(run_and_signal(train_cmd(term, steps), dir_.path() / "term", 7, SIGTERM), 130);
  const auto resumed = run(train_cmd(term, steps));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  expect_same_losses(expected, losses(dir_.path() / "term"), 0.0);

  // Another token list changes the model: the checkpoint is refused.
  const auto other =
      run(train_cmd(term, steps + "train.max_steps=20 " +
                              shell_quote("tokenizer.add_tokens=[\"<|im_start|>\", \"<|im_end|>\", \"<x>\"]")));
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("settings that must stay the same on resume"), std::string::npos) << other.output;
  EXPECT_NE(other.output.find("tokenizer.add_tokens: ["), std::string::npos) << other.output;
}

// The other way round: an adapter PEFT saved after resize_token_embeddings with trainable_token_indices (ids out of
// order, PEFT's resized matrices included) generates with `finetune generate --adapter` what it does in PEFT.
TEST_F(AddTokens, PeftSavedAdapterGeneratesAsInPeft) {
  if (!make()) GTEST_SKIP() << skip_reason_;
  for (const std::string model : {"model", "model_tied"}) {
    SCOPED_TRACE(model);
    const auto d = dir_.path();
    const auto adapter = d / ("peft-" + model);
    const auto saved = run(python() + " " + script() + " peft_adapter " + shell_quote((d / model).string()) + " " +
                           shell_quote(adapter.string()));
    ASSERT_EQ(saved.exit_code, 0) << saved.output;
    const auto peft = json_output(saved);
    const auto ours = run_finetune("generate --model " + shell_quote((d / model).string()) + " --adapter " +
                                   shell_quote(adapter.string()) + " --prompt-ids " +
                                   shell_quote(ids_string(peft["prompt"])) + " --max-new-tokens 8 --json");
    ASSERT_EQ(ours.exit_code, 0) << ours.output;
    EXPECT_EQ(json_output(ours)["generated_ids"], peft["generated"]) << ours.output;
  }
}

// A sentencepiece model cannot hold new pieces: the run keeps the added tokens in front of it, and the exported
// tokenizer_config.json's added_tokens_decoder carries them to transformers and back to us.
TEST_F(AddTokens, SentencepieceKeepsAddedTokensInTokenizerConfig) {
  if (!make()) GTEST_SKIP() << skip_reason_;
  const auto d = dir_.path();
  const auto sp = run_finetune("tokenizer train --input " + shell_quote((d / "chat.jsonl").string()) +
                               " --vocab-size 300 --out " + shell_quote((d / "sp").string()));
  ASSERT_EQ(sp.exit_code, 0) << sp.output;
  const auto config = d / "sp.yaml";
  std::ofstream(config) << "run: {output_dir: " << (d / "sprun").string() << ", seed: 0, device: cpu}\n"
                        << "model: {hidden_size: 32, intermediate_size: 64, num_layers: 1, num_heads: 2,"
                        << " num_kv_heads: 1, max_position_embeddings: 128}\n"
                        << "tokenizer: {path: " << (d / "sp" / "tokenizer.model").string()
                        << ", add_tokens: [\"<|im_start|>\", \"<|im_end|>\"]}\n"
                        << "data: {train: [{path: " << (d / "chat.jsonl").string() << ", format: chat}],\n"
                        << "       template: chatml, seq_len: 64, cache_dir: " << (d / "sp-cache").string() << "}\n"
                        << "train: {max_steps: 2, micro_batch_size: 4}\n"
                        << "checkpoint: {every_steps: 0, resume: never}\neval: {every_steps: 0}\n"
                        << "logging: {every_steps: 1, progress: \"off\"}\n";
  const auto trained = run(train_cmd(config));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto model = d / "sprun" / "model";
  ASSERT_TRUE(std::filesystem::exists(model / "tokenizer.model"));
  // The new ids follow the pieces the trainer made ("wrote .../tokenizer.model (N pieces)").
  const auto at = sp.output.rfind(" (");
  ASSERT_NE(at, std::string::npos) << sp.output;
  const int64_t pieces = std::stoll(sp.output.substr(at + 2));
  const auto tokenizer_config = nlohmann::json::parse(read_file(model / "tokenizer_config.json"));
  const auto& decoder = tokenizer_config["added_tokens_decoder"];
  EXPECT_EQ(decoder[std::to_string(pieces)]["content"], "<|im_start|>") << tokenizer_config.dump();
  EXPECT_EQ(decoder[std::to_string(pieces + 1)]["content"], "<|im_end|>") << tokenizer_config.dump();
  EXPECT_EQ(tokenizer_config["legacy"], true);
  EXPECT_EQ(nlohmann::json::parse(read_file(model / "config.json"))["vocab_size"], pieces + 2);

  nlohmann::json ours;
  ours["texts"] = {kChatPrompt, "plain text <|im_end|> and more", "<|im_start|>assistant\nsun red<|im_end|>",
                   "a<|im_end|>\n<|im_start|> b"};
  for (const auto& text : ours["texts"]) {
    const auto encoded = run_finetune("tokenizer encode --tokenizer " + shell_quote(model.string()) + " --text " +
                                      shell_quote(text.get<std::string>()) + " --json");
    ASSERT_EQ(encoded.exit_code, 0) << encoded.output;
    const auto ids = json_output(encoded)["ids"];
    ours["ids"].push_back(ids);
    EXPECT_NE(std::find(ids.begin(), ids.end(), nlohmann::json(pieces + 1)), ids.end()) << ids;  // <|im_end|>
  }
  ours["len"] = pieces + 2;
  write_file(d / "ours.json", ours.dump());
  const auto checked = run(python() + " " + script() + " check_tokenizer " + shell_quote(model.string()) + " " +
                           shell_quote((d / "ours.json").string()));
  EXPECT_EQ(checked.exit_code, 0) << "ours: " << ours.dump() << "\ntransformers: " << checked.output;
}

// The tokenizer facade: new tokens get the ids after the vocabulary and are matched whole (not with split_special),
// tokens it has keep their ids, the text between is encoded as before, decode gives the tokens back as text on
// request, and the tokenizer saved (tokenizer.json) or its configs (sentencepiece) bring them back on load.
void check_facade(tok::Tokenizer& tok, const std::filesystem::path& saved_dir) {
  const int64_t n = tok.vocab_size();
  const auto before = tok.fingerprint();
  const std::string text = "<|im_start|>user\nReverse: red cat<|im_end|>\n";
  const auto plain = tok.encode(text);
  const auto ids = tok.add_tokens({"<|im_start|>", "<|im_end|>", "<|im_start|>"});
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0].id, n);
  EXPECT_TRUE(ids[0].created);
  EXPECT_EQ(ids[1].id, n + 1);
  EXPECT_EQ(ids[2].id, n);
  EXPECT_FALSE(ids[2].created);
  EXPECT_EQ(tok.vocab_size(), n + 2);
  EXPECT_NE(tok.fingerprint(), before);
  EXPECT_EQ(tok.piece_to_id("<|im_end|>"), n + 1);
  EXPECT_EQ(tok.id_to_piece(n), "<|im_start|>");
  EXPECT_TRUE(tok.is_special(n + 1));
  ASSERT_EQ(tok.added_tokens().size(), 2u);

  const auto encoded = tok.encode(text);
  ASSERT_GE(encoded.size(), 3u);
  EXPECT_EQ(encoded.front(), n);
  EXPECT_EQ(std::count(encoded.begin(), encoded.end(), n + 1), 1);
  const auto with_offsets = tok.encode_with_offsets(text);
  EXPECT_EQ(with_offsets.ids, encoded);
  EXPECT_EQ(with_offsets.offsets.front(), (std::pair<size_t, size_t>{0, 12}));
  EXPECT_EQ(tok.encode(text, /*split_special=*/true), plain);  // user text that spells them stays text
  EXPECT_EQ(tok.decode(encoded, /*skip_special=*/false), text);
  // Left out by default, as special tokens are (sentencepiece: the word marker that starts the text after a token
  // stays, as a space).
  EXPECT_EQ(tok.decode(encoded),
            tok.kind() == "sentencepiece" ? "user\nReverse: red cat \n" : "user\nReverse: red cat\n");

  tok.save(saved_dir);
  const auto reloaded = tok::Tokenizer::load(saved_dir);
  if (tok.kind() == "tokenizer.json") {
    EXPECT_EQ(reloaded->vocab_size(), n + 2);
    EXPECT_EQ(reloaded->encode(text), encoded);
  }
}

TEST_F(AddTokens, TokenizerFacadeAddsMatchesAndDecodesTokens) {
  if (!make()) GTEST_SKIP() << skip_reason_;
  const auto d = dir_.path();
  {
    SCOPED_TRACE("tokenizer.json");
    const auto tok = tok::Tokenizer::load(d / "model");
    check_facade(*tok, d / "saved-json");
  }
  {
    SCOPED_TRACE("sentencepiece");
    data::train_tokenizer({d / "chat.jsonl"}, 300, "bpe", d / "sp");
    const auto tok = tok::Tokenizer::load(d / "sp" / "tokenizer.model");
    check_facade(*tok, d / "saved-sp");
    // A control piece it has keeps its id.
    const auto existing = tok->add_tokens({"</s>"});
    EXPECT_EQ(existing[0].id, tok->eos_id());
    EXPECT_FALSE(existing[0].created);
    // What an export writes, tokenizer_config.json's added_tokens_decoder, brings the tokens back.
    const int64_t n = tok->vocab_size() - 2;
    write_file(d / "saved-sp" / "tokenizer_config.json",
               nlohmann::json{{"added_tokens_decoder",
                               {{std::to_string(n), {{"content", "<|im_start|>"}, {"special", true}}},
                                {std::to_string(n + 1), {{"content", "<|im_end|>"}, {"special", true}}}}}}
                   .dump());
    const auto reloaded = tok::Tokenizer::load(d / "saved-sp");
    EXPECT_EQ(reloaded->vocab_size(), n + 2);
    EXPECT_EQ(reloaded->encode(kChatPrompt), tok->encode(kChatPrompt));
    EXPECT_TRUE(reloaded->is_special(n));
    // Ids that leave a gap after the pieces are refused.
    write_file(d / "saved-sp" / "tokenizer_config.json",
               nlohmann::json{{"added_tokens_decoder", {{std::to_string(n + 5), {{"content", "<x>"}}}}}}.dump());
    EXPECT_THROW(tok::Tokenizer::load(d / "saved-sp"), ConfigError);
  }
  {
    SCOPED_TRACE("tiktoken");
    // A tiktoken file of the 256 bytes (Llama 3's specials follow them): it cannot hold a new token.
    static const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string lines;
    for (int b = 0; b < 256; ++b) {
      lines += std::string{kB64[b >> 2], kB64[(b & 3) << 4], '=', '='} + " " + std::to_string(b) + "\n";
    }
    write_file(d / "tiktoken" / "tokenizer.model", lines);
    const auto tok = tok::Tokenizer::load(d / "tiktoken" / "tokenizer.model");
    EXPECT_FALSE(tok->add_tokens({"<|eot_id|>"})[0].created);  // one of its specials
    try {
      tok->add_tokens({"<|im_start|>"});
      ADD_FAILURE() << "expected a ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("cannot hold new tokens"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ft::test
