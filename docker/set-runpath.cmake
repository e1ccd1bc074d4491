# cmake -DFILE=BINARY -P set-runpath.cmake: sets BINARY's run path to $ORIGIN/../lib in place, so no path of the
# build machine is left in it. CMake rewrites an existing RUNPATH (or old-style RPATH) entry that is at least as
# long as the new one; a build tree's always is. Used by scripts/assemble-runtime.sh.
file(READ_ELF "${FILE}" RUNPATH old_path)
if(NOT old_path)
  file(READ_ELF "${FILE}" RPATH old_path)
endif()
if(NOT old_path)
  message(FATAL_ERROR "${FILE} has no RUNPATH or RPATH to rewrite; build it with CMake's default build RPATH")
endif()
string(REPLACE ";" ":" old_path "${old_path}")  # READ_ELF answers with a CMake list
file(RPATH_CHANGE FILE "${FILE}" OLD_RPATH "${old_path}" NEW_RPATH "\$ORIGIN/../lib")
