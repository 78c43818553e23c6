// A small CPU simulator for the SIMT kernels (scripts/check_cuda_compile.sh, no GPU needed):
// the kernel headers are compiled by the host C++ compiler, each block runs as real threads,
// __syncthreads() is a block barrier, __shfl_xor_sync a per-warp exchange, __shared__ arrays
// are function statics (blocks run one after another). It executes the actual kernel code
// (tiling, bounds, split-K, reductions). The WMMA kernel runs against a functional model of
// nvcuda::wmma below (every lane holds the whole 16x16 fragment; products accumulate in float),
// which checks its tile addressing, fragment offsets and leading dimensions, not the tensor
// cores' own rounding. Nothing here says anything about timing or memory-model subtleties
// beyond barrier ordering. Include this before any kernel header.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>  // dim3 / uint3 and CUDA's host-side macro definitions

#include <atomic>
#include <barrier>
#include <cmath>  // the kernels call sqrt / fma / fmaf unqualified, as device code does
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#undef __global__
#define __global__
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)
#define XKERNELS_CUDA_CPU_SIM 1  // lets kernels/gemm.cuh compile its WMMA kernel body against the model below

namespace xk_sim {
// __syncthreads_or: the block barrier's completion step (run once per phase, after every thread
// arrived and before any leaves) publishes the OR of the predicates of that phase and clears it.
struct OrPhase {
  void operator()() noexcept;
};
// The state of the block being run. It owns its barriers and shuffle cells (launch() re-creates
// them per block), so nothing outlives what it points to.
struct Block {
  std::unique_ptr<std::barrier<OrPhase>> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<unsigned long long> lanes;  // one 8-byte cell per thread for shuffles
  std::atomic<int> or_pending{0};         // OR of the __syncthreads_or predicates of this phase
  int or_result = 0;                      // ... of the phase just completed
};
inline thread_local uint3 thread_idx;
inline thread_local uint3 block_idx;
inline thread_local unsigned linear_tid;
inline dim3 block_dim, grid_dim;
inline Block current;
inline void OrPhase::operator()() noexcept { current.or_result = current.or_pending.exchange(0); }

template <class Kernel, class... Args>
void launch(dim3 grid, dim3 block, Kernel kernel, Args... args) {
  const unsigned n = block.x * block.y * block.z;
  if (n % 32 != 0) std::abort();  // the kernels use whole warps
  grid_dim = grid;
  block_dim = block;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        current.block = std::make_unique<std::barrier<OrPhase>>(n);
        current.warps.clear();
        for (unsigned w = 0; w < n / 32; ++w) current.warps.push_back(std::make_unique<std::barrier<>>(32));
        current.lanes.assign(n, 0);
        current.or_pending = 0;
        current.or_result = 0;
        std::vector<std::thread> threads;
        threads.reserve(n);
        for (unsigned t = 0; t < n; ++t)
          threads.emplace_back([&, t] {
            thread_idx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            block_idx = uint3{bx, by, bz};
            linear_tid = t;
            kernel(args...);
          });
        for (auto& th : threads) th.join();
      }
}
}  // namespace xk_sim

#define threadIdx (::xk_sim::thread_idx)
#define blockIdx (::xk_sim::block_idx)
#define blockDim (::xk_sim::block_dim)
#define gridDim (::xk_sim::grid_dim)

inline void __syncthreads() { xk_sim::current.block->arrive_and_wait(); }
inline int __syncthreads_or(int predicate) {
  if (predicate != 0) xk_sim::current.or_pending.fetch_or(1);
  xk_sim::current.block->arrive_and_wait();
  return xk_sim::current.or_result;  // stable until this thread arrives at the block barrier again
}
inline void __trap() { std::abort(); }
template <typename T>
T __shfl_xor_sync(unsigned, T v, int offset) {
  static_assert(sizeof(T) <= 8, "shuffle of an 8-byte value at most");
  const unsigned t = xk_sim::linear_tid, warp = t / 32, lane = t % 32;
  auto& cells = xk_sim::current.lanes;
  auto& bar = *xk_sim::current.warps[warp];
  std::memcpy(&cells[t], &v, sizeof(T));
  bar.arrive_and_wait();
  T r;
  std::memcpy(&r, &cells[warp * 32 + (lane ^ static_cast<unsigned>(offset))], sizeof(T));
  bar.arrive_and_wait();
  return r;
}

// Functional model of the nvcuda::wmma subset kernels/gemm.cuh uses (16x16x16, row-major).
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "model covers 16x16x16 only");
  T x[16 * 16];
};
inline float to_float(float v) { return v; }
inline float to_float(__half v) { return __half2float(v); }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class Use, class T, class L, class V>
void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, V v) {
  for (auto& e : f.x) e = static_cast<T>(v);
}
template <class Use, class T, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  static_assert(std::is_same_v<L, row_major>, "model covers row-major operands only");
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * sizeof(T)) % 16 != 0) std::abort();  // wmma's rules
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) f.x[i * 16 + j] = p[i * ldm + j];
}
template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  fragment<accumulator, 16, 16, 16, float> r;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float acc = c.x[i * 16 + j];
      for (int k = 0; k < 16; ++k) acc += to_float(a.x[i * 16 + k]) * to_float(b.x[k * 16 + j]);
      r.x[i * 16 + j] = acc;
    }
  d = r;
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * sizeof(float)) % 16 != 0) std::abort();
  if (xk_sim::linear_tid % 32 != 0) return;  // one lane writes; the kernel syncs before reading
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) p[i * ldm + j] = f.x[i * 16 + j];
}
}  // namespace nvcuda::wmma
