// index_unsaved.h — the files a unit is parsed with that are not on disk as it reads them
// (libclang's unsaved files): stand-in headers under IX_STUB_DIR for what a toolkit removed
// or a compiler keeps to itself (CUDA 13's texture_fetch_functions.h, the OpenMP runtime API,
// nvcc's min/max overloads), and the toolkit headers clang rejects where nvcc accepts them,
// patched in memory (CUDA 13.0's nccl_device/utility.h). index_visit.c parses
// with them.
#ifndef TB_TRACE_INDEX_UNSAVED_H
#define TB_TRACE_INDEX_UNSAVED_H

#include <clang-c/Index.h>

#include "index_compdb.h"
#include "pool.h"

#define IX_UNSAVED_MAX 8  // in-memory files of one unit at most

// The unit's in-memory files into out (room for IX_UNSAVED_MAX): the stand-ins, and for a
// CUDA unit the patched toolkit headers found first on its -I, -isystem and --cuda-path
// include directories (each read once per process, any thread). Returns their count.
unsigned ix_unit_unsaved(const ix_tu *tu, struct CXUnsavedFile *out, tb_pool *p);

#endif
