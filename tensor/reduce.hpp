// Reductions over float spans that every part of the numerics shares: vectorized, blocked so
// float partial sums stay accurate, and in a fixed order so results repeat bit for bit.
#pragma once

#include "base/span.hpp"

namespace diloco {

// Sum of squares, accumulated per 4096-value block in float (SIMD) and across blocks in double.
// Non-finite exactly when some value is NaN or Inf (or the squares overflow).
double sum_squares(cfspan values);

}  // namespace diloco
