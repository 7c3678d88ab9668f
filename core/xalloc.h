// xalloc.h — the one policy for host memory that is not a tensor.
//
// Tensors and every buffer the memory accounting must see go through the tagged allocator
// (runtime/memory.h). Everything else the engine, experiments/ and trace/ allocate on the host
// — arrays of structs, strings, hash tables, JSON text — goes through this family. A
// failed allocation is not something a caller can act on: it reports what was being
// allocated, where (file:line) and how many bytes, then ends the process with status
// TB_EXIT_OUT_OF_MEMORY. Every file the project writes is written whole (temp + rename,
// core/fileio.h), so nothing is left half-written. No call returns NULL; a size that
// overflows (count × size) is reported the same way.
//
//   tb_model *m = tb_xcalloc(n, sizeof *m, "model chunks");
//   buf = tb_xrealloc(buf, cap * sizeof *buf, "call sites");
#ifndef TB_CORE_XALLOC_H
#define TB_CORE_XALLOC_H

#include <stddef.h>

#define tb_xmalloc(bytes, what) tb_xmalloc_at((bytes), (what), __FILE__, __LINE__)
#define tb_xcalloc(count, size, what) tb_xcalloc_at((count), (size), (what), __FILE__, __LINE__)
#define tb_xrealloc(ptr, bytes, what) tb_xrealloc_at((ptr), (bytes), (what), __FILE__, __LINE__)
// realloc to count × size, the product checked for overflow
#define tb_xreallocarray(ptr, count, size, what) \
    tb_xreallocarray_at((ptr), (count), (size), (what), __FILE__, __LINE__)
#define tb_xstrdup(s, what) tb_xstrdup_at((s), (what), __FILE__, __LINE__)
#define tb_xstrndup(s, n, what) tb_xstrndup_at((s), (n), (what), __FILE__, __LINE__)

void *tb_xmalloc_at(size_t bytes, const char *what, const char *file, int line);
void *tb_xcalloc_at(size_t count, size_t size, const char *what, const char *file, int line);
void *tb_xrealloc_at(void *ptr, size_t bytes, const char *what, const char *file, int line);
void *tb_xreallocarray_at(void *ptr, size_t count, size_t size, const char *what, const char *file, int line);
char *tb_xstrdup_at(const char *s, const char *what, const char *file, int line);
char *tb_xstrndup_at(const char *s, size_t n, const char *what, const char *file, int line);

// The report and the end of the process (exposed for the tagged allocator's own host
// allocations, which fail the same way).
void tb_host_oom(size_t bytes, const char *what, const char *file, int line) __attribute__((noreturn));

#endif
