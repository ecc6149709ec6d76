/* plan.c — plans the problem of tests/campaign's spec b (camp_b) with libheed
 * (HEED_ESTIMATE) and prints the plan's source and description:
 * test_campaign.sh checks that a kernel rebuilt by heed campaign --build is
 * the one planned, and what a system record without it gives. Spec b has a
 * mask_mod, written differently there: the plan finds it by its hash. */
#include <stdio.h>

#include "heed.h"

int main(void)
{
    heed_problem p = { .heads = 1, .lq = 16, .lk = 16, .dk = 16, .dv = 16, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL,
                       .mask_mod = "q - k < 5 || k % 3 == 0" };
    p.scale = heed_default_scale(p.score, p.dk);
    heed_status st;
    heed_plan *pl = heed_plan_create(&p, HEED_ESTIMATE, &st);
    if (!pl) {
        printf("none %s\n", st.message);
        return 1;
    }
    printf("%s fallback=%d %s\n", heed_plan_source(pl) == HEED_SOURCE_TUNED ? "tuned" : "other", st.fallback,
           st.message);
    heed_plan_destroy(pl);
    return 0;
}
