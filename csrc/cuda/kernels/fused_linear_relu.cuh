// fused_linear_relu operand loaders and epilogues for the GEMM cores (kernels/gemm.cuh)
// and the bias-gradient column sum (kernels/reduce.cuh). All matrices are dense row-major:
//   x [M, K], w [N, K], out / grad_output [M, N].
//   forward      out(m, n)  = relu(sum_k x(m, k) * w(n, k) + b(n))      A = x,        B = w^T
//   grad_input   dx(m, k)   = sum_n g(m, n) * w(n, k)                   A = g,        B = w
//   grad_weight  dw(n, k)   = sum_m g(m, n) * x(m, k)                   A = g^T,      B = x
//   grad_bias    db(n)      = sum_m g(m, n)
// with g = 0 where out <= 0, else grad_output (the ReLU mask, applied while loading).
#pragma once
#include "kernels/common.cuh"

namespace xkernels::cuda::kernels {

// A(m, k) = p[m * ld + k]
template <typename T>
struct RowMajorA {
  const T* p;
  int64_t ld;
  static constexpr bool kContiguousK = true;
  __host__ __device__ acc_t<T> operator()(int64_t, int64_t m, int64_t k) const { return Num<T>::to_acc(p[m * ld + k]); }
};
// B(k, n) = p[n * ld + k]  (B is the transpose of a row-major [N, K] matrix)
template <typename T>
struct TransposedB {
  const T* p;
  int64_t ld;
  static constexpr bool kContiguousK = true;
  __host__ __device__ acc_t<T> operator()(int64_t, int64_t k, int64_t n) const { return Num<T>::to_acc(p[n * ld + k]); }
};
// B(k, n) = p[k * ld + n]
template <typename T>
struct RowMajorB {
  const T* p;
  int64_t ld;
  static constexpr bool kContiguousK = false;
  __host__ __device__ acc_t<T> operator()(int64_t, int64_t k, int64_t n) const { return Num<T>::to_acc(p[k * ld + n]); }
};

// The masked gradient g = (out <= 0) ? 0 : grad_output of a row-major [M, N] pair: torch.relu's
// backward (aten's threshold_backward on the output), so a NaN output passes the gradient, and a
// masked-out element is 0 even if grad_output is NaN.
template <typename T>
struct MaskedGrad {
  const T* dy;
  const T* out;
  int64_t ld;
  __host__ __device__ acc_t<T> at(int64_t m, int64_t n) const {
    const int64_t i = m * ld + n;
    return Num<T>::to_acc(out[i]) <= acc_t<T>(0) ? acc_t<T>(0) : Num<T>::to_acc(dy[i]);
  }
};
// A(m, j) = g(m, j): rows of g, reduction over the output features.
template <typename T>
struct MaskedGradA {
  MaskedGrad<T> g;
  static constexpr bool kContiguousK = true;
  __host__ __device__ acc_t<T> operator()(int64_t, int64_t m, int64_t j) const { return g.at(m, j); }
};
// A(n, m) = g(m, n): columns of g, reduction over the rows.
template <typename T>
struct MaskedGradTA {
  MaskedGrad<T> g;
  static constexpr bool kContiguousK = false;
  __host__ __device__ acc_t<T> operator()(int64_t, int64_t n, int64_t m) const { return g.at(m, n); }
};
// Column-sum loader for grad_bias: L(m, n) = g(m, n).
template <typename T>
struct MaskedGradColumns {
  MaskedGrad<T> g;
  __host__ __device__ acc_t<T> operator()(int64_t m, int64_t n) const { return g.at(m, n); }
};

// out(m, n) = relu(v + b(n)), row-major [M, N].
template <typename T, bool kHasBias>
struct LinearReluEpilogue {
  T* out;
  const T* bias;
  int64_t ld;
  __host__ __device__ void operator()(int64_t, int64_t m, int64_t n, acc_t<T> v) const {
    if constexpr (kHasBias) v = v + Num<T>::to_acc(bias[n]);
    out[m * ld + n] = Num<T>::from_acc(relu_keep_nan(v));
  }
};
// C(m, n) = v, row-major.
template <typename T>
struct StoreMatrix {
  T* out;
  int64_t ld;
  __host__ __device__ void operator()(int64_t, int64_t m, int64_t n, acc_t<T> v) const {
    out[m * ld + n] = Num<T>::from_acc(v);
  }
};

}  // namespace xkernels::cuda::kernels
