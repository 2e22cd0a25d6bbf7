/* The header compiles cleanly (C99 and C++, -Wall -Wextra -Werror) and twice. */
#include "ztree.h"
#include "ztree.h"

int main(void) {
  ztree_config cfg;
  return ztree_config_init(&cfg) == ZTREE_OK ? 0 : 1;
}
