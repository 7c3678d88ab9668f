#include "core/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/fileio.h"

static const struct {
    const char *kind, *ext, *pattern;
} rank_files[TB_RANK_NKINDS] = {
    [TB_RANK_METRICS] = {"metrics", "jsonl", "metrics.rank-NNNNN.jsonl"},
    [TB_RANK_TRACE] = {"trace", "json", "trace.rank-NNNNN.json"},
    [TB_RANK_MEMORY] = {"memory", "json", "memory.rank-NNNNN.json"},
    [TB_RANK_HANG_PART] = {"hang", "json", "hang.rank-NNNNN.json"},
    [TB_RANK_OOM_PART] = {"oom", "json", "oom.rank-NNNNN.json"},
};

int tb_run_dir_create(const char *requested, char *out, size_t len, tb_error *err) {
    int n;
    if (requested && requested[0]) {
        n = snprintf(out, len, "%s", requested);
    } else {
        char stamp[32];
        time_t now = time(NULL);
        struct tm local;
        strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", localtime_r(&now, &local));
        n = snprintf(out, len, "%s/%s", TB_RUN_ADHOC_ROOT, stamp);
        struct stat st;
        for (int i = 1; n > 0 && (size_t)n < len && stat(out, &st) == 0; i++)
            n = snprintf(out, len, "%s/%s.%d", TB_RUN_ADHOC_ROOT, stamp, i);
    }
    if (n < 0 || (size_t)n >= len) return tb_fail(err, "run directory path too long: %s", requested ? requested : "");
    return tb_mkdir_p(out, err);
}

int tb_run_dir_check_unused(const char *flag, const char *dir, tb_error *err) {
    if (!dir || !dir[0]) return 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        return tb_fail(err, "%s %s: cannot read it as a directory: %s", flag, dir, strerror(errno));
    }
    const struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) && (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))) {
    }
    int rc = 0;
    if (e)
        rc = tb_fail(err, "%s %s: not empty (it holds %s): a run's files are never mixed with, or written over, "
                          "another run's; name a new or empty directory", flag, dir, e->d_name);
    else if (errno)
        rc = tb_fail(err, "%s %s: cannot list it: %s", flag, dir, strerror(errno));
    closedir(d);
    return rc;
}

const char *tb_rank_file_pattern(tb_rank_file kind) { return rank_files[kind].pattern; }

int tb_run_path(char *buf, size_t len, const char *dir, const char *name, tb_error *err) {
    int n = snprintf(buf, len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= len) return tb_fail(err, "path too long: %s/%s", dir, name);
    return 0;
}

int tb_rank_file_path(char *buf, size_t len, const char *dir, tb_rank_file kind, int rank, tb_error *err) {
    int n = snprintf(buf, len, "%s/%s.rank-%05d.%s", dir, rank_files[kind].kind, rank, rank_files[kind].ext);
    if (n < 0 || (size_t)n >= len)
        return tb_fail(err, "path too long: %s/%s (rank %d)", dir, rank_files[kind].pattern, rank);
    return 0;
}

int tb_rank_file_match(const char *name, tb_rank_file kind, int *rank) {
    size_t k = strlen(rank_files[kind].kind), e = strlen(rank_files[kind].ext);
    // "<kind>.rank-" + at least one digit + "." + ext
    if (strncmp(name, rank_files[kind].kind, k) != 0 || strncmp(name + k, ".rank-", 6) != 0) return 0;
    const char *d = name + k + 6;
    int value = 0, digits = 0;
    for (; *d >= '0' && *d <= '9'; d++, digits++) {
        if (value > 100000000) return 0;
        value = value * 10 + (*d - '0');
    }
    if (digits == 0 || *d != '.' || strcmp(d + 1, rank_files[kind].ext) != 0 || strlen(d + 1) != e) return 0;
    *rank = value;
    return 1;
}
