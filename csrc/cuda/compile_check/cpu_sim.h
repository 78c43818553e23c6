// A small CPU simulator for the SIMT kernels (scripts/check_cuda_compile.sh, no GPU needed):
// the kernel headers are compiled by the host C++ compiler, each block runs as real threads,
// __syncthreads() is a block barrier, __shfl_xor_sync a per-warp exchange, __shared__ arrays
// are function statics (blocks run one after another). It executes the actual kernel code
// (tiling, bounds, split-K, reductions); it cannot run the WMMA kernel (tensor cores) and
// says nothing about timing or memory-model subtleties beyond barrier ordering.
// Include this before any kernel header.
#pragma once
#include <cuda_runtime.h>  // dim3 / uint3 and CUDA's host-side macro definitions

#include <barrier>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#undef __global__
#define __global__
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)

namespace xk_sim {
struct Block {
  std::barrier<>* block = nullptr;
  std::vector<std::unique_ptr<std::barrier<>>>* warps = nullptr;
  std::vector<unsigned long long>* lanes = nullptr;  // one 8-byte cell per thread for shuffles
};
inline thread_local uint3 thread_idx;
inline thread_local uint3 block_idx;
inline thread_local unsigned linear_tid;
inline dim3 block_dim, grid_dim;
inline Block current;

template <class Kernel, class... Args> void launch(dim3 grid, dim3 block, Kernel kernel, Args... args) {
  const unsigned n = block.x * block.y * block.z;
  if (n % 32 != 0) std::abort();  // the kernels use whole warps
  grid_dim = grid;
  block_dim = block;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> bar(n);
        std::vector<std::unique_ptr<std::barrier<>>> warps;
        for (unsigned w = 0; w < n / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
        std::vector<unsigned long long> lanes(n);
        current = Block{&bar, &warps, &lanes};
        std::vector<std::thread> threads;
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
inline void __trap() { std::abort(); }
template <typename T> T __shfl_xor_sync(unsigned, T v, int offset) {
  static_assert(sizeof(T) <= 8, "shuffle of an 8-byte value at most");
  const unsigned t = xk_sim::linear_tid, warp = t / 32, lane = t % 32;
  auto& cells = *xk_sim::current.lanes;
  auto& bar = *(*xk_sim::current.warps)[warp];
  std::memcpy(&cells[t], &v, sizeof(T));
  bar.arrive_and_wait();
  T r;
  std::memcpy(&r, &cells[warp * 32 + (lane ^ static_cast<unsigned>(offset))], sizeof(T));
  bar.arrive_and_wait();
  return r;
}
