#include "support/torch_reference.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "support/scratch_dir.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

void flatten(const nlohmann::json& j, std::vector<float>& values, std::vector<int64_t>& shape, size_t depth) {
  if (j.is_array()) {
    if (shape.size() <= depth) shape.push_back(static_cast<int64_t>(j.size()));
    for (const auto& x : j) flatten(x, values, shape, depth + 1);
  } else {
    values.push_back(static_cast<float>(j.get<double>()));
  }
}

nlohmann::json nest(const float* data, at::IntArrayRef sizes, size_t dim, int64_t& offset) {
  if (dim == sizes.size()) return static_cast<double>(data[offset++]);
  nlohmann::json arr = nlohmann::json::array();
  for (int64_t i = 0; i < sizes[dim]; ++i) arr.push_back(nest(data, sizes, dim + 1, offset));
  return arr;
}

}  // namespace

nlohmann::json run_reference(const std::string& mode, const nlohmann::json& input) {
  ScratchDir dir("ft-train-ref");
  write_file(dir / "in.json", input.dump());
  const std::string script = (source_dir() / "tests" / "support" / "ref" / "torch_ref.py").string();
  const std::string py = python();
  const auto result = run(shell_quote(py) + " " + shell_quote(script) + " " + mode + " " +
                          shell_quote((dir / "in.json").string()) + " " + shell_quote((dir / "out.json").string()));
  if (result.exit_code != 0) {
    ADD_FAILURE() << "reference " << mode << " failed: " << result.output;
    return nullptr;
  }
  return nlohmann::json::parse(read_file(dir / "out.json"));
}

nlohmann::json to_json(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kCPU, at::kFloat).contiguous();
  int64_t offset = 0;
  return nest(c.data_ptr<float>(), c.sizes(), 0, offset);
}

at::Tensor from_json(const nlohmann::json& j) {
  std::vector<float> values;
  std::vector<int64_t> shape;
  flatten(j, values, shape, 0);
  return at::tensor(values, at::kFloat).reshape(shape);
}

double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.detach().to(at::kDouble), y = b.detach().to(at::kDouble);
  return ((x - y).abs() / y.abs().clamp_min(1e-6)).max().item<double>();
}

}  // namespace ft::test
