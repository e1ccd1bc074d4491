# ft_warnings: the project's warning set, applied to our own targets only.
add_library(ft_warnings INTERFACE)
target_compile_options(ft_warnings INTERFACE
  -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual
  -Wpedantic -Wnull-dereference -Wformat=2 -Wimplicit-fallthrough)
if(FT_WERROR)
  target_compile_options(ft_warnings INTERFACE -Werror)
endif()
if(FT_SANITIZE)
  target_compile_options(ft_warnings INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer)
  target_link_options(ft_warnings INTERFACE -fsanitize=address,undefined)
endif()
