#include "tokenizer/post_processors.h"

#include <string>

namespace ft::tok {

namespace {

std::vector<int32_t> special_ids(const json& specials, const std::string& name, const JsonCtx& ctx) {
  const JsonCtx sc = ctx.at("special_tokens");
  if (!specials.is_object() || !specials.contains(name)) {
    sc.fail("template names special token \"" + name + "\" which is not defined here");
  }
  const json& entry = specials.at(name);
  const JsonCtx ec = sc.at(name);
  const json& ids = require(entry, "ids", ec);
  if (!ids.is_array()) ec.at("ids").fail("expected an array of ids, found " + json_type_name(ids));
  std::vector<int32_t> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer() || ids[i].get<int64_t>() < 0) ec.at("ids").at(i).fail("expected a token id");
    out.push_back(static_cast<int32_t>(ids[i].get<int64_t>()));
  }
  return out;
}

int32_t pair_id(const json& j, const char* key, const JsonCtx& ctx) {
  const json& p = require(j, key, ctx);
  if (!p.is_array() || p.size() != 2 || !p[1].is_number_integer() || p[1].get<int64_t>() < 0) {
    ctx.at(key).fail("expected [\"token\", id]");
  }
  return static_cast<int32_t>(p[1].get<int64_t>());
}

}  // namespace

PostProcessor parse_post_processor(const json& j, const JsonCtx& ctx) {
  PostProcessor pp;
  if (j.is_null()) return pp;
  const std::string type = get_type(j, ctx);
  if (type == "ByteLevel" || type == "RobertaProcessing") {
    pp.trim_offsets = get_bool(j, "trim_offsets", true, ctx);
    pp.trim_add_prefix_space = get_bool(j, "add_prefix_space", true, ctx);
    if (type == "ByteLevel") return pp;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    pp.prefix = {pair_id(j, "cls", ctx)};
    pp.suffix = {pair_id(j, "sep", ctx)};
    return pp;
  }
  if (type == "TemplateProcessing") {
    const json& single = require(j, "single", ctx);
    const JsonCtx sc = ctx.at("single");
    if (!single.is_array()) sc.fail("expected an array, found " + json_type_name(single));
    const json& specials = require(j, "special_tokens", ctx);
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const json& piece = single[i];
      const JsonCtx pc = sc.at(i);
      if (piece.is_object() && piece.contains("Sequence")) {
        const std::string id = get_string(piece.at("Sequence"), "id", pc.at("Sequence"));
        if (id != "A") pc.fail("the single-sequence template must use sequence \"A\", found \"" + id + "\"");
        if (seen_sequence) pc.fail("sequence \"A\" appears twice in the single template");
        seen_sequence = true;
      } else if (piece.is_object() && piece.contains("SpecialToken")) {
        const std::string name = get_string(piece.at("SpecialToken"), "id", pc.at("SpecialToken"));
        auto ids = special_ids(specials, name, ctx);
        auto& dst = seen_sequence ? pp.suffix : pp.prefix;
        dst.insert(dst.end(), ids.begin(), ids.end());
      } else {
        pc.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_sequence) sc.fail("the single template has no {\"Sequence\": {\"id\": \"A\"}}");
    return pp;
  }
  if (type == "Sequence") {
    const json& items = require(j, "processors", ctx);
    if (!items.is_array()) ctx.at("processors").fail("expected an array, found " + json_type_name(items));
    for (size_t i = 0; i < items.size(); ++i) {
      PostProcessor inner = parse_post_processor(items[i], ctx.at("processors").at(i));
      // Each processor wraps the output of the previous one.
      inner.prefix.insert(inner.prefix.end(), pp.prefix.begin(), pp.prefix.end());
      pp.prefix = std::move(inner.prefix);
      pp.suffix.insert(pp.suffix.end(), inner.suffix.begin(), inner.suffix.end());
      if (inner.trim_offsets) {
        pp.trim_offsets = true;
        pp.trim_add_prefix_space = inner.trim_add_prefix_space;
      }
    }
    return pp;
  }
  unsupported_component("post_processor", type, ctx,
                        "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence");
}

}  // namespace ft::tok
