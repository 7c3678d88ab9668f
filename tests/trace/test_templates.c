// test_templates.c — calls the compiler resolves only per instantiation (fixtures/templates/):
// a call whose arguments depend on a template parameter, a member call on a dependent base,
// a kernel launch inside a launcher template. The indexer links each by name where the
// lookup has one candidate (calls.resolution "name", as clangd's heuristic resolver does)
// and keeps several candidates as candidates ("candidates"), so `chain --from main --to
// ncclAllReduce` passes through the template. Lines come from the fixture's markers.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define TFIX TB_SOURCE_DIR "/tests/trace/fixtures/templates"
#define GRADS TFIX "/grads.cpp"
#define LAUNCHER TFIX "/launcher.cu"
#define WORK TB_TEST_TMPDIR "/test_templates"
#define INDEX WORK "/index.sqlite"
#define CUDA_INDEX WORK "/cuda/index.sqlite"

static sqlite3 *db;
static char *ix_output;
static int ix_status;

// The call of callee at the marker's line made by `caller`: its callee_usr, resolution and
// number of candidates (found 0 when there is no such call).
typedef struct call_row {
    int found;
    char usr[256], resolution[32];
    int candidates;
} call_row;

static call_row call_at(sqlite3 *d, const char *file, const char *caller, const char *callee, const char *marker) {
    call_row r = {0};
    char *sql = sqlite3_mprintf(
        "SELECT coalesce(c.callee_usr, ''), coalesce(c.resolution, ''), coalesce(c.candidates, '') FROM calls c"
        " JOIN functions f ON f.id = c.caller_id WHERE f.name = %Q AND c.callee_name = %Q AND c.line = %d",
        caller, callee, tb_line_of(file, marker));
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(d, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        r.found = 1;
        snprintf(r.usr, sizeof r.usr, "%s", (const char *)sqlite3_column_text(st, 0));
        snprintf(r.resolution, sizeof r.resolution, "%s", (const char *)sqlite3_column_text(st, 1));
        const char *c = (const char *)sqlite3_column_text(st, 2);
        r.candidates = *c ? 1 : 0;
        for (; *c; c++) r.candidates += *c == '\n';
        sqlite3_finalize(st);
    } else if (st) {
        sqlite3_finalize(st);
    }
    sqlite3_free(sql);
    return r;
}

TB_TEST(a_dependent_call_with_one_candidate_is_linked_by_name) {
    TB_REQUIRE(ix_status == 0 && db, "index failed (%d):\n%s", ix_status, ix_output);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM files WHERE path = %Q AND status = 'ok'", GRADS) == 1,
             "grads.cpp parsed without errors:\n%s", ix_output);
    call_row r = call_at(db, GRADS, "reduce_gradients", "ncclAllReduce", "C:ncclAllReduce");
    TB_CHECK(r.found && !strcmp(r.usr, "c:@F@ncclAllReduce") && !strcmp(r.resolution, "name"),
             "ptrs[i] depends on N: ncclAllReduce by name (usr '%s', resolution '%s')", r.usr, r.resolution);
    // the second marker in the file: the class template's member
    char *src = tb_slurp(GRADS);
    TB_REQUIRE(src, "cannot read %s", GRADS);
    const char *first = strstr(src, "C:ncclAllReduce"), *second = first ? strstr(first + 1, "C:ncclAllReduce") : NULL;
    int line = 1;
    for (const char *p = src; second && p < second; p++) line += *p == '\n';
    free(src);
    TB_CHECK(second && tb_index_q_long(db,
                                       "SELECT COUNT(*) FROM calls c JOIN functions f ON f.id = c.caller_id"
                                       " WHERE f.name = 'flush' AND c.callee_usr = 'c:@F@ncclAllReduce'"
                                       " AND c.resolution = 'name' AND c.line = %d",
                                       line) == 1,
             "a member of dependent type as the argument: by name (line %d)", line);
}

TB_TEST(a_plain_structs_inline_member_is_walked) {
    TB_REQUIRE(ix_status == 0 && db, "index failed (%d):\n%s", ix_status, ix_output);
    call_row r = call_at(db, GRADS, "sync", "ncclAllReduce", "C:plain-member");
    TB_CHECK(r.found && !strcmp(r.usr, "c:@F@ncclAllReduce") && !*r.resolution,
             "Stream::sync → ncclAllReduce, resolved by the compiler (usr '%s', resolution '%s')", r.usr, r.resolution);
}

TB_TEST(a_dependent_member_call_is_linked_to_the_base_templates_unique_member) {
    TB_REQUIRE(ix_status == 0 && db, "index failed:\n%s", ix_output);
    call_row r = call_at(db, GRADS, "finish", "flush", "C:flush");
    long want = tb_index_q_long(db, "SELECT COUNT(*) FROM functions WHERE name = 'flush' AND usr = %Q", r.usr);
    TB_CHECK(r.found && want == 1 && !strcmp(r.resolution, "name"),
             "this->flush() → Bucket<T>::flush by name (usr '%s', resolution '%s')", r.usr, r.resolution);
}

TB_TEST(several_candidates_stay_candidates_and_are_listed) {
    TB_REQUIRE(ix_status == 0 && db, "index failed:\n%s", ix_output);
    call_row r = call_at(db, GRADS, "pack_all", "pack", "C:pack");
    TB_CHECK(r.found && !r.usr[0] && !strcmp(r.resolution, "candidates") && r.candidates == 2,
             "pack(p, n) with p of type T*: 2 candidates, no callee (usr '%s', resolution '%s', %d)", r.usr,
             r.resolution, r.candidates);
    char *out;
    int rc = tb_shell(&out, "'%s' callees pack_all --index '%s'", TRACEBOOK, INDEX);
    char want_float[512], want_double[512];
    snprintf(want_float, sizeof want_float, "pack (" TFIX "/comm.h:%d)", tb_line_of(TFIX "/comm.h", "DECL_PACK_FLOAT"));
    snprintf(want_double, sizeof want_double, "pack (" TFIX "/comm.h:%d)",
             tb_line_of(TFIX "/comm.h", "DECL_PACK_DOUBLE"));
    TB_CHECK(rc == 0 && strstr(out, "[unresolved: 2 candidates: pack (") && strstr(out, want_float) &&
                 strstr(out, want_double) && !strstr(out, " → "),
             "callees lists both, links neither:\n%s", out);
    free(out);
}

TB_TEST(chain_from_main_to_the_all_reduce_passes_through_the_templates) {
    TB_REQUIRE(ix_status == 0 && db, "index failed:\n%s", ix_output);
    char *out;
    int rc = tb_shell(&out, "'%s' chain --from main --to ncclAllReduce --index '%s'", TRACEBOOK, INDEX);
    char via_template[256], via_member[256];
    snprintf(via_template, sizeof via_template, "reduce_gradients (" GRADS ":%d) [resolved by name]",
             tb_line_of(GRADS, "C:ncclAllReduce"));
    snprintf(via_member, sizeof via_member, "finish (" GRADS ":%d) [resolved by name]", tb_line_of(GRADS, "C:flush"));
    TB_CHECK(rc == 0 && strstr(out, via_template) && strstr(out, via_member),
             "both paths, each dependent hop marked:\n%s", out);
    free(out);
}

TB_TEST(a_kernel_launcher_template_is_traced_to_the_nccl_call) {
    if (!tb_exists("/usr/local/cuda/include/cuda_runtime.h")) {
        printf("  skipped: no CUDA toolkit at /usr/local/cuda\n");
        return;
    }
    tb_error err;
    tb_mkdir_p(WORK "/cuda", &err);
    tb_write_text(WORK "/cuda/compile_commands.json",
                  "[{\"directory\": \"" TFIX "\", \"command\": \"/usr/local/cuda/bin/nvcc -arch=sm_90 --std c++17"
                  " -I" TFIX " -c launcher.cu -o launcher.o\", \"file\": \"launcher.cu\"}]\n");
    char *out = NULL;
    unlink(CUDA_INDEX);
    int st = tb_shell(&out, "'%s' index --compdb '%s/cuda' --output '%s'", TRACEBOOK, WORK, CUDA_INDEX);
    sqlite3 *cdb = st == 0 ? tb_index_open_ro(CUDA_INDEX) : NULL;
    TB_REQUIRE(cdb, "index failed (%d):\n%s", st, out);
    TB_CHECK(tb_index_q_long(cdb, "SELECT COUNT(*) FROM files WHERE path = %Q AND status = 'ok' AND errors = 0",
                             LAUNCHER) == 1,
             "launcher.cu parses clean, host min/max included:\n%s", out);
    free(out);
    call_row k = call_at(cdb, LAUNCHER, "launch_and_reduce", "scale_kernel", "C:scale_kernel");
    TB_CHECK(k.found && !strncmp(k.usr, "c:@FT@", 6) && !strcmp(k.resolution, "name"),
             "scale_kernel<T><<<...>>>: the kernel template by name (usr '%s', resolution '%s')", k.usr, k.resolution);
    call_row n = call_at(cdb, LAUNCHER, "launch_and_reduce", "ncclAllReduce", "C:ncclAllReduce");
    TB_CHECK(n.found && !strcmp(n.usr, "c:@F@ncclAllReduce") && !strcmp(n.resolution, "name"),
             "x of type T*: ncclAllReduce by name (usr '%s', resolution '%s')", n.usr, n.resolution);
    sqlite3_close(cdb);
    int rc = tb_shell(&out, "'%s' chain --from train_step --to ncclAllReduce --index '%s'", TRACEBOOK, CUDA_INDEX);
    char want[256];
    snprintf(want, sizeof want, "launch_and_reduce (" LAUNCHER ":%d) [resolved by name]",
             tb_line_of(LAUNCHER, "C:ncclAllReduce"));
    TB_CHECK(rc == 0 && strstr(out, want), "the chain through the launcher template:\n%s", out);
    free(out);
}

// A unit at clang's own nesting limits: a class template instantiated 1000 deep (the limit,
// -ftemplate-depth, is 1024) and a body 250 blocks and 250 parentheses deep (-fbracket-depth:
// 256). clang recurses once per level: this unit crashed the indexer with 1 MiB of stack per
// parse, and parses with the 8 MiB libclang gives a parse (IX_PARSE_STACK: the index parses on
// its workers, not on a thread of libclang's; index_workers.h).
TB_TEST(a_unit_at_clangs_nesting_limits_parses_on_the_workers) {
    char *src = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&src, &len);
    TB_REQUIRE(f, "open_memstream");
    fputs("template <int N> struct depth { static const int v = depth<N - 1>::v + 1; };\n"
          "template <> struct depth<0> { static const int v = 0; };\n"
          "void sink(int);\n"
          "int deep_template(void) { sink(depth<1000>::v); return 0; }  // C:sink template\n"
          "int deep_blocks(void) {\n", f);
    for (int i = 0; i < 250; i++) fputc('{', f);
    fputs(" sink(", f);
    for (int i = 0; i < 250; i++) fputc('(', f);
    fputc('1', f);
    for (int i = 0; i < 250; i++) fputc(')', f);
    fputs(");", f);
    for (int i = 0; i < 250; i++) fputc('}', f);
    fputs("  // C:sink blocks\n return 0; }\n", f);
    fclose(f);
    tb_error err;
    TB_REQUIRE(!tb_mkdir_p(WORK "/deep", &err), "%s", err.msg);
    TB_REQUIRE(!tb_write_text(WORK "/deep/deep.cpp", src), "cannot write deep.cpp");
    free(src);
    TB_REQUIRE(!tb_write_text(WORK "/deep/compile_commands.json",
                              "[{\"directory\": \"" WORK "/deep\", \"arguments\": [\"c++\", \"-std=c++17\", \"-c\","
                              " \"deep.cpp\"], \"file\": \"" WORK "/deep/deep.cpp\"}]\n"),
               "cannot write the compilation database");
    unlink(WORK "/deep/index.sqlite");
    char *out;
    int rc = tb_shell(&out, "'%s' index --compdb '%s/deep' --output '%s/deep/index.sqlite' 2>&1", TRACEBOOK, WORK,
                      WORK);
    sqlite3 *d = tb_index_open_ro(WORK "/deep/index.sqlite");
    TB_CHECK(rc == 0 && d, "index: rc %d\n%s", rc, out);
    free(out);
    if (!d) return;
    TB_CHECK(tb_index_q_long(d, "SELECT COUNT(*) FROM files WHERE path = %Q AND status = 'ok'",
                             WORK "/deep/deep.cpp") == 1,
             "deep.cpp parsed without errors");
    TB_CHECK(call_at(d, WORK "/deep/deep.cpp", "deep_template", "sink", "C:sink template").found,
             "deep_template → sink recorded");
    TB_CHECK(call_at(d, WORK "/deep/deep.cpp", "deep_blocks", "sink", "C:sink blocks").found,
             "deep_blocks → sink recorded");
    sqlite3_close(d);
}

int main(void) {
    tb_error err;
    if (tb_mkdir_p(WORK, &err)) printf("  %s\n", err.msg);
    if (tb_write_text(WORK "/compile_commands.json",
                      "[{\"directory\": \"" WORK "\", \"arguments\": [\"c++\", \"-std=c++17\", \"-I\", \"" TFIX
                      "\", \"-c\", \"" GRADS "\"], \"file\": \"" GRADS "\"}]\n"))
        printf("  cannot write the compilation database\n");
    unlink(INDEX);
    ix_status = tb_shell(&ix_output, "'%s' index --compdb '%s' --output '%s'", TRACEBOOK, WORK, INDEX);
    db = tb_index_open_ro(INDEX);
    TB_RUN(a_dependent_call_with_one_candidate_is_linked_by_name);
    TB_RUN(a_plain_structs_inline_member_is_walked);
    TB_RUN(a_dependent_member_call_is_linked_to_the_base_templates_unique_member);
    TB_RUN(several_candidates_stay_candidates_and_are_listed);
    TB_RUN(chain_from_main_to_the_all_reduce_passes_through_the_templates);
    TB_RUN(a_kernel_launcher_template_is_traced_to_the_nccl_call);
    TB_RUN(a_unit_at_clangs_nesting_limits_parses_on_the_workers);
    sqlite3_close(db);
    free(ix_output);
    return tb_test_summary();
}
