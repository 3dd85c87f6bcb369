// Every registered message and report type: its `inspect` visits every field (checked against
// the struct's memory layout, so a field added to a struct and forgotten in its `inspect` fails
// here), and a value with a non-default value in every field it can hold survives CAF's binary
// serialization unchanged.
//
// The layout check: the fields `inspect` visits, sorted by address, must tile the struct with
// only the padding the compiler must insert between them. A forgotten field leaves a hole. (A
// forgotten bool that sits in padding the next field's alignment requires anyway cannot be
// seen this way; the round trip below then still checks every field `inspect` names.)
#include <caf/actor_system.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include "tests/catch.hpp"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "protocol/type_ids.hpp"

using namespace diloco;

namespace {

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};

template <class T>
constexpr bool is_annotation_v =
    std::is_same_v<T, caf::meta::type_name_t> || std::is_base_of_v<caf::meta::annotation, T>;

// Records the address range of every field an `inspect` visits (top level only).
struct layout_probe {
  using result_type = caf::error;
  static constexpr bool reads_state = true;
  static constexpr bool writes_state = false;
  struct span_of {
    size_t begin, size, align;
  };
  const char* base = nullptr;
  std::vector<span_of> fields;

  template <class... Ts>
  result_type operator()(Ts&&... xs) {
    (visit(xs), ...);
    return {};
  }
  template <class T>
  void visit(T& x) {
    using U = std::remove_const_t<T>;
    if constexpr (!is_annotation_v<U>) {
      const auto* p = reinterpret_cast<const char*>(&x);
      fields.push_back({static_cast<size_t>(p - base), sizeof(U), alignof(U)});
    }
  }
};

size_t align_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

// An empty string when the visited fields tile T; otherwise where the hole is.
template <class T>
std::string layout_gaps(T& value) {
  if constexpr (std::is_empty_v<T>) return {};  // a tag type: nothing to visit
  layout_probe probe;
  probe.base = reinterpret_cast<const char*>(&value);
  inspect(probe, value);
  auto fields = probe.fields;
  std::sort(fields.begin(), fields.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  size_t end = 0;
  std::string gaps;
  for (const auto& f : fields) {
    if (f.begin != align_up(end, f.align))
      gaps += " bytes [" + std::to_string(end) + ", " + std::to_string(f.begin) + ")";
    end = f.begin + f.size;
  }
  if (align_up(end, alignof(T)) != sizeof(T))
    gaps += " bytes [" + std::to_string(end) + ", " + std::to_string(sizeof(T)) + ")";
  return gaps;
}

// Gives every field a value other than its default: numbers count up from a seed, booleans
// are true, strings and vectors get content, nested types are filled the same way.
struct filler {
  using result_type = caf::error;
  static constexpr bool reads_state = false;
  static constexpr bool writes_state = true;
  uint64_t next = 1;

  template <class... Ts>
  result_type operator()(Ts&&... xs) {
    (fill(xs), ...);
    return {};
  }
  template <class T>
  void fill(T& x) {
    using U = std::remove_const_t<T>;
    if constexpr (is_annotation_v<U>) {
      // names only
    } else if constexpr (std::is_same_v<U, bool>) {
      x = true;
    } else if constexpr (std::is_enum_v<U>) {
      x = static_cast<U>(1);
    } else if constexpr (std::is_floating_point_v<U>) {
      x = static_cast<U>(next++) + static_cast<U>(0.25);
    } else if constexpr (std::is_arithmetic_v<U>) {
      x = static_cast<U>(next++ % 100 + 1);
    } else if constexpr (std::is_same_v<U, std::string>) {
      x = "s" + std::to_string(next++);
    } else if constexpr (std::is_same_v<U, vector_clock>) {
      x = vector_clock({next, next + 1, next + 2});
      next += 3;
    } else if constexpr (std::is_same_v<U, tensor_blob>) {
      std::vector<uint8_t> bytes(16 + next % 7);
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(next + i);
      ++next;
      x = tensor_blob(bytes);
    } else if constexpr (is_vector<U>::value) {
      using E = typename U::value_type;
      if constexpr (std::is_same_v<E, bool>) {
        x = {true, false, true};
      } else if constexpr (std::is_default_constructible_v<E> && !caf::is_typed_actor<E>::value &&
                           !std::is_same_v<E, caf::actor>) {
        x.resize(2);
        for (auto& e : x) fill(e);
      }
    } else if constexpr (caf::is_typed_actor<U>::value || std::is_same_v<U, caf::actor>) {
      // handles need a running actor: left empty
    } else {
      inspect(*this, x);
    }
  }
};

// The types of the registered block, in order.
template <class F, size_t... I>
void each_registered(F&& f, std::index_sequence<I...>) {
  (f(typename caf::type_by_id<caf::id_block::diloco::begin + I>::type{}), ...);
}

struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  system_fixture() {
    register_protocol(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  template <class T>
  std::vector<char> bytes_of(T& value) {
    std::vector<char> buf;
    caf::binary_serializer sink{*sys, buf};
    REQUIRE_FALSE(sink(value));
    return buf;
  }
};

constexpr size_t registered = caf::id_block::diloco::end - caf::id_block::diloco::begin;

}  // namespace

TEST_CASE("messages: every inspect visits every field of its struct") {
  size_t checked = 0;
  each_registered(
      [&](auto value) {
        using T = decltype(value);
        if constexpr (!caf::is_typed_actor<T>::value) {
          const std::string gaps = layout_gaps(value);
          INFO(caf::type_name<T>::value << ": fields its inspect does not visit at" << gaps);
          CHECK(gaps.empty());
          ++checked;
        }
      },
      std::make_index_sequence<registered>{});
  CHECK(checked >= 40);
}

TEST_CASE("messages: every type round-trips with a non-default value in every field") {
  system_fixture fx;
  size_t checked = 0;
  each_registered(
      [&](auto value) {
        using T = decltype(value);
        if constexpr (!caf::is_typed_actor<T>::value) {
          const T fresh{};
          T full{};
          filler fill;
          inspect(fill, full);
          INFO(caf::type_name<T>::value);
          const auto bytes = fx.bytes_of(full);
          // Filled differs from default wherever the type has a field at all.
          if (fill.next > 1) CHECK(bytes != fx.bytes_of(const_cast<T&>(fresh)));
          T back{};
          caf::binary_deserializer source{*fx.sys, bytes};
          REQUIRE_FALSE(source(back));
          CHECK(fx.bytes_of(back) == bytes);
          ++checked;
        }
      },
      std::make_index_sequence<registered>{});
  CHECK(checked >= 40);
}
