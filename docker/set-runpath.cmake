# cmake -DFILE=BINARY -P set-runpath.cmake: sets BINARY's RUNPATH to $ORIGIN/../lib in place (CMake can rewrite an
# existing RUNPATH that is at least as long; the build tree's always is). Used by scripts/assemble-runtime.sh.
file(READ_ELF "${FILE}" RUNPATH old_runpath)
if(NOT old_runpath)
  message(FATAL_ERROR "${FILE} has no RUNPATH to rewrite")
endif()
string(REPLACE ";" ":" old_list "${old_runpath}")  # READ_ELF gives a CMake list
file(RPATH_CHANGE FILE "${FILE}" OLD_RPATH "${old_list}" NEW_RPATH "\$ORIGIN/../lib")
