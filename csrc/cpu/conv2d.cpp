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

}  // namespace

// out[n, o, oh, ow] = bias[o] + sum_{c, kh, kw} input[n, g*Cg + c, ih, iw] * weight[o, c, kh, kw]
// with g = o / Og, ih = oh*stride_h - pad_h + kh*dilation_h (likewise iw); out-of-range
// input positions are the zero padding, multiplied like any other value (so a NaN or Inf
// weight makes the border outputs NaN, as in PyTorch's float32/float64 convolutions).
// conv2d_relu: out = relu(that sum + residual[n, o, oh, ow]), formed in acc and rounded once (ReLU keeps NaN).
static at::Tensor conv2d_impl(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                              const at::Tensor& residual, bool relu, const Conv2dProblem& p) {
  const at::Tensor x = conv2d_as_4d_dense(input, p);
  const at::Tensor r = residual.defined() ? conv2d_as_4d_dense(residual, p) : at::Tensor();
  const at::Tensor w = weight.contiguous(memory_format(p));
  const at::Tensor b = contiguous_if_defined(bias);
  at::Tensor out = at::empty({p.N, p.O, p.OH, p.OW}, x.options().memory_format(memory_format(p)));
  const Strides4 xs(x), ws(w), ys(out), rs(r.defined() ? r : out);
  const int64_t H = p.H, W = p.W, O = p.O, KH = p.KH, KW = p.KW, OH = p.OH, OW = p.OW;
  const int64_t Cg = p.C_per_group(), Og = p.O_per_group();
  const int64_t sh = p.stride[0], sw = p.stride[1], ph = p.padding[0], pw = p.padding[1];
  const int64_t dh = p.dilation[0], dw = p.dilation[1];
  XK_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv2d", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* X = x.const_data_ptr<scalar_t>();
    const scalar_t* Wt = w.const_data_ptr<scalar_t>();
    const scalar_t* B = b.defined() ? b.const_data_ptr<scalar_t>() : nullptr;
    const scalar_t* Res = r.defined() ? r.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* Y = out.mutable_data_ptr<scalar_t>();
    // One task item = one output row (n, oh).
    at::parallel_for(0, p.N * OH, grain_for(OW * O * Cg * KH * KW), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = row / OH, oh = row % OH;
        for (int64_t ow = 0; ow < OW; ++ow) {
          for (int64_t o = 0; o < O; ++o) {
            const int64_t c0 = (o / Og) * Cg;  // first input channel of o's group
            acc sum = 0;
            for (int64_t c = 0; c < Cg; ++c) {
              for (int64_t kh = 0; kh < KH; ++kh) {
                const int64_t ih = oh * sh - ph + kh * dh;
                const bool row_in = ih >= 0 && ih < H;
                for (int64_t kw = 0; kw < KW; ++kw) {
                  const int64_t iw = ow * sw - pw + kw * dw;
                  // Zero padding is a real zero: 0 * NaN/Inf weight is NaN, as in PyTorch.
                  const acc xv = row_in && iw >= 0 && iw < W ? static_cast<acc>(X[xs(n, c0 + c, ih, iw)]) : acc(0);
                  sum += xv * static_cast<acc>(Wt[ws(o, c, kh, kw)]);
                }
              }
            }
            if (B) sum += static_cast<acc>(B[o]);
            if (Res) sum += static_cast<acc>(Res[rs(n, o, oh, ow)]);
            if (relu && sum < acc(0)) sum = acc(0);
            Y[ys(n, o, oh, ow)] = static_cast<scalar_t>(sum);
          }
        }
      }
    });
  });
  return p.batched ? out : out.view(p.out_sizes());
}

at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, const Conv2dProblem& p) {
  return conv2d_impl(input, weight, bias, at::Tensor(), /*relu=*/false, p);
}

at::Tensor conv2d_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& residual, const Conv2dProblem& p) {
  return conv2d_impl(input, weight, bias, residual, /*relu=*/true, p);
}

// Packed weights: the layout of shapes.h; the oracle unpacks and convolves as above.
at::Tensor pack_conv2d_weight(const at::Tensor& weight, int64_t groups) { return conv2d_pack(weight, groups); }

at::Tensor conv2d_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                         const at::Tensor& residual, bool relu, const Conv2dProblem& p) {
  const at::Tensor weight = conv2d_unpack(packed_weight, {p.O, p.C_per_group(), p.KH, p.KW}, p.groups);
  return conv2d_impl(input, weight, bias, residual, relu, p);
}

// With dy = grad_output:
//   grad_input[n, g*Cg + c, ih, iw] = sum over o in group g and (kh, kw) with
//       ih = oh*sh - ph + kh*dh, iw = ow*sw - pw + kw*dw for some in-range (oh, ow)
//       of dy[n, o, oh, ow] * weight[o, c, kh, kw]
//   grad_weight[o, c, kh, kw] = sum_{n, oh, ow} dy[n, o, oh, ow] * input[n, g*Cg + c, ih, iw]  (in range)
//   grad_bias[o] = sum_{n, oh, ow} dy[n, o, oh, ow]
// grad_input and grad_weight come back in the problem's memory format (grad_input 3-D and
// contiguous when the input is unbatched), as the fake implementation in ops.py says.
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                               const at::Tensor& weight, const Conv2dProblem& p,
                                                               std::array<bool, 3> mask) {
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
        for (int64_t row = begin; row < end; ++row) {
          const int64_t n = row / H, ih = row % H;
          for (int64_t iw = 0; iw < W; ++iw) {
            for (int64_t ci = 0; ci < C; ++ci) {
              const int64_t o0 = (ci / Cg) * Og, c = ci % Cg;  // ci's group: outputs o0 .. o0+Og-1
              acc sum = 0;
              for (int64_t o = o0; o < o0 + Og; ++o) {
                for (int64_t kh = 0; kh < KH; ++kh) {
                  const int64_t th = ih + ph - kh * dh;  // = oh * sh when (kh) hits row ih from output row oh
                  if (th < 0 || th % sh != 0 || th / sh >= OH) continue;
                  const int64_t oh = th / sh;
                  for (int64_t kw = 0; kw < KW; ++kw) {
                    const int64_t tw = iw + pw - kw * dw;
                    if (tw < 0 || tw % sw != 0 || tw / sw >= OW) continue;
                    const int64_t ow = tw / sw;
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
            for (int64_t kw = 0; kw < KW; ++kw) {
              acc sum = 0;
              for (int64_t n = 0; n < N; ++n) {
                for (int64_t oh = 0; oh < OH; ++oh) {
                  const int64_t ih = oh * sh - ph + kh * dh;
                  const bool row_in = ih >= 0 && ih < H;
                  for (int64_t ow = 0; ow < OW; ++ow) {
                    const int64_t iw = ow * sw - pw + kw * dw;
                    // Padding is a real zero: a NaN/Inf grad_output times it is NaN, as in PyTorch.
                    const acc xv = row_in && iw >= 0 && iw < W ? static_cast<acc>(X[xs(n, ci, ih, iw)]) : acc(0);
                    sum += static_cast<acc>(DY[ys(n, o, oh, ow)]) * xv;
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
