// schedules.h — the order in which a pipeline rank runs the forward and backward passes of
// its microbatches (Megatron-Core pipeline_parallel/schedules.py), as a list of ops the
// executor (training.c) walks. p = pipeline size, r = this rank's stage, m = microbatches,
// v = model chunks per rank (virtual pipeline; 1 = not interleaved).
//
//   no pipelining (p = 1)   F0 B0 F1 B1 ...: gradient accumulation
//   1F1B                    warm-up min(p − r − 1, m) forwards, then one forward + one
//                           backward in the steady state, then the cool-down backwards
//   interleaved 1F1B        over m·v virtual microbatches: warm-up (p − r − 1)·2 + (v − 1)·p
//                           (at most m·v); virtual microbatch k runs chunk (k mod p·v) / p of
//                           microbatch (k / p·v)·p + k mod p — microbatch groups of size p,
//                           chunk-major inside a group; backward chunks count down
//
// Bubble fraction of an ideal pipeline: (p − 1)/(m + p − 1), interleaved (p − 1)/(v·m + p − 1).
#ifndef TB_PIPELINE_PARALLEL_SCHEDULES_H
#define TB_PIPELINE_PARALLEL_SCHEDULES_H

typedef struct pp_op {
    char kind;       // 'F' forward, 'B' backward
    int microbatch;
    int chunk;       // model chunk of this rank (0 .. v-1)
} pp_op;

// Writes the 2·m·v ops of rank r into ops; returns their count.
int pipeline_schedule(int p, int r, int m, int v, pp_op *ops);
// Warm-up forwards of rank r.
int pipeline_warmup(int p, int r, int m, int v);
double pipeline_theoretical_bubble(int p, int m, int v);

#endif
