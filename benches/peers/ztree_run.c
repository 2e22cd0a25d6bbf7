/* ztree through its public C API, as one peer of the side-by-side benchmark
 * (benches/peers/run.py, `make bench-peers`), linked against the installed package.
 *
 *   ztree_run knn <points.npy> <k> <threads> <box>    self-query, full neighbour lists
 *   ztree_run fof <points.npy> <link> <threads> <box> labels + catalogue (>= 20 members)
 *   ztree_run dbscan <points.npy> <eps:min_pts> <threads> <box>  labels + classes + catalogue
 *   ztree_run radius <points.npy> <r:counts|r:lists> <threads> <box>  self-query: counts, or
 *             CSR lists (by index, context-owned)
 *
 * points.npy: C-order (N, 3) <f4 or <f8, passed in place (array of structs, stride 3).
 * box > 0: periodic cube [0, box)^3 ("Lx,Ly,Lz": a box of those sides); 0: open domain.
 *
 * Timed region: one ztree_knn / ztree_fof call on a context created before the clock (as
 * in a simulation, where the context lives for the whole run): for kNN indices + distances
 * into caller arrays in input order, for FoF a label per particle and the halo catalogue.
 * Prints one line `RESULT {json}` with the seconds, the checksum (mean k-th distance, or
 * groups with >= 20 members and the largest), ztree's stage breakdown (ztree_get_stats),
 * its scratch bytes, and the resident memory before the call and at its peak during the
 * call (VmHWM after resetting it through /proc/self/clear_refs), and the minor page faults
 * the call took (fresh 4 KiB pages, the caller's outputs included).
 *
 * PEER_CALLS=N (N > 1; benches/peers/run.py --calls N): after the first call is reported,
 * the same call runs N - 1 more times on the same context and caller arrays, as a
 * simulation calls every time step, `later_secs` is their median and `later_stages` the
 * last one's stage breakdown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#include "ztree.h"
#include "cuda_driver.h" /* examples-c/: the device mode's uploads */

/* Minor page faults of this process so far (fresh pages touched). */
static long minor_faults(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) ? -1 : ru.ru_minflt;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A field of /proc/self/status ("VmRSS:", "VmHWM:") in bytes; 0 where unavailable. */
static long long status_bytes(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long long kb = 0;
  size_t len = strlen(field);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, field, len)) {
      kb = atoll(line + len);
      break;
    }
  fclose(f);
  return kb * 1024;
}

/* Resets the peak resident set size (Linux >= 4.0): VmHWM then measures from here. */
static void reset_peak(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (f) {
    fputs("5", f);
    fclose(f);
  }
}

static void die(const char *what, const char *why) {
  fprintf(stderr, "ztree_run: %s: %s\n", what, why);
  exit(2);
}

/* Reads a C-order (n, 3) .npy of <f4 or <f8: the payload, n and the element size. */
static void *read_npy(const char *path, long long *n, int *esize) {
  FILE *f = fopen(path, "rb");
  if (!f) die(path, "cannot open");
  unsigned char pre[12];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) die(path, "not a .npy file");
  long hlen = pre[8] | (pre[9] << 8);
  if (pre[6] >= 2) {
    if (fread(pre + 10, 1, 2, f) != 2) die(path, "short header");
    hlen |= ((long)pre[10] << 16) | ((long)pre[11] << 24);
  }
  char *hdr = calloc(1, (size_t)hlen + 1);
  if (!hdr || fread(hdr, 1, (size_t)hlen, f) != (size_t)hlen) die(path, "short header");
  if (!strstr(hdr, "'fortran_order': False")) die(path, "Fortran order");
  *esize = strstr(hdr, "'<f8'") ? 8 : strstr(hdr, "'<f4'") ? 4 : 0;
  if (!*esize) die(path, "dtype must be <f4 or <f8");
  const char *shape = strstr(hdr, "'shape': (");
  if (!shape) die(path, "no shape");
  char *end;
  *n = strtoll(shape + 10, &end, 10);
  while (*end == ',' || *end == ' ') end++;
  if (atoi(end) != 3) die(path, "shape must be (N, 3)");
  size_t bytes = (size_t)*n * 3 * (size_t)*esize;
  void *buf = malloc(bytes ? bytes : 1);
  if (!buf || fread(buf, 1, bytes, f) != bytes) die(path, "short payload");
  fclose(f);
  free(hdr);
  return buf;
}

static void check(ztree_status s, const ztree_context *ctx, const char *what) {
  if (s != ZTREE_OK) {
    fprintf(stderr, "ztree_run: %s: %s (%s)\n", what, ztree_last_error(ctx), ztree_status_string(s));
    exit(1);
  }
}

/* The stage breakdown of the last call, as the JSON member `key`. */
static void print_stage_list(const ztree_stats *st, const char *key) {
  printf(", \"%s\": [", key);
  for (int i = 0; i < st->n_stages && i < ZTREE_MAX_STAGES; i++)
    printf("%s[\"%s\", %.6f]", i ? ", " : "", st->stage_name[i], st->stage_seconds[i]);
  printf("]");
}

/* The stage breakdown and scratch bytes of the last call, as JSON members. */
static void print_stats(const ztree_context *ctx) {
  ztree_stats st;
  ztree_stats_init(&st);
  check(ztree_get_stats(ctx, &st), ctx, "ztree_get_stats");
  print_stage_list(&st, "stages");
  printf(", \"stage_total\": %.6f, \"scratch_bytes\": %lld", st.total_seconds, (long long)st.scratch_bytes);
}

/* The stage breakdown of the last of the later calls (PEER_CALLS > 1), as a JSON member. */
static void print_later_stages(const ztree_context *ctx) {
  ztree_stats st;
  ztree_stats_init(&st);
  check(ztree_get_stats(ctx, &st), ctx, "ztree_get_stats");
  print_stage_list(&st, "later_stages");
}

/* A context with `threads` threads over the periodic box `box`: "L" the cube [0, L)^3,
 * "Lx,Ly,Lz" a box of those sides; open when its first side is <= 0. */
static ztree_context *open_context(int threads, const char *box) {
  ztree_config cfg;
  ztree_config_init(&cfg);
  cfg.threads = threads;
  char *end;
  double side = strtod(box, &end);
  cfg.periodic = side > 0;
  for (int d = 0; d < 3 && side > 0; d++) {
    cfg.box_size[d] = side;
    if (*end == ',') side = strtod(end + 1, &end);
  }
  /* ZTREE_RUN_LEAF_SIZE: another leaf size (tuning; the default is the library's). */
  if (getenv("ZTREE_RUN_LEAF_SIZE")) cfg.leaf_size = atoi(getenv("ZTREE_RUN_LEAF_SIZE"));
  ztree_context *ctx;
  check(ztree_create(&cfg, &ctx), NULL, "ztree_create");
  return ctx;
}

/* n points of `es`-byte reals, x y z interleaved from `base` (host or device memory). */
static ztree_particles particles(long long n, int es, const char *base, int memory) {
  ztree_particles p;
  ztree_particles_init(&p);
  p.count = n;
  p.memory = memory;
  for (int d = 0; d < 3; d++) p.pos[d] = (ztree_array){base + d * es, es == 8 ? ZTREE_DTYPE_F64 : ZTREE_DTYPE_F32, 3 * es};
  return p;
}

/* kNN of k neighbours, indices and distances in input order, into idx and dist (host or
 * device arrays of n * k). */
static void knn_request(int k, int64_t *idx, double *dist, ztree_knn_params *kp, ztree_knn_output *ko) {
  ztree_knn_params_init(kp);
  kp->k = k;
  kp->outputs = ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES;
  kp->order = ZTREE_ORDER_INPUT;
  ztree_knn_output_init(ko);
  ko->indices = idx;
  ko->distances = dist;
}

/* PEER_CALLS: how many times the timed call runs in this process (1 to 100). */
static int peer_calls(void) {
  const char *s = getenv("PEER_CALLS");
  int c = s ? atoi(s) : 1;
  return c < 1 ? 1 : c > 100 ? 100 : c;
}

/* Median of v[0..n). */
static double median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The device mode: points uploaded once, outputs in device memory, the call timed in one
 * process after a first call that compiles the kernels (NVRTC) and warms the allocator. */
static int run_on_device(char **argv) {
  int knn = !strcmp(argv[1], "knn");
  const char *box = argv[5];
  int reps = getenv("ZTREE_RUN_REPS") ? atoi(getenv("ZTREE_RUN_REPS")) : 5;
  if (reps < 1 || reps > 100) die("ZTREE_RUN_REPS", "must be in 1..100");
  if (ztree_cuda_device_count() < 1 || !load_driver()) die("cuda", "no usable GPU (ztree_cuda_device_count() == 0 or no driver)");
  ztree_context *ctx = open_context(0, box);
  long long n;
  int es;
  char *pos = read_npy(argv[2], &n, &es);
  uint64_t dpos = to_device(pos, (size_t)n * 3 * (size_t)es);
  ztree_particles p = particles(n, es, (const char *)(uintptr_t)dpos, ZTREE_MEMORY_CUDA_DEVICE);
  double secs[100], first = 0, check_sum = 0;
  long long groups = 0, halos = 0, largest = 0;
  printf("RESULT {\"peer\": \"ztree-cuda\", \"version\": \"%s\", \"n\": %lld, \"dtype\": \"%s\", \"reps\": %d", ztree_version(), n,
         es == 8 ? "f64" : "f32", reps);
  if (knn) {
    int k = atoi(argv[3]);
    if (k < 1) die("k", "must be >= 1");
    size_t cells = (size_t)n * (size_t)k;
    uint64_t didx = 0, ddist = 0;
    if (cu.alloc(&didx, 8 * cells) || cu.alloc(&ddist, 8 * cells)) die("outputs", "device out of memory");
    ztree_knn_params kp;
    ztree_knn_output ko;
    knn_request(k, (int64_t *)(uintptr_t)didx, (double *)(uintptr_t)ddist, &kp, &ko);
    for (int r = -1; r < reps; r++) {
      double t0 = now();
      check(ztree_knn(ctx, &p, NULL, &kp, &ko), ctx, "ztree_knn");
      double t = now() - t0;
      if (r < 0) first = t; else secs[r] = t;
    }
    double *dist = malloc(8 * cells);
    if (!dist || cu.dtoh(dist, ddist, 8 * cells)) die("outputs", "copy back failed");
    for (long long i = 0; i < n; i++) check_sum += dist[i * k + k - 1];
    check_sum /= (double)n;
    free(dist);
  } else {
    uint64_t dlab = 0;
    if (cu.alloc(&dlab, 8 * (size_t)(n ? n : 1))) die("labels", "device out of memory");
    ztree_fof_params fp;
    ztree_fof_params_init(&fp);
    fp.linking_length = atof(argv[3]);
    fp.min_members = 20;
    fp.order = ZTREE_CATALOGUE_ZORDER;
    ztree_fof_output fo;
    for (int r = -1; r < reps; r++) {
      ztree_fof_output_init(&fo);
      fo.labels = (int64_t *)(uintptr_t)dlab;
      double t0 = now();
      check(ztree_fof(ctx, &p, &fp, &fo), ctx, "ztree_fof");
      double t = now() - t0;
      if (r < 0) first = t; else secs[r] = t;
    }
    groups = (long long)fo.n_groups_total;
    halos = (long long)fo.n_halos;
    for (int64_t h = 0; h < fo.n_halos; h++)
      if (fo.halos[h].count > largest) largest = fo.halos[h].count;
  }
  printf(", \"first_secs\": %.6f", first);
  print_stats(ctx); /* of the last repetition */
  printf(", \"secs\": %.6f", median(secs, reps));
  if (knn)
    printf(", \"mean_kth\": %.17e}\n", check_sum);
  else
    printf(", \"groups\": %lld, \"groups20\": %lld, \"largest\": %lld}\n", groups, halos, largest);
  ztree_destroy(ctx);
  free(pos);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 6 || argc > 7 || (argc == 7 && strcmp(argv[6], "cuda")) || (strcmp(argv[1], "knn") && strcmp(argv[1], "fof") && strcmp(argv[1], "dbscan") && strcmp(argv[1], "radius")) ||
      (argc == 7 && (!strcmp(argv[1], "dbscan") || !strcmp(argv[1], "radius")))) {
    fprintf(stderr,
            "usage: ztree_run knn <points.npy> <k> <threads> <box> [cuda]\n"
            "       ztree_run fof <points.npy> <link> <threads> <box> [cuda]\n"
            "       ztree_run dbscan <points.npy> <eps:min_pts> <threads> <box>\n"
            "       ztree_run radius <points.npy> <r:counts|r:lists> <threads> <box>\n"
            "cuda: the points and outputs in GPU memory (the CUDA back end); the call runs\n"
            "once to compile the kernels (first_secs), then ZTREE_RUN_REPS times (median).\n");
    return 2;
  }
  if (argc == 7) return run_on_device(argv);
  int knn = !strcmp(argv[1], "knn");
  int threads = atoi(argv[4]);
  const char *box = argv[5];

  ztree_context *ctx = open_context(threads, box);
  long long n;
  int es;
  char *pos = read_npy(argv[2], &n, &es);
  ztree_particles p = particles(n, es, pos, ZTREE_MEMORY_HOST);

  printf("RESULT {\"peer\": \"ztree\", \"version\": \"%s\", \"n\": %lld, \"dtype\": \"%s\", \"threads\": %d",
         ztree_version(), n, es == 8 ? "f64" : "f32", threads);
  if (knn) {
    int k = atoi(argv[3]);
    if (k < 1) die("k", "must be >= 1");
    /* Caller arrays, untouched before the call (pages fault in during it, as for the peers). */
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)n * (size_t)k);
    double *dist = malloc(sizeof(double) * (size_t)n * (size_t)k);
    if (!idx || !dist) die("outputs", "out of memory");
    ztree_knn_params kp;
    ztree_knn_output ko;
    knn_request(k, idx, dist, &kp, &ko);
    long long rss0 = status_bytes("VmRSS:");
    reset_peak();
    long flt0 = minor_faults();
    double t0 = now();
    check(ztree_knn(ctx, &p, NULL, &kp, &ko), ctx, "ztree_knn");
    double secs = now() - t0;
    long faults = minor_faults() - flt0;
    long long peak = status_bytes("VmHWM:");
    double sum = 0;
    for (long long i = 0; i < n; i++) sum += dist[i * k + k - 1];
    printf(", \"secs\": %.6f, \"mean_kth\": %.17e, \"rss_before\": %lld, \"peak_rss\": %lld, \"minor_faults\": %ld", secs, sum / (double)n, rss0,
           peak, faults);
    print_stats(ctx);
    int calls = peer_calls();
    if (calls > 1) {
      double later[100];
      for (int c = 1; c < calls; c++) {
        double t1 = now();
        check(ztree_knn(ctx, &p, NULL, &kp, &ko), ctx, "ztree_knn");
        later[c - 1] = now() - t1;
      }
      printf(", \"later_secs\": %.6f", median(later, calls - 1));
      print_later_stages(ctx);
    }
    free(idx);
    free(dist);
  } else if (strcmp(argv[1], "radius") == 0) {
    ztree_radius_params rp;
    ztree_radius_params_init(&rp);
    rp.radius = atof(argv[3]);
    const char *colon = strchr(argv[3], ':');
    int lists = colon && !strcmp(colon + 1, "lists");
    rp.outputs = ZTREE_RADIUS_COUNTS | (lists ? ZTREE_RADIUS_LISTS : 0);
    rp.list_order = ZTREE_LIST_BY_INDEX;
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!counts) die("counts", "out of memory");
    ztree_radius_output ro;
    ztree_radius_output_init(&ro);
    ro.counts = counts;
    long long rss0 = status_bytes("VmRSS:");
    reset_peak();
    long flt0 = minor_faults();
    double t0 = now();
    check(ztree_radius(ctx, &p, NULL, &rp, &ro), ctx, "ztree_radius");
    double secs = now() - t0;
    long faults = minor_faults() - flt0;
    long long peak = status_bytes("VmHWM:");
    printf(", \"secs\": %.6f, \"pairs\": %lld, \"rss_before\": %lld, \"peak_rss\": %lld, \"minor_faults\": %ld", secs, (long long)ro.n_pairs, rss0, peak,
           faults);
    print_stats(ctx);
    int calls = peer_calls();
    if (calls > 1) {
      double later[100];
      for (int c = 1; c < calls; c++) {
        double t1 = now();
        check(ztree_radius(ctx, &p, NULL, &rp, &ro), ctx, "ztree_radius");
        later[c - 1] = now() - t1;
      }
      printf(", \"later_secs\": %.6f", median(later, calls - 1));
      print_later_stages(ctx);
    }
    free(counts);
  } else if (strcmp(argv[1], "dbscan") == 0) {
    ztree_dbscan_params dp;
    ztree_dbscan_params_init(&dp);
    dp.eps = atof(argv[3]);
    const char *colon = strchr(argv[3], ':');
    dp.min_pts = colon ? atoi(colon + 1) : 10;
    dp.classes = 1;
    int64_t *labels = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    int8_t *cls = malloc((size_t)(n ? n : 1));
    if (!labels || !cls) die("labels", "out of memory");
    ztree_dbscan_output dout;
    ztree_dbscan_output_init(&dout);
    dout.labels = labels;
    dout.point_class = cls;
    long long rss0 = status_bytes("VmRSS:");
    reset_peak();
    long flt0 = minor_faults();
    double t0 = now();
    check(ztree_dbscan(ctx, &p, &dp, &dout), ctx, "ztree_dbscan");
    double secs = now() - t0;
    long faults = minor_faults() - flt0;
    long long peak = status_bytes("VmHWM:");
    printf(", \"secs\": %.6f, \"clusters\": %lld, \"noise\": %lld, \"core\": %lld, \"border\": %lld, \"rss_before\": %lld, \"peak_rss\": %lld, \"minor_faults\": %ld",
           secs, (long long)dout.n_clusters_total, (long long)dout.n_noise, (long long)dout.n_core, (long long)dout.n_border, rss0, peak, faults);
    print_stats(ctx);
    int calls = peer_calls();
    if (calls > 1) {
      double later[100];
      for (int c = 1; c < calls; c++) {
        double t1 = now();
        check(ztree_dbscan(ctx, &p, &dp, &dout), ctx, "ztree_dbscan");
        later[c - 1] = now() - t1;
      }
      printf(", \"later_secs\": %.6f", median(later, calls - 1));
      print_later_stages(ctx);
    }
    free(labels);
    free(cls);
  } else {
    double link = atof(argv[3]);
    int64_t *labels = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!labels) die("labels", "out of memory");
    ztree_fof_params fp;
    ztree_fof_params_init(&fp);
    fp.linking_length = link;
    fp.min_members = 20;
    fp.order = ZTREE_CATALOGUE_ZORDER;
    ztree_fof_output fo;
    ztree_fof_output_init(&fo);
    fo.labels = labels;
    long long rss0 = status_bytes("VmRSS:");
    reset_peak();
    long flt0 = minor_faults();
    double t0 = now();
    check(ztree_fof(ctx, &p, &fp, &fo), ctx, "ztree_fof");
    double secs = now() - t0;
    long faults = minor_faults() - flt0;
    long long peak = status_bytes("VmHWM:");
    long long largest = 0;
    for (int64_t h = 0; h < fo.n_halos; h++)
      if (fo.halos[h].count > largest) largest = fo.halos[h].count;
    printf(", \"secs\": %.6f, \"groups\": %lld, \"groups20\": %lld, \"largest\": %lld, \"rss_before\": %lld, \"peak_rss\": %lld, \"minor_faults\": %ld",
           secs, (long long)fo.n_groups_total, (long long)fo.n_halos, largest, rss0, peak, faults);
    print_stats(ctx);
    int calls = peer_calls();
    if (calls > 1) {
      double later[100];
      for (int c = 1; c < calls; c++) {
        ztree_fof_output_init(&fo);
        fo.labels = labels;
        double t1 = now();
        check(ztree_fof(ctx, &p, &fp, &fo), ctx, "ztree_fof");
        later[c - 1] = now() - t1;
      }
      printf(", \"later_secs\": %.6f", median(later, calls - 1));
      print_later_stages(ctx);
    }
    free(labels);
  }
  printf("}\n");
  ztree_destroy(ctx);
  free(pos);
  return 0;
}
