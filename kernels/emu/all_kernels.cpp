// The emulator's build of the kernels: one translation unit holding every kernels/*.cu
// (so their registrations are linked) and the entry point the Rust side calls.
#include "../keys.cu"
#include "../scan.cu"
#include "../sort.cu"
#include "../refine.cu"
#include "../tree.cu"
#include "../walk.cu"
#include "../knn.cu"
#include "../fof.cu"
#include "../radius.cu"
#include "../catalogue.cu"
#include "../dist.cu"
#include "../conformance.cu"

extern "C" int zt_emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, void** args) {
    return ::zt_emu::launch(name, dim3{gx, gy, gz}, dim3{bx, by, bz}, args);
}
