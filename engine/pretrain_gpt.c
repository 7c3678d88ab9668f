// pretrain_gpt.c — the entry point (Megatron-LM's pretrain_gpt.py):
// arguments → config → validation → world → model → train.
//
// Under mpirun every process runs this with the same command line (engine/initialize.h):
// each reaches the same verdict on it, and the lowest process that refuses it says why, once.
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_device.h"
#include "build_info.h"
#include "config/config.h"
#include "core/version.h"
#include "initialize.h"
#include "comm/parallel_state.h"
#include "training.h"

// Every process's status agreed; the first failing process prints its message.
static int agree(const tb_launch *l, int status, const char *what, const char *msg) {
    int first = -1;
    int all = tb_launch_agree(l, status, &first);
    if (status != 0 && first == l->process) fprintf(stderr, "pretrain_gpt: %s%s\n", what, msg);
    return all;
}

// *failed_in_run: the ranks ran and the run failed (tb_finalize).
static int run(const tb_launch *l, int argc, char **argv, int *failed_in_run) {
    tb_config cfg;
    tb_error err;
    int help = 0;
    config_defaults(&cfg);
    int status = config_parse_args(&cfg, argc, argv, &help, &err) != 0 ? TB_EXIT_USAGE : 0;
    if ((status = agree(l, status, "", err.msg)) != 0) return status;
    if (help) {
        if (tb_launch_is_lead(l)) config_print_help(stdout, "pretrain_gpt");
        return 0;
    }
    tb_launch_apply(l, &cfg);
    config_resolve(&cfg);
    const char *what = "invalid configuration:\n";
    if (config_validate(&cfg, &err) != 0) status = TB_EXIT_USAGE;
    else if (tb_launch_validate(l, &cfg, &err) != 0) status = TB_EXIT_USAGE, what = "invalid launch: ";
    else if (cfg.num_threads > cpu_max_num_threads())  // refused, not clamped and said only in the banner
        status = TB_EXIT_USAGE, what = "",
        tb_fail(&err, "flag --num-threads: %d exceeds %d, the most threads this build's OpenBLAS runs per rank",
                cfg.num_threads, cpu_max_num_threads());
    if ((status = agree(l, status, what, err.msg)) != 0) return status;
    // --device cuda without the backend or without enough GPUs: refused, naming why, before any
    // rank starts (never run on the CPU instead)
    if (cfg.device == TB_DEVICE_CUDA &&
        tb_cuda_check_device_flag(&cfg, tb_launch_processes_on_host(l->processes) * (cfg.world_size / l->processes),
                                  &err) != 0)
        status = TB_EXIT_USAGE;
    if ((status = agree(l, status, "", err.msg)) != 0) return status;
    if (cfg.print_rank_layout) {
        if (tb_launch_is_lead(l)) parallel_state_print_layout(stdout, &cfg);
        return 0;
    }
    status = pretrain(&cfg, l, &err);
    *failed_in_run = status != 0;
    if (status != 0) {
        if (l->mpi) fprintf(stderr, "pretrain_gpt: process %d of %d: %s\n", l->process, l->processes, err.msg);
        else fprintf(stderr, "pretrain_gpt: %s\n", err.msg);
    }
    return status;
}

int main(int argc, char **argv) {
    cpu_runtime_select(argv);
    // before the config: what this binary is, for the record (build_info.h)
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        char line[256];
        tb_version_line(line, sizeof line, "pretrain_gpt");
        return printf("%s\n", line) > 0 ? 0 : TB_EXIT_FAILURE;
    }
    if (argc == 2 && !strcmp(argv[1], "--build-info")) {
        json_t *info = build_info_json();
        int ok = json_dumpf(info, stdout, JSON_INDENT(1)) == 0 && printf("\n") > 0;
        json_decref(info);
        return ok ? 0 : TB_EXIT_FAILURE;
    }
    tb_launch launch;
    tb_error err;
    if (tb_initialize(&launch, argc, argv, &err) != 0) {
        if (tb_launch_is_lead(&launch)) fprintf(stderr, "pretrain_gpt: %s\n", err.msg);
        return TB_EXIT_FAILURE;
    }
    int failed_in_run = 0;
    int status = run(&launch, argc, argv, &failed_in_run);
    tb_finalize(&launch, failed_in_run);
    return status;
}
