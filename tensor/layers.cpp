#include "tensor/layers.hpp"

#include <Eigen/Core>
#include <cmath>
#include <cstring>

#include "base/check.hpp"

namespace diloco::layers {

namespace {
template <class T>
using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using map = Eigen::Map<matrix<T>>;
template <class T>
using cmap = Eigen::Map<const matrix<T>>;
template <class T>
using row = Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>;
template <class T>
using crow = Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>;
}  // namespace

template <class T>
void embedding_forward(T* out, const uint8_t* tokens, const T* table, int B, int C, int E) {
  DILOCO_CHECK(B > 0 && C > 0 && E > 0, "layers: an embedding of a non-empty batch");
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < C; ++c) {
      const T* src = table + static_cast<size_t>(tokens[b * C + c]) * E;
      std::memcpy(out + (static_cast<size_t>(b) * C + c) * E, src, sizeof(T) * E);
    }
  }
}

template <class T>
void embedding_backward(T* dtable, const T* dout, const uint8_t* tokens, int B, int C, int E) {
  // Fixed order (b, c, e): the scatter-add is deterministic even when tokens repeat.
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < C; ++c) {
      T* dst = dtable + static_cast<size_t>(tokens[b * C + c]) * E;
      const T* src = dout + (static_cast<size_t>(b) * C + c) * E;
      for (int e = 0; e < E; ++e) dst[e] += src[e];
    }
  }
}

template <class T>
void linear_forward(T* out, const T* in, const T* weight, const T* bias, int B, int I, int O) {
  DILOCO_CHECK(B > 0 && I > 0 && O > 0, "layers: a dense layer of non-empty shape");
  map<T> y(out, B, O);
  y.noalias() = cmap<T>(in, B, I) * cmap<T>(weight, I, O);
  y.rowwise() += crow<T>(bias, O);
}

template <class T>
void linear_backward(T* din, T* dweight, T* dbias, const T* dout, const T* in, const T* weight,
                     int B, int I, int O) {
  cmap<T> dy(dout, B, O);
  map<T>(dweight, I, O).noalias() += cmap<T>(in, B, I).transpose() * dy;
  row<T>(dbias, O) += dy.colwise().sum();
  if (din != nullptr) map<T>(din, B, I).noalias() = dy * cmap<T>(weight, I, O).transpose();
}

template <class T>
void tanh_forward(T* out, const T* in, int N) {
  using arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<arr>(out, N) = Eigen::Map<const arr>(in, N).tanh();
}

template <class T>
void tanh_backward(T* din, const T* dout, const T* out, int N) {
  using arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const arr> y(out, N);
  Eigen::Map<arr>(din, N) = Eigen::Map<const arr>(dout, N) * (T(1) - y.square());
}

template <class T>
double softmax_xent_forward(T* probs, const T* logits, const uint8_t* targets, int B, int V) {
  using arr = Eigen::Array<T, 1, Eigen::Dynamic>;
  double loss_sum = 0.0;
  for (int b = 0; b < B; ++b) {
    Eigen::Map<const arr> z(logits + static_cast<size_t>(b) * V, V);
    Eigen::Map<arr> p(probs + static_cast<size_t>(b) * V, V);
    const int t = targets[b];
    DILOCO_CHECK(t < V, "softmax cross-entropy: a target outside the vocabulary");
    const T max_z = z.maxCoeff();
    const T z_t = z(t);  // read before p (which may alias z) is overwritten
    p = (z - max_z).exp();
    const T sum = p.sum();
    // log p_t = z_t - max - log(sum), computed before normalizing to keep precision.
    loss_sum -= static_cast<double>(z_t - max_z) - std::log(static_cast<double>(sum));
    p /= sum;
  }
  return loss_sum / B;
}

template <class T>
void softmax_xent_backward(T* dlogits, const T* probs, const uint8_t* targets, int B, int V) {
  const T inv_b = T(1) / static_cast<T>(B);
  map<T> d(dlogits, B, V);
  d = cmap<T>(probs, B, V) * inv_b;
  for (int b = 0; b < B; ++b) d(b, targets[b]) -= inv_b;
}

#define DILOCO_INSTANTIATE_LAYERS(T)                                                         \
  template void embedding_forward<T>(T*, const uint8_t*, const T*, int, int, int);           \
  template void embedding_backward<T>(T*, const T*, const uint8_t*, int, int, int);          \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int);          \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int); \
  template void tanh_forward<T>(T*, const T*, int);                                          \
  template void tanh_backward<T>(T*, const T*, const T*, int);                               \
  template double softmax_xent_forward<T>(T*, const T*, const uint8_t*, int, int);           \
  template void softmax_xent_backward<T>(T*, const T*, const uint8_t*, int, int);

DILOCO_INSTANTIATE_LAYERS(float)
DILOCO_INSTANTIATE_LAYERS(double)

}  // namespace diloco::layers
