// local_backend.h — the communicator's default backend: ranks are threads of one process
// and a group is one shared object they meet in.
//
// Collectives publish each member's buffer, meet at a barrier, then every member computes
// its share of the result reading the others' buffers directly. Reductions add the members'
// contributions in group order (index 0 first), so a result is the same bits on every rank
// and every run, whatever the thread timing. Point-to-point sends are eager: the message
// is copied into the receiver's mailbox and send returns, so pairs of sends never
// deadlock. Every wait gives up after the world's collective timeout, and when the world
// is aborted (a rank failed: parallel_state_rank_fail), with an error saying so.
#ifndef TB_COMM_LOCAL_BACKEND_H
#define TB_COMM_LOCAL_BACKEND_H

#include "comm/group.h"

typedef struct tb_local_group tb_local_group;

tb_local_group *tb_local_group_create(int size);
void tb_local_group_destroy(tb_local_group *g);
// Wakes every member waiting on g, to look at the world's abort flag.
void tb_local_group_wake(tb_local_group *g);

extern const tb_comm_backend tb_local_backend;

#endif
