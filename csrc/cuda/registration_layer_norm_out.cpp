// CUDA dispatch key: layer_norm.out (the entry function of entry.h with the CUDA key's backend
// chooser, as registration.cpp does for every other op). Plain C++, compiled with the other C++
// sources when the CUDA backend is built. Kept in its own file only because registration.cpp
// was being changed on another branch at the same time; moving the impl line there is a pure move.
#include <torch/library.h>

#include "xkernels/backend.h"
#include "xkernels/entry.h"

TORCH_LIBRARY_IMPL(xkernels, CUDA, m) {
  m.impl("layer_norm.out", &xkernels::entry::layer_norm_out<xkernels::choose_cuda_backend>);
}
