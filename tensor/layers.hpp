// The layers of the MLP language model, each an explicit forward/backward pair (llm.c style).
//
// Outputs come first in every signature and every buffer has its shape in a comment; all
// matrices are row-major. Backward functions accumulate (+=) into parameter gradients and
// overwrite input gradients. The functions are templates instantiated for float (training) and
// double (finite-difference tests), so the tested code is the code that trains.
#pragma once

#include <cstdint>

namespace diloco::layers {

// out (B, C*E) = concatenation of the embeddings of the C context tokens of each row.
template <class T>
void embedding_forward(T* out, const uint8_t* tokens, const T* table, int B, int C, int E);
// dtable (V, E) += scatter of dout (B, C*E) by tokens (B, C).
template <class T>
void embedding_backward(T* dtable, const T* dout, const uint8_t* tokens, int B, int C, int E);

// out (B, O) = in (B, I) * weight (I, O) + bias (O).
template <class T>
void linear_forward(T* out, const T* in, const T* weight, const T* bias, int B, int I, int O);
// dweight (I, O) += in^T dout; dbias (O) += column sums of dout; din (B, I) = dout weight^T.
// din may be null when the input needs no gradient.
template <class T>
void linear_backward(T* din, T* dweight, T* dbias, const T* dout, const T* in, const T* weight,
                     int B, int I, int O);

// out (N) = tanh(in (N)); out may alias in.
template <class T>
void tanh_forward(T* out, const T* in, int N);
// din (N) = dout (N) * (1 - out^2); din may alias dout.
template <class T>
void tanh_backward(T* din, const T* dout, const T* out, int N);

// probs (B, V) = softmax(logits (B, V)) by row; returns the mean of -log probs[b][targets[b]].
// probs may alias logits.
template <class T>
double softmax_xent_forward(T* probs, const T* logits, const uint8_t* targets, int B, int V);
// dlogits (B, V) = (probs - onehot(targets)) / B, the gradient of the mean loss.
template <class T>
void softmax_xent_backward(T* dlogits, const T* probs, const uint8_t* targets, int B, int V);

}  // namespace diloco::layers
