// Known AdaptiveCpp bug (snapshot 49544a48), omp.library-only: in a work-group of 64 work-items with sub-groups
// 1 wide, every work-item reports sub-group 0 of 1 (get_group_linear_id / get_group_linear_range), where SYCL 2020
// sub-groups partition the work-group (64 sub-groups of 1). Kernels that give each sub-group its own rows then
// run all 64 work-items on the same row; xkernels' layer_norm kernels derive the sub-group slot from the local id
// instead (xk::sub_group_slot in csrc/sycl/kernels/common.hpp). Prints one line per work-item shown.
#include <sycl/sycl.hpp>

#include <cstdio>
int main() {
  sycl::queue q;
  int* o = sycl::malloc_shared<int>(64 * 4, q);
  q.parallel_for(sycl::nd_range<1>(64, 64), [=](sycl::nd_item<1> it) {
     auto sg = it.get_sub_group();
     const int l = it.get_local_id(0);
     o[l * 4 + 0] = sg.get_local_linear_id();
     o[l * 4 + 1] = sg.get_local_linear_range();
     o[l * 4 + 2] = sg.get_group_linear_id();
     o[l * 4 + 3] = sg.get_group_linear_range();
   }).wait();
  for (int l : {0, 1, 63})
    std::printf("local %d: lane %d width %d sub-group %d of %d\n", l, o[l * 4], o[l * 4 + 1], o[l * 4 + 2],
                o[l * 4 + 3]);
}
