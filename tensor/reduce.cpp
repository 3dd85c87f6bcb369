#include "tensor/reduce.hpp"

#include <Eigen/Core>
#include <algorithm>

namespace diloco {

double sum_squares(cfspan values) {
  constexpr size_t block_floats = 4096;
  double total = 0.0;
  for (size_t b = 0; b < values.size(); b += block_floats) {
    const size_t n = std::min(block_floats, values.size() - b);
    total += static_cast<double>(
        Eigen::Map<const Eigen::VectorXf>(values.data() + b, static_cast<Eigen::Index>(n))
            .squaredNorm());
  }
  return total;
}

}  // namespace diloco
