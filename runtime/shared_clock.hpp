// The time base of real-time runs (one process or deployed): the wall clock, nanoseconds since
// the Unix epoch. Times cross actors and hosts (the schedule's epoch, a delta's merge deadline,
// send stamps), and CAF's clock is each host's steady clock, whose zero is that host's boot.
// The wall clock is the one time base NTP-synchronised hosts share (docs/deploy.md).
#pragma once

#include <chrono>
#include <cstdint>

namespace diloco {

inline int64_t shared_clock_ns() {
  return std::chrono::system_clock::now().time_since_epoch() / std::chrono::nanoseconds(1);
}

}  // namespace diloco
