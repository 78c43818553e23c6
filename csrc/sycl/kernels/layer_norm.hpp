// layer_norm SYCL kernels in the portable form (common.hpp): the op's kernel table, then the bodies.
//
// Rows of length N, M rows, contiguous. Statistics in the accumulation type acc_t<T>.
//  * layer_norm_fwd:     one sub-group per row (rows grid-strided, so any launch covers any
//                        M and any sub-group size works); two-pass mean / variance (biased),
//                        rstd = 1 / sqrt(var + eps); y = (x - mean) * rstd [* w] [+ b].
//  * layer_norm_bwd:     dx, and the row-block partial sums of dw / db, in one pass over dy and x.
//                        Rows are split into blocks of rows_per_block consecutive rows, one
//                        sub-group per block (blocks grid-strided). Per row, with
//                        xhat = (x - mean) * rstd and g = dy [* w]:
//                          dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))
//                        (the row's two sums first, then dx; the row is then in cache), and in
//                        the same pass part_w[blk, :] += dy * xhat, part_b[blk, :] += dy, the
//                        block's rows added front to back. dx and the partials are each optional
//                        (null): the host launches it once for both (CPU), or once for dx with
//                        one row per block and once for the partials (GPUs: more parallelism for
//                        dx); the arithmetic per element is the same, so both ways give the same bits.
//  * layer_norm_bwd_wb_final: dw = sum_blocks(part_w), db = sum_blocks(part_b) per column, the
//                        blocks in a fixed order (results do not depend on scheduling).
// Optional tensors (w, b, dw, db) are null pointers when absent; so are mean/rstd of the forward
// when the statistics are not saved (a runtime check, not another instantiation).
#pragma once
#include "common.hpp"

namespace xk {

// ------------------------------------------------------------------ the table
template <typename T>
struct layer_norm_fwd_params {
  const T* x;
  const T* w;      // null: no weight
  const T* b;      // null: no bias
  T* y;            // may be x (in place)
  acc_t<T>* mean;  // null: statistics not saved (layer_norm.out)
  acc_t<T>* rstd;
  int64_t M, N;
  acc_t<T> eps;
};
struct layer_norm_fwd {
  static constexpr int dims = 1;
  using types = float_types;
  template <typename T>
  using params = layer_norm_fwd_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct layer_norm_bwd_params {
  const T* dy;
  const T* x;
  const acc_t<T>* mean;
  const acc_t<T>* rstd;
  const T* w;        // null: no weight
  T* dx;             // null: no grad_input
  acc_t<T>* part_w;  // [blocks, N]; null: no weight grad
  acc_t<T>* part_b;  // [blocks, N]; null: no bias grad
  int64_t M, N, rows_per_block;
};
struct layer_norm_bwd {
  static constexpr int dims = 1;
  using types = float_types;
  template <typename T>
  using params = layer_norm_bwd_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct layer_norm_bwd_wb_final_params {
  const acc_t<T>* part_w;
  const acc_t<T>* part_b;
  T* dw;  // null: not wanted
  T* db;
  int64_t blocks, N;
};
struct layer_norm_bwd_wb_final {
  static constexpr int dims = 1;
  using types = float_types;
  template <typename T>
  using params = layer_norm_bwd_wb_final_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

using layer_norm_kernels = kernel_list<layer_norm_fwd, layer_norm_bwd, layer_norm_bwd_wb_final>;

// ------------------------------------------------------------------ bodies

template <typename T>
void layer_norm_fwd::run(item_arg<1> ia, const params<T>& p) {
  const auto x = p.x;
  const auto w = p.w;
  const auto b = p.b;
  const auto y = p.y;
  const auto mean = p.mean;
  const auto rstd = p.rstd;
  const auto M = p.M;
  const auto N = p.N;
  const auto eps = p.eps;
  using A = acc_t<T>;
  const sycl::nd_item<1> it = item(ia);
  const sycl::sub_group sg = it.get_sub_group();
  const SubGroupSlot slot = sub_group_slot(it);
  const int64_t lane = slot.lane, width = slot.width, per_group = slot.count;
  const int64_t stride = static_cast<int64_t>(it.get_group_range(0)) * per_group;
  for (int64_t row = static_cast<int64_t>(it.get_group(0)) * per_group + slot.index; row < M; row += stride) {
    const T* xr = x + row * N;
    // Every pass: lane reads j0 + lane for a uniform j0 (consecutive lanes, consecutive elements: one
    // vector load per step on the CPU device, coalesced on GPUs), whole steps without a per-lane
    // bound check, then one partial step.
    // The two reductions keep two partial sums per lane (even / odd steps): two independent add
    // chains instead of one, which roughly halves their time on the CPU device (add latency bound).
    const int64_t full = N - N % width;
    const int64_t pairs = full - full % (2 * width);
    const bool tail = full + lane < N;
    A s0 = 0, s1 = 0;
    for (int64_t j0 = 0; j0 < pairs; j0 += 2 * width) {
      s0 += load(xr, j0 + lane);
      s1 += load(xr, j0 + width + lane);
    }
    if (pairs < full) s0 += load(xr, pairs + lane);
    if (tail) s1 += load(xr, full + lane);
    const A mu0 = sub_group_sum(sg, s0 + s1) / static_cast<A>(N);
    // Corrected two-pass statistics (Chan, Golub & LeVeque), as the reference: sum / N rounds,
    // so deviations are taken about mu0 and their mean corrects it. A row of equal values then
    // gets mu == the value exactly and normalizes to exactly 0 (the bias), as in PyTorch.
    A sd0 = 0, sq0 = 0, sd1 = 0, sq1 = 0;
    for (int64_t j0 = 0; j0 < pairs; j0 += 2 * width) {
      const A d0 = load(xr, j0 + lane) - mu0, d1 = load(xr, j0 + width + lane) - mu0;
      sd0 += d0;
      sq0 += d0 * d0;
      sd1 += d1;
      sq1 += d1 * d1;
    }
    if (pairs < full) {
      const A d = load(xr, pairs + lane) - mu0;
      sd0 += d;
      sq0 += d * d;
    }
    if (tail) {
      const A d = load(xr, full + lane) - mu0;
      sd1 += d;
      sq1 += d * d;
    }
    const A sd = sub_group_sum(sg, sd0 + sd1);
    const A sq = sub_group_sum(sg, sq0 + sq1);
    const A mu = mu0 + sd / static_cast<A>(N);
    A var = (sq - sd * (sd / static_cast<A>(N))) / static_cast<A>(N);  // biased, as F.layer_norm
    if (var < A(0)) var = A(0);                                        // rounding; NaN stays NaN
    // An overflowing variance has no meaningful reciprocal: rstd 0 would silently turn the row
    // into the bias. Like PyTorch and the reference, the row becomes NaN.
    if (sycl::isinf(var)) var = var - var;  // inf - inf: NaN
    const A rs = A(1) / sycl::sqrt(var + eps);
    if (lane == 0) {  // null when the statistics are not saved (layer_norm.out, inference)
      if (mean) mean[row] = mu;
      if (rstd) rstd[row] = rs;
    }
    // y may be x itself (layer_norm.out in place): each lane reads element j before writing it.
    T* yr = y + row * N;
    auto out = [&](int64_t j) {
      A v = (load(xr, j) - mu) * rs;
      if (w) v = v * load(w, j);
      if (b) v = v + load(b, j);
      store(yr, j, v);
    };
    for (int64_t j0 = 0; j0 < full; j0 += width) out(j0 + lane);
    if (tail) out(full + lane);
  }
}

// One sub-group per block of rows [blk * rows_per_block, min(M, (blk + 1) * rows_per_block)), blocks
// grid-strided over the sub-groups like the forward's rows. The lanes stride over the columns: lane reads
// j0 + lane for a uniform j0 (one vector load per step on the CPU device), whole steps without a per-lane
// bound check, then one partial step. The block's partial rows part_w[blk, :], part_b[blk, :] stay in
// cache while its rows are read front to back. (Reading column tiles down the rows instead, one column per
// work-item, was 3x slower on the CPU device at 4096 x 1024: a new page every row.) Against the former
// two kernels (dx, then the partials reading dy and x again) this reads dy and x from memory once, not
// twice: 4 instead of 6 row-sized streams with grad_input's write.
template <typename T>
void layer_norm_bwd::run(item_arg<1> ia, const params<T>& p) {
  const auto dy = p.dy;
  const auto x = p.x;
  const auto mean = p.mean;
  const auto rstd = p.rstd;
  const auto w = p.w;
  const auto dx = p.dx;
  const auto part_w = p.part_w;
  const auto part_b = p.part_b;
  const auto M = p.M;
  const auto N = p.N;
  const auto rows_per_block = p.rows_per_block;
  using A = acc_t<T>;
  const sycl::nd_item<1> it = item(ia);
  const sycl::sub_group sg = it.get_sub_group();
  const SubGroupSlot slot = sub_group_slot(it);
  const int64_t lane = slot.lane, width = slot.width, per_group = slot.count;
  const int64_t stride = static_cast<int64_t>(it.get_group_range(0)) * per_group;
  const int64_t blocks = (M + rows_per_block - 1) / rows_per_block;
  const int64_t full = N - N % width;
  const int64_t pairs = full - full % (2 * width);
  const bool tail = full + lane < N;
  for (int64_t blk = static_cast<int64_t>(it.get_group(0)) * per_group + slot.index; blk < blocks; blk += stride) {
    const int64_t r0 = blk * rows_per_block;
    const int64_t r1 = M < r0 + rows_per_block ? M : r0 + rows_per_block;
    A* pw = part_w ? part_w + blk * N : nullptr;
    A* pb = part_b ? part_b + blk * N : nullptr;
    for (int64_t j = lane; j < N; j += width) {
      if (pw) pw[j] = 0;
      if (pb) pb[j] = 0;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * N;
      const T* dyr = dy + r * N;
      const A mu = mean[r], rs = rstd[r];
      A mg = 0, mgx = 0;
      if (dx) {
        // The row's sums of g and g * xhat, two partial sums each per lane (even / odd steps): two
        // independent add chains per sum instead of one (add latency), as in the forward.
        A sg0 = 0, sgx0 = 0, sg1 = 0, sgx1 = 0;
        auto sums = [&](int64_t j, A& s, A& sx) {
          const A xhat = (load(xr, j) - mu) * rs;
          const A g = w ? load(dyr, j) * load(w, j) : load(dyr, j);
          s += g;
          sx += g * xhat;
        };
        for (int64_t j0 = 0; j0 < pairs; j0 += 2 * width) {
          sums(j0 + lane, sg0, sgx0);
          sums(j0 + width + lane, sg1, sgx1);
        }
        if (pairs < full) sums(pairs + lane, sg0, sgx0);
        if (tail) sums(full + lane, sg1, sgx1);
        mg = sub_group_sum(sg, sg0 + sg1) / static_cast<A>(N);
        mgx = sub_group_sum(sg, sgx0 + sgx1) / static_cast<A>(N);
      }
      T* dxr = dx ? dx + r * N : nullptr;
      auto step = [&](int64_t j) {
        const A d = load(dyr, j);
        const A xhat = (load(xr, j) - mu) * rs;
        if (dxr) {
          const A g = w ? d * load(w, j) : d;
          store(dxr, j, rs * (g - mg - xhat * mgx));
        }
        if (pw) pw[j] += d * xhat;
        if (pb) pb[j] += d;
      };
      for (int64_t j0 = 0; j0 < full; j0 += width) step(j0 + lane);
      if (tail) step(full + lane);
    }
  }
}

// Stage 2 over >= N work-items: column j sums its `blocks` partials.
template <typename T>
void layer_norm_bwd_wb_final::run(item_arg<1> ia, const params<T>& p) {
  const auto part_w = p.part_w;
  const auto part_b = p.part_b;
  const auto dw = p.dw;
  const auto db = p.db;
  const auto blocks = p.blocks;
  const auto N = p.N;
  using A = acc_t<T>;
  const int64_t j = item(ia).get_global_id(0);
  if (j >= N) return;
  if (dw) {
    A s = 0;
    for (int64_t k = 0; k < blocks; ++k) s += part_w[k * N + j];
    store(dw, j, s);
  }
  if (db) {
    A s = 0;
    for (int64_t k = 0; k < blocks; ++k) s += part_b[k * N + j];
    store(db, j, s);
  }
}

}  // namespace xk
