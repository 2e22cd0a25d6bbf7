/* Collective argument checking on MPI contexts: every rejected argument, passed by one
 * rank alone (each rank in turn), makes every rank return in the same call — that rank
 * with its own status, the others with ZTREE_ERR_REMOTE (or all with ZTREE_ERR_MPI when
 * the ranks merely disagree) — and after an MPI_Barrier the next call equals a serial
 * call. Run under a timeout (ctest TIMEOUT): a hang fails the test.
 *   mpirun -np 3 ./test_mpi_args */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztree.h"

static int rank, size, failures = 0;
#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      failures++;                                                            \
      fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__);         \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
    }                                                                        \
  } while (0)

enum { NL = 400, K = 8 };
static double x[NL], y[NL], z[NL], m[NL];
static float xf[NL], yf[NL], zf[NL];
static double xnan[NL], yout[NL], ones[NL]; /* x with a NaN, y with a point outside the box */
static uint8_t types[NL];                     /* GADGET-style particle types, 1 and 4 */
static double gx[4 * NL], gy[4 * NL], gz[4 * NL];

static uint64_t rng = 88172645463325252ULL;
static double urand(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static ztree_particles soa(int64_t n, const double *px, const double *py, const double *pz) {
  ztree_particles p;
  ztree_particles_init(&p);
  p.count = n;
  p.pos[0] = (ztree_array){px, ZTREE_DTYPE_F64, 0};
  p.pos[1] = (ztree_array){py, ZTREE_DTYPE_F64, 0};
  p.pos[2] = (ztree_array){pz, ZTREE_DTYPE_F64, 0};
  return p;
}

/* One call's arguments; a case changes them on the bad rank. */
typedef struct {
  ztree_particles src, qry;
  int use_qry;
  ztree_knn_params kp;
  ztree_fof_params fp;
  int null_params, null_out, bad_out_size;
} call_t;

typedef struct {
  const char *name;
  int fof;                 /* 0: kNN, 1: FoF */
  void (*spoil)(call_t *);  /* on the bad rank */
  ztree_status bad_status; /* on the bad rank; ZTREE_ERR_MPI: all ranks (a disagreement) */
} case_t;

static void k0(call_t *c) { c->kp.k = 0; }
static void kneg(call_t *c) { c->kp.k = -3; }
static void unknown_bit(call_t *c) { c->kp.outputs |= 1u << 20; }
static void bad_order(call_t *c) { c->kp.order = 9; }
static void neg_stride(call_t *c) { c->src.pos[1].stride = -8; }
static void null_pos(call_t *c) { c->src.pos[2].data = NULL; }
static void null_params(call_t *c) { c->null_params = 1; }
static void null_out(call_t *c) { c->null_out = 1; }
static void cuda(call_t *c) { c->src.memory = ZTREE_MEMORY_CUDA_DEVICE; }
static void memory7(call_t *c) { c->src.memory = 7; }
static void neg_count(call_t *c) { c->src.count = -1; }
static void dtype_i32(call_t *c) { c->src.pos[0].dtype = ZTREE_DTYPE_I32; }
static void mixed_pos(call_t *c) { c->src.pos[1].dtype = ZTREE_DTYPE_F32; }
static void f32_pos(call_t *c) {
  c->src.pos[0] = (ztree_array){xf, ZTREE_DTYPE_F32, 0};
  c->src.pos[1] = (ztree_array){yf, ZTREE_DTYPE_F32, 0};
  c->src.pos[2] = (ztree_array){zf, ZTREE_DTYPE_F32, 0};
}
static void queries(call_t *c) { c->use_qry = 1; }
static void kmax(call_t *c) { c->kp.k = INT32_MAX; }
static void knn_scalar_null(call_t *c) { c->kp.outputs |= ZTREE_KNN_SCALAR_MEAN; }
static void nan_pos(call_t *c) { c->src.pos[0].data = xnan; }
static void outside(call_t *c) { c->src.pos[1].data = yout; }
static void b_neg(call_t *c) { c->fp.b = -0.2; c->fp.linking_length = 0; }
static void both_ll(call_t *c) { c->fp.b = 0.2; }
static void ll_nan(call_t *c) { c->fp.linking_length = NAN; }
static void mm0(call_t *c) { c->fp.min_members = 0; }
static void cat_order(call_t *c) { c->fp.order = 5; }
static void gather(call_t *c) { c->fp.gather = !c->fp.gather; }
static void vel_half(call_t *c) { c->src.vel[0] = (ztree_array){x, ZTREE_DTYPE_F64, 0}; }
static void mass_zero(call_t *c) { c->src.mass = (ztree_array){m, ZTREE_DTYPE_F64, 0}; }
static void mass_one(call_t *c) { c->src.mass = (ztree_array){ones, ZTREE_DTYPE_F64, 0}; }
static void mass_only_here(call_t *c) { c->src.mass = (ztree_array){x, ZTREE_DTYPE_F64, 0}; }
static void ids_f64(call_t *c) { c->src.ids = (ztree_array){x, ZTREE_DTYPE_F64, 0}; }
static void kp_size0(call_t *c) { c->kp.struct_size = 0; }
static void src_size_newer(call_t *c) { c->src.struct_size += 8; }
static void fp_size0(call_t *c) { c->fp.struct_size = 0; }
static void out_size_bad(call_t *c) { c->bad_out_size = 1; }
static void fof_mask_no_types(call_t *c) { c->fp.type_mask = 2; }
static void fof_mask(call_t *c) {
  c->fp.type_mask = 2;
  c->src.types = (ztree_array){types, ZTREE_DTYPE_U8, 0};
}
static void fof_columns(call_t *c) {
  c->fp.columns = ZTREE_COLUMN_CENTRE;
  c->fp.gravity_constant = 1.0;
}
static void fof_column_bit(call_t *c) { c->fp.columns = 1u << 12; }
static void knn_types_f64(call_t *c) {
  c->kp.source_type_mask = 2;
  c->src.types = (ztree_array){x, ZTREE_DTYPE_F64, 0};
}

static const case_t cases[] = {
    {"k = 0", 0, k0, ZTREE_ERR_INVALID_ARGUMENT},
    {"k < 0", 0, kneg, ZTREE_ERR_INVALID_ARGUMENT},
    {"unknown output bit", 0, unknown_bit, ZTREE_ERR_INVALID_ARGUMENT},
    {"unknown row order", 0, bad_order, ZTREE_ERR_INVALID_ARGUMENT},
    {"pos[1].stride = -8", 0, neg_stride, ZTREE_ERR_INVALID_ARGUMENT},
    {"pos[2].data = NULL", 0, null_pos, ZTREE_ERR_NULL_POINTER},
    {"params = NULL", 0, null_params, ZTREE_ERR_NULL_POINTER},
    {"out = NULL", 0, null_out, ZTREE_ERR_NULL_POINTER},
    {"memory = CUDA", 0, cuda, ZTREE_ERR_NO_DEVICE},
    {"memory = 7", 0, memory7, ZTREE_ERR_INVALID_ARGUMENT},
    {"count = -1", 0, neg_count, ZTREE_ERR_SIZE},
    {"i32 positions", 0, dtype_i32, ZTREE_ERR_DTYPE},
    {"mixed position types", 0, mixed_pos, ZTREE_ERR_DTYPE},
    {"f32 positions on one rank", 0, f32_pos, ZTREE_ERR_MPI},
    {"a separate query set on one rank", 0, queries, ZTREE_ERR_MPI},
    {"k = INT32_MAX with indices", 0, kmax, ZTREE_ERR_MEMORY},
    {"scalar mean without a scalar", 0, knn_scalar_null, ZTREE_ERR_NULL_POINTER},
    {"a NaN coordinate", 0, nan_pos, ZTREE_ERR_NON_FINITE},
    {"a point outside the box", 0, outside, ZTREE_ERR_OUTSIDE_BOX},
    {"FoF b = -0.2", 1, b_neg, ZTREE_ERR_INVALID_ARGUMENT},
    {"FoF linking length and b", 1, both_ll, ZTREE_ERR_INVALID_ARGUMENT},
    {"FoF linking length NaN", 1, ll_nan, ZTREE_ERR_INVALID_ARGUMENT},
    {"FoF min_members = 0", 1, mm0, ZTREE_ERR_INVALID_ARGUMENT},
    {"FoF catalogue order 5", 1, cat_order, ZTREE_ERR_INVALID_ARGUMENT},
    {"FoF gather on one rank", 1, gather, ZTREE_ERR_MPI},
    {"FoF vel[0] without vel[1]", 1, vel_half, ZTREE_ERR_NULL_POINTER},
    {"FoF a zero mass", 1, mass_zero, ZTREE_ERR_INVALID_ARGUMENT},
    {"FoF masses on one rank only", 1, mass_only_here, ZTREE_ERR_MPI},
    {"FoF f64 ids", 1, ids_f64, ZTREE_ERR_DTYPE},
    {"FoF params = NULL", 1, null_params, ZTREE_ERR_NULL_POINTER},
    {"params.struct_size = 0", 0, kp_size0, ZTREE_ERR_INVALID_ARGUMENT},
    {"sources from a newer header", 0, src_size_newer, ZTREE_ERR_INVALID_ARGUMENT},
    {"output struct of an unknown size", 0, out_size_bad, ZTREE_ERR_INVALID_ARGUMENT},
    {"FoF params.struct_size = 0", 1, fp_size0, ZTREE_ERR_INVALID_ARGUMENT},
    {"FoF output struct of an unknown size", 1, out_size_bad, ZTREE_ERR_INVALID_ARGUMENT},
    {"FoF type mask without types", 1, fof_mask_no_types, ZTREE_ERR_NULL_POINTER},
    {"FoF type mask on one rank only", 1, fof_mask, ZTREE_ERR_MPI},
    {"kNN f64 particle types", 0, knn_types_f64, ZTREE_ERR_DTYPE},
    {"FoF halo property columns (serial contexts only)", 1, fof_columns, ZTREE_ERR_UNSUPPORTED},
    {"FoF an unknown column bit", 1, fof_column_bit, ZTREE_ERR_INVALID_ARGUMENT},
    {"FoF pos[1].stride = -8", 1, neg_stride, ZTREE_ERR_INVALID_ARGUMENT},
    {"FoF memory = CUDA", 1, cuda, ZTREE_ERR_NO_DEVICE},
    {"FoF f32 positions on one rank", 1, f32_pos, ZTREE_ERR_MPI},
};

static call_t good_call(void) {
  call_t c;
  memset(&c, 0, sizeof c);
  ztree_knn_params_init(&c.kp);
  ztree_fof_params_init(&c.fp);
  c.src = soa(NL, x, y, z);
  c.qry = soa(NL, x, y, z);
  c.kp.k = K;
  c.kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_KTH_DISTANCE;
  c.fp.linking_length = 0.03;
  c.fp.min_members = 3;
  c.fp.order = ZTREE_CATALOGUE_GADGET;
  return c;
}

static ztree_status run(ztree_context *ctx, const call_t *c, int fof, ztree_knn_output *ko, ztree_fof_output *fo) {
  ztree_knn_output_init(ko);
  ztree_fof_output_init(fo);
  if (c->bad_out_size) ko->struct_size = fo->struct_size = 12;
  if (fof) return ztree_fof(ctx, &c->src, c->null_params ? NULL : &c->fp, c->null_out ? NULL : fo);
  return ztree_knn(ctx, &c->src, c->use_qry ? &c->qry : NULL, c->null_params ? NULL : &c->kp, c->null_out ? NULL : ko);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 4) MPI_Abort(MPI_COMM_WORLD, 2);
  for (int i = 0; i < 4 * NL; i++) { gx[i] = urand(); gy[i] = urand(); gz[i] = urand(); }
  for (int i = 0; i < NL; i++) {
    x[i] = gx[rank * NL + i]; y[i] = gy[rank * NL + i]; z[i] = gz[rank * NL + i];
    xf[i] = (float)x[i]; yf[i] = (float)y[i]; zf[i] = (float)z[i];
    m[i] = i == NL / 2 ? 0.0 : 1.0;
    ones[i] = 1.0;
    xnan[i] = x[i];
    yout[i] = y[i];
    types[i] = (rank * NL + i) % 3 ? 1 : 4;
  }
  xnan[NL / 3] = NAN;
  yout[NL - 1] = 1.5;

  ztree_config cfg;
  ztree_config_init(&cfg);
  cfg.periodic = 1;
  cfg.threads = 1;
  ztree_context *dist, *serial;
  CHECK(ztree_create_mpi(&cfg, (int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), &dist) == ZTREE_OK, "create_mpi: %s", ztree_last_error(NULL));
  CHECK(ztree_create(&cfg, &serial) == ZTREE_OK, "create");

  /* The serial reference on every rank's points concatenated in rank order. */
  static double cx[4 * NL], cy[4 * NL], cz[4 * NL];
  for (int r = 0; r < size; r++)
    for (int i = 0; i < NL; i++) {
      cx[r * NL + i] = gx[r * NL + i]; cy[r * NL + i] = gy[r * NL + i]; cz[r * NL + i] = gz[r * NL + i];
    }
  call_t ref = good_call();
  ref.src = soa((int64_t)size * NL, cx, cy, cz);
  ztree_knn_output rk;
  ztree_fof_output rf;
  ztree_knn_output_init(&rk);
  CHECK(run(serial, &ref, 0, &rk, &rf) == ZTREE_OK, "serial knn: %s", ztree_last_error(serial));
  static double ref_kth[4 * NL];
  memcpy(ref_kth, rk.kth_distance, sizeof(double) * size * NL);
  CHECK(run(serial, &ref, 1, &rk, &rf) == ZTREE_OK, "serial fof: %s", ztree_last_error(serial));
  static int64_t ref_labels[4 * NL];
  memcpy(ref_labels, rf.labels, sizeof(int64_t) * size * NL);

  /* DBSCAN and radius queries: a bad parameter on one rank fails the call on every rank, and the
   * next collective call pairs up. */
  for (int bad = 0; bad < size; bad++) {
    call_t c = good_call();
    ztree_dbscan_params dp;
    ztree_dbscan_params_init(&dp);
    dp.eps = 0.03;
    dp.min_pts = rank == bad ? 0 : 4;
    ztree_dbscan_output dout;
    ztree_dbscan_output_init(&dout);
    ztree_status s = ztree_dbscan(dist, &c.src, &dp, &dout);
    CHECK(rank == bad ? s == ZTREE_ERR_INVALID_ARGUMENT : s == ZTREE_ERR_REMOTE, "dbscan with min_pts 0 on rank %d: %d %s", bad, (int)s,
          ztree_last_error(dist));
    ztree_knn_output ko;
    ztree_fof_output fo;
    CHECK(run(dist, &c, 0, &ko, &fo) == ZTREE_OK, "knn after a failed dbscan: %s", ztree_last_error(dist));
    ztree_radius_params rp;
    ztree_radius_params_init(&rp);
    rp.radius = rank == bad ? -1.0 : 0.03;
    rp.outputs = ZTREE_RADIUS_COUNTS;
    ztree_radius_output ro;
    ztree_radius_output_init(&ro);
    s = ztree_radius(dist, &c.src, NULL, &rp, &ro);
    CHECK(rank == bad ? s == ZTREE_ERR_INVALID_ARGUMENT : s == ZTREE_ERR_REMOTE, "radius -1 on rank %d: %d %s", bad, (int)s, ztree_last_error(dist));
    CHECK(run(dist, &c, 1, &ko, &fo) == ZTREE_OK, "fof after a failed radius query: %s", ztree_last_error(dist));
    /* Both again, good everywhere. */
    dp.min_pts = 4;
    CHECK(ztree_dbscan(dist, &c.src, &dp, &dout) == ZTREE_OK, "dbscan: %s", ztree_last_error(dist));
    rp.radius = 0.03;
    CHECK(ztree_radius(dist, &c.src, NULL, &rp, &ro) == ZTREE_OK, "radius: %s", ztree_last_error(dist));
  }

  int ncases = (int)(sizeof cases / sizeof cases[0]);
  for (int ci = 0; ci < ncases; ci++) {
    const case_t *cs = &cases[ci];
    for (int bad = 0; bad < size; bad++) {
      call_t c = good_call();
      if (cs->spoil == mass_zero) mass_one(&c); /* masses everywhere, a zero on one rank */
      if (rank == bad) cs->spoil(&c);
      ztree_knn_output ko;
      ztree_fof_output fo;
      ztree_status s = run(dist, &c, cs->fof, &ko, &fo);
      ztree_status want = cs->bad_status;
      if (want == ZTREE_ERR_NO_DEVICE && ztree_cuda_device_count() > 0) want = ZTREE_ERR_INVALID_ARGUMENT; /* host pointers on a GPU machine */
      if (size == 1 && want == ZTREE_ERR_MPI) want = ZTREE_OK; /* nothing to disagree with */
      if (want != ZTREE_ERR_MPI && rank != bad) want = ZTREE_ERR_REMOTE;
      CHECK(s == want, "%s on rank %d: status %d, expected %d (%s)", cs->name, bad, (int)s, (int)want, ztree_last_error(dist));
      CHECK(s == ZTREE_OK || strlen(ztree_last_error(dist)) > 0, "%s: no message", cs->name);
      /* The job goes on: a barrier, then a good call equal to the serial one. */
      MPI_Barrier(MPI_COMM_WORLD);
      call_t g = good_call();
      s = run(dist, &g, cs->fof, &ko, &fo);
      CHECK(s == ZTREE_OK, "%s on rank %d: the next call failed: %s", cs->name, bad, ztree_last_error(dist));
      int diff = 0;
      for (int i = 0; s == ZTREE_OK && i < NL; i++)
        diff += cs->fof ? fo.labels[i] != ref_labels[rank * NL + i] : ko.kth_distance[i] != ref_kth[rank * NL + i];
      CHECK(diff == 0, "%s on rank %d: the next call differs from serial in %d rows", cs->name, bad, diff);
    }
  }

  /* Contexts: a bad configuration on one rank, or configurations that disagree. */
  for (int bad = 0; bad < size; bad++) {
    ztree_config c2 = cfg;
    if (rank == bad) c2.leaf_size = -1;
    ztree_context *ctx = NULL;
    ztree_status s = ztree_create_mpi(&c2, (int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), &ctx);
    CHECK(s == (rank == bad ? ZTREE_ERR_INVALID_ARGUMENT : ZTREE_ERR_REMOTE) && ctx == NULL, "bad config on rank %d: %d", bad, (int)s);
    c2 = cfg;
    if (rank == bad) c2.dims = 2;
    s = ztree_create_mpi(&c2, (int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), &ctx);
    CHECK(size == 1 ? s == ZTREE_OK : (s == ZTREE_ERR_MPI && ctx == NULL), "dims 2 on rank %d: %d", bad, (int)s);
    ztree_destroy(ctx);
    ctx = NULL;
    s = ztree_create_mpi(rank == bad ? NULL : &cfg, (int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), &ctx);
    CHECK(s == (rank == bad ? ZTREE_ERR_NULL_POINTER : ZTREE_ERR_REMOTE) && ctx == NULL, "NULL config on rank %d: %d", bad, (int)s);
    MPI_Barrier(MPI_COMM_WORLD);
  }

  /* A separate query set on every rank: equals the serial call. */
  {
    call_t c = good_call();
    c.use_qry = 1;
    static double qx[NL], qy[NL], qz[NL];
    for (int i = 0; i < NL; i++) { qx[i] = fmod(x[i] + 0.37, 1.0); qy[i] = y[(i * 7) % NL]; qz[i] = z[i]; }
    c.qry = soa(NL, qx, qy, qz);
    ztree_knn_output ko;
    ztree_fof_output fo;
    CHECK(run(dist, &c, 0, &ko, &fo) == ZTREE_OK, "queries: %s", ztree_last_error(dist));
    static double aqx[4 * NL], aqy[4 * NL], aqz[4 * NL];
    MPI_Allgather(qx, NL, MPI_DOUBLE, aqx, NL, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Allgather(qy, NL, MPI_DOUBLE, aqy, NL, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Allgather(qz, NL, MPI_DOUBLE, aqz, NL, MPI_DOUBLE, MPI_COMM_WORLD);
    call_t r = ref;
    r.use_qry = 1;
    r.qry = soa((int64_t)size * NL, aqx, aqy, aqz);
    ztree_knn_output sk;
    CHECK(run(serial, &r, 0, &sk, &fo) == ZTREE_OK, "serial queries: %s", ztree_last_error(serial));
    int diff = 0;
    for (int i = 0; i < NL; i++) {
      diff += ko.kth_distance[i] != sk.kth_distance[rank * NL + i];
      for (int j = 0; j < K; j++) diff += ko.indices[i * K + j] != sk.indices[(rank * NL + i) * K + j];
    }
    CHECK(diff == 0, "separate queries: %d values differ from serial", diff);
  }

  ztree_destroy(serial);
  ztree_destroy(dist);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_mpi_args: %d ranks, %d cases on each rank position, %d failures\n", size, ncases, total);
  MPI_Finalize();
  return total != 0;
}
