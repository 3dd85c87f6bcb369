// Catch2 for the tests, whichever major version the system has: Debian 12 ships Catch2 2, Debian
// 13 (and Ubuntu 24.04) Catch2 3. The tests are written against the names both share; this header
// supplies the three that moved in 3 (Approx, the substring matcher, the matcher base).
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>

#include <string>

using Catch::Approx;
namespace Catch {
// Catch2 2's Catch::Contains(std::string): Catch2 3 calls it Matchers::ContainsSubstring.
inline Matchers::StringContainsMatcher Contains(const std::string& text,
                                                CaseSensitive sensitivity = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(text, sensitivity);
}
template <class T>
using MatcherBase = Matchers::MatcherBase<T>;
}  // namespace Catch
#else
#include <catch2/catch.hpp>
#endif
