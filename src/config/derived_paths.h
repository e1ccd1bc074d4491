// The files a run makes for itself, named in its config before anything is made, so that the config written to the
// run directory (and a sweep trial's, written before the trial starts) says which files the run used.
#pragma once

#include "config/config.h"

namespace ft::config {

// Fills, as absolute paths under run.output_dir (made absolute against the working directory, as the trainer
// resolves it): with data.synth.task set, the path of the first data.train / data.eval source that has none
// (data/<task>-train.jsonl, data/<task>-eval.jsonl) when that split gets samples; with
// tokenizer.train_vocab_size > 0 and neither tokenizer.path nor model.path set, tokenizer.path
// (tokenizer/tokenizer.model). Reads no files; applying it twice changes nothing.
void fill_derived_paths(Config& cfg);

}  // namespace ft::config
