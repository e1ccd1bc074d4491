// Prompt/completion pairs for exact-match evaluation, read with the dataset's record rules.
#include "data/dataset.h"
#include "data/json_records.h"
#include "data/records.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::data {

std::vector<PromptCompletion> load_prompt_completions(const std::vector<DataSource>& sources, const DataFields& fields,
                                                      int64_t max_samples, OnError on_error) {
  std::vector<PromptCompletion> out;
  for (const auto& src : sources) {
    const Format format = src.format;
    if (format != Format::kPromptCompletion && format != Format::kAlpaca) continue;
    RecordReader reader(src.path);
    RecordOptions ro;
    ro.format = format;
    ro.fields = fields;
    ro.add_bos = false;
    ro.add_eos = false;
    BadRecords bad(src.path, on_error);
    std::string line;
    int64_t line_no = 0;
    while (static_cast<int64_t>(out.size()) < max_samples && reader.next(line, line_no)) {
      std::vector<chat::Segment> segs;
      try {
        segs = parse_record(line, ro);
      } catch (const RecordError& e) {
        bad.add(line_no, e);  // throws under data.on_error: fail
        continue;
      }
      PromptCompletion pc;
      for (const auto& s : segs) (s.loss ? pc.completion : pc.prompt) += s.text;
      out.push_back(std::move(pc));
    }
  }
  return out;
}

std::vector<int64_t> encode_prompt(const tok::Tokenizer& tokenizer, std::string_view prompt, bool add_bos) {
  std::vector<int64_t> ids;
  if (add_bos && tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  const auto body = tokenizer.encode(prompt);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace ft::data
