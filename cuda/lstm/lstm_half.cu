// The LSTM's drivers for float16 and bfloat16 storage (sequence.cuh, stack.cuh).
#include "stack.cuh"

namespace fastlayers {
namespace lstm {

FL_LSTM_INSTANTIATE(__half)
FL_LSTM_STACK_INSTANTIATE(__half)
FL_LSTM_INSTANTIATE(__nv_bfloat16)
FL_LSTM_STACK_INSTANTIATE(__nv_bfloat16)

}  // namespace lstm
}  // namespace fastlayers
