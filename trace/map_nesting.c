// map_nesting.c — see map_nesting.h.
#include "map_nesting.h"

#include "vec.h"

typedef struct name_pair {
    int parent, child;  // runtime names
    int count;          // events of child directly inside one of parent
} name_pair;

// Is the runtime nesting parent → child explained by a static path between their sites?
static const char *explain(tb_map *m, int parent, int child) {
    tb_graph *g = m->g;
    for (int i = 0; i < m->name_nsites[parent]; i++) {
        const tb_site_model *sm = tb_map_site(m, m->name_sites[parent][i]);
        for (int j = 0; j < m->name_nsites[child]; j++) {
            const tb_grange *cs = &g->ranges[m->name_sites[child][j]];
            for (int k = 0; k < sm->nregions; k++) {
                const tb_region *rg = &sm->regions[k];
                if (cs->fn == rg->fn && tb_region_has(rg, cs->pos))
                    return k == 0 ? "pushed inside the parent's span" : "pushed where the parent's range continues";
            }
            if (sm->reached[cs->fn]) return "reachable from the calls inside the parent's span";
        }
    }
    return NULL;
}

json_t *tb_map_nestings(tb_map *m, int *unexplained) {
    const tb_rt *rt = &m->rt;
    // distinct (parent, child) name pairs, in order of first appearance
    tb_vec pairs;
    tb_vec_init(&pairs, sizeof(name_pair), "nesting pairs");
    for (int i = 0; i < rt->nev; i++) {
        int p = rt->ev[i].parent;
        if (p < 0) continue;
        int a = rt->ev[p].name, b = rt->ev[i].name;
        size_t k;
        for (k = 0; k < pairs.len; k++)
            if (TB_VEC_AT(&pairs, name_pair, k).parent == a && TB_VEC_AT(&pairs, name_pair, k).child == b) break;
        if (k == pairs.len) *(name_pair *)tb_vec_push(&pairs) = (name_pair){a, b, 0};
        TB_VEC_AT(&pairs, name_pair, k).count++;
    }
    json_t *nestings = json_array();
    *unexplained = 0;
    for (size_t k = 0; k < pairs.len; k++) {
        const name_pair *np = &TB_VEC_AT(&pairs, name_pair, k);
        const char *how = explain(m, np->parent, np->child);
        json_t *nj = json_pack("{s:s, s:s, s:i, s:b}", "parent", rt->names[np->parent], "child",
                               rt->names[np->child], "count", np->count, "explained", how != NULL);
        if (how) json_object_set_new(nj, "how", json_string(how));
        else {
            (*unexplained)++;
            json_object_set_new(nj, "why", json_string(!m->name_nsites[np->parent]  ? "the parent has no source site"
                                                      : !m->name_nsites[np->child] ? "the child has no source site"
                                                      : "no static path from the parent's span to the child's site"));
        }
        json_array_append_new(nestings, nj);
    }
    tb_vec_free(&pairs);
    return nestings;
}
