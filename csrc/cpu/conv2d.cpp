// conv2d reference kernels (CPU): the oracle for every other backend.
// Direct convolution with F.conv2d semantics (stride, padding, dilation, groups),
// every output element summed in the accumulation type in index order, 64-bit
// indexing, parallel over output rows with at::parallel_for.
//
// One code path serves NCHW and channels_last: tensors are made dense in the
// problem's memory format (Conv2dProblem::channels_last) and addressed through their
// strides, so the format only changes which loop walks memory contiguously.
// The backward computes every gradient element as a gather (a sum over the elements
// it depends on), so no two tasks write the same element and results are deterministic.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "xkernels/dispatch.h"
#include "xkernels/entry.h"

namespace xkernels::reference {
namespace {

// Items per parallel task: enough multiply-adds per task (at::internal::GRAIN_SIZE) that
// tiny problems (gradcheck calls this thousands of times) run inline, without a thread team.
int64_t grain_for(int64_t work_per_item) {
  return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(1, work_per_item));
}

at::MemoryFormat memory_format(const Conv2dProblem& p) {
  return p.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

// Element strides of a 4-D tensor, for [n, c, h, w] addressing.
struct Strides4 {
  int64_t n, c, h, w;
  explicit Strides4(const at::Tensor& t) : n(t.stride(0)), c(t.stride(1)), h(t.stride(2)), w(t.stride(3)) {}
  int64_t operator()(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const { return i0 * n + i1 * c + i2 * h + i3 * w; }
};

// The indices i in [0, count) for which a*i + b lies in [0, size), as the range [lo, hi) (a > 0).
// E.g. the kernel taps kh of output row oh that read a real (not padding) input row:
// index_range(dilation, oh*stride - pad, KH, H). Hoisting these bounds out of the inner
// loops keeps them free of per-tap range checks without changing the summation order.
struct IndexRange {
  int64_t lo, hi;
};
IndexRange index_range(int64_t a, int64_t b, int64_t count, int64_t size) {
  const int64_t lo = b >= 0 ? 0 : (-b + a - 1) / a;
  const int64_t hi = b > size - 1 ? 0 : std::min(count, (size - 1 - b) / a + 1);
  return {lo, std::max(lo, hi)};
}

// (kernel tap, output position) pairs through which input position `in_pos` contributes:
// in_pos = out*stride - pad + tap*dilation with 0 <= out < out_size.
void taps_reaching(int64_t in_pos, int64_t stride, int64_t pad, int64_t dil, int64_t K, int64_t out_size,
                   std::vector<std::pair<int64_t, int64_t>>& taps) {
  taps.clear();
  for (int64_t k = 0; k < K; ++k) {
    const int64_t t = in_pos + pad - k * dil;  // = out * stride
    if (t >= 0 && t % stride == 0 && t / stride < out_size) taps.emplace_back(k, t / stride);
  }
}

}  // namespace

// out[n, o, oh, ow] = bias[o] + sum_{c, kh, kw} input[n, g*Cg + c, ih, iw] * weight[o, c, kh, kw]
// with g = o / Og, ih = oh*stride_h - pad_h + kh*dilation_h (likewise iw); out-of-range
// input positions are the zero padding and are skipped.
at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                  const Conv2dProblem& p) {
  const at::Tensor x = conv2d_as_4d_dense(input, p);
  const at::Tensor w = weight.contiguous(memory_format(p));
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  at::Tensor out = at::empty({p.N, p.O, p.OH, p.OW}, x.options().memory_format(memory_format(p)));
  const Strides4 xs(x), ws(w), ys(out);
  const int64_t H = p.H, W = p.W, O = p.O, KH = p.KH, KW = p.KW, OH = p.OH, OW = p.OW;
  const int64_t Cg = p.C_per_group(), Og = p.O_per_group();
  const int64_t sh = p.stride[0], sw = p.stride[1], ph = p.padding[0], pw = p.padding[1];
  const int64_t dh = p.dilation[0], dw = p.dilation[1];
  XK_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv2d", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* X = x.const_data_ptr<scalar_t>();
    const scalar_t* Wt = w.const_data_ptr<scalar_t>();
    const scalar_t* B = b.defined() ? b.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* Y = out.mutable_data_ptr<scalar_t>();
    // One task item = one output row (n, oh).
    at::parallel_for(0, p.N * OH, grain_for(OW * O * Cg * KH * KW), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = row / OH, oh = row % OH;
        const IndexRange kh_in = index_range(dh, oh * sh - ph, KH, H);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const IndexRange kw_in = index_range(dw, ow * sw - pw, KW, W);
          for (int64_t o = 0; o < O; ++o) {
            const int64_t c0 = (o / Og) * Cg;  // first input channel of o's group
            acc sum = 0;
            for (int64_t c = 0; c < Cg; ++c) {
              for (int64_t kh = kh_in.lo; kh < kh_in.hi; ++kh) {
                const int64_t ih = oh * sh - ph + kh * dh;
                for (int64_t kw = kw_in.lo; kw < kw_in.hi; ++kw) {
                  const int64_t iw = ow * sw - pw + kw * dw;
                  sum += static_cast<acc>(X[xs(n, c0 + c, ih, iw)]) * static_cast<acc>(Wt[ws(o, c, kh, kw)]);
                }
              }
            }
            if (B) sum += static_cast<acc>(B[o]);
            Y[ys(n, o, oh, ow)] = static_cast<scalar_t>(sum);
          }
        }
      }
    });
  });
  return p.batched ? out : out.view(p.out_sizes());
}

// With dy = grad_output:
//   grad_input[n, g*Cg + c, ih, iw] = sum over o in group g and (kh, kw) with
//       ih = oh*sh - ph + kh*dh, iw = ow*sw - pw + kw*dw for some in-range (oh, ow)
//       of dy[n, o, oh, ow] * weight[o, c, kh, kw]
//   grad_weight[o, c, kh, kw] = sum_{n, oh, ow} dy[n, o, oh, ow] * input[n, g*Cg + c, ih, iw]  (in range)
//   grad_bias[o] = sum_{n, oh, ow} dy[n, o, oh, ow]
// grad_input and grad_weight come back in the problem's memory format (grad_input 3-D and
// contiguous when the input is unbatched), as the fake implementation in ops.py says.
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward(const at::Tensor& grad_output,
                                                               const at::Tensor& input, const at::Tensor& weight,
                                                               const Conv2dProblem& p, std::array<bool, 3> mask) {
  const at::MemoryFormat fmt = memory_format(p);
  const at::Tensor x = conv2d_as_4d_dense(input, p);
  const at::Tensor dy = conv2d_as_4d_dense(grad_output, p);
  const at::Tensor w = weight.contiguous(fmt);
  const int64_t N = p.N, C = p.C, H = p.H, W = p.W, O = p.O, KH = p.KH, KW = p.KW, OH = p.OH, OW = p.OW;
  const int64_t Cg = p.C_per_group(), Og = p.O_per_group();
  const int64_t sh = p.stride[0], sw = p.stride[1], ph = p.padding[0], pw = p.padding[1];
  const int64_t dh = p.dilation[0], dw = p.dilation[1];
  at::Tensor gi = mask[0] ? at::empty({N, C, H, W}, x.options().memory_format(fmt)) : empty_grad_like(input);
  at::Tensor gw = mask[1] ? at::empty(weight.sizes(), w.options().memory_format(fmt)) : empty_grad_like(weight);
  at::Tensor gb = mask[2] ? at::empty({O}, w.options()) : empty_grad_like(weight);
  const Strides4 xs(x), ws(w), ys(dy);
  XK_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv2d_backward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* X = x.const_data_ptr<scalar_t>();
    const scalar_t* Wt = w.const_data_ptr<scalar_t>();
    const scalar_t* DY = dy.const_data_ptr<scalar_t>();

    if (mask[0]) {
      scalar_t* DX = gi.mutable_data_ptr<scalar_t>();
      const Strides4 gs(gi);
      // One task item = one grad_input row (n, ih).
      at::parallel_for(0, N * H, grain_for(W * C * Og * KH * KW), [&](int64_t begin, int64_t end) {
        std::vector<std::pair<int64_t, int64_t>> h_taps, w_taps;  // (kh, oh) and (kw, ow)
        for (int64_t row = begin; row < end; ++row) {
          const int64_t n = row / H, ih = row % H;
          taps_reaching(ih, sh, ph, dh, KH, OH, h_taps);
          for (int64_t iw = 0; iw < W; ++iw) {
            taps_reaching(iw, sw, pw, dw, KW, OW, w_taps);
            for (int64_t ci = 0; ci < C; ++ci) {
              const int64_t o0 = (ci / Cg) * Og, c = ci % Cg;  // ci's group: outputs o0 .. o0+Og-1
              acc sum = 0;
              for (int64_t o = o0; o < o0 + Og; ++o) {
                for (const auto& [kh, oh] : h_taps) {
                  for (const auto& [kw, ow] : w_taps) {
                    sum += static_cast<acc>(DY[ys(n, o, oh, ow)]) * static_cast<acc>(Wt[ws(o, c, kh, kw)]);
                  }
                }
              }
              DX[gs(n, ci, ih, iw)] = static_cast<scalar_t>(sum);
            }
          }
        }
      });
    }

    if (mask[1]) {
      scalar_t* DW = gw.mutable_data_ptr<scalar_t>();
      const Strides4 gs(gw);
      // One task item = one filter (o, c): KH*KW sums over (n, oh, ow).
      at::parallel_for(0, O * Cg, grain_for(KH * KW * N * OH * OW), [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
          const int64_t o = item / Cg, c = item % Cg;
          const int64_t ci = (o / Og) * Cg + c;
          for (int64_t kh = 0; kh < KH; ++kh) {
            const IndexRange oh_in = index_range(sh, kh * dh - ph, OH, H);  // output rows whose tap kh is real input
            for (int64_t kw = 0; kw < KW; ++kw) {
              const IndexRange ow_in = index_range(sw, kw * dw - pw, OW, W);
              acc sum = 0;
              for (int64_t n = 0; n < N; ++n) {
                for (int64_t oh = oh_in.lo; oh < oh_in.hi; ++oh) {
                  const int64_t ih = oh * sh - ph + kh * dh;
                  for (int64_t ow = ow_in.lo; ow < ow_in.hi; ++ow) {
                    const int64_t iw = ow * sw - pw + kw * dw;
                    sum += static_cast<acc>(DY[ys(n, o, oh, ow)]) * static_cast<acc>(X[xs(n, ci, ih, iw)]);
                  }
                }
              }
              DW[gs(o, c, kh, kw)] = static_cast<scalar_t>(sum);
            }
          }
        }
      });
    }

    if (mask[2]) {
      scalar_t* DB = gb.mutable_data_ptr<scalar_t>();
      at::parallel_for(0, O, grain_for(N * OH * OW), [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          acc sum = 0;
          for (int64_t n = 0; n < N; ++n)
            for (int64_t oh = 0; oh < OH; ++oh)
              for (int64_t ow = 0; ow < OW; ++ow) sum += static_cast<acc>(DY[ys(n, o, oh, ow)]);
          DB[o] = static_cast<scalar_t>(sum);
        }
      });
    }
  });
  if (mask[0] && !p.batched) gi = gi.view(input.sizes());
  return {gi, gw, gb};
}

}  // namespace xkernels::reference

TORCH_LIBRARY_IMPL(xkernels, CPU, m) {
  m.impl("conv2d", &xkernels::entry::conv2d<xkernels::choose_cpu_backend>);
  m.impl("conv2d_backward", &xkernels::entry::conv2d_backward<xkernels::choose_cpu_backend>);
}
