#include "datasets/gpt_dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define TB_BIG_ENDIAN 1
#else
#define TB_BIG_ENDIAN 0
#endif

// ---------------------------------------------------------------------------------------
// Synthetic generator (defined exactly in the header)

#define SUCCESSOR_SALT 0x5375636365737372ull  // "Successr"
#define SAMPLE_SALT 0x53616d706c655354ull     // "SampleST"

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t splitmix64_next(uint64_t *x) {
    *x += 0x9E3779B97F4A7C15ull;
    return mix64(*x);
}

static int check_shape(const char *what, int seq_length, int vocab_size, tb_error *err) {
    if (seq_length < 1)
        return tb_fail(err, "%s: seq length %d, must be >= 1", what, seq_length);
    if (vocab_size < 1)
        return tb_fail(err, "%s: vocab size %d, must be >= 1", what, vocab_size);
    return 0;
}

int tb_gpt_dataset_open_synthetic(tb_gpt_dataset *ds, uint64_t seed, int seq_length,
                                  int vocab_size, tb_allocator *a, tb_error *err) {
    memset(ds, 0, sizeof *ds);
    if (check_shape("synthetic dataset", seq_length, vocab_size, err) != 0) return -1;
    int32_t *succ = tb_alloc(a, TB_MEM_WORKSPACE, (size_t)vocab_size * sizeof(int32_t),
                             "synthetic successor table");
    for (int v = 0; v < vocab_size; v++) succ[v] = v;
    uint64_t x = seed ^ SUCCESSOR_SALT;
    for (int v = vocab_size - 1; v >= 1; v--) {
        int j = (int)(splitmix64_next(&x) % (uint64_t)(v + 1));
        int32_t t = succ[v];
        succ[v] = succ[j];
        succ[j] = t;
    }
    ds->kind = TB_GPT_DATASET_SYNTHETIC;
    ds->seq_length = seq_length;
    ds->vocab_size = vocab_size;
    ds->num_samples = UINT64_MAX;
    ds->seed = seed;
    ds->successor = succ;
    return 0;
}

// ---------------------------------------------------------------------------------------
// Token file

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// Reads exactly n bytes at the current position (file offset `off` for messages).
static int read_full(int fd, void *buf, size_t n, const char *path, uint64_t off,
                     tb_error *err) {
    unsigned char *p = buf;
    size_t done = 0;
    while (done < n) {
        size_t chunk = n - done < ((size_t)1 << 30) ? n - done : ((size_t)1 << 30);
        ssize_t r = read(fd, p + done, chunk);
        if (r < 0) {
            if (errno == EINTR) continue;
            return tb_fail(err, "%s: offset %" PRIu64 ": read failed: %s", path,
                           off + done, strerror(errno));
        }
        if (r == 0)
            return tb_fail(err,
                           "%s: offset %" PRIu64 ": unexpected end of file "
                           "(the file shrank while being read?)",
                           path, off + done);
        done += (size_t)r;
    }
    return 0;
}

int tb_gpt_dataset_open_file(tb_gpt_dataset *ds, tb_allocator *a, const char *path,
                             int seq_length, int vocab_size, tb_error *err) {
    memset(ds, 0, sizeof *ds);
    if (check_shape(path, seq_length, vocab_size, err) != 0) return -1;

    // A FIFO or a device is refused before it is opened: either could block forever.
    struct stat st;
    int fd = tb_open_regular(path, "an llm.c token file is expected", &st, err);
    if (fd < 0) return -1;
    uint64_t file_bytes = (uint64_t)st.st_size;
    if (file_bytes < TB_TOKEN_FILE_HEADER_BYTES) {
        close(fd);
        return tb_fail(err, "%s: truncated header: file has %" PRIu64 " bytes, header needs %d",
                       path, file_bytes, TB_TOKEN_FILE_HEADER_BYTES);
    }

    unsigned char header[TB_TOKEN_FILE_HEADER_BYTES];
    if (read_full(fd, header, sizeof header, path, 0, err) != 0) {
        close(fd);
        return -1;
    }
    int32_t magic = (int32_t)le32(header + 0);
    int32_t version = (int32_t)le32(header + 4);
    uint32_t ntok32 = le32(header + 8);
    if (magic != TB_TOKEN_FILE_MAGIC) {
        close(fd);
        return tb_fail(err, "%s: offset 0: bad magic %" PRId32 ", expected %d (llm.c token file)",
                       path, magic, TB_TOKEN_FILE_MAGIC);
    }
    if (version != TB_TOKEN_FILE_VERSION) {
        close(fd);
        return tb_fail(err,
                       "%s: offset 4: unsupported version %" PRId32
                       ", expected %d (uint16 tokens)",
                       path, version, TB_TOKEN_FILE_VERSION);
    }
    uint64_t ntokens = ntok32;
    uint64_t payload = file_bytes - TB_TOKEN_FILE_HEADER_BYTES;
    uint64_t expected = TB_TOKEN_FILE_HEADER_BYTES + 2 * ntokens;
    if (file_bytes != expected) {
        close(fd);
        if (file_bytes < expected)
            return tb_fail(err,
                           "%s: offset 8: header says %" PRIu64 " tokens, so the file needs %" PRIu64
                           " bytes (1024 header + %" PRIu64 " payload), but it has %" PRIu64
                           " bytes (%" PRIu64 " payload bytes): truncated payload",
                           path, ntokens, expected, 2 * ntokens, file_bytes, payload);
        return tb_fail(err,
                       "%s: offset 8: header says %" PRIu64 " tokens, so the file needs %" PRIu64
                       " bytes (1024 header + %" PRIu64 " payload), but it has %" PRIu64
                       " bytes: %" PRIu64 " trailing bytes after the tokens",
                       path, ntokens, expected, 2 * ntokens, file_bytes, file_bytes - expected);
    }
    if (ntokens < (uint64_t)seq_length + 1) {
        close(fd);
        return tb_fail(err,
                       "%s: too few tokens: file has %" PRIu64
                       ", one sample of seq length %d needs at least %d",
                       path, ntokens, seq_length, seq_length + 1);
    }

    uint16_t *tokens = tb_alloc(a, TB_MEM_WORKSPACE, (size_t)ntokens * sizeof(uint16_t),
                                "token data");
    if (read_full(fd, tokens, (size_t)ntokens * sizeof(uint16_t), path,
                  TB_TOKEN_FILE_HEADER_BYTES, err) != 0) {
        close(fd);
        tb_free(a, tokens);
        return -1;
    }
    close(fd);
#if TB_BIG_ENDIAN
    for (uint64_t i = 0; i < ntokens; i++) tokens[i] = __builtin_bswap16(tokens[i]);
#endif
    for (uint64_t i = 0; i < ntokens; i++) {
        if (tokens[i] >= (uint32_t)vocab_size) {
            int bad = tokens[i];
            tb_free(a, tokens);
            return tb_fail(err, "%s: offset %" PRIu64 ": token id %d >= vocab size %d (token %" PRIu64 ")",
                           path, TB_TOKEN_FILE_HEADER_BYTES + 2 * i, bad, vocab_size, i);
        }
    }

    ds->kind = TB_GPT_DATASET_FILE;
    ds->seq_length = seq_length;
    ds->vocab_size = vocab_size;
    ds->tokens = tokens;
    ds->num_tokens = ntokens;
    ds->num_samples = (ntokens - 1) / (uint64_t)seq_length;
    return 0;
}

void tb_gpt_dataset_close(tb_gpt_dataset *ds, tb_allocator *a) {
    if (!ds) return;
    tb_free(a, ds->tokens);
    tb_free(a, ds->successor);
    memset(ds, 0, sizeof *ds);
}

void tb_gpt_dataset_get_sample(const tb_gpt_dataset *ds, uint64_t index, int32_t *inputs,
                               int32_t *targets) {
    const int T = ds->seq_length;
    if (ds->kind == TB_GPT_DATASET_FILE) {
        const uint16_t *t = ds->tokens + (index % ds->num_samples) * (uint64_t)T;
        for (int k = 0; k < T; k++) {
            inputs[k] = t[k];
            targets[k] = t[k + 1];
        }
        return;
    }
    // TB_GPT_DATASET_SYNTHETIC
    const uint64_t V = (uint64_t)ds->vocab_size;
    uint64_t x = mix64(mix64(ds->seed ^ SAMPLE_SALT) ^ index);
    int32_t prev = (int32_t)(splitmix64_next(&x) % V);
    for (int k = 0; k < T; k++) {
        uint64_t r = splitmix64_next(&x);
        int32_t next = (r % 4 != 0) ? ds->successor[prev] : (int32_t)((r >> 2) % V);
        inputs[k] = prev;
        targets[k] = next;
        prev = next;
    }
}

// ---------------------------------------------------------------------------------------
// Writing

static int write_full(int fd, const void *buf, size_t n) {
    const unsigned char *p = buf;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

// Best effort: makes the rename itself durable. Some filesystems refuse fsync on a
// directory; the file's own data is already on disk then, so that is not an error.
static void fsync_parent_dir(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, sizeof dir, ".");
    } else if (slash == path) {
        snprintf(dir, sizeof dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) return;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

int tb_token_file_write(const char *path, const uint16_t *tokens, uint64_t ntokens,
                        tb_error *err) {
    if (ntokens > TB_TOKEN_FILE_MAX_TOKENS)
        return tb_fail(err,
                       "%s: %" PRIu64 " tokens, a token file holds at most %" PRIu32
                       " (uint32 count at offset 8)",
                       path, ntokens, (uint32_t)TB_TOKEN_FILE_MAX_TOKENS);
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return tb_fail(err, "%s: path too long for its temporary file", path);

    unsigned char header[TB_TOKEN_FILE_HEADER_BYTES];
    memset(header, 0, sizeof header);
    const uint32_t fields[3] = {TB_TOKEN_FILE_MAGIC, TB_TOKEN_FILE_VERSION, (uint32_t)ntokens};
    for (int f = 0; f < 3; f++)
        for (int b = 0; b < 4; b++) header[4 * f + b] = (unsigned char)(fields[f] >> (8 * b));

    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return tb_fail(err, "%s: cannot create: %s", tmp, strerror(errno));
    int ok = write_full(fd, header, sizeof header) == 0;
#if TB_BIG_ENDIAN
    uint16_t chunk[4096];
    for (uint64_t i = 0; ok && i < ntokens; i += 4096) {
        size_t n = ntokens - i < 4096 ? (size_t)(ntokens - i) : 4096;
        for (size_t k = 0; k < n; k++) chunk[k] = __builtin_bswap16(tokens[i + k]);
        ok = write_full(fd, chunk, n * sizeof(uint16_t)) == 0;
    }
#else
    if (ok && ntokens > 0) ok = write_full(fd, tokens, (size_t)ntokens * sizeof(uint16_t)) == 0;
#endif
    const char *stage = "write";
    if (ok && fsync(fd) != 0) {
        ok = 0;
        stage = "fsync";
    }
    int saved = errno;
    if (close(fd) != 0 && ok) {
        ok = 0;
        stage = "close";
        saved = errno;
    }
    if (!ok) {
        unlink(tmp);
        return tb_fail(err, "%s: %s failed: %s", tmp, stage, strerror(saved));
    }
    if (rename(tmp, path) != 0) {
        saved = errno;
        unlink(tmp);
        return tb_fail(err, "%s: cannot rename %s into place: %s", path, tmp, strerror(saved));
    }
    fsync_parent_dir(path);
    return 0;
}
