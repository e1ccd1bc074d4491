// The closed-set settings (config/settings.h): every table's names parse back to their values, JSON carries names
// (not integers) both ways, and the loader takes, prints and refuses them through the same table.
#include <nlohmann/json.hpp>

#include "config_test_util.h"
#include "config/settings.h"

namespace ft::test {
namespace {

template <class E>
void expect_round_trips() {
  for (const auto& e : EnumTable<E>::entries) {
    EXPECT_EQ(parse_setting<E>(e.name), e.value) << e.name;
    EXPECT_STREQ(name_of(e.value), e.name);
    const nlohmann::json j = e.value;
    EXPECT_EQ(j, e.name);
    EXPECT_EQ(j.get<E>(), e.value) << e.name;
  }
  EXPECT_FALSE(parse_setting<E>("no-such-value").has_value());
  EXPECT_THROW(nlohmann::json("no-such-value").get<E>(), std::runtime_error);
  EXPECT_THROW(nlohmann::json(1).get<E>(), std::runtime_error);  // an integer is not a name
}

TEST(Settings, EveryNameParsesBackAndTravelsAsJsonText) {
  expect_round_trips<ModelDType>();
  expect_round_trips<ModelFamily>();
  expect_round_trips<TokenizerModel>();
  expect_round_trips<SourceFormat>();
  expect_round_trips<ChatTemplateName>();
  expect_round_trips<TrainOn>();
  expect_round_trips<Overlong>();
  expect_round_trips<OnError>();
  expect_round_trips<TokenDType>();
  expect_round_trips<Precision>();
  expect_round_trips<OptimizerName>();
  expect_round_trips<Schedule>();
  expect_round_trips<PromptFormat>();
  expect_round_trips<LogLevel>();
  expect_round_trips<Progress>();
  expect_round_trips<Backend>();
  expect_round_trips<ReduceDType>();
}

TEST(Settings, NamesListForMessages) {
  EXPECT_EQ(setting_names<Progress>(), "auto, on or off");
  EXPECT_EQ(setting_names<Precision>(", "), "fp32, bf16, fp16, bf16-pure");
}

class SettingsLoad : public ConfigDir {};

TEST_F(SettingsLoad, EnumSettingsBindFromNamesAndPrintAsNames) {
  const auto loaded = load(kMinimalConfig, {"train.precision=bf16-pure", "data.template=mistral-tekken",
                                            "logging.progress=off", "scheduler.type=wsd"});
  EXPECT_EQ(loaded.config.train.precision, Precision::kBf16Pure);
  EXPECT_EQ(loaded.config.data.template_name, ChatTemplateName::kMistralTekken);
  EXPECT_EQ(loaded.config.logging.progress, Progress::kOff);
  EXPECT_EQ(loaded.config.scheduler.type, Schedule::kWsd);
  const std::string yaml = config::to_yaml(loaded.config);
  // "off" quoted: a YAML 1.1 reader (PyYAML) would read a bare off as false.
  for (const char* line : {"precision: bf16-pure", "template: mistral-tekken", "progress: \"off\"", "type: wsd"}) {
    EXPECT_NE(yaml.find(line), std::string::npos) << line << "\n" << yaml;
  }
}

TEST_F(SettingsLoad, EnumSettingGivenAMapIsAWrongTypeAndANearMissIsNamed) {
  EXPECT_THAT(error_of(std::string(kMinimalConfig) + "train:\n  precision: {a: 1}\n"),
              ::testing::HasSubstr("train.precision: wrong type (expected one of fp32, bf16, fp16 or bf16-pure"));
  EXPECT_THAT(error_of(kMinimalConfig, {"data.template=chatlm"}),
              ::testing::HasSubstr("data.template: invalid value 'chatlm' (expected one of: auto, llama2, llama3, "
                                   "chatml, plain, gemma, mistral, mistral-v1, mistral-v3, mistral-tekken); did "
                                   "you mean 'chatml'?"));
}

}  // namespace
}  // namespace ft::test
