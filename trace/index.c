// index.c — `tracebook index`: the libclang source indexer.
//
//   tracebook index [--compdb build/compile_commands.json] [--output build/tracebook-index.sqlite]
//                   [--build-dir DIR] [--targets FILE] [--collective NAME_OR_GLOB]... [--no-default-collectives]
//                   [--range-push NAME]... [--range-pop NAME]... [-j N] [--full] [--quiet] [--verbose]
//
// Reads the compilation database, parses every translation unit with libclang using its own
// flags, and writes the source index (trace/index_db.h) that the queries read. The pieces:
// index_args.c (the command line), index_compdb.c (the database and flag translation),
// index_visit.c (one unit's parse; its AST walked in index_visit_walk.c and
// index_visit_dependent.c, its in-memory headers index_unsaved.c), index_targets.c (CMake's
// file API), index_workers.c (the parse workers, and --parse-only's run; index_meanwhile.c
// what this thread does while they parse), index_write.c (SQLite; index_write_units.c the
// per-unit tables, index_derived.c collective sites and libraries), index_reuse.c
// (incremental re-indexing; index_reuse_facts.c the reused units' facts read back),
// index_update.c (the update in place; index_update_units.c a parsed unit's own rows); each
// with its own header.
// Containers: pool.h, vec.h, strmap.h.
//
// The compilation database
//   --compdb is the compile_commands.json file or a directory holding one (default build/).
//   Each entry gives "arguments" or a shell-quoted "command" (split as a POSIX shell would);
//   response files (@file, and nvcc's --options-file / -optf) are expanded. A missing file,
//   malformed JSON (reported as path:line:column), an entry without "directory", "file" or
//   a command, or an empty array: an error naming the path, exit status 1, no index written.
//   A file listed twice (one source in two targets) is parsed once, with its first entry.
//   Each unit is parsed with the entry's arguments minus the compiler, -c, -o X, the source
//   file, dependency-file flags (-M, -MM, -MD, -MMD, -MP, -MG, -MF X, -MT X, -MQ X, -MJ X),
//   -Werror*, -Wfatal-errors, -pedantic-errors, -save-temps, -pipe, plus -resource-dir
//   TB_CLANG_RESOURCE_DIR, -ferror-limit=0, -w (warnings are not recorded: only errors
//   decide the status) and -working-directory=<the entry's directory>.
//   -fopenmp units get a stand-in omp.h when clang's resource directory has none (LLVM's
//   libomp headers not installed; GCC's omp.h uses GCC-only attributes and its include
//   directory would bring GCC's stdatomic.h): see index_unsaved.c.
//   OpenMP: libclang's visitor does not enter the statement a directive applies to (its
//   CapturedStmt yields only the captured variables), so what is inside comes from a parse
//   without -fopenmp* and with _OPENMP defined as clang defines it (202011 for its default
//   5.1; -fopenmp-version=N is followed): the pragmas are ignored there, the preprocessed
//   code is the same. A C unit compiled with -fopenmp is parsed that way only, once, when no
//   directive in its input files may hold a call the parse with -fopenmp alone shows (a call
//   in a clause, a macro, ...: index_openmp.h). Any other unit with directives is parsed
//   with -fopenmp kept (_OPENMP code and the directives as the compiler sees them) and again
//   without: the first parse records everything outside the directives' statements (their
//   clauses too: num_threads(f()) calls f), the second only what is inside them. Either way
//   every call inside parallel, for, simd, task, sections, target ... is indexed once, its
//   caller the function it is written in. Not followed in the two parses: calls in the
//   clauses of a directive nested inside another one's statement.
//   When libclang rejects the command line itself (a flag only GCC knows), the unit is
//   parsed again with a reduced one (-D -U -I -isystem -iquote -idirafter -include -imacros
//   -std -x --sysroot -fopenmp -pthread -m32/-m64 and the additions above); the summary
//   counts such units and their diagnostics column says so.
//
// CUDA (.cu files, or any entry whose compiler's name ends in "nvcc")
//   Parsed as CUDA host code: -x cuda --cuda-host-only -nocudalib, --cuda-path= $CUDA_PATH,
//   $CUDA_HOME or /usr/local/cuda (the first that exists), and -isystem <cuda>/include/cccl
//   when it exists (nvcc.profile puts CCCL there since CUDA 13: cub, thrust, cuda/std, which
//   cooperative_groups needs). Device code (kernels, __device__ functions) is still parsed
//   and indexed: clang parses both sides; only code generation is host-only. nvcc-only
//   flags are dropped (-gencode X, -arch[=]X, --gpu-architecture, -code, -ccbin X,
//   --compiler-bindir, --extended-lambda, --expt-relaxed-constexpr, --use_fast_math,
//   -rdc[=]..., --generate-code[=]..., -Xptxas X, -Xnvlink, -Xfatbin, -Xcudafe, -Xlinker,
//   --diag-suppress X, -lineinfo, -G, -dc, -dlink, -maxrregcount, --default-stream,
//   -t/--threads, -x cu, -Werror all-warnings, --ftz= and friends, and any other
//   --long-option, alone) or translated (-Xcompiler/--compiler-options[=]a,b → a b, each
//   through the host filter above; --std/-std X → -std=X; --include-path, --define-macro,
//   --undefine-macro, --system-include, --pre-include → -I -D -U -isystem -include;
//   --debug → -g). clang 19's CUDA wrapper includes texture_fetch_functions.h, which CUDA 13
//   no longer ships: index_unsaved.c supplies an empty stand-in as an in-memory file under
//   /tracebook-stubs, last on the include path (so a toolkit that has the real one wins);
//   nothing is read from or written to the disk for it. Every CUDA unit also gets
//   -include /tracebook-stubs/tracebook_cuda.h, read after the wrapper: it gives __CUDACC__
//   the value 1 that nvcc gives it (the wrapper leaves it defined empty, and NCCL 2.28's
//   device API headers, nccl_device/utility.h, coop.h ..., test `#if __CUDACC__`: 1,472
//   "expected value in expression" errors on nccl-tests), and declares the cache-hinted
//   loads and stores the wrapper leaves out with CUDA's sm_32_intrinsics.h (__ldcg, __ldca,
//   __ldcs, __ldlu, __ldcv, __stwb, __stcg, __stcs, __stwt: nccl_device's gin_proxy.h calls
//   __stwt), and the host side of CUDA's min/max overloads (crt/math_functions.hpp defines
//   them `static inline __host__ __device__`; the wrapper keeps the device side only, so host
//   code nvcc compiles, min(m, 4) in nccl-tests' common.cu, found no overload). No -std is added: clang 19 defaults to C++17, as nvcc 13 does; an explicit
//   -std=c++14 is kept, and CCCL then refuses it as nvcc would.
//   Checked with clang 19 + CUDA 13.0: <cuda_runtime.h>, cuda_bf16/fp16/fp8, mma.h,
//   curand_kernel.h, cublas_v2.h, cublasLt.h, nvtx3, cooperative_groups (+ reduce), cub,
//   thrust, cuda/std, cuda/pipeline, <nccl.h>, <nccl_device.h> and its parts, warp
//   intrinsics, <<<...>>> launches, extended __host__ __device__ lambdas and `if constexpr`
//   all parse without errors.
//   Known not to parse, or only partly:
//     - Without a CUDA installation, .cu units fail (clang cannot find the CUDA headers).
//     - CUDA releases newer than clang 19 knows (it supports up to 12.5) work only as far
//       as their headers stay compatible: a header that needs newer clang builtins makes
//       the unit "partial" (it still contributes everything clang parsed).
//     - Host-only parsing sees the host side of the preprocessor: code under
//       #ifdef __CUDA_ARCH__ (device-only paths, per-architecture branches) is not indexed,
//       and clang does not define __NVCC__, so code that tests it takes its other branch.
//     - nvcc extensions clang lacks (nvcc-only pragmas and intrinsics, __nv_* internals).
//     - Flags for another compiler that clang rejects fall back to the reduced command line
//       above; a unit whose code needs those flags' effect may then be partial.
//     - Brace elision in positional initializers of nested structs is not followed (see
//       field_targets below).
//
// What is recorded (only code in non-system files: system headers' own functions and the
// bodies of their inline functions are skipped; calls into them are recorded, and a system
// header's function that the project calls or names gets its declaration's row: a library's
// API - nccl.h, mpi.h, cublas_v2.h, libc - is a node of the graph, the last hop of a chain)
//   file_errors each unit's error diagnostics counted by the file they are in (the source, a
//               toolkit header), with the first one. A function's unit_id is the unit whose
//               parse gave its row; when that unit is partial or failed, every answer that shows
//               the function says so (def, callers, callees, chain: "[partial parse]" on the
//               hop and a "partial parse: UNIT: N errors (first: ...)" line; map and walk: the
//               units among the functions the entry reaches, and the status partial, exit 1).
//   files       every unit (is_tu 1, status ok | partial | failed, error count, the errors
//               as "file:line:col: message" lines) and every other file a function, call,
//               callback, field target or range site is in (is_tu 0, status NULL).
//   functions   every function defined, and every function declared that a unit calls or
//               names (C, C++ methods, constructors, function templates: a template is one row;
//               calls of its specialisations go to it; a prototype nothing refers to has no
//               row), by USR: once across the whole index (a header's inline function is one
//               row); the row points at the definition when there is one (is_definition 1),
//               else at the first declaration; end_line and
//               end_col: the closing brace of its body (NULL without a definition). is_static:
//               storage class static or internal linkage (anonymous namespace).
//               USRs are libclang's, except that (a) functions with internal linkage and (b)
//               `main` use the absolute path of their file where libclang uses its base name
//               ("c:/abs/dir/a.c@F@helper"), so statics of the same name in a/x.c and b/x.c
//               differ and each binary's main is its own row; and (c) an external function
//               defined in a second file (another binary's copy) gets its own row with
//               "c:/abs/file@" + the USR after "c:" - calls from that file's unit go to it,
//               calls from other units to the first definition.
//   calls       every call expression in a function body (lambdas: the enclosing function),
//               each body once. Direct: callee_usr and callee_name. Through a struct field
//               holding a function pointer (p->f(), x.f(), (*p->f)()): callee_usr NULL, callee_name the
//               field, field "Record.field" (Record: the struct's tag, or for an anonymous
//               struct its typedef's name). Through a function-pointer variable or parameter:
//               callee_usr NULL, callee_name the variable. Unresolved until instantiation
//               (a call in a template whose arguments depend on a template parameter, a
//               member call on a dependent type): linked by name as clangd's heuristic
//               resolver does - the one candidate function of the lookup (for this->f() or
//               x.f(), the one method f of the class the base names, or of its bases'
//               primary templates) is the callee, resolution "name"; several are kept as
//               candidates (their USRs), resolution "candidates", callee_usr NULL; none:
//               the name, else "(indirect)". Left out:
//               __builtin_* calls, the <<<...>>> configuration call of a kernel launch,
//               constructor/destructor calls of system-header classes (dim3(n)) and of the
//               constructors the compiler declares implicitly. Location: the
//               call's file location (a call written in a macro argument: where it is written;
//               a call in a macro's body: the macro's use); in_macro: the outermost macro the
//               call was expanded from (TB_RANGE_PUSH, RK_CHECK, ...), else NULL.
//   callbacks   every mention of a function in a body other than as the callee of a call
//               (a DeclRefExpr to a function, under & and casts too): passed as an argument
//               (passed_to: the callee's name - the field for a call through a field, the
//               variable for a call through a pointer), stored in a variable or array,
//               returned, compared. function_id: the function whose body names it (lambdas: the
//               enclosing function); target_usr: the function named; file/line/col: the name.
//               parallel_state_run_ranks(&world, rank_main, runs) gives a row rank_main,
//               passed_to parallel_state_run_ranks. Values assigned to function-pointer fields
//               are field_targets rows instead (not both); initializers outside function
//               bodies give no callbacks.
//   field_targets  functions assigned to function-pointer fields: designated initializers
//               (.f = fn, .a.b = fn), positional initializers of structs (the k-th value to the
//               k-th field; a designator moves the position; brace elision of nested structs
//               is not followed), assignments x.f = fn / p->f = &fn. Assigning a struct
//               (g->backend = &tb_local_backend) is not a field target. file/line: the
//               function's mention. Unique per (record, field, function).
//   range_sites calls of the push functions (default tb_range_push, nvtxRangePushA,
//               nvtxRangePushW, nvtxRangePushEx; --range-push NAME adds one, a glob works) with
//               kind "push" and name = the first argument's string literal as written (the
//               printf pattern, e.g. "layer.%d.mlp.fc2"; concatenated literals joined; NULL when
//               not a literal), and of the pop functions (tb_range_pop, nvtxRangePop;
//               --range-pop adds) with kind "pop", name NULL. TB_RANGE_PUSH(...) expands to
//               tb_range_push(...): the site is the macro's use.
//   collective_sites  derived once every unit is in: direct calls whose callee matches the
//               list (default: the NCCL calls that move data - ncclAllReduce,
//               ncclReduceScatter, ncclAllGather, ncclBroadcast, ncclBcast, ncclReduce, ncclSend,
//               ncclRecv, ncclAlltoAll; not the rest of the nccl* API: ncclGetErrorString,
//               ncclCommInitRank, ncclGetUniqueId, ncclCommGetAsyncError, ncclGroupStart/End ... -
//               the MPI calls that move data (MPI_Allreduce, MPI_Reduce_scatter(_block),
//               MPI_Allgather(v), MPI_Bcast, MPI_Reduce, MPI_Alltoall(v), MPI_Send, MPI_Recv,
//               MPI_Sendrecv, their nonblocking I* forms, MPI_Barrier) and tb_all_reduce, tb_reduce_scatter, tb_all_gather, tb_all_to_all,
//               tb_broadcast, tb_send, tb_recv, tb_barrier, @tb_comm_backend).
//               An entry is a name or an fnmatch glob; "@Record" means every function assigned
//               to a field of Record (the backends' entry points, local_all_reduce ...) and
//               also every call through one of Record's fields, recorded with callee_name
//               "Record.field" (e.g. tb_comm_backend.all_reduce in tb_all_reduce). call_id: the
//               calls row of the same site.
//               --collective X adds X to the default list; --no-default-collectives starts
//               from an empty one (so `--no-default-collectives --collective 'my_*'` replaces).
//   targets     which units link into which binary (the queries' scopes: a chain never
//               combines units of two binaries), from the first of:
//               - --targets FILE, the user's map: a JSON object {"binary": ["src/a.c", ...]},
//                 paths absolute or relative to FILE's directory, each a unit of the database
//                 (else exit 1 naming the binary and the path; malformed JSON: file:line:col);
//                 type "EXECUTABLE (targets file)"; a binary holding two units that define main
//                 or the same external symbol is used as given, with a warning naming it;
//               - CMake's file API reply in <build-dir>/.cmake/api/v1/reply (build dir:
//                 --build-dir, default the database's directory): an executable gets its own
//                 compiled sources and those of every static, object or shared library it
//                 depends on, transitively; a static library gets its own sources. Only sources
//                 that are units of the database are listed;
//               - inferred from the units' symbols (index_units.c; a Makefile project's database,
//                 as bear writes it): never two units defining main or the same external
//                 symbol (a strong function definition, a variable) in one binary; a binary is
//                 a seed (a unit with main or one that conflicts with another) and the units
//                 defining what its units refer to, one binary per choice where several could;
//                 named after its main's file and its conflicting units ("common+all_reduce"),
//                 type "EXECUTABLE (inferred)" ("LINK_UNIT (inferred)" without main). Said on
//                 stderr with the count. Nothing to tell apart (no main, nothing defined twice):
//                 no targets, one scope.
//               meta targets_source says which (targets-file | cmake-file-api | inferred | none).
//   libraries   for each function without a definition in the index (a library's API) and
//               each linking target (executable, shared or module library) whose units call or
//               name it: the first library on that target's link line (CMake's file API,
//               link.commandFragments: paths, -lNAME found on -L and the system's directories,
//               libc last, as the driver adds it) that defines it - a shared object's dynamic
//               symbols (ELF .dynsym), a static archive's symbol index, the inputs of a GNU ld
//               script (libc.so, libm.so). No file API reply: none.
//   meta        schema_version, source_dir (the code model's, else CMakeCache.txt's
//               CMAKE_HOME_DIRECTORY, else the database's directory), build_dir, compdb,
//               created (UTC), tu_count, error_count (error diagnostics, all units),
//               tus_with_errors, targets_source (above), indexer (schema,
//               SHA-256 of the tracebook executable, libclang's version: another indexer's
//               per-unit facts are not reused), indexer_exe_stat (the executable's size,
//               mtime, ctime, inode, device when it was hashed: the next run takes the key
//               without reading the executable when they are the same), targets_digest,
//               targets_signature, link_units_capped (inferred link units: how many units had
//               more ways to link than the 64 kept; a re-index that keeps them warns again),
//               collectives_digest.
//   tu_*        each unit's own facts and inputs, for incremental re-indexing (below).
//
// Errors and exit status
//   A unit that fails wholly or partly is reported on stderr (its path, status, error count
//   and the first 20 errors as file:line:col: message) and still contributes what parsed;
//   status "failed" means nothing parsed (an unreadable source file, or libclang could not
//   build the unit even with the reduced command line), "partial" that errors were. The
//   index is written whatever the units' state; the exit status is 1 when a unit failed,
//   the database is unusable (missing, unreadable, malformed) or the index cannot be
//   written, 2 when the usage is wrong, else 0 (partial units are counted in the summary,
//   flagged in files.status, and still exit 0: what parsed is in the index). The summary
//   (stdout) reads "tracebook index: N TUs (M with errors, F failed) in S s -> OUT" and a
//   line of counts. --quiet drops the summary and the notes (no file API reply), not the
//   units' errors; --verbose adds each unit's clang arguments and parse time.
//
// Speed: units are parsed in parallel (-j N, default min(online CPUs, 4)), one libclang index
// per thread; the facts are merged in database order, so the index does not depend on -j. A
// full index is a new file written in one transaction without a journal while the units are
// parsed: -j threads parse, this thread writes each unit's facts (merged, and its own tu_*
// rows) in database order as soon as the unit is parsed, with its libraries rows when the link
// units are known (CMake's reply, --targets); the text-keyed secondary indexes are built once
// every unit is being parsed (else at the end); after the last unit, what needs every one
// (inferred link units, collective sites, the counts), then the file is renamed over --output.
// A re-index that parses at most a quarter of the units (at least 8), with the same units in
// the same order, updates the previous index file in place instead (index_update.c): one SQLite
// transaction (rollback journal) replaces the parsed units' tu_* rows and merges again only
// what their change touched — the functions whose rows or bodies differ between a unit's old
// and new facts, the field targets, the libraries rows of functions whose definition or naming
// changed, the files no unit names any more — reading the other units' rows through indexes;
// the reused units' facts are not read at all. What the update leaves to the full merge (a body
// passing to a unit not parsed, renamed copies of an external function, changed targets or
// --collective list) is merged as before: the reused units' facts read back, a copy of the
// previous index updated (index_write.h, ix_inplace) or, when a file would change its id, a new
// file. Whichever path, the content is what --full -j 1 writes (tests/trace/test_index_equal.c
// compares every table; row ids may differ). --verbose prints each phase's time and which path
// the write took. --parse-only is the benchmark's reference (scripts/bench-index.sh): every
// unit parsed as the index parses it first (same arguments, flags, in-memory stand-ins and -j),
// nothing visited, hashed or written; it prints the wall time and exits 1 when a unit failed.
//
// Incremental re-indexing (index_reuse.c): when --output names an index of this schema written by
// the same tracebook executable and libclang, a unit is parsed again only when its inputs
// changed: its command line (the clang arguments after translation, the reduced ones, the
// directory, CUDA mode, the --range-push/--range-pop lists: one SHA-256), or the contents
// (SHA-256) of its source or of any file it included, system headers too (libclang's
// clang_getInclusions). Each input file's hash is recorded with its stat (file_stats: size,
// mtime, ctime, inode, device); a file whose stat is unchanged takes the recorded hash without
// being read (ctime moves on every change and no program can set it back), and the units that
// read a changed file are found through input_units. A unit whose errors include "file not found",
// or one with an input that could not be hashed, is parsed every time. Those units are known
// before the compilation database is read: when 1 to -j of them are, they start parsing from the
// command lines the previous index recorded while it is read (index_speculate.h); such a parse
// stands only for a unit the database gives the same command line. The CMake file API
// reply is read again only when its files' stats differ from the previous run's (its
// signature) or when its link lines are needed. --full (or an index of another schema or
// indexer) parses every unit. Not detected: a new header that would now shadow an included one
// earlier on the include path (as with make), a library appearing on a link line's -L
// directories while the reply is unchanged; use --full. A file whose mtime is not before the
// run's start is recorded as changed ('~'), so an edit made while indexing is picked up next
// time. The last summary line gives the figures: TUs parsed and reused, the distinct files the
// parses read and their lines, wall time (from the previous index's read, the database's
// after it, to the index written), files/s and lines/s.
#include <clang-c/Index.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/xalloc.h"
#include "index_args.h"
#include "index_compdb.h"
#include "index_file.h"
#include "index_summary.h"
#include "index_db.h"
#include "index_meanwhile.h"
#include "index_options.h"
#include "index_reuse.h"
#include "index_speculate.h"
#include "index_targets.h"
#include "index_units.h"
#include "index_update.h"
#include "index_visit.h"
#include "index_workers.h"
#include "index_write.h"
#include "pool.h"
#include "trace_cli.h"

// What the run will need and costs the same whatever it indexes, made ready on a thread of its
// own while this one reads the previous index: OpenSSL's SHA-256 (~1.5 ms here) and libclang's
// one-time initialisation (~1.5 ms). A one-file re-index waits for neither before its parse.
static void *warm_up(void *arg) {
    (void)arg;
    ix_digest_fetch();
    ix_libclang_init();
    return NULL;
}

// The update in place did not apply: the reused units' facts are read back for the full merge,
// and a unit whose facts cannot be read is parsed after all (appended to todo, the run's list of
// the units it parses, *ntodo of them, room for every unit).
static void reuse_after_all(ix_work *w, ix_prev *prev, const ix_prev_unit **match, ix_hashes *hashes, tb_strmap *counted,
                            long *nfiles, long *nlines, size_t *todo, size_t *ntodo, size_t *nreused) {
    size_t n = w->db->ntus;
    char *was = tb_xcalloc(n ? n : 1, 1, "reused units");
    for (size_t i = 0; i < n; i++) {
        was[i] = match[i] != NULL;
        if (was[i]) ix_result_free(&w->results[i]);
    }
    ix_prev_results(prev, match, w->results, n);
    size_t from = *ntodo;
    for (size_t i = 0; i < n; i++)
        if (was[i] && !match[i]) todo[(*ntodo)++] = i, (*nreused)--;
    free(was);
    w->todo = todo + from;
    w->ntodo = *ntodo - from;
    ix_run_workers(w, w->opt->jobs, NULL, NULL);
    ix_hash_unit_inputs(w->db, w->results, todo + from, *ntodo - from, hashes, counted, nfiles, nlines);
}

// A new index written as the units come (ix_parse_and_write), once the speculative parses
// that stand for some of its units are in: it takes the units in the database's order.
typedef struct spec_then_write {
    ix_spec *spec;
    ix_result *results;
    ix_streamed *streamed;
} spec_then_write;

static void finish_spec_then_write(ix_work *w, void *arg) {
    spec_then_write *t = arg;
    ix_spec_finish(t->spec, t->results, w);
    ix_parse_and_write(w, t->streamed);
}

static const char *read_cmake_home(tb_pool *p, const char *build_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/CMakeCache.txt", build_dir);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char line[8192];
    const char *home = NULL;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "CMAKE_HOME_DIRECTORY:", 21)) continue;
        char *eq = strchr(line, '=');
        if (!eq) break;
        eq[strcspn(eq, "\r\n")] = 0;
        home = tb_pool_dup(p, eq + 1);
        break;
    }
    fclose(f);
    return home;
}

static void report_unit(const ix_tu *tu, const ix_result *r) {
    fprintf(stderr, "tracebook index: %s: %s, %d error%s\n", tu->file, r->status, r->errors, r->errors == 1 ? "" : "s");
    if (!r->diagnostics) return;
    const char *s = r->diagnostics;
    int shown = 0;
    while (*s && shown < 20) {
        const char *e = strchr(s, '\n');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        fprintf(stderr, "  %.*s\n", (int)n, s);
        shown++;
        s += n + (e ? 1 : 0);
    }
    if (*s) {
        int more = 0;
        for (; *s; s++) more += *s == '\n';
        fprintf(stderr, "  ... and %d more (files.diagnostics has them all)\n", more + 1);
    }
}

int tracebook_index_main(int argc, char **argv) {
    ix_options opt = {0};
    index_args args = {0};
    tb_error err;
    int status = ix_args_parse(argc, argv, &args, &opt);  // -1: run
    if (status >= 0) goto out;
    ix_parse_on_workers();  // before the first thread

    status = 1;
    if (!opt.parse_only && ix_output_check(opt.out, &err) != 0) {
        fprintf(stderr, "tracebook index: %s\n", err.msg);
        goto out;
    }
    ix_compdb db;
    if (opt.parse_only) {
        if (ix_compdb_load(&db, opt.compdb_arg, &err)) {
            fprintf(stderr, "tracebook index: %s\n", err.msg);
            goto out;
        }
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        status = ix_parse_only_run(&db, &opt, &t0);
        ix_compdb_free(&db);
        goto out;
    }
    struct timespec t0, t1;  // the run's time: from the previous index's read on
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct timespec tp = t0;
    pthread_t warm;  // joined before the units' command lines are hashed and parsed
    int warming = pthread_create(&warm, NULL, warm_up, NULL) == 0;

    tb_pool pool = {0};
    // Reuse: the units whose inputs (command line, source, every included file) are those the
    // previous index recorded keep their facts; the others are parsed.
    ix_indexer indexer;
    ix_indexer_init(&indexer, &pool);
    ix_hashes hashes;
    ix_hashes_init(&hashes);
    ix_prev prev;
    const char *why = NULL;
    if (opt.full) {
        memset(&prev, 0, sizeof prev);
        tb_strmap_init(&prev.units);
        tb_vec_init(&prev.list, sizeof(ix_prev_unit), "previous units");
        why = "--full";
    } else {
        ix_prev_load(&prev, opt.out, &indexer, &why);
        if (prev.db) ix_hashes_known(&hashes, prev.db);  // files unchanged since are not read again
        ix_prev_check_deps(&prev, &hashes, opt.jobs);
    }
    ix_spec spec;  // the units known to be parsed again start now (index_speculate.h)
    ix_spec_start(&spec, &prev, &opt);
    // The compilation database, read while they parse. (Read on a thread of its own beside the
    // previous index's read, it shared the two cores with it, its stat threads and warm_up: the
    // parse began 3-4 ms later; docs/PERFORMANCE.md.)
    if (ix_compdb_load(&db, opt.compdb_arg, &err)) {
        fprintf(stderr, "tracebook index: %s\n", err.msg);
        if (warming) pthread_join(warm, NULL);
        ix_spec_free(&spec);
        ix_prev_free(&prev);
        ix_hashes_free(&hashes);
        tb_pool_free(&pool);
        goto out;
    }
    const char *build_dir = opt.build_dir ? ix_abspath(&pool, NULL, opt.build_dir) : db.dir;
    if (prev.db == NULL && why && strcmp(why, "no previous index") && !opt.quiet)
        fprintf(stderr, "tracebook index: note: %s: parsing every unit\n", why);
    ix_phase_mark(&opt, &tp, "previous index read, then the database (the speculative parses begun)");
    ix_result *results = tb_xcalloc(db.ntus ? db.ntus : 1, sizeof *results, "unit results");
    size_t *todo = tb_xcalloc(db.ntus ? db.ntus : 1, sizeof *todo, "units to parse");
    size_t ntodo = 0, nreused = 0;
    // A new index (no previous one, no --targets): every unit is parsed, so the workers start
    // now, and this thread does the rest of the set-up (the reply's signature, the command
    // lines' hashes, the output's schema) while they parse.
    ix_work w;
    const int early = !prev.db && !args.targets;
    if (early) {
        for (; ntodo < db.ntus; ntodo++) todo[ntodo] = ntodo;
        ix_work_init(&w, &db, &opt, results, todo, ntodo);
        ix_workers_start(&w, opt.jobs);
    }
    // The link units. The CMake file API reply as the previous run read it (same signature):
    // not read again unless the update needs its link lines (index_update.c) or the full merge
    // runs.
    ix_targets targets;
    memset(&targets, 0, sizeof targets);
    tb_vec_init(&targets.rows, sizeof(ix_target_row), "target rows");
    tb_vec_init(&targets.links, sizeof(ix_target_link), "target links");
    int trc = 0;  // 0: targets given (file API or --targets); 1: none, to be inferred
    const char *targets_source = "cmake-file-api";
    const char *targets_sig = args.targets ? NULL : ix_targets_signature(&pool, build_dir);
    const char *prev_sig = prev.db ? ix_prev_meta(&prev, "targets_signature") : NULL;
    const char *prev_source = prev.db ? ix_prev_meta(&prev, "targets_source") : NULL;
    int targets_loaded = !(targets_sig && prev_sig && !strcmp(targets_sig, prev_sig) && prev_source &&
                           !strcmp(prev_source, "cmake-file-api"));
    // A new index of every unit (no previous one) needs the link units only after the parse:
    // CMake's reply is read while the first units parse (ix_parse_and_write).
    ix_targets_later later = {.targets = &targets, .db = &db, .build_dir = build_dir, .trc = &trc,
                              .source = &targets_source};
    const int read_later = early;  // the same new index whose workers started early
    if (targets_loaded && !read_later &&
        ix_link_units_load(&targets, args.targets, &db, build_dir, &trc, &targets_source, &err)) {
        if (warming) pthread_join(warm, NULL);  // (not early: no worker started)
        free(results);
        free(todo);
        ix_targets_free(&targets);
        ix_spec_free(&spec);
        ix_prev_free(&prev);
        ix_hashes_free(&hashes);
        tb_pool_free(&pool);
        ix_compdb_free(&db);
        goto out;
    }
    ix_phase_mark(&opt, &tp, "targets");
    if (warming) pthread_join(warm, NULL);
    const char **inputs = tb_xcalloc(db.ntus ? db.ntus : 1, sizeof *inputs, "unit input hashes");
    const ix_prev_unit **match = tb_xcalloc(db.ntus ? db.ntus : 1, sizeof *match, "reused units");
    for (size_t i = 0; i < db.ntus; i++) {
        inputs[i] = ix_inputs_hash(&pool, &db.tus[i], &opt);
        match[i] = ix_prev_match(&prev, &db.tus[i], inputs[i]);
    }
    // A few units to parse: the index file is updated in place by their difference
    // (index_update.c), and the reused units' facts are not read at all; else they are read
    // back and everything is merged again (index_write.c).
    size_t nmatched = 0;
    for (size_t i = 0; i < db.ntus; i++) nmatched += match[i] != NULL;
    const char *update_why = NULL;
    // Link units inferred (no reply) stand while the parsed units change nothing they are
    // inferred from (index_update.c checks) and the database is the same file (their names may
    // be paths under its directory); the full merge infers them from every unit.
    const char *prev_compdb = prev.db ? ix_prev_meta(&prev, "compdb") : NULL;
    const int keep_inferred = trc == 1 && prev_source &&
                              (!strcmp(prev_source, "inferred") || !strcmp(prev_source, "none")) && prev_compdb &&
                              !strcmp(prev_compdb, db.path);
    int try_update = prev.db && !args.targets && (trc == 0 || keep_inferred) &&
                     ix_update_applies(&prev, &db, db.ntus - nmatched, &update_why);
    if (!try_update && update_why && prev.db && opt.verbose)
        fprintf(stderr, "tracebook index: not updated in place (%s): every unit merged again\n", update_why);
    if (try_update) {
        for (size_t i = 0; i < db.ntus; i++) {
            if (!match[i]) continue;
            ix_result_init(&results[i]);  // what the summary and the error report read
            results[i].reused = 1;
            results[i].status = match[i]->status;
            results[i].errors = match[i]->errors;
            results[i].reduced = match[i]->reduced;
            results[i].diagnostics = match[i]->diagnostics ? tb_xstrdup(match[i]->diagnostics, "diagnostics") : NULL;
        }
    } else if (prev.db) {
        ix_prev_results(&prev, match, results, db.ntus);  // a unit it cannot read back is parsed
    }
    if (!try_update && !targets_loaded) {  // the full merge writes the targets and libraries rows
        targets_loaded = 1;
        ix_link_units_load(&targets, NULL, &db, build_dir, &trc, &targets_source, &err);
    }
    for (size_t i = 0; i < db.ntus && !early; i++) {
        if (match[i])
            nreused++;
        else
            todo[ntodo++] = i;
    }
    ix_phase_mark(&opt, &tp, "inputs compared");

    // Parse. A new index of every unit is written as the units are parsed (ix_parse_and_write).
    const char *out_dir = NULL;
    const char *slash = strrchr(opt.out, '/');
    if (slash && slash != opt.out) out_dir = tb_pool_dupn(&pool, opt.out, (size_t)(slash - opt.out));
    int out_dir_failed = out_dir && tb_mkdir_p(out_dir, &err);
    if (out_dir_failed) fprintf(stderr, "tracebook index: %s\n", err.msg);
    long nfiles = 0, nlines = 0;
    tb_strmap counted;
    tb_strmap_init(&counted);
    // The workers parse the units no speculative parse stands for.
    size_t *rest = tb_xcalloc(ntodo ? ntodo : 1, sizeof *rest, "units to parse");
    if (!early) ix_work_init(&w, &db, &opt, results, rest, ix_spec_take(&spec, &db, todo, ntodo, rest));
    ix_streamed sw = {.hashes = &hashes, .counted = &counted, .nfiles = &nfiles, .nlines = &nlines, .inputs = inputs,
                      .targets = read_later ? &later : NULL, .rows = !read_later && trc == 0 ? &targets : NULL,
                      .indexer = &indexer};
    int stream = !out_dir_failed && !try_update && ntodo == db.ntus;
    if (stream && !(sw.writer = ix_write_begin(opt.out, &db, &err))) fprintf(stderr, "tracebook index: %s\n", err.msg);
    ix_update_start us = {.path = opt.out, .db = &db, .todo = todo, .ntodo = ntodo, .prev = &prev, .targets = &targets,
                          .targets_loaded = &targets_loaded, .build_dir = build_dir, .opt = &opt, .err = &err};
    spec_then_write stw = {.spec = &spec, .results = results, .streamed = &sw};
    if (early)
        ix_workers_finish(&w, stream ? ix_parse_and_write : NULL, &sw);
    else if (stream)
        ix_run_workers(&w, opt.jobs, finish_spec_then_write, &stw);
    else
        ix_run_workers(&w, opt.jobs, try_update && !out_dir_failed ? ix_begin_update : NULL, &us);
    ix_spec_finish(&spec, results, NULL);  // (done already when streamed)
    if (opt.verbose && spec.db.ntus)
        fprintf(stderr, "tracebook index: %zu unit%s parsed from the command line%s the previous index recorded, "
                        "before the compilation database was read: %zu taken (the database gives the same), %zu "
                        "dropped\n", spec.db.ntus, spec.db.ntus == 1 ? "" : "s", spec.db.ntus == 1 ? "" : "s",
                spec.taken, spec.db.ntus - spec.taken);
    if (read_later) ix_targets_later_load(&later);  // (not streamed: the output's directory failed)
    ix_phase_mark(&opt, &tp, stream ? "parse and visit, each unit written as it came" : "parse and visit");
    ix_phase_units(&opt, results, todo, ntodo, stream ? sw.busy : -1);
    if (!stream) ix_hash_unit_inputs(&db, results, todo, ntodo, &hashes, &counted, &nfiles, &nlines);
    for (size_t i = 0; i < db.ntus; i++) results[i].inputs = inputs[i], results[i].tu = &db.tus[i];
    ix_phase_mark(&opt, &tp, "input files hashed");
    const int inferred_kept = try_update && trc == 1;  // (the reused units' facts are not read)
    if (inferred_kept)
        targets_source = prev_source;
    else
        ix_link_units_resolve(&targets, &db, results, trc, args.targets != NULL, &opt, &targets_source);

    for (size_t i = 0; i < db.ntus; i++) {
        if (opt.verbose) {  // a line in one write (stderr is unbuffered: one per argument was ~8,500 here)
            tb_buf line = {0};
            if (results[i].reused)
                tb_buf_printf(&line, "tracebook index: %s: %s, reused (inputs unchanged)%s:", db.tus[i].file,
                              results[i].status, db.tus[i].cuda ? " (CUDA host)" : "");
            else
                tb_buf_printf(&line, "tracebook index: %s: %s in %.2f s%s%s%s%s:", db.tus[i].file, results[i].status,
                              results[i].seconds, db.tus[i].cuda ? " (CUDA host)" : "", results[i].openmp ? " (" : "",
                              results[i].openmp ? results[i].openmp : "", results[i].openmp ? ")" : "");
            for (int k = 0; k < db.tus[i].nargs; k++) tb_buf_printf(&line, " %s", db.tus[i].args[k]);
            fprintf(stderr, "%s\n", line.s);
            tb_buf_free(&line);
        }
        if (results[i].errors) report_unit(&db.tus[i], &results[i]);
    }

    ix_phase_mark(&opt, &tp, "link units");
    // Write.
    const char *source_dir = !targets_loaded        ? ix_prev_meta(&prev, "source_dir")
                             : targets.source_dir ? targets.source_dir
                                                  : read_cmake_home(&pool, build_dir);
    ix_meta meta = {.source_dir = source_dir ? source_dir : db.dir,
                    .build_dir = build_dir,
                    .compdb = db.path,
                    .targets_source = targets_source,
                    .indexer_key = ix_indexer_key(&indexer),
                    .indexer_exe_stat = indexer.stat,
                    .targets_digest = targets_loaded && !inferred_kept
                                          ? ix_targets_digest(&pool, targets_source, &targets)
                                          : ix_prev_meta(&prev, "targets_digest"),
                    .targets_signature = targets_sig,
                    .link_units_capped = inferred_kept ? ix_prev_meta(&prev, "link_units_capped")
                                                       : tb_pool_printf(&pool, "%zu", targets.capped),
                    .hashes = &hashes};
    ix_summary sum;
    int written = -1;
    if (stream) {
        if (sw.writer && (written = ix_write_end(sw.writer, results, &targets, &opt, &meta, &sum)))
            fprintf(stderr, "tracebook index: %s\n", err.msg);
    } else if (!out_dir_failed) {
        if (try_update) {
            int read_before = targets_loaded;  // the update may read them (its libraries rows)
            int urc = ix_update_end(us.update, results, &meta, &sum, &update_why);
            if (urc == 0) {
                written = 0;
                if (inferred_kept && !opt.quiet)
                    fprintf(stderr, "tracebook index: note: no CMake file API reply in %s: %s (no parsed unit changed "
                                    "main, a symbol another unit defines or uses, or its uses of other units' "
                                    "symbols)\n", targets.reply_dir,
                            strcmp(targets_source, "none") ? "the link units inferred before stand"
                                                           : "still nothing to tell binaries apart by: one scope");
                if (inferred_kept && meta.link_units_capped)  // (the warning, like the note, said again)
                    ix_units_warn_capped(strtoul(meta.link_units_capped, NULL, 10));
                if (opt.verbose)
                    fprintf(stderr, "tracebook index: updated in place: %zu parsed unit%s merged by the difference of "
                                    "their facts\n", ntodo, ntodo == 1 ? "" : "s");
            } else {
                if (opt.verbose)
                    fprintf(stderr, "tracebook index: not updated in place (%s): every unit merged again\n",
                            urc > 0 ? update_why : err.msg);
                reuse_after_all(&w, &prev, match, &hashes, &counted, &nfiles, &nlines, todo, &ntodo, &nreused);
                for (size_t i = 0; i < db.ntus; i++) results[i].inputs = inputs[i], results[i].tu = &db.tus[i];
                if (!read_before || inferred_kept) {  // the full merge writes the targets and libraries rows anew
                    targets_loaded = 1;
                    if (!inferred_kept)  // (else loaded: no reply, to be inferred from every unit now)
                        ix_link_units_load(&targets, NULL, &db, build_dir, &trc, &targets_source, &err);
                    ix_link_units_resolve(&targets, &db, results, trc, 0, &opt, &targets_source);
                    meta.targets_source = targets_source;
                    meta.link_units_capped = tb_pool_printf(&pool, "%zu", targets.capped);
                    meta.targets_digest = ix_targets_digest(&pool, targets_source, &targets);
                    source_dir = targets.source_dir ? targets.source_dir : read_cmake_home(&pool, build_dir);
                    meta.source_dir = source_dir ? source_dir : db.dir;
                }
            }
        }
        if (written != 0) {
            long long *prev_id = tb_xcalloc(db.ntus ? db.ntus : 1, sizeof *prev_id, "previous unit ids");
            size_t kept = 0;
            for (size_t i = 0; i < db.ntus; i++)
                if (match[i] && results[i].reused) prev_id[i] = match[i]->id, kept++;
            // Reused units keep their rows of the previous index: a copy of it is updated (index_write.h).
            ix_inplace inplace = {.prev_file = opt.out, .prev_id = prev_id,
                                  .prev_paths = (const char *const *)prev.paths.items, .nprev_paths = prev.paths.len};
            written = ix_write_index(opt.out, &db, results, &targets, &opt, &meta, prev.db && kept ? &inplace : NULL,
                                     &sum, &err);
            free(prev_id);
            if (written) fprintf(stderr, "tracebook index: %s\n", err.msg);
        }
    }
    if (written == 0) {
        // A unit that failed (an unreadable source, a unit libclang could not build) is missing
        // from the index: the index is written, but the run did not do what was asked.
        ix_phase_mark(&opt, &tp, "index written");
        status = sum.tus_failed ? 1 : 0;
        if (sum.tus_failed)
            fprintf(stderr, "tracebook index: %ld of %ld units failed (nothing of them is in the index; see above); "
                            "exit status 1\n", sum.tus_failed, sum.tus);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        long reduced = 0;
        for (size_t i = 0; i < db.ntus; i++) reduced += results[i].reduced;
        ix_run_figures fig = {opt.out, secs, ntodo, nreused, nfiles, nlines, reduced, db.nduplicates};
        if (!opt.quiet || args.json) ix_print_summary(&sum, &fig, args.json);
    }
    for (size_t i = 0; i < db.ntus; i++) ix_result_free(&results[i]);
    free(results);
    free(todo);
    free(rest);
    ix_spec_free(&spec);
    free(inputs);
    free(match);
    ix_work_free(&w);
    tb_strmap_free(&counted);
    ix_prev_free(&prev);
    ix_hashes_free(&hashes);
    ix_targets_free(&targets);
    tb_pool_free(&pool);
    ix_compdb_free(&db);
out:
    ix_args_free(&args, &opt);
    return status;
}
