// provenance.c — git state (libgit2), SHA-256 (OpenSSL EVP) and host for the run record
// (the environment is environment.c's). The contract is provenance.h.
#define _GNU_SOURCE  // FNM_CASEFOLD

#include "records/provenance.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <git2.h>
#include <glob.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/xalloc.h"

// ---------------------------------------------------------------------------------------
// Small helpers

// tb_fail with libgit2's last error appended: "what: libgit2's reason".
__attribute__((format(printf, 2, 3))) static int git_fail(tb_error *err, const char *fmt, ...) {
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const git_error *ge = git_error_last();
    return tb_fail(err, "%s: %s", what, ge && ge->message ? ge->message : "unknown libgit2 error");
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = tb_xmalloc(n + 1, "string");
    memcpy(d, s, n + 1);
    return d;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// A JSON string of s; bytes that are not valid UTF-8 become '?' (jansson refuses them).
json_t *tb_json_string_lossy(const char *s) {
    json_t *j = json_string(s);
    if (j) return j;
    char *c = dup_str(s);
    if (!c) return NULL;
    for (char *p = c; *p; p++)
        if ((unsigned char)*p >= 0x80) *p = '?';
    j = json_string(c);
    free(c);
    return j;
}

// Sorts a JSON array of strings in place (strcmp order). Returns 0, or -1 out of memory.
int tb_json_sort_strings(json_t *arr) {
    size_t n = json_array_size(arr);
    if (n < 2) return 0;
    char **v = tb_xcalloc(n, sizeof *v, "sorted paths");
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        if (!(v[i] = dup_str(json_string_value(json_array_get(arr, i))))) rc = -1;
    if (!rc) {
        qsort(v, n, sizeof *v, cmp_str_ptr);
        for (size_t i = 0; i < n && !rc; i++)
            if (json_array_set_new(arr, i, json_string(v[i]))) rc = -1;
    }
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
    return rc;
}

// ---------------------------------------------------------------------------------------
// SHA-256

static void to_hex(const unsigned char *md, unsigned n, char *hex) {
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < n; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[2 * n] = '\0';
}

void tb_sha256_hex(const void *data, size_t len, char hex[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (!EVP_Digest(data, len, md, &n, EVP_sha256(), NULL) || n != 32) {
        hex[0] = '\0';
        return;
    }
    to_hex(md, n, hex);
}

int tb_sha256_fd(int fd, const char *path, char hex[65], tb_error *err) {
    hex[0] = '\0';
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(ctx);
        return tb_fail(err, "sha256: '%s': libcrypto could not start a SHA-256 digest", path);
    }
    enum { CHUNK = 64 * 1024 };
    unsigned char *buf = tb_xmalloc(CHUNK, "sha256 buffer");
    int rc = 0;
    for (;;) {
        ssize_t got = read(fd, buf, CHUNK);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) rc = tb_fail(err, "sha256: cannot read '%s': %s", path, strerror(errno));
        if (got <= 0) break;
        if (!EVP_DigestUpdate(ctx, buf, (size_t)got)) {
            rc = tb_fail(err, "sha256: '%s': libcrypto digest update failed", path);
            break;
        }
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (!rc && (!EVP_DigestFinal_ex(ctx, md, &n) || n != 32))
        rc = tb_fail(err, "sha256: '%s': libcrypto digest final failed", path);
    if (!rc) to_hex(md, n, hex);
    free(buf);
    EVP_MD_CTX_free(ctx);
    return rc;
}

int tb_sha256_file(const char *path, char hex[65], tb_error *err) {
    hex[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tb_fail(err, "sha256: cannot open '%s': %s", path, strerror(errno));
    int rc = tb_sha256_fd(fd, path, hex, err);
    close(fd);
    return rc;
}

// ---------------------------------------------------------------------------------------
// File tree hashing

typedef struct path_list {
    char **v;
    size_t n, cap;
} path_list;

static int path_list_push(path_list *pl, char *s) {
    if (pl->n == pl->cap) {
        size_t cap = pl->cap ? 2 * pl->cap : 64;
        char **v = tb_xreallocarray(pl->v, cap, sizeof *v, "tree paths");
        pl->v = v;
        pl->cap = cap;
    }
    pl->v[pl->n++] = s;
    return 0;
}

static void path_list_free(path_list *pl) {
    for (size_t i = 0; i < pl->n; i++) free(pl->v[i]);
    free(pl->v);
}

static char *join_path(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *p = tb_xmalloc(na + 1 + nb + 1, "path");
    memcpy(p, a, na);
    p[na] = '/';
    memcpy(p + na + 1, b, nb + 1);
    return p;
}

// Collects the relative paths of the regular files under root/rel ("" = root itself).
static int walk_tree(const char *root, const char *rel, const char *skip_name, path_list *pl, tb_error *err) {
    char *dir_path = rel[0] ? join_path(root, rel) : dup_str(root);
    if (!dir_path) return tb_fail(err, "hash tree: out of memory");
    DIR *d = opendir(dir_path);
    if (!d) {
        int rc = tb_fail(err, "hash tree: cannot open directory '%s': %s", dir_path, strerror(errno));
        free(dir_path);
        return rc;
    }
    int rc = 0;
    struct dirent *de;
    errno = 0;
    while (!rc && (de = readdir(d))) {
        const char *name = de->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
        char *full = join_path(dir_path, name);
        char *child = rel[0] ? join_path(rel, name) : dup_str(name);
        struct stat st;
        if (!full || !child) {
            rc = tb_fail(err, "hash tree: out of memory");
        } else if (lstat(full, &st)) {
            rc = tb_fail(err, "hash tree: cannot stat '%s': %s", full, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            rc = walk_tree(root, child, skip_name, pl, err);
        } else if (S_ISREG(st.st_mode) && !(!rel[0] && skip_name && !strcmp(name, skip_name))) {
            if (path_list_push(pl, child)) rc = tb_fail(err, "hash tree: out of memory");
            else child = NULL;  // owned by the list now
        }
        free(full);
        free(child);
        errno = 0;
    }
    if (!rc && errno) rc = tb_fail(err, "hash tree: cannot read directory '%s': %s", dir_path, strerror(errno));
    closedir(d);
    free(dir_path);
    return rc;
}

int tb_hash_tree(const char *dir, const char *skip_name, json_t **files, tb_error *err) {
    *files = NULL;
    path_list pl = {0};
    int rc = walk_tree(dir, "", skip_name, &pl, err);
    json_t *obj = rc ? NULL : json_object();
    if (!rc && !obj) rc = tb_fail(err, "hash tree: out of memory");
    if (!rc && pl.n) qsort(pl.v, pl.n, sizeof *pl.v, cmp_str_ptr);
    for (size_t i = 0; !rc && i < pl.n; i++) {
        char *full = join_path(dir, pl.v[i]);
        char hex[65];
        if (!full) {
            rc = tb_fail(err, "hash tree: out of memory");
            break;
        }
        rc = tb_sha256_file(full, hex, err);
        free(full);
        if (!rc && json_object_set_new(obj, pl.v[i], tb_json_string_lossy(hex)))
            rc = tb_fail(err, "hash tree: cannot add '%s' to the JSON object", pl.v[i]);
    }
    path_list_free(&pl);
    if (rc) {
        json_decref(obj);
        return rc;
    }
    *files = obj;
    return 0;
}

// ---------------------------------------------------------------------------------------
// Git

void tb_git_state_free(tb_git_state *g) {
    if (!g) return;
    free(g->root);
    free(g->branch);
    json_decref(g->changed);
    json_decref(g->untracked);
    free(g->patch);
    memset(g, 0, sizeof *g);
}

// Fills out->changed and out->untracked from the status of index and work tree.
static int git_collect_status(git_repository *repo, tb_git_state *out, tb_error *err) {
    git_status_options so;
    git_status_options_init(&so, GIT_STATUS_OPTIONS_VERSION);
    so.show = GIT_STATUS_SHOW_INDEX_AND_WORKDIR;
    so.flags = GIT_STATUS_OPT_INCLUDE_UNTRACKED | GIT_STATUS_OPT_RECURSE_UNTRACKED_DIRS |
               GIT_STATUS_OPT_SORT_CASE_SENSITIVELY;
    git_status_list *list = NULL;
    if (git_status_list_new(&list, repo, &so) < 0)
        return git_fail(err, "git: cannot read the status of '%s'", out->root);
    int rc = 0;
    size_t n = git_status_list_entrycount(list);
    for (size_t i = 0; i < n && !rc; i++) {
        const git_status_entry *e = git_status_byindex(list, i);
        if (!e || e->status == GIT_STATUS_CURRENT || (e->status & GIT_STATUS_IGNORED)) continue;
        const git_diff_delta *h2i = e->head_to_index, *i2w = e->index_to_workdir;
        if (e->status == GIT_STATUS_WT_NEW) {
            if (i2w && json_array_append_new(out->untracked, tb_json_string_lossy(i2w->new_file.path))) rc = -1;
            continue;
        }
        // No rename detection is asked for, so old and new paths agree; add both if not.
        const char *paths[4] = {h2i ? h2i->old_file.path : NULL, h2i ? h2i->new_file.path : NULL,
                                i2w ? i2w->old_file.path : NULL, i2w ? i2w->new_file.path : NULL};
        for (int k = 0; k < 4 && !rc; k++) {
            if (!paths[k]) continue;
            int seen = 0;
            for (int j = 0; j < k; j++)
                if (paths[j] && !strcmp(paths[j], paths[k])) seen = 1;
            if (!seen && json_array_append_new(out->changed, tb_json_string_lossy(paths[k]))) rc = -1;
        }
    }
    git_status_list_free(list);
    if (!rc && (tb_json_sort_strings(out->changed) || tb_json_sort_strings(out->untracked))) rc = -1;
    return rc ? tb_fail(err, "git: out of memory listing the status of '%s'", out->root) : 0;
}

// Fills out->patch / patch_len / patch_sha256 with `git diff HEAD --binary`.
static int git_collect_patch(git_repository *repo, git_reference *head, tb_git_state *out, tb_error *err) {
    git_object *tree = NULL;
    git_diff *diff = NULL;
    git_buf buf = {0};
    int rc = 0;
    git_diff_options dopts;
    git_diff_options_init(&dopts, GIT_DIFF_OPTIONS_VERSION);
    dopts.flags = GIT_DIFF_SHOW_BINARY;
    if (git_reference_peel(&tree, head, GIT_OBJECT_TREE) < 0)
        rc = git_fail(err, "git: cannot read HEAD's tree in '%s'", out->root);
    else if (git_diff_tree_to_workdir_with_index(&diff, repo, (git_tree *)tree, &dopts) < 0)
        rc = git_fail(err, "git: cannot diff the work tree of '%s' against HEAD", out->root);
    else if (git_diff_to_buf(&buf, diff, GIT_DIFF_FORMAT_PATCH) < 0)
        rc = git_fail(err, "git: cannot format the diff of '%s' as a patch", out->root);
    else if (buf.size > 0) {
        out->patch = tb_xmalloc(buf.size + 1, "git patch");
        memcpy(out->patch, buf.ptr, buf.size);
        out->patch[buf.size] = '\0';
        out->patch_len = buf.size;
        tb_sha256_hex(out->patch, out->patch_len, out->patch_sha256);
    }
    git_buf_dispose(&buf);
    git_diff_free(diff);
    git_object_free(tree);
    return rc;
}

int tb_git_is_build_source(const char *path) {
    static const char *const exts[] = {".c",  ".h",  ".cc", ".cpp", ".cxx",  ".hpp",
                                       ".hh", ".cu", ".cuh", ".inc", ".cmake"};
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!strcmp(base, "CMakeLists.txt")) return 1;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) return 0;  // no extension, or a dotfile's name
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++)
        if (!strcmp(dot, exts[i])) return 1;
    return 0;
}

size_t tb_git_untracked_sources(const json_t *untracked, char *buf, size_t len) {
    enum { NAMED = 5 };
    size_t n = 0, used = 0;
    if (len) buf[0] = '\0';
    size_t i;
    const json_t *v;
    json_array_foreach(untracked, i, v) {
        const char *path = json_string_value(v);
        if (!path || !tb_git_is_build_source(path)) continue;
        if (n < NAMED && used < len) {
            int w = snprintf(buf + used, len - used, "%s%s", n ? ", " : "", path);
            used += w > 0 ? (size_t)w : 0;
        }
        n++;
    }
    if (n > NAMED && used < len) snprintf(buf + used, len - used, " and %zu more", n - NAMED);
    return n;
}

int tb_git_describe(const char *path, tb_git_state *out, tb_error *err) {
    memset(out, 0, sizeof *out);
    git_libgit2_init();
    git_repository *repo = NULL;
    git_reference *head = NULL, *head_sym = NULL;
    git_object *commit = NULL;
    int rc = 0;
    struct stat st;
    if (stat(path, &st)) {
        rc = tb_fail(err, "git: cannot access '%s': %s", path, strerror(errno));
        goto done;
    }

    int e = git_repository_open_ext(&repo, path, 0, NULL);
    if (e == GIT_ENOTFOUND) {
        rc = tb_fail(err, "git: '%s' is not inside a git repository", path);
        goto done;
    }
    if (e < 0) {
        rc = git_fail(err, "git: cannot open the repository containing '%s'", path);
        goto done;
    }
    const char *workdir = git_repository_workdir(repo);
    if (!workdir) {
        rc = tb_fail(err, "git: the repository at '%s' is bare (no work tree to describe)", git_repository_path(repo));
        goto done;
    }
    if (!(out->root = dup_str(workdir)) || !(out->changed = json_array()) || !(out->untracked = json_array())) {
        rc = tb_fail(err, "git: out of memory");
        goto done;
    }
    size_t rl = strlen(out->root);
    while (rl > 1 && out->root[rl - 1] == '/') out->root[--rl] = '\0';

    e = git_repository_head(&head, repo);
    if (e == GIT_EUNBORNBRANCH) {
        const char *target = NULL;
        if (git_reference_lookup(&head_sym, repo, "HEAD") == 0) target = git_reference_symbolic_target(head_sym);
        rc = tb_fail(err, "git: the repository at '%s' has no commit yet (HEAD is the unborn branch '%s'); "
                          "commit before recording a run",
                     out->root, target ? target : "?");
        goto done;
    }
    if (e < 0) {
        rc = git_fail(err, "git: cannot resolve HEAD in '%s'", out->root);
        goto done;
    }
    if (git_reference_peel(&commit, head, GIT_OBJECT_COMMIT) < 0) {
        rc = git_fail(err, "git: HEAD of '%s' does not lead to a commit", out->root);
        goto done;
    }
    git_oid_tostr(out->commit, sizeof out->commit, git_object_id(commit));
    int detached = git_repository_head_detached(repo);
    if (!(out->branch = dup_str(detached == 1 ? "HEAD" : git_reference_shorthand(head)))) {
        rc = tb_fail(err, "git: out of memory");
        goto done;
    }

    if ((rc = git_collect_status(repo, out, err))) goto done;
    if ((rc = git_collect_patch(repo, head, out, err))) goto done;
    out->dirty = json_array_size(out->changed) > 0 || out->patch != NULL;

done:
    git_object_free(commit);
    git_reference_free(head_sym);
    git_reference_free(head);
    git_repository_free(repo);
    git_libgit2_shutdown();
    return rc;
}

json_t *tb_git_state_json(const tb_git_state *g, const char *patch_file) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = 0;
    bad |= json_object_set_new(o, "commit", json_string(g->commit));
    // a branch name cannot hold a URL (':' is not allowed in a ref) but can be a pasted token
    const char *branch = g->branch ? g->branch : "", *marker = tb_credential_marker(branch);
    bad |= json_object_set_new(o, "branch", tb_json_string_lossy(marker ? marker : branch));
    bad |= json_object_set_new(o, "dirty", json_boolean(g->dirty));
    bad |= json_object_set_new(o, "changed", g->changed ? json_deep_copy(g->changed) : json_array());
    bad |= json_object_set_new(o, "untracked", g->untracked ? json_deep_copy(g->untracked) : json_array());
    if (g->patch) {
        bad |= json_object_set_new(o, "patch", patch_file ? tb_json_string_lossy(patch_file) : json_null());
        bad |= json_object_set_new(o, "patch_sha256", json_string(g->patch_sha256));
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int tb_git_apply_patch(const char *repo_dir, const char *patch_text, size_t len, tb_error *err) {
    git_libgit2_init();
    git_repository *repo = NULL;
    git_diff *diff = NULL;
    int rc = 0;
    int e = git_repository_open_ext(&repo, repo_dir, GIT_REPOSITORY_OPEN_NO_SEARCH, NULL);
    if (e == GIT_ENOTFOUND)
        rc = tb_fail(err, "git apply: '%s' is not the root of a git work tree", repo_dir);
    else if (e < 0)
        rc = git_fail(err, "git apply: cannot open the repository at '%s'", repo_dir);
    else if (git_diff_from_buffer(&diff, patch_text, len) < 0)
        rc = git_fail(err, "git apply: the %zu-byte patch for '%s' is not a git patch", len, repo_dir);
    else if (git_apply(repo, diff, GIT_APPLY_LOCATION_BOTH, NULL) < 0)
        rc = git_fail(err, "git apply: the patch does not apply to '%s' (its content differs from the "
                           "patch's base); nothing was changed", repo_dir);
    git_diff_free(diff);
    git_repository_free(repo);
    git_libgit2_shutdown();
    return rc;
}

// 1 when path does not exist or is an empty directory, 0 otherwise (reason in err).
static int is_fresh_dir(const char *path, tb_error *err) {
    DIR *d = opendir(path);
    if (!d) {
        if (errno == ENOENT) return 1;
        tb_fail(err, "worktree: destination '%s' is not a usable directory: %s", path, strerror(errno));
        return 0;
    }
    struct dirent *de;
    int empty = 1;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            empty = 0;
            break;
        }
    closedir(d);
    if (!empty) tb_fail(err, "worktree: destination '%s' exists and is not empty", path);
    return empty;
}

int tb_git_worktree_at(const char *repo_path, const char *commit, const char *dest_dir, tb_error *err) {
    if (!is_fresh_dir(dest_dir, err)) return -1;
    git_libgit2_init();
    git_repository *src = NULL, *dst = NULL;
    git_object *rev = NULL, *cobj = NULL;
    git_commit *dcommit = NULL;
    git_buf src_objects = {0}, dst_objects = {0};
    char *alt_dir = NULL, *alt_file = NULL, *alt_text = NULL;
    git_oid oid;
    char oid_hex[GIT_OID_HEXSZ + 1];
    int rc = 0;

    int e = git_repository_open_ext(&src, repo_path, 0, NULL);
    if (e == GIT_ENOTFOUND) {
        rc = tb_fail(err, "worktree: '%s' is not inside a git repository", repo_path);
        goto done;
    }
    if (e < 0) {
        rc = git_fail(err, "worktree: cannot open the repository containing '%s'", repo_path);
        goto done;
    }
    if (git_revparse_single(&rev, src, commit) < 0) {
        rc = git_fail(err, "worktree: commit '%s' is not in the repository at '%s'", commit,
                      git_repository_path(src));
        goto done;
    }
    if (git_object_peel(&cobj, rev, GIT_OBJECT_COMMIT) < 0) {
        rc = git_fail(err, "worktree: '%s' names no commit in the repository at '%s'", commit,
                      git_repository_path(src));
        goto done;
    }
    git_oid_cpy(&oid, git_object_id(cobj));
    git_oid_tostr(oid_hex, sizeof oid_hex, &oid);
    if (git_repository_item_path(&src_objects, src, GIT_REPOSITORY_ITEM_OBJECTS) < 0) {
        rc = git_fail(err, "worktree: cannot locate the object store of '%s'", git_repository_path(src));
        goto done;
    }
    if (src_objects.ptr[0] != '/') {
        rc = tb_fail(err, "worktree: the object store path '%s' is not absolute", src_objects.ptr);
        goto done;
    }

    if ((rc = tb_mkdir_p(dest_dir, err))) goto done;
    if (git_repository_init(&dst, dest_dir, 0) < 0) {
        rc = git_fail(err, "worktree: cannot create a repository in '%s'", dest_dir);
        goto done;
    }
    // Borrow the source's objects, as `git clone --shared` does: objects/info/alternates.
    if (git_repository_item_path(&dst_objects, dst, GIT_REPOSITORY_ITEM_OBJECTS) < 0) {
        rc = git_fail(err, "worktree: cannot locate the object store of '%s'", dest_dir);
        goto done;
    }
    alt_dir = join_path(dst_objects.ptr, "info");
    alt_file = join_path(alt_dir, "alternates");
    size_t an = strlen(src_objects.ptr);
    alt_text = tb_xmalloc(an + 2, "alternates file");
    memcpy(alt_text, src_objects.ptr, an);
    alt_text[an] = '\n';
    alt_text[an + 1] = '\0';
    if ((rc = tb_mkdir_p(alt_dir, err)) || (rc = tb_write_file_atomic(alt_file, alt_text, an + 1, err))) {
        tb_fail_prefix(err, "worktree: linking '%s' to the objects of '%s'", dest_dir, src_objects.ptr);
        goto done;
    }
    git_repository_free(dst);  // reopen so the object database reads the alternates
    dst = NULL;
    if (git_repository_open_ext(&dst, dest_dir, GIT_REPOSITORY_OPEN_NO_SEARCH, NULL) < 0) {
        rc = git_fail(err, "worktree: cannot reopen the repository in '%s'", dest_dir);
        goto done;
    }
    if (git_commit_lookup(&dcommit, dst, &oid) < 0) {
        rc = git_fail(err, "worktree: commit %s is not visible from '%s' through its alternates", oid_hex, dest_dir);
        goto done;
    }
    git_checkout_options co;
    git_checkout_options_init(&co, GIT_CHECKOUT_OPTIONS_VERSION);
    co.checkout_strategy = GIT_CHECKOUT_FORCE;
    if (git_checkout_tree(dst, (const git_object *)dcommit, &co) < 0) {
        rc = git_fail(err, "worktree: cannot check out commit %s into '%s'", oid_hex, dest_dir);
        goto done;
    }
    if (git_repository_set_head_detached(dst, &oid) < 0) {
        rc = git_fail(err, "worktree: cannot detach HEAD of '%s' at %s", dest_dir, oid_hex);
        goto done;
    }

done:
    free(alt_text);
    free(alt_file);
    free(alt_dir);
    git_buf_dispose(&dst_objects);
    git_buf_dispose(&src_objects);
    git_commit_free(dcommit);
    git_object_free(cobj);
    git_object_free(rev);
    git_repository_free(dst);
    git_repository_free(src);
    git_libgit2_shutdown();
    return rc;
}

// ---------------------------------------------------------------------------------------
// Host

// The first line of path, trimmed; NULL when unreadable or empty (malloc'd).
static char *read_first_line(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, f);
    fclose(f);
    if (n <= 0) {
        free(line);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == ' ' || line[n - 1] == '\t')) line[--n] = '\0';
    if (!n) {
        free(line);
        return NULL;
    }
    return line;
}

// The trimmed value after "key<spaces>:" of the first matching line of path (malloc'd).
static char *read_keyed_value(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *line = NULL, *value = NULL;
    size_t cap = 0, kl = strlen(key);
    while (!value && getline(&line, &cap, f) > 0) {
        if (strncmp(line, key, kl)) continue;
        char *p = line + kl;
        while (*p == ' ' || *p == '\t') p++;
        if (*p != ':') continue;
        p++;
        while (*p == ' ' || *p == '\t') p++;
        size_t n = strlen(p);
        while (n > 0 && (p[n - 1] == '\n' || p[n - 1] == ' ' || p[n - 1] == '\t')) p[--n] = '\0';
        value = dup_str(p);
    }
    free(line);
    fclose(f);
    return value;
}

// "550.54.15" from /sys/module/nvidia/version, or from /proc/driver/nvidia/version's
// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ..." line.
static char *nvidia_driver_version(void) {
    char *v = read_first_line("/sys/module/nvidia/version");
    if (v) return v;
    char *line = read_first_line("/proc/driver/nvidia/version");
    if (!line) return NULL;
    char *save = NULL, *found = NULL;
    for (char *tok = strtok_r(line, " \t", &save); tok && !found; tok = strtok_r(NULL, " \t", &save)) {
        int dots = 0, ok = tok[0] >= '0' && tok[0] <= '9';
        for (char *p = tok; *p && ok; p++) {
            if (*p == '.') dots++;
            else if (*p < '0' || *p > '9') ok = 0;
        }
        if (ok && dots >= 1) found = dup_str(tok);
    }
    free(line);
    return found;
}

// Calls `int sym(int *)` from a library the dynamic loader finds; 0 when it returned 0.
static int dl_version_call(const char *lib, const char *sym, int *version) {
    void *h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL);
    if (!h) return -1;
    int (*fn)(int *) = NULL;
    *(void **)(&fn) = dlsym(h, sym);
    int rc = fn && fn(version) == 0 ? 0 : -1;
    dlclose(h);
    return rc;
}

#define TB_STR_(x) #x
#define TB_STR(x) TB_STR_(x)

json_t *tb_host_json(void) {
    json_t *o = json_object(), *gpus = json_array(), *notes = json_array();
    if (!o || !gpus || !notes) {
        json_decref(o);
        json_decref(gpus);
        json_decref(notes);
        return NULL;
    }
    int bad = 0;

    char host[HOST_NAME_MAX + 1] = "";
    if (gethostname(host, sizeof host)) host[0] = '\0';
    host[HOST_NAME_MAX] = '\0';
    bad |= json_object_set_new(o, "hostname", host[0] ? tb_json_string_lossy(host) : json_null());

    char *cpu = read_keyed_value("/proc/cpuinfo", "model name");
    bad |= json_object_set_new(o, "cpu_model", cpu ? tb_json_string_lossy(cpu) : json_null());
    if (!cpu) bad |= json_array_append_new(notes, json_string("cpu_model: /proc/cpuinfo has no 'model name'"));
    free(cpu);

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    bad |= json_object_set_new(o, "cores", json_integer(cores > 0 ? cores : 1));

    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    json_int_t mem = pages > 0 && page > 0 ? (json_int_t)pages * page : 0;
    if (mem <= 0) {
        char *kb = read_keyed_value("/proc/meminfo", "MemTotal");
        if (kb) mem = (json_int_t)strtoll(kb, NULL, 10) * 1024;
        free(kb);
    }
    bad |= json_object_set_new(o, "memory_bytes", mem > 0 ? json_integer(mem) : json_null());

    glob_t gl;
    if (glob("/proc/driver/nvidia/gpus/*/information", 0, NULL, &gl) == 0) {
        for (size_t i = 0; i < gl.gl_pathc; i++) {
            char *model = read_keyed_value(gl.gl_pathv[i], "Model");
            char *bus = read_keyed_value(gl.gl_pathv[i], "Bus Location");
            json_t *g = json_object();
            if (g) {
                bad |= json_object_set_new(g, "model", model ? tb_json_string_lossy(model) : json_null());
                bad |= json_object_set_new(g, "bus", bus ? tb_json_string_lossy(bus) : json_null());
            }
            bad |= json_array_append_new(gpus, g);
            free(model);
            free(bus);
        }
        globfree(&gl);
    }
    bad |= json_object_set_new(o, "gpus", gpus);

    char *driver = nvidia_driver_version();
    bad |= json_object_set_new(o, "driver", driver ? tb_json_string_lossy(driver) : json_null());
    if (!driver) bad |= json_array_append_new(notes, json_string("driver: no NVIDIA kernel driver loaded"));
    free(driver);

#ifdef TB_CUDA_TOOLKIT_VERSION
    bad |= json_object_set_new(o, "cuda", json_string(TB_CUDA_TOOLKIT_VERSION));
#else
    bad |= json_object_set_new(o, "cuda", json_null());
    bad |= json_array_append_new(notes, json_string("cuda: this build was configured without the CUDA toolkit"));
#endif

    int v = 0;
    if (dl_version_call("libcuda.so.1", "cuDriverGetVersion", &v) == 0 && v > 0) {
        char s[32];
        snprintf(s, sizeof s, "%d.%d", v / 1000, (v % 1000) / 10);
        bad |= json_object_set_new(o, "cuda_driver", json_string(s));
    } else {
        bad |= json_object_set_new(o, "cuda_driver", json_null());
        bad |= json_array_append_new(notes, json_string("cuda_driver: libcuda.so.1 not loadable (no NVIDIA driver)"));
    }

    v = 0;
    if (dl_version_call("libnccl.so.2", "ncclGetVersion", &v) == 0 && v > 0) {
        // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + ... before
        int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? (v % 10000) / 100 : (v % 1000) / 100;
        char s[32];
        snprintf(s, sizeof s, "%d.%d.%d", major, minor, v % 100);
        bad |= json_object_set_new(o, "nccl", json_string(s));
    } else {
        bad |= json_object_set_new(o, "nccl", json_null());
        bad |= json_array_append_new(notes, json_string("nccl: libnccl.so.2 not loadable"));
    }

#if defined(__clang__)
    const char *compiler = "clang " TB_STR(__clang_major__) "." TB_STR(__clang_minor__) "." TB_STR(__clang_patchlevel__);
#elif defined(__GNUC__)
    const char *compiler = "gcc " __VERSION__;
#else
    const char *compiler = "unknown";
#endif
    bad |= json_object_set_new(o, "compiler", tb_json_string_lossy(compiler));
#ifdef NDEBUG
    bad |= json_object_set_new(o, "build_type", json_string("Release"));
#else
    bad |= json_object_set_new(o, "build_type", json_string("Debug"));
#endif

    if (json_array_size(notes)) bad |= json_object_set_new(o, "notes", notes);
    else json_decref(notes);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}
