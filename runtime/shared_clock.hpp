// The time base of real-time runs (one process or deployed): the wall clock, nanoseconds since
// the Unix epoch. Times cross actors and hosts (the schedule's epoch, a delta's merge deadline,
// send stamps), and CAF's clock is each host's steady clock, whose zero is that host's boot.
// The wall clock is the one time base NTP-synchronised hosts share (docs/deploy.md); a deployed
// node measures how far its own is from the leader's when it joins and follows the leader's
// from then on (set_shared_clock_offset), so a host whose clock is off does not skew the run.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>

namespace diloco {

namespace detail {
// Added to the wall clock: the leader's minus this host's, as measured (0 until then).
inline std::atomic<int64_t>& shared_clock_offset() {
  static std::atomic<int64_t> offset{0};
  return offset;
}
// Fault injection for tests: DILOCO_DEBUG_CLOCK_SKEW_S puts this process's wall clock that many
// seconds off, as a host whose clock is wrong would be.
inline int64_t debug_clock_skew_ns() {
  static const int64_t skew = [] {
    const char* v = std::getenv("DILOCO_DEBUG_CLOCK_SKEW_S");
    return v != nullptr ? static_cast<int64_t>(std::atof(v) * 1e9) : int64_t{0};
  }();
  return skew;
}
}  // namespace detail

// This host's wall clock (with the test skew, if any), not corrected.
inline int64_t host_clock_ns() {
  return std::chrono::system_clock::now().time_since_epoch() / std::chrono::nanoseconds(1) +
         detail::debug_clock_skew_ns();
}

// The run's time: this host's wall clock, corrected to the leader's on a deployed node.
inline int64_t shared_clock_ns() {
  return host_clock_ns() + detail::shared_clock_offset().load(std::memory_order_relaxed);
}

inline void set_shared_clock_offset(int64_t ns) {
  detail::shared_clock_offset().store(ns, std::memory_order_relaxed);
}

// The latest check of this node's run time against the leader's (a deployed node that is not
// the leader checks at every heartbeat): what the correction at its join no longer covers (the
// leader's time minus this node's run time, the drift since), within `error_ns` (half the
// round trip). For /metrics (diloco_clock_*).
struct clock_check {
  bool measured = false;
  int64_t residual_ns = 0;
  int64_t error_ns = 0;
};
namespace detail {
inline std::atomic<int64_t>& clock_residual() {
  static std::atomic<int64_t> v{0};
  return v;
}
inline std::atomic<int64_t>& clock_error() {
  static std::atomic<int64_t> v{-1};  // < 0: not measured
  return v;
}
}  // namespace detail
inline void record_clock_check(int64_t residual_ns, int64_t error_ns) {
  detail::clock_residual().store(residual_ns, std::memory_order_relaxed);
  detail::clock_error().store(error_ns, std::memory_order_relaxed);
}
inline clock_check last_clock_check() {
  clock_check c;
  c.error_ns = detail::clock_error().load(std::memory_order_relaxed);
  c.measured = c.error_ns >= 0;
  c.residual_ns = detail::clock_residual().load(std::memory_order_relaxed);
  return c;
}

}  // namespace diloco
