// The CPU of one WAL group commit, by the way the log file is written (docs/benchmarks/wal.md,
// "The WAL's write, measured by itself"). Not part of weft; a measurement kept so it can be rerun:
//   gcc -O2 -o /tmp/wal_write_modes scripts/experiments/wal_write_modes.c
//   /tmp/wal_write_modes MODE WRITES BYTES PATH SLEEP_US [DISK]
// MODE 0: append + fdatasync (weft today); 1: overwrite a pre-zeroed file + fdatasync;
// 2: pre-zeroed file, O_DIRECT|O_DSYNC aligned writes (the tail block rewritten);
// 3: fallocate + append-in-place + fdatasync; 4: fallocate + O_DIRECT|O_DSYNC;
// 5: O_DIRECT|O_DSYNC appending to a file that grows with each write (no preallocation).
// PATH must be on the disk under test (not tmpfs, which would measure memory copies).
// With DISK (a block device's name, e.g. vda), also the device's write and flush requests per
// commit, from /sys/block/DISK/stat (other writers to that disk during the run count too).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
// Completed write and flush requests of a block device so far (fields 5 and 16 of its stat).
static void disk_requests(const char *disk, long *writes, long *flushes) {
    char path[256]; long v[17] = {0};
    *writes = *flushes = -1;
    snprintf(path, sizeof path, "/sys/block/%s/stat", disk);
    FILE *fp = fopen(path, "r");
    if (!fp) return;
    int got = 0;
    while (got < 17 && fscanf(fp, "%ld", &v[got]) == 1) got++;
    fclose(fp);
    if (got >= 5) *writes = v[4];
    if (got >= 17) *flushes = v[15];
}

int main(int argc, char **argv) {
    int mode = atoi(argv[1]); int n = atoi(argv[2]); size_t sz = atoi(argv[3]);
    const char *path = argv[4];
    size_t total = (size_t)n * sz + (1<<20);
    unlink(path);
    struct rusage z0, z1; getrusage(RUSAGE_SELF, &z0);
    if (mode == 3 || mode == 4) {
        int f = open(path, O_CREAT|O_WRONLY, 0644);
        if (fallocate(f, 0, 0, total) < 0) perror("fallocate");
        fsync(f); close(f);
    } else if (mode == 1 || mode == 2) {
        int f = open(path, O_CREAT|O_WRONLY, 0644);
        char *z = calloc(1, 1<<20);
        for (size_t o = 0; o < total; o += 1<<20) if (write(f, z, 1<<20) < 0) { perror("write"); return 1; }
        fsync(f); close(f);
    }
    getrusage(RUSAGE_SELF, &z1);
    printf("prep cpu %.3f s for %zu MB\n", (z1.ru_stime.tv_sec-z0.ru_stime.tv_sec)+(z1.ru_stime.tv_usec-z0.ru_stime.tv_usec)/1e6 + (z1.ru_utime.tv_sec-z0.ru_utime.tv_sec)+(z1.ru_utime.tv_usec-z0.ru_utime.tv_usec)/1e6, total>>20);
    int flags = O_CREAT|O_WRONLY;
    if (mode == 2 || mode == 4 || mode == 5) flags |= O_DIRECT|O_DSYNC;
    int f = open(path, flags, 0644);
    if (f < 0) { perror("open"); return 1; }
    char *buf = NULL;
    if (posix_memalign((void**)&buf, 4096, sz + 8192) != 0) { perror("posix_memalign"); return 1; }
    memset(buf, 'x', sz + 8192);
    const char *disk = argc > 6 ? argv[6] : NULL;
    long w0 = 0, fl0 = 0, w1 = 0, fl1 = 0;
    if (disk) disk_requests(disk, &w0, &fl0);
    struct rusage r0, r1; getrusage(RUSAGE_SELF, &r0);
    struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (mode == 2 || mode == 4 || mode == 5) {
            size_t start = off & ~4095UL; size_t end = (off + sz + 4095) & ~4095UL;
            if (pwrite(f, buf, end - start, start) < 0) { perror("pwrite"); return 1; }
        } else {
            if (pwrite(f, buf, sz, off) < 0) { perror("w"); return 1; }
            fdatasync(f);
        }
        off += sz;
        usleep(atoi(argv[5]));
    }
    getrusage(RUSAGE_SELF, &r1); clock_gettime(CLOCK_MONOTONIC, &t1);
    double u = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) + (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec)/1e6;
    double s = (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) + (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec)/1e6;
    printf("mode %d: user %.3f sys %.3f per write %.1f us cpu, wall %.2f s, nvcsw %ld\n", mode, u, s, (u+s)/n*1e6,
        (t1.tv_sec-t0.tv_sec)+(t1.tv_nsec-t0.tv_nsec)/1e9, r1.ru_nvcsw - r0.ru_nvcsw);
    if (disk) {
        disk_requests(disk, &w1, &fl1);
        if (w0 >= 0 && w1 >= 0)
            printf("  %s: %.2f write requests and %.2f flushes per commit\n", disk, (double)(w1 - w0) / n,
                fl0 >= 0 && fl1 >= 0 ? (double)(fl1 - fl0) / n : -1.0);
    }
    unlink(path);
    return 0;
}
