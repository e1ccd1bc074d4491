// `finetune data inspect|synth`: dataset statistics with rendered, loss-marked samples; synthetic task files.
#include <unistd.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/loader.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/preference_dataset.h"
#include "data/synth.h"
#include "dist/comm.h"
#include "tokenizer/tokenizer.h"
#include "train/build.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::cli {
namespace {

struct InspectOptions {
  std::string config;
  std::vector<std::string> overrides;
  int64_t n = 3;
  bool eval = false;
};

struct SynthOptions {
  std::string task;
  int64_t n = 0;
  int64_t seed = 0;
  std::string out;
  bool overwrite = false;
};

// A token as text. Special tokens show their id (`<|im_start|>#151644`), so a marker that is one token is told
// apart from the same characters spelled as text. sentencepiece: the word marker becomes a space, byte pieces <0xNN>
// their byte; other kinds decode the token alone.
std::string piece_text(const tok::Tokenizer& tok, int32_t id) {
  const std::string p = tok.id_to_piece(id);
  if (tok.is_special(id)) return p + "#" + std::to_string(id);
  if (tok.kind() != "sentencepiece") return tok.decode({id});
  if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>') {
    return std::string(1, static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
  }
  std::string out;
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, 3, "\xe2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += p[i++];
    }
  }
  return out;
}

// Pieces joined by `sep`, the runs of loss tokens wrapped in [[ ]] (or shown in green on a terminal).
std::string mark_scored(const std::vector<std::string>& pieces, const std::vector<uint8_t>& loss, bool color,
                        const char* sep) {
  const char* open = color ? "\x1b[1;32m" : "[[";
  const char* close = color ? "\x1b[0m" : "]]";
  std::string out;
  bool in = false;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!loss[i] && in) out += close;
    if (i > 0) out += sep;
    if (loss[i] && !in) out += open;
    in = loss[i] != 0;
    out += pieces[i];
  }
  if (in) out += close;
  return out;
}

// The sample's text with its loss tokens marked.
std::string render_sample(const tok::Tokenizer& tok, const std::vector<int32_t>& ids, const std::vector<uint8_t>& loss,
                          bool color) {
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(piece_text(tok, id));
  return mark_scored(pieces, loss, color, "");
}

// The ids with the loss tokens marked.
std::string render_ids(const std::vector<int32_t>& ids, const std::vector<uint8_t>& loss, bool color) {
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(std::to_string(id));
  return mark_scored(pieces, loss, color, " ");
}

// A preference objective's pairs: statistics, then each pair's two sequences as text and ids, scored tokens marked.
void inspect_pairs(const Config& cfg, const tok::Tokenizer& tok, const InspectOptions& o) {
  const auto chat = data::preference_chat(cfg, tok);
  const auto ds = data::PreferenceDataset::build(o.eval ? cfg.data.eval : cfg.data.train,
                                                 data::preference_options(cfg, chat.get()), cfg.data.on_error, tok);
  std::cout << fmt::format("preference pairs ({}, train.objective {}): {}\n", o.eval ? "eval" : "train",
                           name_of(cfg.train.objective), ds->stats().dump());
  const bool color = ::isatty(STDOUT_FILENO) != 0;
  std::cout << "scored completion tokens are shown " << (color ? "in green" : "inside [[ ]]") << "\n";
  for (int64_t i = 0; i < std::min<int64_t>(o.n, ds->size()); ++i) {
    const auto& pair = ds->pair(i);
    for (const auto& [name, seq] : {std::pair{"chosen", &pair.chosen}, std::pair{"rejected", &pair.rejected}}) {
      int64_t scored = 0;
      for (auto l : seq->loss) scored += l;
      std::cout << fmt::format("--- pair {} {} ({} tokens, {} scored) ---\n", i, name, seq->tokens.size(), scored)
                << render_sample(tok, seq->tokens, seq->loss, color)
                << "\nids: " << render_ids(seq->tokens, seq->loss, color) << "\n";
    }
  }
}

void inspect(const InspectOptions& o) {
  auto loaded = config::load_config(o.config, o.overrides);
  Config& cfg = loaded.config;
  // The run's generated data and trained tokenizer, made where the run puts them (and then uses) if missing.
  train::RunContext single;
  single.comm = std::make_shared<dist::SingleProcessCommunicator>();
  if (o.eval && cfg.data.eval.empty()) {
    throw ConfigError("data inspect --eval: data.eval is empty", "list eval files under data.eval, or drop --eval");
  }
  train::prepare_inputs(cfg, single);
  const auto tok = train::build_tokenizer(cfg);  // as training loads it, with tokenizer.add_tokens
  if (cfg.train.objective != TrainObjective::kSft) return inspect_pairs(cfg, *tok, o);
  const auto options = data::DatasetOptions::from_config(cfg, o.eval);
  const auto ds = data::TokenizedDataset::build(options, *tok);
  const auto& st = ds->stats();
  const auto pct = [](int64_t a, int64_t b) { return b > 0 ? 100.0 * static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  std::cout << fmt::format("dataset ({}): {} samples, {} per epoch after weights\n", o.eval ? "eval" : "train",
                           st.samples, st.epoch_samples)
            << fmt::format("tokens: {} ({:.1f} per sample), target tokens: {} ({:.1f}%)\n", st.tokens,
                           st.samples ? static_cast<double>(st.tokens) / static_cast<double>(st.samples) : 0.0,
                           st.target_tokens, pct(st.target_tokens, st.tokens))
            << fmt::format("truncated: {}, dropped: {}, skipped bad lines: {} (seq_len {}, overlong={}, on_error={})\n",
                           st.truncated, st.dropped, st.skipped, cfg.data.seq_len,
                           name_of(cfg.data.overlong), name_of(cfg.data.on_error));
  for (const auto& s : st.sources) {
    std::cout << fmt::format("  {} [{}, weight {}]: {} samples, {} tokens, {} truncated, {} dropped, {} skipped{}{}\n",
                             s.path, s.format, s.weight, s.samples, s.tokens, s.truncated, s.dropped, s.skipped,
                             s.skipped_lines.empty() ? "" : fmt::format(" (lines {})", fmt::join(s.skipped_lines, ", ")),
                             s.from_cache ? ", from cache" : "");
  }
  std::vector<int64_t> order(static_cast<size_t>(ds->size()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  const auto rows = data::pack_rows(*ds, order, cfg.data.seq_len);
  int64_t epoch_tokens = 0;
  for (int64_t i = 0; i < ds->size(); ++i) epoch_tokens += ds->length(i);
  std::cout << fmt::format("packing: {} rows of {} tokens, efficiency {:.1f}% (packing is {})\n", rows.size(),
                           cfg.data.seq_len, pct(epoch_tokens, static_cast<int64_t>(rows.size()) * cfg.data.seq_len),
                           cfg.data.packing ? "on" : "off");
  std::cout << fmt::format("special ids: bos {}, eos {}, pad {}; vocabulary {}\n", tok->bos_id(), tok->eos_id(),
                           tok->pad_id(), tok->vocab_size());
  const bool color = ::isatty(STDOUT_FILENO) != 0;
  std::cout << "loss tokens are shown " << (color ? "in green" : "inside [[ ]]") << "\n";
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss;
  for (int64_t i = 0; i < std::min<int64_t>(o.n, ds->size()); ++i) {
    ds->get(i, ids, loss);
    int64_t targets = 0;
    for (auto l : loss) targets += l;
    std::cout << fmt::format("--- sample {} ({} tokens, {} targets) ---\n", i, ids.size(), targets)
              << render_sample(*tok, ids, loss, color) << "\n";
  }
}

}  // namespace

void add_data(CLI::App& app, const Globals& /*globals*/, int& exit_code) {
  auto* data = app.add_subcommand("data", "Inspect datasets and generate synthetic tasks");
  data->require_subcommand(1);
  data->footer("Example:\n  finetune data inspect --config configs/demo.yaml --n 2\n"
               "  finetune data synth --task add --n 1000 --seed 1 --out data/add.jsonl");

  auto io = std::make_shared<InspectOptions>();
  auto* inspect_cmd = data->add_subcommand(
      "inspect",
      "Dataset statistics and a few samples rendered with the loss tokens marked (check a template); makes the "
      "run's synthetic data and trained tokenizer first if the config asks for them, as train does");
  inspect_cmd->footer("Example:\n  finetune data inspect --config configs/demo.yaml --n 3 data.template=chatml");
  add_config_arguments(*inspect_cmd, io->config, io->overrides);
  inspect_cmd->add_option("--n", io->n, "Samples to render")->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  inspect_cmd->add_flag("--eval", io->eval, "Inspect data.eval instead of data.train");
  inspect_cmd->callback([io, &exit_code] {
    inspect(*io);
    exit_code = 0;
  });

  auto so = std::make_shared<SynthOptions>();
  auto* synth = data->add_subcommand("synth", "Write a synthetic task (exactly checkable answers) as JSON Lines");
  synth->footer("Example:\n  finetune data synth --task add --n 1000 --seed 1 --out data/add.jsonl\n"
                "Tasks: add, reverse, sort, copy, upper (prompt_completion format).");
  synth->add_option("--task", so->task, "add | reverse | sort | copy | upper")->required();
  // Held in memory before they are written: 100M samples are some GB.
  synth->add_option("--n", so->n, "Number of samples")->required()->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  synth->add_option("--seed", so->seed, "Generator seed");
  synth->add_option("--out,-o", so->out, "Output .jsonl file")->required();
  synth->add_flag("--overwrite", so->overwrite, "Replace --out if it exists");
  synth->callback([so, &exit_code] {
    refuse_existing_output(so->out, so->overwrite, "--out");
    data::write_synthetic(so->task, so->n, static_cast<uint64_t>(so->seed), so->out);
    std::cout << "wrote " << so->n << " '" << so->task << "' samples to " << so->out << "\n";
    exit_code = 0;
  });
}

}  // namespace ft::cli
