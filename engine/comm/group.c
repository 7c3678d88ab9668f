#include "comm/group.h"

static const char *const op_names[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                                       "broadcast",  "send",           "recv",       "barrier"};

const char *tb_comm_op_name(tb_comm_op op) { return (unsigned)op < sizeof op_names / sizeof *op_names ? op_names[op] : "?"; }
