// pretrain_gpt.c — the entry point (Megatron-LM's pretrain_gpt.py):
// arguments → config → validation → world → model → train.
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "build_info.h"
#include "config.h"
#include "parallel_state.h"
#include "training.h"

int main(int argc, char **argv) {
    cpu_runtime_select(argv);
    // before the config: what this binary is, for the record (build_info.h)
    if (argc == 2 && !strcmp(argv[1], "--build-info")) {
        json_t *info = build_info_json();
        int ok = json_dumpf(info, stdout, JSON_INDENT(1)) == 0 && printf("\n") > 0;
        json_decref(info);
        return ok ? 0 : TB_EXIT_FAILURE;
    }
    tb_config cfg;
    tb_error err;
    int help = 0;
    config_defaults(&cfg);
    if (config_parse_args(&cfg, argc, argv, &help, &err) != 0) {
        fprintf(stderr, "pretrain_gpt: %s\n", err.msg);
        return TB_EXIT_USAGE;
    }
    if (help) {
        config_print_help(stdout, "pretrain_gpt");
        return 0;
    }
    config_resolve(&cfg);
    if (config_validate(&cfg, &err) != 0) {
        fprintf(stderr, "pretrain_gpt: invalid configuration:\n%s\n", err.msg);
        return TB_EXIT_USAGE;
    }
    if (cfg.print_rank_layout) {
        parallel_state_print_layout(stdout, &cfg);
        return 0;
    }
    int status = pretrain(&cfg, &err);
    if (status != 0) fprintf(stderr, "pretrain_gpt: %s\n", err.msg);
    return status;
}
