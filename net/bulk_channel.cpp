#include "net/bulk_channel.hpp"

#include "base/check.hpp"
#include "net/handshake.hpp"
#include "net/le.hpp"
#include "net/listen.hpp"

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
#include <mutex>
#include <random>
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
constexpr uint16_t wire_version = 2;
// A payload is read in pieces of at most this much: its buffer grows as bytes arrive.
constexpr size_t read_chunk_bytes = size_t{1} << 20;
constexpr size_t header_bytes = hello_size;  // a frame header has the hello's size
using header = std::array<uint8_t, header_bytes>;

using le::get;
using le::put;

header make_frame(uint64_t id, uint64_t length) {
  DILOCO_CHECK(id != 0, "bulk channel: a frame names a payload (ids start at 1)");
  header h{};
  put(h.data(), frame_magic, 4);
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
  dual_stream(asio::io_context& io, asio::ssl::context* tls) : plain_(io) {
    if (tls != nullptr) ssl_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(plain_, *tls);
  }
  dual_stream(tcp::socket s, asio::ssl::context* tls) : plain_(std::move(s)) {
    if (tls != nullptr) ssl_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(plain_, *tls);
  }
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
    ssl_->async_handshake(client ? asio::ssl::stream_base::client : asio::ssl::stream_base::server,
                          std::forward<Handler>(h));
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
    if (tls != nullptr) ssl_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(plain_, *tls);
  }

 private:
  tcp::socket plain_;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> ssl_;
};

// Asio's transfer_all moves at most 64 KiB per system call; a payload goes in as few as the
// socket allows (the kernel's buffers set the pace, as for a plain read or write loop).
struct all_at_once {
  size_t total;
  size_t operator()(const error_code& ec, size_t done) const { return ec ? 0 : total - done; }
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

clock::time_point after(double seconds) {
  return clock::now() +
         std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

struct bulk_channel::impl {
  struct frame {
    header head;
    bytes_ptr payload;
  };
  // The connection to one destination node: made on first use, remade after an error.
  struct out_link {
    out_link(asio::io_context& io, asio::ssl::context* tls) : sock(io, tls), retry(io) {}
    dual_stream sock;
    asio::steady_timer retry;
    std::deque<frame> queue;  // I/O thread only
    challenge_bytes challenge{};
    answer_bytes answer{};
    bool connected = false, connecting = false, writing = false;
    uint64_t queued_bytes = 0;  // under mu
  };
  struct inbox_entry {
    bytes_ptr bytes;
    clock::time_point arrived;
  };

  bulk_options o;
  hello_key key;
  std::shared_ptr<buffer_pool> pool;
  std::unique_ptr<asio::ssl::context> tls;  // null: plain TCP
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  tcp::acceptor acceptor{io};
  std::vector<std::unique_ptr<out_link>> links;
  std::thread runner;
  // Payload ids are (node << 48) | seq. A restarted node's process starts its sequence at a
  // random point, so a reference it sends cannot name a payload its dead predecessor left
  // unclaimed in a receiver's inbox.
  std::atomic<uint64_t> seq{(uint64_t{std::random_device{}()} << 8) & ((uint64_t{1} << 40) - 1)};

  mutable std::mutex mu;
  std::condition_variable changed;
  bulk_stats st;
  std::unordered_map<uint64_t, inbox_entry> inbox;
  // Payload bytes held unclaimed, plus the lengths of frames being read (reserved).
  uint64_t inbox_bytes = 0;
  bool closing = false;
  uint32_t pending = 0;  // accepted connections that have not answered yet (I/O thread)

  explicit impl(const bulk_options& options)
      : o(options),
        key(options.secret.empty() ? hello_key::of_identity(options.identity)
                                   : hello_key::of_secret(options.secret)),
        pool(std::make_shared<buffer_pool>(options.inbox_limit_bytes)) {}
  void make_links() {
    for (size_t i = 0; i < o.peers.size(); ++i)
      links.push_back(std::make_unique<out_link>(io, tls.get()));
  }

  // ---- sending (I/O thread) ----

  void connect(uint32_t node) {
    auto& l = *links[node];
    if (l.connected || l.connecting) return;
    l.connecting = true;
    auto resolver = std::make_shared<tcp::resolver>(io);
    resolver->async_resolve(
        o.peers[node].host, std::to_string(o.peers[node].port),
        [this, node, resolver](const error_code& ec, tcp::resolver::results_type found) {
          if (ec) return retry_later(node);
          asio::async_connect(links[node]->sock.socket(), found,
                              [this, node](const error_code& ec2, const tcp::endpoint&) {
                                if (ec2) return retry_later(node);
                                auto& link = *links[node];
                                error_code ignored;
                                link.sock.socket().set_option(tcp::no_delay(true), ignored);
                                link.sock.handshake(true, [this, node](const error_code& ec3) {
                                  if (ec3) return retry_later(node);
                                  answer_challenge(node);
                                });
                              });
        });
  }

  // The peer's challenge, then this node's answer; frames follow.
  void answer_challenge(uint32_t node) {
    auto& l = *links[node];
    asio::async_read(l.sock, asio::buffer(l.challenge), [this, node](const error_code& ec, size_t) {
      auto& link = *links[node];
      const challenge_fields c = get_challenge(link.challenge.data());
      if (ec || c.magic != challenge_magic || c.version != wire_version ||
          (c.secret_required && !key.secret)) {
        return retry_later(node);
      }
      link.answer =
          make_answer(key, link.challenge, {hello_magic, wire_version, o.self, o.identity});
      asio::async_write(link.sock, asio::buffer(link.answer),
                        [this, node](const error_code& ec2, size_t) {
                          if (ec2) return retry_later(node);
                          auto& up = *links[node];
                          up.connecting = false;
                          up.connected = true;
                          write_next(node);
                        });
    });
  }

  void retry_later(uint32_t node) {
    auto& l = *links[node];
    l.sock.reset(tls.get());
    l.connecting = false;
    l.connected = false;
    l.retry.expires_after(std::chrono::milliseconds(100));
    l.retry.async_wait([this, node](const error_code& ec) {
      if (!ec && !links[node]->queue.empty()) connect(node);
    });
  }

  void write_next(uint32_t node) {
    auto& l = *links[node];
    if (!l.connected || l.writing || l.queue.empty()) return;
    l.writing = true;
    const frame& f = l.queue.front();
    std::array<asio::const_buffer, 2> bufs{
        asio::buffer(f.head), f.payload ? asio::buffer(*f.payload) : asio::const_buffer()};
    const size_t total = asio::buffer_size(bufs);
    asio::async_write(l.sock, bufs, all_at_once{total}, [this, node](const error_code& ec, size_t) {
      auto& link = *links[node];
      link.writing = false;
      if (ec) {
        // The connection broke (or was reset: its node's process went away). The frame goes
        // again, whole, on the next connection (a receiver drops a cut frame).
        retry_later(node);
        return;
      }
      frame done = std::move(link.queue.front());
      link.queue.pop_front();
      const uint64_t size = done.payload ? done.payload->size() : 0;
      {
        std::lock_guard<std::mutex> g(mu);
        if (done.payload) {
          link.queued_bytes -= size;
          st.frames_sent += 1;
          st.bytes_sent += size;
        }
      }
      changed.notify_all();
      write_next(node);
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
    uint64_t length = 0;    // of the frame being read
    bool reserved = false;  // `length` is counted in the inbox
    bool answered = false;  // passed the challenge (no longer pending)
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
      if (reserved) ch.release(length);
      reserved = false;
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
        if (get(p, 4) != frame_magic || origin_of(self->id) != self->node || self->id == 0)
          return self->refuse(&bulk_stats::bad_frame);
        if (claimed > self->ch.o.max_frame_bytes) return self->refuse(&bulk_stats::oversized);
        self->length = claimed;
        self->wait_for_room();
      });
    }

    // Reads the payload once the inbox has room for it (or holds nothing: one frame larger
    // than the limit still passes alone).
    void wait_for_room() {
      if (!ch.reserve(length)) {
        auto self = shared_from_this();
        wait.expires_after(std::chrono::milliseconds(1));
        wait.async_wait([self](const error_code& ec) {
          if (!ec && !self->closed) self->wait_for_room();
        });
        return;
      }
      reserved = true;
      payload = ch.pool->get(length);
      read_chunk();
    }

    // The next piece of the payload: a kept buffer is full-size already; a fresh one grows.
    void read_chunk() {
      auto& buf = *payload;
      if (done == length) {
        reserved = false;
        done = 0;
        ch.deliver(id, std::move(payload), length);
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
    uint64_t done = 0;  // payload bytes of the current frame read so far
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

  // Counts `length` in the inbox if it fits (or the inbox is empty).
  bool reserve(uint64_t length) {
    std::lock_guard<std::mutex> g(mu);
    if (fits(length)) {
      inbox_bytes += length;
      st.inbox_bytes_peak = std::max(st.inbox_bytes_peak, inbox_bytes);
      return true;
    }
    return false;
  }
  void release(uint64_t length) {
    {
      std::lock_guard<std::mutex> g(mu);
      DILOCO_CHECK(inbox_bytes >= length, "bulk channel: the inbox counts what it holds");
      inbox_bytes -= length;
    }
    changed.notify_all();
  }

  // Under mu.
  bool fits(uint64_t length) {
    if (inbox_bytes == 0 || inbox_bytes + length <= o.inbox_limit_bytes) return true;
    // Payloads nobody claimed for stale_after_s are given up (their message never came).
    const auto stale = clock::now() - std::chrono::duration_cast<clock::duration>(
                                          std::chrono::duration<double>(o.stale_after_s));
    for (auto it = inbox.begin(); it != inbox.end();) {
      if (it->second.arrived < stale) {
        inbox_bytes -= it->second.bytes->size();
        st.unresolved += 1;
        it = inbox.erase(it);
      } else {
        ++it;
      }
    }
    return inbox_bytes == 0 || inbox_bytes + length <= o.inbox_limit_bytes;
  }

  // A payload read whole; its bytes were reserved in the inbox.
  void deliver(uint64_t id, std::shared_ptr<std::vector<uint8_t>> bytes, uint64_t length) {
    DILOCO_CHECK(bytes->size() == length, "bulk channel: a payload of its announced length");
    {
      std::lock_guard<std::mutex> g(mu);
      st.frames_received += 1;
      st.bytes_received += length;
      auto [at, fresh] =
          inbox.try_emplace(id, inbox_entry{bytes_ptr(std::move(bytes)), clock::now()});
      if (!fresh) {
        // The same id again (a frame resent after a cut connection that had in fact arrived):
        // keep the first, give back the reservation.
        inbox_bytes -= length;
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

uint64_t bulk_channel::push(uint32_t node, bytes_ptr bytes) {
  auto& p = *impl_;
  if (node >= p.links.size() || node == p.o.self || !bytes) return 0;
  const uint64_t size = bytes->size();
  auto& link = *p.links[node];
  {
    std::unique_lock<std::mutex> g(p.mu);
    auto room = [&] {
      return p.closing || link.queued_bytes == 0 ||
             link.queued_bytes + size <= p.o.send_limit_bytes;
    };
    if (!room()) {
      p.st.send_waits += 1;
      if (!p.changed.wait_until(g, after(p.o.wait_timeout_s), room) || p.closing) {
        p.st.send_dropped += 1;
        return 0;
      }
    }
    link.queued_bytes += size;
    p.st.queued_bytes_peak = std::max(p.st.queued_bytes_peak, link.queued_bytes);
  }
  const uint64_t id = (uint64_t{p.o.self} << 48) | (p.seq.fetch_add(1) + 1);
  asio::post(p.io, [&p, node, id, bytes = std::move(bytes)]() mutable {
    auto& l = *p.links[node];
    const uint64_t n = bytes->size();
    l.queue.push_back(impl::frame{make_frame(id, n), std::move(bytes)});
    if (l.connected) {
      p.write_next(node);
    } else {
      p.connect(node);
    }
  });
  return id;
}

void bulk_channel::reset(uint32_t node) {
  auto& p = *impl_;
  if (node >= p.links.size()) return;
  asio::post(p.io, [&p, node] {
    auto& l = *p.links[node];
    if (l.writing || l.connecting) {
      // The pending operation fails, and its handler reconnects.
      error_code ignored;
      l.sock.socket().close(ignored);
    } else if (l.connected) {
      l.sock.reset(p.tls.get());
      l.connected = false;
      if (!l.queue.empty()) p.connect(node);
    }
  });
}

bulk_channel::bytes_ptr bulk_channel::take(uint64_t id, uint64_t size) {
  auto& p = *impl_;
  std::unique_lock<std::mutex> g(p.mu);
  const bool came = p.changed.wait_until(g, after(p.o.wait_timeout_s),
                                         [&] { return p.closing || p.inbox.count(id) != 0; });
  auto it = p.inbox.find(id);
  if (!came || it == p.inbox.end()) {
    p.st.unresolved += 1;
    return nullptr;
  }
  bytes_ptr out = std::move(it->second.bytes);
  p.inbox_bytes -= out->size();
  p.inbox.erase(it);
  if (out->size() != size) {
    p.st.unresolved += 1;
    return nullptr;
  }
  return out;
}

bulk_stats bulk_channel::stats() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->st;
}

}  // namespace diloco
