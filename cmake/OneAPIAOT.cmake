# Ahead-of-time SYCL kernels compiled by icpx (oneAPI DPC++). buildtools/oneapi.py plans them
# (toolchain checks, targets, floating-point flags) and writes the exact icpx command to a CMake
# fragment: one compile-and-link of csrc/sycl/aot/launchers.cpp (the standard-SYCL launcher TU that
# AdaptiveCpp also builds, cmake/AcppBackend.cmake) into libxkernels_sycl_aot.so, exporting the C
# interface of csrc/sycl/aot/abi.h. This file runs that command unchanged (VERBATIM). The extension
# does not link the library: like libxkernels_acpp.so it is built beside _C (the planner's
# --library-dir is _C's output directory) and the extension dlopens it. See docs/oneapi.md.
#
#   XKERNELS_SYCL_AOT_PLAN    the fragment (empty: no AOT library; kernels compile at run time)
#   XKERNELS_SYCL_AOT_REASON  why there is none, for the configuration summary
set(XKERNELS_SYCL_AOT_PLAN "" CACHE FILEPATH "CMake fragment written by buildtools/oneapi.py (empty: no AOT kernels)")
set(XKERNELS_SYCL_AOT_REASON "" CACHE STRING "Why no AOT kernel library is built (for the summary)")

set(XK_WITH_SYCL_AOT OFF)
set(XK_SYCL_AOT_TARGET_SPEC "")
set(XK_SYCL_AOT_CONFIG "off")  # for the build configuration string (xkernels.info())
if(XKERNELS_SYCL_AOT_PLAN)
  if(NOT XK_WITH_SYCL)
    message(FATAL_ERROR "XKERNELS_SYCL_AOT_PLAN is set but the SYCL backend is OFF; the ahead-of-time kernels "
                        "need it. Enable the SYCL backend or build with XKERNELS_SYCL_AOT=off.")
  endif()
  if(NOT EXISTS "${XKERNELS_SYCL_AOT_PLAN}")
    message(FATAL_ERROR "XKERNELS_SYCL_AOT_PLAN=${XKERNELS_SYCL_AOT_PLAN} does not exist; re-run setup.py or "
                        "scripts/dev_build.sh, which write it")
  endif()
  include("${XKERNELS_SYCL_AOT_PLAN}")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${XKERNELS_SYCL_AOT_PLAN}")
  math(EXPR _xk_last "${XK_SYCL_AOT_STEP_COUNT} - 1")
  foreach(i RANGE ${_xk_last})
    get_filename_component(_xk_dir "${XK_SYCL_AOT_STEP_${i}_OUTPUT}" DIRECTORY)
    file(MAKE_DIRECTORY "${_xk_dir}")
    add_custom_command(
      OUTPUT "${XK_SYCL_AOT_STEP_${i}_OUTPUT}"
      COMMAND ${XK_SYCL_AOT_STEP_${i}_COMMAND}
      DEPENDS ${XK_SYCL_AOT_STEP_${i}_DEPENDS}
      COMMENT "${XK_SYCL_AOT_STEP_${i}_COMMENT}"
      VERBATIM)
  endforeach()
  add_custom_target(xkernels_sycl_aot ALL DEPENDS "${XK_SYCL_AOT_LIBRARY}")
  set(XK_WITH_SYCL_AOT ON)
  set(XK_SYCL_AOT_CONFIG "icpx ${XK_SYCL_AOT_COMPILER_VERSION}: ${XK_SYCL_AOT_TARGET_SPEC}")
  list(APPEND XK_SUMMARY "SYCL AOT        : ON — icpx ${XK_SYCL_AOT_COMPILER_VERSION}, images: ${XK_SYCL_AOT_TARGET_SPEC}")
  list(APPEND XK_SUMMARY "                  ${XK_SYCL_AOT_LIBRARY} (launchers.cpp; loaded at run time)")
else()
  if(XKERNELS_SYCL_AOT_REASON)
    list(APPEND XK_SUMMARY "SYCL AOT        : OFF — ${XKERNELS_SYCL_AOT_REASON}")
  else()
    list(APPEND XK_SUMMARY "SYCL AOT        : OFF — not planned (build through setup.py or scripts/dev_build.sh)")
  endif()
endif()

# Builds the AOT library with `tgt` and tells the extension it is there. Not linked: the extension
# dlopens $ORIGIN/libxkernels_sycl_aot.so (the directory of its own module) and calls
# xk_aot_library_v1 (abi.h), passing its DPC++ queue to the launchers.
function(xk_configure_sycl_aot_target tgt)
  if(NOT XK_WITH_SYCL_AOT)
    return()
  endif()
  # The planner put the library in _C's output directory; the run-time lookup relies on it.
  get_target_property(_out ${tgt} LIBRARY_OUTPUT_DIRECTORY)
  if(NOT _out)
    set(_out "${CMAKE_LIBRARY_OUTPUT_DIRECTORY}")
  endif()
  get_filename_component(_lib_dir "${XK_SYCL_AOT_LIBRARY}" DIRECTORY)
  if(_out)
    get_filename_component(_out_real "${_out}" REALPATH)
    get_filename_component(_lib_real "${_lib_dir}" REALPATH)
    if(NOT _out_real STREQUAL _lib_real)
      message(FATAL_ERROR "The planned ${XK_SYCL_AOT_LIBRARY} is not in ${tgt}'s output directory (${_out}); "
                          "the extension loads it from beside itself. Re-run the planner with "
                          "--library-dir ${_out} (setup.py and scripts/dev_build.sh pass it).")
    endif()
  endif()
  # Only the extension's link waits for the library (as for libxkernels_acpp.so): its objects compile meanwhile.
  set_property(TARGET ${tgt} APPEND PROPERTY LINK_DEPENDS "${XK_SYCL_AOT_LIBRARY}")
  target_link_libraries(${tgt} PRIVATE ${CMAKE_DL_LIBS})
  get_filename_component(_lib_name "${XK_SYCL_AOT_LIBRARY}" NAME)
  target_compile_definitions(${tgt} PRIVATE XKERNELS_SYCL_AOT=1
                             "XKERNELS_SYCL_AOT_TARGETS=\"${XK_SYCL_AOT_TARGET_SPEC}\""
                             "XKERNELS_SYCL_AOT_LIBRARY=\"${_lib_name}\"")
endfunction()
