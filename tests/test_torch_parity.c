/* test_torch_parity.c — the recurrent modules (LSTM with proj_size and lengths, GRU, nn.RNN), the sequence
   ops (max/min with indices, cross entropy and nll over [B, C, d...], embedding's padding_idx and max_norm)
   and the Transformer modules (decoder, nn.Transformer, MultiheadAttention's options, grouped-query attention)
   against PyTorch's float64 outputs and gradients in tests/torch_fixtures (make seq-fixtures writes them from
   the cases of bench/rnn_oracle.c, bench/seq_ops_oracle.c and tests/transformer_parity_cases.h), on the CPU in float64 (a -DGPUDL_DOUBLE build):
   every value within 1e-10 * (1 + |torch's|), indices exact. A fixture with one output nudged must fail. The
   GPU suite runs the same cases in f32 (tests/test_cuda.c, suite torch_parity). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#include "torch_parity.h"

#define TOL_F64 1e-10

TEST rnn_modules_match_torch(void) {
    TP_CHECK_FILE("rnn", gdl_cpu(), TOL_F64, 9);
    PASS();
}

TEST transformer_modules_match_torch(void) {
    TP_CHECK_FILE("transformer", gdl_cpu(), TOL_F64, TF_NCASES);
    PASS();
}

TEST seq_ops_match_torch(void) {
    TP_CHECK_FILE("seq_ops", gdl_cpu(), TOL_F64, 18);
    PASS();
}

/* the comparison can fail: lstm's first output value moved by 1e-8 (far under f32's rounding, far over the
   float64 tolerance) makes exactly that tensor fail */
TEST a_nudged_fixture_fails(void) {
    FILE *fp = fopen(TP_FIXTURE_DIR "rnn.safetensors", "rb");
    const gdl_st_entry *e;
    unsigned char *whole, *at;
    long size;
    double v;
    gdl_st_file f;
    tp_ctx c;
    ASSERT_NOT_NULL(fp);
    fseek(fp, 0, SEEK_END);
    size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    whole = (unsigned char *)malloc((size_t)size + 1);
    ASSERT_NOT_NULL(whole);
    ASSERT_EQ((size_t)size, fread(whole, 1, (size_t)size, fp));
    fclose(fp);
    ASSERT_EQ(0, gdl_st_parse(whole, (uint64_t)size, &f, "the nudged fixture"));
    e = gdl_st_find(&f, "lstm.out");
    ASSERT_NOT_NULL(e);
    ASSERT_STR_EQ("F64", e->dtype);
    at = whole + (f.data - whole) + e->begin; /* f.data points into whole */
    memcpy(&v, at, 8);
    v += 1e-8;
    memcpy(at, &v, 8);
    memset(&c, 0, sizeof c);
    c.dev = gdl_cpu();
    c.tol = TOL_F64;
    ASSERT_EQ(9, tp_run_parsed(&c, &f, "rnn"));
    gdl_st_free(&f);
    free(whole);
    ASSERT_EQ(1, c.failed);
    ASSERT_STR_EQ("lstm.out", c.worst_at);
    PASS();
}

SUITE(parity) {
    RUN_TEST(rnn_modules_match_torch);
    RUN_TEST(seq_ops_match_torch);
    RUN_TEST(transformer_modules_match_torch);
    RUN_TEST(a_nudged_fixture_fails);
}

int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(parity);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
