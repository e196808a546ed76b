// The three passes of a convolution, shared by the host side (csrc/) and the device side (cuda/):
// each pass is its own op, so the tuner can choose an algorithm per pass.
#pragma once

namespace fastlayers {

enum class Pass : int { Forward = 0, InputGrad = 1, WeightGrad = 2 };

}  // namespace fastlayers
