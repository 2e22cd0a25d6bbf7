/* The smallest useful ztree program: k nearest neighbours of a few particles.
 * Build: cc minimal.c $(pkg-config --cflags --libs ztree) -Wl,-rpath,$(pkg-config --variable=libdir ztree)
 *   (or CMake: target_link_libraries(prog ZTree::ztree)) */
#include <stdio.h>

#include "ztree.h"

int main(void) {
  /* Particles as a code holds them: here x[], y[], z[] arrays (struct of arrays). */
  double x[6] = {0.10, 0.12, 0.50, 0.52, 0.90, 0.05};
  double y[6] = {0.10, 0.11, 0.50, 0.49, 0.90, 0.95};
  double z[6] = {0.10, 0.10, 0.50, 0.50, 0.90, 0.05};

  ztree_config cfg;
  ztree_config_init(&cfg);
  cfg.periodic = 1; /* periodic unit box */
  ztree_context *ctx;
  if (ztree_create(&cfg, &ctx) != ZTREE_OK) {
    fprintf(stderr, "ztree_create: %s\n", ztree_last_error(NULL));
    return 1;
  }

  ztree_particles p;
  ztree_particles_init(&p);
  p.count = 6;
  p.memory = ZTREE_MEMORY_HOST;
  p.pos[0] = (ztree_array){x, ZTREE_DTYPE_F64, 0};
  p.pos[1] = (ztree_array){y, ZTREE_DTYPE_F64, 0};
  p.pos[2] = (ztree_array){z, ZTREE_DTYPE_F64, 0};

  ztree_knn_params kp;
  ztree_knn_params_init(&kp);
  kp.k = 2;
  kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES;
  ztree_knn_output out; /* NULL arrays: the context provides them */
  ztree_knn_output_init(&out);
  if (ztree_knn(ctx, &p, NULL, &kp, &out) != ZTREE_OK) {
    fprintf(stderr, "ztree_knn: %s\n", ztree_last_error(ctx));
    return 1;
  }
  for (int i = 0; i < 6; i++) {
    /* Neighbour 0 is the particle itself; neighbour 1 its nearest other particle. */
    printf("particle %d: nearest other particle %lld at distance %.4f\n", i, (long long)out.indices[2 * i + 1], out.distances[2 * i + 1]);
  }
  ztree_destroy(ctx);
  return 0;
}
