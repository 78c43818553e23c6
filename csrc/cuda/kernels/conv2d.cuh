// conv2d as implicit GEMM: operand loaders and epilogues for the GEMM cores (kernels/gemm.cuh)
// and the bias-gradient column sum (kernels/reduce.cuh). Nothing is materialized: the
// loaders compute input / weight / grad_output addresses from the GEMM indices (im2col and
// its transpose on the fly). All tensors are addressed through explicit (n, c, h, w) strides,
// so NCHW and channels_last (NHWC) work alike; the template flag CL only orders the
// reduction index so that consecutive k walk the contiguous dimension of that layout.
//
// Per group g (grid y), with Cg = C/groups, Og = O/groups:
//   forward      y(b, o, oh, ow)  : M = Og,  N = B*OH*OW, K = Cg*KH*KW   A = weight,          B = input patches
//   grad_input   dx(b, c, ih, iw) : M = Cg,  N = B*H*W,   K = Og*KH*KW   A = weight^T,        B = grad_output (scatter)
//   grad_weight  dw(o, c, kh, kw) : M = Og,  N = Cg*KH*KW, K = B*OH*OW   A = grad_output,     B = input patches^T
// with ih = oh*stride - pad + kh*dilation (same for w).
#pragma once
#include "kernels/common.cuh"

namespace xkernels::cuda::kernels {

struct ConvGeometry {
  int64_t N, C, H, W;  // input (N = 1 when unbatched)
  int64_t O, KH, KW;   // weight
  int64_t OH, OW;      // output
  int64_t Cg, Og;      // channels per group
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
};

struct Strides4 {
  int64_t n, c, h, w;
};

// Splits a (channel, kh, kw) reduction/column index: channel-major for NCHW, channel-minor
// for channels_last (the channel is the contiguous dimension there).
template <bool CL>
__host__ __device__ __forceinline__ void split_channel_tap(int64_t k, int64_t channels, int64_t KH, int64_t KW,
                                                           int64_t& ch, int64_t& kh, int64_t& kw) {
  int64_t tap;
  if constexpr (CL) {
    ch = k % channels;
    tap = k / channels;
  } else {
    ch = k / (KH * KW);
    tap = k % (KH * KW);
  }
  kh = tap / KW;
  kw = tap % KW;
}

// Splits a (b, y, x) spatial index over an [*, Y, X] grid.
__host__ __device__ __forceinline__ void split_spatial(int64_t n, int64_t Y, int64_t X, int64_t& b, int64_t& y,
                                                       int64_t& x) {
  b = n / (Y * X);
  const int64_t r = n % (Y * X);
  y = r / X;
  x = r % X;
}

// ---------------------------------------------------------------- forward
// A(g, o, k=(c,kh,kw)) = weight[g*Og + o, c, kh, kw]
template <typename T, bool CL>
struct ConvWeightA {
  const T* w;
  Strides4 s;
  ConvGeometry p;
  static constexpr bool kContiguousK = true;
  __host__ __device__ acc_t<T> operator()(int64_t g, int64_t o, int64_t k) const {
    int64_t c, kh, kw;
    split_channel_tap<CL>(k, p.Cg, p.KH, p.KW, c, kh, kw);
    return Num<T>::to_acc(w[(g * p.Og + o) * s.n + c * s.c + kh * s.h + kw * s.w]);
  }
};

// The input element under output position (b, oh, ow) and tap (c, kh, kw) of group g, or 0 in the padding.
template <typename T>
__host__ __device__ __forceinline__ acc_t<T> conv_input_tap(const T* x, const Strides4& s, const ConvGeometry& p,
                                                            int64_t g, int64_t b, int64_t oh, int64_t ow, int64_t c,
                                                            int64_t kh, int64_t kw) {
  const int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dil_h;
  const int64_t iw = ow * p.stride_w - p.pad_w + kw * p.dil_w;
  if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W) return acc_t<T>(0);
  return Num<T>::to_acc(x[b * s.n + (g * p.Cg + c) * s.c + ih * s.h + iw * s.w]);
}

// B(g, k=(c,kh,kw), n=(b,oh,ow)) = input patch element
template <typename T, bool CL>
struct ConvInputPatchB {
  const T* x;
  Strides4 s;
  ConvGeometry p;
  static constexpr bool kContiguousK = CL;  // NCHW: consecutive n (ow) are the closer ones
  __host__ __device__ acc_t<T> operator()(int64_t g, int64_t k, int64_t n) const {
    int64_t c, kh, kw, b, oh, ow;
    split_channel_tap<CL>(k, p.Cg, p.KH, p.KW, c, kh, kw);
    split_spatial(n, p.OH, p.OW, b, oh, ow);
    return conv_input_tap(x, s, p, g, b, oh, ow, c, kh, kw);
  }
};

// y(b, g*Og + o, oh, ow) = v [+ bias], and for conv2d_relu (kRelu) relu(that + residual), the residual
// (or null) laid out exactly as y; formed in acc_t, rounded once; the ReLU keeps NaN (as torch.relu).
template <typename T, bool kHasBias, bool kRelu = false>
struct ConvOutputEpilogue {
  T* y;
  Strides4 s;
  const T* bias;
  ConvGeometry p;
  const T* residual = nullptr;
  __host__ __device__ void operator()(int64_t g, int64_t o, int64_t n, acc_t<T> v) const {
    int64_t b, oh, ow;
    split_spatial(n, p.OH, p.OW, b, oh, ow);
    const int64_t oc = g * p.Og + o;
    const int64_t idx = b * s.n + oc * s.c + oh * s.h + ow * s.w;
    if constexpr (kHasBias) v = v + Num<T>::to_acc(bias[oc]);
    if constexpr (kRelu) {
      if (residual != nullptr) v = v + Num<T>::to_acc(residual[idx]);
      v = v < acc_t<T>(0) ? acc_t<T>(0) : v;
    }
    y[idx] = Num<T>::from_acc(v);
  }
};

// ---------------------------------------------------------------- grad_input
// A(g, c, k=(o,kh,kw)) = weight[g*Og + o, c, kh, kw]
template <typename T, bool CL>
struct ConvWeightTA {
  const T* w;
  Strides4 s;
  ConvGeometry p;
  static constexpr bool kContiguousK = !CL;  // channels_last weight: c (the row) is contiguous
  __host__ __device__ acc_t<T> operator()(int64_t g, int64_t c, int64_t k) const {
    int64_t o, kh, kw;
    split_channel_tap<CL>(k, p.Og, p.KH, p.KW, o, kh, kw);
    return Num<T>::to_acc(w[(g * p.Og + o) * s.n + c * s.c + kh * s.h + kw * s.w]);
  }
};

// B(g, k=(o,kh,kw), n=(b,ih,iw)) = grad_output[b, g*Og + o, oh, ow] where ih = oh*stride - pad + kh*dil
// (and likewise for w) has an integral in-range solution oh. Where it has none the term is absent
// (kernels/gemm.cuh: skipped, not multiplied by 0): as in PyTorch (col2im) and the reference, a NaN /
// Inf weight reaches only the grad_input positions its tap actually touches.
template <typename T, bool CL>
struct ConvGradOutputScatterB {
  const T* dy;
  Strides4 s;
  ConvGeometry p;
  static constexpr bool kContiguousK = CL;
  static constexpr bool kAbsentTerms = true;
  __host__ __device__ bool load(int64_t g, int64_t k, int64_t n, acc_t<T>& v) const {
    int64_t o, kh, kw, b, ih, iw;
    split_channel_tap<CL>(k, p.Og, p.KH, p.KW, o, kh, kw);
    split_spatial(n, p.H, p.W, b, ih, iw);
    const int64_t th = ih + p.pad_h - kh * p.dil_h, tw = iw + p.pad_w - kw * p.dil_w;
    if (th < 0 || tw < 0 || th % p.stride_h != 0 || tw % p.stride_w != 0) return false;
    const int64_t oh = th / p.stride_h, ow = tw / p.stride_w;
    if (oh >= p.OH || ow >= p.OW) return false;
    v = Num<T>::to_acc(dy[b * s.n + (g * p.Og + o) * s.c + oh * s.h + ow * s.w]);
    return true;
  }
  // The element, 0 where the term is absent (sequential GEMMs, compile_check/kernels_cpu_test.cpp).
  __host__ __device__ acc_t<T> operator()(int64_t g, int64_t k, int64_t n) const {
    acc_t<T> v = acc_t<T>(0);
    return load(g, k, n, v) ? v : acc_t<T>(0);
  }
};

// dx(b, g*Cg + c, ih, iw) = v
template <typename T>
struct ConvGradInputEpilogue {
  T* dx;
  Strides4 s;
  ConvGeometry p;
  __host__ __device__ void operator()(int64_t g, int64_t c, int64_t n, acc_t<T> v) const {
    int64_t b, ih, iw;
    split_spatial(n, p.H, p.W, b, ih, iw);
    dx[b * s.n + (g * p.Cg + c) * s.c + ih * s.h + iw * s.w] = Num<T>::from_acc(v);
  }
};

// ---------------------------------------------------------------- grad_weight
// A(g, o, k=(b,oh,ow)) = grad_output[b, g*Og + o, oh, ow]
template <typename T, bool CL>
struct ConvGradOutputA {
  const T* dy;
  Strides4 s;
  ConvGeometry p;
  static constexpr bool kContiguousK = !CL;  // NCHW: ow contiguous; channels_last: o contiguous
  __host__ __device__ acc_t<T> operator()(int64_t g, int64_t o, int64_t k) const {
    int64_t b, oh, ow;
    split_spatial(k, p.OH, p.OW, b, oh, ow);
    return Num<T>::to_acc(dy[b * s.n + (g * p.Og + o) * s.c + oh * s.h + ow * s.w]);
  }
};

// B(g, k=(b,oh,ow), n=(c,kh,kw)) = input patch element
template <typename T, bool CL>
struct ConvInputPatchTB {
  const T* x;
  Strides4 s;
  ConvGeometry p;
  static constexpr bool kContiguousK = !CL;
  __host__ __device__ acc_t<T> operator()(int64_t g, int64_t k, int64_t n) const {
    int64_t c, kh, kw, b, oh, ow;
    split_channel_tap<CL>(n, p.Cg, p.KH, p.KW, c, kh, kw);
    split_spatial(k, p.OH, p.OW, b, oh, ow);
    return conv_input_tap(x, s, p, g, b, oh, ow, c, kh, kw);
  }
};

// dw(g*Og + o, c, kh, kw) = v
template <typename T, bool CL>
struct ConvGradWeightEpilogue {
  T* dw;
  Strides4 s;
  ConvGeometry p;
  __host__ __device__ void operator()(int64_t g, int64_t o, int64_t n, acc_t<T> v) const {
    int64_t c, kh, kw;
    split_channel_tap<CL>(n, p.Cg, p.KH, p.KW, c, kh, kw);
    dw[(g * p.Og + o) * s.n + c * s.c + kh * s.h + kw * s.w] = Num<T>::from_acc(v);
  }
};

// ---------------------------------------------------------------- grad_bias
// Column-sum loader: L(r=(b, oh, ow), o) = grad_output[b, o, oh, ow].
template <typename T>
struct ConvGradOutputColumns {
  const T* dy;
  Strides4 s;
  int64_t OH, OW;
  __host__ __device__ acc_t<T> operator()(int64_t r, int64_t o) const {
    int64_t b, oh, ow;
    split_spatial(r, OH, OW, b, oh, ow);
    return Num<T>::to_acc(dy[b * s.n + o * s.c + oh * s.h + ow * s.w]);
  }
};

}  // namespace xkernels::cuda::kernels
