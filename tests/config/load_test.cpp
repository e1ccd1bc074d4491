// Loading: defaults, unknown keys, types, overrides, interpolation, the YAML round trip, all errors at once.
#include <chrono>
#include <cstdlib>

#include "config_test_util.h"

namespace ft::test {
namespace {

using config::load_config;
using ::testing::HasSubstr;

class ConfigLoad : public ConfigDir {
 protected:
  std::string at(int line, int col) const {
    return (dir_ / "config.yaml").string() + ":" + std::to_string(line) + ":" + std::to_string(col) + ": ";
  }
};

TEST_F(ConfigLoad, MinimalConfigKeepsEveryOtherDefault) {
  const auto loaded = load(kMinimalConfig);
  Config expected;
  expected.tokenizer.train_vocab_size = 64;
  expected.data.train = {DataSource{(dir_ / "train.jsonl").string(), SourceFormat::kText, 1.0}};
  expected.run.output_dir = "runs/run";  // the default "runs/${run.name}", interpolated
  EXPECT_TRUE(config::equal(loaded.config, expected)) << config::to_yaml(loaded.config);
  EXPECT_EQ(loaded.file, dir_ / "config.yaml");
  ASSERT_EQ(loaded.sources.size(), 1u);
  EXPECT_EQ(loaded.where("data.train[0].format"), (dir_ / "config.yaml").string() + ":6:15");
  EXPECT_EQ(loaded.where("optimizer.lr"), (dir_ / "config.yaml").string());  // default: the file itself
}

TEST_F(ConfigLoad, UnknownKeyInRightSectionSuggestsNearestLeaf) {
  const auto msg = error_of(std::string(kMinimalConfig) + "optimizer:\n  wieght_decay: 0.1\n");
  EXPECT_THAT(msg, HasSubstr(at(8, 3) + "optimizer.wieght_decay: unknown key; did you mean optimizer.weight_decay?"));
}

TEST_F(ConfigLoad, UnknownKeySuggestsSameLeafInAnotherSection) {
  const auto msg = error_of(std::string(kMinimalConfig) + "train:\n  weight_decay: 0.1\n");
  EXPECT_THAT(msg, HasSubstr(at(8, 3) + "train.weight_decay: unknown key; did you mean optimizer.weight_decay?"));
}

TEST_F(ConfigLoad, UnknownSectionSuggestsNearestSection) {
  const auto msg = error_of(std::string(kMinimalConfig) + "optimzer:\n  lr: 0.1\n");
  EXPECT_THAT(msg, HasSubstr(at(7, 1) + "optimzer: unknown key; did you mean optimizer?"));
}

TEST_F(ConfigLoad, UnknownKeyInListElementSuggestsWithItsIndex) {
  const auto msg = error_of(std::string(kMinimalConfig) + "    - path: train.jsonl\n      fromat: text\n");
  EXPECT_THAT(msg, HasSubstr(at(8, 7) + "data.train[1].fromat: unknown key; did you mean data.train[1].format?"));
}

TEST_F(ConfigLoad, UnknownKeyFarFromEverythingHasNoSuggestion) {
  const auto msg = error_of(std::string(kMinimalConfig) + "zzzzzzzzzz: 1\n");
  EXPECT_THAT(msg, HasSubstr(at(7, 1) + "zzzzzzzzzz: unknown key"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("did you mean")));
}

TEST_F(ConfigLoad, WrongTypesSayWhatWasExpectedAndWhatWasGiven) {
  const auto msg = error_of(std::string(kMinimalConfig) +
                            "train:\n"
                            "  micro_batch_size: abc\n"
                            "  grad_clip: [1]\n"
                            "  epochs: \"3\"\n"
                            "run:\n"
                            "  deterministic: 1\n"
                            "  name: {a: 1}\n"
                            "lora:\n"
                            "  targets: q_proj\n");
  EXPECT_THAT(msg, HasSubstr(at(8, 21) + "train.micro_batch_size: wrong type (expected an integer, got 'abc')"));
  EXPECT_THAT(msg, HasSubstr(at(9, 14) + "train.grad_clip: wrong type (expected a number, got a list)"));
  EXPECT_THAT(msg, HasSubstr(at(10, 11) + "train.epochs: wrong type (expected an integer, got '3')"));
  EXPECT_THAT(msg, HasSubstr(at(12, 18) + "run.deterministic: wrong type (expected true or false, got '1')"));
  EXPECT_THAT(msg, HasSubstr(at(13, 9) + "run.name: wrong type (expected a string, got a map)"));
  EXPECT_THAT(msg, HasSubstr(at(15, 12) + "lora.targets: wrong type (expected a list of strings, got 'q_proj')"));
}

TEST_F(ConfigLoad, SectionThatIsNotAMapIsWrongType) {
  const auto msg = error_of(std::string(kMinimalConfig) + "optimizer: 3\n");
  EXPECT_THAT(msg, HasSubstr(at(7, 12) + "optimizer: wrong type (expected a map of keys, got '3')"));
}

// Found by tests/fuzz/fuzz_config: a value with a byte that is not UTF-8 loaded, but printed (to_yaml) as another
// value, so a run directory's config.yaml would not repeat the run.
TEST_F(ConfigLoad, ValuesThatAreNotUtf8AreRefusedWithTheirPosition) {
  const auto msg = error_of(std::string(kMinimalConfig) + "run:\n  name: \"caf\xe9\"\n");
  EXPECT_THAT(msg, HasSubstr(at(8, 9) + "not valid UTF-8 (byte 3 of the value)"));
  EXPECT_EQ(load(std::string(kMinimalConfig) + "run:\n  name: \"caf\xc3\xa9\"\n").config.run.name, "caf\xc3\xa9");
}

TEST_F(ConfigLoad, YamlSyntaxErrorPointsAtTheLine) {
  const auto msg = error_of("run:\n  name: [unclosed\n");
  EXPECT_THAT(msg, HasSubstr((dir_ / "config.yaml").string() + ":"));
  EXPECT_THAT(msg, HasSubstr("YAML syntax error"));
}

// Two YAML habits that yaml-cpp words obscurely: a tab in the indentation ("illegal map value"), and a merge key,
// which it reads as a key named "<<".
TEST_F(ConfigLoad, TabIndentationAndMergeKeysAreNamed) {
  EXPECT_THAT(error_of("run:\n\tname: x\n"), HasSubstr("line 2 indents with a tab: YAML indents with spaces only"));
  EXPECT_THAT(error_of(std::string(kMinimalConfig) + "run:\n  name: x\n  <<: {seed: 1}\n"),
              HasSubstr("run.<<: YAML merge keys (<<: *anchor) are not supported; write the keys out"));
}

// Most YAML readers keep the later of two equal keys, or the first of several documents, without a word; a config
// that says a setting twice (a pasted section) or holds a second document is refused where it happens.
TEST_F(ConfigLoad, DuplicateKeysAndSecondDocumentsAreRefusedWithTheirLine) {
  EXPECT_THAT(error_of(std::string(kMinimalConfig) + "run:\n  name: a\n  name: b\n"),
              HasSubstr(at(9, 3) + "duplicate key 'name' (first at line 8)"));
  EXPECT_THAT(error_of(std::string(kMinimalConfig) + "run:\n  name: a\nrun:\n  name: b\n"),
              HasSubstr(at(9, 1) + "duplicate key 'run' (first at line 7)"));
  EXPECT_THAT(error_of(std::string(kMinimalConfig) + "---\nrun:\n  name: b\n"),
              HasSubstr("the file holds 2 YAML documents (separated by ---); it must be one"));
}

TEST_F(ConfigLoad, MissingConfigFileIsConfigError) {
  EXPECT_THROW(load_config(dir_ / "nope.yaml", {}), ConfigError);
}

TEST_F(ConfigLoad, OverridesSetScalarsListsAndListsOfMaps) {
  put("other.jsonl", "{}\n");
  const auto loaded = load(kMinimalConfig, {"train.max_steps=10", "optimizer.betas=[0.9,0.95]", "run.name=abc",
                                            "data.train=[{path: " + (dir_ / "other.jsonl").string() +
                                                ", format: prompt_completion, weight: 2}]"});
  const Config& c = loaded.config;
  EXPECT_EQ(c.train.max_steps, 10);
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(c.run.output_dir, "runs/abc");
  ASSERT_EQ(c.data.train.size(), 1u);
  EXPECT_EQ(c.data.train[0].path, (dir_ / "other.jsonl").string());
  EXPECT_EQ(c.data.train[0].format, SourceFormat::kPromptCompletion);
  EXPECT_EQ(c.data.train[0].weight, 2.0);
  EXPECT_EQ(loaded.where("train.max_steps"), "<override 'train.max_steps=10'>");
}

TEST_F(ConfigLoad, LaterOverrideWinsAndMapOverrideMerges) {
  const auto loaded = load(kMinimalConfig, {"optimizer.lr=0.1", "optimizer.lr=0.2", "optimizer={eps: 1e-6}"});
  EXPECT_EQ(loaded.config.optimizer.lr, 0.2);
  EXPECT_EQ(loaded.config.optimizer.eps, 1e-6);
}

TEST_F(ConfigLoad, OverrideWithoutEqualsIsError) {
  const auto msg = error_of(kMinimalConfig, {"train.max_steps"});
  EXPECT_THAT(msg, HasSubstr("<override 'train.max_steps'>: train.max_steps: not of the form key=value"));
}

TEST_F(ConfigLoad, OverrideOfUnknownKeySuggests) {
  const auto msg = error_of(kMinimalConfig, {"optimizer.learning_rat=1"});
  EXPECT_THAT(msg, HasSubstr("<override 'optimizer.learning_rat=1'>: optimizer.learning_rat: unknown key"));
  const auto msg2 = error_of(kMinimalConfig, {"train.max_step=1"});
  EXPECT_THAT(msg2, HasSubstr("<override 'train.max_step=1'>: train.max_step: unknown key; did you mean "
                              "train.max_steps?"));
}

TEST_F(ConfigLoad, OverrideWithUnparsableValueIsError) {
  const auto msg = error_of(kMinimalConfig, {"optimizer.betas=[0.9,"});
  EXPECT_THAT(msg, HasSubstr("<override 'optimizer.betas=[0.9,'>: optimizer.betas: cannot parse the value as YAML"));
}

TEST_F(ConfigLoad, OverrideWithBadKeyOrWrongTypeIsError) {
  EXPECT_THAT(error_of(kMinimalConfig, {"train..max_steps=1"}),
              HasSubstr("<override 'train..max_steps=1'>: train..max_steps: not a valid key path"));
  EXPECT_THAT(error_of(kMinimalConfig, {"train.max_steps=ten"}),
              HasSubstr("<override 'train.max_steps=ten'>: train.max_steps: wrong type (expected an integer, got "
                        "'ten')"));
}

TEST_F(ConfigLoad, InterpolatesSectionKeysRecursively) {
  const auto loaded = load(std::string(kMinimalConfig) +
                           "run:\n"
                           "  name: exp-${model.architecture}-${train.grad_accum_steps}\n"
                           "  output_dir: out/${run.name}\n"
                           "eval:\n"
                           "  prompts: [\"${run.name} says\", \"${data.train[0].format}\"]\n"
                           "train:\n"
                           "  grad_accum_steps: ${train.micro_batch_size}\n");
  EXPECT_EQ(loaded.config.train.grad_accum_steps, 8);  // a whole-value reference keeps its type
  EXPECT_EQ(loaded.config.run.name, "exp-llama-8");
  EXPECT_EQ(loaded.config.run.output_dir, "out/exp-llama-8");
  ASSERT_EQ(loaded.config.eval.prompts.size(), 2u);
  EXPECT_EQ(loaded.config.eval.prompts[0].text, "exp-llama-8 says");
  EXPECT_EQ(loaded.config.eval.prompts[1].text, "text");
}

TEST_F(ConfigLoad, EvalPromptsAreStringsOrListsOfTurns) {
  const auto loaded = load(std::string(kMinimalConfig) +
                           "eval:\n"
                           "  prompts:\n"
                           "    - Hello\n"
                           "    - [{role: system, content: Be brief.}, {role: user, content: 'Hi, ${run.name}'}]\n");
  ASSERT_EQ(loaded.config.eval.prompts.size(), 2u);
  EXPECT_EQ(loaded.config.eval.prompts[0].text, "Hello");
  EXPECT_TRUE(loaded.config.eval.prompts[0].messages.empty());
  EXPECT_EQ(loaded.config.eval.prompts[1].messages,
            (std::vector<PromptTurn>{{"system", "Be brief."}, {"user", "Hi, run"}}));
  EXPECT_THAT(error_of(kMinimalConfig, {"eval.prompts=[{role: user}]"}),
              HasSubstr("eval.prompts[0]: wrong type (expected a string or a list of {role, content} turns, got a map)"));
  EXPECT_THAT(error_of(kMinimalConfig, {"eval.prompts=[[{role: user, text: hi}]]"}),
              HasSubstr("eval.prompts[0][0].text: unknown key"));
  EXPECT_THAT(error_of(kMinimalConfig, {"eval.prompts=[[{role: bot, content: hi}]]"}),
              HasSubstr("eval.prompts[0][0].role: invalid value 'bot' (expected one of: system, user, assistant)"));
  EXPECT_THAT(error_of(kMinimalConfig, {"eval.prompts=[[{role: user, content: hi}, {role: assistant, content: yo}]]"}),
              HasSubstr("eval.prompts[0]: a prompt given as turns must end with a user turn"));
}

TEST_F(ConfigLoad, InterpolationSeesOverrides) {
  const auto loaded =
      load(std::string(kMinimalConfig) + "run:\n  output_dir: runs/${run.name}/x\n", {"run.name=from-cli"});
  EXPECT_EQ(loaded.config.run.output_dir, "runs/from-cli/x");
}

TEST_F(ConfigLoad, InterpolatesEnvironmentVariables) {
  ::setenv("FT_CONFIG_TEST_VAR", "envvalue", 1);
  const auto loaded = load(std::string(kMinimalConfig) + "run:\n  name: ${env:FT_CONFIG_TEST_VAR}-1\n");
  EXPECT_EQ(loaded.config.run.name, "envvalue-1");
  EXPECT_EQ(loaded.config.run.output_dir, "runs/envvalue-1");
}

TEST_F(ConfigLoad, MissingEnvironmentVariableIsError) {
  ::unsetenv("FT_CONFIG_TEST_UNSET");
  const auto msg = error_of(std::string(kMinimalConfig) + "run:\n  name: ${env:FT_CONFIG_TEST_UNSET}\n");
  EXPECT_THAT(msg, HasSubstr(at(8, 9) + "run.name: environment variable FT_CONFIG_TEST_UNSET is not set"));
}

TEST_F(ConfigLoad, MissingReferenceIsErrorWithSuggestion) {
  const auto msg = error_of(std::string(kMinimalConfig) + "run:\n  output_dir: runs/${run.nme}\n");
  EXPECT_THAT(msg, HasSubstr(at(8, 15) + "run.output_dir: unknown reference ${run.nme} (did you mean ${run.name}?)"));
}

TEST_F(ConfigLoad, MissingReferenceIntoAListKeepsTheIndexInTheSuggestion) {
  const auto msg = error_of(std::string(kMinimalConfig) + "run:\n  name: ${data.train[0].fromat}\n");
  EXPECT_THAT(msg, HasSubstr(at(8, 9) + "run.name: unknown reference ${data.train[0].fromat} (did you mean "
                                        "${data.train[0].format}?)"));
  // A right key at an index past the list's end: its length, not the same text as a suggestion.
  EXPECT_THAT(error_of(std::string(kMinimalConfig) + "run:\n  name: ${data.train[5].path}\n"),
              HasSubstr("unknown reference ${data.train[5].path} (the list has 1 entry)"));
}

TEST_F(ConfigLoad, ReferenceCycleIsError) {
  const auto msg =
      error_of(std::string(kMinimalConfig) + "run:\n  name: a${run.output_dir}\n  output_dir: ${run.name}\n");
  EXPECT_THAT(msg, HasSubstr("reference cycle: run.name -> run.output_dir -> run.name"));
  EXPECT_THAT(msg, HasSubstr("(1 error)"));  // the cycle is reported once, not echoed by later checks
}

// Found when writing tests/fuzz/fuzz_config: a list index too large for an integer escaped as std::out_of_range, and values
// that repeat each other doubled without bound (2^k bytes after k steps).
TEST_F(ConfigLoad, HugeListIndexInAReferenceIsAnUnknownReference) {
  const auto msg = error_of(std::string(kMinimalConfig) + "run:\n  name: ${data.train[99999999999999999999].path}\n");
  EXPECT_THAT(msg, HasSubstr("unknown reference ${data.train[99999999999999999999].path}"));
}

TEST_F(ConfigLoad, InterpolationThatKeepsDoublingIsRefused) {
  std::string prompts = "eval:\n  prompts:\n    - xxxxxxxx\n";
  for (int i = 1; i <= 24; ++i) {
    prompts += "    - ${eval.prompts[" + std::to_string(i - 1) + "]}${eval.prompts[" + std::to_string(i - 1) + "]}\n";
  }
  const auto msg = error_of(std::string(kMinimalConfig) + prompts);
  EXPECT_THAT(msg, HasSubstr("interpolation makes a value longer than 1048576 bytes"));
}

TEST_F(ConfigLoad, YamlDifferencesRefuseDamagedYamlAndAliasBombs) {
  EXPECT_THROW(config::yaml_differences("run: [", "run: {name: x}"), ConfigError);
  std::string bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
  for (char c = 'b'; c <= 'g'; ++c) {
    const char prev = static_cast<char>(c - 1);
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) bomb += std::string(i ? ", " : "") + "*" + prev;
    bomb += "]\n";
  }
  try {
    config::yaml_differences(bomb, "a: 1");
    ADD_FAILURE() << "an alias bomb was expanded";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the earlier config: too many values"));
  }
  EXPECT_EQ(config::yaml_differences("run: {name: a}\n", "run: {name: b}\n"),
            std::vector<std::string>{"run.name: a -> b"});
}

TEST_F(ConfigLoad, ReferenceToASectionIsError) {
  const auto msg = error_of(std::string(kMinimalConfig) + "run:\n  name: ${optimizer}\n");
  EXPECT_THAT(msg, HasSubstr(at(8, 9) + "run.name: ${optimizer} is a map; only single values can be interpolated"));
}

TEST_F(ConfigLoad, DoubleDollarEscapesInterpolation) {
  const auto loaded = load(std::string(kMinimalConfig) + "run:\n  name: cost$${x}\n");
  EXPECT_EQ(loaded.config.run.name, "cost${x}");
  // The printed config escapes it again, so it loads back unchanged.
  EXPECT_THAT(config::to_yaml(loaded.config), HasSubstr("name: cost$${x}"));
}

TEST_F(ConfigLoad, AllErrorsAreReportedAtOnceInLineOrder) {
  const auto msg = error_of(std::string(kMinimalConfig) +  // lines 1-6
                            "optimizer:\n"                 // 7
                            "  lr: 0\n"                    // 8
                            "  wieght_decay: 0.1\n"        // 9
                            "train:\n"                     // 10
                            "  micro_batch_size: x\n"      // 11
                            "  precision: fp8\n");         // 12
  EXPECT_THAT(msg, HasSubstr("invalid configuration (4 errors):\n"
                             "  " +
                             at(8, 7) +
                             "optimizer.lr: out of range (expected > 0, got 0)\n"
                             "  " +
                             at(9, 3) +
                             "optimizer.wieght_decay: unknown key; did you mean "
                             "optimizer.weight_decay?\n"
                             "  " +
                             at(11, 21) +
                             "train.micro_batch_size: wrong type (expected an integer, got 'x')\n"
                             "  " +
                             at(12, 14) +
                             "train.precision: invalid value 'fp8' (expected one of: fp32, bf16, "
                             "fp16, bf16-pure)"));
}

// Every field set away from its default, so a field the printer or the loader drops shows up.
Config all_changed(const std::filesystem::path& dir) {
  Config c;
  c.run = {"rt", "out/rt", 7, DeviceSetting{DeviceSetting::Kind::kCuda, 1}, true};
  c.model.path = (dir / "model").string();
  c.model.architecture = ModelFamily::kQwen2;
  c.model.vocab_size = 99;
  c.model.hidden_size = 64;
  c.model.intermediate_size = 100;
  c.model.num_layers = 3;
  c.model.num_heads = 8;
  c.model.num_kv_heads = 2;
  c.model.max_position_embeddings = 77;
  c.model.rope_theta = 500000.5;
  c.model.rms_norm_eps = 1.5e-6;
  c.model.tie_embeddings = true;
  c.model.init_std = 0.1 + 0.2;  // not exactly 0.3: the printer must keep every bit
  c.model.dtype = ModelDType::kBf16;
  c.model.activation_checkpointing = true;
  c.lora = {true, 4, 8.5, 0.05, {"k_proj", "down_proj"}};
  c.tokenizer = {(dir / "tok.model").string(), 0, TokenizerModel::kUnigram, false, false, {"<|im_start|>"}};
  c.data.train = {DataSource{(dir / "train.jsonl").string(), SourceFormat::kChat, 0.25},
                  DataSource{(dir / "train.jsonl").string(), SourceFormat::kAlpaca, 3}};
  c.data.eval = {DataSource{(dir / "train.jsonl").string(), SourceFormat::kText, 1}};
  c.data.fields = {"t", "p", "i", "c", "m", "r", "x", "y", "z"};
  c.data.template_name = ChatTemplateName::kChatml;
  c.data.roles = {"bot=assistant", "narrator=system"};
  c.data.system_prompt = "Be brief: yes.";
  c.data.seq_len = 33;
  c.data.packing = true;
  c.data.shuffle = false;
  c.data.overlong = Overlong::kDrop;
  c.data.on_error = OnError::kSkip;
  c.data.pretokenized_dtype = TokenDType::kUint32;
  c.data.cache_dir = (dir / "cache").string();
  c.data.prefetch = 0;
  c.data.pad_to_multiple_of = 8;
  c.data.synth = {"add", 5, 6, 7};
  c.train = {TrainObjective::kSft, 12, 2, 3, 4, Precision::kBf16Pure, 0.5, 2, 1024.0, 100, true, Fp8Training::kOff,
             {"down_proj"}};  // train.fp8 stays off: it needs a full fine-tune, and lora is on here
  c.preference = {0.3, 0.2, true, 1.5, 0.25, PairTruncation::kKeepEnd};
  c.optimizer = {OptimizerName::kAdamW, 1e-4, {0.8, 0.95}, 1e-6, 0.01, true};
  c.scheduler = {Schedule::kWsd, 2, 0.1, 0.05, 0.2};
  c.eval = {5, 6, 7, 8, {}, PromptFormat::kChat};
  for (const char* text : {"true", "", "null", "123", "a: b", "${not-a-ref}"}) c.eval.prompts.push_back({text, {}});
  c.eval.prompts.push_back({"", {{"system", "null"}, {"user", "a: ${b}"}}});
  c.checkpoint = {10, 0, true, ResumeSetting{ResumeSetting::Mode::kNever, ""}, 100};
  c.logging = {LogLevel::kDebug, 2, true, Progress::kOff, 989.5};
  c.distributed = {Backend::kGloo, 60, 12.5, ReduceDType::kBf16, 1};
  return c;
}

TEST_F(ConfigLoad, ToYamlRoundTripsEveryField) {
  write_file(dir_ / "model" / "config.json", "{}");
  write_file(dir_ / "tok.model", "x");
  const Config original = all_changed(dir_.path());
  ASSERT_FALSE(config::equal(original, Config{}));
  const auto yaml = config::to_yaml(original);
  const auto loaded = load_config(put("printed.yaml", yaml), {});
  EXPECT_TRUE(config::equal(loaded.config, original)) << yaml << "\n----\n" << config::to_yaml(loaded.config);
  EXPECT_EQ(config::to_yaml(loaded.config), yaml);
}

// train.objective is left at sft above (the other objectives read only preference sources): its own round trip.
TEST_F(ConfigLoad, ToYamlRoundTripsAPreferenceObjective) {
  write_file(dir_ / "model" / "config.json", "{}");
  write_file(dir_ / "tok.model", "x");
  Config original = all_changed(dir_.path());
  original.train.objective = TrainObjective::kOrpo;
  original.preference.label_smoothing = 0.0;
  original.preference.robust = false;
  original.data.train = {DataSource{(dir_ / "train.jsonl").string(), SourceFormat::kPreference, 2}};
  original.data.eval = {DataSource{(dir_ / "train.jsonl").string(), SourceFormat::kPreference, 1}};
  original.eval.exact_match_samples = 0;
  original.data.overlong = Overlong::kTruncate;
  original.data.synth = {};
  const auto yaml = config::to_yaml(original);
  const auto loaded = load_config(put("printed.yaml", yaml), {});
  EXPECT_TRUE(config::equal(loaded.config, original)) << yaml;
  EXPECT_EQ(loaded.config.train.objective, TrainObjective::kOrpo);
}

TEST_F(ConfigLoad, EqualNoticesEachChangedField) {
  Config a, b;
  b.data.fields.role = "speaker";
  EXPECT_FALSE(config::equal(a, b));
  b = a;
  b.data.train.push_back(DataSource{});
  EXPECT_FALSE(config::equal(a, b));
  b = a;
  EXPECT_TRUE(config::equal(a, b));
}

TEST_F(ConfigLoad, WriteResolvedConfigIsAtomicAndLoadsBack) {
  const auto loaded = load(kMinimalConfig, {"train.max_steps=3"});
  const auto run_dir = dir_ / "runs" / "r1";
  config::write_resolved_config(loaded, run_dir);
  ASSERT_TRUE(std::filesystem::exists(run_dir / "config.yaml"));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);  // no temporary left behind
  const auto again = load_config(run_dir / "config.yaml", {});
  EXPECT_TRUE(config::equal(again.config, loaded.config));
  EXPECT_EQ(again.config.train.max_steps, 3);
}

// Hostile configs cost bounded work: bases that list the next base twice at every level (2^20 files), and YAML
// anchors of anchors (9^9 values) fail fast with a clear error.
TEST_F(ConfigLoad, BasesListedManyTimesAtEveryLevelAreRefusedQuickly) {
  for (int i = 0; i < 20; ++i) {
    put("b" + std::to_string(i) + ".yaml", "defaults: [b" + std::to_string(i + 1) + ".yaml, b" +
                                               std::to_string(i + 1) + ".yaml]\n");
  }
  put("b20.yaml", "run: {seed: 1}\n");
  const auto start = std::chrono::steady_clock::now();
  const auto msg = error_of(std::string(kMinimalConfig) + "defaults: [b0.yaml]\n");
  EXPECT_THAT(msg, HasSubstr("defaults: more than 256 base files read for one config"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));

  for (int i = 0; i < 40; ++i) {
    put("c" + std::to_string(i) + ".yaml", "defaults: [c" + std::to_string(i + 1) + ".yaml]\n");
  }
  put("c40.yaml", "run: {seed: 1}\n");
  EXPECT_THAT(error_of(std::string(kMinimalConfig) + "defaults: [c0.yaml]\n"),
              HasSubstr("defaults: more than 32 levels of bases"));
}

TEST_F(ConfigLoad, YamlAnchorBombIsRefusedQuickly) {
  std::string text = std::string(kMinimalConfig) + "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i < 10; ++i) {
    const std::string prev = "*a" + std::to_string(i - 1);
    text += "x" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + prev;
    for (int j = 1; j < 9; ++j) text += ", " + prev;
    text += "]\n";
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(error_of(text), HasSubstr("the YAML expands to more than 1000000 values"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

}  // namespace
}  // namespace ft::test
