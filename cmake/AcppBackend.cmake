# acpp backend: the kernel tables compiled ahead of time by AdaptiveCpp (an independent SYCL 2020
# implementation) into libxkernels_acpp.so, beside the extension. A conformance backend: the same kernel
# source as the `sycl` backend, built by a second compiler, run on CPU tensors when selected explicitly.
#
# XKERNELS_ACPP=AUTO|ON|OFF; acpp is found as $ACPP_ROOT/bin/acpp (XKERNELS_ACPP_ROOT) or on PATH.
# Needs the SYCL backend (the host wrappers are shared). The kernels are compiled for AdaptiveCpp's
# OpenMP CPU backend in library-only mode (omp.library-only), where kernels are ordinary host code and
# get the host floating-point flags. The compiler-accelerated mode (omp) crashes the compiler on the tiled
# GEMM (tests/test_adaptivecpp_known_bugs.py).
set(XK_WITH_ACPP OFF)
string(TOUPPER "${XKERNELS_ACPP}" _xk_acpp_opt)
set(_xk_acpp_reason "")
set(XK_ACPP_EXE "")
if(_xk_acpp_opt STREQUAL "OFF")
  set(_xk_acpp_reason "disabled (XKERNELS_ACPP=OFF)")
else()
  if(XKERNELS_ACPP_ROOT AND EXISTS "${XKERNELS_ACPP_ROOT}/bin/acpp")
    set(XK_ACPP_EXE "${XKERNELS_ACPP_ROOT}/bin/acpp")
  else()
    find_program(XK_ACPP_EXE_FOUND acpp)
    if(XK_ACPP_EXE_FOUND)
      set(XK_ACPP_EXE "${XK_ACPP_EXE_FOUND}")
    endif()
  endif()
  if(NOT XK_WITH_SYCL)
    set(_xk_acpp_reason "needs the SYCL backend's host code (SYCL runtime headers), which is off")
  elseif(NOT XK_ACPP_EXE)
    set(_xk_acpp_reason "acpp not found (set ACPP_ROOT or put acpp on PATH; scripts/build_adaptivecpp.sh builds it)")
  else()
    set(XK_WITH_ACPP ON)
    get_filename_component(XK_ACPP_ROOT "${XK_ACPP_EXE}" DIRECTORY)
    get_filename_component(XK_ACPP_ROOT "${XK_ACPP_ROOT}" DIRECTORY)
    set(_xk_acpp_reason "${XK_ACPP_EXE}, --acpp-targets=omp.library-only")
  endif()
  if(_xk_acpp_opt STREQUAL "ON" AND NOT XK_WITH_ACPP)
    message(FATAL_ERROR "XKERNELS_ACPP=ON but ${_xk_acpp_reason}")
  endif()
endif()
list(APPEND XK_SUMMARY "acpp backend    : ${XK_WITH_ACPP} — ${_xk_acpp_reason}")

function(xk_configure_acpp_target tgt)
  if(NOT XK_WITH_ACPP)
    return()
  endif()
  target_compile_definitions(${tgt} PRIVATE XKERNELS_WITH_ACPP=1)
  target_link_libraries(${tgt} PRIVATE ${CMAKE_DL_LIBS})
  get_target_property(_out ${tgt} LIBRARY_OUTPUT_DIRECTORY)
  if(NOT _out)
    set(_out "${CMAKE_LIBRARY_OUTPUT_DIRECTORY}")
  endif()
  set(_lib "${_out}/libxkernels_acpp.so")
  set(_src "${CMAKE_CURRENT_SOURCE_DIR}/csrc/sycl/aot/launchers.cpp")
  file(GLOB _deps CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/csrc/sycl/kernels/*.hpp"
       "${CMAKE_CURRENT_SOURCE_DIR}/csrc/sycl/aot/*")
  string(REPLACE ";" " " _fp "${XK_HOST_FP_FLAGS}")
  add_custom_command(
    OUTPUT "${_lib}"
    COMMAND "${XK_ACPP_EXE}" --acpp-targets=omp.library-only -O2 -std=c++17 -fPIC -shared ${XK_HOST_FP_FLAGS}
            -fvisibility=hidden -DXK_AOT_SUB_GROUP=1
            "-DXK_AOT_IMPLEMENTATION=\"AdaptiveCpp (${XK_ACPP_EXE}), omp.library-only\""
            "-DXK_AOT_FLAGS=\"${_fp}\""
            "-Wl,-rpath,${XK_ACPP_ROOT}/lib" -o "${_lib}" "${_src}"
    DEPENDS ${_deps}
    COMMENT "Compiling the kernel tables with AdaptiveCpp (libxkernels_acpp.so)" VERBATIM)
  add_custom_target(xkernels_acpp ALL DEPENDS "${_lib}")
  add_dependencies(${tgt} xkernels_acpp)
endfunction()
