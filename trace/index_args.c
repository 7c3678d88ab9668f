// index_args.c — `tracebook index`'s command line (index_args.h).
#include "index_args.h"

#include <stdlib.h>
#include <unistd.h>

#include "index_db.h"
#include "vec.h"

// The NCCL and MPI calls that move data (not ncclGetErrorString, ncclCommInitRank,
// ncclGroupStart/End, MPI_Init, MPI_Comm_rank ...), the communicator's API and its backends'
// entry points.
static const char *const default_collectives[] = {
    "ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast", "ncclBcast", "ncclReduce", "ncclSend",
    "ncclRecv", "ncclAlltoAll", "MPI_Allreduce", "MPI_Iallreduce", "MPI_Reduce_scatter", "MPI_Reduce_scatter_block",
    "MPI_Ireduce_scatter_block", "MPI_Allgather", "MPI_Iallgather", "MPI_Allgatherv", "MPI_Bcast", "MPI_Ibcast",
    "MPI_Reduce", "MPI_Alltoall", "MPI_Alltoallv", "MPI_Send", "MPI_Isend", "MPI_Recv", "MPI_Irecv", "MPI_Sendrecv",
    "MPI_Barrier", "tb_all_reduce", "tb_reduce_scatter", "tb_all_gather", "tb_all_to_all", "tb_broadcast", "tb_send",
    "tb_recv", "tb_barrier", "@tb_comm_backend"};
static const char *const default_push[] = {"tb_range_push", "nvtxRangePushA", "nvtxRangePushW", "nvtxRangePushEx"};
static const char *const default_pop[] = {"tb_range_pop", "nvtxRangePop"};

static const tb_option index_options[] = {
    TB_OPTION("--compdb", index_args, compdb, TB_OPT_STRING, "build/compile_commands.json", "FILE|DIR",
              "compile_commands.json, or its directory"),
    TB_OPTION("--output", index_args, output, TB_OPT_STRING, TB_INDEX_DEFAULT_PATH, "FILE", "the index written"),
    TB_OPTION("--build-dir", index_args, build_dir, TB_OPT_STRING, NULL, "DIR",
              "where CMake's file API reply is (default: the database's directory)"),
    TB_OPTION("--targets", index_args, targets, TB_OPT_STRING, NULL, "FILE",
              "which sources link into which binary, as JSON {\"binary\": [\"src/a.c\", \"src/common.c\"], ...}\n"
              "                                 (paths relative to FILE's directory); instead of CMake's file API reply, or of\n"
              "                                 link units inferred from the units' symbols when there is no reply"),
    TB_OPTION("--collective", index_args, collectives, TB_OPT_LIST, NULL, "NAME|GLOB|@Record",
              "adds a collective: a name, a glob (nccl*) or @Record (every function assigned to one of\n"
              "                                 Record's fields, and calls through them); default the NCCL communication\n"
              "                                 calls (ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclBroadcast,\n"
              "                                 ncclBcast, ncclReduce, ncclSend, ncclRecv, ncclAlltoAll), MPI's (MPI_Allreduce,\n"
              "                                 MPI_Reduce_scatter, MPI_Allgather, MPI_Bcast, MPI_Send, MPI_Recv ...), tb_all_reduce,\n"
              "                                 tb_reduce_scatter, tb_all_gather, tb_all_to_all, tb_broadcast, tb_send,\n"
              "                                 tb_recv, tb_barrier, @tb_comm_backend"),
    TB_OPTION("--no-default-collectives", index_args, no_default_collectives, TB_OPT_BOOL, NULL, NULL,
              "start from an empty collective list"),
    TB_OPTION("--range-push", index_args, range_push, TB_OPT_LIST, NULL, "NAME",
              "adds a range push function (default tb_range_push, nvtxRangePushA/W/Ex)"),
    TB_OPTION("--range-pop", index_args, range_pop, TB_OPT_LIST, NULL, "NAME",
              "adds a range pop function (default tb_range_pop, nvtxRangePop)"),
    TB_OPTION("-j", index_args, jobs, TB_OPT_INT, NULL, "N", "parse N units at a time, 1 to 256 (default: online CPUs, at most 4)"),
    TB_OPTION("--jobs", index_args, jobs, TB_OPT_INT, NULL, "N", "the same as -j"),
    TB_OPTION("--full", index_args, full, TB_OPT_BOOL, NULL, NULL,
              "parse every unit; by default a unit whose command line and files (source and every file it\n"
              "                                 includes) are unchanged since the index --output names keeps its facts"),
    TB_OPTION("--parse-only", index_args, parse_only, TB_OPT_BOOL, NULL, NULL,
              "the benchmark's reference: parse every unit as the index does (same arguments, -j), visit\n"
              "                                 and write nothing; prints the wall time"),
    TB_OPTION("--quiet", index_args, quiet, TB_OPT_BOOL, NULL, NULL, "no summary or notes; units' errors are still reported"),
    TB_OPTION("-q", index_args, quiet, TB_OPT_BOOL, NULL, NULL, "the same as --quiet"),
    TB_OPTION("--verbose", index_args, verbose, TB_OPT_BOOL, NULL, NULL,
              "each unit's clang arguments and parse time, and where the run's time went (with --parse-only: its "
              "parses' CPU time)"),
    TB_OPTION("-v", index_args, verbose, TB_OPT_BOOL, NULL, NULL, "the same as --verbose"),
    TB_OPTION("--json", index_args, json, TB_OPT_BOOL, NULL, NULL, "the summary as one JSON document (counts, figures)"),
    TB_OPTIONS_END};

static const tb_command index_command = {
    "tracebook index", NULL,
    "Parses every translation unit of the compilation database with libclang and writes the\n"
    "source index the other commands read (def, callers, callees, chain, map, walk). A unit whose\n"
    "command line and files are unchanged since the last index keeps its facts; --full parses all.",
    index_options, 0, 0,
    "tracebook index -j 2\n"
    "tracebook index --compdb build/compile_commands.json --output build/tracebook-index.sqlite --json",
    "the index could not be written, or a unit failed (what parsed is written)"};

// The defaults (when wanted), then the user's names.
static void names_into(const char ***list, size_t *n, const char *const *dflt, size_t ndflt, const tb_strlist *user) {
    tb_vec v;
    tb_vec_init(&v, sizeof(const char *), "name list");
    for (size_t i = 0; i < ndflt; i++) *(const char **)tb_vec_push(&v) = dflt[i];
    for (int i = 0; i < user->n; i++) *(const char **)tb_vec_push(&v) = user->items[i];
    *n = v.len;
    *list = tb_vec_take(&v);
}

int ix_args_parse(int argc, char **argv, index_args *args, ix_options *opt) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    args->jobs = ncpu < 1 ? 1 : ncpu > 4 ? 4 : (int)ncpu;  // -j's default: no default_value in the table
    tb_positional pos = {0};
    tb_error err;
    int prc = tb_command_parse(&index_command, args, argc, argv, &pos, &err);
    if (prc == 1) return 0;
    if (prc == 0 && (args->jobs < 1 || args->jobs > 256))
        prc = tb_fail(&err, "%s: flag -j: '%d' is not a number of parallel parses from 1 to 256", index_command.name,
                      args->jobs);
    if (prc == 0 && args->json && args->parse_only)  // the benchmark's reference prints one line of text
        prc = tb_fail(&err, "%s: --json with --parse-only: not supported yet (the reference writes no index to "
                            "summarize)", index_command.name);
    if (prc != 0) return tb_command_usage_error(&index_command, &err);
    opt->compdb_arg = args->compdb;
    opt->out = args->output;
    opt->build_dir = args->build_dir;
    opt->jobs = args->jobs;
    opt->full = args->full;
    opt->parse_only = args->parse_only;
    opt->quiet = args->quiet;
    opt->verbose = args->verbose;
    names_into(&opt->collectives, &opt->ncollectives, default_collectives,
               args->no_default_collectives ? 0 : sizeof default_collectives / sizeof *default_collectives,
               &args->collectives);
    names_into(&opt->range_push, &opt->nrange_push, default_push, sizeof default_push / sizeof *default_push,
               &args->range_push);
    names_into(&opt->range_pop, &opt->nrange_pop, default_pop, sizeof default_pop / sizeof *default_pop,
               &args->range_pop);
    return -1;
}

void ix_args_free(index_args *args, ix_options *opt) {
    tb_strlist_free(&args->collectives);
    tb_strlist_free(&args->range_push);
    tb_strlist_free(&args->range_pop);
    free(opt->collectives);
    free(opt->range_push);
    free(opt->range_pop);
}
