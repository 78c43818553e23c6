// fused_linear_relu reference kernels (CPU): the oracle for every other backend.
// Every output element is one dot product over K in the accumulation type, summed
// in index order, 64-bit indexing, parallel over rows with at::parallel_for.
//
// Memory access: input [M, K] and weight [N, K] are both row-major with K innermost,
// so the forward's dot product of an input row with a weight row reads two contiguous
// rows; the backward is written so that its innermost loops also walk contiguous rows
// (of weight for grad_input, of input for grad_weight).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "xkernels/dispatch.h"
#include "xkernels/entry.h"

namespace xkernels::reference {
namespace {

// Rows per parallel task: enough multiply-adds per task (at::internal::GRAIN_SIZE) that
// tiny problems (gradcheck calls this thousands of times) run inline, without a thread team.
int64_t grain_for(int64_t work_per_row) {
  return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(1, work_per_row));
}

}  // namespace

// out[i, j] = relu(sum_k input[i, k] * weight[j, k] + bias[j])
at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                             const LinearProblem& p) {
  const at::Tensor x = input.contiguous();
  const at::Tensor w = weight.contiguous();
  const at::Tensor b = contiguous_if_defined(bias);
  at::Tensor out = at::empty({p.M, p.N}, x.options());
  const int64_t M = p.M, N = p.N, K = p.K;
  XK_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_linear_relu", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* X = x.const_data_ptr<scalar_t>();
    const scalar_t* W = w.const_data_ptr<scalar_t>();
    const scalar_t* B = b.defined() ? b.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* Y = out.mutable_data_ptr<scalar_t>();
    // Adds the bias, applies relu and stores out[i, j]. The relu keeps NaN (as torch.relu):
    // only negative values become 0.
    auto store = [&](int64_t i, int64_t j, acc sum) {
      if (B) sum += static_cast<acc>(B[j]);
      Y[i * N + j] = static_cast<scalar_t>(sum < acc(0) ? acc(0) : sum);
    };
    at::parallel_for(0, M, grain_for(N * K), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const scalar_t* xr = X + i * K;
        int64_t j = 0;
        // kCols weight rows per pass over the input row: independent sums (each still summed
        // in k order, so the result is that of one dot product at a time) keep several
        // additions in flight, and each input element is loaded once per kCols outputs.
        constexpr int64_t kCols = 4;
        for (; j + kCols <= N; j += kCols) {
          acc sum[kCols] = {};
          for (int64_t k = 0; k < K; ++k) {
            const acc xk = static_cast<acc>(xr[k]);
            for (int64_t c = 0; c < kCols; ++c) sum[c] += xk * static_cast<acc>(W[(j + c) * K + k]);
          }
          for (int64_t c = 0; c < kCols; ++c) store(i, j + c, sum[c]);
        }
        for (; j < N; ++j) {  // the remaining rows, one dot product each
          const scalar_t* wr = W + j * K;
          acc sum = 0;
          for (int64_t k = 0; k < K; ++k) sum += static_cast<acc>(xr[k]) * static_cast<acc>(wr[k]);
          store(i, j, sum);
        }
      }
    });
  });
  return out.view(p.out_sizes);
}

// With g = (output <= 0 ? 0 : grad_output) -- torch.relu's backward: a NaN output passes the
// gradient, and a NaN gradient where output <= 0 still gives 0 -- the gradient of the linear part:
//   grad_input = g @ weight      [M, K]
//   grad_weight = g^T @ input    [N, K]
//   grad_bias = sum_rows(g)      [N]
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_linear_relu_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& output,
    const LinearProblem& p, std::array<bool, 3> mask) {
  const at::Tensor x = input.contiguous(), w = weight.contiguous();
  const at::Tensor dy = grad_output.contiguous(), y = output.contiguous();
  const int64_t M = p.M, N = p.N, K = p.K;
  at::Tensor gi = mask[0] ? at::empty({M, K}, x.options()) : empty_grad_like(x);
  at::Tensor gw = mask[1] ? at::empty({N, K}, x.options()) : empty_grad_like(w);
  at::Tensor gb = mask[2] ? at::empty({N}, x.options()) : empty_grad_like(w);
  // The masked gradient g, once, in the accumulation type (exact: it is grad_output or 0).
  const auto acc_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor g_t = at::empty({M, N}, x.options().dtype(acc_dtype));
  XK_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_linear_relu_backward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* X = x.const_data_ptr<scalar_t>();
    const scalar_t* W = w.const_data_ptr<scalar_t>();
    const scalar_t* DY = dy.const_data_ptr<scalar_t>();
    const scalar_t* Y = y.const_data_ptr<scalar_t>();
    acc* G = g_t.mutable_data_ptr<acc>();
    at::parallel_for(0, M, grain_for(N), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        for (int64_t j = 0; j < N; ++j)
          G[i * N + j] = static_cast<acc>(Y[i * N + j]) <= acc(0) ? acc(0) : static_cast<acc>(DY[i * N + j]);
    });

    if (mask[0]) {
      // Row i of grad_input = sum_j g[i, j] * weight[j, :], accumulated over j in a row buffer.
      scalar_t* DX = gi.mutable_data_ptr<scalar_t>();
      at::parallel_for(0, M, grain_for(N * K), [&](int64_t begin, int64_t end) {
        std::vector<acc> row(K);
        for (int64_t i = begin; i < end; ++i) {
          std::fill(row.begin(), row.end(), acc(0));
          for (int64_t j = 0; j < N; ++j) {
            const acc gij = G[i * N + j];
            const scalar_t* wr = W + j * K;
            for (int64_t k = 0; k < K; ++k) row[k] += gij * static_cast<acc>(wr[k]);
          }
          for (int64_t k = 0; k < K; ++k) DX[i * K + k] = static_cast<scalar_t>(row[k]);
        }
      });
    }

    if (mask[1] || mask[2]) {
      // Row j of grad_weight = sum_i g[i, j] * input[i, :]; grad_bias[j] = sum_i g[i, j].
      scalar_t* DW = mask[1] ? gw.mutable_data_ptr<scalar_t>() : nullptr;
      scalar_t* DB = mask[2] ? gb.mutable_data_ptr<scalar_t>() : nullptr;
      at::parallel_for(0, N, grain_for(M * K), [&](int64_t begin, int64_t end) {
        std::vector<acc> row(DW ? K : 0);
        for (int64_t j = begin; j < end; ++j) {
          std::fill(row.begin(), row.end(), acc(0));
          acc bsum = 0;
          for (int64_t i = 0; i < M; ++i) {
            const acc gij = G[i * N + j];
            bsum += gij;
            if (DW) {
              const scalar_t* xr = X + i * K;
              for (int64_t k = 0; k < K; ++k) row[k] += gij * static_cast<acc>(xr[k]);
            }
          }
          if (DW)
            for (int64_t k = 0; k < K; ++k) DW[j * K + k] = static_cast<scalar_t>(row[k]);
          if (DB) DB[j] = static_cast<scalar_t>(bsum);
        }
      });
    }
  });
  return {mask[0] ? gi.view(input.sizes()) : gi, gw, gb};
}

// Pre-packed weights, in the one layout every backend uses (shapes.h: linear_pack_columns):
// packed[p][k][c] = W[p * C + c][k], zero for rows p * C + c >= N.
at::Tensor pack_linear_weight(const at::Tensor& weight) {
  const int64_t N = weight.size(0), K = weight.size(1), C = linear_pack_columns(weight.scalar_type());
  const int64_t panels = ceil_div(N, C);
  at::Tensor padded = at::zeros({panels * C, K}, weight.options());
  padded.narrow(0, 0, N).copy_(weight);
  return padded.view({panels, C, K}).transpose(1, 2).contiguous();
}

// Unpacks (W[n][k] = packed[n / C][k][n % C]) and runs the plain reference kernel: obviously the
// same result as fused_linear_relu with the original weight.
at::Tensor fused_linear_relu_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                                    const LinearProblem& p) {
  const at::Tensor w = packed_weight.transpose(1, 2).reshape({-1, p.K}).narrow(0, 0, p.N);
  return fused_linear_relu(input, w, bias, p);
}

}  // namespace xkernels::reference
