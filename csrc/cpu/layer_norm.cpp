// layer_norm reference kernels (CPU): the oracle for every other backend.
// Corrected two-pass statistics per row (mean, a correction of its rounding, centred
// variance) in the accumulation type, 64-bit indexing, parallel over rows with at::parallel_for.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "xkernels/dispatch.h"
#include "xkernels/entry.h"

namespace xkernels::reference {

void layer_norm_forward_out(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps,
                            const LayerNormProblem& p, const at::Tensor& out, const at::Tensor& mean,
                            const at::Tensor& rstd) {
  const at::Tensor x = input.contiguous();
  const at::Tensor w = contiguous_if_defined(weight);
  const at::Tensor b = contiguous_if_defined(bias);
  const int64_t M = p.M, N = p.N;
  XK_DISPATCH_FLOATING_TYPES(x.scalar_type(), "layer_norm_forward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* X = x.const_data_ptr<scalar_t>();
    const scalar_t* W = w.defined() ? w.const_data_ptr<scalar_t>() : nullptr;
    const scalar_t* B = b.defined() ? b.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* Y = out.mutable_data_ptr<scalar_t>();
    acc* MEAN = mean.defined() ? mean.mutable_data_ptr<acc>() : nullptr;  // undefined: not saved (layer_norm.out)
    acc* RSTD = rstd.defined() ? rstd.mutable_data_ptr<acc>() : nullptr;
    at::parallel_for(0, M, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const scalar_t* xr = X + i * N;
        acc sum = 0;
        for (int64_t j = 0; j < N; ++j) sum += static_cast<acc>(xr[j]);
        const acc mu0 = sum / static_cast<acc>(N);
        // sum / N rounds, and a row of equal values (eleven 1e15 in float32, seven 0.1) would
        // then get a spurious variance and a non-zero output. The mean of the deviations from
        // mu0 corrects it: for equal values the corrected mean is the value itself, so the row
        // normalizes to exactly 0 (the bias), as in PyTorch.
        acc sd0 = 0;
        for (int64_t j = 0; j < N; ++j) sd0 += static_cast<acc>(xr[j]) - mu0;
        const acc mu = mu0 + sd0 / static_cast<acc>(N);
        // Centred sum of squares about the corrected mean, less the (tiny) remaining first-order
        // term: the corrected two-pass formula of Chan, Golub & LeVeque.
        acc sd = 0, sq = 0;
        for (int64_t j = 0; j < N; ++j) {
          const acc d = static_cast<acc>(xr[j]) - mu;
          sd += d;
          sq += d * d;
        }
        acc var = (sq - sd * (sd / static_cast<acc>(N))) / static_cast<acc>(N);  // biased, as F.layer_norm
        if (var < acc(0)) var = acc(0);                                          // rounding; NaN stays NaN
        // A variance that overflows (|x| ~ 1e20 in float32) has no meaningful reciprocal: rstd
        // 0 would turn the row silently into the bias. Like PyTorch, rstd (and the row) is NaN.
        if (std::isinf(var)) var = std::numeric_limits<acc>::quiet_NaN();
        const acc rs = acc(1) / std::sqrt(var + static_cast<acc>(eps));
        if (MEAN) MEAN[i] = mu;
        if (RSTD) RSTD[i] = rs;
        // Y may be X itself (layer_norm.out in place): element j is read before it is written.
        for (int64_t j = 0; j < N; ++j) {
          acc y = (static_cast<acc>(xr[j]) - mu) * rs;
          if (W) y = y * static_cast<acc>(W[j]);
          if (B) y = y + static_cast<acc>(B[j]);
          Y[i * N + j] = static_cast<scalar_t>(y);
        }
      }
    });
  });
}

// With xhat = (x - mean) * rstd and g = dy * w (dy if no weight):
//   dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))
//   dw = sum_rows(dy * xhat),  db = sum_rows(dy)
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(const at::Tensor& grad_output,
                                                                   const at::Tensor& input, const at::Tensor& mean,
                                                                   const at::Tensor& rstd, const at::Tensor& weight,
                                                                   const LayerNormProblem& p,
                                                                   std::array<bool, 3> mask) {
  const at::Tensor x = input.contiguous(), dy = grad_output.contiguous();
  const at::Tensor w = contiguous_if_defined(weight);
  const auto stat_dtype = layer_norm_stat_dtype(x.scalar_type());
  const at::Tensor mu_t = mean.to(stat_dtype).contiguous(), rs_t = rstd.to(stat_dtype).contiguous();
  const int64_t M = p.M, N = p.N;
  at::Tensor gi = mask[0] ? at::empty_like(x, at::MemoryFormat::Contiguous) : empty_grad_like(x);
  // Weight/bias grads: accumulate column sums in the accumulation type, one column per task.
  const bool want_w = mask[1], want_b = mask[2];  // the entry clears bits for absent parameters
  at::Tensor gw_acc = want_w ? at::empty({N}, x.options().dtype(stat_dtype)) : at::Tensor();
  at::Tensor gb_acc = want_b ? at::empty({N}, x.options().dtype(stat_dtype)) : at::Tensor();
  XK_DISPATCH_FLOATING_TYPES(x.scalar_type(), "layer_norm_backward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* X = x.const_data_ptr<scalar_t>();
    const scalar_t* DY = dy.const_data_ptr<scalar_t>();
    const scalar_t* W = w.defined() ? w.const_data_ptr<scalar_t>() : nullptr;
    const acc* MU = mu_t.const_data_ptr<acc>();
    const acc* RS = rs_t.const_data_ptr<acc>();
    if (mask[0]) {
      scalar_t* DX = gi.mutable_data_ptr<scalar_t>();
      at::parallel_for(0, M, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const scalar_t* xr = X + i * N;
          const scalar_t* dyr = DY + i * N;
          acc sum_g = 0, sum_gx = 0;
          for (int64_t j = 0; j < N; ++j) {
            const acc xhat = (static_cast<acc>(xr[j]) - MU[i]) * RS[i];
            const acc g = static_cast<acc>(dyr[j]) * (W ? static_cast<acc>(W[j]) : acc(1));
            sum_g += g;
            sum_gx += g * xhat;
          }
          const acc mg = sum_g / static_cast<acc>(N), mgx = sum_gx / static_cast<acc>(N);
          for (int64_t j = 0; j < N; ++j) {
            const acc xhat = (static_cast<acc>(xr[j]) - MU[i]) * RS[i];
            const acc g = static_cast<acc>(dyr[j]) * (W ? static_cast<acc>(W[j]) : acc(1));
            DX[i * N + j] = static_cast<scalar_t>(RS[i] * (g - mg - xhat * mgx));
          }
        }
      });
    }
    if (want_w || want_b) {
      acc* GW = want_w ? gw_acc.mutable_data_ptr<acc>() : nullptr;
      acc* GB = want_b ? gb_acc.mutable_data_ptr<acc>() : nullptr;
      at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) {
          acc sw = 0, sb = 0;
          for (int64_t i = 0; i < M; ++i) {
            const acc d = static_cast<acc>(DY[i * N + j]);
            sw += d * ((static_cast<acc>(X[i * N + j]) - MU[i]) * RS[i]);
            sb += d;
          }
          if (GW) GW[j] = sw;
          if (GB) GB[j] = sb;
        }
      });
    }
  });
  at::Tensor gw = want_w ? gw_acc.to(x.scalar_type()).view(p.normalized_shape) : empty_grad_like(x);
  at::Tensor gb = want_b ? gb_acc.to(x.scalar_type()).view(p.normalized_shape) : empty_grad_like(x);
  return {mask[0] ? gi.view(input.sizes()) : gi, gw, gb};
}

}  // namespace xkernels::reference
