#include "protocol/tensor_blob.hpp"

namespace diloco {

const std::vector<uint8_t>& tensor_blob::empty_bytes() {
  static const std::vector<uint8_t> empty;
  return empty;
}

}  // namespace diloco
