// fault_sites.h — the named points where a fault drill changes what the model computes
// (docs/ARCHITECTURE.md, "Drills"). A site is a name and, in a drill's run, a callback the
// drill installed; in a normal run the model holds no hooks (NULL) and a site costs one test
// of that pointer. The model's files include this header only: which site fires, and when,
// is the drills' (drills.h), as Megatron keeps fault injection out of its layers.
#ifndef TB_DRILLS_FAULT_SITES_H
#define TB_DRILLS_FAULT_SITES_H

typedef enum tb_fault_site {
    // row_parallel_linear_forward (tensor_parallel/layers.c), tp > 1 without sequence
    // parallelism: the bias added to every rank's partial sum, so tp times after the reduce
    TB_SITE_ROW_PARALLEL_BIAS,
    // vocab_parallel_cross_entropy_forward (tensor_parallel/cross_entropy.c): the softmax
    // denominators' all-reduce over tp skipped, each rank normalising by its own vocab shard
    TB_SITE_VOCAB_CE_EXP_SUM,
    // finalize_model_grads and the DDP buckets (distributed/): the all-reduce over tp of the
    // gradients that sequence parallelism leaves partial (the norms') skipped
    TB_SITE_SP_GRAD_REDUCE,
    TB_FAULT_SITES
} tb_fault_site;

typedef struct tb_fault_hooks tb_fault_hooks;
struct tb_fault_hooks {
    // per site: NULL, or the drill's callback, asked each time the site runs: 1 takes the
    // faulty path
    int (*at[TB_FAULT_SITES])(const tb_fault_hooks *h, tb_fault_site site);
};

// Whether a drill takes the faulty path at `site` (h NULL: a normal run, never).
static inline int tb_fault_fires(const tb_fault_hooks *h, tb_fault_site site) {
    return __builtin_expect(h != 0, 0) && h->at[site] && h->at[site](h, site);
}

#endif
