// The LSTM's drivers for float and double storage (sequence.cuh).
#include "sequence.cuh"

namespace fastlayers {
namespace lstm {

FL_LSTM_INSTANTIATE(float)
FL_LSTM_INSTANTIATE(double)

}  // namespace lstm
}  // namespace fastlayers
