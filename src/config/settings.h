// Closed-set settings as enums, each named by one table: the loader parses and validates through it, the YAML
// printer and every message name values from it, and docs/configuration.md is checked against it
// (tests/config/docs_test.cpp). A new value is one table row.
#pragma once

#include <array>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "config/open_settings.h"

namespace ft {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// Specialised for every setting enum below with `static constexpr std::array<EnumName<E>, N> entries`.
template <class E>
struct EnumTable;

enum class ModelDType { kFp32, kBf16 };
template <>
struct EnumTable<ModelDType> {
  static constexpr std::array<EnumName<ModelDType>, 2> entries{
      {{ModelDType::kFp32, "fp32"}, {ModelDType::kBf16, "bf16"}}};
};

// How the frozen base of a LoRA run stores the decoder layers' projections.
enum class BaseQuantization { kNone, kNf4, kFp8 };
template <>
struct EnumTable<BaseQuantization> {
  static constexpr std::array<EnumName<BaseQuantization>, 3> entries{
      {{BaseQuantization::kNone, "none"}, {BaseQuantization::kNf4, "nf4"}, {BaseQuantization::kFp8, "fp8"}}};
};

// The GEMMs over an NF4 base's codes: dequantized to the compute dtype (as bitsandbytes), or to e4m3 with row
// scales and run as FP8 GEMMs.
enum class Nf4Compute { kDtype, kFp8 };
template <>
struct EnumTable<Nf4Compute> {
  static constexpr std::array<EnumName<Nf4Compute>, 2> entries{
      {{Nf4Compute::kDtype, "dtype"}, {Nf4Compute::kFp8, "fp8"}}};
};

// A model family, named by config.json's model_type (model/args.h holds each one's transformers class).
enum class ModelFamily { kLlama, kMistral, kQwen2, kQwen3, kPhi3, kGemma2, kGemma3Text, kQwen3Moe, kMixtral };
template <>
struct EnumTable<ModelFamily> {
  static constexpr std::array<EnumName<ModelFamily>, 9> entries{{{ModelFamily::kLlama, "llama"},
                                                                 {ModelFamily::kMistral, "mistral"},
                                                                 {ModelFamily::kQwen2, "qwen2"},
                                                                 {ModelFamily::kQwen3, "qwen3"},
                                                                 {ModelFamily::kPhi3, "phi3"},
                                                                 {ModelFamily::kGemma2, "gemma2"},
                                                                 {ModelFamily::kGemma3Text, "gemma3_text"},
                                                                 {ModelFamily::kQwen3Moe, "qwen3_moe"},
                                                                 {ModelFamily::kMixtral, "mixtral"}}};
};

// model.router_aux_loss: whether a mixture-of-experts model adds the router's load-balancing loss to the training
// loss. auto: as config.json's output_router_logits says (transformers' switch; false in the Qwen3-MoE and Mixtral
// releases), on / off: regardless of it.
enum class RouterAuxLoss { kAuto, kOn, kOff };
template <>
struct EnumTable<RouterAuxLoss> {
  static constexpr std::array<EnumName<RouterAuxLoss>, 3> entries{
      {{RouterAuxLoss::kAuto, "auto"}, {RouterAuxLoss::kOn, "on"}, {RouterAuxLoss::kOff, "off"}}};
};

enum class TokenizerModel { kBpe, kUnigram };
template <>
struct EnumTable<TokenizerModel> {
  static constexpr std::array<EnumName<TokenizerModel>, 2> entries{
      {{TokenizerModel::kBpe, "bpe"}, {TokenizerModel::kUnigram, "unigram"}}};
};

// kPreference: prompt/chosen/rejected pairs (data/preference.h), the data of the preference objectives.
enum class SourceFormat { kText, kPromptCompletion, kAlpaca, kChat, kPretokenized, kPreference };
template <>
struct EnumTable<SourceFormat> {
  static constexpr std::array<EnumName<SourceFormat>, 6> entries{
      {{SourceFormat::kText, "text"},
       {SourceFormat::kPromptCompletion, "prompt_completion"},
       {SourceFormat::kAlpaca, "alpaca"},
       {SourceFormat::kChat, "chat"},
       {SourceFormat::kPretokenized, "pretokenized"},
       {SourceFormat::kPreference, "preference"}}};
};

// data.template: auto (the model's own) or a built-in; mistral names the family, resolved by the tokenizer.
enum class ChatTemplateName {
  kAuto,
  kLlama2,
  kLlama3,
  kChatml,
  kPlain,
  kGemma,
  kMistral,
  kMistralV1,
  kMistralV3,
  kMistralTekken
};
template <>
struct EnumTable<ChatTemplateName> {
  static constexpr std::array<EnumName<ChatTemplateName>, 10> entries{
      {{ChatTemplateName::kAuto, "auto"},
       {ChatTemplateName::kLlama2, "llama2"},
       {ChatTemplateName::kLlama3, "llama3"},
       {ChatTemplateName::kChatml, "chatml"},
       {ChatTemplateName::kPlain, "plain"},
       {ChatTemplateName::kGemma, "gemma"},
       {ChatTemplateName::kMistral, "mistral"},
       {ChatTemplateName::kMistralV1, "mistral-v1"},
       {ChatTemplateName::kMistralV3, "mistral-v3"},
       {ChatTemplateName::kMistralTekken, "mistral-tekken"}}};
};

enum class TrainOn { kAll, kLast };
template <>
struct EnumTable<TrainOn> {
  static constexpr std::array<EnumName<TrainOn>, 2> entries{{{TrainOn::kAll, "all"}, {TrainOn::kLast, "last"}}};
};

enum class Overlong { kTruncate, kDrop };
template <>
struct EnumTable<Overlong> {
  static constexpr std::array<EnumName<Overlong>, 2> entries{
      {{Overlong::kTruncate, "truncate"}, {Overlong::kDrop, "drop"}}};
};

enum class OnError { kFail, kSkip };
template <>
struct EnumTable<OnError> {
  static constexpr std::array<EnumName<OnError>, 2> entries{{{OnError::kFail, "fail"}, {OnError::kSkip, "skip"}}};
};

enum class TokenDType { kUint16, kUint32 };
template <>
struct EnumTable<TokenDType> {
  static constexpr std::array<EnumName<TokenDType>, 2> entries{
      {{TokenDType::kUint16, "uint16"}, {TokenDType::kUint32, "uint32"}}};
};

// train.objective: next-token SFT, or a preference objective of the DPO family (train/preference_objective.h).
enum class TrainObjective { kSft, kDpo, kIpo, kSimpo, kOrpo };
template <>
struct EnumTable<TrainObjective> {
  static constexpr std::array<EnumName<TrainObjective>, 5> entries{{{TrainObjective::kSft, "sft"},
                                                                    {TrainObjective::kDpo, "dpo"},
                                                                    {TrainObjective::kIpo, "ipo"},
                                                                    {TrainObjective::kSimpo, "simpo"},
                                                                    {TrainObjective::kOrpo, "orpo"}}};
};

// preference.truncation: which end of prompt + completion a pair keeps past data.seq_len (TRL's truncation_mode).
enum class PairTruncation { kKeepStart, kKeepEnd };
template <>
struct EnumTable<PairTruncation> {
  static constexpr std::array<EnumName<PairTruncation>, 2> entries{
      {{PairTruncation::kKeepStart, "keep_start"}, {PairTruncation::kKeepEnd, "keep_end"}}};
};

// train.fp8: the GEMMs of trainable projections in FP8 with dynamic scales, as torchao's float8 training recipes
// (model/fp8_training.h): off | tensorwise (one scale per tensor; e5m2 gradients) | rowwise (one power-of-two scale
// per row; e4m3 throughout).
enum class Fp8Training { kOff, kTensorwise, kRowwise };
template <>
struct EnumTable<Fp8Training> {
  static constexpr std::array<EnumName<Fp8Training>, 3> entries{
      {{Fp8Training::kOff, "off"}, {Fp8Training::kTensorwise, "tensorwise"}, {Fp8Training::kRowwise, "rowwise"}}};
};

enum class Precision { kFp32, kBf16, kFp16, kBf16Pure };
template <>
struct EnumTable<Precision> {
  static constexpr std::array<EnumName<Precision>, 4> entries{{{Precision::kFp32, "fp32"},
                                                               {Precision::kBf16, "bf16"},
                                                               {Precision::kFp16, "fp16"},
                                                               {Precision::kBf16Pure, "bf16-pure"}}};
};

enum class OptimizerName { kAdamW, kAdamW8bit };
template <>
struct EnumTable<OptimizerName> {
  static constexpr std::array<EnumName<OptimizerName>, 2> entries{
      {{OptimizerName::kAdamW, "adamw"}, {OptimizerName::kAdamW8bit, "adamw_8bit"}}};
};

enum class Schedule { kConstant, kLinear, kCosine, kWsd };
template <>
struct EnumTable<Schedule> {
  static constexpr std::array<EnumName<Schedule>, 4> entries{{{Schedule::kConstant, "constant"},
                                                              {Schedule::kLinear, "linear"},
                                                              {Schedule::kCosine, "cosine"},
                                                              {Schedule::kWsd, "wsd"}}};
};

enum class PromptFormat { kAuto, kText, kChat };
template <>
struct EnumTable<PromptFormat> {
  static constexpr std::array<EnumName<PromptFormat>, 3> entries{
      {{PromptFormat::kAuto, "auto"}, {PromptFormat::kText, "text"}, {PromptFormat::kChat, "chat"}}};
};

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError };
template <>
struct EnumTable<LogLevel> {
  static constexpr std::array<EnumName<LogLevel>, 5> entries{{{LogLevel::kTrace, "trace"},
                                                              {LogLevel::kDebug, "debug"},
                                                              {LogLevel::kInfo, "info"},
                                                              {LogLevel::kWarn, "warn"},
                                                              {LogLevel::kError, "error"}}};
};

enum class Progress { kAuto, kOn, kOff };
template <>
struct EnumTable<Progress> {
  static constexpr std::array<EnumName<Progress>, 3> entries{
      {{Progress::kAuto, "auto"}, {Progress::kOn, "on"}, {Progress::kOff, "off"}}};
};

// checkpoint.async: auto writes checkpoints in the background when training on a GPU.
enum class AsyncSave { kAuto, kOn, kOff };
template <>
struct EnumTable<AsyncSave> {
  static constexpr std::array<EnumName<AsyncSave>, 3> entries{
      {{AsyncSave::kAuto, "auto"}, {AsyncSave::kOn, "on"}, {AsyncSave::kOff, "off"}}};
};

enum class Backend { kAuto, kNccl, kGloo };
template <>
struct EnumTable<Backend> {
  static constexpr std::array<EnumName<Backend>, 3> entries{
      {{Backend::kAuto, "auto"}, {Backend::kNccl, "nccl"}, {Backend::kGloo, "gloo"}}};
};

enum class ReduceDType { kFp32, kBf16 };
template <>
struct EnumTable<ReduceDType> {
  static constexpr std::array<EnumName<ReduceDType>, 2> entries{
      {{ReduceDType::kFp32, "fp32"}, {ReduceDType::kBf16, "bf16"}}};
};

// True for the enums above (the loader binds them as names).
template <class E, class = void>
struct is_setting : std::false_type {};
template <class E>
struct is_setting<E, std::void_t<decltype(EnumTable<E>::entries)>> : std::true_type {};
template <class E>
inline constexpr bool is_setting_v = is_setting<E>::value;

// The name of `value` in its table.
template <class E>
const char* name_of(E value) {
  for (const auto& e : EnumTable<E>::entries) {
    if (e.value == value) return e.name;
  }
  return "?";
}

// The value named `name`, or nothing.
template <class E>
std::optional<E> parse_setting(std::string_view name) {
  for (const auto& e : EnumTable<E>::entries) {
    if (name == e.name) return e.value;
  }
  return std::nullopt;
}

// "a, b or c": the allowed names, for messages and hints.
template <class E>
std::string setting_names(const char* last_sep = " or ") {
  std::string out;
  const auto& entries = EnumTable<E>::entries;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += i + 1 == entries.size() ? last_sep : ", ";
    out += entries[i].name;
  }
  return out;
}

// A setting of either kind as the text a config file gives it.
template <class T>
std::string setting_text(const T& value) {
  if constexpr (is_open_setting_v<T>) {
    return value.str();
  } else {
    return name_of(value);
  }
}

// JSON as the name (nlohmann would write the integer otherwise), so files stay readable and stable; reading an
// unknown name throws std::runtime_error listing the allowed ones. Defined in settings.cpp for every enum above.
template <class E, std::enable_if_t<is_setting_v<E>, int> = 0>
void to_json(nlohmann::json& j, E value);
template <class E, std::enable_if_t<is_setting_v<E>, int> = 0>
void from_json(const nlohmann::json& j, E& value);

}  // namespace ft
