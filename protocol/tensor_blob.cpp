#include "protocol/tensor_blob.hpp"

#include <atomic>

namespace diloco {

namespace {
std::atomic<tensor_blob::resolver> the_resolver{nullptr};
}  // namespace

void tensor_blob::set_resolver(resolver r) {
  the_resolver.store(r);
}

tensor_blob::bytes_ptr tensor_blob::resolve(uint64_t id, uint64_t size) {
  const resolver r = the_resolver.load();
  return r != nullptr ? r(id, size) : nullptr;
}

}  // namespace diloco
