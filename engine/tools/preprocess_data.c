// preprocess_data — turns any file (text or binary) into an llm.c token file with a
// byte-level vocabulary: each byte is one token, value 0..255, so train on it with
// `pretrain_gpt --vocab-size 256`.
//
//   build/bin/preprocess_data --input FILE --output FILE.bin
//
// Exit status: 0 written, 1 the input could not be read or the output not written,
// 2 bad command line (an output that names the input's file among them). The output is written crash-safely (temporary file, fsync,
// rename), so a failed run never leaves a half-written token file behind.
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fileio.h"
#include "runtime/memory.h"
#include "datasets/gpt_dataset.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: preprocess_data --input FILE --output FILE.bin\n"
            "\n"
            "Turns any file into an llm.c token file (1024-byte header + uint16 tokens) with a\n"
            "byte-level vocabulary: each byte of the input is one token, 0..255.\n"
            "Train on it with pretrain_gpt ... --vocab-size 256.\n"
            "\n"
            "flags:\n"
            "  --input FILE    regular file to tokenize (at least 2 bytes, at most %" PRIu32 ")\n"
            "  --output FILE   token file to write (replaced atomically if it exists)\n"
            "  --help          show this help\n",
            (uint32_t)TB_TOKEN_FILE_MAX_TOKENS);
}

// Reads the whole input into a TB_MEM_WORKSPACE buffer; *out_len bytes.
static int read_input(tb_allocator *a, const char *path, unsigned char **out,
                      uint64_t *out_len, tb_error *err) {
    const uint64_t limit = TB_TOKEN_FILE_MAX_TOKENS;
    // Only a regular file, refused by what it is before any open otherwise: a FIFO blocks
    // the open, and a FIFO or a device (/dev/zero) may never reach the end of its bytes.
    struct stat st;
    int fd = tb_open_regular(path, "a file to tokenize is expected", &st, err);
    if (fd < 0) return tb_fail_prefix(err, "--input");
    if ((uint64_t)st.st_size > limit) {
        close(fd);
        return tb_fail(err,
                       "--input %s: %" PRIu64 " bytes, more than a token file can hold: at most %" PRIu64
                       " tokens (uint32 count at offset 8); split the input",
                       path, (uint64_t)st.st_size, limit);
    }
    // Its size plus one byte, to see EOF in one pass; a file that grows while read grows the
    // buffer, up to the limit.
    size_t cap = (size_t)st.st_size + 1;
    unsigned char *buf = tb_alloc(a, TB_MEM_WORKSPACE, cap, "input bytes");
    uint64_t len = 0;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap * 2;
            unsigned char *nbuf = tb_alloc(a, TB_MEM_WORKSPACE, ncap, "input bytes");
            memcpy(nbuf, buf, (size_t)len);
            tb_free(a, buf);
            buf = nbuf;
            cap = ncap;
        }
        size_t want = cap - (size_t)len;
        if (want > ((size_t)1 << 30)) want = (size_t)1 << 30;
        ssize_t r = read(fd, buf + len, want);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            tb_free(a, buf);
            return tb_fail(err, "--input %s: offset %" PRIu64 ": read failed: %s", path, len,
                           strerror(e));
        }
        if (r == 0) break;
        len += (uint64_t)r;
        if (len > limit) {
            close(fd);
            tb_free(a, buf);
            return tb_fail(err,
                           "--input %s: more than %" PRIu64
                           " bytes, more than a token file can hold (uint32 count at offset 8); "
                           "split the input",
                           path, limit);
        }
    }
    close(fd);
    *out = buf;
    *out_len = len;
    return 0;
}

int main(int argc, char **argv) {
    const char *input = NULL, *output = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        const char **slot = strcmp(arg, "--input") == 0    ? &input
                            : strcmp(arg, "--output") == 0 ? &output
                                                           : NULL;
        if (!slot) {
            fprintf(stderr, "preprocess_data: unknown flag '%s' (see --help)\n", arg);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "preprocess_data: flag %s needs a value (see --help)\n", arg);
            return 2;
        }
        *slot = argv[++i];
    }
    if (!input || !output) {
        fprintf(stderr, "preprocess_data: missing %s%s%s (see --help)\n",
                !input ? "--input FILE" : "", !input && !output ? " and " : "",
                !output ? "--output FILE" : "");
        return 2;
    }

    // The output replaces its path by rename: were it the input (the same path, ./X, a hard
    // link or a symlink to it), the input would be lost, or the link replaced by tokens.
    struct stat in_st, out_st;
    if (stat(input, &in_st) == 0 && stat(output, &out_st) == 0 && in_st.st_dev == out_st.st_dev &&
        in_st.st_ino == out_st.st_ino) {
        fprintf(stderr,
                "preprocess_data: --output %s names the same file as --input %s (device %ju, inode %ju): "
                "the input would be replaced; nothing written\n",
                output, input, (uintmax_t)in_st.st_dev, (uintmax_t)in_st.st_ino);
        return 2;
    }

    tb_allocator a;
    tb_allocator_init(&a, 0, NULL, NULL);
    tb_error err;
    unsigned char *bytes = NULL;
    uint64_t n = 0;
    if (read_input(&a, input, &bytes, &n, &err) != 0) {
        fprintf(stderr, "preprocess_data: %s\n", err.msg);
        return 1;
    }
    if (n < 2) {
        fprintf(stderr,
                "preprocess_data: --input %s: %" PRIu64
                " bytes; a token file needs at least 2 tokens (one input and its target), "
                "nothing written\n",
                input, n);
        tb_free(&a, bytes);
        return 1;
    }
    uint16_t *tokens = tb_alloc(&a, TB_MEM_WORKSPACE, (size_t)n * sizeof(uint16_t), "tokens");
    for (uint64_t i = 0; i < n; i++) tokens[i] = bytes[i];
    tb_free(&a, bytes);

    int rc = tb_token_file_write(output, tokens, n, &err);
    tb_free(&a, tokens);
    if (rc != 0) {
        fprintf(stderr, "preprocess_data: --output: %s\n", err.msg);
        return 1;
    }
    uint64_t file_bytes = TB_TOKEN_FILE_HEADER_BYTES + 2 * n;
    printf("wrote %" PRIu64 " tokens (%" PRIu64 " bytes: %d-byte header + %" PRIu64
           " x uint16) to %s\n",
           n, file_bytes, TB_TOKEN_FILE_HEADER_BYTES, n, output);
    printf("vocab size 256 (byte-level: each input byte is one token 0..255): "
           "train with --vocab-size 256; seq length T gives (%" PRIu64 " - 1) / T samples\n",
           n);
    return 0;
}
