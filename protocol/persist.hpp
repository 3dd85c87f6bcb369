// Binary persistence of the project's types with Cereal (portable binary archives), for
// snapshot files and replay tapes.
//
// One field list serves both directions: a type describes itself once, with CAF's
// `inspect(f, x)` (messages) or with `persist_fields(f, x)` (actor state), and `persist_io`
// walks it to save or to load. Loading trusts nothing: every length is checked against the
// bytes that remain before anything is allocated, and a short or malformed input is an error
// with the byte position, never a crash. (Files are also checksummed, see checkpoint/frame.hpp,
// so this is the second line of defence.)
//
// Include this only in .cpp files: Cereal's headers are heavy.
#pragma once

#include <caf/meta/annotation.hpp>
#include <caf/meta/type_name.hpp>
#include <cereal/archives/portable_binary.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <streambuf>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/slot_map.hpp"
#include "base/status.hpp"
#include "protocol/tensor_blob.hpp"
#include "protocol/vector_clock.hpp"
#include "tensor/params.hpp"
#include "tensor/rng.hpp"

namespace diloco {

// Thrown inside persist_io on bad input; load_bytes turns it into a status.
struct persist_error {
  std::string what;
};

// Tensor blobs stored apart from the records that carry them (replay tapes): a record holds
// the blob's key, the table holds each blob once. Saving puts, loading looks up.
class blob_refs {
 public:
  virtual ~blob_refs() = default;
  virtual uint64_t put(const tensor_blob& blob) = 0;
  // nullptr when the key is unknown.
  virtual const tensor_blob* get(uint64_t key) const = 0;
};

namespace detail {

// A read-only streambuf over bytes in memory (no copy), which knows its position.
class memory_source : public std::streambuf {
 public:
  explicit memory_source(byte_view bytes) {
    char* p = const_cast<char*>(reinterpret_cast<const char*>(bytes.data()));
    setg(p, p, p + bytes.size());
  }
  size_t consumed() const { return static_cast<size_t>(gptr() - eback()); }
  size_t remaining() const { return static_cast<size_t>(egptr() - gptr()); }
  const uint8_t* current() const { return reinterpret_cast<const uint8_t*>(gptr()); }
  void skip(size_t n) { gbump(static_cast<int>(n)); }
};

// A streambuf appending to a byte vector.
class vector_sink : public std::streambuf {
 public:
  explicit vector_sink(std::vector<uint8_t>& out) : out_(out) {}

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) out_.push_back(static_cast<uint8_t>(c));
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    out_.insert(out_.end(), reinterpret_cast<const uint8_t*>(s),
                reinterpret_cast<const uint8_t*>(s) + n);
    return n;
  }

 private:
  std::vector<uint8_t>& out_;
};

// A streambuf that keeps what is written as pieces (tensor blobs) instead of one growing
// vector: small writes gather in a piece; a write of `large_bytes` or more becomes a piece of
// its own, allocated once at its size, and a byte vector handed over whole (`adopt`) is kept
// without a copy. A model-sized save then costs one copy of the model, not the two or three a
// doubling vector moves (snapshot parts, runtime/snapshot.hpp).
class piece_sink : public std::streambuf {
 public:
  static constexpr size_t large_bytes = size_t{1} << 20;

  void adopt(std::vector<uint8_t>&& bytes) {
    close_small();
    if (!bytes.empty()) pieces_.emplace_back(std::move(bytes));
  }
  std::vector<tensor_blob> take() {
    close_small();
    return std::move(pieces_);
  }

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) small_.push_back(static_cast<uint8_t>(c));
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const auto* p = reinterpret_cast<const uint8_t*>(s);
    if (static_cast<size_t>(n) >= large_bytes) {
      close_small();
      pieces_.emplace_back(std::vector<uint8_t>(p, p + n));
    } else {
      small_.insert(small_.end(), p, p + n);
    }
    return n;
  }

 private:
  void close_small() {
    if (small_.empty()) return;
    pieces_.emplace_back(std::move(small_));
    small_ = {};
  }
  std::vector<uint8_t> small_;
  std::vector<tensor_blob> pieces_;
};

// A streambuf that only counts (the exact size of a save before it is made).
class counting_sink : public std::streambuf {
 public:
  uint64_t bytes = 0;

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) ++bytes;
    return c;
  }
  std::streamsize xsputn(const char*, std::streamsize n) override {
    bytes += static_cast<uint64_t>(n);
    return n;
  }
};

template <class T, class F, class = void>
struct has_inspect : std::false_type {};
template <class T, class F>
struct has_inspect<T, F, std::void_t<decltype(inspect(std::declval<F&>(), std::declval<T&>()))>>
    : std::true_type {};

template <class T, class F, class = void>
struct has_persist_fields : std::false_type {};
template <class T, class F>
struct has_persist_fields<
    T, F, std::void_t<decltype(persist_fields(std::declval<F&>(), std::declval<T&>()))>>
    : std::true_type {};

// The archive's byte order (cereal's portable binary: little-endian) is this host's: its
// numbers can be read from memory as they are.
constexpr bool archive_byte_order = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

// Elements of type T read from bytes at any alignment (a random-access iterator for
// std::vector's range insert, which then writes each element once).
template <class T>
class unaligned_iterator {
 public:
  using iterator_category = std::random_access_iterator_tag;
  using value_type = T;
  using difference_type = std::ptrdiff_t;
  using pointer = const T*;
  using reference = T;
  explicit unaligned_iterator(const uint8_t* at) : at_(at) {}
  T operator*() const {
    T v;
    std::memcpy(&v, at_, sizeof(T));
    return v;
  }
  T operator[](difference_type k) const { return *(*this + k); }
  unaligned_iterator& operator++() { return at_ += sizeof(T), *this; }
  unaligned_iterator operator++(int) {
    auto old = *this;
    ++*this;
    return old;
  }
  unaligned_iterator& operator--() { return at_ -= sizeof(T), *this; }
  unaligned_iterator& operator+=(difference_type k) { return at_ += k * sizeof(T), *this; }
  unaligned_iterator& operator-=(difference_type k) { return at_ -= k * sizeof(T), *this; }
  unaligned_iterator operator+(difference_type k) const { return unaligned_iterator(*this) += k; }
  unaligned_iterator operator-(difference_type k) const { return unaligned_iterator(*this) -= k; }
  difference_type operator-(const unaligned_iterator& o) const {
    return (at_ - o.at_) / static_cast<difference_type>(sizeof(T));
  }
  bool operator==(const unaligned_iterator& o) const { return at_ == o.at_; }
  bool operator!=(const unaligned_iterator& o) const { return at_ != o.at_; }
  bool operator<(const unaligned_iterator& o) const { return at_ < o.at_; }

 private:
  const uint8_t* at_;
};

template <class T>
struct is_std_vector : std::false_type {};
template <class T, class A>
struct is_std_vector<std::vector<T, A>> : std::true_type {};

}  // namespace detail

// bytes_in_place (a byte vector's field read in place) is in protocol/tensor_blob.hpp.

// Loads made on this thread while one of these lives only check their input (structure, every
// length and count, every value that is not a model's numbers): a float buffer gets its size,
// unfilled, and its numbers are skipped, not copied. The state so loaded is for throwing
// away; a resume checks every part this way before it starts anything (actors/state_io.cpp,
// check_part), and the actors then load their parts once, in full.
class persist_check_scope {
 public:
  persist_check_scope() : was_(active()) { active() = true; }
  ~persist_check_scope() { active() = was_; }
  persist_check_scope(const persist_check_scope&) = delete;
  persist_check_scope& operator=(const persist_check_scope&) = delete;
  static bool& active() {
    static thread_local bool on = false;
    return on;
  }

 private:
  bool was_;
};

// Walks a value's fields, saving them to (Loading = false) or loading them from an archive.
template <bool Loading>
class persist_io {
 public:
  using archive_type = std::conditional_t<Loading, cereal::PortableBinaryInputArchive,
                                          cereal::PortableBinaryOutputArchive>;
  // What CAF's inspect functions look at: this is a (de)serializer, not a string converter.
  using result_type = bool;
  static constexpr bool reads_state = !Loading;
  static constexpr bool writes_state = Loading;
  static constexpr bool loading = Loading;

  persist_io(archive_type& ar, const detail::memory_source* source, blob_refs* refs = nullptr,
             detail::piece_sink* pieces = nullptr)
      : ar_(ar),
        source_(source),
        refs_(refs),
        pieces_(pieces),
        checking_(Loading && source != nullptr && persist_check_scope::active()) {}

  template <class... Ts>
  bool operator()(Ts&&... xs) {
    (field(xs), ...);
    return true;
  }

  // Loading from an input in memory (where bytes_in_place can view it).
  bool in_memory() const { return source_ != nullptr; }

  // Loading from memory: past `n` bytes of the input (checked by need() before).
  void skip(uint64_t n) {
    // gbump takes an int: a part of 2 GiB or more moves in steps.
    for (uint64_t left = n; left > 0;) {
      const uint64_t step = std::min<uint64_t>(left, uint64_t{1} << 30);
      const_cast<detail::memory_source*>(source_)->skip(static_cast<size_t>(step));
      left -= step;
    }
  }

  // Loading: fails unless `bytes` more bytes are there (checked before allocating).
  void need(uint64_t bytes) const {
    if constexpr (Loading) {
      if (source_ != nullptr && bytes > source_->remaining()) {
        throw persist_error{"a length of " + std::to_string(bytes) + " bytes runs past the end (" +
                            std::to_string(source_->remaining()) + " left)"};
      }
    }
  }

  // A count of elements of `element_bytes` each (at least 1 byte per element is assumed).
  uint64_t count(uint64_t n, uint64_t element_bytes) {
    ar_(n);
    if constexpr (Loading) need(n * std::max<uint64_t>(1, element_bytes));
    return n;
  }

  template <class T>
  void field(T& x) {
    using U = std::remove_const_t<T>;
    if constexpr (std::is_same_v<U, caf::meta::type_name_t> ||
                  std::is_base_of_v<caf::meta::annotation, U>) {
      // names and annotations are for CAF's string conversion
    } else if constexpr (std::is_enum_v<U>) {
      auto v = static_cast<std::underlying_type_t<U>>(x);
      ar_(v);
      if constexpr (Loading) x = static_cast<U>(v);
    } else if constexpr (std::is_arithmetic_v<U>) {
      ar_(const_cast<U&>(x));
    } else if constexpr (std::is_same_v<U, std::string>) {
      uint64_t n = count(x.size(), 1);
      if constexpr (Loading) x.resize(n);
      ar_(cereal::binary_data(const_cast<char*>(x.data()), n));
    } else if constexpr (detail::is_std_vector<U>::value) {
      using E = typename U::value_type;
      if constexpr (std::is_same_v<E, bool>) {
        uint64_t n = count(x.size(), 1);
        if constexpr (Loading) x.assign(n, false);
        for (uint64_t i = 0; i < n; ++i) {
          bool b = x[i];
          ar_(b);
          if constexpr (Loading) x[i] = b;
        }
      } else if constexpr (std::is_arithmetic_v<E>) {
        uint64_t n = count(x.size(), sizeof(E));
        if constexpr (Loading) {
          if (source_ != nullptr && detail::archive_byte_order) {
            // From memory in the archive's byte order: each element written once, straight
            // from the input (resize would zero them first).
            const uint8_t* at = source_->current();
            x.clear();
            x.insert(x.end(), detail::unaligned_iterator<E>(at),
                     detail::unaligned_iterator<E>(at + n * sizeof(E)));
            skip(n * sizeof(E));
            return;
          }
          x.resize(n);
        }
        if (n > 0) ar_(cereal::binary_data(x.data(), n * sizeof(E)));
      } else {
        uint64_t n = count(x.size(), 1);
        if constexpr (Loading) x.resize(n);
        for (auto& e : x) field(e);
      }
    } else if constexpr (std::is_same_v<U, bytes_in_place>) {
      uint64_t n = count(x.bytes.size(), 1);
      if constexpr (Loading) {
        if (source_ == nullptr) throw persist_error{"bytes in place need an input in memory"};
        x.bytes = byte_view(source_->current(), static_cast<size_t>(n));
        skip(n);
      } else if (n > 0) {
        ar_(cereal::binary_data(const_cast<uint8_t*>(x.bytes.data()), n));
      }
    } else if constexpr (std::is_same_v<U, float_buffer>) {
      uint64_t n = count(x.size(), sizeof(float));
      if constexpr (Loading) {
        x = float_buffer::uninitialized(n);  // every value read below
        if (checking_) {
          skip(n * sizeof(float));  // checked to be there by count()
          return;
        }
      }
      if (n > 0) ar_(cereal::binary_data(const_cast<float*>(x.data()), n * sizeof(float)));
    } else if constexpr (std::is_same_v<U, tensor_blob>) {
      if (refs_ == nullptr) {
        inspect(*this, x);
      } else if constexpr (Loading) {
        uint64_t key = 0;
        ar_(key);
        const tensor_blob* found = refs_->get(key);
        if (found == nullptr)
          throw persist_error{"refers to blob " + std::to_string(key) +
                              ", which the tape does not hold"};
        x = *found;
      } else {
        uint64_t key = refs_->put(x);
        ar_(key);
      }
    } else if constexpr (std::is_same_v<U, rng>) {
      auto s = x.state();
      for (auto& w : s) ar_(w);
      if constexpr (Loading) x.set_state(s);
    } else if constexpr (detail::has_inspect<U, persist_io>::value) {
      inspect(*this, x);
    } else if constexpr (detail::has_persist_fields<U, persist_io>::value) {
      persist_fields(*this, x);
    } else {
      container(x);
    }
  }

  // A byte vector the saver may take (saving into pieces: a large one becomes a piece as it
  // is, without a copy; `x` is left empty). The bytes written are those of field(x).
  void owned(std::vector<uint8_t>& x) {
    if constexpr (!Loading) {
      if (pieces_ != nullptr && x.size() >= detail::piece_sink::large_bytes) {
        uint64_t n = x.size();
        ar_(n);
        pieces_->adopt(std::move(x));
        x = {};
        return;
      }
    }
    field(x);
  }

  template <class T, size_t N>
  void field(std::array<T, N>& x) {
    for (auto& e : x) field(e);
  }
  template <class A, class B>
  void field(std::pair<A, B>& x) {
    field(const_cast<std::remove_const_t<A>&>(x.first));
    field(x.second);
  }
  template <class T>
  void field(std::deque<T>& x) {
    uint64_t n = count(x.size(), 1);
    if constexpr (Loading) x.resize(n);
    for (auto& e : x) field(e);
  }
  template <class K, class V>
  void field(std::map<K, V>& x) {
    uint64_t n = count(x.size(), 1);
    if constexpr (Loading) {
      x.clear();
      for (uint64_t i = 0; i < n; ++i) {
        K k{};
        field(k);
        field(x[k]);
      }
    } else {
      for (auto& [k, v] : x) {
        K key = k;
        field(key);
        field(v);
      }
    }
  }
  // As the std::map<uint32_t, V> it stands for: the same bytes.
  template <class V>
  void field(slot_map<V>& x) {
    uint64_t n = count(x.size(), 1);
    if constexpr (Loading) {
      x.clear();
      for (uint64_t i = 0; i < n; ++i) {
        uint32_t k = 0;
        field(k);
        if (k >= slot_map_max_slots)
          throw persist_error{"learner slot " + std::to_string(k) + " is beyond any run's (" +
                              std::to_string(slot_map_max_slots) + ")"};
        field(x[k]);
      }
    } else {
      for (const auto& [k, v] : x) {
        uint32_t key = k;
        field(key);
        field(v);
      }
    }
  }
  template <class K>
  void field(std::set<K>& x) {
    uint64_t n = count(x.size(), 1);
    if constexpr (Loading) {
      x.clear();
      for (uint64_t i = 0; i < n; ++i) {
        K k{};
        field(k);
        x.insert(k);
      }
    } else {
      for (K k : x) field(k);
    }
  }

 private:
  template <class T>
  void container(T&) {
    static_assert(sizeof(T) == 0, "persist_io: no field list for this type (add persist_fields)");
  }

  archive_type& ar_;
  const detail::memory_source* source_;
  blob_refs* refs_;
  detail::piece_sink* pieces_;
  bool checking_;  // persist_check_scope: numbers of float buffers skipped, not loaded
};

using persist_writer = persist_io<false>;
using persist_reader = persist_io<true>;

// Saves fields (each with a field list) into bytes; with refs, tensor blobs go to the table.
template <class... Ts>
std::vector<uint8_t> save_bytes_with(blob_refs* refs, Ts&... xs) {
  std::vector<uint8_t> out;
  out.reserve(256);
  detail::vector_sink sink(out);
  std::ostream os(&sink);
  {
    cereal::PortableBinaryOutputArchive ar(os);
    persist_writer w(ar, nullptr, refs);
    w(xs...);
  }
  return out;
}
template <class... Ts>
std::vector<uint8_t> save_bytes(Ts&... xs) {
  return save_bytes_with(nullptr, xs...);
}

// The same bytes as save_bytes, in pieces (detail::piece_sink): no vector grows by doubling,
// and vectors saved with persist_io::owned are taken, not copied.
template <class... Ts>
std::vector<tensor_blob> save_pieces(Ts&... xs) {
  detail::piece_sink sink;
  std::ostream os(&sink);
  {
    cereal::PortableBinaryOutputArchive ar(os);
    persist_writer w(ar, nullptr, nullptr, &sink);
    w(xs...);
  }
  return sink.take();
}

// save_bytes into a vector reserved at the exact size first (a counting pass, for values whose
// walk is cheap and has no side effects): no reallocation while it fills.
template <class... Ts>
std::vector<uint8_t> save_bytes_exact(Ts&... xs) {
  detail::counting_sink counter;
  {
    std::ostream os(&counter);
    cereal::PortableBinaryOutputArchive ar(os);
    persist_writer w(ar, nullptr);
    w(xs...);
  }
  std::vector<uint8_t> out;
  out.reserve(counter.bytes);
  detail::vector_sink sink(out);
  std::ostream os(&sink);
  {
    cereal::PortableBinaryOutputArchive ar(os);
    persist_writer w(ar, nullptr);
    w(xs...);
  }
  return out;
}

// Loads fields from the start of bytes and returns how many bytes they took (the rest is
// the caller's: a large part that follows a small header record). `what` names the input in
// errors, with the byte position.
template <class... Ts>
result<size_t> load_prefix_with(blob_refs* refs, byte_view bytes, const std::string& what,
                                Ts&... xs) {
  detail::memory_source source(bytes);
  std::istream is(&source);
  try {
    cereal::PortableBinaryInputArchive ar(is);
    persist_reader r(ar, &source, refs);
    r(xs...);
  } catch (const persist_error& e) {
    return status(errc::corrupt_data,
                  what + ": at byte " + std::to_string(source.consumed()) + ": " + e.what);
  } catch (const std::exception& e) {
    return status(errc::corrupt_data, what + ": truncated or malformed at byte " +
                                          std::to_string(source.consumed()) + " (" + e.what() +
                                          ")");
  }
  return source.consumed();
}
template <class... Ts>
result<size_t> load_prefix(byte_view bytes, const std::string& what, Ts&... xs) {
  return load_prefix_with(nullptr, bytes, what, xs...);
}

// Loads fields from bytes, which must be used up exactly.
template <class... Ts>
status load_bytes_with(blob_refs* refs, byte_view bytes, const std::string& what, Ts&... xs) {
  auto used = load_prefix_with(refs, bytes, what, xs...);
  if (!used) return used.error();
  if (*used != bytes.size()) {
    return status(errc::corrupt_data, what + ": " + std::to_string(bytes.size() - *used) +
                                          " unexpected bytes after the end at byte " +
                                          std::to_string(*used));
  }
  return ok_status();
}

template <class... Ts>
status load_bytes(byte_view bytes, const std::string& what, Ts&... xs) {
  return load_bytes_with(nullptr, bytes, what, xs...);
}

}  // namespace diloco
