// test_resume_parsers.c — the soak's parsers (experiments/prove/parsers_resume.c) on records
// of known numbers: resumed_loss_mismatches counts the rows whose loss differs in any bit,
// refuses segments that do not chain or are not the same training, and every step must be
// covered; memory_growth_bytes is the rise of the high-water after the warm-up. (The soak
// runbook on the real engine: test_soak_runbook.c.)

#include <math.h>
#include <string.h>

#include "fixtures/record_fixture.h"
#include "prove/parsers.h"
#include "tb_test.h"

static char root[FX_PATH];

typedef struct seg_spec {
    const char *name;
    const char *load;  // config load ("" none)
    int first, last;   // the steps logged
    int world;
    const char *extra;  // more config keys, as JSON members (e.g. "\"seed\": 8, ")
} seg_spec;

// The loss every fixture logs at `step` on rank r (the all-reduced loss: the same on every rank).
static double loss_at(int step) { return 5.0 / (1.0 + 0.1 * step) + 1e-9 * step; }

// A record <root>/soak/v1/<name>: config.json (save into its own run directory) and one
// metrics file per rank with steps first..last; flip: the step whose loss is one ulp off on
// rank flip_rank (0: none); mem: the activations high-water by row index (NULL: 100 each).
static void write_segment(char *dir, size_t size, const seg_spec *s, int flip, int flip_rank, const double *mem) {
    fx_path(dir, size, "%s/soak/v1/%s", root, s->name);
    char run[FX_PATH], path[FX_PATH], save[FX_PATH];
    fx_path(run, sizeof run, "%s/run", dir);
    tb_mkdir_p(run, NULL);
    fx_path(save, sizeof save, "%s/checkpoints", run);
    char config[3 * FX_PATH];
    snprintf(config, sizeof config,
             "{\"world_size\": %d, \"global_batch_size\": 8, \"seq_length\": 16, \"seed\": 7, %s"
             "\"train_iters\": 12, \"run_dir\": \"%s\", \"save\": \"%s\", \"save_interval\": 2, "
             "\"exit_interval\": %d, \"load\": \"%s\"}\n",
             s->world, s->extra ? s->extra : "", run, save, s->last < 12 ? s->last : 0, s->load);
    fx_write_text(fx_path(path, sizeof path, "%s/config.json", run), config);
    for (int r = 0; r < s->world; r++) {
        FILE *f = fopen(fx_path(path, sizeof path, "%s/metrics.rank-%05d.jsonl", run, r), "w");
        TB_REQUIRE(f, "cannot write %s", path);
        for (int step = s->first; step <= s->last; step++) {
            double loss = loss_at(step);
            if (step == flip && r == flip_rank) loss = nextafter(loss, INFINITY);
            double act = mem ? mem[step - s->first] : 100;
            fprintf(f, "{\"step\": %d, \"loss\": %.17g, \"step_ms\": 10, \"mem_peak_bytes\": {\"params\": 50, "
                       "\"grads\": 50, \"optimizer\": 100, \"activations\": %.0f, \"workspace\": 10, \"comm\": 0, "
                       "\"total\": %.0f}, \"mem_total_peak_bytes\": %.0f}\n",
                    step, loss, act, 210 + act, 200 + act);
        }
        fclose(f);
    }
}

static double parse(const char *parser, const char *args_json, const char *const *dirs, int n, tb_error *err,
                    int *rc, json_t **ev) {
    json_t *args = args_json ? json_loads(args_json, 0, NULL) : NULL;
    double v = NAN;
    *rc = tb_parse_claim(parser, args, dirs, n, &v, ev, err);
    json_decref(args);
    return v;
}

static char whole[FX_PATH], s1[FX_PATH], s2[FX_PATH], s3[FX_PATH];
static char s1_save[FX_PATH], s2_save[FX_PATH];

// The uninterrupted run (steps 1..12, 2 ranks) and three segments: 1..4, 5..8 loading the
// first's checkpoints, 9..12 loading the second's.
static void chain(int flip, int flip_rank) {
    snprintf(root, sizeof root, "%s", fx_fresh_dir("resume_parsers"));
    write_segment(whole, sizeof whole, &(seg_spec){"whole", "", 1, 12, 2, NULL}, 0, 0, NULL);
    write_segment(s1, sizeof s1, &(seg_spec){"s1", "", 1, 4, 2, NULL}, flip, flip_rank, NULL);
    fx_path(s1_save, sizeof s1_save, "%s/run/checkpoints", s1);
    write_segment(s2, sizeof s2, &(seg_spec){"s2", s1_save, 5, 8, 2, NULL}, flip, flip_rank, NULL);
    fx_path(s2_save, sizeof s2_save, "%s/run/checkpoints", s2);
    write_segment(s3, sizeof s3, &(seg_spec){"s3", s2_save, 9, 12, 2, NULL}, flip, flip_rank, NULL);
}

TB_TEST(a_chain_of_segments_with_the_same_losses_has_no_mismatch) {
    chain(0, 0);
    const char *dirs[] = {whole, s1, s2, s3};
    tb_error err;
    int rc;
    json_t *ev = NULL;
    double v = parse("resumed_loss_mismatches", NULL, dirs, 4, &err, &rc, &ev);
    TB_CHECK(rc == 0 && v == 0, "rc %d, value %g (%s)", rc, v, rc ? err.msg : "");
    TB_CHECK(rc == 0 && json_integer_value(json_object_get(ev, "rows_compared")) == 24 &&
                 json_array_size(json_object_get(ev, "records")) == 4,
             "24 rows compared (12 steps x 2 ranks), the run and its 3 segments");
    json_decref(ev);
}

TB_TEST(one_ulp_on_one_rank_at_one_step_is_a_mismatch) {
    chain(6, 1);
    const char *dirs[] = {whole, s1, s2, s3};
    tb_error err;
    int rc;
    json_t *ev = NULL;
    double v = parse("resumed_loss_mismatches", NULL, dirs, 4, &err, &rc, &ev);
    json_t *first = json_object_get(ev, "first_mismatch");
    TB_CHECK(rc == 0 && v == 1 && json_integer_value(json_object_get(first, "step")) == 6 &&
                 json_integer_value(json_object_get(first, "rank")) == 1,
             "rc %d, value %g: the one row of step 6, rank 1 (%s)", rc, v, rc ? err.msg : "");
    json_decref(ev);
}

TB_TEST(segments_that_do_not_chain_or_train_otherwise_are_refused) {
    chain(0, 0);
    tb_error err;
    int rc;
    // s3 listed before s2: s3 loaded s2's checkpoints, not s1's
    const char *swapped[] = {whole, s1, s3, s2};
    parse("resumed_loss_mismatches", NULL, swapped, 4, &err, &rc, NULL);
    TB_CHECK(rc != 0 && strstr(err.msg, "is not the directory the previous segment saved into"), "swapped: %s",
             err.msg);
    // steps 5..8 logged by no segment
    char after_s1[FX_PATH];
    write_segment(after_s1, sizeof after_s1, &(seg_spec){"s3_after_s1", s1_save, 9, 12, 2, NULL}, 0, 0, NULL);
    const char *gap[] = {whole, s1, after_s1};
    parse("resumed_loss_mismatches", NULL, gap, 3, &err, &rc, NULL);
    TB_CHECK(rc != 0 && strstr(err.msg, "step 5 of the uninterrupted run") && strstr(err.msg, "logged by no segment"),
             "a gap: %s", err.msg);
    // a config key the uninterrupted run does not have
    char other[FX_PATH];
    write_segment(other, sizeof other, &(seg_spec){"s2_learning", s1_save, 5, 8, 2, "\"learning\": 1, "}, 0, 0, NULL);
    const char *extra[] = {whole, s1, other};
    parse("resumed_loss_mismatches", NULL, extra, 3, &err, &rc, NULL);
    TB_CHECK(rc != 0 && strstr(err.msg, "config learning differs: absent in the uninterrupted run"),
             "a key only the segment has: %s", err.msg);
    // the first segment must start as the uninterrupted run did
    char loaded[FX_PATH];
    write_segment(loaded, sizeof loaded, &(seg_spec){"s1_loaded", s2_save, 1, 4, 2, NULL}, 0, 0, NULL);
    const char *first[] = {whole, loaded, s2};
    parse("resumed_loss_mismatches", NULL, first, 3, &err, &rc, NULL);
    TB_CHECK(rc != 0 && strstr(err.msg, "config load differs"), "a first segment that loads: %s", err.msg);
    // a step the uninterrupted run did not train
    char beyond[FX_PATH];
    write_segment(beyond, sizeof beyond, &(seg_spec){"s3_beyond", s2_save, 9, 13, 2, NULL}, 0, 0, NULL);
    const char *more[] = {whole, s1, s2, beyond};
    parse("resumed_loss_mismatches", NULL, more, 4, &err, &rc, NULL);
    TB_CHECK(rc != 0 && strstr(err.msg, "step 13 is not a step of the uninterrupted run"), "step 13: %s", err.msg);
    const char *alone[] = {whole, s1};
    parse("resumed_loss_mismatches", NULL, alone, 2, &err, &rc, NULL);
    TB_CHECK(rc != 0 && strstr(err.msg, "needs the uninterrupted run and at least two segments"), "one segment: %s",
             err.msg);
}

// Copies of the uninterrupted run are not an interrupted one: a segment that trained to the end
// before the last is not interrupted, and one that logged step 1 after the first did not resume.
TB_TEST(segments_that_were_not_interrupted_or_not_resumed_are_refused) {
    chain(0, 0);
    tb_error err;
    int rc;
    char full[FX_PATH], scratch[FX_PATH], full_save[FX_PATH];
    write_segment(full, sizeof full, &(seg_spec){"s1_full", "", 1, 12, 2, NULL}, 0, 0, NULL);
    fx_path(full_save, sizeof full_save, "%s/run/checkpoints", full);
    char after_full[FX_PATH];
    write_segment(after_full, sizeof after_full, &(seg_spec){"s2_after_full", full_save, 12, 12, 2, NULL}, 0, 0, NULL);
    const char *uninterrupted[] = {whole, full, after_full};
    parse("resumed_loss_mismatches", NULL, uninterrupted, 3, &err, &rc, NULL);
    TB_CHECK(rc != 0 && strstr(err.msg, "up to the uninterrupted run's last (12): not interrupted"),
             "a first segment of all 12 steps: %s", err.msg);
    write_segment(scratch, sizeof scratch, &(seg_spec){"s2_scratch", s1_save, 1, 12, 2, NULL}, 0, 0, NULL);
    const char *restarted[] = {whole, s1, scratch};
    parse("resumed_loss_mismatches", NULL, restarted, 3, &err, &rc, NULL);
    TB_CHECK(rc != 0 && strstr(err.msg, "its first logged step is 1: trained from the start, not resumed"),
             "a second segment from step 1: %s", err.msg);
}

TB_TEST(memory_growth_is_the_rise_of_the_high_water_after_the_warmup) {
    snprintf(root, sizeof root, "%s", fx_fresh_dir("memory_growth"));
    char flat[FX_PATH], leak[FX_PATH];
    const double rising_then_flat[] = {100, 140, 160, 160, 160, 160};
    const double leaking[] = {100, 140, 160, 160, 170, 180};
    write_segment(flat, sizeof flat, &(seg_spec){"flat", "", 1, 6, 2, NULL}, 0, 0, rising_then_flat);
    write_segment(leak, sizeof leak, &(seg_spec){"leak", "", 1, 6, 1, NULL}, 0, 0, leaking);
    tb_error err;
    int rc;
    const char *one[] = {flat};
    double v = parse("memory_growth_bytes", "{\"warmup_steps\": 3}", one, 1, &err, &rc, NULL);
    TB_CHECK(rc == 0 && v == 0, "flat after 3 steps: %g (%s)", v, rc ? err.msg : "");
    v = parse("memory_growth_bytes", NULL, one, 1, &err, &rc, NULL);
    TB_CHECK(rc == 0 && v == 60, "after step 1 it rose by 60: %g", v);
    const char *both[] = {flat, leak};
    json_t *ev = NULL;
    v = parse("memory_growth_bytes", "{\"warmup_steps\": 3}", both, 2, &err, &rc, &ev);
    json_t *worst = json_object_get(ev, "worst");
    TB_CHECK(rc == 0 && v == 20 && !strcmp(json_string_value(json_object_get(worst, "category")), "activations"),
             "the leak: 20 bytes of activations (%g)", v);
    json_decref(ev);
    v = parse("memory_growth_bytes", "{\"warmup_steps\": 3, \"category\": \"params\"}", both, 2, &err, &rc, NULL);
    TB_CHECK(rc == 0 && v == 0, "params never rose: %g", v);
    v = parse("memory_growth_bytes", "{\"warmup_steps\": 6}", one, 1, &err, &rc, NULL);
    TB_CHECK(rc != 0 && strstr(err.msg, "none after warmup_steps 6"), "no step after the warm-up: %s", err.msg);
    v = parse("memory_growth_bytes", "{\"category\": \"kv\"}", one, 1, &err, &rc, NULL);
    TB_CHECK(rc != 0 && strstr(err.msg, "kv"), "an unknown category: %s", err.msg);
}

int main(void) {
    TB_RUN(a_chain_of_segments_with_the_same_losses_has_no_mismatch);
    TB_RUN(one_ulp_on_one_rank_at_one_step_is_a_mismatch);
    TB_RUN(segments_that_do_not_chain_or_train_otherwise_are_refused);
    TB_RUN(segments_that_were_not_interrupted_or_not_resumed_are_refused);
    TB_RUN(memory_growth_is_the_rise_of_the_high_water_after_the_warmup);
    return tb_test_summary();
}
