// flight_recorder.h — the last TB_FLIGHT_RECORDER_LEN communicator calls of one rank
// (PyTorch's NCCL flight recorder, in miniature): what the rank asked for, on which group,
// with which sequence number, and whether it came back. A hang report reads every rank's
// recorder; the mutex lets it read while the rank thread is still running.
#ifndef TB_COMM_FLIGHT_RECORDER_H
#define TB_COMM_FLIGHT_RECORDER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/group.h"

#define TB_FLIGHT_RECORDER_LEN 64

typedef struct tb_flight_entry {
    const char *group;     // group name (static)
    int group_id;
    int group_size;
    uint64_t seq;          // per-group sequence number (1-based)
    tb_comm_op op;
    size_t count;          // elements
    size_t bytes;
    int peer;              // send/recv peer or broadcast root (group index); -1 otherwise
    int64_t enter_ns;      // CLOCK_MONOTONIC
    int64_t exit_ns;       // 0 while the call is pending
    int64_t step;
    int microbatch;
} tb_flight_entry;

typedef struct tb_flight_recorder {
    pthread_mutex_t mu;
    tb_flight_entry ring[TB_FLIGHT_RECORDER_LEN];
    uint64_t total;        // entries ever recorded; the newest is ring[(total - 1) % LEN]
} tb_flight_recorder;

void tb_flight_recorder_init(tb_flight_recorder *fr);
void tb_flight_recorder_destroy(tb_flight_recorder *fr);
// Records a call's entry; returns its slot for tb_flight_recorder_exit.
uint64_t tb_flight_recorder_enter(tb_flight_recorder *fr, const tb_flight_entry *e);
void tb_flight_recorder_exit(tb_flight_recorder *fr, uint64_t slot, int64_t exit_ns);
// Copies up to max of the newest entries, oldest first; returns how many.
int tb_flight_recorder_tail(tb_flight_recorder *fr, tb_flight_entry *out, int max);

#endif
