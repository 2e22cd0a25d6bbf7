/* Cores probe for the thread-scaling rows of benches/peers/run.py: does the machine give
 * two threads two cores' worth of work right now?
 *
 * A fixed integer loop (eight independent add chains: it saturates a core's ALUs, so two
 * hardware threads sharing one core each get about half) runs on one thread, then on N
 * threads at once, then on one thread again. Prints `PROBE {"threads": N, "one": s, "many": s, "ratio": r}` with
 * ratio = N * one / many: about N when the threads ran on N cores, about 1.0 for two
 * threads that shared one (on a VM, two vCPUs the host placed on the two hyperthreads of
 * one physical core; on the development VM this comes and goes over seconds).
 *
 *     cores_probe [threads]      (default 2)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ITERS 60000000L
#define MAX_THREADS 64

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The empty asm makes each chain opaque to the compiler (no folding, no vectorising) on
 * any architecture gcc and clang target. */
static void *spin(void *out) {
    unsigned long a0 = 1, a1 = 2, a2 = 3, a3 = 4, a4 = 5, a5 = 6, a6 = 7, a7 = 8;
    for (long i = 0; i < ITERS; i++) {
        a0 += 1; a1 += 1; a2 += 1; a3 += 1; a4 += 1; a5 += 1; a6 += 1; a7 += 1;
        __asm__ volatile("" : "+r"(a0), "+r"(a1), "+r"(a2), "+r"(a3), "+r"(a4), "+r"(a5), "+r"(a6), "+r"(a7));
    }
    *(unsigned long *)out = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2;
    if (n < 1 || n > MAX_THREADS) {
        fprintf(stderr, "cores_probe: threads must be 1..%d\n", MAX_THREADS);
        return 2;
    }
    unsigned long sink[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    /* One thread before and after the N (the faster of the two: a core coming out of idle
     * may start slow). */
    double t0 = now();
    spin(&sink[0]);
    double one = now() - t0;
    t0 = now();
    for (int i = 0; i < n; i++) {
        if (pthread_create(&th[i], NULL, spin, &sink[i]) != 0) {
            fprintf(stderr, "cores_probe: pthread_create failed\n");
            return 1;
        }
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    double many = now() - t0;
    t0 = now();
    spin(&sink[0]);
    double again = now() - t0;
    if (again < one) one = again;
    printf("PROBE {\"threads\": %d, \"one\": %.4f, \"many\": %.4f, \"ratio\": %.3f}\n", n, one, many, n * one / many);
    return 0;
}
