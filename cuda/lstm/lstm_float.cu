// The LSTM's drivers for float and double storage (sequence.cuh, stack.cuh).
#include "stack.cuh"

namespace fastlayers {
namespace lstm {

FL_LSTM_INSTANTIATE(float)
FL_LSTM_STACK_INSTANTIATE(float)
FL_LSTM_INSTANTIATE(double)
FL_LSTM_STACK_INSTANTIATE(double)

}  // namespace lstm
}  // namespace fastlayers
