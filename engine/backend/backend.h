// backend.h — the kernel dispatch (docs/ARCHITECTURE.md, "CUDA backend"): one const table of
// the model's numeric entry points, chosen once per rank from --device. The model, the
// tensor-parallel layers, the optimizer and finalize_model_grads call tb_be()->..., never a
// backend directly.
//
// The kernels are backend/kernel_table.h's list, one line each: the fields below, both tables
// and the declarations of both backends' implementations are generated from it.
//   cpu   the entries ARE the cpu_* kernels of backend/cpu/ (kernels.h declares them from the
//         list): the CPU path computes the same bits as before the dispatch existed.
//   cuda  backend/cuda/cuda_backend.c: the cuda_* launchers of the .cu files and the
//         cuBLASLt GEMMs on the rank's device context (stream, cuBLASLt handle); every pointer
//         is device memory.
//
// The table in use is the calling thread's (tb_backend_bind): a rank is a thread, as its
// CUDA device is the thread's current device; an unbound thread (tests, tools) gets the CPU
// table. Shapes, arguments and gradient conventions are kernel_table.h's: parameter gradients
// accumulate, activation gradients are written.
//
// Memory: `host` says whether the backend's tensors are host memory. Host code reads or
// writes a tensor only through copy_to_host / copy_from_host (loss, gradient norm, weights'
// initialisation, reports); copy and zero work on tensors of the backend.
#ifndef TB_BACKEND_BACKEND_H
#define TB_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/kernel_table.h"

typedef struct tb_backend {
    const char *name;  // "cpu", "cuda"
    int host;          // 1: tensors are host memory

    // --- memory (bytes) ---
    void (*copy)(void *dst, const void *src, size_t bytes);  // tensor → tensor
    void (*zero)(void *dst, size_t bytes);
    void (*copy_to_host)(void *host_dst, const void *src, size_t bytes);    // waits for the copy
    void (*copy_from_host)(void *dst, const void *host_src, size_t bytes);  // host_src reusable on return
    void (*synchronize)(void);  // every kernel enqueued by this thread has finished
    // Device timing of a phase of the step (NULL on the CPU, whose phases the host clock
    // times): begin records an event on the thread's stream; end records another, waits for
    // it and returns the milliseconds between the two (CUDA events). One phase at a time.
    void (*phase_begin)(void);
    double (*phase_end_ms)(void);

    // --- the kernels: one field per line of backend/kernel_table.h, with their shapes ---
    TB_KERNEL_TABLE(TB_KERNEL_FIELD)

    // --- a rank's second thread, streams and events (NULL on the CPU, whose kernels have
    // finished when they return and run on any thread) ---
    // DistributedDataParallel's communication thread (distributed/distributed_data_parallel.h)
    // runs on the rank's device: it binds the rank thread's context (thread_context, taken on
    // the rank thread; bind_side_thread, on the other thread, makes the device current — NULL
    // unbinds; a side thread runs the elementwise kernels, no GEMM and no sum_squares), puts
    // its work on a communication group's stream (set_stream; NULL: back to the thread's own)
    // and orders the streams with events (PyTorch's Event.record / Event.wait): event_record
    // marks the work enqueued so far on the thread's current stream, event_wait makes the work
    // enqueued on it from now wait for the marked work. An event must have been recorded (in
    // host order) before a wait on it means anything. A failed call fails the thread as a
    // failed kernel does (the bound fail function).
    void *(*thread_context)(void);
    void (*bind_side_thread)(void *context, void (*fail)(void *arg, const char *msg), void *fail_arg);
    void (*set_stream)(void *stream);
    void *(*event_create)(void);
    void (*event_destroy)(void *event);  // any thread (a failed rank's teardown)
    void (*event_record)(void *event);
    void (*event_wait)(void *event);
} tb_backend;

// The CPU table (always there).
const tb_backend *tb_backend_cpu(void);

// The calling thread's table (the CPU's when none is bound); bind NULL to unbind.
const tb_backend *tb_be(void);
void tb_backend_bind(const tb_backend *be);

// Σ x[i] for i < n in double, in index order, read from a tensor of the thread's backend
// (the loss): the CPU reads the tensor itself, the others copy it to the host first.
double tb_be_sum_to_host(const float *x, size_t n);

#endif
