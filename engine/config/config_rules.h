// config_rules.h — what the config's validation (config_rules.c) and its MoE and Megatron-FSDP
// rules (config_moe.c, config_fsdp.c) share: the violated rules collected into one message, and
// the rule macros. Not an interface beyond those files.
#ifndef TB_CONFIG_RULES_H
#define TB_CONFIG_RULES_H

#include <stddef.h>

#include "core/error.h"

struct tb_config;

// Appends one violated rule to the message.
typedef struct rules {
    tb_error *err;
    size_t used;
    int count;
} rules;

__attribute__((format(printf, 2, 3))) void violated(rules *r, const char *fmt, ...);

#define POSITIVE(r, c, field) \
    if ((c)->field < 1) violated(r, #field " (%d) must be at least 1", (c)->field)
#define DIVISIBLE(r, a, aname, b, bname)                                                    \
    if ((b) > 0 && (a) % (b) != 0)                                                          \
    violated(r, "%s (%d) must be divisible by %s (%d)", aname, (int)(a), bname, (int)(b))


// Mixture of experts (config_moe.c): Megatron-Core's rules, and what the engine cannot run yet.
void config_moe_rules(rules *r, const struct tb_config *c);
void config_moe_not_supported_yet(rules *r, const struct tb_config *c);
// Megatron-FSDP (config_fsdp.c): the same two.
void config_fsdp_rules(rules *r, const struct tb_config *c);
void config_fsdp_not_supported_yet(rules *r, const struct tb_config *c);

#endif
