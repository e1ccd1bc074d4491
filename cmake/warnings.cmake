# ft_warnings: the project's warning set, applied to our own targets only.
add_library(ft_warnings INTERFACE)
target_compile_options(ft_warnings INTERFACE
  -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual
  -Wpedantic -Wnull-dereference -Wformat=2 -Wimplicit-fallthrough)
if(FT_WERROR)
  target_compile_options(ft_warnings INTERFACE -Werror)
endif()
if(FT_FUZZ)
  # libFuzzer builds (the `fuzz` preset): coverage instrumentation on our own code, ASan and UBSan, and every
  # undefined-behaviour report fatal so the fuzzer keeps the input.
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "FT_FUZZ needs clang (libFuzzer): use the `fuzz` preset, which sets CMAKE_CXX_COMPILER=clang++")
  endif()
  target_compile_options(ft_warnings INTERFACE -fsanitize=fuzzer-no-link,address,undefined
                         -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(ft_warnings INTERFACE -fsanitize=address,undefined)
elseif(FT_SANITIZE)
  target_compile_options(ft_warnings INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer)
  target_link_options(ft_warnings INTERFACE -fsanitize=address,undefined)
endif()
