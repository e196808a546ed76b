// fastlayers._C.Conv2dPlan: the eager call of fastlayers.Conv2d / Conv1d once the tuner has chosen
// each pass's algorithm (csrc/conv_module/conv_module.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace fastlayers {
namespace conv_module {

// Defines the class Conv2dPlan on `m`, the module fastlayers._C.
void bind(pybind11::module_& m);

}  // namespace conv_module
}  // namespace fastlayers
