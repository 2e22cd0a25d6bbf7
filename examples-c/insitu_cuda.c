/* Device arrays in, device results out: what a GPU simulation passes to ztree.
 *
 * Builds everywhere (no CUDA headers or libraries needed: the CUDA driver is opened at run
 * time, as ztree itself does). Where there is no GPU, it shows the status a code gets
 * (ZTREE_ERR_NO_DEVICE, with a message) and exits 0. Where there is one, it copies random
 * particles to the device, runs kNN on the device arrays with the results written to a
 * device array, and checks them against the same call on host arrays.
 *
 * Run: insitu_cuda [particles]   (default 100000) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztree.h"

#include "cuda_driver.h"

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? atoll(argv[1]) : 100000;
  const int k = 16;
  float *pos = malloc(sizeof(float) * 3 * (size_t)n); /* x, y, z interleaved (array of structs) */
  srand(1);
  for (int64_t i = 0; i < 3 * n; i++) pos[i] = (float)rand() / ((float)RAND_MAX + 1.0f);

  ztree_config cfg;
  ztree_config_init(&cfg);
  cfg.periodic = 1;
  ztree_context *ctx;
  if (ztree_create(&cfg, &ctx) != ZTREE_OK) {
    fprintf(stderr, "ztree_create: %s\n", ztree_last_error(NULL));
    return 1;
  }

  /* The host call: the reference. */
  ztree_particles p;
  ztree_particles_init(&p);
  p.count = n;
  p.memory = ZTREE_MEMORY_HOST;
  for (int d = 0; d < 3; d++) p.pos[d] = (ztree_array){pos + d, ZTREE_DTYPE_F32, 3 * sizeof(float)};
  ztree_knn_params kp;
  ztree_knn_params_init(&kp);
  kp.k = k;
  kp.outputs = ZTREE_KNN_INDICES;
  ztree_knn_output host;
  ztree_knn_output_init(&host);
  if (ztree_knn(ctx, &p, NULL, &kp, &host) != ZTREE_OK) {
    fprintf(stderr, "ztree_knn (host): %s\n", ztree_last_error(ctx));
    return 1;
  }
  int64_t *ref = malloc(sizeof(int64_t) * (size_t)(n * k));
  memcpy(ref, host.indices, sizeof(int64_t) * (size_t)(n * k));

  int devices = ztree_cuda_device_count();
  printf("CUDA devices usable by ztree: %d\n", devices);
  ztree_particles dp = p;
  dp.memory = ZTREE_MEMORY_CUDA_DEVICE;
  if (devices == 0 || !load_driver()) {
    /* No GPU: the call is refused with a status and a message, nothing is touched. */
    ztree_knn_output out;
    ztree_knn_output_init(&out);
    ztree_status s = ztree_knn(ctx, &dp, NULL, &kp, &out);
    printf("device arrays without a GPU: status %d (%s): %s\n", (int)s, ztree_status_string(s), ztree_last_error(ctx));
    ztree_destroy(ctx);
    return s == ZTREE_ERR_NO_DEVICE ? 0 : 1;
  }

  uint64_t dpos = to_device(pos, sizeof(float) * 3 * (size_t)n);
  uint64_t didx = 0;
  cu.alloc(&didx, sizeof(int64_t) * (size_t)(n * k));
  for (int d = 0; d < 3; d++) dp.pos[d] = (ztree_array){(const void *)(uintptr_t)(dpos + d * sizeof(float)), ZTREE_DTYPE_F32, 3 * sizeof(float)};
  ztree_knn_output out;
  ztree_knn_output_init(&out);
  out.indices = (int64_t *)(uintptr_t)didx; /* a device array of n * k entries */
  kp.cuda_stream = NULL;                    /* the default stream */
  ztree_status s = ztree_knn(ctx, &dp, NULL, &kp, &out);
  if (s != ZTREE_OK) {
    fprintf(stderr, "ztree_knn (device arrays): status %d: %s\n", (int)s, ztree_last_error(ctx));
    return 2;
  }
  int64_t *got = malloc(sizeof(int64_t) * (size_t)(n * k));
  cu.dtoh(got, didx, sizeof(int64_t) * (size_t)(n * k));
  int64_t diff = 0;
  for (int64_t i = 0; i < n * k; i++) diff += got[i] != ref[i];
  printf("kNN k = %d of %lld particles on the device: %lld entries differ from the host call\n", k, (long long)n, (long long)diff);
  cu.free(dpos);
  cu.free(didx);
  ztree_destroy(ctx);
  return diff != 0;
}
