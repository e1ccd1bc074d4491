// The API of ft::jinja (template.h): Template parses once and renders with a Renderer; make_chat_context builds the
// context transformers passes for a conversation. python_json_dumps is in json.cpp.
#include "jinja/render.h"

namespace ft::jinja {

Template::Template(std::string source, std::string name)
    : name_(std::move(name)), program_(detail::parse_template(source, name_)) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

RenderResult Template::render(const Value& context) const {
  return render(context, RenderOptions{});
}

RenderResult Template::render(const Value& context, const RenderOptions& options) const {
  detail::Renderer r(*program_, options);
  return r.run(context);
}

Value make_chat_context(const Value& messages, const Value& tools, const Value& documents, bool add_generation_prompt,
                        const Value& extra) {
  if (!messages.is_array()) throw ConfigError("chat messages must be a JSON array of objects");
  Value msgs = Value::array();
  static const char* kReasoning[] = {"reasoning_content", "thinking", "reasoning"};
  for (const auto& m : messages) {
    if (!m.is_object()) throw ConfigError("chat messages must be JSON objects, got: " + m.dump());
    Value clean = Value::object();
    for (const auto& [k, v] : m.items())
      if (!v.is_null()) clean[k] = v;
    const Value* reasoning = nullptr;
    for (const char* key : kReasoning) {
      auto it = clean.find(key);
      if (it != clean.end() && !it->is_null()) {
        reasoning = &*it;
        break;
      }
    }
    if (reasoning != nullptr) {
      // {"thinking": r, **message, "reasoning_content": r}
      Value r = *reasoning;
      Value aliased = Value::object();
      aliased["thinking"] = r;
      for (const auto& [k, v] : clean.items()) aliased[k] = v;
      aliased["reasoning_content"] = r;
      clean = std::move(aliased);
    }
    msgs.push_back(std::move(clean));
  }
  Value ctx = Value::object();
  ctx["messages"] = std::move(msgs);
  ctx["tools"] = tools;
  ctx["documents"] = documents;
  ctx["add_generation_prompt"] = add_generation_prompt;
  if (!extra.is_null()) {
    if (!extra.is_object()) throw ConfigError("chat template kwargs must be a JSON object");
    for (const auto& [k, v] : extra.items()) ctx[k] = v;
  }
  return ctx;
}

}  // namespace ft::jinja
