/* The serial C tests' check: count a failure and say where, with a message; the test
 * exits non-zero at the end when `failures` is not 0. */
#ifndef ZTREE_TEST_CHECK_H
#define ZTREE_TEST_CHECK_H

#include <stdio.h>

static int failures = 0;
#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      failures++;                                                               \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                             \
      fprintf(stderr, "\n");                                                    \
    }                                                                           \
  } while (0)

#endif
