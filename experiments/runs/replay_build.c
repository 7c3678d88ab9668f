// replay_build.c — the engine a replay runs, built or kept (replay_build.h).
#include "runs/replay_build.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/xalloc.h"
#include "records/provenance.h"

#define KEPT_DIR ".replay-builds"
#define DPKG_STATUS "/var/lib/dpkg/status"

// A string for the key: itself, or (not UTF-8, which JSON cannot hold) its sha256.
static json_t *key_string(const char *s) {
    if (!s) return json_null();
    json_t *v = json_string(s);
    if (v) return v;
    char hex[65];
    tb_sha256_hex(s, strlen(s), hex);
    return json_sprintf("(not UTF-8, sha256 %s)", hex);
}

// The first (last: the last non-empty) line a command prints; null when it printed nothing.
static json_t *line_of(const char *command, int last) {
    FILE *p = popen(command, "r");
    if (!p) return json_null();
    char line[512], keep[512] = "";
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0]) snprintf(keep, sizeof keep, "%s", line);
        if (keep[0] && !last) break;
    }
    pclose(p);
    return keep[0] ? key_string(keep) : json_null();
}

// nvcc where CMake finds it: $CUDACXX, else the PATH's, else the toolkit's ($CUDA_PATH,
// $CUDA_HOME, /usr/local/cuda); its real path, or NULL.
static const char *nvcc_path(char real[PATH_MAX]) {
    char found[PATH_MAX] = "";
    const char *cuda = getenv("CUDA_PATH") ? getenv("CUDA_PATH")
                       : getenv("CUDA_HOME") ? getenv("CUDA_HOME")
                                             : "/usr/local/cuda";
    if (getenv("CUDACXX")) {
        snprintf(found, sizeof found, "%s", getenv("CUDACXX"));
    } else {
        FILE *p = popen("command -v nvcc 2>/dev/null", "r");
        if (p) {
            if (fgets(found, sizeof found, p)) found[strcspn(found, "\n")] = '\0';
            pclose(p);
        }
        if (!found[0]) snprintf(found, sizeof found, "%s/bin/nvcc", cuda);
    }
    return realpath(found, real);
}

// The host the build is for: -march=native and CUDA's "native" architectures compile for it.
static json_t *host_material(void) {
    struct utsname u;
    json_t *host = json_object();
    json_object_set_new(host, "name", uname(&u) == 0 ? key_string(u.nodename) : json_null());
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096], model[4096] = "", flags_hex[65] = "";
    while (f && fgets(line, sizeof line, f) && !(model[0] && flags_hex[0])) {
        line[strcspn(line, "\n")] = '\0';
        if (!model[0] && !strncmp(line, "model name", 10)) memcpy(model, line, sizeof model);
        if (!flags_hex[0] && !strncmp(line, "flags", 5)) tb_sha256_hex(line, strlen(line), flags_hex);
    }
    if (f) fclose(f);
    json_object_set_new(host, "cpu", model[0] ? key_string(model) : json_null());
    json_object_set_new(host, "cpu_flags_sha256", flags_hex[0] ? json_string(flags_hex) : json_null());
    // the libraries CMake finds (MPI, NCCL, BLAS, ...) as the package manager installed them: any
    // install or upgrade makes a new key (on Debian; elsewhere null, and --rebuild after one)
    char packages[65];
    tb_error err;
    json_object_set_new(host, "dpkg_status_sha256",
                        tb_sha256_file(DPKG_STATUS, packages, &err) == 0 ? json_string(packages) : json_null());
    return host;
}

// What the key is made of (replay_build.h): a JSON object, also kept in build.json.
static json_t *key_material(const tb_replay_build *b) {
    static const char *const env[] = {"CC",        "CXX",          "CFLAGS",    "CXXFLAGS",       "LDFLAGS",
                                      "CUDACXX",   "CUDAHOSTCXX",  "CUDAFLAGS", "CUDAARCHS",      "CUDA_PATH",
                                      "CUDA_HOME", "PATH",         "CPATH",     "C_INCLUDE_PATH", "LIBRARY_PATH",
                                      "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH"};
    json_t *tools = json_object();
    for (size_t i = 0; i < sizeof env / sizeof *env; i++)
        json_object_set_new(tools, env[i], key_string(getenv(env[i])));
    json_object_set_new(tools, "cc --version", line_of("${CC:-cc} --version 2>/dev/null", 0));
    json_object_set_new(tools, "nvcc's host compiler --version",
                        line_of("${CUDAHOSTCXX:-g++} --version 2>/dev/null", 0));
    json_object_set_new(tools, "cmake --version", line_of("cmake --version 2>/dev/null", 0));
    char real[PATH_MAX];
    const char *nvcc = nvcc_path(real);
    json_object_set_new(tools, "nvcc", key_string(nvcc));
    if (nvcc && !strchr(nvcc, '\'')) {  // (a path with a quote: no version asked, the path keys it)
        char cmd[PATH_MAX + 32];
        snprintf(cmd, sizeof cmd, "'%s' --version 2>/dev/null", nvcc);
        json_object_set_new(tools, "nvcc --version", line_of(cmd, 1));
    }
    return json_pack("{s:s, s:o, s:s, s:o, s:o}", "commit", b->commit, "patch_sha256", key_string(b->patch_sha256),
                     "cmake_args", b->cmake_args, "toolchain", tools, "host", host_material());
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

// rm -rf; a failure is said on stderr (a leftover temporary directory, nothing lost). 0 when removed.
static int remove_tree(const char *path) {
    tb_error err;
    if (tb_remove_tree(path, &err) == 0) return 0;
    fprintf(stderr, "tracebook replay: could not remove %s\n", err.msg);
    return -1;
}

// The kept build at entry, when its build.json names `key` and its pretrain_gpt has the sha256
// recorded there: linked (or copied) to <wt>/pretrain_gpt first and that file checked, so
// another replay replacing the entry meanwhile (a rename) cannot change what runs. 1 (engine
// set), 0 when nothing is kept there, -1 when what is kept is not this build (why said on say).
static int kept_build(const tb_replay_build *b, const char *entry, const json_t *key, const char *wt, char *engine,
                      size_t len) {
    char path[PATH_MAX], kept_bin[PATH_MAX], hex[65], why[PATH_MAX + 256] = "";
    tb_error err;
    engine[0] = '\0';
    if (tb_path_format(path, sizeof path, &err, "%s/build.json", entry) != 0 || access(path, F_OK) != 0) return 0;
    json_error_t jerr;
    json_t *kept = tb_json_load_file(path, 0, &jerr);
    const char *sha = json_string_value(json_object_get(kept, "sha256"));
    if (!kept)
        snprintf(why, sizeof why, "its build.json cannot be read: %s", jerr.text);
    else if (!sha || !json_equal(json_object_get(kept, "key"), key))
        snprintf(why, sizeof why, "its build.json names other inputs (key) or no sha256");
    else if (tb_path_format(kept_bin, sizeof kept_bin, &err, "%s/pretrain_gpt", entry) != 0 ||
             tb_path_format(engine, len, &err, "%s/pretrain_gpt", wt) != 0)
        snprintf(why, sizeof why, "%s", err.msg);
    else if (link(kept_bin, engine) != 0 && copy_file(kept_bin, engine) != 0)
        snprintf(why, sizeof why, "its pretrain_gpt cannot be linked or copied to %s: %s", engine, strerror(errno));
    else if (tb_sha256_file(engine, hex, &err) != 0)
        snprintf(why, sizeof why, "%s", err.msg);
    else if (strcmp(hex, sha) != 0)
        snprintf(why, sizeof why, "its pretrain_gpt has sha256 %s, its build.json records %s", hex, sha);
    json_decref(kept);
    if (!why[0]) {
        utimensat(AT_FDCWD, path, NULL, 0);  // used now: the last to go (tidy_kept)
        return 1;
    }
    fprintf(b->say, "  the kept build %s is not used: %s; building again\n", entry, why);
    if (engine[0]) unlink(engine);
    engine[0] = '\0';
    return -1;
}

// An entry's name: the key's first 16 hex digits.
static int is_entry_name(const char *name) {
    size_t n = 0;
    while (name[n] && strchr("0123456789abcdef", name[n])) n++;
    return n == 16 && !name[n];
}

// A replay's temporary entry, <entry>.tmp.<pid> or <entry>.old.<pid> (tb_replay_build_keep): its
// pid, else 0.
static long leftover_pid(const char *name) {
    char entry[17];
    snprintf(entry, sizeof entry, "%.16s", name);
    if (!is_entry_name(entry) || (strncmp(name + 16, ".tmp.", 5) && strncmp(name + 16, ".old.", 5))) return 0;
    long pid = 0;
    const char *c = name + 21;
    for (; *c >= '0' && *c <= '9' && pid <= INT_MAX; c++) pid = pid * 10 + (*c - '0');
    return *c || c == name + 21 || pid > INT_MAX ? 0 : pid;
}

// A leftover's age before it is removed: a replay holds its temporary entry for the seconds
// of a copy and two renames, so one this old whose pid has no process here is a dead
// replay's, even when .replay-builds is shared with another host or container (whose pids
// this one cannot see).
#define LEFTOVER_AGE_S 600

typedef struct kept_entry {
    char name[17];
    struct timespec used;  // build.json's mtime: when it was kept or last run
} kept_entry;

static int more_recent_first(const void *a, const void *b) {
    const struct timespec *x = &((const kept_entry *)a)->used, *y = &((const kept_entry *)b)->used;
    if (x->tv_sec != y->tv_sec) return x->tv_sec < y->tv_sec ? 1 : -1;
    return x->tv_nsec < y->tv_nsec ? 1 : x->tv_nsec > y->tv_nsec ? -1 : 0;
}

// A removal said on say (why it failed: on stderr).
static void remove_said(const tb_replay_build *b, const char *path, const char *why) {
    if (remove_tree(path) == 0) fprintf(b->say, "  removed %s, %s\n", path, why);
}

// After a build is kept in dir (.replay-builds): what replays that no longer run left there (killed
// between making a temporary entry and renaming it: <entry>.tmp.<pid> or .old.<pid>, older than
// LEFTOVER_AGE_S, of a pid with no process), and the kept builds beyond TB_REPLAY_KEPT_MAX, the
// least recently used first (never `keep`, the one just kept). A replay that was about to run a
// build removed here finds it gone and builds again.
static void tidy_kept(const tb_replay_build *b, const char *dir, const char *keep) {
    DIR *d = opendir(dir);
    if (!d) return;
    kept_entry *entries = NULL;
    size_t n = 0, cap = 0;
    char path[PATH_MAX], why[128];
    tb_error err;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (struct dirent *e; (e = readdir(d));) {
        struct stat st;
        if (tb_path_format(path, sizeof path, &err, "%s/%s", dir, e->d_name) != 0 || lstat(path, &st) != 0) continue;
        long pid = leftover_pid(e->d_name);
        if (pid) {
            if (pid != (long)getpid() && now.tv_sec - st.st_mtim.tv_sec > LEFTOVER_AGE_S && kill((pid_t)pid, 0) != 0 &&
                errno == ESRCH) {
                snprintf(why, sizeof why, "left by replay process %ld, which no longer runs", pid);
                remove_said(b, path, why);
            }
            continue;
        }
        if (!is_entry_name(e->d_name) || !strcmp(e->d_name, keep)) continue;
        // by build.json's time; an entry without one (not a build) by its own
        if (tb_path_format(path, sizeof path, &err, "%s/%s/build.json", dir, e->d_name) == 0) stat(path, &st);
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            entries = tb_xreallocarray(entries, cap, sizeof *entries, "kept replay builds");
        }
        memcpy(entries[n].name, e->d_name, sizeof entries[n].name);  // 16 hex digits and their NUL
        entries[n++].used = st.st_mtim;
    }
    closedir(d);
    if (n) qsort(entries, n, sizeof *entries, more_recent_first);
    snprintf(why, sizeof why, "the least recently used build (%d are kept)", TB_REPLAY_KEPT_MAX);
    for (size_t i = TB_REPLAY_KEPT_MAX - 1; i < n; i++)  // the one just kept counts as the most recent
        if (tb_path_format(path, sizeof path, &err, "%s/%s", dir, entries[i].name) == 0) remove_said(b, path, why);
    free(entries);
}

int tb_replay_build_keep(const tb_replay_build *b, const char *log, const char *built, const char *entry,
                         const json_t *key) {
    char dir[PATH_MAX], tmp[PATH_MAX], old[PATH_MAX], path[PATH_MAX], hex[65], now[32];
    tb_error err;
    int rc = -1, had = 0;
    snprintf(dir, sizeof dir, "%s", entry);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    if (tb_mkdir_p(dir, &err) != 0 || tb_path_format(tmp, sizeof tmp, &err, "%s.tmp.%ld", entry, (long)getpid()) != 0 ||
        tb_path_format(old, sizeof old, &err, "%s.old.%ld", entry, (long)getpid()) != 0)
        goto out;
    remove_tree(tmp);  // a crashed replay's of the same pid
    if (tb_mkdir_p(tmp, &err) != 0 || tb_path_format(path, sizeof path, &err, "%s/pretrain_gpt", tmp) != 0) goto out;
    if (copy_file(built, path) != 0) {
        tb_fail(&err, "copying %s to %s: %s", built, path, strerror(errno));
        goto out;
    }
    if (tb_sha256_file(path, hex, &err) != 0 || tb_path_format(path, sizeof path, &err, "%s/build.json", tmp) != 0)
        goto out;
    tb_iso_now(now, sizeof now);
    json_t *doc = json_pack("{s:O, s:s, s:s, s:s}", "key", key, "sha256", hex, "built_at", now, "built_for", b->run_id);
    int written = tb_write_json_atomic(path, doc, &err);
    json_decref(doc);
    if (written != 0 || tb_path_format(path, sizeof path, &err, "%s/build.log", tmp) != 0) goto out;
    if (copy_file(log, path) != 0) {
        tb_fail(&err, "copying %s: %s", log, strerror(errno));
        goto out;
    }
    // in place of what is there (a build that did not match, or --rebuild's): set aside,
    // then put back if the new one cannot take its place
    struct stat st;
    had = lstat(entry, &st) == 0;
    if (had && rename(entry, old) != 0) {
        tb_fail(&err, "setting %s aside as %s: %s", entry, old, strerror(errno));
        goto out;
    }
    if (rename(tmp, entry) != 0) {
        tb_fail(&err, "renaming %s to %s: %s", tmp, entry, strerror(errno));
        if (had && rename(old, entry) != 0) remove_tree(old);
        goto out;
    }
    if (had) remove_tree(old);
    tidy_kept(b, dir, strrchr(entry, '/') ? strrchr(entry, '/') + 1 : entry);
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
    if (!dump) {
        json_decref(material);
        return tb_fail(err, "the build's key could not be written as JSON");
    }
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
    char entry[PATH_MAX];
    int rc = -1;
    if (tb_replay_build_entry(b, entry, sizeof entry, &key, &err) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        goto out;
    }
    if ((size_t)snprintf(wt, wt_len, "/tmp/tracebook-replay-XXXXXX") >= wt_len || !mkdtemp(wt)) {
        fprintf(stderr, "tracebook replay: cannot create a temporary directory\n");
        wt[0] = '\0';
        goto out;
    }
    const char *patched = b->patch ? " + saved patch" : "";
    if (!b->rebuild && kept_build(b, entry, key, wt, engine, engine_len) == 1) {
        fprintf(b->say, "replay %s: commit %.12s%s\n", b->run_id, b->commit, patched);
        fprintf(b->say,
                "  pretrain_gpt at the recorded revision with %s: the build an earlier replay kept (%s, its "
                "sha256 checked; --rebuild builds it again)\n",
                b->cmake_args, entry);
        rc = 0;
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
    // this replay runs its own build; a copy is kept for the next
    char log[PATH_MAX];
    if (tb_path_format(engine, engine_len, &err, "%s/build/bin/pretrain_gpt", tree) != 0 ||
        tb_path_format(log, sizeof log, &err, "%s/build.log", wt) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        goto out;
    }
    if (tb_replay_build_keep(b, log, engine, entry, key) == 0)
        fprintf(b->say, "  kept for a later replay of this revision with these options: %s\n", entry);
    rc = 0;
out:
    json_decref(key);
    return rc;
}
