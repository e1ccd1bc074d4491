// Anchor for the shared precompiled header (see src/CMakeLists.txt).
