// Whether this thread is rerunning a checkpointed layer's forward inside that layer's backward (activation
// checkpointing, model/activation_checkpointing.cpp). The GEMMs over frozen quantized weights read it: outside a
// recompute they keep only the codes for backward (all layers' dense weights would not fit), inside one they keep
// the dequantized weight, since that layer's backward follows at once. So a checkpointed layer dequantizes each
// weight twice per step (forward, recompute) instead of three times, holding one layer's dense weights at a time.
// The NF4 base's FP8 GEMMs (model.nf4_compute: fp8) convert the codes in each pass instead: their backward needs the
// codes transposed, and converting the NF4 codes into that layout costs no more than transposing kept FP8 codes.
// Per thread, as grad mode is: the recompute and the backward that reads the flag run on the same thread.
#pragma once

namespace ft::model {

bool recomputing();

// Marks the scope as a recompute; the previous state after.
class RecomputeScope {
 public:
  RecomputeScope();
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  bool previous_;
};

}  // namespace ft::model
