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

# The kernel tables compiled in parts: "<kernel file>|<its table>|<number of parts>". AdaptiveCpp spends nearly
# all of the library's build instantiating kernels, once in a single translation unit, on one core; in parts
# they compile in parallel, and a part includes only its own kernel file, so a change to one kernel file
# recompiles only its parts (depfiles). A part is the table's instantiations whose position modulo the part
# count is the part's number (aot/launcher_part.cpp). Every table must be here: the library refuses to load
# with the name of an instantiation no part compiled (aot/launchers.cpp).
set(XK_ACPP_TABLE_PARTS
    "conv2d.hpp|conv2d_kernels|4"
    "fused_linear_relu.hpp|fused_linear_relu_kernels|2"
    "layer_norm.hpp|layer_norm_kernels|1"
    "amx_gemm.hpp|amx_gemm_kernels|1")

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
  set(_aot "${CMAKE_CURRENT_SOURCE_DIR}/csrc/sycl/aot")
  set(_obj_dir "${CMAKE_CURRENT_BINARY_DIR}/acpp")
  file(MAKE_DIRECTORY "${_obj_dir}")
  string(REPLACE ";" " " _fp "${XK_HOST_FP_FLAGS}")
  set(_cc "${XK_ACPP_EXE}" --acpp-targets=omp.library-only -O2 -std=c++17 -fPIC ${XK_HOST_FP_FLAGS}
          -fvisibility=hidden)
  # Each object's dependencies on headers come from the compiler (-MD depfile), so an edit to one kernel
  # file recompiles the parts that include it and the listing, not the rest.
  set(_objs "")
  set(_listing "${_obj_dir}/launchers.o")
  add_custom_command(
    OUTPUT "${_listing}"
    COMMAND ${_cc} -DXK_AOT_SUB_GROUP=1 -DXK_AOT_IN_PARTS=1
            "-DXK_AOT_IMPLEMENTATION=\"AdaptiveCpp (${XK_ACPP_EXE}), omp.library-only\""
            "-DXK_AOT_FLAGS=\"${_fp}\"" -MD -MF "${_listing}.d" -c "${_aot}/launchers.cpp" -o "${_listing}"
    DEPENDS "${_aot}/launchers.cpp"
    DEPFILE "${_listing}.d"
    COMMENT "AdaptiveCpp: the kernel tables' listing (libxkernels_acpp.so)" VERBATIM)
  list(APPEND _objs "${_listing}")
  foreach(_entry IN LISTS XK_ACPP_TABLE_PARTS)
    string(REPLACE "|" ";" _f "${_entry}")
    list(GET _f 0 _header)
    list(GET _f 1 _table)
    list(GET _f 2 _parts)
    math(EXPR _last "${_parts} - 1")
    foreach(_p RANGE ${_last})
      set(_o "${_obj_dir}/${_table}.${_p}.o")
      add_custom_command(
        OUTPUT "${_o}"
        COMMAND ${_cc} "-DXK_AOT_PART_HEADER=\"../kernels/${_header}\"" -DXK_AOT_PART_KERNELS=${_table} -DXK_AOT_PART=${_p}
                -DXK_AOT_PARTS=${_parts} -MD -MF "${_o}.d" -c "${_aot}/launcher_part.cpp" -o "${_o}"
        DEPENDS "${_aot}/launcher_part.cpp"
        DEPFILE "${_o}.d"
        COMMENT "AdaptiveCpp: ${_table}, part ${_p} of ${_parts} (libxkernels_acpp.so)" VERBATIM)
      list(APPEND _objs "${_o}")
    endforeach()
  endforeach()
  add_custom_command(
    OUTPUT "${_lib}"
    COMMAND "${XK_ACPP_EXE}" --acpp-targets=omp.library-only -shared -fPIC "-Wl,-rpath,${XK_ACPP_ROOT}/lib" -o
            "${_lib}" ${_objs}
    DEPENDS ${_objs}
    COMMENT "AdaptiveCpp: linking libxkernels_acpp.so" VERBATIM)
  add_custom_target(xkernels_acpp ALL DEPENDS "${_lib}")
  # Building the extension builds the library, but only its link waits for it (add_dependencies would hold
  # every object of the extension back until the library is linked, leaving cores idle).
  set_property(TARGET ${tgt} APPEND PROPERTY LINK_DEPENDS "${_lib}")
endfunction()
