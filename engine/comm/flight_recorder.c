#include "comm/flight_recorder.h"

#include <string.h>

void tb_flight_recorder_init(tb_flight_recorder *fr) {
    memset(fr, 0, sizeof *fr);
    pthread_mutex_init(&fr->mu, NULL);
}

void tb_flight_recorder_destroy(tb_flight_recorder *fr) { pthread_mutex_destroy(&fr->mu); }

uint64_t tb_flight_recorder_enter(tb_flight_recorder *fr, const tb_flight_entry *e) {
    pthread_mutex_lock(&fr->mu);
    uint64_t slot = fr->total++;
    fr->ring[slot % TB_FLIGHT_RECORDER_LEN] = *e;
    pthread_mutex_unlock(&fr->mu);
    return slot;
}

void tb_flight_recorder_exit(tb_flight_recorder *fr, uint64_t slot, int64_t exit_ns) {
    pthread_mutex_lock(&fr->mu);
    if (fr->total - slot <= TB_FLIGHT_RECORDER_LEN) fr->ring[slot % TB_FLIGHT_RECORDER_LEN].exit_ns = exit_ns;
    pthread_mutex_unlock(&fr->mu);
}

int tb_flight_recorder_tail(tb_flight_recorder *fr, tb_flight_entry *out, int max) {
    pthread_mutex_lock(&fr->mu);
    uint64_t n = fr->total < TB_FLIGHT_RECORDER_LEN ? fr->total : TB_FLIGHT_RECORDER_LEN;
    if ((uint64_t)max < n) n = (uint64_t)max;
    for (uint64_t i = 0; i < n; i++) out[i] = fr->ring[(fr->total - n + i) % TB_FLIGHT_RECORDER_LEN];
    pthread_mutex_unlock(&fr->mu);
    return (int)n;
}
