# The tests' rule for a missing prerequisite (the same as tests/common/require.rs): a
# test whose tool is missing is skipped with a message on a developer's machine, and the
# configuration fails in CI (CI set to anything but empty, 0 or false), where a skip would
# hide a missing install step. Not installed: the project's own tests include it.
# `found`: the name of the variable that says whether it was found.
function(ztree_test_require what found)
  if(${found})
    return()
  endif()
  set(ci "$ENV{CI}")
  string(TOLOWER "${ci}" ci)
  if(NOT ci STREQUAL "" AND NOT ci STREQUAL "0" AND NOT ci STREQUAL "false")
    message(FATAL_ERROR "missing in CI: ${what} (CI must provide it; run through `make test`)")
  endif()
  message(WARNING "SKIPPED: ${what} not found; its tests are not built")
endfunction()
