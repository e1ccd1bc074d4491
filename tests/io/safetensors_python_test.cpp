// Interoperability with the reference Python safetensors library, both directions.
#include <gtest/gtest.h>

#include <cstdlib>

#include "io/safetensors.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

TEST(SafetensorsPython, FilesRoundTripWithThePythonLibrary) {
  TempDir dir;
  io::write_safetensors(dir / "ours.safetensors",
                        {{"f32", at::arange(6, at::kFloat).view({2, 3})},
                         {"bf16", at::arange(4, at::kFloat).to(at::kBFloat16)},
                         {"f16", at::arange(3, at::kFloat).to(at::kHalf)},
                         {"i64", at::arange(5, at::kLong)}});
  const std::string script = R"PY(
import sys, torch
from safetensors import safe_open
from safetensors.torch import save_file
d = sys.argv[1]
with safe_open(d + "/ours.safetensors", "pt") as f:
    assert f.metadata() == {"format": "pt"}, f.metadata()
    t = {k: f.get_tensor(k) for k in f.keys()}
assert torch.equal(t["f32"], torch.arange(6.).view(2, 3))
assert t["bf16"].dtype == torch.bfloat16 and torch.equal(t["bf16"].float(), torch.arange(4.))
assert t["f16"].dtype == torch.float16 and torch.equal(t["f16"].float(), torch.arange(3.))
assert torch.equal(t["i64"], torch.arange(5))
save_file({"z": torch.arange(7.).to(torch.bfloat16), "y": torch.arange(3, dtype=torch.int32),
           "x": torch.linspace(0, 1, 5, dtype=torch.float16).view(5, 1)}, d + "/theirs.safetensors",
          metadata={"format": "pt"})
print("ok")
)PY";
  write_file(dir / "check.py", script);
  const char* py = std::getenv("FT_PYTHON");  // CTest may pass only the first ENVIRONMENT entry
  const std::string python_exe = py != nullptr && *py != '\0' ? std::string(py) : std::string(FT_IO_TEST_PYTHON);
  const auto r = run(python_exe + " " + shell_quote((dir / "check.py").string()) + " " + shell_quote(dir.path().string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto theirs = io::read_safetensors(dir / "theirs.safetensors");
  EXPECT_TRUE(at::equal(theirs.at("z"), at::arange(7, at::kFloat).to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(theirs.at("y"), at::arange(3, at::kInt)));
  EXPECT_EQ(theirs.at("x").sizes(), (std::vector<int64_t>{5, 1}));
  EXPECT_TRUE(at::equal(theirs.at("x"), at::linspace(0, 1, 5).to(at::kHalf).view({5, 1})));
}

}  // namespace
}  // namespace ft::test
