// Checkpoints of the training loop: what a step-N directory holds, how a run resumes from it, and the final model.
//
// checkpoints/step-000123/
//   model/ or adapter/       HF model (config.json + safetensors + tokenizer files) or PEFT adapter
//   optimizer.safetensors    optim::AdamW moments and step counters, by parameter name
//   rng.safetensors          every rank's CPU (and CUDA) generator state          (ckpt::CheckpointManager)
//   trainer_state.json       format 2: the parts progress (TrainState) and scaler, every rank's data position
//                            (ranks[r].loader), fingerprint, world_size, versions  (ckpt::CheckpointManager)
//   config.yaml              the resolved config of the run that wrote it
//   manifest.json            sizes and checksums (ckpt::CheckpointStore)
#include <torch/version.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "chat/templates.h"
#include "ckpt/checkpoint_manager.h"
#include "ckpt/checkpoint_store.h"
#include "ckpt/checkpoint_writer.h"
#include "config/loader.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "io/safetensors.h"
#include "model/lora.h"
#include "model/pretrained.h"
#include "model/tokenizer_files.h"
#include "model/transformer.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "tokenizer/tokenizer.h"
#include "train/fingerprint.h"
#include "train/resume_inputs.h"
#include "train/run_dir.h"
#include "train/trainer.h"
#include "util/build_info.h"
#include "util/file_writer.h"
#include "util/fmt.h"
#include "util/fs.h"
#include "util/json_int.h"

namespace ft::train {
namespace {

// The optimizer state file of `rank` in a checkpoint: one file without ZeRO-1, one per rank with it.
std::string optimizer_file(bool sharded, int rank) {
  return sharded ? fmt::format("optimizer.rank{}.safetensors", rank) : "optimizer.safetensors";
}

// The entries of `tensors` whose names start with `prefix`, without it.
io::TensorMap tensors_under(const std::string& prefix, const ckpt::NamedTensors& tensors) {
  io::TensorMap out;
  for (auto it = tensors.lower_bound(prefix); it != tensors.end() && it->first.rfind(prefix, 0) == 0; ++it) {
    out.emplace(it->first.substr(prefix.size()), it->second);
  }
  return out;
}

// The saved optimizer state of a checkpoint (one file, or the union of the ranks' ZeRO-1 shards), restricted to the
// parameters `optimizer` holds, so a run resumes whether or not either run sharded its optimizer.
std::map<std::string, at::Tensor> saved_optimizer_state(const std::filesystem::path& dir,
                                                        const optim::AdamW& optimizer) {
  io::TensorMap all;
  if (std::filesystem::exists(dir / optimizer_file(false, 0))) {
    all = io::read_safetensors(dir / optimizer_file(false, 0));
  } else {
    for (int r = 0; std::filesystem::exists(dir / optimizer_file(true, r)); ++r) {
      for (auto& [key, t] : io::read_safetensors(dir / optimizer_file(true, r))) all.emplace(key, std::move(t));
    }
    if (!std::filesystem::exists(dir / optimizer_file(true, 0))) {
      // Fresh moments would continue the run as another one, not as the checkpoint's.
      throw Error(fmt::format("checkpoint {} holds no optimizer state ({} or {})", dir.string(),
                              optimizer_file(false, 0), optimizer_file(true, 0)),
                  "resume from another checkpoint (checkpoint.resume=PATH), or start a new run", ExitCode::kUsage);
    }
  }
  std::set<std::string> held;
  for (const auto& g : optimizer.groups()) held.insert(g.names.begin(), g.names.end());
  std::map<std::string, at::Tensor> mine;
  for (auto& [key, t] : all) {
    if (!optim::AdamW::owner_of(key, held).empty()) mine.emplace(key, std::move(t));
  }
  return mine;
}

}  // namespace

std::string Trainer::fingerprint() const {
  return make_fingerprint(cfg_, model_.model->args());
}

void Trainer::write_model_dir(const std::filesystem::path& dir) const {
  write_model_files(model_files(), dir);
}

model::ModelFiles Trainer::model_files() const {
  return cfg_.lora.enabled ? model::adapter_files(*model_.model, cfg_.lora, cfg_.model.path)
                           : model::pretrained_files(*model_.model);
}

FileDigests Trainer::write_model_files(const model::ModelFiles& files, const std::filesystem::path& dir) const {
  FileDigests digests = model::write_model_files(files, dir, cfg_.checkpoint.shard_size_mb * 1000 * 1000);
  model::write_tokenizer_files(cfg_.model.path, *tokenizer_, name_of(cfg_.data.template_name), cfg_.tokenizer.add_bos,
                               dir);
  return digests;
}

ckpt::NamedTensors Trainer::checkpoint_tensors(model::ModelFiles& files) const {
  // Without ZeRO-1 only rank 0 writes; with it every rank writes its optimizer shard.
  ckpt::NamedTensors tensors;
  if (ctx_.rank != 0 && optim_.zero_owners.empty()) return tensors;
  for (auto& [key, t] : optim_.optimizer->state_tensors()) tensors.emplace("optimizer/" + key, std::move(t));
  if (ctx_.rank != 0) return tensors;
  files = model_files();
  for (size_t i = 0; i < files.tensors.size(); ++i) {
    tensors.emplace(fmt::format("model/{:08d}", i), std::move(files.tensors[i].second));
  }
  return tensors;
}

void Trainer::save_checkpoint() {
  step_->non_finite().check(progress_.nan_skips);  // a run past its max_nan_skips stops here, before writing
  // Every rank contributes its data position and RNG state; rank 0 writes them.
  ckpt::StateSnapshot snapshot =
      state_parts_->snapshot({{"fingerprint", fingerprint()},
                              {"inputs", inputs_},
                              {"world_size", ctx_.world_size},
                              {"versions", {{"finetune", build::kGitDescribe}, {"libtorch", TORCH_VERSION}}}});
  const bool sharded = !optim_.zero_owners.empty();
  ckpt::SaveRequest request;
  request.step = progress_.step;
  // The eval loss ranks this checkpoint for keep_best only when it was measured on these weights.
  request.metric = evaluator_->loss_at(progress_.step);
  model::ModelFiles files;
  request.tensors = checkpoint_tensors(files);
  const std::string optimizer_name = optimizer_file(sharded, ctx_.rank);
  if (ctx_.rank != 0) {
    request.write = [optimizer_name](const std::filesystem::path& dir, const ckpt::NamedTensors& tensors) {
      return FileDigests{
          {dir / optimizer_name, io::write_safetensors(dir / optimizer_name, tensors_under("optimizer/", tensors))}};
    };
    checkpoints_->save(std::move(request));
    return;
  }
  const std::string model_subdir = cfg_.lora.enabled ? "adapter" : "model";
  request.write = [this, files = std::move(files), snapshot = std::move(snapshot), model_subdir, optimizer_name,
                   yaml = config::to_yaml(cfg_)](const std::filesystem::path& dir, const ckpt::NamedTensors& tensors) {
    model::ModelFiles staged = files;
    for (size_t i = 0; i < staged.tensors.size(); ++i) {
      staged.tensors[i].second = tensors.at(fmt::format("model/{:08d}", i));
    }
    FileDigests digests = write_model_files(staged, dir / model_subdir);
    digests.emplace(dir / optimizer_name,
                    io::write_safetensors(dir / optimizer_name, tensors_under("optimizer/", tensors)));
    ckpt::CheckpointManager::write(snapshot, dir);
    ft::write_file(dir / "config.yaml", yaml);
    return digests;
  };
  checkpoints_->save(std::move(request));
}

bool Trainer::try_resume() {
  const ResumeSetting& resume = cfg_.checkpoint.resume;
  if (resume.mode == ResumeSetting::Mode::kNever) return false;
  // Rank 0 picks and verifies the checkpoint, reading every file once rather than once per rank; every rank then
  // acts on its answer: {"path": the checkpoint or "" for none, "problem": why an explicit path is invalid}.
  nlohmann::json choice = {{"path", ""}, {"problem", ""}, {"earlier", nlohmann::json::array()}};
  if (ctx_.rank == 0) {
    if (resume.mode == ResumeSetting::Mode::kAuto) {
      if (const auto latest = ckpt::CheckpointStore::find_latest_valid(run_dir())) {
        choice["path"] = latest->path.string();
      } else if (!cfg_.run.overwrite) {
        choice["earlier"] = earlier_run(run_dir());  // every checkpoint failed verification
      }
    } else {
      choice["path"] = resume.path;
      choice["problem"] = ckpt::CheckpointStore::verify(resume.path).problem;
    }
  }
  choice = dist::broadcast_json(*ctx_.comm, choice);
  const std::string problem = choice.at("problem").get<std::string>();
  if (!problem.empty()) {
    throw ConfigError("checkpoint.resume: " + resume.path + " is not a valid checkpoint: " + problem,
                      "point checkpoint.resume at a checkpoints/step-N directory, or use auto or never");
  }
  const auto earlier = choice.at("earlier").get<std::vector<std::string>>();
  if (!earlier.empty()) refuse_new_run(run_dir(), earlier, "none of its checkpoints verifies");
  if (choice.at("path").get<std::string>().empty()) return false;
  const std::filesystem::path dir = choice.at("path").get<std::string>();
  const auto state = ckpt::CheckpointManager::read_trainer_state(dir);
  std::string saved_fingerprint;
  int64_t saved_world = 0;
  try {
    saved_fingerprint = state.at("fingerprint").get<std::string>();
    saved_world = json_integer_at<int64_t>(state, "world_size");
  } catch (const nlohmann::json::exception& e) {
    throw Error("invalid " + (dir / "trainer_state.json").string() + ": " + e.what(),
                "the checkpoint is damaged; resume from another checkpoint or start a new run");
  }
  const auto differences = fingerprint_differences(saved_fingerprint, fingerprint());
  if (!differences.empty()) {
    std::string why =
        "settings that must stay the same on resume (they shape the model, the data or the optimizer state) differ "
        "from the run that wrote it:";
    for (const auto& d : differences) why += "\n    " + d;
    throw ConfigError("cannot resume from " + dir.string() + ": " + why,
                      "restore the original settings (see " + (dir / "config.yaml").string() +
                          "), use another run.output_dir, or add --overwrite (run.overwrite=true) to start again");
  }
  if (saved_world != ctx_.world_size) {
    throw ConfigError(fmt::format("cannot resume from {}: it was written by {} processes, this run has {}",
                                  dir.string(), saved_world, ctx_.world_size),
                      "resume with the same number of processes (--nproc-per-node / torchrun), or start a new run");
  }
  if (ctx_.rank == 0) {
    for (const auto& change : resume_input_changes(state.value("inputs", nlohmann::json()), inputs_, cfg_)) {
      FT_LOG_WARN("resuming from {}: {}", dir.string(), change);
    }
  }
  if (cfg_.lora.enabled) {
    model::load_adapter(*model_.model, dir / "adapter");
  } else {
    model::load_weights(*model_.model, dir / "model");
  }
  optim_.optimizer->load_state_dict(saved_optimizer_state(dir, *optim_.optimizer));
  state_parts_->restore(state, dir);
  FT_LOG_INFO("resumed from {} at step {} (epoch {}, {} tokens seen)", dir.string(), progress_.step, progress_.epoch,
              progress_.tokens_seen);
  return true;
}

std::filesystem::path Trainer::final_model_dir() const {
  return run_dir() / (cfg_.lora.enabled ? "adapter" : "model");
}

bool Trainer::final_model_is_current() const {
  // Every rank answers alike: the files are on the shared run directory, and rank 0's answer is broadcast.
  nlohmann::json answer = false;
  if (ctx_.rank == 0) {
    const auto latest = ckpt::CheckpointStore::find_latest_valid(run_dir());
    std::error_code ec;
    const auto model_time = std::filesystem::last_write_time(final_model_dir(), ec);
    answer = latest && !ec && model_time >= std::filesystem::last_write_time(latest->path, ec) && !ec;
  }
  return dist::broadcast_json(*ctx_.comm, answer).get<bool>();
}

void Trainer::save_final_model() {
  if (ctx_.rank == 0) {
    // Written beside, then swapped in: an earlier model in the run directory survives a failure here.
    const auto final_dir = final_model_dir();
    StagedDir staged(final_dir, run_dir() / (final_dir.filename().string() + ".tmp"));
    write_model_dir(staged.path());
    staged.commit();
    FT_LOG_INFO("final {} written to {}", cfg_.lora.enabled ? "adapter" : "model", final_dir.string());
  }
  ctx_.comm->barrier();
}

}  // namespace ft::train
