// map_traces.c — see map_traces.h.
#include "map_traces.h"

#include <stdio.h>
#include <string.h>

#include "map_chrome.h"
#include "map_nsys.h"

int tb_rt_load(tb_rt *rt, char **paths, int npaths, tb_error *err) {
    tb_rt_init(rt);
    int next_rank = 0;
    for (int i = 0; i < npaths; i++) {
        FILE *f = fopen(paths[i], "rb");
        if (!f) return tb_fail(err, "%s: cannot open trace", paths[i]);
        char head[16] = {0};
        size_t got = fread(head, 1, sizeof head, f);
        fclose(f);
        int first = rt->nev;
        int rc = got == 16 && !memcmp(head, "SQLite format 3", 16) ? tb_rt_load_nsys(rt, paths[i], next_rank, err)
                                                                    : tb_rt_load_chrome(rt, paths[i], err);
        if (rc != 0) return -1;
        for (int k = first; k < rt->nev; k++)
            if (rt->ev[k].rank + 1 > next_rank) next_rank = rt->ev[k].rank + 1;
    }
    if (rt->nev == 0 && npaths > 0) {
        // nothing to map: an empty or foreign trace, never "0/0 (100%)"
        size_t used = (size_t)snprintf(err->msg, sizeof err->msg, "no range events in the trace%s:",
                                       npaths == 1 ? "" : "s");
        for (int i = 0; i < npaths && used < sizeof err->msg; i++)
            used += (size_t)snprintf(err->msg + used, sizeof err->msg - used, " %s%s", paths[i],
                                     i + 1 < npaths ? "," : "");
        if (used < sizeof err->msg)
            snprintf(err->msg + used, sizeof err->msg - used,
                     " (Chrome traces: complete \"X\" events with a name, ts and dur; Nsight Systems exports: "
                     "NVTX push/pop ranges)%s",
                     rt->ndropped ? "; every one found was malformed" : "");
        for (int i = 0; i < npaths && rt->ndropped; i++) {
            char drops[1024];
            tb_rt_drops_text(rt, paths[i], drops, sizeof drops);
            used = strlen(err->msg);
            if (drops[0] && used < sizeof err->msg) snprintf(err->msg + used, sizeof err->msg - used, "; %s: %s", paths[i], drops);
        }
        return -1;
    }
    tb_rt_link_parents(rt);
    return 0;
}
