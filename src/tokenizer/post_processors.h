// tokenizer.json post-processors, reduced to what a single sequence needs: the ids placed before and after it.
#pragma once

#include <cstdint>
#include <vector>

#include "tokenizer/json_util.h"

namespace ft::tok {

struct PostProcessor {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
  // ByteLevel / RobertaProcessing trim_offsets: whitespace at a token's ends is cut from its offsets (even with
  // add_special_tokens=False); with add_prefix_space a first token's single leading space is kept.
  bool trim_offsets = false;
  bool trim_add_prefix_space = false;
};

// Supports TemplateProcessing (its "single" template), ByteLevel (offsets only: adds nothing), RobertaProcessing,
// BertProcessing and Sequence. Null gives an empty processor.
PostProcessor parse_post_processor(const json& j, const JsonCtx& ctx);

}  // namespace ft::tok
