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
    tb_rt_link_parents(rt);
    return 0;
}
