/* The growable ABI: this program is compiled against the current header and against
 * frozen copies of earlier ones (tests/c/abi-*), and linked with the current library.
 * Structs from an earlier header are read with their layout (later fields take their
 * defaults) and written no further than it; a struct size the library does not know is
 * refused with a message naming the struct, and nothing is written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztree.h"

#include "check.h"

enum { N = 500, K = 5, CANARY = 64 };
static double x[N], y[N], z[N];

/* A struct followed by bytes the library must never write. */
#define GUARDED(T) struct { T s; unsigned char canary[CANARY]; }
static int canary_intact(const unsigned char *c) {
  for (int i = 0; i < CANARY; i++)
    if (c[i] != 0xA5) return 0;
  return 1;
}

static double dist2(int i, int j) {
  double dx = fabs(x[i] - x[j]), dy = fabs(y[i] - y[j]), dz = fabs(z[i] - z[j]);
  dx = fmin(dx, 1 - dx), dy = fmin(dy, 1 - dy), dz = fmin(dz, 1 - dz);
  return dx * dx + dy * dy + dz * dz;
}

/* The k-th neighbour distance of particle i by brute force (itself included). */
static double kth_brute(int i) {
  double best[K];
  for (int k = 0; k < K; k++) best[k] = INFINITY;
  for (int j = 0; j < N; j++) {
    double d = dist2(i, j);
    for (int k = 0; k < K; k++)
      if (d < best[k]) {
        for (int m = K - 1; m > k; m--) best[m] = best[m - 1];
        best[k] = d;
        break;
      }
  }
  return sqrt(best[K - 1]);
}

/* Refuses `s` with its size set to `bad`: the status and a message naming `name`. */
#define EXPECT_REFUSED(call, name)                                                           \
  do {                                                                                       \
    ztree_status st_ = (call);                                                               \
    CHECK(st_ == ZTREE_ERR_INVALID_ARGUMENT && strstr(ztree_last_error(ctx), name ".struct_size") != NULL, \
          "%s: status %d, message %s", name, (int)st_, ztree_last_error(ctx));               \
  } while (0)

int main(void) {
  srand(7);
  for (int i = 0; i < N; i++) {
    x[i] = rand() / (RAND_MAX + 1.0);
    y[i] = rand() / (RAND_MAX + 1.0);
    z[i] = rand() / (RAND_MAX + 1.0);
  }
  ztree_config cfg;
  CHECK(ztree_config_init(&cfg) == ZTREE_OK && cfg.struct_size == sizeof cfg && cfg.dims == 3, "config defaults");
  cfg.periodic = 1;
  ztree_context *ctx = NULL;
  CHECK(ztree_create(&cfg, &ctx) == ZTREE_OK, "create: %s", ztree_last_error(NULL));
  if (!ctx) return 1;

  ztree_particles p;
  CHECK(ztree_particles_init(&p) == ZTREE_OK && p.struct_size == sizeof p && p.count == 0 && p.mass.data == NULL, "particles defaults");
  p.count = N;
  p.pos[0] = (ztree_array){x, ZTREE_DTYPE_F64, 0};
  p.pos[1] = (ztree_array){y, ZTREE_DTYPE_F64, 0};
  p.pos[2] = (ztree_array){z, ZTREE_DTYPE_F64, 0};

  /* kNN with this header's layouts; the output struct is written no further than it. */
  ztree_knn_params kp;
  ztree_knn_params_init(&kp);
  kp.k = K;
  kp.outputs = ZTREE_KNN_KTH_DISTANCE | ZTREE_KNN_INDICES;
  GUARDED(ztree_knn_output) ko;
  memset(ko.canary, 0xA5, CANARY);
  ztree_knn_output_init(&ko.s);
  CHECK(ztree_knn(ctx, &p, NULL, &kp, &ko.s) == ZTREE_OK, "knn: %s", ztree_last_error(ctx));
  CHECK(canary_intact(ko.canary), "ztree_knn wrote past the caller's ztree_knn_output");
  CHECK(ko.s.n_queries == N, "n_queries %lld", (long long)ko.s.n_queries);
  int wrong = 0;
  for (int i = 0; i < N && ko.s.kth_distance; i++) wrong += fabs(ko.s.kth_distance[i] - kth_brute(i)) > 1e-12;
  CHECK(ko.s.kth_distance && wrong == 0, "%d k-th distances differ from brute force", wrong);

  GUARDED(ztree_stats) st;
  memset(st.canary, 0xA5, CANARY);
  ztree_stats_init(&st.s);
  CHECK(ztree_get_stats(ctx, &st.s) == ZTREE_OK && st.s.particles == N && st.s.n_stages > 0, "stats");
  CHECK(canary_intact(st.canary) && st.s.struct_size == sizeof st.s, "ztree_get_stats wrote past the caller's ztree_stats");

  /* FoF: the partition does not depend on the layout the caller compiled against. */
  ztree_fof_params fp;
  ztree_fof_params_init(&fp);
  fp.linking_length = 0.05;
  fp.min_members = 2;
  GUARDED(ztree_fof_output) fo;
  memset(fo.canary, 0xA5, CANARY);
  ztree_fof_output_init(&fo.s);
  CHECK(ztree_fof(ctx, &p, &fp, &fo.s) == ZTREE_OK, "fof: %s", ztree_last_error(ctx));
  CHECK(canary_intact(fo.canary), "ztree_fof wrote past the caller's ztree_fof_output");
  int64_t members = 0;
  for (int64_t h = 0; h < fo.s.n_halos; h++) members += fo.s.halos[h].count;
  int64_t labelled = 0;
  for (int i = 0; i < N; i++) labelled += fo.s.labels[i] >= 0;
  CHECK(fo.s.n_halos > 0 && members == labelled, "halos %lld, members %lld, labelled %lld", (long long)fo.s.n_halos, (long long)members,
        (long long)labelled);
  /* Every pair closer than the linking length is in one group. */
  int split = 0;
  for (int i = 0; i < N; i++)
    for (int j = i + 1; j < N; j++)
      if (dist2(i, j) <= fp.linking_length * fp.linking_length) split += fo.s.labels[i] != fo.s.labels[j] || fo.s.labels[i] < 0;
  CHECK(split == 0, "%d linked pairs split", split);

  /* A struct of the first layout (48 bytes) read by this library: the fields after it
   * take their defaults, whatever the bytes there hold (a type mask here). */
  if (sizeof(ztree_fof_params) > 48) {
    ztree_fof_params old = fp;
    memset((char *)&old + 48, 0xFF, sizeof old - 48);
    old.struct_size = 48;
    int64_t *l1 = malloc(sizeof(int64_t) * N);
    memcpy(l1, fo.s.labels, sizeof(int64_t) * N);
    CHECK(ztree_fof(ctx, &p, &old, &fo.s) == ZTREE_OK, "fof with a first-layout params struct: %s", ztree_last_error(ctx));
    int same = 1;
    for (int i = 0; i < N; i++) same &= l1[i] == fo.s.labels[i];
    CHECK(same, "a first-layout struct read fields past its end");
    free(l1);
  }

  /* Sizes the library does not know: uninitialised (0) or from a newer header. */
  size_t bad[2] = {0, 0};
  for (int b = 0; b < 2; b++) {
    ztree_knn_params kb = kp;
    kb.struct_size = b ? sizeof kb + 4096 : bad[0];
    EXPECT_REFUSED(ztree_knn(ctx, &p, NULL, &kb, &ko.s), "ztree_knn_params");
    ztree_particles pb = p;
    pb.struct_size = b ? sizeof pb + 4096 : bad[0];
    EXPECT_REFUSED(ztree_knn(ctx, &pb, NULL, &kp, &ko.s), "ztree_particles");
    EXPECT_REFUSED(ztree_knn(ctx, &p, &pb, &kp, &ko.s), "ztree_particles");
    EXPECT_REFUSED(ztree_fof(ctx, &pb, &fp, &fo.s), "ztree_particles");
    ztree_fof_params fb = fp;
    fb.struct_size = b ? sizeof fb + 4096 : bad[0];
    EXPECT_REFUSED(ztree_fof(ctx, &p, &fb, &fo.s), "ztree_fof_params");
    /* A refused output struct is not written. */
    GUARDED(ztree_knn_output) kob;
    memset(&kob, 0xA5, sizeof kob);
    kob.s.struct_size = b ? sizeof kob.s + 4096 : bad[0];
    EXPECT_REFUSED(ztree_knn(ctx, &p, NULL, &kp, &kob.s), "ztree_knn_output");
    CHECK(canary_intact(kob.canary) && kob.s.n_queries == (int64_t)0xA5A5A5A5A5A5A5A5ull, "a refused output was written");
    ztree_fof_output fob = fo.s;
    fob.struct_size = b ? sizeof fob + 4096 : bad[0];
    EXPECT_REFUSED(ztree_fof(ctx, &p, &fp, &fob), "ztree_fof_output");
    int64_t bytes = 0;
    EXPECT_REFUSED(ztree_fof_bytes(ctx, &p, &fp, &fob, &bytes), "ztree_fof_output");
    ztree_stats sb;
    ztree_stats_init(&sb);
    sb.struct_size = b ? sizeof sb + 4096 : bad[0];
    ztree_status s = ztree_get_stats(ctx, &sb);
    CHECK(s == ZTREE_ERR_INVALID_ARGUMENT && strstr(ztree_last_error(NULL), "ztree_stats.struct_size"), "stats size: %s",
          ztree_last_error(NULL));
    ztree_config cb = cfg;
    cb.struct_size = b ? sizeof cb + 4096 : bad[0];
    ztree_context *c2 = (ztree_context *)1;
    CHECK(ztree_create(&cb, &c2) == ZTREE_ERR_INVALID_ARGUMENT && c2 == NULL && strstr(ztree_last_error(NULL), "ztree_config.struct_size"),
          "config size: %s", ztree_last_error(NULL));
    CHECK(ztree_knn_params_init_size(&kb, b ? sizeof kb + 4096 : 3) == ZTREE_ERR_INVALID_ARGUMENT, "init with an unknown size");
  }
  /* The context still works after the refusals. */
  CHECK(ztree_knn(ctx, &p, NULL, &kp, &ko.s) == ZTREE_OK && canary_intact(ko.canary), "knn after refusals: %s", ztree_last_error(ctx));
  ztree_destroy(ctx);
  if (failures) {
    fprintf(stderr, "test_abi (%s): %d checks failed\n", TEST_ABI_HEADER, failures);
    return 1;
  }
  printf("test_abi (%s): ok\n", TEST_ABI_HEADER);
  return 0;
}
