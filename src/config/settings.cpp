#include "config/settings.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace ft {

template <class E, std::enable_if_t<is_setting_v<E>, int>>
void to_json(nlohmann::json& j, E value) {
  j = name_of(value);
}

template <class E, std::enable_if_t<is_setting_v<E>, int>>
void from_json(const nlohmann::json& j, E& value) {
  const std::optional<E> parsed = j.is_string() ? parse_setting<E>(j.get_ref<const std::string&>()) : std::nullopt;
  if (!parsed) {
    throw std::runtime_error("unknown value " + j.dump() + " (expected one of: " + setting_names<E>(", ") + ")");
  }
  value = *parsed;
}

#define FT_SETTING_JSON(E)                                  \
  template void to_json<E, 0>(nlohmann::json&, E);          \
  template void from_json<E, 0>(const nlohmann::json&, E&);

FT_SETTING_JSON(ModelDType)
FT_SETTING_JSON(BaseQuantization)
FT_SETTING_JSON(ModelFamily)
FT_SETTING_JSON(RouterAuxLoss)
FT_SETTING_JSON(TokenizerModel)
FT_SETTING_JSON(SourceFormat)
FT_SETTING_JSON(ChatTemplateName)
FT_SETTING_JSON(TrainOn)
FT_SETTING_JSON(Overlong)
FT_SETTING_JSON(OnError)
FT_SETTING_JSON(TokenDType)
FT_SETTING_JSON(TrainObjective)
FT_SETTING_JSON(PairTruncation)
FT_SETTING_JSON(Fp8Training)
FT_SETTING_JSON(Precision)
FT_SETTING_JSON(OptimizerName)
FT_SETTING_JSON(Schedule)
FT_SETTING_JSON(PromptFormat)
FT_SETTING_JSON(LogLevel)
FT_SETTING_JSON(Progress)
FT_SETTING_JSON(AsyncSave)
FT_SETTING_JSON(Backend)
FT_SETTING_JSON(ReduceDType)

#undef FT_SETTING_JSON

}  // namespace ft
