// test_provenance.c — experiments/provenance: git state, worktree + patch replay, SHA-256,
// file-tree hashes, environment allow- and deny-lists and redaction, host facts. The git repositories are made with
// libgit2 itself (no git CLI), under TB_TEST_TMPDIR/provenance.
#define _GNU_SOURCE  // nftw's FTW_DEPTH / FTW_PHYS

#include <errno.h>
#include <ftw.h>
#include <git2.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "records/provenance.h"
#include "tb_shell.h"
#include "tb_test.h"

#define BASE TB_TEST_TMPDIR "/provenance"

// ---------------------------------------------------------------------------------------
// Helpers

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static void rm_rf(const char *path) {
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static char *path_of(const char *dir, const char *rel) {
    static char buf[8][PATH_MAX];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, PATH_MAX, "%s/%s", dir, rel);
    return p;
}

// Writes len bytes (or strlen when len is (size_t)-1), creating the parent directories.
static int write_bytes(const char *path, const void *data, size_t len) {
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    tb_error err;
    if (slash) {
        *slash = '\0';
        if (tb_mkdir_p(parent, &err)) return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = len == (size_t)-1 ? strlen(data) : len;
    int rc = fwrite(data, 1, n, f) == n ? 0 : -1;
    return fclose(f) || rc ? -1 : 0;
}

static int write_text(const char *path, const char *text) {
    return write_bytes(path, text, (size_t)-1);
}

static int file_is(const char *path, const char *text) {
    char *s = tb_slurp_len(path, NULL);
    int ok = s && !strcmp(s, text);
    free(s);
    return ok;
}

// 1 when the JSON array holds exactly these strings in this order (NULL-terminated).
static int array_is(const json_t *arr, const char *const *want) {
    size_t n = 0;
    while (want[n]) n++;
    if (!json_is_array(arr) || json_array_size(arr) != n) return 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(arr, i));
        if (!s || strcmp(s, want[i])) return 0;
    }
    return 1;
}

static const char *sv(const json_t *j, const char *fallback) {
    const char *s = json_string_value(j);
    return s ? s : fallback;
}

static char *dump(const json_t *j) {
    static char buf[4096];
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    snprintf(buf, sizeof buf, "%s", s ? s : "(null)");
    free(s);
    return buf;
}

// Stages `paths` (NULL-terminated) and commits the index on HEAD; *out the new commit.
static int commit_paths(git_repository *repo, const char *const *paths, const char *msg, git_oid *out) {
    git_index *idx = NULL;
    git_tree *tree = NULL;
    git_commit *parent = NULL;
    git_signature *sig = NULL;
    git_oid tree_id, head_id;
    int rc = git_repository_index(&idx, repo);
    for (size_t i = 0; !rc && paths[i]; i++) rc = git_index_add_bypath(idx, paths[i]);
    if (!rc) rc = git_index_write(idx);
    if (!rc) rc = git_index_write_tree(&tree_id, idx);
    if (!rc) rc = git_tree_lookup(&tree, repo, &tree_id);
    if (!rc && git_reference_name_to_id(&head_id, repo, "HEAD") == 0) rc = git_commit_lookup(&parent, repo, &head_id);
    if (!rc) rc = git_signature_new(&sig, "Tracebook Test", "test@example.com", 1700000000, 0);
    const git_commit *parents[1] = {parent};
    if (!rc) rc = git_commit_create(out, repo, "HEAD", sig, sig, NULL, msg, tree, parent ? 1 : 0, parents);
    if (rc) {
        const git_error *e = git_error_last();
        printf("  libgit2: %s\n", e && e->message ? e->message : "?");
    }
    git_signature_free(sig);
    git_commit_free(parent);
    git_tree_free(tree);
    git_index_free(idx);
    return rc;
}

// A repository at `dir` on branch "main" with two commits:
//   c1: a.txt "one\n", sub/b.txt "bee\n", bin.dat (binary), .gitignore "*.log\nbuild/\n"
//   c2: a.txt "two\n", c.txt "see\n"
static const unsigned char bin_v1[] = {0, 1, 2, 3, 0xff, 0xfe, 0, 'x', '\n', 0, 7};

static int make_repo(const char *dir, char c1[41], char c2[41]) {
    rm_rf(dir);
    git_repository *repo = NULL;
    git_repository_init_options io;
    git_repository_init_options_init(&io, GIT_REPOSITORY_INIT_OPTIONS_VERSION);
    io.flags = GIT_REPOSITORY_INIT_MKPATH;
    io.initial_head = "main";
    if (git_repository_init_ext(&repo, dir, &io)) return -1;
    git_oid o1, o2;
    int rc = write_text(path_of(dir, "a.txt"), "one\n") || write_text(path_of(dir, "sub/b.txt"), "bee\n") ||
             write_bytes(path_of(dir, "bin.dat"), bin_v1, sizeof bin_v1) ||
             write_text(path_of(dir, ".gitignore"), "*.log\nbuild/\n");
    const char *p1[] = {"a.txt", "sub/b.txt", "bin.dat", ".gitignore", NULL};
    if (!rc) rc = commit_paths(repo, p1, "first", &o1);
    if (!rc) rc = write_text(path_of(dir, "a.txt"), "two\n") || write_text(path_of(dir, "c.txt"), "see\n");
    const char *p2[] = {"a.txt", "c.txt", NULL};
    if (!rc) rc = commit_paths(repo, p2, "second", &o2);
    if (!rc) {
        git_oid_tostr(c1, 41, &o1);
        git_oid_tostr(c2, 41, &o2);
    }
    git_repository_free(repo);
    return rc;
}

// The dirty state of the brief: a.txt modified, notes.txt untracked, debug.log and
// build/out.o ignored.
static int make_dirty(const char *dir) {
    return write_text(path_of(dir, "a.txt"), "two\nthree\n") || write_text(path_of(dir, "notes.txt"), "todo\n") ||
           write_text(path_of(dir, "debug.log"), "noise\n") || write_text(path_of(dir, "build/out.o"), "obj\n");
}

static int same_path(const char *a, const char *b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb);
}

// ---------------------------------------------------------------------------------------
// SHA-256

TB_TEST(test_sha256_known_vectors) {
    char hex[65];
    tb_sha256_hex("abc", 3, hex);
    TB_CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "sha256(abc) = %s", hex);
    tb_sha256_hex("", 0, hex);
    TB_CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "sha256('') = %s", hex);
}

TB_TEST(test_sha256_file_matches_bytes) {
    // larger than the 64 KiB read chunk, with NUL bytes, not a multiple of the chunk
    size_t n = 3 * 65536 + 123;
    unsigned char *buf = malloc(n);
    TB_REQUIRE(buf != NULL, "malloc");
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
    const char *path = BASE "/sha/blob.bin";
    TB_REQUIRE(write_bytes(path, buf, n) == 0, "write %s", path);
    char want[65], got[65];
    tb_sha256_hex(buf, n, want);
    tb_error err = {{0}};
    TB_CHECK(tb_sha256_file(path, got, &err) == 0, "%s", err.msg);
    TB_CHECK(!strcmp(got, want), "file %s vs bytes %s", got, want);

    const char *empty = BASE "/sha/empty";
    TB_REQUIRE(write_bytes(empty, "", 0) == 0, "write %s", empty);
    TB_CHECK(tb_sha256_file(empty, got, &err) == 0, "%s", err.msg);
    TB_CHECK(!strcmp(got, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "empty file: %s", got);

    const char *missing = BASE "/sha/no-such-file";
    TB_CHECK(tb_sha256_file(missing, got, &err) == -1, "missing file hashed");
    TB_CHECK(strstr(err.msg, missing) != NULL, "error does not name the path: %s", err.msg);
    free(buf);
}

// ---------------------------------------------------------------------------------------
// File tree

TB_TEST(test_hash_tree_sorted_nested_skips_top_manifest) {
    const char *dir = BASE "/tree";
    rm_rf(dir);
    TB_REQUIRE(!write_text(path_of(dir, "manifest.json"), "{}\n") && !write_text(path_of(dir, "b.txt"), "b\n") &&
                   !write_text(path_of(dir, "a/z.txt"), "z\n") && !write_text(path_of(dir, "a/b/c.txt"), "c\n") &&
                   !write_text(path_of(dir, "sub/manifest.json"), "nested\n") &&
                   !write_text(path_of(dir, "a.txt"), "a\n"),
               "write tree");
    TB_REQUIRE(symlink("b.txt", path_of(dir, "link")) == 0, "symlink: %s", strerror(errno));
    TB_REQUIRE(tb_mkdir_p(path_of(dir, "empty/dir"), NULL) == 0, "mkdir");

    json_t *files = NULL;
    tb_error err = {{0}};
    TB_REQUIRE(tb_hash_tree(dir, "manifest.json", &files, &err) == 0, "%s", err.msg);
    const char *want[] = {"a.txt", "a/b/c.txt", "a/z.txt", "b.txt", "sub/manifest.json", NULL};
    size_t i = 0;
    const char *key;
    json_t *val;
    int order_ok = json_object_size(files) == 5;
    json_object_foreach(files, key, val) {
        if (!want[i] || strcmp(key, want[i])) order_ok = 0;
        i++;
        char hex[65];
        tb_error e2;
        TB_CHECK(tb_sha256_file(path_of(dir, key), hex, &e2) == 0 && !strcmp(hex, json_string_value(val)),
                 "%s: %s vs %s", key, json_string_value(val), hex);
    }
    TB_CHECK(order_ok, "keys not exactly the sorted regular files: %s", dump(files));
    TB_CHECK(!json_object_get(files, "manifest.json"), "top-level manifest.json not skipped");
    TB_CHECK(!json_object_get(files, "link"), "symlink listed");
    json_decref(files);

    TB_REQUIRE(tb_hash_tree(dir, NULL, &files, &err) == 0, "%s", err.msg);
    TB_CHECK(json_object_size(files) == 6 && json_object_get(files, "manifest.json"), "skip NULL: %s", dump(files));
    json_decref(files);

    const char *missing = BASE "/tree-missing";
    files = (json_t *)1;
    TB_CHECK(tb_hash_tree(missing, NULL, &files, &err) == -1, "missing dir hashed");
    TB_CHECK(files == NULL, "files not NULL after failure");
    TB_CHECK(strstr(err.msg, missing) != NULL, "error does not name the directory: %s", err.msg);
}

// ---------------------------------------------------------------------------------------
// Environment and host

TB_TEST(test_environment_deny_list) {
    char *env[] = {"PATH=/usr/bin", "MY_API_TOKEN=t0k", "aws_secret_key=s3cr3t", "DB_PASSWORD=pw",
                   "HOME=/home/x",  "NOEQUALS",         "PATH=/second",          "EMPTY=",
                   "Gh_Credentials_File=f", "X=a=b", NULL};
    // every name allowed, so that only the deny-list decides (the allow-list is tested below)
    const char *everything[] = {"*", NULL};
    json_t *o = tb_environment_json(env, everything, tb_default_env_deny, NULL);
    TB_REQUIRE(o != NULL, "NULL");
    TB_CHECK(!strcmp(sv(json_object_get(o, "PATH"), ""), "/usr/bin"), "PATH (first wins): %s", dump(o));
    TB_CHECK(json_object_get(o, "HOME") != NULL, "HOME dropped: %s", dump(o));
    TB_CHECK(!strcmp(sv(json_object_get(o, "EMPTY"), "?"), ""), "EMPTY: %s", dump(o));
    TB_CHECK(!strcmp(sv(json_object_get(o, "X"), ""), "a=b"), "X: %s", dump(o));
    TB_CHECK(!json_object_get(o, "MY_API_TOKEN"), "token kept");
    TB_CHECK(!json_object_get(o, "aws_secret_key"), "lower-case secret kept");
    TB_CHECK(!json_object_get(o, "DB_PASSWORD"), "password kept");
    TB_CHECK(!json_object_get(o, "Gh_Credentials_File"), "credential kept");
    TB_CHECK(!json_object_get(o, "NOEQUALS"), "entry without '=' kept");
    TB_CHECK(json_object_size(o) == 4, "exactly PATH HOME EMPTY X: %s", dump(o));
    json_decref(o);

    o = tb_environment_json(env, everything, NULL, NULL);  // NULL = the default list
    TB_CHECK(o && json_object_size(o) == 4 && !json_object_get(o, "DB_PASSWORD"), "NULL deny: %s", dump(o));
    json_decref(o);

    const char *only_home[] = {"ho*", NULL};
    o = tb_environment_json(env, everything, only_home, NULL);
    TB_CHECK(o && !json_object_get(o, "HOME") && json_object_get(o, "MY_API_TOKEN"), "custom deny: %s", dump(o));
    json_decref(o);

    const char *none[] = {NULL};
    o = tb_environment_json(env, everything, none, NULL);
    TB_CHECK(o && json_object_size(o) == 8, "empty deny list keeps all 8 names: %s", dump(o));
    json_decref(o);
}

// By default only the allow-list is recorded: what changes the engine's arithmetic or where
// its code comes from. Everything else is left out, and the filter says which names (never
// their values) and under which globs.
TB_TEST(test_environment_records_only_the_allow_list_by_default) {
    char *env[] = {"PATH=/usr/bin",          "OMP_NUM_THREADS=4",   "OPENBLAS_CORETYPE=Haswell",
                   "GOMP_SPINCOUNT=0",       "CUDA_VISIBLE_DEVICES=0,1", "NCCL_DEBUG=INFO",
                   "TB_NOTE=x",              "LANG=C.UTF-8",        "LC_ALL=C",
                   "LD_LIBRARY_PATH=/opt/lib", "PKG_CONFIG_PATH=/opt/pc", "LUA_PATH=./?.lua",
                   "HOME=/home/x",           "SENTRY_DSN=https://3f2a9c1e5b7d4e8f@o1.ingest.sentry.io/45",
                   "MY_PASSWD=hunter2-Correct", "HOME=/again",      "TB_API_KEY=k3y",
                   "path=/lower/case/is/another/name", NULL};
    json_t *filter = NULL;
    json_t *o = tb_environment_json(env, NULL, NULL, &filter);
    TB_REQUIRE(o && filter, "NULL");
    const char *kept[] = {"PATH", "OMP_NUM_THREADS", "OPENBLAS_CORETYPE", "GOMP_SPINCOUNT", "CUDA_VISIBLE_DEVICES",
                          "NCCL_DEBUG", "TB_NOTE", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "LUA_PATH"};
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        TB_CHECK(json_object_get(o, kept[i]) != NULL, "%s is on the allow-list: %s", kept[i], dump(o));
    TB_CHECK(!strcmp(sv(json_object_get(o, "OMP_NUM_THREADS"), ""), "4"), "value verbatim: %s", dump(o));
    TB_CHECK(json_object_size(o) == sizeof kept / sizeof *kept, "nothing else: %s", dump(o));
    TB_CHECK(!json_object_get(o, "TB_API_KEY"), "the deny-list wins over an allow glob: %s", dump(o));
    TB_CHECK(json_integer_value(json_object_get(filter, "left_out")) == 5, "HOME SENTRY_DSN MY_PASSWD TB_API_KEY path "
             "left out, HOME once: %s", dump(filter));
    json_t *names = json_object_get(filter, "left_out_names");
    TB_CHECK(json_array_size(names) == 5 && !strcmp(sv(json_array_get(names, 0), ""), "HOME") &&
                 !strcmp(sv(json_array_get(names, 1), ""), "MY_PASSWD") &&
                 !strcmp(sv(json_array_get(names, 2), ""), "SENTRY_DSN") &&
                 !strcmp(sv(json_array_get(names, 3), ""), "TB_API_KEY") &&
                 !strcmp(sv(json_array_get(names, 4), ""), "path"),
             "left-out names sorted: %s", dump(filter));
    char *text = json_dumps(filter, JSON_COMPACT);
    TB_CHECK(text && !strstr(text, "hunter2") && !strstr(text, "sentry.io") && !strstr(text, "/home/x"),
             "the filter holds names, never values: %s", text);
    free(text);
    TB_CHECK(json_array_size(json_object_get(filter, "allow")) > 0 &&
                 !strcmp(sv(json_array_get(json_object_get(filter, "deny"), 0), ""), "*PASS*"),
             "the globs applied are recorded: %s", dump(filter));
    json_decref(o);
    json_decref(filter);

    const char *more[] = {"HOME", "SENTRY_*", NULL};
    const char **allow = tb_globs_with(tb_default_env_allow, more, 2);
    o = tb_environment_json(env, allow, NULL, NULL);
    TB_CHECK(o && !strcmp(sv(json_object_get(o, "HOME"), ""), "/home/x") && json_object_get(o, "PATH"),
             "added names and globs are recorded beside the defaults: %s", dump(o));
    TB_CHECK(o && !json_object_get(o, "SENTRY_DSN"), "an allowed glob does not admit a denied name (*DSN*): %s",
             dump(o));
    json_decref(o);
    free(allow);
}

// A value that carries credentials is not recorded, whatever its name: the marker says why.
TB_TEST(test_credential_values_are_redacted_even_for_allowed_names) {
    static const char *const secret[][2] = {
        {"postgres://app:Pg-s3cr3t-pw@db.internal:5432/prod", "credentials in URL"},
        {"http://proxyuser:Pr0xy-word@proxy.corp:3128", "credentials in URL"},
        {"https://x-access-token:ghs_27D8f53G303d7023F8821d949458Bf289C5b@github.com/org/repo.git",
         "credentials in URL"},
        {"git+ssh://deploy:d3ploy-pw@git.example.com/org/repo.git", "credentials in URL"},
        {"redis://:only-a-password@cache:6379/0", "credentials in URL"},
        {"mirror-a,https://bob:S3cr3t@mirror.example.com/simple", "credentials in URL"},
        {"https://ghp_Zy9xW8vU7tS6rQ5pO4nM3lK2jI1hG0fE9dC8@github.com/org/repo.git", "ghp_"},
        {"ghp_Zy9xW8vU7tS6rQ5pO4nM3lK2jI1hG0fE9dC8", "ghp_"},
        {"gho_27D8f53G303d7023F8821d949458Bf289C5b", "gho_"},
        {"ghs_27D8f53G303d7023F8821d949458Bf289C5b", "ghs_"},
        {"github_pat_11ABCDEFG0abcdefghijkl_MNOPQRSTUVWXYZ0123456789abcdefghijklmnopqrstuvwx", "github_pat_"},
        {"glpat-xR7kP2mQ9vL4nW8sT3yZ", "glpat-"},
        {"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", "hf_"},
        {"xoxb-2048193658-4172093816205-Qn3kWmZ8pL5vR2xT9yB7cD4f", "Slack"},
        {"xoxp-1234567890-1234567890123-abcdef123456", "Slack"},
        {"AKIAIOSFODNN7EXAMPLE", "AWS access key id (AKIA"},
        {"ASIAJ4K2L6M8N0P2Q4R6", "AWS access key id (ASIA"},
        {"Bearer sk-proj-Ab3De5Gh7Jk9Lm1Np3Qr5St7Uv9Wx1Yz", "API key (sk-"},
        {"npm_Ab3De5Gh7Jk9Lm1Np3Qr5St7Uv9Wx1Yz3Bc5D", "npm_"},
        // a URL's user alone is redacted too: a DSN's key, a token passed as the user name
        {"ssh://git@github.com/org/repo.git", "user name in URL"},
        {"https://3f2a9c1e5b7d4e8f@o1.ingest.sentry.io/45", "user name in URL"},
        {"https://deploytoken@gitlab.example.com/org/repo.git", "user name in URL"},
        {"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "JSON Web Token"},
        {"Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ0YiJ9.c2lnbmF0dXJlLWJ5dGVz", "JSON Web Token"},
    };
    for (size_t i = 0; i < sizeof secret / sizeof *secret; i++) {
        const char *m = tb_credential_marker(secret[i][0]);
        TB_CHECK(m && !strncmp(m, "<redacted: ", 11) && strstr(m, secret[i][1]), "'%s' gives %s, want a marker "
                 "naming %s", secret[i][0], m ? m : "NULL", secret[i][1]);
    }
    static const char *const clean[] = {
        "/usr/local/bin:/usr/bin:/bin", "/data/hf_cache", "/mnt/sk-learn-datasets-archive-2024",
        "git@github.com:org/repo.git", "http://proxy.corp:3128", "https://[::1]:8443/path", "C.UTF-8", "0,1",
        "disk-0123456789abcdefABCDEF", "MASKIAIOSFODNN7EXAMPLEX", "AKIAIOSFODNN7EXAMPLE2", "user@example.com",
        "eyJ.short.x", "/data/eyJsomething", "",
    };
    for (size_t i = 0; i < sizeof clean / sizeof *clean; i++) {
        const char *m = tb_credential_marker(clean[i]);
        TB_CHECK(!m, "'%s' is no credential, got %s", clean[i], m);
    }

    char *env[] = {"TB_MIRROR=https://bob:S3cr3t-tb@mirror.example.com/simple", "OMP_NUM_THREADS=2",
                   "CUDA_TOKENLESS=ghp_Zy9xW8vU7tS6rQ5pO4nM3lK2jI1hG0fE9dC8", NULL};
    const char *no_deny[] = {NULL};
    json_t *filter = NULL, *o = tb_environment_json(env, NULL, no_deny, &filter);
    TB_REQUIRE(o && filter, "NULL");
    TB_CHECK(!strcmp(sv(json_object_get(o, "TB_MIRROR"), ""), "<redacted: credentials in URL>"), "TB_MIRROR: %s",
             dump(o));
    TB_CHECK(!strcmp(sv(json_object_get(o, "CUDA_TOKENLESS"), ""), "<redacted: token (ghp_...)>"), "CUDA_TOKENLESS: %s",
             dump(o));
    TB_CHECK(!strcmp(sv(json_object_get(o, "OMP_NUM_THREADS"), ""), "2"), "a clean value is kept: %s", dump(o));
    json_t *red = json_object_get(filter, "redacted");
    TB_CHECK(json_array_size(red) == 2 && !strcmp(sv(json_array_get(red, 0), ""), "CUDA_TOKENLESS") &&
                 !strcmp(sv(json_array_get(red, 1), ""), "TB_MIRROR"),
             "the filter names the redacted variables: %s", dump(filter));
    char *text = json_dumps(o, JSON_COMPACT);
    TB_CHECK(text && !strstr(text, "S3cr3t") && !strstr(text, "Zy9xW8vU7"), "no secret in %s", text);
    free(text);
    json_decref(o);
    json_decref(filter);
}

// Every name the default deny-list covers is left out under an allowed prefix (TB_*, OMP_*),
// in any case, whatever its value looks like.
TB_TEST(test_every_denied_name_is_left_out_under_allowed_prefixes) {
    static const char *const words[] = {"PASS", "PWD", "AUTH", "SECRET", "TOKEN", "KEY", "CREDENTIAL", "DSN", "COOKIE",
                                        "SESSION"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        char upper[64], lower[64], inner[64];
        snprintf(upper, sizeof upper, "TB_%s=plain-value", words[i]);
        snprintf(inner, sizeof inner, "OMP_MY_%s_X=plain-value", words[i]);
        snprintf(lower, sizeof lower, "TB_x%s=plain-value", words[i]);
        for (char *p = lower + 4; *p && *p != '='; p++) *p = (char)(*p - 'A' + 'a');
        char *env[] = {upper, inner, lower, "TB_KEPT=1", NULL};
        json_t *o = tb_environment_json(env, NULL, NULL, NULL);
        TB_CHECK(o && json_object_size(o) == 1 && json_object_get(o, "TB_KEPT"), "%s: only TB_KEPT is kept: %s",
                 words[i], dump(o));
        json_decref(o);
    }
}

TB_TEST(test_host_json) {
    json_t *h = tb_host_json();
    TB_REQUIRE(h != NULL, "NULL");
    json_t *cores = json_object_get(h, "cores"), *mem = json_object_get(h, "memory_bytes");
    TB_CHECK(json_is_integer(cores) && json_integer_value(cores) >= 1, "cores: %s", dump(h));
    TB_CHECK(json_is_integer(mem) && json_integer_value(mem) > 0, "memory_bytes: %s", dump(h));
    TB_CHECK(json_is_string(json_object_get(h, "hostname")), "hostname: %s", dump(h));
    TB_CHECK(json_is_array(json_object_get(h, "gpus")), "gpus: %s", dump(h));
    const char *compiler = json_string_value(json_object_get(h, "compiler"));
    TB_CHECK(compiler && (!strncmp(compiler, "gcc ", 4) || !strncmp(compiler, "clang ", 6)), "compiler: %s", dump(h));
    const char *bt = json_string_value(json_object_get(h, "build_type"));
#ifdef NDEBUG
    TB_CHECK(bt && !strcmp(bt, "Release"), "build_type: %s", dump(h));
#else
    TB_CHECK(bt && !strcmp(bt, "Debug"), "build_type: %s", dump(h));
#endif
    const char *keys[] = {"cpu_model", "driver", "cuda", "cuda_driver", "nccl"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *v = json_object_get(h, keys[i]);
        TB_CHECK(v && (json_is_string(v) || json_is_null(v)), "%s: %s", keys[i], dump(h));
    }
    // each null comes with a note
    if (json_is_null(json_object_get(h, "driver")) || json_is_null(json_object_get(h, "nccl")))
        TB_CHECK(json_array_size(json_object_get(h, "notes")) > 0, "nulls without notes: %s", dump(h));
    printf("  host: %s\n", dump(h));
    json_decref(h);
}

// ---------------------------------------------------------------------------------------
// Git: describe

TB_TEST(test_git_clean) {
    const char *dir = BASE "/clean";
    char c1[41], c2[41];
    TB_REQUIRE(make_repo(dir, c1, c2) == 0, "make repo");
    tb_git_state g;
    tb_error err = {{0}};
    // from a subdirectory: the search walks up to the work tree
    TB_REQUIRE(tb_git_describe(path_of(dir, "sub"), &g, &err) == 0, "%s", err.msg);
    TB_CHECK(same_path(g.root, dir), "root %s", g.root);
    TB_CHECK(g.root[strlen(g.root) - 1] != '/', "root has a trailing slash: %s", g.root);
    TB_CHECK(!strcmp(g.commit, c2), "commit %s, want %s", g.commit, c2);
    TB_CHECK(g.branch && !strcmp(g.branch, "main"), "branch %s", g.branch);
    TB_CHECK(g.dirty == 0, "dirty %d", g.dirty);
    TB_CHECK(json_array_size(g.changed) == 0, "changed %s", dump(g.changed));
    TB_CHECK(json_array_size(g.untracked) == 0, "untracked %s", dump(g.untracked));
    TB_CHECK(g.patch == NULL && g.patch_len == 0 && g.patch_sha256[0] == '\0', "patch on a clean tree");

    json_t *j = tb_git_state_json(&g, "git.patch");
    TB_REQUIRE(j != NULL, "json NULL");
    TB_CHECK(!strcmp(sv(json_object_get(j, "commit"), ""), c2), "json commit: %s", dump(j));
    TB_CHECK(json_is_false(json_object_get(j, "dirty")), "json dirty: %s", dump(j));
    TB_CHECK(!json_object_get(j, "patch") && !json_object_get(j, "patch_sha256"), "patch fields when clean: %s", dump(j));
    TB_CHECK(json_is_array(json_object_get(j, "changed")) && json_is_array(json_object_get(j, "untracked")),
             "arrays: %s", dump(j));
    json_decref(j);
    tb_git_state_free(&g);
    TB_CHECK(g.root == NULL && g.changed == NULL, "free does not zero");
    tb_git_state_free(&g);  // twice is fine
}

TB_TEST(test_git_dirty) {
    const char *dir = BASE "/dirty";
    char c1[41], c2[41];
    TB_REQUIRE(make_repo(dir, c1, c2) == 0 && make_dirty(dir) == 0, "make repo");
    tb_git_state g;
    tb_error err = {{0}};
    TB_REQUIRE(tb_git_describe(dir, &g, &err) == 0, "%s", err.msg);
    TB_CHECK(!strcmp(g.commit, c2), "commit %s", g.commit);
    TB_CHECK(g.dirty == 1, "dirty %d", g.dirty);
    const char *changed[] = {"a.txt", NULL}, *untracked[] = {"notes.txt", NULL};
    TB_CHECK(array_is(g.changed, changed), "changed %s", dump(g.changed));
    TB_CHECK(array_is(g.untracked, untracked), "untracked %s (ignored files must not appear)", dump(g.untracked));
    TB_REQUIRE(g.patch != NULL && g.patch_len == strlen(g.patch), "patch missing");
    TB_CHECK(strstr(g.patch, "a/a.txt") && strstr(g.patch, "\n+three\n"), "patch lacks the change:\n%s", g.patch);
    TB_CHECK(!strstr(g.patch, "notes.txt") && !strstr(g.patch, "debug.log"), "patch has untracked/ignored:\n%s", g.patch);
    char hex[65];
    tb_sha256_hex(g.patch, g.patch_len, hex);
    TB_CHECK(!strcmp(hex, g.patch_sha256), "patch_sha256 %s, sha of the patch %s", g.patch_sha256, hex);

    json_t *j = tb_git_state_json(&g, "git.patch");
    TB_CHECK(j && json_is_true(json_object_get(j, "dirty")), "json dirty: %s", dump(j));
    TB_CHECK(!strcmp(sv(json_object_get(j, "patch"), ""), "git.patch"), "json patch: %s", dump(j));
    TB_CHECK(!strcmp(sv(json_object_get(j, "patch_sha256"), ""), hex), "json sha: %s", dump(j));
    TB_CHECK(array_is(json_object_get(j, "changed"), changed), "json changed: %s", dump(j));
    json_decref(j);
    tb_git_state_free(&g);
}

// Build sources by name, and the list that names the untracked ones (the first five).
TB_TEST(test_untracked_build_sources_are_named) {
    const char *yes[] = {"engine/x.c", "a.h", "k.cu", "k.cuh", "t.cpp", "t.cc", "t.cxx", "t.hpp", "t.hh", "t.inc",
                         "CMakeLists.txt", "sub/CMakeLists.txt", "cmake/deps.cmake", NULL};
    const char *no[] = {"notes.txt", "README.md", "x.c/readme", ".c",   "dir/.h",
                        "a.c.orig",  "run.lua",   "c",          "cmake", NULL};
    for (int i = 0; yes[i]; i++) TB_CHECK(tb_git_is_build_source(yes[i]), "%s is a build source", yes[i]);
    for (int i = 0; no[i]; i++) TB_CHECK(!tb_git_is_build_source(no[i]), "%s is not a build source", no[i]);

    json_t *u = json_pack("[s,s,s,s,s,s,s,s]", "a.c", "notes.txt", "b.h", "c.cu", "d.cpp", "e.cmake", "f.c", "g.h");
    char buf[256];
    TB_CHECK(tb_git_untracked_sources(u, buf, sizeof buf) == 7 &&
                 !strcmp(buf, "a.c, b.h, c.cu, d.cpp, e.cmake and 2 more"),
             "7 sources: '%s'", buf);
    char tiny[8];
    TB_CHECK(tb_git_untracked_sources(u, tiny, sizeof tiny) == 7 && strlen(tiny) < sizeof tiny, "truncated: '%s'",
             tiny);
    json_decref(u);
    u = json_pack("[s]", "notes.txt");
    TB_CHECK(tb_git_untracked_sources(u, buf, sizeof buf) == 0 && !buf[0], "no source: '%s'", buf);
    json_decref(u);
    TB_CHECK(tb_git_untracked_sources(NULL, buf, sizeof buf) == 0, "no array");
}

// An untracked source is not in the saved patch, and the tree is clean by git's count; so
// `tracebook run` warns that such runs cannot be replayed, and --require-clean refuses it.
TB_TEST(test_run_names_untracked_sources_and_require_clean_refuses_them) {
    const char *dir = BASE "/untracked-src";
    char c1[41], c2[41];
    TB_REQUIRE(make_repo(dir, c1, c2) == 0, "make repo");
    TB_REQUIRE(write_text(path_of(dir, "engine/extra.c"), "int extra(void) { return 1; }\n") == 0 &&
                   write_text(path_of(dir, "notes.txt"), "todo\n") == 0 &&
                   write_text(path_of(dir, "rb.lua"), "tb.experiment{ name = 'u', version = 1, question = 'q' }\n") ==
                       0,
               "write files");
    tb_git_state g;
    tb_error err = {{0}};
    TB_REQUIRE(tb_git_describe(dir, &g, &err) == 0, "%s", err.msg);
    TB_CHECK(!g.dirty && g.patch == NULL, "untracked files alone leave the tree clean: dirty %d", g.dirty);
    char buf[256];
    TB_CHECK(tb_git_untracked_sources(g.untracked, buf, sizeof buf) == 1 && !strcmp(buf, "engine/extra.c"),
             "untracked %s: sources '%s'", dump(g.untracked), buf);
    tb_git_state_free(&g);

    tb_output sh = {0};
    int status = tb_run(&sh, dir, "%s run rb.lua --dry-run --require-clean --artifacts %s/art", TB_BIN_DIR "/tracebook",
                        BASE);
    TB_CHECK(status == 1 && strstr(sh.err, "--require-clean: the working tree has 1 untracked source file "
                                           "(engine/extra.c)") && !strstr(sh.err, "notes.txt"),
             "--require-clean: status %d, stderr:\n%s", status, sh.err);
    status = tb_run(&sh, dir, "%s run rb.lua --dry-run --artifacts %s/art", TB_BIN_DIR "/tracebook", BASE);
    TB_CHECK(status == 0 && strstr(sh.err, "warning: 1 untracked source file (engine/extra.c)") &&
                 strstr(sh.err, "tracebook replay will refuse these runs"),
             "without --require-clean: status %d, stderr:\n%s", status, sh.err);
    tb_output_free(&sh);
}

TB_TEST(test_git_detached_head_branch) {
    const char *dir = BASE "/detached";
    char c1[41], c2[41];
    TB_REQUIRE(make_repo(dir, c1, c2) == 0, "make repo");
    git_repository *repo = NULL;
    git_oid o1;
    TB_REQUIRE(git_repository_open(&repo, dir) == 0 && git_oid_fromstr(&o1, c1) == 0, "open");
    git_commit *commit = NULL;
    git_checkout_options co;
    git_checkout_options_init(&co, GIT_CHECKOUT_OPTIONS_VERSION);
    co.checkout_strategy = GIT_CHECKOUT_FORCE;
    int rc = git_commit_lookup(&commit, repo, &o1) || git_checkout_tree(repo, (git_object *)commit, &co) ||
             git_repository_set_head_detached(repo, &o1);
    git_commit_free(commit);
    git_repository_free(repo);
    TB_REQUIRE(rc == 0, "detach");
    tb_git_state g;
    tb_error err = {{0}};
    TB_REQUIRE(tb_git_describe(dir, &g, &err) == 0, "%s", err.msg);
    TB_CHECK(!strcmp(g.branch, "HEAD"), "branch %s", g.branch);
    TB_CHECK(!strcmp(g.commit, c1), "commit %s", g.commit);
    TB_CHECK(g.dirty == 0, "dirty after checkout: %s", dump(g.changed));
    tb_git_state_free(&g);
}

TB_TEST(test_git_not_a_repo_and_unborn) {
    tb_error err = {{0}};
    tb_git_state g;
    // a directory outside any repository: the build tree itself lives in this project's repo
    char tmpl[] = "/tmp/tb-provenance-XXXXXX";
    char *out = mkdtemp(tmpl);
    TB_REQUIRE(out != NULL, "mkdtemp: %s", strerror(errno));
    git_buf found = {0};
    if (git_repository_discover(&found, out, 0, NULL) == 0) {
        printf("  note: %s is inside the repository %s; not-a-repo check skipped\n", out, found.ptr);
    } else {
        TB_CHECK(tb_git_describe(out, &g, &err) == -1, "describe of a non-repo succeeded");
        TB_CHECK(strstr(err.msg, out) && strstr(err.msg, "not inside a git repository"), "message: %s", err.msg);
        tb_git_state_free(&g);
    }
    git_buf_dispose(&found);
    rmdir(out);

    const char *missing = BASE "/no/such/dir";
    TB_CHECK(tb_git_describe(missing, &g, &err) == -1, "describe of a missing path succeeded");
    TB_CHECK(strstr(err.msg, missing) != NULL, "message: %s", err.msg);
    tb_git_state_free(&g);

    // no commit yet: an error, not an empty commit
    const char *unborn = BASE "/unborn";
    rm_rf(unborn);
    git_repository *repo = NULL;
    git_repository_init_options io;
    git_repository_init_options_init(&io, GIT_REPOSITORY_INIT_OPTIONS_VERSION);
    io.flags = GIT_REPOSITORY_INIT_MKPATH;
    io.initial_head = "main";
    TB_REQUIRE(git_repository_init_ext(&repo, unborn, &io) == 0, "init");
    git_repository_free(repo);
    TB_CHECK(tb_git_describe(unborn, &g, &err) == -1, "describe of an unborn repo succeeded");
    TB_CHECK(strstr(err.msg, "no commit") && strstr(err.msg, "refs/heads/main"), "message: %s", err.msg);
    tb_git_state_free(&g);

    // apply never searches upwards: a plain directory inside this project's repository
    const char *plain = BASE "/plain";
    TB_REQUIRE(tb_mkdir_p(plain, &err) == 0, "%s", err.msg);
    TB_CHECK(tb_git_apply_patch(plain, "x", 1, &err) == -1, "apply into a non-repo dir succeeded");
    TB_CHECK(strstr(err.msg, plain) != NULL, "message: %s", err.msg);
}

// ---------------------------------------------------------------------------------------
// Git: worktree and patch replay

TB_TEST(test_git_worktree_and_apply_patch) {
    const char *dir = BASE "/replay";
    const char *wt1 = BASE "/replay-wt1", *wt2 = BASE "/replay-wt2", *wt3 = BASE "/replay-wt3";
    rm_rf(wt1);
    rm_rf(wt2);
    rm_rf(wt3);
    char c1[41], c2[41];
    TB_REQUIRE(make_repo(dir, c1, c2) == 0 && make_dirty(dir) == 0, "make repo");
    tb_git_state g;
    tb_error err = {{0}};
    TB_REQUIRE(tb_git_describe(dir, &g, &err) == 0 && g.patch, "%s", err.msg);

    // the first commit's files
    TB_REQUIRE(tb_git_worktree_at(dir, c1, wt1, &err) == 0, "%s", err.msg);
    TB_CHECK(file_is(path_of(wt1, "a.txt"), "one\n"), "wt1 a.txt");
    TB_CHECK(file_is(path_of(wt1, "sub/b.txt"), "bee\n"), "wt1 sub/b.txt");
    TB_CHECK(file_is(path_of(wt1, ".gitignore"), "*.log\nbuild/\n"), "wt1 .gitignore");
    size_t bl = 0;
    char *bin = tb_slurp_len(path_of(wt1, "bin.dat"), &bl);
    TB_CHECK(bin && bl == sizeof bin_v1 && !memcmp(bin, bin_v1, bl), "wt1 bin.dat");
    free(bin);
    TB_CHECK(!tb_lexists(path_of(wt1, "c.txt")), "wt1 has the second commit's c.txt");
    TB_CHECK(!tb_lexists(path_of(wt1, "notes.txt")), "wt1 has an untracked file");
    tb_git_state w;
    TB_REQUIRE(tb_git_describe(wt1, &w, &err) == 0, "%s", err.msg);
    TB_CHECK(!strcmp(w.commit, c1) && !strcmp(w.branch, "HEAD") && !w.dirty && json_array_size(w.untracked) == 0,
             "wt1 state: %s %s dirty %d untracked %s", w.commit, w.branch, w.dirty, dump(w.untracked));
    tb_git_state_free(&w);

    // the patch applies to its base commit and reproduces the dirty tree, byte for byte
    TB_REQUIRE(tb_git_worktree_at(dir, c2, wt2, &err) == 0, "%s", err.msg);
    TB_CHECK(file_is(path_of(wt2, "a.txt"), "two\n") && file_is(path_of(wt2, "c.txt"), "see\n"), "wt2 files");
    TB_REQUIRE(tb_git_apply_patch(wt2, g.patch, g.patch_len, &err) == 0, "%s", err.msg);
    TB_CHECK(file_is(path_of(wt2, "a.txt"), "two\nthree\n"), "patched a.txt");
    TB_REQUIRE(tb_git_describe(wt2, &w, &err) == 0, "%s", err.msg);
    TB_CHECK(w.dirty && !strcmp(w.patch_sha256, g.patch_sha256), "replayed patch sha %s, recorded %s", w.patch_sha256,
             g.patch_sha256);
    TB_CHECK(json_equal(w.changed, g.changed), "replayed changed %s", dump(w.changed));
    tb_git_state_free(&w);

    // made against different content: the first commit's a.txt is "one"
    TB_CHECK(tb_git_apply_patch(wt1, g.patch, g.patch_len, &err) == -1, "patch applied to the wrong base");
    TB_CHECK(strstr(err.msg, "does not apply") && strstr(err.msg, wt1), "message: %s", err.msg);
    TB_CHECK(file_is(path_of(wt1, "a.txt"), "one\n"), "failed apply changed a.txt");

    // corrupted: not a patch at all, and a patch whose context was altered
    const char *junk = "this is not a patch\n";
    TB_CHECK(tb_git_apply_patch(wt1, junk, strlen(junk), &err) == -1, "junk applied");
    TB_CHECK(strstr(err.msg, "not a git patch"), "message: %s", err.msg);
    TB_REQUIRE(tb_git_worktree_at(dir, c2, wt3, &err) == 0, "%s", err.msg);
    char *bad = malloc(g.patch_len + 1);
    TB_REQUIRE(bad != NULL, "malloc");
    memcpy(bad, g.patch, g.patch_len + 1);
    char *ctx = strstr(bad, "\n two\n");
    TB_REQUIRE(ctx != NULL, "no context line in the patch:\n%s", g.patch);
    ctx[3] = 'X';  // " tXo"
    TB_CHECK(tb_git_apply_patch(wt3, bad, g.patch_len, &err) == -1, "corrupted patch applied");
    TB_CHECK(strstr(err.msg, "does not apply"), "message: %s", err.msg);
    TB_CHECK(file_is(path_of(wt3, "a.txt"), "two\n"), "failed apply changed a.txt");
    free(bad);

    // a commit the repository does not have, and a destination that is not fresh
    const char *ghost = "0123456789abcdef0123456789abcdef01234567";
    TB_CHECK(tb_git_worktree_at(dir, ghost, BASE "/replay-ghost", &err) == -1, "missing commit materialised");
    TB_CHECK(strstr(err.msg, ghost) != NULL, "message does not name the commit: %s", err.msg);
    TB_CHECK(!tb_lexists(BASE "/replay-ghost"), "destination created for a missing commit");
    TB_CHECK(tb_git_worktree_at(dir, c1, wt1, &err) == -1, "non-empty destination reused");
    TB_CHECK(strstr(err.msg, "not empty") && strstr(err.msg, wt1), "message: %s", err.msg);
    tb_git_state_free(&g);
}

// Staged new file, deleted tracked file, binary change: all in changed, all replayed.
TB_TEST(test_git_staged_delete_binary_roundtrip) {
    const char *dir = BASE "/mixed", *wt = BASE "/mixed-wt";
    rm_rf(wt);
    char c1[41], c2[41];
    TB_REQUIRE(make_repo(dir, c1, c2) == 0, "make repo");
    unsigned char bin_v2[sizeof bin_v1 + 3];
    memcpy(bin_v2, bin_v1, sizeof bin_v1);
    memcpy(bin_v2 + sizeof bin_v1, "\0\x80z", 3);
    bin_v2[2] = 0x99;
    TB_REQUIRE(write_text(path_of(dir, "new.txt"), "fresh\n") == 0 && unlink(path_of(dir, "sub/b.txt")) == 0 &&
                   write_bytes(path_of(dir, "bin.dat"), bin_v2, sizeof bin_v2) == 0,
               "edit");
    git_repository *repo = NULL;
    git_index *idx = NULL;
    int rc = git_repository_open(&repo, dir) || git_repository_index(&idx, repo) ||
             git_index_add_bypath(idx, "new.txt") || git_index_write(idx);
    git_index_free(idx);
    git_repository_free(repo);
    TB_REQUIRE(rc == 0, "stage new.txt");

    tb_git_state g, w;
    tb_error err = {{0}};
    TB_REQUIRE(tb_git_describe(dir, &g, &err) == 0, "%s", err.msg);
    const char *changed[] = {"bin.dat", "new.txt", "sub/b.txt", NULL};
    TB_CHECK(array_is(g.changed, changed), "changed %s", dump(g.changed));
    TB_CHECK(json_array_size(g.untracked) == 0, "untracked %s", dump(g.untracked));
    TB_REQUIRE(g.dirty && g.patch, "not dirty");
    TB_CHECK(strstr(g.patch, "GIT binary patch") != NULL, "binary change not in the patch:\n%s", g.patch);

    TB_REQUIRE(tb_git_worktree_at(dir, c2, wt, &err) == 0, "%s", err.msg);
    TB_REQUIRE(tb_git_apply_patch(wt, g.patch, g.patch_len, &err) == 0, "%s", err.msg);
    TB_CHECK(file_is(path_of(wt, "new.txt"), "fresh\n"), "new.txt");
    TB_CHECK(!tb_lexists(path_of(wt, "sub/b.txt")), "sub/b.txt not deleted");
    size_t bl = 0;
    char *bin = tb_slurp_len(path_of(wt, "bin.dat"), &bl);
    TB_CHECK(bin && bl == sizeof bin_v2 && !memcmp(bin, bin_v2, bl), "bin.dat not reproduced (%zu bytes)", bl);
    free(bin);
    TB_REQUIRE(tb_git_describe(wt, &w, &err) == 0, "%s", err.msg);
    TB_CHECK(json_equal(w.changed, g.changed), "replayed changed %s", dump(w.changed));
    TB_CHECK(!strcmp(w.patch_sha256, g.patch_sha256), "replayed patch differs:\n%s\n--- recorded:\n%s", w.patch,
             g.patch);
    tb_git_state_free(&w);
    tb_git_state_free(&g);
}

int main(void) {
    git_libgit2_init();
    // Keep the user's and the system's git config (core.excludesFile, init.defaultBranch...)
    // out of the test repositories.
    git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, GIT_CONFIG_LEVEL_SYSTEM, "");
    git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, GIT_CONFIG_LEVEL_XDG, "");
    git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, GIT_CONFIG_LEVEL_GLOBAL, "");
    git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, GIT_CONFIG_LEVEL_PROGRAMDATA, "");
    rm_rf(BASE);
    tb_error err;
    if (tb_mkdir_p(BASE, &err)) {
        printf("cannot create %s: %s\n", BASE, err.msg);
        return 1;
    }

    TB_RUN(test_sha256_known_vectors);
    TB_RUN(test_sha256_file_matches_bytes);
    TB_RUN(test_hash_tree_sorted_nested_skips_top_manifest);
    TB_RUN(test_environment_deny_list);
    TB_RUN(test_environment_records_only_the_allow_list_by_default);
    TB_RUN(test_credential_values_are_redacted_even_for_allowed_names);
    TB_RUN(test_every_denied_name_is_left_out_under_allowed_prefixes);
    TB_RUN(test_host_json);
    TB_RUN(test_git_clean);
    TB_RUN(test_git_dirty);
    TB_RUN(test_untracked_build_sources_are_named);
    TB_RUN(test_run_names_untracked_sources_and_require_clean_refuses_them);
    TB_RUN(test_git_detached_head_branch);
    TB_RUN(test_git_not_a_repo_and_unborn);
    TB_RUN(test_git_worktree_and_apply_patch);
    TB_RUN(test_git_staged_delete_binary_roundtrip);

    int rc = tb_test_summary();
    if (!rc) rm_rf(BASE);
    git_libgit2_shutdown();
    return rc;
}
