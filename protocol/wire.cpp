#include "protocol/wire.hpp"

#include <tuple>
#include <type_traits>

#include "base/check.hpp"
#include "protocol/digest.hpp"
#include "protocol/messages.hpp"
#include "protocol/persist.hpp"

namespace diloco {

namespace {

// Append only: a type's position is its tag in files.
using wire_types =
    std::tuple<join_msg, schedule_msg, outer_gradient_msg, fragment_update_msg, pull_msg,
               gradient_msg, reduced_gradient_msg, progress_msg, stop_msg, flushed_msg, step_tick,
               grace_tick, fault_tick, chaos_tick, capacity_msg, deadline_tick, leave_msg, peer_msg,
               copy_request, copy_msg, recovery_tick, membership_tick, shard_tick, kill_msg,
               restart_msg, closed_msg, snapshot_request, snapshot_tick, start_msg, merge_msg,
               diverged_msg, service_tick, pace_msg>;
constexpr size_t wire_count = std::tuple_size_v<wire_types>;

template <size_t I = 0, class Fn>
bool visit_known(const caf::message& msg, Fn&& fn) {
  if constexpr (I == wire_count) {
    return false;
  } else {
    using T = std::tuple_element_t<I, wire_types>;
    if (msg.size() == 1 && msg.match_element<T>(0)) {
      fn(std::integral_constant<size_t, I>{}, msg.get_as<T>(0));
      return true;
    }
    return visit_known<I + 1>(msg, std::forward<Fn>(fn));
  }
}

template <size_t I = 0, class Fn>
bool visit_tag(size_t tag, Fn&& fn) {
  if constexpr (I == wire_count) {
    return false;
  } else {
    if (tag == I) {
      fn(std::tuple_element_t<I, wire_types>{});
      return true;
    }
    return visit_tag<I + 1>(tag, std::forward<Fn>(fn));
  }
}

// The name a type gives itself in its inspect function.
struct name_of {
  using result_type = bool;
  static constexpr bool reads_state = true;
  static constexpr bool writes_state = false;
  std::string name;
  template <class... Ts>
  bool operator()(Ts&&... xs) {
    (take(xs), ...);
    return true;
  }
  void take(caf::meta::type_name_t t) { name = t.value; }
  template <class T>
  void take(T&) {}
};

template <class T, class = void>
struct stamped : std::false_type {};
template <class T>
struct stamped<T, std::void_t<decltype(std::declval<T&>().st)>>
    : std::is_same<decltype(std::declval<T&>().st), stamp> {};

}  // namespace

template <class F>
void persist_fields(F& f, wire_message& x) {
  if constexpr (F::loading) {
    uint16_t tag = 0;
    f(tag);
    const bool known = visit_tag(tag, [&](auto value) {
      f(value);
      x.msg = caf::make_message(std::move(value));
    });
    if (!known) throw persist_error{"unknown message type tag " + std::to_string(tag)};
  } else {
    const bool known = visit_known(x.msg, [&](auto tag_constant, const auto& value) {
      auto tag = static_cast<uint16_t>(decltype(tag_constant)::value);
      f(tag);
      f(const_cast<std::remove_const_t<std::remove_reference_t<decltype(value)>>&>(value));
    });
    if (!known) throw persist_error{"message of an unknown type: " + caf::to_string(x.msg)};
  }
}

template void persist_fields<persist_reader>(persist_reader&, wire_message&);
template void persist_fields<persist_writer>(persist_writer&, wire_message&);

bool wire_known(const caf::message& msg) {
  return visit_known(msg, [](auto, const auto&) {});
}

std::string wire_name(const caf::message& msg) {
  std::string name = "unknown";
  visit_known(msg, [&](auto, const auto& value) {
    name_of n;
    inspect(n, const_cast<std::remove_const_t<std::remove_reference_t<decltype(value)>>&>(value));
    name = n.name;
  });
  return name;
}

uint64_t wire_digest(const caf::message& msg) {
  uint64_t d = 0;
  visit_known(msg, [&](auto, const auto& value) { d = message_digest(value); });
  return d;
}

int wire_tag(const caf::message& msg) {
  int tag = -1;
  visit_known(msg, [&](auto tag_constant, const auto&) {
    tag = static_cast<int>(decltype(tag_constant)::value);
  });
  return tag;
}

std::string wire_tag_name(int tag) {
  std::string name = "unknown";
  if (tag < 0) return name;
  visit_tag(static_cast<size_t>(tag), [&](auto value) {
    name_of n;
    inspect(n, value);
    name = n.name;
  });
  return name;
}

caf::message wire_with_stamp(const caf::message& msg, const stamp* st) {
  caf::message out = msg;
  visit_known(msg, [&](auto, const auto& value) {
    using T = std::remove_const_t<std::remove_reference_t<decltype(value)>>;
    if constexpr (stamped<T>::value) {
      T copy = value;
      copy.st = st != nullptr ? *st : stamp{};
      out = caf::make_message(std::move(copy));
    }
  });
  DILOCO_CHECK(wire_tag(out) == wire_tag(msg), "wire_with_stamp: the same kind of message");
  return out;
}

const stamp* wire_stamp(const caf::message& msg) {
  const stamp* s = nullptr;
  visit_known(msg, [&](auto, const auto& value) {
    using T = std::remove_const_t<std::remove_reference_t<decltype(value)>>;
    if constexpr (stamped<T>::value) s = &value.st;
  });
  return s;
}

}  // namespace diloco
