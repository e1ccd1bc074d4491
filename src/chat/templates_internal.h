// Internals shared by the built-in chat templates' translation units (templates.cpp, templates_mistral.cpp).
#pragma once

#include <string>
#include <vector>

#include "chat/templates.h"

namespace ft::chat::detail {

// mistral-common's encodings: v1, v2/v3 (sentencepiece) and v3 tekken.
enum class MistralVariant { kV1, kV3, kTekken };

// Appends the special segment `t` to `out` (templates.cpp).
void special(std::vector<Segment>& out, std::string t, bool loss);
// `messages` rendered as mistral-common validates, normalizes and encodes them for `variant` (templates_mistral.cpp).
std::vector<Segment> render_mistral(MistralVariant variant, const std::vector<ChatMessage>& messages, bool gen);
// The Jinja chat template that renders as render_mistral(variant, ...) (templates_mistral.cpp).
std::string mistral_jinja(MistralVariant variant);

}  // namespace ft::chat::detail
