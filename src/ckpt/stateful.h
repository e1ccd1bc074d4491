// A part of the training state that checkpoints save and resumes restore, as torchtitan's Stateful: the data
// loader's position, the loss scaler, the loop's progress. CheckpointManager collects them into trainer_state.json.
#pragma once

#include <nlohmann/json.hpp>

namespace ft::ckpt {

class Stateful {
 public:
  virtual ~Stateful() = default;
  // The part's state as JSON (small: counters, positions, scalars; tensors go to safetensors files).
  virtual nlohmann::json state_dict() const = 0;
  // Restores a state_dict(). Throws ft::Error naming what is missing or inconsistent.
  virtual void load_state_dict(const nlohmann::json& state) = 0;
};

}  // namespace ft::ckpt
