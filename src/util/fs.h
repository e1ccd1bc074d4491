// File-system helpers that avoid std::filesystem::remove_all: libtorch.so exports its own copy of it, which
// crashes when the dynamic linker binds it ahead of libstdc++'s (seen with GCC 12 and 13 builds).
#pragma once

#include <filesystem>
#include <string>

namespace ft {

// Removes `path` and everything below it (no-op when it does not exist). Symbolic links are removed, never
// followed. Throws ft::Error with the OS reason on failure.
void remove_tree(const std::filesystem::path& path);

// The whole file as bytes. Throws ft::Error naming the file, with `hint`, when it cannot be read.
std::string read_text_file(const std::filesystem::path& path,
                           const std::string& hint = "check that the file exists and is readable");

}  // namespace ft
