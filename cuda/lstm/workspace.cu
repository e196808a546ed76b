// Workspace sizes of the LSTM's drivers (sequence.cuh's carving, in the same order).
#include "lstm.h"

namespace fastlayers {
namespace lstm {
namespace {

size_t piece(int64_t count, int bytes) {
  return (static_cast<size_t>(count) * bytes + 255) & ~size_t{255};
}

}  // namespace

size_t forward_state_bytes(const Steps& s, int t_bytes, int a_bytes) {
  return kRowsBytes + 3 * piece(kMaxInputChunks, static_cast<int>(sizeof(void*))) +
         piece(s.B * 4 * s.H, a_bytes) + piece(s.B * s.H, a_bytes) + 2 * piece(s.B * s.R, t_bytes) +
         (s.proj ? piece(s.B * s.H, t_bytes) : 0);
}

size_t backward_state_bytes(const Steps& s, int t_bytes, int a_bytes) {
  return kRowsBytes + piece(s.B * 4 * s.H, t_bytes) + piece(kBackwardDhParts * s.B * s.R, a_bytes) +
         piece(s.B * s.H, a_bytes) +
         (s.proj ? piece(s.B * s.R, t_bytes) + piece(s.B * s.H, a_bytes) : 0);
}

size_t forward_workspace(const Steps& s, int t_bytes, int a_bytes) {
  return piece(s.N * 4 * s.H, a_bytes) + forward_state_bytes(s, t_bytes, a_bytes);
}

size_t backward_workspace(const Steps& s, int t_bytes, int a_bytes) {
  return piece(s.N * 4 * s.H, t_bytes) + piece(s.N, t_bytes) +
         (s.proj ? piece(s.N * s.R, t_bytes) : 0) + backward_state_bytes(s, t_bytes, a_bytes);
}

size_t stack_state_bytes(const Steps& s, int L, int t_bytes, int a_bytes) {
  const int64_t waves = s.T + L - 1, problems = 2 * static_cast<int64_t>(L);
  return kRowsBytes + 3 * piece(waves * problems, static_cast<int>(sizeof(void*))) +
         2 * piece(L * s.B * 4 * s.H, a_bytes) + piece(L * s.B * s.H, a_bytes) +
         piece(L * s.B * s.H, t_bytes);
}

size_t stack_workspace(const Steps& s, int L, int t_bytes, int a_bytes) {
  return piece(s.N * 4 * s.H, a_bytes) + stack_state_bytes(s, L, t_bytes, a_bytes);
}

}  // namespace lstm
}  // namespace fastlayers
