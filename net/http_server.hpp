// A small HTTP/1.1 server (Boost.Asio, one thread) for the live monitor: GET only, one
// request per connection, bodies from a handler. Requests larger than 8 KiB, other methods
// and malformed request lines are answered with 4xx and closed; the server keeps serving.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.hpp"

namespace diloco {

struct http_response {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class http_server {
 public:
  using handler = std::function<http_response(const std::string& path)>;
  // Listens on host:port (port 0: any free port) and serves until destroyed.
  static result<std::unique_ptr<http_server>> start(const std::string& host, uint16_t port,
                                                    handler h);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;
  uint16_t port() const;
  uint64_t requests() const;  // answered so far
  uint64_t bad_requests() const;

 private:
  struct impl;
  explicit http_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace diloco
