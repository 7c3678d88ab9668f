// sched_getaffinity and CPU_COUNT are GNU extensions
#define _GNU_SOURCE
#include "reports/conditions.h"

#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/fileio.h"
#include "core/json_number.h"
#include "core/run_dir.h"

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

// The first line of /proc/stat: cpu user nice system idle iowait irq softirq steal ...
static void read_proc_stat(double *busy_s, double *steal_s) {
    *busy_s = *steal_s = -1;
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    unsigned long long user, nice, system, idle, iowait, irq, softirq, steal = 0;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle, &iowait, &irq,
                   &softirq, &steal);
    fclose(f);
    if (n < 7) return;
    const double hz = (double)sysconf(_SC_CLK_TCK);
    *busy_s = (double)(user + nice + system + irq + softirq) / hz;
    *steal_s = n >= 8 ? (double)steal / hz : 0;
}

static double read_loadavg(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    double v = -1;
    if (f) {
        if (fscanf(f, "%lf", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

void conditions_sample_now(conditions_sample *s) {
    s->run_delay_s = tb_thread_run_delay_s();
    s->wall_s = clock_s(CLOCK_MONOTONIC);
    s->run_delay_after_s = tb_thread_run_delay_s();
    s->process_cpu_s = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    read_proc_stat(&s->host_busy_s, &s->host_steal_s);
    s->loadavg1 = read_loadavg();
}

double conditions_run_delay_between_s(const conditions_sample *a, const conditions_sample *b) {
    if (a->run_delay_after_s < 0 || b->run_delay_s < 0) return -1;
    const double d = b->run_delay_s - a->run_delay_after_s;
    return d > 0 ? d : 0;
}

// What the host's other processes took between two samples: host busy time less ours.
static double others_s(const conditions_sample *a, const conditions_sample *b) {
    if (a->host_busy_s < 0 || b->host_busy_s < 0) return -1;
    double v = (b->host_busy_s - a->host_busy_s) - (b->process_cpu_s - a->process_cpu_s);
    return v > 0 ? v : 0;
}

static json_t *seconds_or_null(double v, double scale) { return v < 0 ? json_null() : tb_json_number(v * scale); }

json_t *conditions_step_json(const conditions_sample *a, const conditions_sample *b) {
    int host = a->host_busy_s >= 0 && b->host_busy_s >= 0;
    return json_pack("{s:o, s:o, s:o, s:o, s:o}", "process_cpu_ms", tb_json_number((b->process_cpu_s - a->process_cpu_s) * 1e3),
                     "host_busy_ms", seconds_or_null(host ? b->host_busy_s - a->host_busy_s : -1, 1e3),
                     "other_processes_ms", seconds_or_null(others_s(a, b), 1e3), "steal_ms",
                     seconds_or_null(host ? b->host_steal_s - a->host_steal_s : -1, 1e3), "run_queue_wait_ms",
                     seconds_or_null(conditions_run_delay_between_s(a, b), 1e3));
}

// The CPUs this process may run on (its affinity mask), else the online ones.
static int usable_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int conditions_write(const char *run_dir, const conditions_threads *t, const conditions_sample *a,
                     const conditions_sample *b, tb_error *err) {
    const int total = t->ranks * ((t->openmp_per_rank > t->blas_per_rank ? t->openmp_per_rank : t->blas_per_rank) +
                                  t->background_per_rank);
    const int usable = usable_cores();
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const double wall = b->wall_s - a->wall_s, cpu = b->process_cpu_s - a->process_cpu_s + t->run_others_cpu_s;
    double others = others_s(a, b);
    if (others > 0) others = others > t->run_others_cpu_s ? others - t->run_others_cpu_s : 0;
    const int occupied = total < usable ? total : usable;
    json_t *c = json_pack(
        "{s:{s:i, s:i, s:i, s:i, s:s, s:i, s:s, s:s, s:s, s:s}, s:{s:I, s:i, s:i}, s:b, s:o, s:o, s:o, s:{s:o, s:o, s:o, s:o, s:o, "
        "s:o, s:o}}",
        "threads", "ranks", t->ranks, "openmp_per_rank", t->openmp_per_rank, "blas_per_rank", t->blas_per_rank,
        "background_per_rank", t->background_per_rank, "background", t->background ? t->background : "", "total", total, "chosen_by", t->chosen_by, "openmp_wait_policy", t->wait_policy, "openmp_wait_policy_source",
        t->wait_source, "openmp_wait_policy_reason", t->wait_reason ? t->wait_reason : "", "cores", "online", (json_int_t)online, "usable", usable, "occupied", occupied,
        "oversubscribed", total > usable, "wall_s", tb_json_number(wall), "process_cpu_s", tb_json_number(cpu),
        "cpu_share", tb_json_number(wall > 0 ? cpu / (wall * occupied) : 0), "host", "busy_s",
        seconds_or_null(a->host_busy_s >= 0 && b->host_busy_s >= 0 ? b->host_busy_s - a->host_busy_s : -1, 1),
        "other_processes_s", seconds_or_null(others, 1), "other_processes_share",
        seconds_or_null(others >= 0 && wall > 0 ? others / (wall * usable) : -1, 1), "steal_s",
        seconds_or_null(a->host_steal_s >= 0 && b->host_steal_s >= 0 ? b->host_steal_s - a->host_steal_s : -1, 1),
        "loadavg_start", seconds_or_null(a->loadavg1, 1), "loadavg_end", seconds_or_null(b->loadavg1, 1),
        // /proc/stat's unit: busy_s and steal_s are whole ticks per CPU (the gate's resolution)
        "stat_tick_s", tb_json_number(1.0 / (double)sysconf(_SC_CLK_TCK)));
    json_object_set_new(c, "mpi_collectives", t->mpi_collectives ? json_string(t->mpi_collectives) : json_null());
    const int measured = t->run_queue_wait_s >= 0 && wall > 0;
    json_object_set_new(
        c, "scheduler",
        json_pack("{s:o, s:o, s:s, s:s}", "run_queue_wait_s", seconds_or_null(measured ? t->run_queue_wait_s : -1, 1),
                  "run_queue_share", seconds_or_null(measured ? t->run_queue_wait_s / wall : -1, 1), "measured",
                  "the rank waiting most: its rank thread's and background threads' run_delay "
                  "(/proc/thread-self/schedstat)",
                  "unmeasured", t->run_queue_unmeasured ? t->run_queue_unmeasured : ""));
    char path[4096];
    if (tb_run_path(path, sizeof path, run_dir, TB_RUN_CONDITIONS, err) != 0) {
        json_decref(c);
        return -1;
    }
    int rc = tb_write_json_atomic(path, c, err);
    json_decref(c);
    return rc;
}
