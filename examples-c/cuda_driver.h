/* The few CUDA driver entry points a C program needs to put particles on a GPU, opened at
 * run time (no CUDA headers or libraries needed to build). Shared by the C examples and the
 * benchmark runner. */
#pragma once
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The few CUDA driver entry points used here (cuda.h is not needed to build). */
typedef int (*cu_init_t)(unsigned);
typedef int (*cu_device_get_t)(int *, int);
typedef int (*cu_ctx_retain_t)(void **, int);
typedef int (*cu_ctx_set_t)(void *);
typedef int (*cu_alloc_t)(uint64_t *, size_t);
typedef int (*cu_free_t)(uint64_t);
typedef int (*cu_htod_t)(uint64_t, const void *, size_t);
typedef int (*cu_dtoh_t)(void *, uint64_t, size_t);

static struct {
  cu_init_t init;
  cu_device_get_t device_get;
  cu_ctx_retain_t retain;
  cu_ctx_set_t set_current;
  cu_alloc_t alloc;
  cu_free_t free;
  cu_htod_t htod;
  cu_dtoh_t dtoh;
} cu;

/* Opens the driver and makes device 0 current; 0 when there is no usable GPU. */
static int load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) return 0;
  cu.init = (cu_init_t)dlsym(lib, "cuInit");
  cu.device_get = (cu_device_get_t)dlsym(lib, "cuDeviceGet");
  cu.retain = (cu_ctx_retain_t)dlsym(lib, "cuDevicePrimaryCtxRetain");
  cu.set_current = (cu_ctx_set_t)dlsym(lib, "cuCtxSetCurrent");
  cu.alloc = (cu_alloc_t)dlsym(lib, "cuMemAlloc_v2");
  cu.free = (cu_free_t)dlsym(lib, "cuMemFree_v2");
  cu.htod = (cu_htod_t)dlsym(lib, "cuMemcpyHtoD_v2");
  cu.dtoh = (cu_dtoh_t)dlsym(lib, "cuMemcpyDtoH_v2");
  int dev;
  void *ctx;
  return cu.init && cu.alloc && cu.init(0) == 0 && cu.device_get(&dev, 0) == 0 && cu.retain(&ctx, dev) == 0 && cu.set_current(ctx) == 0;
}

static uint64_t to_device(const void *host, size_t bytes) {
  uint64_t d = 0;
  if (cu.alloc(&d, bytes) != 0 || cu.htod(d, host, bytes) != 0) {
    fprintf(stderr, "device allocation or copy failed\n");
    exit(1);
  }
  return d;
}
