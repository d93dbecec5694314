// The CPU one thread wake-up costs on this machine (docs/benchmarks/all-in-cost-and-compaction.md,
// "The floor at 75 requests a second: wake-ups and the disk"). Not part of weft; a measurement kept so it can be rerun:
//   gcc -O2 -pthread -o /tmp/wake_cost scripts/experiments/wake_cost.c
//   /tmp/wake_cost ROUNDS GAP_US
// Two threads hand a turn back and forth with futexes, as weft's threads hand a request
// along: A sleeps GAP_US (0: not at all), wakes B and waits; B wakes A back and waits. Each
// round is two wake-ups and two sleeps. Prints each thread's CPU per round (its own clock, so
// the sleeps cost nothing) and the process's.
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int turn_a, turn_b;
static int rounds, gap_us;
static double b_cpu_us;

static void wait_change(atomic_int *f, int seen) {
    while (atomic_load(f) == seen) syscall(SYS_futex, f, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}
static void bump_and_wake(atomic_int *f) {
    atomic_fetch_add(f, 1);
    syscall(SYS_futex, f, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
static double thread_cpu_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static void *b_main(void *arg) {
    (void)arg;
    double start = thread_cpu_us();
    for (int i = 0; i < rounds; i++) {
        int seen = atomic_load(&turn_b);
        bump_and_wake(&turn_a);
        wait_change(&turn_b, seen);
    }
    b_cpu_us = thread_cpu_us() - start;
    return NULL;
}
int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s ROUNDS GAP_US\n", argv[0]);
        return 2;
    }
    rounds = atoi(argv[1]);
    gap_us = atoi(argv[2]);
    double start = thread_cpu_us();
    int seen = atomic_load(&turn_a);
    pthread_t b;
    pthread_create(&b, NULL, b_main, NULL);
    for (int i = 0; i < rounds; i++) {
        wait_change(&turn_a, seen);
        seen = atomic_load(&turn_a);
        if (gap_us) usleep(gap_us);
        bump_and_wake(&turn_b);
    }
    pthread_join(b, NULL);
    double a_cpu_us = thread_cpu_us() - start;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double proc_us = ru.ru_utime.tv_sec * 1e6 + ru.ru_utime.tv_usec + ru.ru_stime.tv_sec * 1e6 + ru.ru_stime.tv_usec;
    printf("gap %d us: A %.1f us a round, B %.1f us a round, process %.1f us a round\n", gap_us, a_cpu_us / rounds,
           b_cpu_us / rounds, proc_us / rounds);
    return 0;
}
