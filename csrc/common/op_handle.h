// A fastlayers op's typed handle, for host code that calls ops through the dispatcher (so that
// autograd, autocast and torch.compile see the calls). Find it once and keep it (a static): the
// lookup takes the dispatcher's lock.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace fastlayers {

// `name`: "fastlayers::<op>"; `Sig`: the C++ signature of its schema (csrc/fastlayers.cpp).
template <typename Sig>
c10::TypedOperatorHandle<Sig> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

}  // namespace fastlayers
