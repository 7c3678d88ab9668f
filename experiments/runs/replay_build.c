// replay_build.c — the engine a replay runs, built or kept (replay_build.h).
#include "runs/replay_build.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/fileio.h"
#include "records/provenance.h"

#define KEPT_DIR ".replay-builds"

// The first line a command prints, or NULL (it printed nothing, or could not run).
static json_t *first_line_of(const char *command) {
    FILE *p = popen(command, "r");
    if (!p) return json_null();
    char line[512] = "";
    char *got = fgets(line, sizeof line, p);
    pclose(p);
    if (!got) return json_null();
    line[strcspn(line, "\n")] = '\0';
    return json_string(line);
}

// What the key is made of (replay_build.h): a JSON object, also kept in build.json.
static json_t *key_material(const tb_replay_build *b) {
    static const char *const env[] = {"CC",        "CFLAGS",    "LDFLAGS",   "CUDACXX",
                                      "CUDAFLAGS", "CUDA_PATH", "CUDA_HOME", "PATH"};
    json_t *tools = json_object();
    for (size_t i = 0; i < sizeof env / sizeof *env; i++) {
        const char *v = getenv(env[i]);
        json_object_set_new(tools, env[i], v ? json_string(v) : json_null());
    }
    json_object_set_new(tools, "cc --version", first_line_of("${CC:-cc} --version 2>/dev/null"));
    const char *cuda = getenv("CUDA_PATH") ? getenv("CUDA_PATH")
                       : getenv("CUDA_HOME") ? getenv("CUDA_HOME")
                                             : "/usr/local/cuda";
    char nvcc[PATH_MAX], real[PATH_MAX];
    snprintf(nvcc, sizeof nvcc, "%s/bin/nvcc", cuda);
    const char *named = getenv("CUDACXX") ? getenv("CUDACXX") : nvcc;
    json_object_set_new(tools, "nvcc", realpath(named, real) ? json_string(real) : json_null());
    return json_pack("{s:s, s:o, s:s, s:o}", "commit", b->commit, "patch_sha256",
                     b->patch_sha256 ? json_string(b->patch_sha256) : json_null(), "cmake_args", b->cmake_args,
                     "toolchain", tools);
}

// from → to (created 0755, or replaced); 0 or -1 with errno set.
static int copy_file(const char *from, const char *to) {
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0) return -1;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    if (out < 0) {
        int e = errno;
        close(in);
        errno = e;
        return -1;
    }
    char buf[1 << 16];
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = read(in, buf, sizeof buf)) != 0) {
        if (n < 0) rc = -1;
        for (ssize_t done = 0, w; rc == 0 && done < n; done += w)
            if ((w = write(out, buf + done, (size_t)(n - done))) < 0) rc = -1;
    }
    int e = errno;
    close(in);
    if (close(out) != 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    errno = e;
    return rc;
}

static void remove_tree(const char *dir) {
    char rm[PATH_MAX + 16];
    tb_error err;
    if (tb_path_format(rm, sizeof rm, &err, "rm -rf '%s'", dir) == 0 && system(rm) != 0)
        fprintf(stderr, "tracebook replay: could not remove %s\n", dir);
}

// The kept build at entry when its build.json names `key` and its binary's sha256 is the one
// recorded there: 1 (engine set), 0 when there is none, -1 when there is one that does not
// match (said on say).
static int kept_build(const tb_replay_build *b, const char *entry, const json_t *key, char *engine, size_t len) {
    char path[PATH_MAX], hex[65];
    tb_error err;
    if (tb_path_format(path, sizeof path, &err, "%s/build.json", entry) != 0) return 0;
    if (access(path, F_OK) != 0) return 0;
    json_error_t jerr;
    json_t *kept = tb_json_load_file(path, 0, &jerr);
    const char *sha = json_string_value(json_object_get(kept, "sha256"));
    int ok = kept && sha && json_equal(json_object_get(kept, "key"), key) &&
             tb_path_format(engine, len, &err, "%s/pretrain_gpt", entry) == 0 &&
             tb_sha256_file(engine, hex, &err) == 0 && !strcmp(hex, sha);
    if (!ok)
        fprintf(b->say,
                "  the kept build %s is not this one, or its pretrain_gpt no longer has the sha256 its "
                "build.json records: building again\n",
                entry);
    json_decref(kept);
    return ok ? 1 : -1;
}

// A fresh build's binary, log and build.json into entry (replacing what is there): 0, or -1
// (said on say: the replay goes on with the build tree's binary).
static int keep_build(const tb_replay_build *b, const char *wt, const char *built, const char *entry, json_t *key) {
    char tmp[PATH_MAX], old[PATH_MAX], path[PATH_MAX], hex[65], now[32];
    tb_error err;
    int rc = -1;
    if (tb_path_format(tmp, sizeof tmp, &err, "%s.tmp.%ld", entry, (long)getpid()) != 0 ||
        tb_path_format(old, sizeof old, &err, "%s.old.%ld", entry, (long)getpid()) != 0 || tb_mkdir_p(tmp, &err) != 0)
        goto out;
    tb_iso_now(now, sizeof now);
    if (tb_path_format(path, sizeof path, &err, "%s/pretrain_gpt", tmp) != 0) goto out;
    if (copy_file(built, path) != 0) {
        tb_fail(&err, "copying %s to %s: %s", built, path, strerror(errno));
        goto out;
    }
    if (tb_sha256_file(path, hex, &err) != 0 || tb_path_format(path, sizeof path, &err, "%s/build.json", tmp) != 0)
        goto out;
    json_t *doc = json_pack("{s:O, s:s, s:s, s:s}", "key", key, "sha256", hex, "built_at", now, "built_for", b->run_id);
    int written = tb_write_json_atomic(path, doc, &err);
    json_decref(doc);
    char log[PATH_MAX];
    if (written != 0 || tb_path_format(log, sizeof log, &err, "%s/build.log", wt) != 0 ||
        tb_path_format(path, sizeof path, &err, "%s/build.log", tmp) != 0)
        goto out;
    if (copy_file(log, path) != 0) {
        tb_fail(&err, "copying %s: %s", log, strerror(errno));
        goto out;
    }
    int had = access(entry, F_OK) == 0;
    if ((had && rename(entry, old) != 0) || rename(tmp, entry) != 0) {
        tb_fail(&err, "renaming %s to %s: %s", tmp, entry, strerror(errno));
        goto out;
    }
    if (had) remove_tree(old);
    rc = 0;
out:
    if (rc != 0) {
        fprintf(b->say, "  not kept for a later replay: %s\n", err.msg);
        remove_tree(tmp);
    }
    return rc;
}

int tb_replay_build_entry(const tb_replay_build *b, char *entry, size_t len, json_t **key, tb_error *err) {
    json_t *material = key_material(b);
    char *dump = json_dumps(material, JSON_COMPACT | JSON_SORT_KEYS);
    char hex[65];
    tb_sha256_hex(dump, strlen(dump), hex);
    free(dump);
    int rc = tb_path_format(entry, len, err, "%s/" KEPT_DIR "/%.16s", b->artifacts, hex);
    if (key && rc == 0) *key = material;
    else json_decref(material);
    return rc;
}

int tb_replay_build_engine(const tb_replay_build *b, char *engine, size_t engine_len, char *wt, size_t wt_len,
                           int *keep) {
    tb_error err;
    wt[0] = '\0';
    *keep = 0;
    json_t *key = NULL;
    char entry[PATH_MAX], dir[PATH_MAX];
    int rc = -1;
    if (tb_replay_build_entry(b, entry, sizeof entry, &key, &err) != 0 ||
        tb_path_format(dir, sizeof dir, &err, "%s/" KEPT_DIR, b->artifacts) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        goto out;
    }
    const char *patched = b->patch ? " + saved patch" : "";
    if (!b->rebuild && kept_build(b, entry, key, engine, engine_len) == 1) {
        fprintf(b->say, "replay %s: commit %.12s%s\n", b->run_id, b->commit, patched);
        fprintf(b->say, "  pretrain_gpt at the recorded revision with %s: the build an earlier replay kept (%s, its "
                        "sha256 checked; --rebuild builds it again)\n", b->cmake_args, entry);
        rc = 0;
        goto out;
    }
    if ((size_t)snprintf(wt, wt_len, "/tmp/tracebook-replay-XXXXXX") >= wt_len || !mkdtemp(wt)) {
        fprintf(stderr, "tracebook replay: cannot create a temporary directory\n");
        wt[0] = '\0';
        goto out;
    }
    char tree[PATH_MAX];
    if (tb_path_format(tree, sizeof tree, &err, "%s/src", wt) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        goto out;
    }
    fprintf(b->say, "replay %s: commit %.12s%s into %s\n", b->run_id, b->commit, patched, tree);
    if (tb_git_worktree_at(b->repo_root, b->commit, tree, &err) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        goto out;
    }
    if (b->patch && tb_git_apply_patch(tree, b->patch, b->patch_len, &err) != 0) {
        fprintf(stderr, "tracebook replay: the saved patch no longer applies: %s\n", err.msg);
        goto out;
    }
    char cmd[PATH_MAX * 3 + 2048];
    if (tb_path_format(cmd, sizeof cmd, &err,
                       "cmake -S %s -B %s/build %s > %s/build.log 2>&1 && "
                       "cmake --build %s/build --target pretrain_gpt -j%d >> %s/build.log 2>&1",
                       tree, tree, b->cmake_args, wt, tree, b->jobs > 0 ? b->jobs : 1, wt) != 0) {
        fprintf(stderr, "tracebook replay: the build command: %s\n", err.msg);
        goto out;
    }
    fprintf(b->say, "  building pretrain_gpt at the recorded revision with %s (log: %s/build.log)\n", b->cmake_args,
            wt);
    fflush(b->say);
    if (system(cmd) != 0) {
        fprintf(stderr, "tracebook replay: the build at %.12s failed (see %s/build.log)\n", b->commit, wt);
        *keep = 1;
        goto out;
    }
    char built[PATH_MAX];
    if (tb_path_format(built, sizeof built, &err, "%s/build/bin/pretrain_gpt", tree) != 0 ||
        tb_mkdir_p(dir, &err) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        goto out;
    }
    if (keep_build(b, wt, built, entry, key) == 0 &&
        tb_path_format(engine, engine_len, &err, "%s/pretrain_gpt", entry) == 0) {
        fprintf(b->say, "  kept for a later replay of this revision with these options: %s\n", entry);
    } else if (tb_path_format(engine, engine_len, &err, "%s", built) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        goto out;
    }
    rc = 0;
out:
    json_decref(key);
    return rc;
}
