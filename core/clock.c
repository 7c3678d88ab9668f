#include "core/clock.h"

#include <stdio.h>
#include <time.h>

void tb_iso_now(char *buf, size_t len) {
    time_t t = time(NULL);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
}

double tb_wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double tb_thread_run_delay_s(void) {
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (!f) return -1;
    unsigned long long on_cpu_ns, run_delay_ns;
    int n = fscanf(f, "%llu %llu", &on_cpu_ns, &run_delay_ns);
    fclose(f);
    return n == 2 ? (double)run_delay_ns / 1e9 : -1;
}
