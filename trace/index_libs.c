// index_libs.c — see index_libs.h. The three forms a link's library takes on Linux:
//   - a shared object: the defined symbols of its dynamic symbol table (SHT_DYNSYM, the
//     names the dynamic linker resolves; ELF64, little-endian), looked up through its GNU
//     hash table (SHT_GNU_HASH: the Bloom filter, buckets and chains the dynamic linker
//     uses), so that only the pages a lookup touches are read and nothing is copied; an
//     object without one has its table read whole into a map;
//   - a static archive: the names of its symbol index (the "/" member GNU ar writes, or
//     "/SYM64/": a big-endian count, the member offsets, then the NUL-terminated names);
//   - a GNU ld script (Debian's libc.so, libm.so): the absolute paths it names (GROUP,
//     INPUT, AS_NEEDED), each read the same way.
// Files are mapped (libnccl.so is large); a shared object stays mapped until ix_libs_free.
#include "index_libs.h"

#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// A shared object's dynamic symbols and their GNU hash table, in its mapping.
typedef struct elf_table {
    const Elf64_Sym *syms;
    size_t nsyms;
    const char *strs;
    size_t strsize;
    const uint64_t *bloom;
    const uint32_t *buckets, *chain;
    uint32_t bloom_size, bloom_shift, nbuckets, symoffset;
    size_t nchain;
} elf_table;

typedef struct mapping {
    void *p;
    size_t size;
} mapping;

typedef struct ix_lib {
    tb_strmap names;  // the symbols of its archives and of shared objects without a GNU hash table
    tb_vec tables;    // of elf_table: its shared objects (itself, or those its ld script names)
    tb_vec maps;      // of mapping: theirs, unmapped by ix_libs_free
} ix_lib;

static void add_name(tb_strmap *names, const char *s, size_t n) {
    char buf[512];
    if (n == 0 || n >= sizeof buf) return;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *at = strchr(buf, '@');  // versioned names in archives: foo@@VERS
    if (at) *at = '\0';
    tb_strmap_put(names, buf, 1);
}

static int defined_sym(const Elf64_Sym *sym) {
    int bind = ELF64_ST_BIND(sym->st_info);
    return sym->st_shndx != SHN_UNDEF && (bind == STB_GLOBAL || bind == STB_WEAK);
}

// The object's first GNU hash table, checked against the file's bounds: 1 when found.
static int read_gnu_hash(const unsigned char *p, size_t size, const Elf64_Shdr *sh, unsigned nsh, elf_table *t) {
    for (unsigned i = 0; i < nsh; i++) {
        if (sh[i].sh_type != SHT_GNU_HASH || sh[i].sh_link >= nsh) continue;
        const Elf64_Shdr *dyn = &sh[sh[i].sh_link];
        if (dyn->sh_type != SHT_DYNSYM || dyn->sh_link >= nsh) continue;
        const Elf64_Shdr *str = &sh[dyn->sh_link];
        if (sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset || sh[i].sh_size < 16 ||
            dyn->sh_offset > size || dyn->sh_size > size - dyn->sh_offset || str->sh_offset > size ||
            str->sh_size > size - str->sh_offset || sh[i].sh_offset % 8 || dyn->sh_offset % 8)
            return 0;
        // the header (4 words), the Bloom filter (2 words an entry), the buckets, the chains
        const uint32_t *h = (const void *)(p + sh[i].sh_offset);
        size_t words = sh[i].sh_size / 4;
        if (h[0] == 0 || h[2] == 0 || (size_t)h[2] > (words - 4) / 2 || (size_t)h[0] > words - 4 - 2 * (size_t)h[2])
            return 0;
        *t = (elf_table){.syms = (const void *)(p + dyn->sh_offset),
                         .nsyms = dyn->sh_size / sizeof(Elf64_Sym),
                         .strs = (const char *)(p + str->sh_offset),
                         .strsize = str->sh_size,
                         .nbuckets = h[0],
                         .symoffset = h[1],
                         .bloom_size = h[2],
                         .bloom_shift = h[3],
                         .bloom = (const uint64_t *)(h + 4),
                         .buckets = h + 4 + 2 * (size_t)h[2]};
        t->chain = t->buckets + t->nbuckets;
        t->nchain = words - 4 - 2 * (size_t)h[2] - t->nbuckets;
        return 1;
    }
    return 0;
}

// The GNU hash of a symbol name (h = h * 33 + c from 5381, as the dynamic linker computes it).
static uint32_t gnu_hash(const char *s) {
    uint32_t h = 5381;
    for (; *s; s++) h = h * 33 + (unsigned char)*s;
    return h;
}

// Whether the object defines `name`: the Bloom filter's two bits, then the bucket's chain
// (hashes equal but for the last bit, which ends the chain), each candidate's name compared.
static int table_defines(const elf_table *t, const char *name) {
    uint32_t h = gnu_hash(name);
    uint64_t word = t->bloom[(h / 64) % t->bloom_size];
    uint64_t mask = 1ull << (h % 64) | 1ull << ((h >> t->bloom_shift) % 64);
    if ((word & mask) != mask) return 0;
    size_t n = strlen(name);
    for (uint32_t i = t->buckets[h % t->nbuckets]; i >= t->symoffset && i < t->nsyms && i - t->symoffset < t->nchain;
         i++) {
        uint32_t hi = t->chain[i - t->symoffset];
        const Elf64_Sym *sym = &t->syms[i];
        if ((hi | 1) == (h | 1) && defined_sym(sym) && sym->st_name < t->strsize && n < t->strsize - sym->st_name &&
            !memcmp(t->strs + sym->st_name, name, n) && t->strs[sym->st_name + n] == '\0')
            return 1;
        if (hi & 1) break;
    }
    return 0;
}

// A shared object: its GNU hash table into tables (1: the mapping is to be kept), or the
// defined symbols of its dynamic symbol table into names (0).
static int read_elf_dynsym(const unsigned char *p, size_t size, tb_strmap *names, tb_vec *tables) {
    if (size < sizeof(Elf64_Ehdr)) return 0;
    const Elf64_Ehdr *eh = (const void *)p;
    if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB) return 0;
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > size ||
        (size - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum || eh->e_shoff % 8)
        return 0;
    const Elf64_Shdr *sh = (const void *)(p + eh->e_shoff);
    elf_table t;
    if (read_gnu_hash(p, size, sh, eh->e_shnum, &t)) {
        *(elf_table *)tb_vec_push(tables) = t;
        return 1;
    }
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum) continue;
        const Elf64_Shdr *strs = &sh[sh[i].sh_link];
        if (sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset || strs->sh_offset > size ||
            strs->sh_size > size - strs->sh_offset || sh[i].sh_offset % 8)
            return 0;
        const Elf64_Sym *sym = (const void *)(p + sh[i].sh_offset);
        size_t n = sh[i].sh_size / sizeof *sym;
        const char *str = (const char *)(p + strs->sh_offset);
        for (size_t k = 0; k < n; k++) {
            if (!defined_sym(&sym[k]) || sym[k].st_name >= strs->sh_size) continue;
            const char *s = str + sym[k].st_name;
            add_name(names, s, strnlen(s, strs->sh_size - sym[k].st_name));
        }
    }
    return 0;
}

static uint64_t be(const unsigned char *p, int width) {
    uint64_t v = 0;
    for (int i = 0; i < width; i++) v = v << 8 | p[i];
    return v;
}

static void read_ar_index(const unsigned char *p, size_t size, tb_strmap *names) {
    // the first member after "!<arch>\n": a 60-byte header, name "/" or "/SYM64/"
    if (size < 8 + 60) return;
    const unsigned char *h = p + 8;
    int width = !memcmp(h, "/               ", 16) ? 4 : !memcmp(h, "/SYM64/         ", 16) ? 8 : 0;
    if (!width) return;
    char sz[11] = {0};
    memcpy(sz, h + 48, 10);
    size_t len = (size_t)strtoull(sz, NULL, 10);
    const unsigned char *m = h + 60;
    if (len > size - 68 || len < (size_t)width) return;
    uint64_t count = be(m, width);
    if (count > (len - (size_t)width) / (size_t)width) return;
    const char *s = (const char *)m + width + count * (size_t)width, *end = (const char *)m + len;
    for (uint64_t k = 0; k < count && s < end; k++) {
        size_t n = strnlen(s, (size_t)(end - s));
        add_name(names, s, n);
        s += n + 1;
    }
}

static void read_library(ix_libs *l, const char *path, ix_lib *lib, int depth);

// The absolute paths a GNU ld script names: GROUP ( /lib/x86_64-linux-gnu/libc.so.6 ... ).
static void read_ld_script(ix_libs *l, const char *p, size_t size, ix_lib *lib, int depth) {
    for (size_t i = 0; i < size; i++) {
        if (p[i] != '/' || (i > 0 && p[i - 1] != ' ' && p[i - 1] != '(' && p[i - 1] != '\t' && p[i - 1] != '\n'))
            continue;
        size_t j = i;
        while (j < size && p[j] != ' ' && p[j] != ')' && p[j] != '\n' && p[j] != '\t') j++;
        if (j - i > 1 && p[i + 1] != '*') read_library(l, tb_pool_dupn(&l->pool, p + i, j - i), lib, depth + 1);
        i = j;
    }
}

static int has_text(const unsigned char *p, size_t size, const char *w) {
    size_t n = strlen(w);
    for (size_t i = 0; i + n <= size; i++)
        if (!memcmp(p + i, w, n)) return 1;
    return 0;
}

static void read_library(ix_libs *l, const char *path, ix_lib *lib, int depth) {
    if (depth > 4) return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 8) {
        close(fd);
        return;
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return;
    const unsigned char *p = map;
    if (!memcmp(p, ELFMAG, SELFMAG)) {
        if (read_elf_dynsym(p, size, &lib->names, &lib->tables)) {
            *(mapping *)tb_vec_push(&lib->maps) = (mapping){map, size};
            return;
        }
    } else if (!memcmp(p, "!<arch>\n", 8)) {
        read_ar_index(p, size, &lib->names);
    } else if (size < (1u << 16) && (has_text(p, size, "GROUP") || has_text(p, size, "INPUT"))) {
        read_ld_script(l, (const char *)p, size, lib, depth);
    }
    munmap(map, size);
}

void ix_libs_init(ix_libs *l) {
    memset(l, 0, sizeof *l);
    tb_strmap_init(&l->by_path);
    tb_vec_init(&l->libs, sizeof(ix_lib), "link libraries");
}

int ix_lib_number(ix_libs *l, const char *path) {
    int *i = tb_strmap_get(&l->by_path, path);
    if (i) return *i;
    ix_lib *lib = tb_vec_push(&l->libs);
    tb_strmap_init(&lib->names);
    tb_vec_init(&lib->tables, sizeof(elf_table), "shared objects' symbol tables");
    tb_vec_init(&lib->maps, sizeof(mapping), "shared objects' mappings");
    read_library(l, path, lib, 0);
    return *tb_strmap_put(&l->by_path, path, (int)l->libs.len - 1);
}

int ix_lib_defines_at(const ix_libs *l, int number, const char *name) {
    const ix_lib *lib = &TB_VEC_AT(&l->libs, ix_lib, (size_t)number);
    for (size_t k = 0; k < lib->tables.len; k++)
        if (table_defines(&TB_VEC_AT(&lib->tables, elf_table, k), name)) return 1;
    return tb_strmap_get(&lib->names, name) != NULL;
}

int ix_lib_defines(ix_libs *l, const char *path, const char *name) {
    return ix_lib_defines_at(l, ix_lib_number(l, path), name);
}

void ix_libs_free(ix_libs *l) {
    for (size_t i = 0; i < l->libs.len; i++) {
        ix_lib *lib = &TB_VEC_AT(&l->libs, ix_lib, i);
        tb_strmap_free(&lib->names);
        for (size_t k = 0; k < lib->maps.len; k++) {
            const mapping *m = &TB_VEC_AT(&lib->maps, mapping, k);
            munmap(m->p, m->size);
        }
        tb_vec_free(&lib->tables);
        tb_vec_free(&lib->maps);
    }
    tb_vec_free(&l->libs);
    tb_strmap_free(&l->by_path);
    tb_pool_free(&l->pool);
}
