# -DDTRAIN_WITH_CUDA=AUTO|ON|OFF: whether the CUDA compute backend (trainer/kernels/cuda/) is built.
#   AUTO (default)  built when nvcc (CMake's CUDA language; /usr/local/cuda/bin/nvcc is tried when none is named)
#                   and the cuBLASLt header are found, skipped with a status line otherwise;
#   ON              the same, but a missing part fails the configure, naming it and the fix;
#   OFF             never built: kernels::make_backend("cuda") says "dtrain was built without CUDA".
# Sets DTRAIN_CUDA_ENABLED. Included from the top-level CMakeLists.txt because enable_language(CUDA) must run in
# the highest directory whose targets link CUDA code.
set(DTRAIN_WITH_CUDA AUTO CACHE STRING "Build the CUDA compute backend: AUTO (when nvcc and cuBLASLt are found), ON, OFF")
set_property(CACHE DTRAIN_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
# sm_90 is the H200/H100 the backend is checked on; sm_80 (A100) costs one more device compile per .cu file
# (about 10 s per file on two cores).
set(DTRAIN_CUDA_ARCHITECTURES "80;90" CACHE STRING "GPU architectures the CUDA backend is compiled for")

set(DTRAIN_CUDA_ENABLED OFF)
if(NOT DTRAIN_WITH_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "DTRAIN_WITH_CUDA is '${DTRAIN_WITH_CUDA}': use AUTO, ON or OFF")
endif()
if(DTRAIN_WITH_CUDA STREQUAL "OFF")
  message(STATUS "dtrain: CUDA backend off (DTRAIN_WITH_CUDA=OFF)")
else()
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  set(dtrain_cuda_missing "")
  if(NOT CMAKE_CUDA_COMPILER OR (IS_ABSOLUTE "${CMAKE_CUDA_COMPILER}" AND NOT EXISTS "${CMAKE_CUDA_COMPILER}"))
    list(APPEND dtrain_cuda_missing "nvcc (install the CUDA toolkit, or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc)")
  endif()
  if(NOT CUDAToolkit_FOUND)
    list(APPEND dtrain_cuda_missing "the CUDA toolkit's libraries (set CUDAToolkit_ROOT)")
  else()
    find_path(DTRAIN_CUBLASLT_INCLUDE_DIR cublasLt.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(NOT DTRAIN_CUBLASLT_INCLUDE_DIR)
      list(APPEND dtrain_cuda_missing "cublasLt.h (install the toolkit's cuBLAS development files)")
    endif()
  endif()
  if(dtrain_cuda_missing STREQUAL "")
    set(CMAKE_CUDA_ARCHITECTURES ${DTRAIN_CUDA_ARCHITECTURES})
    enable_language(CUDA)
    # C++17: CMake 3.25 has no C++20 flag for nvcc. The .cu files include only trainer/kernels/cuda/launch.h.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(DTRAIN_CUDA_ENABLED ON)
    message(STATUS "dtrain: CUDA backend on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, sm ${DTRAIN_CUDA_ARCHITECTURES})")
  elseif(DTRAIN_WITH_CUDA STREQUAL "ON")
    list(JOIN dtrain_cuda_missing "; " dtrain_cuda_why)
    message(FATAL_ERROR "DTRAIN_WITH_CUDA=ON but the CUDA backend cannot be built: missing ${dtrain_cuda_why}. "
                        "Configure with -DDTRAIN_WITH_CUDA=AUTO or OFF to build without it.")
  else()
    list(JOIN dtrain_cuda_missing "; " dtrain_cuda_why)
    message(STATUS "dtrain: CUDA backend off (missing ${dtrain_cuda_why})")
  endif()
endif()

# The project's warning flags are directory-wide and nvcc rejects them as they are: on `target`, they apply to
# C++ sources unchanged and reach the host compiler of CUDA sources through -Xcompiler.
function(dtrain_cuda_host_flags target)
  get_target_property(options ${target} COMPILE_OPTIONS)
  if(NOT options)
    set(options "")
  endif()
  set(cxx_only "")
  foreach(option IN LISTS options)
    list(APPEND cxx_only "$<$<COMPILE_LANGUAGE:CXX>:${option}>")
  endforeach()
  set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${cxx_only}")
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
endfunction()
