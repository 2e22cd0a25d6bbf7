// FoF and kNN from C++ through the C header: a clump of 200 particles in noise.
#include <cstdio>
#include <random>
#include <vector>

#include "ztree.h"

int main() {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const int n = 2000;
  std::vector<double> x(n), y(n), z(n);
  for (int i = 0; i < n; i++) {
    double s = i < 200 ? 0.01 : 1.0, c = i < 200 ? 0.5 : 0.0;
    x[i] = c + s * (u(rng) - (i < 200 ? 0.5 : 0.0));
    y[i] = c + s * (u(rng) - (i < 200 ? 0.5 : 0.0));
    z[i] = c + s * (u(rng) - (i < 200 ? 0.5 : 0.0));
  }
  ztree_config cfg;
  ztree_config_init(&cfg);
  ztree_context *ctx = nullptr;
  if (ztree_create(&cfg, &ctx) != ZTREE_OK) return 1;
  ztree_particles p;
  ztree_particles_init(&p);
  p.count = n;
  p.pos[0] = {x.data(), ZTREE_DTYPE_F64, 0};
  p.pos[1] = {y.data(), ZTREE_DTYPE_F64, 0};
  p.pos[2] = {z.data(), ZTREE_DTYPE_F64, 0};
  ztree_fof_params fp;
  ztree_fof_params_init(&fp);
  fp.linking_length = 0.005;
  fp.min_members = 50;
  ztree_fof_output fo;
  ztree_fof_output_init(&fo);
  ztree_status s = ztree_fof(ctx, &p, &fp, &fo);
  std::vector<double> density(n);
  ztree_knn_params kp;
  ztree_knn_params_init(&kp);
  kp.k = 8;
  kp.outputs = ZTREE_KNN_DENSITY;
  ztree_knn_output ko;
  ztree_knn_output_init(&ko);
  ko.density = density.data();
  ztree_status s2 = ztree_knn(ctx, &p, nullptr, &kp, &ko);
  std::printf("C++ consumer (ztree %s): status %d %d, %lld halo(s), largest %lld\n", ztree_version(), (int)s, (int)s2, (long long)fo.n_halos, fo.n_halos ? (long long)fo.halos[0].count : 0LL);
  bool ok = s == ZTREE_OK && s2 == ZTREE_OK && fo.n_halos == 1 && fo.halos[0].count >= 200 && density[0] > density[n - 1];
  ztree_destroy(ctx);
  return ok ? 0 : 1;
}
