/* Helpers shared by the plan tests: build a graph and plan it in one call. */
#ifndef VRAM_PLAN_TEST_UTIL_H
#define VRAM_PLAN_TEST_UTIL_H

#include <stdio.h>
#include <string.h>

#include "vram/graph.h"
#include "vram/plan.h"

typedef struct built {
    vr_graph *g;
    vr_plan *p;
} built;

static inline built plan_gpt(const char *preset, int B, int T, vr_step_config s, const vr_plan_config *pc)
{
    built b = {0};
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = B};
    int Tdef = 0;
    if (vr_gpt_preset(preset, &m.gpt, &Tdef))
        fail_msg("preset %s: %s", preset, vr_last_error());
    m.T = T ? T : Tdef;
    if (vr_graph_build(&m, &s, &b.g))
        fail_msg("build %s: %s", preset, vr_last_error());
    if (vr_plan_create(b.g, pc, &b.p))
        fail_msg("plan %s: %s", preset, vr_last_error());
    return b;
}

static inline built plan_mlp(const char *preset, vr_op act, int B, vr_step_config s, const vr_plan_config *pc)
{
    built b = {0};
    vr_model_config m = {.kind = VR_MODEL_MLP, .B = B};
    if (vr_mlp_preset(preset, &m.mlp))
        fail_msg("preset %s: %s", preset, vr_last_error());
    m.mlp.act = act;
    if (vr_graph_build(&m, &s, &b.g))
        fail_msg("build %s: %s", preset, vr_last_error());
    if (vr_plan_create(b.g, pc, &b.p))
        fail_msg("plan %s: %s", preset, vr_last_error());
    return b;
}

static inline void built_free(built *b)
{
    vr_plan_free(b->p);
    vr_graph_free(b->g);
}

#endif
