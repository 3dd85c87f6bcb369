#include "net/bulk_channel.hpp"

#include "base/check.hpp"
#include "net/handshake.hpp"
#include "net/le.hpp"
#include "net/listen.hpp"
#include "net/tls_stream.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

namespace diloco {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr uint32_t hello_magic = 0x48424c44;      // "DLBH"
constexpr uint32_t challenge_magic = 0x43424c44;  // "DLBC"
constexpr uint32_t frame_magic = 0x46424c44;      // "DLBF"
constexpr uint32_t ack_magic = 0x41424c44;        // "DLBA"
constexpr uint32_t wait_magic = 0x57424c44;       // "DLBW"
// 4: frame flags (the background lane) and wait notices.
constexpr uint16_t wire_version = 4;
// A frame's flags (the header's second word): it travels on the background lane.
constexpr uint32_t flag_background = 1;
// While a background frame waits for room, its sender hears so this often (a wait notice
// counts as the lane's progress: a snapshot part waiting its turn is not on a stalled link).
constexpr auto wait_notice_every = std::chrono::milliseconds(500);
// A payload is read in pieces of at most this much: its buffer grows as bytes arrive.
constexpr size_t read_chunk_bytes = size_t{1} << 20;
constexpr size_t header_bytes = hello_size;  // a frame header has the hello's size
using header = std::array<uint8_t, header_bytes>;

using le::get;
using le::put;

header make_frame(uint64_t id, uint64_t length, uint32_t magic = frame_magic, uint32_t flags = 0) {
  DILOCO_CHECK(id != 0, "bulk channel: a frame names a payload (ids start at 1)");
  header h{};
  put(h.data(), magic, 4);
  put(h.data() + 4, flags, 4);
  put(h.data() + 8, id, 8);
  put(h.data() + 16, length, 8);
  return h;
}

using clock = std::chrono::steady_clock;

// A TCP connection, plain or inside TLS: what Asio's composed reads and writes need.
class dual_stream {
 public:
  using executor_type = asio::any_io_executor;
  using lowest_layer_type = tcp::socket;
  dual_stream(asio::io_context& io, asio::ssl::context* tls) : plain_(io) { make(tls); }
  dual_stream(tcp::socket s, asio::ssl::context* tls) : plain_(std::move(s)) { make(tls); }
  executor_type get_executor() { return plain_.get_executor(); }
  tcp::socket& socket() { return plain_; }
  bool tls() const { return ssl_ != nullptr; }
  template <class Buffers, class Handler>
  void async_read_some(const Buffers& b, Handler&& h) {
    if (ssl_) {
      ssl_->async_read_some(b, std::forward<Handler>(h));
    } else {
      plain_.async_read_some(b, std::forward<Handler>(h));
    }
  }
  template <class Buffers, class Handler>
  void async_write_some(const Buffers& b, Handler&& h) {
    if (ssl_) {
      ssl_->async_write_some(b, std::forward<Handler>(h));
    } else {
      plain_.async_write_some(b, std::forward<Handler>(h));
    }
  }
  // TLS: the handshake (client or server side); plain: done at once.
  template <class Handler>
  void handshake(bool client, Handler&& h) {
    if (!ssl_) return h(error_code());
    ssl_->async_handshake(client, std::forward<Handler>(h));
  }
  void close() {
    error_code ignored;
    plain_.close(ignored);
  }
  // A fresh connection (after an error): TLS state cannot be reused.
  void reset(asio::ssl::context* tls) {
    close();
    ssl_.reset();
    plain_ = tcp::socket(plain_.get_executor());
    make(tls);
  }

 private:
  void make(asio::ssl::context* tls) {
    if (tls != nullptr) ssl_ = std::make_unique<tls_stream>(plain_, tls->native_handle());
  }
  tcp::socket plain_;
  std::unique_ptr<tls_stream> ssl_;
};

// Asio's transfer_all moves at most 64 KiB per system call; a payload goes in as few as the
// socket allows (the kernel's buffers set the pace, as for a plain read or write loop).
struct all_at_once {
  size_t total;
  size_t operator()(const error_code& ec, size_t done) const { return ec ? 0 : total - done; }
};
// The same, noting the time of each piece written (a lane's progress, I/O thread).
struct all_noting_progress {
  size_t total;
  std::chrono::steady_clock::time_point* progress;
  size_t operator()(const error_code& ec, size_t done) const {
    *progress = std::chrono::steady_clock::now();
    return ec ? 0 : total - done;
  }
};

// Payload buffers for reuse. A fresh 16 MiB vector costs page faults and zeroing, about as
// much as moving its bytes over loopback; fragments recur with the same sizes, so a buffer
// whose last blob was dropped comes back here (the blob's deleter) for the next frame.
class buffer_pool : public std::enable_shared_from_this<buffer_pool> {
 public:
  explicit buffer_pool(uint64_t keep_bytes) : keep_bytes_(keep_bytes) {}

  // A buffer of `size` bytes if one is kept; otherwise an empty one with room reserved for
  // `size` (untouched pages cost no memory: it is filled as the bytes arrive).
  std::shared_ptr<std::vector<uint8_t>> get(size_t size) {
    std::unique_ptr<std::vector<uint8_t>> v;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        v = std::move(it->second.back());
        it->second.pop_back();
        kept_ -= size;
      }
    }
    if (!v) {
      v = std::make_unique<std::vector<uint8_t>>();
      v->reserve(size);
    }
    std::weak_ptr<buffer_pool> home = weak_from_this();
    return std::shared_ptr<std::vector<uint8_t>>(v.release(), [home](std::vector<uint8_t>* p) {
      if (auto pool = home.lock()) {
        pool->put(std::unique_ptr<std::vector<uint8_t>>(p));
      } else {
        delete p;
      }
    });
  }

 private:
  void put(std::unique_ptr<std::vector<uint8_t>> v) {
    std::lock_guard<std::mutex> g(mu_);
    if (kept_ + v->size() > keep_bytes_) return;  // freed
    kept_ += v->size();
    free_[v->size()].push_back(std::move(v));
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<std::unique_ptr<std::vector<uint8_t>>>> free_;
  uint64_t kept_ = 0;
  const uint64_t keep_bytes_;
};

// Background payloads (snapshot parts) claimed from the inbox and still held by whoever took
// them: they count against the background budget until their last holder lets go (the deleter
// of the bytes handed out, on any thread, possibly after the channel is gone).
class claims {
 public:
  uint64_t add(uint32_t node, uint64_t bytes) {
    std::lock_guard<std::mutex> g(mu_);
    const uint64_t token = ++next_;
    held_.emplace(token, entry{node, bytes, std::chrono::steady_clock::now()});
    return token;
  }
  void release(uint64_t token) {
    std::lock_guard<std::mutex> g(mu_);
    held_.erase(token);
  }
  // Bytes held since `since` or later: a holder that kept its bytes for longer is not waited
  // for (a stuck holder must not stop every other sender's snapshot parts for good).
  // The same for the payloads of one sending node (`node`), or of all (-1).
  uint64_t bytes_since(std::chrono::steady_clock::time_point since, int64_t node = -1) const {
    std::lock_guard<std::mutex> g(mu_);
    uint64_t n = 0;
    for (const auto& [token, e] : held_)
      if (e.at >= since && (node < 0 || e.node == node)) n += e.bytes;
    return n;
  }

 private:
  struct entry {
    int64_t node;
    uint64_t bytes;
    std::chrono::steady_clock::time_point at;
  };
  mutable std::mutex mu_;
  std::map<uint64_t, entry> held_;
  uint64_t next_ = 0;
};

clock::time_point after(double seconds) {
  return clock::now() +
         std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

struct bulk_channel::impl {
  struct frame {
    header head;
    held_bytes payload;
    done_fn done;
  };
  // The connection for one lane to one destination node: made on first use, remade after an
  // error. Its frames wait in `queue`, then, written, in `unacked` until the receiver
  // acknowledges them (in id order, which is the order they were pushed in).
  struct out_link {
    out_link(asio::io_context& io, asio::ssl::context* tls, uint32_t to)
        : sock(io, tls), retry(io), node(to) {}
    dual_stream sock;
    asio::steady_timer retry;
    uint32_t node;
    std::deque<frame> queue;            // I/O thread only
    std::map<uint64_t, frame> unacked;  // I/O thread only
    header ack{};                       // the acknowledgement being read
    challenge_bytes challenge{};
    answer_bytes answer{};
    bool connected = false, connecting = false, writing = false;
    uint64_t generation = 0;  // bumped at each new connection: older handlers stand down
    clock::time_point progress = clock::now();
    uint64_t queued_bytes = 0;  // queued and unacknowledged (I/O thread)
  };
  struct inbox_entry {
    bytes_ptr bytes;
    clock::time_point arrived;
    bool background = false;
  };

  bulk_options o;
  hello_key key;
  std::shared_ptr<buffer_pool> pool;
  std::unique_ptr<asio::ssl::context> tls;  // null: plain TCP
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  tcp::acceptor acceptor{io};
  std::vector<std::unique_ptr<out_link>> links;  // by node * 2 + lane
  asio::steady_timer sweep{io};
  std::thread runner;
  // Payload ids are (node << 48) | seq. A restarted node's process starts its sequence at a
  // random point, so a reference it sends cannot name a payload its dead predecessor left
  // unclaimed in a receiver's inbox.
  std::atomic<uint64_t> seq{(uint64_t{std::random_device{}()} << 8) & ((uint64_t{1} << 40) - 1)};

  mutable std::mutex mu;
  std::condition_variable changed;
  bulk_stats st;
  std::unordered_map<uint64_t, inbox_entry> inbox;
  // Payload bytes held unclaimed, plus the lengths of frames being read (reserved): in all and
  // by sending node.
  uint64_t inbox_bytes = 0;
  std::vector<uint64_t> held;
  // The background budget (snapshot parts, from every sender together): the bytes of
  // background frames reserved or unclaimed, by sending node; those claimed and still held
  // (bg_claims); and the node whose parts are coming in (-1: none). One sender's parts at a
  // time, so that a receiver holds one snapshot part at a time from all its senders, not one
  // from each.
  std::vector<uint64_t> bg_unclaimed;
  std::shared_ptr<claims> bg_claims = std::make_shared<claims>();
  int64_t bg_owner = -1;
  bool closing = false;
  uint32_t pending = 0;  // accepted connections that have not answered yet (I/O thread)
  // Frames waiting for room, by sending node and lane (node * 2 + lane), in their order of
  // arrival (tickets; I/O thread): a node's payloads do not wait behind its snapshot parts.
  std::vector<std::set<uint64_t>> waiting;
  uint64_t next_ticket = 1;

  explicit impl(const bulk_options& options)
      : o(options),
        key(options.secret.empty() ? hello_key::of_identity(options.identity)
                                   : hello_key::of_secret(options.secret)),
        pool(std::make_shared<buffer_pool>(options.inbox_limit_bytes)),
        held(options.peers.size(), 0),
        bg_unclaimed(options.peers.size(), 0),
        waiting(options.peers.size() * 2) {}
  void make_links() {
    for (size_t i = 0; i < o.peers.size() * 2; ++i)
      links.push_back(std::make_unique<out_link>(io, tls.get(), static_cast<uint32_t>(i / 2)));
  }
  // A sending node's line of frames waiting for room, by lane (`waiting`).
  static size_t line_of(uint32_t node, bool background) {
    return size_t{node} * 2 + (background ? 1 : 0);
  }
  uint64_t hold_limit() const { return std::max(o.inbox_limit_bytes, o.max_frame_bytes); }

  // ---- sending (I/O thread) ----

  void connect(size_t li) {
    auto& l = *links[li];
    if (l.connected || l.connecting) return;
    l.connecting = true;
    const uint64_t gen = l.generation;
    auto resolver = std::make_shared<tcp::resolver>(io);
    resolver->async_resolve(
        o.peers[l.node].host, std::to_string(o.peers[l.node].port),
        [this, li, gen, resolver](const error_code& ec, tcp::resolver::results_type found) {
          if (stale(li, gen)) return;
          if (ec) return retry_later(li, gen);
          asio::async_connect(links[li]->sock.socket(), found,
                              [this, li, gen](const error_code& ec2, const tcp::endpoint&) {
                                if (stale(li, gen)) return;
                                if (ec2) return retry_later(li, gen);
                                auto& link = *links[li];
                                error_code ignored;
                                link.sock.socket().set_option(tcp::no_delay(true), ignored);
                                link.sock.handshake(true, [this, li, gen](const error_code& ec3) {
                                  if (stale(li, gen)) return;
                                  if (ec3) return retry_later(li, gen);
                                  answer_challenge(li, gen);
                                });
                              });
        });
  }
  bool stale(size_t li, uint64_t gen) const { return links[li]->generation != gen; }

  // The peer's challenge, then this node's answer; frames follow, acknowledgements come back.
  void answer_challenge(size_t li, uint64_t gen) {
    auto& l = *links[li];
    asio::async_read(
        l.sock, asio::buffer(l.challenge), [this, li, gen](const error_code& ec, size_t) {
          if (stale(li, gen)) return;
          auto& link = *links[li];
          const challenge_fields c = get_challenge(link.challenge.data());
          if (ec || c.magic != challenge_magic || c.version != wire_version ||
              (c.secret_required && !key.secret)) {
            return retry_later(li, gen);
          }
          link.answer =
              make_answer(key, link.challenge, {hello_magic, wire_version, o.self, o.identity});
          asio::async_write(link.sock, asio::buffer(link.answer),
                            [this, li, gen](const error_code& ec2, size_t) {
                              if (stale(li, gen)) return;
                              if (ec2) return retry_later(li, gen);
                              auto& up = *links[li];
                              up.connecting = false;
                              up.connected = true;
                              up.progress = clock::now();
                              read_ack(li, gen);
                              write_next(li);
                            });
        });
  }

  // The connection is gone (an error, or reset): what was written and not acknowledged goes
  // again, first and in its order, on the next connection (a receiver keeps the first copy of
  // an id it already holds, and acknowledges both).
  void retry_later(size_t li, uint64_t gen) {
    auto& l = *links[li];
    if (stale(li, gen)) return;
    l.generation += 1;
    l.sock.reset(tls.get());
    l.connecting = false;
    l.connected = false;
    l.writing = false;
    for (auto it = l.unacked.rbegin(); it != l.unacked.rend(); ++it)
      l.queue.push_front(std::move(it->second));
    l.unacked.clear();
    l.retry.expires_after(std::chrono::milliseconds(100));
    l.retry.async_wait([this, li](const error_code& ec) {
      if (!ec && !links[li]->queue.empty()) connect(li);
    });
  }

  void write_next(size_t li) {
    auto& l = *links[li];
    if (!l.connected || l.writing || l.queue.empty()) return;
    l.writing = true;
    const frame& f = l.queue.front();
    std::array<asio::const_buffer, 2> bufs{asio::buffer(f.head),
                                           asio::buffer(f.payload.data(), f.payload.size())};
    const size_t total = asio::buffer_size(bufs);
    const uint64_t gen = l.generation;
    asio::async_write(l.sock, bufs, all_noting_progress{total, &l.progress},
                      [this, li, gen](const error_code& ec, size_t) {
                        if (stale(li, gen)) return;
                        auto& link = *links[li];
                        link.writing = false;
                        if (ec) return retry_later(li, gen);
                        frame done = std::move(link.queue.front());
                        link.queue.pop_front();
                        const uint64_t id = get(done.head.data() + 8, 8);
                        link.unacked.emplace(id, std::move(done));
                        write_next(li);
                      });
  }

  // Acknowledgements, one header each, until the connection goes.
  void read_ack(size_t li, uint64_t gen) {
    auto& l = *links[li];
    asio::async_read(l.sock, asio::buffer(l.ack), [this, li, gen](const error_code& ec, size_t) {
      if (stale(li, gen)) return;
      auto& link = *links[li];
      if (ec) return retry_later(li, gen);
      const uint64_t id = get(link.ack.data() + 8, 8);
      if (get(link.ack.data(), 4) == wait_magic) {
        // The receiver is short of room for this frame (written, or being written): the lane is
        // not stalled, it waits its turn.
        const bool ours =
            link.unacked.count(id) != 0 || (link.writing && !link.queue.empty() &&
                                            get(link.queue.front().head.data() + 8, 8) == id);
        if (ours) {
          link.progress = clock::now();
          {
            std::lock_guard<std::mutex> g(mu);
            st.waits_heard += 1;
          }
          return read_ack(li, gen);
        }
      }
      auto it = link.unacked.find(id);
      if (get(link.ack.data(), 4) != ack_magic || it == link.unacked.end()) {
        {
          std::lock_guard<std::mutex> g(mu);
          st.bad_ack += 1;
        }
        return retry_later(li, gen);
      }
      frame f = std::move(it->second);
      link.unacked.erase(it);
      link.progress = clock::now();
      settle(link, f, true);
      read_ack(li, gen);
    });
  }

  // A frame's end: acknowledged (true) or dropped (false).
  void settle(out_link& l, frame& f, bool arrived) {
    const uint64_t size = f.payload.size();
    l.queued_bytes -= size;
    {
      std::lock_guard<std::mutex> g(mu);
      if (arrived) {
        st.acked += 1;
        st.frames_sent += 1;
        st.bytes_sent += size;
      } else {
        st.send_dropped += 1;
      }
    }
    if (f.done) f.done(arrived);
  }

  // Every lane that has made no progress for the wait timeout drops the frames it has not
  // started (the one being written, and those written, wait for their connection's fate).
  void sweep_stalled() {
    const auto limit = std::chrono::duration_cast<clock::duration>(
        std::chrono::duration<double>(o.wait_timeout_s));
    const auto now = clock::now();
    for (auto& lp : links) {
      auto& l = *lp;
      if (l.queue.empty() || now - l.progress < limit) continue;
      const size_t keep = l.writing ? 1 : 0;
      while (l.queue.size() > keep) {
        frame f = std::move(l.queue.back());
        l.queue.pop_back();
        settle(l, f, false);
      }
    }
    sweep.expires_after(std::chrono::milliseconds(100));
    sweep.async_wait([this](const error_code& ec) {
      if (!ec) sweep_stalled();
    });
  }

  // ---- receiving (I/O thread) ----

  struct in_conn : std::enable_shared_from_this<in_conn> {
    in_conn(impl& owner, tcp::socket s) : ch(owner), sock(std::move(s), owner.tls.get()) {}
    impl& ch;
    dual_stream sock;
    challenge_bytes challenge{};
    answer_bytes answer{};
    header head{};
    uint32_t node = 0;
    uint64_t id = 0;
    uint64_t length = 0;      // of the frame being read
    bool background = false;  // the frame came on the background lane (its flag)
    bool reserved = false;    // `length` is counted in the inbox
    bool answered = false;    // passed the challenge (no longer pending)
    bool closed = false;
    std::shared_ptr<std::vector<uint8_t>> payload;
    asio::steady_timer wait{sock.socket().get_executor()};
    asio::steady_timer deadline{sock.socket().get_executor()};

    void close() {
      if (closed) return;
      closed = true;
      if (!answered) ch.pending -= 1;
      answered = true;
      deadline.cancel();
      wait.cancel();
      if (reserved) ch.release(node, length, background);
      reserved = false;
      if (ticket != 0) ch.waiting[line()].erase(ticket);
      ticket = 0;
      sock.close();
    }
    void refuse(uint64_t bulk_stats::*counter) {
      if (closed) return;
      {
        std::lock_guard<std::mutex> g(ch.mu);
        ch.st.*counter += 1;
      }
      close();
    }

    // The TLS handshake (a peer whose certificate the CA did not sign fails here, counted as a
    // bad hello), the challenge and the answer must all be done within the hello timeout.
    void start() {
      auto self = shared_from_this();
      deadline.expires_after(std::chrono::duration_cast<clock::duration>(
          std::chrono::duration<double>(ch.o.hello_timeout_s)));
      deadline.async_wait([self](const error_code& ec) {
        if (!ec && !self->answered) self->refuse(&bulk_stats::hello_timeout);
      });
      sock.handshake(false, [self](const error_code& ec) {
        if (ec) return self->refuse(&bulk_stats::bad_hello);
        self->challenge = make_challenge(challenge_magic, wire_version, self->ch.key.secret);
        asio::async_write(self->sock, asio::buffer(self->challenge),
                          [self](const error_code& ec2, size_t) {
                            if (ec2) return self->close();
                            self->read_answer();
                          });
      });
    }

    void read_answer() {
      auto self = shared_from_this();
      asio::async_read(sock, asio::buffer(answer), [self](const error_code& ec, size_t n) {
        if (self->closed) return;
        if (ec) return self->refuse(n == 0 ? &bulk_stats::bad_hello : &bulk_stats::truncated);
        const auto& o = self->ch.o;
        const hello_expected expected{hello_magic, wire_version, o.identity,
                                      static_cast<uint32_t>(o.peers.size()), o.self};
        if (check_answer(self->answer, self->challenge, self->ch.key, expected) !=
            hello_verdict::ok) {
          return self->refuse(&bulk_stats::bad_hello);
        }
        const hello_fields h = get_hello(self->answer.data());
        self->answered = true;
        self->ch.pending -= 1;
        self->deadline.cancel();
        self->node = h.node;
        self->read_header();
      });
    }

    void read_header() {
      auto self = shared_from_this();
      asio::async_read(sock, asio::buffer(head), [self](const error_code& ec, size_t n) {
        if (self->closed) return;
        if (ec) {
          // A close between frames is a normal end; inside a header it is a cut frame.
          if (n != 0) return self->refuse(&bulk_stats::truncated);
          return self->close();
        }
        const uint8_t* p = self->head.data();
        self->id = get(p + 8, 8);
        const uint64_t claimed = get(p + 16, 8);
        const uint32_t flags = get(p + 4, 4);
        if (get(p, 4) != frame_magic || origin_of(self->id) != self->node || self->id == 0 ||
            (flags & ~flag_background) != 0)
          return self->refuse(&bulk_stats::bad_frame);
        self->background = (flags & flag_background) != 0;
        if (claimed > self->ch.o.max_frame_bytes) return self->refuse(&bulk_stats::oversized);
        self->length = claimed;
        self->wait_for_room();
      });
    }

    // Reads the payload once the inbox has room for it from this node, after the node's frames
    // that were waiting before it.
    void wait_for_room() {
      if (!ch.reserve(node, length, background, ticket)) {
        const auto now = clock::now();
        if (background && now - noticed >= wait_notice_every) {
          // A snapshot part waiting for the background budget (another sender's part is
          // coming in or being written): its sender hears so, and its lane is not stalled.
          // A payload that waits for room is not announced: a receiver that claims nothing
          // stalls its senders' payload lanes, which then drop what they queued.
          noticed = now;
          acks.push_back(make_frame(id, 0, wait_magic));
          write_acks();
          std::lock_guard<std::mutex> g(ch.mu);
          ch.st.waits_announced += 1;
        }
        auto self = shared_from_this();
        wait.expires_after(std::chrono::milliseconds(1));
        wait.async_wait([self](const error_code& ec) {
          if (!ec && !self->closed) self->wait_for_room();
        });
        return;
      }
      reserved = true;
      noticed = clock::time_point{};
      // Snapshot parts come once per snapshot and are model-sized: their buffers are freed
      // once written rather than kept for reuse (the pool is for the fragments that recur).
      if (background) {
        payload = std::make_shared<std::vector<uint8_t>>();
        payload->reserve(length);
      } else {
        payload = ch.pool->get(length);
      }
      read_chunk();
    }
    clock::time_point noticed{};  // the last wait notice for the frame being read
    size_t line() const { return line_of(node, background); }

    // The next piece of the payload: a kept buffer is full-size already; a fresh one grows.
    void read_chunk() {
      auto& buf = *payload;
      if (done == length) {
        reserved = false;
        done = 0;
        ch.deliver(id, std::move(payload), length, background);
        acknowledge(id);
        return read_header();
      }
      // A kept buffer is there already: the rest in one read. A fresh one grows by a chunk per
      // read, so memory follows the bytes that came, not the length claimed.
      const bool kept = buf.size() == length;
      const size_t piece = static_cast<size_t>(
          kept ? length - done : std::min<uint64_t>(read_chunk_bytes, length - done));
      if (buf.size() < done + piece) buf.resize(done + piece);
      auto self = shared_from_this();
      asio::async_read(sock, asio::buffer(buf.data() + done, piece), all_at_once{piece},
                       [self, piece](const error_code& ec, size_t) {
                         if (self->closed) return;
                         if (ec) return self->refuse(&bulk_stats::truncated);
                         self->done += piece;
                         self->read_chunk();
                       });
    }
    uint64_t done = 0;    // payload bytes of the current frame read so far
    uint64_t ticket = 0;  // this frame's place among the node's frames waiting for room

    // The sender learns that `id` is here (acknowledgements go out in order, several per
    // write when they queue up).
    void acknowledge(uint64_t payload_id) {
      acks.push_back(make_frame(payload_id, 0, ack_magic));
      write_acks();
    }
    void write_acks() {
      if (acks_writing || acks.empty() || closed) return;
      acks_out.assign(acks.begin(), acks.end());
      acks.clear();
      acks_writing = true;
      auto self = shared_from_this();
      asio::async_write(sock, asio::buffer(acks_out.data(), acks_out.size() * sizeof(header)),
                        [self](const error_code& ec, size_t) {
                          self->acks_writing = false;
                          if (ec || self->closed) return;  // the reads see the error too
                          self->write_acks();
                        });
    }
    std::vector<header> acks, acks_out;
    bool acks_writing = false;
  };

  void accept_next() {
    acceptor.async_accept([this](const error_code& ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors (or another passing error): try again a little later rather than
        // spin on the error.
        accept_retry.expires_after(std::chrono::milliseconds(50));
        accept_retry.async_wait([this](const error_code& e) {
          if (!e) accept_next();
        });
        return;
      }
      const bool room = pending < o.pending_max;
      {
        std::lock_guard<std::mutex> g(mu);
        st.connections_accepted += 1;
        if (!room) st.over_capacity += 1;
      }
      if (room) {
        pending += 1;
        error_code ignored;
        s.set_option(tcp::no_delay(true), ignored);
        std::make_shared<in_conn>(*this, std::move(s))->start();
      }  // else: `s` closes here
      accept_next();
    });
  }
  asio::steady_timer accept_retry{io};

  // Counts `length` from `node` in the inbox if it fits and no frame of that node and lane that
  // came before waits (`ticket`: this frame's place in that line, taken on its first wait).
  bool reserve(uint32_t node, uint64_t length, bool background, uint64_t& ticket) {
    auto& line = waiting[line_of(node, background)];
    const bool first = ticket == 0 ? line.empty() : *line.begin() == ticket;
    {
      std::lock_guard<std::mutex> g(mu);
      if (first && fits(node, length) && (!background || background_fits(node, length))) {
        inbox_bytes += length;
        held[node] += length;
        st.inbox_bytes_peak = std::max(st.inbox_bytes_peak, inbox_bytes);
        if (background) {
          bg_unclaimed[node] += length;
          bg_owner = node;
          st.background_bytes_peak = std::max(st.background_bytes_peak, background_alive());
        }
        if (ticket != 0) line.erase(ticket);
        ticket = 0;
        return true;
      }
      if (ticket == 0 && background) st.background_waits += 1;
    }
    if (ticket == 0) {
      ticket = next_ticket++;
      line.insert(ticket);
    }
    return false;
  }
  void release(uint32_t node, uint64_t length, bool background) {
    {
      std::lock_guard<std::mutex> g(mu);
      DILOCO_CHECK(inbox_bytes >= length && held[node] >= length,
                   "bulk channel: the inbox counts what it holds");
      inbox_bytes -= length;
      held[node] -= length;
      if (background) drop_background(node, length);
    }
    changed.notify_all();
  }
  // A payload leaves the inbox (claimed or given up). Under mu.
  void drop_held(uint64_t id, uint64_t length, bool background) {
    inbox_bytes -= length;
    const uint32_t node = origin_of(id);
    if (node < held.size()) held[node] -= length;
    if (background && node < bg_unclaimed.size()) drop_background(node, length);
  }
  // Under mu.
  void drop_background(uint32_t node, uint64_t length) {
    DILOCO_CHECK(bg_unclaimed[node] >= length,
                 "bulk channel: the background budget counts its bytes");
    bg_unclaimed[node] -= length;
  }
  clock::time_point stale_since() const {
    return clock::now() - std::chrono::duration_cast<clock::duration>(
                              std::chrono::duration<double>(o.stale_after_s));
  }
  // Background bytes reserved, unclaimed, or claimed and still held (for less than
  // stale_after_s). Under mu.
  uint64_t background_alive() const {
    uint64_t n = bg_claims->bytes_since(stale_since());
    for (uint64_t b : bg_unclaimed) n += b;
    return n;
  }
  // Whether a background frame of `length` from `node` may be read now: no other sender's
  // parts are coming in or still held (read, unclaimed, or claimed and not yet let go: the
  // coordinator writing them), and what is alive of the budget leaves room (or nothing is).
  // The budget is the largest message (hold_limit), so one message's payloads always fit.
  // Under mu.
  bool background_fits(uint32_t node, uint64_t length) {
    if (bg_owner >= 0 && bg_owner != static_cast<int64_t>(node)) {
      // The owner's parts whose message never came (its node went away after sending them)
      // are given up after stale_after_s, as in fits(): otherwise they would hold the budget.
      if (bg_unclaimed[static_cast<size_t>(bg_owner)] > 0) drop_stale();
      if (bg_unclaimed[static_cast<size_t>(bg_owner)] > 0 ||
          bg_claims->bytes_since(stale_since(), bg_owner) > 0)
        return false;
      bg_owner = -1;
    }
    const uint64_t alive = background_alive();
    return alive == 0 || alive + length <= hold_limit();
  }

  // Under mu.
  bool fits(uint32_t node, uint64_t length) {
    if (held[node] == 0 || held[node] + length <= hold_limit()) return true;
    drop_stale();
    return held[node] == 0 || held[node] + length <= hold_limit();
  }
  // Payloads nobody claimed for stale_after_s are given up (their message never came), when
  // room is needed. Under mu.
  void drop_stale() {
    const auto stale = stale_since();
    for (auto it = inbox.begin(); it != inbox.end();) {
      if (it->second.arrived < stale) {
        drop_held(it->first, it->second.bytes->size(), it->second.background);
        st.unresolved += 1;
        it = inbox.erase(it);
      } else {
        ++it;
      }
    }
  }

  // A payload read whole; its bytes were reserved in the inbox.
  void deliver(uint64_t id, std::shared_ptr<std::vector<uint8_t>> bytes, uint64_t length,
               bool background) {
    DILOCO_CHECK(bytes->size() == length, "bulk channel: a payload of its announced length");
    {
      std::lock_guard<std::mutex> g(mu);
      st.frames_received += 1;
      st.bytes_received += length;
      auto [at, fresh] =
          inbox.try_emplace(id, inbox_entry{bytes_ptr(std::move(bytes)), clock::now(), background});
      if (!fresh) {
        // The same id again (a frame resent after a cut connection that had in fact arrived):
        // keep the first, give back the reservation.
        drop_held(id, length, background);
      }
      (void)at;
    }
    changed.notify_all();
  }
};

bulk_channel::bulk_channel(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

result<std::unique_ptr<bulk_channel>> bulk_channel::open(const bulk_options& options) {
  if (options.self >= options.peers.size())
    return status(errc::invalid_argument, "bulk channel: node index outside the peer list");
  auto p = std::make_unique<impl>(options);
  error_code ec;
  const int tls_keys =
      !options.tls_ca.empty() + !options.tls_certificate.empty() + !options.tls_key.empty();
  if (tls_keys != 0 && tls_keys != 3)
    return status(errc::invalid_argument, "bulk channel: TLS needs a CA, a certificate and a key");
  if (tls_keys == 3) {
    p->tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls);
    auto& t = *p->tls;
    t.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                  asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                  asio::ssl::context::no_tlsv1_1);
    // No session tickets: every connection makes a full handshake (nothing to resume).
    SSL_CTX_set_num_tickets(t.native_handle(), 0);
    // Nodes never renegotiate (TLS 1.2); a peer that asks is refused.
    SSL_CTX_set_options(t.native_handle(), SSL_OP_NO_RENEGOTIATION);
    // AES-128-GCM first: TLS 1.3's own mandatory suite, and a third faster than AES-256-GCM
    // where the processor has AES instructions (payloads are most of what a node's cores
    // encrypt). The others stay allowed.
    SSL_CTX_set_ciphersuites(t.native_handle(),
                             "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                             "TLS_CHACHA20_POLY1305_SHA256");
    t.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert, ec);
    if (!ec) t.load_verify_file(options.tls_ca, ec);
    if (ec)
      return status(errc::invalid_argument,
                    "bulk channel: " + options.tls_ca + ": " + ec.message());
    t.use_certificate_chain_file(options.tls_certificate, ec);
    if (ec) {
      return status(errc::invalid_argument,
                    "bulk channel: " + options.tls_certificate + ": " + ec.message());
    }
    t.use_private_key_file(options.tls_key, asio::ssl::context::pem, ec);
    if (ec)
      return status(errc::invalid_argument,
                    "bulk channel: " + options.tls_key + ": " + ec.message());
  }
  p->make_links();
  if (auto st = listen_on(p->acceptor, options.listen_host, options.listen_port, "bulk channel");
      !st.ok())
    return st;
  p->accept_next();
  p->sweep_stalled();
  p->runner = std::thread([raw = p.get()] { raw->io.run(); });
  return std::unique_ptr<bulk_channel>(new bulk_channel(std::move(p)));
}

bulk_channel::~bulk_channel() {
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->closing = true;
  }
  impl_->changed.notify_all();
  impl_->io.stop();
  if (impl_->runner.joinable()) impl_->runner.join();
}

uint16_t bulk_channel::port() const {
  error_code ec;
  const auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

uint64_t bulk_channel::push(uint32_t node, held_bytes bytes, done_fn done, lane l) {
  auto& p = *impl_;
  if (node >= p.o.peers.size() || node == p.o.self || !bytes) return 0;
  const uint64_t id = (uint64_t{p.o.self} << 48) | (p.seq.fetch_add(1) + 1);
  const size_t li = size_t{node} * 2 + static_cast<size_t>(l);
  asio::post(p.io, [&p, li, id, bytes = std::move(bytes), done = std::move(done)]() mutable {
    auto& link = *p.links[li];
    const uint64_t n = bytes.size();
    // An idle lane starts its clock now: the wait timeout counts from the first frame waiting.
    if (link.queue.empty() && link.unacked.empty()) link.progress = clock::now();
    const uint32_t flags = li % 2 == 1 ? flag_background : 0;
    link.queue.push_back(
        impl::frame{make_frame(id, n, frame_magic, flags), std::move(bytes), std::move(done)});
    link.queued_bytes += n;
    {
      std::lock_guard<std::mutex> g(p.mu);
      p.st.queued_bytes_peak = std::max(p.st.queued_bytes_peak, link.queued_bytes);
    }
    if (link.connected) {
      p.write_next(li);
    } else {
      p.connect(li);
    }
  });
  return id;
}

void bulk_channel::reset(uint32_t node) {
  auto& p = *impl_;
  if (node >= p.o.peers.size()) return;
  asio::post(p.io, [&p, node] {
    for (size_t li = size_t{node} * 2; li < size_t{node} * 2 + 2; ++li) {
      auto& l = *p.links[li];
      if (l.connected || l.connecting) {
        p.retry_later(li, l.generation);
      }
    }
  });
}

bulk_channel::bytes_ptr bulk_channel::take(uint64_t id, uint64_t size, double wait_s) {
  auto& p = *impl_;
  std::unique_lock<std::mutex> g(p.mu);
  if (wait_s > 0) {
    p.changed.wait_until(g, after(wait_s), [&] { return p.closing || p.inbox.count(id) != 0; });
  }
  auto it = p.inbox.find(id);
  if (it == p.inbox.end()) {
    p.st.unresolved += 1;
    return nullptr;
  }
  bytes_ptr out = std::move(it->second.bytes);
  const bool background = it->second.background;
  p.drop_held(id, out->size(), background);
  p.inbox.erase(it);
  if (out->size() != size) {
    p.st.unresolved += 1;
    return nullptr;
  }
  if (!background) return out;
  // A snapshot part's bytes count against the background budget for as long as they are held
  // (the coordinator writes them, then lets go): the next sender's parts wait for that.
  auto held_by = p.bg_claims;
  const uint64_t token = held_by->add(origin_of(id), out->size());
  const std::vector<uint8_t>* raw = out.get();
  return bytes_ptr(raw,
                   [held_by, token, keep = std::move(out)](const std::vector<uint8_t>*) mutable {
                     keep.reset();
                     held_by->release(token);
                   });
}

bulk_stats bulk_channel::stats() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->st;
}

}  // namespace diloco
