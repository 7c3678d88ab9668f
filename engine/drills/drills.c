#include "drills/drills.h"

#include <string.h>
#include <unistd.h>

#include "config/drill_flags.h"

// The site of each --debug-inject-fault choice (enum tb_debug_fault, config.h).
static int site_of(int fault, tb_fault_site *site) {
    switch (fault) {
    case TB_FAULT_ROW_PARALLEL_BIAS: *site = TB_SITE_ROW_PARALLEL_BIAS; return 1;
    case TB_FAULT_VOCAB_CE_SUM: *site = TB_SITE_VOCAB_CE_EXP_SUM; return 1;
    case TB_FAULT_SKIP_SP_GRAD: *site = TB_SITE_SP_GRAD_REDUCE; return 1;
    default: return 0;
    }
}

// The fault drill's callback: the bug is in every call of its site.
static int always(const tb_fault_hooks *h, tb_fault_site site) {
    (void)h, (void)site;
    return 1;
}

const char *tb_fault_site_name(tb_fault_site site) {
    switch (site) {
    case TB_SITE_ROW_PARALLEL_BIAS: return "row_parallel_linear.bias";
    case TB_SITE_VOCAB_CE_EXP_SUM: return "vocab_parallel_cross_entropy.exp_sum";
    case TB_SITE_SP_GRAD_REDUCE: return "finalize_model_grads.sequence_parallel";
    default: return "unknown fault site";
    }
}

// "RANK:MS" of a slow-down flag into *rank and *ms; "" leaves rank -1.
static int rank_ms(const char *flag, const char *v, int *rank, int *ms, tb_error *err) {
    *rank = -1, *ms = 0;
    if (!v[0]) return 0;
    if (tb_drill_rank_ms(v, rank, ms) != 0 || *ms < 0) {
        *rank = -1;
        return tb_fail(err, "flag %s: '%s' is not RANK:MS", flag, v);
    }
    return 0;
}

int tb_drills_init(tb_drills *d, const tb_config *cfg, tb_error *err) {
    memset(d, 0, sizeof *d);
    d->stall_rank = d->slow_data_rank = d->slow_write_rank = -1;
    tb_fault_site site;
    if (site_of(cfg->debug_inject_fault, &site)) d->faults.at[site] = always;
    if (cfg->inject_stall[0] && tb_drill_rank_step(cfg->inject_stall, &d->stall_rank, &d->stall_step) != 0)
        return tb_fail(err, "flag --inject-stall: '%s' is not RANK:STEP", cfg->inject_stall);
    if (cfg->debug_slow_link[0] &&
        (tb_drill_group_ms(cfg->debug_slow_link, d->slow_link_group, sizeof d->slow_link_group, &d->slow_link_ms) !=
             0 ||
         d->slow_link_ms < 0)) {
        d->slow_link_group[0] = '\0';
        return tb_fail(err, "flag --debug-slow-link: '%s' is not GROUP:MS", cfg->debug_slow_link);
    }
    if (rank_ms("--debug-slow-data", cfg->debug_slow_data, &d->slow_data_rank, &d->slow_data_ms, err) != 0 ||
        rank_ms("--debug-slow-write", cfg->debug_slow_write, &d->slow_write_rank, &d->slow_write_ms, err) != 0)
        return -1;
    return 0;
}

const tb_fault_hooks *tb_drills_fault_hooks(const tb_drills *d) {
    if (!d) return NULL;
    for (int s = 0; s < TB_FAULT_SITES; s++)
        if (d->faults.at[s]) return &d->faults;
    return NULL;
}

int tb_drills_stalls(const tb_drills *d, int rank, int64_t step) {
    return d && d->stall_rank == rank && d->stall_step == step;
}

static int sleep_ms(int ms) {
    if (ms > 0) usleep((useconds_t)ms * 1000);
    return ms;
}

int tb_drills_slow_data(const tb_drills *d, int rank) {
    return d && d->slow_data_rank == rank ? sleep_ms(d->slow_data_ms) : 0;
}

int tb_drills_slow_write(const tb_drills *d, int rank) {
    return d && d->slow_write_rank == rank ? sleep_ms(d->slow_write_ms) : 0;
}

int tb_drills_slow_link(const tb_drills *d, const char *group) {
    return d && d->slow_link_group[0] && !strcmp(group, d->slow_link_group) ? sleep_ms(d->slow_link_ms) : 0;
}
