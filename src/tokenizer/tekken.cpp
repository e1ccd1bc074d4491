// Mistral's tekken.json (mistral-common's Tekkenizer): control tokens take ids [0, num_special), vocabulary rank r
// is id r + num_special, and the vocabulary is cut to default_vocab_size - num_special ranks.
#include <algorithm>
#include <unordered_set>

#include "tokenizer/json_util.h"
#include "tokenizer/tiktoken.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace ft::tok {

namespace {

// Mistral's tekken files reserve 1,000 special tokens; the cap bounds the <SPECIAL_i> names made for unnamed ones.
constexpr int64_t kMaxSpecialTokens = int64_t{1} << 20;

// mistral-common's Tekkenizer.DEPRECATED_SPECIAL_TOKENS: the control tokens of files without "special_tokens".
const char* const kDeprecatedSpecials[] = {"<unk>",
                                           "<s>",
                                           "</s>",
                                           "[INST]",
                                           "[/INST]",
                                           "[AVAILABLE_TOOLS]",
                                           "[/AVAILABLE_TOOLS]",
                                           "[TOOL_RESULTS]",
                                           "[/TOOL_RESULTS]",
                                           "[TOOL_CALLS]",
                                           "[IMG]",
                                           "<pad>",
                                           "[IMG_BREAK]",
                                           "[IMG_END]",
                                           "[PREFIX]",
                                           "[MIDDLE]",
                                           "[SUFFIX]",
                                           "[SYSTEM_PROMPT]",
                                           "[/SYSTEM_PROMPT]",
                                           "[TOOL_CONTENT]"};

// config: the split pattern, and the sizes and version the rest of the file is read against.
struct TekkenConfig {
  std::string pattern;
  int64_t num_special = 0;
  int64_t inner = 0;  // ranks of the vocabulary: default_vocab_size - default_num_special_tokens
  std::string version;
};

TekkenConfig read_config(const json& config, const JsonCtx& cc) {
  if (!config.is_object()) cc.fail("expected an object, found " + json_type_name(config));
  TekkenConfig c;
  c.pattern = get_string(config, "pattern", cc);
  const int64_t vocab_size = get_int(config, "default_vocab_size", cc);
  c.num_special = get_int(config, "default_num_special_tokens", cc);
  if (c.num_special < 3 || c.num_special > vocab_size || c.num_special > kMaxSpecialTokens) {
    cc.at("default_num_special_tokens")
        .fail("must be at least 3 and at most default_vocab_size and " + std::to_string(kMaxSpecialTokens));
  }
  c.version = get_opt_string(config, "version", cc).value_or("");
  c.inner = vocab_size - c.num_special;
  return c;
}

// vocab: the token bytes of the first `inner` ranks, listed in rank order, the first 256 the single bytes, no
// duplicates.
std::vector<std::string> read_ranks(const json& j, const JsonCtx& root, int64_t inner) {
  const json& vocab = require(j, "vocab", root);
  const JsonCtx vc = root.at("vocab");
  if (!vocab.is_array()) vc.fail("expected an array, found " + json_type_name(vocab));
  if (static_cast<int64_t>(vocab.size()) < inner) {
    vc.fail("has " + std::to_string(vocab.size()) + " entries but config needs " + std::to_string(inner) +
            " (default_vocab_size - default_num_special_tokens)");
  }
  std::unordered_set<std::string> seen;
  std::vector<std::string> ranks;
  ranks.reserve(static_cast<size_t>(inner));
  for (int64_t i = 0; i < inner; ++i) {
    const json& e = vocab[static_cast<size_t>(i)];
    const JsonCtx ec = vc.at(static_cast<size_t>(i));
    const int64_t rank = get_int(e, "rank", ec);
    if (rank != i) ec.at("rank").fail("expected rank " + std::to_string(i) + ", found " + std::to_string(rank));
    auto bytes = unicode::base64_decode(get_string(e, "token_bytes", ec));
    if (!bytes || bytes->empty()) ec.at("token_bytes").fail("invalid base64");
    if (i < 256 && *bytes != std::string(1, static_cast<char>(i))) {
      ec.at("token_bytes").fail("rank " + std::to_string(i) + " must be the single byte " + std::to_string(i));
    }
    if (!seen.insert(*bytes).second) ec.at("token_bytes").fail("duplicate token");
    ranks.push_back(std::move(*bytes));
  }
  return ranks;
}

// The control tokens' strings by id: special_tokens, or for files of v7 and before without it the deprecated list;
// ids up to default_num_special_tokens that neither names become <SPECIAL_i>.
std::vector<std::string> special_names(const json& j, const JsonCtx& root, const TekkenConfig& c) {
  std::vector<std::string> names;
  if (j.contains("special_tokens") && !j.at("special_tokens").is_null()) {
    const json& st = j.at("special_tokens");
    const JsonCtx sc = root.at("special_tokens");
    if (!st.is_array()) sc.fail("expected an array, found " + json_type_name(st));
    for (size_t i = 0; i < st.size(); ++i) {
      const int64_t rank = get_int(st[i], "rank", sc.at(i));
      if (rank != static_cast<int64_t>(i)) sc.at(i).at("rank").fail("expected rank " + std::to_string(i));
      names.push_back(get_string(st[i], "token_str", sc.at(i)));
    }
  } else {
    if (c.version != "v3" && c.version != "v7" && c.version != "v1" && c.version != "v2") {
      root.fail("no \"special_tokens\": required for tekken versions after v7 (config.version is \"" + c.version +
                "\")");
    }
    names.assign(std::begin(kDeprecatedSpecials), std::end(kDeprecatedSpecials));
  }
  if (static_cast<int64_t>(names.size()) > c.num_special) {
    root.at("special_tokens").fail("has more entries than config.default_num_special_tokens");
  }
  for (auto i = static_cast<int64_t>(names.size()); i < c.num_special; ++i) {
    names.push_back("<SPECIAL_" + std::to_string(i) + ">");
  }
  std::unordered_set<std::string> unique(names.begin(), names.end());
  if (unique.size() != names.size()) root.at("special_tokens").fail("special token strings must be unique");
  return names;
}

std::vector<AddedToken> control_tokens(const std::vector<std::string>& names) {
  std::vector<AddedToken> tokens;
  for (size_t i = 0; i < names.size(); ++i) {
    tokens.push_back(verbatim_token(names[i], static_cast<int32_t>(i), /*special=*/true));
  }
  return tokens;
}

}  // namespace

std::unique_ptr<TextTokenizer> load_tekken(const std::filesystem::path& file) {
  const std::string hint = "the tekken.json is malformed; download it again or load it with mistral-common to check";
  const json j = read_json_file(file, hint);
  const JsonCtx root{file.string(), "", hint};
  if (!j.is_object()) root.fail("expected a JSON object at the top level, found " + json_type_name(j));
  const JsonCtx cc = root.at("config");
  const TekkenConfig c = read_config(require(j, "config", root), cc);

  RankedBpeSetup setup;
  setup.kind = "tekken";
  setup.file = file;
  setup.pattern = c.pattern;
  setup.ranks = read_ranks(j, root, c.inner);
  setup.present.assign(setup.ranks.size(), true);
  const std::vector<std::string> names = special_names(j, root, c);
  setup.specials = control_tokens(names);
  setup.id_offset = static_cast<int32_t>(c.num_special);
  setup.match_specials = false;
  setup.decode_runs_separately = true;
  auto bos = std::find(names.begin(), names.end(), "<s>");
  if (bos == names.end()) root.at("special_tokens").fail("no \"<s>\" (BOS) control token");
  setup.prefix = {static_cast<int32_t>(bos - names.begin())};  // Tekkenizer.bos_id
  try {
    return std::make_unique<RankedBpeTokenizer>(std::move(setup));
  } catch (const RegexError& e) {
    cc.at("pattern").fail(e.what());
  }
}

}  // namespace ft::tok
