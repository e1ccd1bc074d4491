#include "model/pretrained.h"

#include <functional>
#include <map>
#include <optional>
#include <set>

#ifdef FT_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include "io/safe_path.h"
#include "io/safetensors.h"
#include "model/checkpoint_names.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"

namespace ft::model {
namespace {

// Adapter parameters: LoRA matrices and the trainable token rows of added tokens (model/lora.h).
bool is_adapter_name(const std::string& name) {
  return name.find(".lora_A") != std::string::npos || name.find(".lora_B") != std::string::npos ||
         name.find(".token_rows") != std::string::npos;
}

bool is_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf || t == at::kDouble;
}

// The generator random initialisation draws from: the CPU's (the draws of every earlier version), or the GPU's own
// Philox generator, which fills gigabytes in milliseconds where the CPU takes seconds.
at::Generator seeded_generator(c10::Device device, uint64_t seed) {
#ifdef FT_WITH_CUDA
  if (device.is_cuda()) {
    at::Generator gen = at::cuda::detail::createCUDAGenerator(device.index());
    gen.set_current_seed(seed);
    return gen;
  }
#endif
  FT_CHECK(device.is_cpu(), "init_weights: no generator for device " + device.str());
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> base_parameters(const Transformer& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.named_parameters(true)) {
    if (!is_adapter_name(item.key())) out.emplace_back(item.key(), item.value());
  }
  return out;
}

namespace {

// Every tensor of the checkpoint must be one the model expects (a tied model's lm_head.weight and the rotary
// tables of old checkpoints aside, as transformers ignores them).
void check_no_unexpected(const io::CheckpointReader& reader, const Transformer& model,
                         const std::vector<std::pair<std::string, at::Tensor>>& params) {
  std::set<std::string> expected;
  for (const auto& [name, _] : params) {
    expected.insert(name);
    for (const auto& group : stored_parts(name, model.args())) expected.insert(group.begin(), group.end());
  }
  const std::string lm_head = stored_parts("lm_head.weight", model.args())[0][0];
  for (const auto& name : reader.names()) {
    if (expected.count(name) || passes_through(name, model.args())) continue;
    if (name == lm_head && model.args().tie_word_embeddings) continue;           // tied: transformers ignores it
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;         // old checkpoints store the table
    throw ConfigError("unexpected tensor '" + name + "' in " + reader.file_of(name),
                      "the checkpoint does not match config.json (" + model.args().model_type + ", " +
                          std::to_string(model.args().num_layers) + " layers); check the model directory");
  }
}

// The stored tensor `name` read onto `to_device`'s device (in its stored dtype) for a parameter of `shape` and
// `dtype`, after the checks; logs the first cast of a run once.
at::Tensor checked_tensor(const io::CheckpointReader& reader, const std::filesystem::path& dir, const std::string& name,
                          at::IntArrayRef shape, at::ScalarType dtype, io::DeviceReader& to_device, bool& logged_cast) {
  if (!reader.contains(name)) {
    throw ConfigError("missing tensor '" + name + "' in the checkpoint of " + dir.string(),
                      "the weights do not match config.json; re-download or re-save the model");
  }
  const auto& info = reader.info(name);
  if (info.shape != shape.vec()) {
    throw ConfigError(fmt::format("tensor '{}' in {} has shape [{}], the model expects [{}]", name,
                                  reader.file_of(name), fmt::join(info.shape, ", "), fmt::join(shape, ", ")),
                      "config.json and the weights disagree");
  }
  if (!is_float(info.dtype)) {
    throw ConfigError("tensor '" + name + "' in " + reader.file_of(name) + " has dtype " + c10::toString(info.dtype) +
                      ", expected a floating-point dtype");
  }
  if (info.dtype != dtype && !logged_cast) {
    FT_LOG_INFO("casting checkpoint weights from {} to {}", c10::toString(info.dtype), c10::toString(dtype));
    logged_cast = true;
  }
  return reader.read(name, to_device);
}

// Parameter `name` of `shape`: stored as it is (as transformers 5 saves with save_original_format=False), else
// assembled from its stored parts (model/checkpoint_names.h: the per-expert tensors of the released MoE checkpoints),
// each part checked as checked_tensor does.
at::Tensor read_parameter(const io::CheckpointReader& reader, const std::filesystem::path& dir, const std::string& name,
                          at::IntArrayRef shape, at::ScalarType dtype, const ModelArgs& args,
                          io::DeviceReader& to_device, bool& logged_cast) {
  const auto groups = stored_parts(name, args);
  if (reader.contains(name) || (groups.size() == 1 && groups[0].size() == 1 && groups[0][0] == name)) {
    return checked_tensor(reader, dir, name, shape, dtype, to_device, logged_cast);
  }
  if (shape.size() != 3) return checked_tensor(reader, dir, groups[0][0], shape, dtype, to_device, logged_cast);
  // An experts' weight [E, rows, cols]: each group holds E tensors of [rows / groups, cols].
  const std::vector<int64_t> part_shape{shape[1] / static_cast<int64_t>(groups.size()), shape[2]};
  std::vector<at::Tensor> stacked;
  for (const auto& group : groups) {
    std::vector<at::Tensor> experts;
    for (const auto& part : group) {
      experts.push_back(checked_tensor(reader, dir, part, part_shape, dtype, to_device, logged_cast));
    }
    stacked.push_back(at::stack(experts, 0));  // [E, rows / groups, cols]
  }
  return stacked.size() == 1 ? stacked[0] : at::cat(stacked, 1);
}

// Where each base parameter's value goes: with `quantize` nf4 or fp8 a projection's weight and an MoE layer's expert
// weights are quantized (standing for `dtype`, their compute dtype) and the value dropped; any other value becomes
// the parameter's data.
class ParameterPlacer {
 public:
  using Quantizer = std::function<void(const at::Tensor& value, at::ScalarType dtype)>;

  ParameterPlacer(Transformer& model, BaseQuantization quantize) {
    if (quantize == BaseQuantization::kNone) return;
    for (const auto& [path, lin] : model.projections()) {
      quantizers_.emplace(path + ".weight",
                          [layer = lin.ptr(), quantize](const at::Tensor& value, at::ScalarType dtype) {
                            if (quantize == BaseQuantization::kNf4) {
                              layer->quantize_nf4(value, dtype, quant::kNf4Blocksize);
                            } else {
                              layer->quantize_fp8(value, dtype);
                            }
                          });
    }
    for (const auto& [path, experts] : model.moe_experts()) {
      for (const std::string name : {"gate_up_proj", "down_proj"}) {
        quantizers_.emplace(path + "." + name,
                            [module = experts.ptr(), name, quantize](const at::Tensor& value, at::ScalarType dtype) {
                              module->quantize(name, value, quantize, dtype);
                            });
      }
    }
  }

  void place(const std::string& name, const at::Tensor& param, const at::Tensor& value, at::ScalarType dtype) {
    const auto quantizer = quantizers_.find(name);
    if (quantizer == quantizers_.end()) {
      param.set_data(value);
    } else {
      quantizer->second(value, dtype);
    }
  }

  bool quantizes(const std::string& name) const { return quantizers_.count(name) > 0; }

 private:
  std::map<std::string, Quantizer> quantizers_;
};

// Keeps in `residuals` (when given) what casting `wide` to `narrow`'s dtype dropped, where `narrow` is bf16/fp16 and
// `wide` more precise (RoundingResiduals).
void keep_residual(RoundingResiduals* residuals, const std::string& name, const at::Tensor& wide,
                   const at::Tensor& narrow) {
  if (residuals == nullptr || !wide.is_floating_point() || c10::elementSize(wide.scalar_type()) < 4) return;
  if (narrow.scalar_type() != at::kBFloat16 && narrow.scalar_type() != at::kHalf) return;
  (*residuals)[name] = (wide - narrow.to(wide.scalar_type())).to(narrow.scalar_type());
}

// The stored tensors of `reader` that `model` keeps aside (checkpoint_names.h, passes_through), read onto the CPU.
void read_passthrough(const io::CheckpointReader& reader, Transformer& model) {
  model.passthrough.clear();
  io::DeviceReader on_cpu(at::kCPU);
  for (const auto& name : reader.names()) {
    if (passes_through(name, model.args())) model.passthrough.emplace_back(name, reader.read(name, on_cpu));
  }
}

// `dir`'s checkpoint, its tensors under the released layout's names (checkpoint_names.h, released_name).
io::CheckpointReader open_checkpoint(const std::filesystem::path& dir, const ModelArgs& args) {
  io::CheckpointReader reader(dir);
  if (!args.multimodal_type.empty()) reader.rename([&](const std::string& name) { return released_name(name, args); });
  return reader;
}

// The weights of `dir` into a model built on the CPU and never written there: each parameter is read onto `device`
// in `dtype` and replaces the CPU tensor, so the model is allocated once, where it runs, instead of allocated there
// and then filled. With `quantize` nf4 or fp8 each projection's weight is quantized on `device` and dropped before the
// next one is read, so the dense base never exists whole, on the device or the host.
void load_onto(Transformer& model, const std::filesystem::path& dir, at::Device device, at::ScalarType dtype,
               BaseQuantization quantize, RoundingResiduals* residuals) {
  io::CheckpointReader reader = open_checkpoint(dir, model.args());
  const auto params = base_parameters(model);
  check_no_unexpected(reader, model, params);
  read_passthrough(reader, model);
  ParameterPlacer placer(model, quantize);
  bool logged_cast = false;
  at::NoGradGuard no_grad;
  io::DeviceReader to_device(device);
  for (const auto& [name, param] : params) {
    // Cast where the weights will live: on a GPU that takes milliseconds.
    const at::Tensor stored =
        read_parameter(reader, dir, name, param.sizes(), dtype, model.args(), to_device, logged_cast);
    const at::Tensor value = stored.to(dtype);
    if (!placer.quantizes(name)) keep_residual(residuals, name, stored, value);
    placer.place(name, param, value, dtype);
  }
  model.to(device, dtype);  // the buffers: every parameter is there already
}

}  // namespace

void load_weights(Transformer& model, const std::filesystem::path& dir) {
  io::CheckpointReader reader = open_checkpoint(dir, model.args());
  const auto params = base_parameters(model);
  check_no_unexpected(reader, model, params);
  bool logged_cast = false;
  at::NoGradGuard no_grad;
  // The model lives on one device (Transformer::to).
  io::DeviceReader to_device(params.empty() ? at::Device(at::kCPU) : params.front().second.device());
  for (const auto& [name, param] : params) {
    param.copy_(
        read_parameter(reader, dir, name, param.sizes(), param.scalar_type(), model.args(), to_device, logged_cast));
  }
}

std::shared_ptr<Transformer> load_pretrained(const std::filesystem::path& dir, at::Device device, at::ScalarType dtype,
                                             BaseQuantization quantize, RoundingResiduals* residuals) {
  ModelArgs args = load_hf_config(dir);
  args.torch_dtype = dtype_name(dtype);
  auto model = std::make_shared<Transformer>(args);
  load_onto(*model, dir, device, dtype, quantize, residuals);
  return model;
}

void init_weights(Transformer& model, double std, uint64_t seed, std::optional<c10::Device> device,
                  std::optional<at::ScalarType> dtype, BaseQuantization quantize, RoundingResiduals* residuals) {
  const c10::Device where = device.value_or(c10::Device(at::kCPU));
  at::Generator gen = seeded_generator(where, seed);
  ParameterPlacer placer(model, quantize);
  at::NoGradGuard no_grad;
  for (const auto& [name, param] : base_parameters(model)) {
    const auto options = at::TensorOptions().device(where).dtype(dtype.value_or(param.scalar_type()));
    at::Tensor value;
    if (name.size() >= 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0) {
      value = model.args().gemma ? at::zeros(param.sizes(), options) : at::ones(param.sizes(), options);  // 1 + w
    } else if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      value = at::zeros(param.sizes(), options);
    } else {
      // Drawn in F32 and rounded once, as an F32 model cast to `dtype` afterwards would be.
      const at::Tensor drawn = at::empty(param.sizes(), options.dtype(at::kFloat)).normal_(0.0, std, gen);
      value = drawn.to(options.dtype());
      if (!placer.quantizes(name)) keep_residual(residuals, name, drawn, value);
    }
    if (!device && !dtype && !placer.quantizes(name)) {
      param.copy_(value);
    } else {  // new storage where the run needs it (the CPU copy was never written), or the codes of the value
      placer.place(name, param, value, value.scalar_type());
    }
  }
}

ModelFiles pretrained_files(const Transformer& model) {
  // Under the released checkpoints' names (the experts one tensor each), which every transformers version reads.
  ModelFiles files{{}, model.args(), nullptr};
  for (const auto& [name, value] : base_parameters(model)) {
    for (auto& part : split_for_checkpoint(name, value, model.args())) files.tensors.push_back(std::move(part));
  }
  files.tensors.insert(files.tensors.end(), model.passthrough.begin(), model.passthrough.end());
  FT_CHECK(!files.tensors.empty(), "save_pretrained: model has no parameters");
  return files;
}

FileDigests write_model_files(const ModelFiles& files, const std::filesystem::path& dir, int64_t shard_size_bytes) {
  std::filesystem::create_directories(dir);
  if (!files.adapter_config.is_null()) {
    const auto weights = dir / "adapter_model.safetensors";
    FileDigests digests{
        {weights, io::write_safetensors(weights, io::TensorMap(files.tensors.begin(), files.tensors.end()))}};
    ft::write_file(dir / "adapter_config.json", files.adapter_config.dump(2) + "\n");
    return digests;
  }
  ModelArgs args = files.args;
  args.torch_dtype = dtype_name(files.tensors.front().second.scalar_type());
  FileDigests digests = io::write_checkpoint(dir, files.tensors, shard_size_bytes);
  save_hf_config(args, dir / "config.json");
  // A base model's own generation_config.json (sampling defaults, several EOS ids) replaces this one when its
  // tokenizer files are copied after.
  save_generation_config(args, dir / "generation_config.json");
  return digests;
}

void save_pretrained(const Transformer& model, const std::filesystem::path& dir, int64_t shard_size_bytes) {
  write_model_files(pretrained_files(model), dir, shard_size_bytes);
}

}  // namespace ft::model
