// fastlayers._C.lstm_call and lstm_stack_call: the eager calls of fastlayers.LSTM's layers, one
// C++ autograd node per op call (csrc/lstm/lstm_eager.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace fastlayers {
namespace lstm_host {

// Defines lstm_call and lstm_stack_call on `m`, the module fastlayers._C.
void bind_eager(pybind11::module_& m);

}  // namespace lstm_host
}  // namespace fastlayers
