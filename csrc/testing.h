// fastlayers._C.testing: the test and benchmark hooks (csrc/testing.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace fastlayers {
namespace testing {

// Defines the hooks on `m`, the submodule _C.testing.
void bind(pybind11::module_& m);

}  // namespace testing
}  // namespace fastlayers
