# Finds every dependency from package managers: LibTorch from the pip wheel in .venv (or FT_TORCH_PREFIX),
# the rest from Debian packages or from an offline prefix built by scripts/deps-prefix.sh (FT_DEPS_PREFIX).
find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  # Precompiled headers need these sloppiness settings to be cached.
  set(CMAKE_CXX_COMPILER_LAUNCHER "${CMAKE_COMMAND}" -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime" "${CCACHE_PROGRAM}")
endif()

set(FT_DEPS_PREFIX "$ENV{FT_DEPS_PREFIX}" CACHE PATH "Offline dependency prefix (unpacked .deb files), optional")
if(FT_DEPS_PREFIX)
  list(PREPEND CMAKE_PREFIX_PATH "${FT_DEPS_PREFIX}/usr" "${FT_DEPS_PREFIX}/usr/lib/x86_64-linux-gnu/cmake")
  include_directories(BEFORE SYSTEM "${FT_DEPS_PREFIX}/usr/include")
  link_directories("${FT_DEPS_PREFIX}/usr/lib/x86_64-linux-gnu")
endif()

# LibTorch: the prefix printed by torch.utils.cmake_prefix_path.
set(FT_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH "Python whose torch wheel provides LibTorch")
if(NOT FT_TORCH_PREFIX)
  if(NOT EXISTS "${FT_PYTHON}")
    set(FT_PYTHON python3)
  endif()
  execute_process(COMMAND "${FT_PYTHON}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE FT_TORCH_PREFIX OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _torch_rc)
  if(NOT _torch_rc EQUAL 0)
    message(FATAL_ERROR "No torch found for ${FT_PYTHON}. Run scripts/setup.sh first, or pass -DFT_TORCH_PREFIX=...")
  endif()
endif()
set(FT_TORCH_PREFIX "${FT_TORCH_PREFIX}" CACHE PATH "LibTorch CMake prefix")
list(APPEND CMAKE_PREFIX_PATH "${FT_TORCH_PREFIX}")
# Without a visible GPU, Torch's CMake config would target every architecture down to compute_50, which CUDA 13's
# nvcc rejects; we never compile against those flags, but name Hopper so the configure step stays quiet and valid.
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()
find_package(Torch REQUIRED)
get_filename_component(FT_TORCH_ROOT "${FT_TORCH_PREFIX}/../.." ABSOLUTE)
set(FT_TORCH_LIB_DIR "${FT_TORCH_ROOT}/lib")

find_package(CUDAToolkit QUIET)
set(FT_WITH_CUDA OFF)
if(CUDAToolkit_FOUND AND TARGET torch_cuda)
  set(FT_WITH_CUDA ON)
endif()

find_package(yaml-cpp REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
find_path(GLOO_INCLUDE_DIR gloo/config.h REQUIRED)
find_package(Threads REQUIRED)
if(FT_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

# NCCL headers: the CUDA toolkit's, else the nvidia-nccl wheel's.
find_path(NCCL_INCLUDE_DIR nccl.h
          HINTS ${CUDAToolkit_INCLUDE_DIRS} "${FT_TORCH_ROOT}/../nvidia/nccl/include"
                "${FT_TORCH_ROOT}/../nvidia/cu13/include")

# ft_torch: LibTorch for our targets, with torch's own fmt used header-only (see docs/platforms.md: the fmt trap).
add_library(ft_torch INTERFACE)
target_link_libraries(ft_torch INTERFACE ${TORCH_LIBRARIES})
target_compile_definitions(ft_torch INTERFACE FMT_HEADER_ONLY=1)
# libtorch.so exports its own (newer) copy of std::filesystem; an executable that lists libtorch before libstdc++
# binds std::filesystem::remove_all & co. to it and crashes. Naming libstdc++ first makes the system copy win.
target_link_options(ft_torch INTERFACE "LINKER:--no-as-needed" "-lstdc++")
if(FT_WITH_CUDA)
  target_compile_definitions(ft_torch INTERFACE FT_WITH_CUDA=1)
  target_link_libraries(ft_torch INTERFACE CUDA::cudart)
endif()
if(NCCL_INCLUDE_DIR)
  target_compile_definitions(ft_torch INTERFACE FT_WITH_NCCL_HEADERS=1)
  target_include_directories(ft_torch SYSTEM INTERFACE "${NCCL_INCLUDE_DIR}")
endif()
target_include_directories(ft_torch SYSTEM INTERFACE "${GLOO_INCLUDE_DIR}")
message(STATUS "finetune: LibTorch ${Torch_VERSION} at ${FT_TORCH_ROOT}; CUDA paths: ${FT_WITH_CUDA}; NCCL headers: ${NCCL_INCLUDE_DIR}")
