/* Inside the training loop (loop*.c): the trainer's state and the helpers its
 * files share. */
#ifndef VRAM_TRAIN_LOOP_INTERNAL_H
#define VRAM_TRAIN_LOOP_INTERNAL_H

#include "vram/checkpoint.h"
#include "vram/device.h"
#include "vram/train.h"

/* The MLP's generated task: features x ~ N(0,1)^D, label = argmax(W x) for a
 * fixed random teacher W (K,D). Batch k of stream s is a pure function of
 * (seed, s, k), so positions resume exactly. */
typedef struct vr_mlp_task {
    int D, K, B;
    uint64_t seed;
    float *teacher;     /* (K,D) */
    uint64_t next;      /* next training batch */
} vr_mlp_task;

vr_status vr__mlp_task_init(vr_mlp_task *t, int D, int K, int B, uint64_t seed);
void vr__mlp_task_free(vr_mlp_task *t);
/* Batch `index` of stream `stream` (0 train, 1 held out): features (B,D), labels (B). */
void vr__mlp_task_batch(const vr_mlp_task *t, int stream, uint64_t index, float *features, int32_t *labels);

#define VR_TRAIN_MAX_ACCUM 1024

struct vr_trainer {
    vr_train_config cfg;
    vr_device *dev;
    vr_graph *g;
    vr_plan *plan;
    vr_exec *exec;
    /* evaluation: set up on first use */
    vr_graph *eg;
    vr_plan *eplan;
    vr_exec *eexec;
    vr_data *val;
    /* data */
    vr_data *train;               /* GPT */
    vr_mlp_task task;             /* MLP */
    int accum;
    void **inputs;                /* [accum] host micro-batches */
    int32_t **targets;
    vr_exec_batch *mb;
    /* progress of the run */
    int64_t step;
    int64_t skipped;              /* fp16: steps whose update an overflow skipped */
    uint64_t tokens_seen;
    uint64_t rng;                 /* the init RNG's state after initialisation */
    vr_lr_schedule sched;
    /* device memory (loop_memory.c) */
    uint64_t context;             /* process's device bytes before the run (CUDA context), NVML */
    uint64_t process_peak;        /* most device bytes of this process seen (NVML) */
    FILE *dump;                   /* --dump-batches */
    /* vr_trainer_lookahead: the next step started by the last vr_trainer_step (ahead), where its data stood,
     * its learning rate */
    bool lookahead, ahead;
    bool ahead_always;            /* tests: look ahead also behind a step that already ran (the CPU) */
    vr_data_pos ahead_pos;
    uint64_t ahead_next;
    float ahead_lr;
};

/* VR_OK, or VR_ERR_INVALID naming `what` while the next step is queued (vr_trainer_lookahead): what reads or
 * writes the weights refuses until that step has run. */
vr_status vr__trainer_settled(const vr_trainer *t, const char *what);

/* --max-memory and out-of-memory refusals (loop_memory.c). */
vr_status vr__trainer_memory_open(vr_trainer *t);
/* Before an executor of `plan` is created: refuses (VR_ERR_OOM, with the plan's numbers) a planned arena
 * that, beside `held` bytes already allocated by this run, does not fit the cap or the device's free memory. */
vr_status vr__trainer_memory_check(vr_trainer *t, const vr_plan *plan, uint64_t held, const char *what);
/* After the executor of a dynamic run is created: caps its allocator at max_memory - context. */
vr_status vr__trainer_memory_cap(vr_trainer *t, vr_exec *e);
/* After a step: samples the process's device use (NVML) and checks it against max_memory. */
vr_status vr__trainer_memory_sample(vr_trainer *t);
/* --dump-batches: appends micro-batch k's rows. */
vr_status vr__trainer_dump_batch(vr_trainer *t, int k);

/* Sets up the eval graph, plan, executor and held-out data (idempotent). */
vr_status vr__trainer_eval_setup(vr_trainer *t);

/* Fills the parameters (seeded init, --init, or --resume) and the data position. */
vr_status vr__trainer_load_start(vr_trainer *t);
/* Data parallel: every rank was given the same settings (a collective; VR_ERR_INVALID on every rank if not). */
vr_status vr__trainer_check_ranks(const vr_trainer *t);

/* The llm.c config of a GPT model. */
vr_llmc_config vr__llmc_config_of(const vr_gpt_config *c);

#endif
