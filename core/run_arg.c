// run_arg.c — a RUN argument resolved to its record and run directory (run_arg.h).
#include "core/run_arg.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/run_dir.h"

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static const char *base_name(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    const char *s = path + n;
    while (s > path && s[-1] != '/') s--;
    return s;
}

// A directory: a record when it holds a manifest (its run id the manifest's), else a run directory.
static int from_directory(const char *dir, tb_run_arg *out, tb_error *err) {
    char manifest[PATH_MAX];
    if (tb_path_format(manifest, sizeof manifest, err, "%s/" TB_RECORD_MANIFEST, dir) != 0) return -1;
    if (access(manifest, F_OK) != 0) {
        if (tb_path_format(out->run_dir, sizeof out->run_dir, err, "%s", dir) != 0) return -1;
        return 0;
    }
    if (tb_path_format(out->record_dir, sizeof out->record_dir, err, "%s", dir) != 0) return -1;
    char run[PATH_MAX];
    if (tb_path_format(run, sizeof run, err, "%s/" TB_RECORD_RUN_DIR, dir) != 0) return -1;
    snprintf(out->run_dir, sizeof out->run_dir, "%s", is_dir(run) ? run : dir);
    json_error_t je;
    json_t *m = json_load_file(manifest, 0, &je);
    const char *id = m ? json_string_value(json_object_get(m, "run_id")) : NULL;
    const char *name = base_name(dir);
    snprintf(out->run_id, sizeof out->run_id, "%.*s", (int)(id ? strlen(id) : strcspn(name, "/")), id ? id : name);
    json_decref(m);
    return 0;
}

int tb_run_arg_resolve(const char *arg, const char *artifacts, tb_run_arg *out, tb_error *err) {
    memset(out, 0, sizeof *out);
    if (!*arg) return tb_fail(err, "RUN '': give a run id, a record directory or a run directory");
    if (is_dir(arg)) return from_directory(arg, out, err);
    if (strchr(arg, '/'))
        return tb_fail(err, "RUN '%s': no such directory (a run id has no '/'; tracebook ls lists the runs)", arg);
    // <artifacts>/<experiment>/v<N>/<run-id>: the ids starting with arg; an exact one wins
    DIR *top = opendir(artifacts);
    if (!top) return tb_fail(err, "RUN '%s': not a directory, and no artifacts root '%s' to look the id up in", arg,
                             artifacts);
    char found[PATH_MAX] = "", second[256] = "";
    int n = 0, exact = 0, rc = 0;
    size_t len = strlen(arg);
    struct dirent *e;
    while (rc == 0 && !exact && (e = readdir(top))) {
        char exp_dir[PATH_MAX];
        if (e->d_name[0] == '.' || tb_path_format(exp_dir, sizeof exp_dir, err, "%s/%s", artifacts, e->d_name) != 0)
            continue;
        DIR *vd = opendir(exp_dir);
        struct dirent *v;
        while (vd && rc == 0 && !exact && (v = readdir(vd))) {
            char ver_dir[PATH_MAX];
            if (v->d_name[0] != 'v' || tb_path_format(ver_dir, sizeof ver_dir, err, "%s/%s", exp_dir, v->d_name) != 0)
                continue;
            DIR *rd = opendir(ver_dir);
            struct dirent *r;
            while (rd && rc == 0 && !exact && (r = readdir(rd))) {
                if (strncmp(r->d_name, arg, len) != 0) continue;
                exact = r->d_name[len] == '\0';
                if (exact || n++ == 0) rc = tb_path_format(found, sizeof found, err, "%s/%s", ver_dir, r->d_name);
                else if (!*second) snprintf(second, sizeof second, "%s", r->d_name);
            }
            if (rd) closedir(rd);
        }
        if (vd) closedir(vd);
    }
    closedir(top);
    if (rc != 0) return -1;
    if (!exact && n == 0)
        return tb_fail(err, "RUN '%s': not a directory, and no run id under %s starts with it (tracebook ls lists them)",
                       arg, artifacts);
    if (!exact && n > 1)
        return tb_fail(err, "RUN '%s' names %d runs under %s (%s, %s ...); give more of the id", arg, n, artifacts,
                       base_name(found), second);
    return from_directory(found, out, err);
}
