// index_compdb.c — the compilation database: loading compile_commands.json, splitting each
// command, and translating it into the arguments libclang parses the file with (nvcc
// commands into clang's CUDA host-only mode). See index.c for what is kept and dropped.
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/xalloc.h"
#include "index_compdb.h"
#include "strmap.h"

#define IX_CUDA_DEFAULT_PATH "/usr/local/cuda"

// ---------------------------------------------------------------------------------------
// Paths

static void normalise_lexically(char *p) {
    // p is absolute: collapse "//", "/./" and "/x/../"
    char *out = p, *in = p;
    while (*in) {
        if (in[0] == '/') {
            while (in[1] == '/') in++;
            if (in[1] == '.' && (in[2] == '/' || in[2] == 0)) {
                in += 2;
                continue;
            }
            if (in[1] == '.' && in[2] == '.' && (in[3] == '/' || in[3] == 0)) {
                in += 3;
                while (out > p && *--out != '/') {}
                continue;
            }
        }
        *out++ = *in++;
    }
    if (out == p) *out++ = '/';
    *out = 0;
}

// realpath(3) of an absolute path, else the path normalised lexically; each path resolved once
// per process (a source is named by every target it links into, a directory by every unit:
// thousands of realpath calls, a readlink per component each). Any thread; the answers live
// until the process ends.
static pthread_mutex_t resolved_lock = PTHREAD_MUTEX_INITIALIZER;
static tb_strmap resolved_map;  // path -> index in resolved_paths
static tb_vec resolved_paths;   // of const char *, in resolved_pool
static tb_pool resolved_pool;

static const char *resolved(const char *path);

// realpath(3) of dir/base when base is a plain file or directory (not a link, not . or ..):
// the directory's resolved path (cached) and the name, for one lstat instead of a readlink per
// component. NULL: ask realpath.
static char *resolve_in_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    if (path[0] != '/' || !slash || slash == path || !slash[1] || !strcmp(slash + 1, ".") || !strcmp(slash + 1, ".."))
        return NULL;
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISLNK(st.st_mode)) return NULL;
    char dir[PATH_MAX];
    size_t n = (size_t)(slash - path);
    if (n >= sizeof dir) return NULL;
    memcpy(dir, path, n);
    dir[n] = 0;
    const char *rd = resolved(dir);
    if (rd[0] != '/') return NULL;
    tb_buf b = {0};
    tb_buf_printf(&b, "%s%s%s", rd, strcmp(rd, "/") ? "/" : "", slash + 1);
    return b.s;  // malloc'd, as realpath's
}

static const char *resolved(const char *path) {
    pthread_mutex_lock(&resolved_lock);
    if (!resolved_paths.what) tb_vec_init(&resolved_paths, sizeof(const char *), "resolved paths");
    int *i = tb_strmap_get(&resolved_map, path);
    const char *r = i ? TB_VEC_AT(&resolved_paths, const char *, *i) : NULL;
    pthread_mutex_unlock(&resolved_lock);
    if (r) return r;
    char *real = resolve_in_dir(path);
    if (!real) real = realpath(path, NULL);
    char *norm = NULL;
    if (!real) {
        norm = tb_xstrdup(path, "path");
        normalise_lexically(norm);
    }
    pthread_mutex_lock(&resolved_lock);
    i = tb_strmap_get(&resolved_map, path);
    if (i) {
        r = TB_VEC_AT(&resolved_paths, const char *, *i);
    } else {
        r = tb_pool_dup(&resolved_pool, real ? real : norm);
        *(const char **)tb_vec_push(&resolved_paths) = r;
        tb_strmap_put(&resolved_map, path, (int)resolved_paths.len - 1);
    }
    pthread_mutex_unlock(&resolved_lock);
    free(real);
    free(norm);
    return r;
}

const char *ix_abspath(tb_pool *p, const char *dir, const char *path) {
    tb_buf b = {0};
    if (path[0] != '/') {
        if (dir && *dir) {
            tb_buf_printf(&b, "%s/", dir);
        } else {
            char cwd[PATH_MAX];
            if (getcwd(cwd, sizeof cwd)) tb_buf_printf(&b, "%s/", cwd);
        }
    }
    tb_buf_printf(&b, "%s", path);
    const char *r = tb_pool_dup(p, resolved(b.s));
    tb_buf_free(&b);
    return r;
}

// ---------------------------------------------------------------------------------------
// Splitting a command line as a POSIX shell would (quotes and backslashes; no expansion).

static int blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int ix_split_command(tb_pool *p, const char *cmd, tb_vec *out) {
    char *w = tb_xmalloc(strlen(cmd) + 1, "a command word");  // no word is longer than the command
    int n = 0;
    const char *s = cmd;
    for (;;) {
        while (blank(*s)) s++;
        if (!*s) break;
        char *o = w;
        while (*s && !blank(*s)) {
            if (*s == '\'') {
                const char *e = strchr(s + 1, '\'');
                if (!e) e = s + strlen(s);
                memcpy(o, s + 1, (size_t)(e - s - 1));
                o += e - s - 1;
                s = *e ? e + 1 : e;
            } else if (*s == '"') {
                s++;
                while (*s && *s != '"') {
                    if (*s == '\\' && s[1] && strchr("\\\"$`\n", s[1])) s++;
                    *o++ = *s++;
                }
                if (*s) s++;
            } else if (*s == '\\' && s[1]) {
                *o++ = s[1];
                s += 2;
            } else {
                *o++ = *s++;
            }
        }
        *(const char **)tb_vec_push(out) = tb_pool_dupn(p, w, (size_t)(o - w));
        n++;
    }
    free(w);
    return n;
}

// ---------------------------------------------------------------------------------------
// Argument translation

static int starts(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static int in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(s, *list)) return 1;
    return 0;
}

// nvcc options that take a value (separate, or joined with '=') and mean nothing to clang's
// host-side parse: dropped with their value.
static const char *const nvcc_drop_with_value[] = {
    "-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code", "-ccbin",
    "--compiler-bindir", "-Xptxas", "--ptxas-options", "-Xnvlink", "--nvlink-options", "-Xfatbin",
    "--fatbin-options", "-Xlinker", "--linker-options", "-Xarchive", "--archive-options", "-Xcudafe",
    "--diag-suppress", "-diag-suppress", "--diag-warn", "-diag-warn", "--diag-error", "-diag-error",
    "-maxrregcount", "--maxrregcount", "-default-stream", "--default-stream", "-t", "--threads", "-rdc",
    "--relocatable-device-code", "-odir", "--output-directory", "--dependency-output", "--keep-dir",
    "-keep-dir", "-time", "--time", "-split-compile", "--split-compile", "-cudart", "--cudart", "-cudadevrt",
    "--cudadevrt", "-ldir", "--library-path", "--library", "-x", "--x", "--machine", "-m", "-Werror",
    "--Werror", "--run-args", "-run-args", "--optimize", "-dopt", "--dopt", "--generate-dependencies-with-compile",
    "-static-global-template-stub", "--static-global-template-stub", NULL};

// nvcc flags without a value that clang does not take: dropped.
static const char *const nvcc_drop[] = {
    "--extended-lambda", "-extended-lambda", "--expt-extended-lambda", "-expt-extended-lambda",
    "--expt-relaxed-constexpr", "-expt-relaxed-constexpr", "--use_fast_math", "-use_fast_math",
    "--use-fast-math", "-lineinfo", "--generate-line-info", "-G", "--device-debug", "-dc", "--device-c", "-dw",
    "--device-w", "-dlink", "--device-link", "-keep", "--keep", "-res-usage", "--resource-usage",
    "-Wno-deprecated-gpu-targets", "-forward-unknown-to-host-compiler", "--forward-unknown-to-host-compiler",
    "-forward-unknown-opts", "--forward-unknown-opts", "--display-error-number", "-err-no",
    "--no-display-error-number", "-no-err-no", "-src-in-ptx", "--source-in-ptx", "-restrict", "--restrict",
    "-lto", "-dlto", "--dlto", "-cuda", "--cuda", "-ptx", "--ptx", "-cubin", "--cubin", "-fatbin", "--fatbin",
    "--compile", "-allow-unsupported-compiler", "--allow-unsupported-compiler", "-MD", "--generate-dependencies",
    "-Wext-lambda-captures-this", "--Wext-lambda-captures-this", NULL};

// nvcc's long names of host options: translated to clang's spelling.
typedef struct { const char *nvcc, *clang; int joined; } nvcc_rename;
static const nvcc_rename nvcc_renames[] = {
    {"--include-path", "-I", 1},   {"--define-macro", "-D", 1},   {"--undefine-macro", "-U", 1},
    {"--system-include", "-isystem", 0}, {"--pre-include", "-include", 0}, {"--std", "-std=", 1},
    {"-std", "-std=", 1},          {"--output-file", "-o", 0},    {"--compiler-options", NULL, 0},
    {"-Xcompiler", NULL, 0},       {NULL, NULL, 0}};

// Whether `word` is option `name`, alone (value in the next word: *joined = NULL) or joined with
// '=' (*joined = the value).
static int is_opt(const char *word, const char *name, const char **joined) {
    size_t n = strlen(name);
    if (strncmp(word, name, n)) return 0;
    if (word[n] == 0) {
        *joined = NULL;
        return 1;
    }
    if (word[n] == '=') {
        *joined = word + n + 1;
        return 1;
    }
    return 0;
}

typedef struct argv_out {
    tb_vec args;  // const char *
    tb_pool *pool;
} argv_out;

static void out_add(argv_out *o, const char *a) { *(const char **)tb_vec_push(&o->args) = a; }

// The host compiler's flags that libclang must not see, or that change what is reported.
// Returns how many words to skip (0: keep the word; 1: drop it; 2: drop it and its value).
static int generic_drop(const char *a) {
    if (a[0] != '-' || !a[1] || !strchr("coMWpsf", a[1])) return 0;  // none of those below
    if (!strcmp(a, "-c") || !strcmp(a, "-o")) return !strcmp(a, "-o") ? 2 : 1;
    if (!strcmp(a, "-MF") || !strcmp(a, "-MT") || !strcmp(a, "-MQ") || !strcmp(a, "-MJ")) return 2;
    if (!strcmp(a, "-M") || !strcmp(a, "-MM") || !strcmp(a, "-MD") || !strcmp(a, "-MMD") || !strcmp(a, "-MP") ||
        !strcmp(a, "-MG"))
        return 1;
    if ((starts(a, "-MF") || starts(a, "-MT") || starts(a, "-MQ") || starts(a, "-MJ")) && strlen(a) > 3) return 1;
    if (!strcmp(a, "-Werror") || starts(a, "-Werror=") || !strcmp(a, "-pedantic-errors") ||
        !strcmp(a, "-Wfatal-errors"))
        return 1;
    if (!strcmp(a, "-save-temps") || starts(a, "-save-temps=") || starts(a, "-fdump-") || !strcmp(a, "-pipe"))
        return 1;
    return 0;
}

// Flags kept by the fallback command line (a second try when the full one does not parse).
static int fallback_keep(const char *a, int *takes_value) {
    static const char *const with_value[] = {"-I", "-D", "-U", "-isystem", "-iquote", "-idirafter",
                                             "-include", "-imacros", "-x", "--sysroot", "-isysroot", NULL};
    *takes_value = 0;
    if (a[0] != '-') return 0;
    *takes_value = in_list(a, with_value);
    if (*takes_value) return 1;
    return starts(a, "-I") || starts(a, "-D") || starts(a, "-U") || starts(a, "-std=") || starts(a, "--std=") ||
           starts(a, "--sysroot=") || starts(a, "-isystem") || starts(a, "-iquote") || starts(a, "-idirafter") ||
           !strcmp(a, "-fopenmp") || !strcmp(a, "-pthread") || !strcmp(a, "-m64") || !strcmp(a, "-m32") ||
           !strcmp(a, "-nostdinc") || starts(a, "--cuda-") || !strcmp(a, "-nocudalib") || !strcmp(a, "-nocudainc");
}

static int is_source_word(tb_pool *p, const char *a, const char *dir, const char *file) {
    if (a[0] == '-') return 0;
    const char *base = strrchr(file, '/');
    const char *abase = strrchr(a, '/');
    if (strcmp(base ? base + 1 : file, abase ? abase + 1 : a)) return 0;  // cheap pre-check
    return !strcmp(ix_abspath(p, dir, a), file);
}

static void add_host_word(argv_out *o, const char *const *words, int n, int *i, const char *dir, const char *file);

// Translates an nvcc word at words[*i]; returns 1 when handled (added or dropped).
static int nvcc_word(argv_out *o, const char *const *words, int n, int *i, const char *dir, const char *file) {
    const char *a = words[*i], *v;
    if (in_list(a, nvcc_drop) || starts(a, "-rdc=") || starts(a, "--relocatable-device-code=") ||
        starts(a, "--ftz=") || starts(a, "-ftz=") || starts(a, "--prec-div=") || starts(a, "-prec-div=") ||
        starts(a, "--prec-sqrt=") || starts(a, "-prec-sqrt=") || starts(a, "--fmad=") || starts(a, "-fmad=") ||
        starts(a, "-arch=") || starts(a, "-code=") || starts(a, "-gencode=") || starts(a, "--gpu-architecture=") ||
        starts(a, "--Werror="))
        return 1;
    for (const char *const *d = nvcc_drop_with_value; *d; d++)
        if (is_opt(a, *d, &v)) {
            // "-Werror" alone is also clang's flag: nvcc's takes a value only when one follows
            if (!v && (!strcmp(*d, "-Werror") || !strcmp(*d, "--Werror")) && (*i + 1 >= n || words[*i + 1][0] == '-'))
                return 1;
            if (!strcmp(*d, "-x") && !v && *i + 1 < n && strcmp(words[*i + 1], "cu")) return 0;  // -x c++ etc.
            if (!v && *i + 1 < n) (*i)++;
            return 1;
        }
    for (const nvcc_rename *r = nvcc_renames; r->nvcc; r++) {
        if (!is_opt(a, r->nvcc, &v)) continue;
        if (!strcmp(r->nvcc, "-std") && !v) {  // nvcc's "-std c++17"; clang's -std=... falls through
            if (*i + 1 >= n) return 1;
            v = words[++*i];
        } else if (!strcmp(r->nvcc, "-std")) {
            return 0;  // -std=c++17: the same in clang
        } else if (!v) {
            if (*i + 1 >= n) return 1;
            v = words[++*i];
        }
        if (!r->clang) {  // -Xcompiler a,b,c: the host compiler's flags, one by one
            tb_vec parts;
            tb_vec_init(&parts, sizeof(const char *), "command words");
            const char *s = v;
            while (*s) {
                const char *e = strchr(s, ',');
                if (!e) e = s + strlen(s);
                if (e > s) *(const char **)tb_vec_push(&parts) = tb_pool_dupn(o->pool, s, (size_t)(e - s));
                s = *e ? e + 1 : e;
            }
            int np = (int)parts.len;
            for (int k = 0; k < np; k++) add_host_word(o, (const char *const *)parts.items, np, &k, dir, file);
            tb_vec_free(&parts);
        } else if (!strcmp(r->clang, "-o")) {
            // dropped with its value
        } else if (r->joined) {
            out_add(o, tb_pool_printf(o->pool, "%s%s", r->clang, v));
        } else {
            out_add(o, r->clang);
            out_add(o, tb_pool_dup(o->pool, v));
        }
        return 1;
    }
    if (!strcmp(a, "--debug")) {
        out_add(o, "-g");
        return 1;
    }
    if (starts(a, "--") && a[2] && !starts(a, "--cuda") && !starts(a, "--sysroot") && !starts(a, "--std")) {
        return 1;  // another nvcc long option clang would reject: dropped alone
    }
    return 0;
}

static void add_host_word(argv_out *o, const char *const *words, int n, int *i, const char *dir, const char *file) {
    const char *a = words[*i];
    int skip = generic_drop(a);
    if (skip) {
        *i += skip - 1;
        return;
    }
    if (is_source_word(o->pool, a, dir, file)) return;
    out_add(o, a);
}

static int exists_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

// Whether clang's resource directory has an omp.h (LLVM's libomp headers installed); when
// not, -fopenmp units get index_unsaved.c's stand-in. Looked at once a run (it was once per
// -fopenmp unit: 108 stat calls over this project).
static int omp_h_found;
static void look_for_omp_h(void) {
    struct stat st;
    omp_h_found = stat(TB_CLANG_RESOURCE_DIR "/include/omp.h", &st) == 0;
}

static int have_clang_omp_h(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, look_for_omp_h);
    return omp_h_found;
}

// Response files: @file (GCC, clang, nvcc) and nvcc's --options-file / -optf FILE, whose
// words replace them (relative to the entry's directory; an unreadable one stays as it is).
static void expand_response_files(tb_pool *p, const char *dir, const char *const *words, int n, int nvcc,
                                  tb_vec *out, int depth) {
    for (int i = 0; i < n; i++) {
        const char *a = words[i], *file = NULL, *v;
        if (i > 0 && a[0] == '@' && a[1])
            file = a + 1;
        else if (i > 0 && nvcc && (is_opt(a, "--options-file", &v) || is_opt(a, "-optf", &v)))
            file = v ? v : (i + 1 < n ? words[++i] : NULL);
        char *text = NULL;
        if (file && depth < 8) {
            FILE *f = fopen(ix_abspath(p, dir, file), "r");
            if (f) {
                tb_buf b = {0};
                char chunk[4096];
                size_t got;
                while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) tb_buf_add(&b, chunk, got);
                fclose(f);
                text = b.s ? b.s : tb_xcalloc(1, 1, "response file text");
            }
        }
        if (!text) {
            *(const char **)tb_vec_push(out) = a;
            continue;
        }
        tb_vec inner;
        tb_vec_init(&inner, sizeof(const char *), "response file words");
        *(const char **)tb_vec_push(&inner) = "";  // a stand-in compiler: expansion starts at 1
        ix_split_command(p, text, &inner);
        free(text);
        tb_vec sub;
        tb_vec_init(&sub, sizeof(const char *), "response file words");
        expand_response_files(p, dir, (const char *const *)inner.items, (int)inner.len, nvcc, &sub, depth + 1);
        for (size_t k = 1; k < sub.len; k++) *(const char **)tb_vec_push(out) = TB_VEC_AT(&sub, const char *, k);
        tb_vec_free(&sub);
        tb_vec_free(&inner);
    }
}

// words[0] is the compiler.
static void translate(ix_compdb *db, ix_tu *tu, const char *const *words, int n) {
    const char *compiler = n ? words[0] : "";
    const char *cbase = strrchr(compiler, '/');
    cbase = cbase ? cbase + 1 : compiler;
    int nvcc = ends_with(cbase, "nvcc") || ends_with(cbase, "nvcc.exe");
    tu->cuda = nvcc || ends_with(tu->file, ".cu");

    tb_vec expanded;
    tb_vec_init(&expanded, sizeof(const char *), "expanded arguments");
    expand_response_files(&db->pool, tu->directory, words, n, nvcc, &expanded, 0);
    words = (const char *const *)expanded.items;
    n = (int)expanded.len;

    argv_out o = {.pool = &db->pool};
    tb_vec_init(&o.args, sizeof(const char *), "clang arguments");
    for (int i = 1; i < n; i++) {
        if (nvcc && nvcc_word(&o, words, n, &i, tu->directory, tu->file)) continue;
        add_host_word(&o, words, n, &i, tu->directory, tu->file);
    }
    tb_vec_free(&expanded);
    // What every parse gets.
    static const char *const common[] = {"-resource-dir", TB_CLANG_RESOURCE_DIR, "-ferror-limit=0", "-w", NULL};
    tb_vec extra;
    tb_vec_init(&extra, sizeof(const char *), "extra arguments");
    for (const char *const *c = common; *c; c++) *(const char **)tb_vec_push(&extra) = *c;
    *(const char **)tb_vec_push(&extra) = tb_pool_printf(&db->pool, "-working-directory=%s", tu->directory);
    int openmp = 0;
    for (size_t i = 0; i < o.args.len; i++) {
        const char *a = TB_VEC_AT(&o.args, const char *, i);
        openmp |= !strcmp(a, "-fopenmp") || starts(a, "-fopenmp=");
    }
    if (tu->cuda || (openmp && !have_clang_omp_h())) {
        *(const char **)tb_vec_push(&extra) = "-idirafter";
        *(const char **)tb_vec_push(&extra) = IX_STUB_DIR;
    }
    if (tu->cuda) {
        static const char *const cuda[] = {"-x", "cuda", "--cuda-host-only", "-nocudalib", "-include",
                                           IX_STUB_DIR "/tracebook_cuda.h", NULL};
        for (const char *const *c = cuda; *c; c++) *(const char **)tb_vec_push(&extra) = *c;
        const char *cuda_path = getenv("CUDA_PATH");
        if (!cuda_path || !exists_dir(cuda_path)) cuda_path = getenv("CUDA_HOME");
        if (!cuda_path || !exists_dir(cuda_path)) cuda_path = IX_CUDA_DEFAULT_PATH;
        if (exists_dir(cuda_path)) {
            *(const char **)tb_vec_push(&extra) = tb_pool_printf(&db->pool, "--cuda-path=%s", cuda_path);
            // nvcc.profile puts CCCL (cub, thrust, cuda/std; include/cccl since CUDA 13) on the
            // system include path; clang does not know it.
            const char *cccl = tb_pool_printf(&db->pool, "%s/include/cccl", cuda_path);
            if (exists_dir(cccl)) {
                *(const char **)tb_vec_push(&extra) = "-isystem";
                *(const char **)tb_vec_push(&extra) = cccl;
            }
        }
    }

    // Full command line.
    tu->nargs = (int)(o.args.len + extra.len);
    tu->args = tb_pool_alloc(&db->pool, sizeof(const char *) * ((size_t)tu->nargs + 1));
    size_t k = 0;
    for (size_t i = 0; i < o.args.len; i++) tu->args[k++] = TB_VEC_AT(&o.args, const char *, i);
    for (size_t i = 0; i < extra.len; i++) tu->args[k++] = TB_VEC_AT(&extra, const char *, i);
    tu->args[k] = NULL;

    // Fallback: only what decides which code is seen.
    tb_vec fb;
    tb_vec_init(&fb, sizeof(const char *), "reduced arguments");
    for (size_t i = 0; i < o.args.len; i++) {
        const char *a = TB_VEC_AT(&o.args, const char *, i);
        int takes_value;
        if (!fallback_keep(a, &takes_value)) continue;
        *(const char **)tb_vec_push(&fb) = a;
        if (takes_value && i + 1 < o.args.len) *(const char **)tb_vec_push(&fb) = TB_VEC_AT(&o.args, const char *, ++i);
    }
    for (size_t i = 0; i < extra.len; i++) *(const char **)tb_vec_push(&fb) = TB_VEC_AT(&extra, const char *, i);
    tu->nfallback = (int)fb.len;
    tu->fallback = tb_pool_alloc(&db->pool, sizeof(const char *) * (fb.len + 1));
    for (size_t i = 0; i < fb.len; i++) tu->fallback[i] = TB_VEC_AT(&fb, const char *, i);
    tu->fallback[fb.len] = NULL;
    tb_vec_free(&fb);
    tb_vec_free(&extra);
    tb_vec_free(&o.args);
}

// ---------------------------------------------------------------------------------------
// Loading

int ix_compdb_load(ix_compdb *db, const char *arg, tb_error *err) {
    memset(db, 0, sizeof *db);
    const char *path = ix_abspath(&db->pool, NULL, arg);
    struct stat st;
    if (stat(path, &st) != 0)
        return tb_fail(err, "%s: no compilation database there (%s; configure with CMake, which writes "
                            "compile_commands.json with CMAKE_EXPORT_COMPILE_COMMANDS=ON)",
                       arg, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        path = tb_pool_printf(&db->pool, "%s/compile_commands.json", path);
        if (stat(path, &st) != 0)
            return tb_fail(err, "%s: no compilation database there (%s; configure with CMake, which writes "
                                "compile_commands.json with CMAKE_EXPORT_COMPILE_COMMANDS=ON)",
                           path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode))
        return tb_fail(err, "%s: cannot read the compilation database: it is a directory", path);
    FILE *probe = fopen(path, "r");
    if (!probe) return tb_fail(err, "%s: cannot read the compilation database: %s", path, strerror(errno));
    fclose(probe);
    db->path = path;
    const char *slash = strrchr(path, '/');
    db->dir = slash == path ? "/" : tb_pool_dupn(&db->pool, path, (size_t)(slash - path));

    json_error_t jerr;
    json_t *root = tb_json_load_file(path, 0, &jerr);
    if (!root)
        return tb_fail(err, "%s:%d:%d: malformed compilation database: %s", path, jerr.line, jerr.column,
                       jerr.text);
    if (!json_is_array(root)) {
        json_decref(root);
        return tb_fail(err, "%s: malformed compilation database: the top level is not an array of entries", path);
    }
    size_t n = json_array_size(root);
    if (n == 0) {
        json_decref(root);
        return tb_fail(err, "%s: the compilation database has no entries", path);
    }
    db->tus = tb_xcalloc(n, sizeof *db->tus, "translation units");
    tb_strmap seen;
    tb_strmap_init(&seen);
    tb_vec words;
    tb_vec_init(&words, sizeof(const char *), "command words");
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(root, i);
        json_t *jdir = json_object_get(e, "directory"), *jfile = json_object_get(e, "file");
        json_t *jargs = json_object_get(e, "arguments"), *jcmd = json_object_get(e, "command");
        const char *bad = !json_is_object(e)                    ? "not an object"
                          : !json_is_string(jdir)               ? "no \"directory\" string"
                          : !json_is_string(jfile)              ? "no \"file\" string"
                          : !(json_is_array(jargs) || json_is_string(jcmd)) ? "neither \"arguments\" nor \"command\""
                                                                            : NULL;
        if (bad) {
            rc = tb_fail(err, "%s: malformed compilation database: entry %zu: %s", path, i, bad);
            break;
        }
        ix_tu tu = {0};
        tu.directory = ix_abspath(&db->pool, db->dir, json_string_value(jdir));  // relative: to the database
        tu.file = ix_abspath(&db->pool, tu.directory, json_string_value(jfile));
        if (tb_strmap_get(&seen, tu.file)) {  // the same file in two targets: indexed once
            db->nduplicates++;
            continue;
        }
        tb_strmap_put(&seen, tu.file, 1);
        words.len = 0;
        if (json_is_array(jargs)) {
            for (size_t k = 0; k < json_array_size(jargs); k++) {
                json_t *w = json_array_get(jargs, k);
                if (!json_is_string(w)) {
                    bad = "an argument that is not a string";
                    break;
                }
                *(const char **)tb_vec_push(&words) = tb_pool_dup(&db->pool, json_string_value(w));
            }
        } else {
            ix_split_command(&db->pool, json_string_value(jcmd), &words);
        }
        if (bad || words.len == 0) {
            rc = tb_fail(err, "%s: malformed compilation database: entry %zu (%s): %s", path, i, tu.file,
                         bad ? bad : "an empty command");
            break;
        }
        translate(db, &tu, (const char *const *)words.items, (int)words.len);
        db->tus[db->ntus++] = tu;
    }
    tb_vec_free(&words);
    tb_strmap_free(&seen);
    json_decref(root);
    if (rc) ix_compdb_free(db);
    return rc;
}

void ix_compdb_free(ix_compdb *db) {
    free(db->tus);
    tb_pool_free(&db->pool);
    memset(db, 0, sizeof *db);
}
