// index_libs.c — see index_libs.h. The three forms a link's library takes on Linux:
//   - a shared object: the defined symbols of its dynamic symbol table (SHT_DYNSYM, the
//     names the dynamic linker resolves; ELF64, little-endian);
//   - a static archive: the names of its symbol index (the "/" member GNU ar writes, or
//     "/SYM64/": a big-endian count, the member offsets, then the NUL-terminated names);
//   - a GNU ld script (Debian's libc.so, libm.so): the absolute paths it names (GROUP,
//     INPUT, AS_NEEDED), each read the same way.
// Files are mapped, so only the pages of the tables are read (libnccl.so is large).
#include "index_libs.h"

#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ix_lib {
    tb_strmap names;  // the symbols it defines
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

static void read_elf_dynsym(const unsigned char *p, size_t size, tb_strmap *names) {
    if (size < sizeof(Elf64_Ehdr)) return;
    const Elf64_Ehdr *eh = (const void *)p;
    if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB) return;
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > size ||
        (size - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum)
        return;
    const Elf64_Shdr *sh = (const void *)(p + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum) continue;
        const Elf64_Shdr *strs = &sh[sh[i].sh_link];
        if (sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset || strs->sh_offset > size ||
            strs->sh_size > size - strs->sh_offset)
            return;
        const Elf64_Sym *sym = (const void *)(p + sh[i].sh_offset);
        size_t n = sh[i].sh_size / sizeof *sym;
        const char *str = (const char *)(p + strs->sh_offset);
        for (size_t k = 0; k < n; k++) {
            int bind = ELF64_ST_BIND(sym[k].st_info);
            if (sym[k].st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK) ||
                sym[k].st_name >= strs->sh_size)
                continue;
            const char *s = str + sym[k].st_name;
            add_name(names, s, strnlen(s, strs->sh_size - sym[k].st_name));
        }
    }
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

static void read_library(ix_libs *l, const char *path, tb_strmap *names, int depth);

// The absolute paths a GNU ld script names: GROUP ( /lib/x86_64-linux-gnu/libc.so.6 ... ).
static void read_ld_script(ix_libs *l, const char *p, size_t size, tb_strmap *names, int depth) {
    for (size_t i = 0; i < size; i++) {
        if (p[i] != '/' || (i > 0 && p[i - 1] != ' ' && p[i - 1] != '(' && p[i - 1] != '\t' && p[i - 1] != '\n'))
            continue;
        size_t j = i;
        while (j < size && p[j] != ' ' && p[j] != ')' && p[j] != '\n' && p[j] != '\t') j++;
        if (j - i > 1 && p[i + 1] != '*') read_library(l, tb_pool_dupn(&l->pool, p + i, j - i), names, depth + 1);
        i = j;
    }
}

static int has_text(const unsigned char *p, size_t size, const char *w) {
    size_t n = strlen(w);
    for (size_t i = 0; i + n <= size; i++)
        if (!memcmp(p + i, w, n)) return 1;
    return 0;
}

static void read_library(ix_libs *l, const char *path, tb_strmap *names, int depth) {
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
    if (!memcmp(p, ELFMAG, SELFMAG)) read_elf_dynsym(p, size, names);
    else if (!memcmp(p, "!<arch>\n", 8)) read_ar_index(p, size, names);
    else if (size < (1u << 16) && (has_text(p, size, "GROUP") || has_text(p, size, "INPUT")))
        read_ld_script(l, (const char *)p, size, names, depth);
    munmap(map, size);
}

void ix_libs_init(ix_libs *l) {
    memset(l, 0, sizeof *l);
    tb_strmap_init(&l->by_path);
    tb_vec_init(&l->libs, sizeof(ix_lib), "link libraries");
}

int ix_lib_defines(ix_libs *l, const char *path, const char *name) {
    int *i = tb_strmap_get(&l->by_path, path);
    if (!i) {
        ix_lib *lib = tb_vec_push(&l->libs);
        tb_strmap_init(&lib->names);
        read_library(l, path, &lib->names, 0);
        i = tb_strmap_put(&l->by_path, path, (int)l->libs.len - 1);
    }
    return tb_strmap_get(&TB_VEC_AT(&l->libs, ix_lib, *i).names, name) != NULL;
}

void ix_libs_free(ix_libs *l) {
    for (size_t i = 0; i < l->libs.len; i++) tb_strmap_free(&TB_VEC_AT(&l->libs, ix_lib, i).names);
    tb_vec_free(&l->libs);
    tb_strmap_free(&l->by_path);
    tb_pool_free(&l->pool);
}
