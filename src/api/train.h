/* ---------------------------------------------------------------------------
   src/api/train.h   Keras-style fit/evaluate, and checkpoints.
       gdl_fit_opts o = gdl_fit_defaults();
       o.epochs = 5; o.val = test_loader;
       gdl_epoch_stats hist[5];
       if (gdl_fit(model, train_loader, opt, &o, hist) < 0) puts(gdl_last_error());
   Checkpoints are safetensors files. gdl_save_model writes the parameters
   and buffers under PyTorch's state_dict names ("0.weight",
   "1.running_mean"), so safetensors.torch.load_file + load_state_dict read
   them (PyTorch's BN num_batches_tracked is not stored: load with
   strict=False or add it). A training checkpoint adds the optimizer state,
   step counts, learning rates, the scheduler position and the generator
   state, so a resumed run continues exactly as the uninterrupted one would.
   Saving is atomic (temporary file, fsync, rename); loading checks every
   name, dtype and shape first and changes nothing when anything is wrong.
   ------------------------------------------------------------------------- */

/* loss(output, target) for gdl_fit/gdl_evaluate; NULL means cross entropy */
typedef gdl_tensor *(*gdl_loss_fn)(gdl_tensor *output, gdl_tensor *target, void *user);

typedef struct gdl_fit_opts {
    int epochs;                 /* default 1 */
    gdl_loader *val;            /* evaluated after each epoch when given */
    gdl_scheduler *scheduler;   /* optional */
    int scheduler_per_batch;    /* 1: step it after every optimizer step (OneCycle); 0: per epoch */
    gdl_loss_fn loss;           /* NULL: cross entropy on integer targets */
    void *loss_user;
    double clip_grad_norm;      /* > 0: clip the global gradient norm before each step */
    int accumulate;             /* micro-batches per optimizer step, default 1 (loss scaled by 1/accumulate) */
    int verbose;                /* 0 silent; 1 (default): a live bar on a terminal, else a line per epoch */
    const char *csv_path;       /* a CSV of per-epoch metrics, optional */
    FILE *log;                  /* where progress goes, default stdout */
    int64_t checkpoint_every;   /* > 0: save the whole training state every this many optimizer steps to
                                   checkpoint_dir/gdl_fit.safetensors (atomically: always one whole file) */
    const char *checkpoint_dir; /* for checkpoint_every and resume; created if missing */
    int resume;                 /* 1: when checkpoint_dir holds a checkpoint, continue from it: model, optimizer,
                                   scheduler, generator, epoch, batch and the epoch's running metrics. A run
                                   killed at any point and started again with the same options ends with the
                                   weights of an uninterrupted run, bit for bit (as torchrun's elastic restarts
                                   expect). The CSV keeps the rows of the epochs finished before the checkpoint;
                                   history[] gets NaN for those epochs. */
    int oom_retry;              /* 1 (default): a batch whose step runs out of memory (host or device) is run
                                   again once, after the arenas, GEMM buffers and the CUDA allocator's cached
                                   blocks are given back. Safe because nothing was updated: the optimizer step
                                   is all or nothing (see gdl_step) and the generator is rewound, so the run
                                   continues bit for bit as if the first attempt had not been made. */
    int oom_split_batch;        /* 1: when that retry runs out of memory too, the batch runs as 2 micro-batches
                                   (then 4, 8, ... up to one sample each) with gradient accumulation: the
                                   effective batch and the loss scale are unchanged (each part's loss is
                                   weighted by its share of the batch, which is right for a mean-reduced loss;
                                   the gradients agree with the whole batch's to rounding). Later batches keep
                                   the split; one notice says so. BatchNorm's statistics then come from the
                                   micro-batches. Default 0. Either way, an out-of-memory failure is retried
                                   only on the first micro-batch of an optimizer step (accumulate > 1 keeps
                                   earlier micro-batches' gradients, which a failed backward may have partly
                                   changed); in a failed forward BatchNorm may have updated its running
                                   statistics before the failure. */
    struct gdl_ddp *ddp;        /* DistributedDataParallel over the model (gdl_ddp_new): forward and backward go
                                   through it (gradients averaged across the ranks; no_sync on the micro-batches
                                   of an accumulated step but the last); the epoch's loss and accuracy are summed
                                   over every rank's samples; only rank 0 prints, writes the CSV and saves
                                   checkpoints (every rank resumes from them, also on another number of ranks:
                                   src/api/dist.h). Give each rank its shard of the data (the loader's num_replicas,
                                   rank). NULL (default): one process */
    int cuda_graph;             /* 1 (default): on a GPU, after an input shape's first (eager) step its whole step
                                   (forward, loss, backward, optimizer, zero_grad, the metrics) is captured as a
                                   CUDA graph (src/api/graph.h) and later batches of that shape replay it: one
                                   launch instead of dozens, reading each batch in the device buffer the
                                   loader copied it to (with pin_memory, two buffers in turn: a graph each, so
                                   the next batch's copy overlaps this replay). Only where it can be: one
                                   process, accumulate 1, no batch split; a step that cannot be captured (a
                                   loss that reads the device, dropout) runs eagerly, with one notice. 0: every
                                   step eagerly. No effect on the CPU. */
    gdl_dtype autocast;         /* GDL_BF16 / GDL_F16: each batch's forward and loss run in an autocast region
                                   (gdl_autocast_begin; backward and the optimizer step outside it, as with
                                   torch.autocast), and so does the validation pass. 0 (GDL_F32): off */
    gdl_grad_scaler *scaler;    /* a GradScaler (gdl_grad_scaler_new): the loss scaled before backward, the grads
                                   unscaled before clipping, gdl_grad_scaler_step + update instead of gdl_step; its
                                   state goes into the checkpoints. NULL (default): none */
    int preempt;                /* 1: SIGUSR1 and SIGTERM are caught while gdl_fit runs (gdl_preempt_catch below):
                                   the optimizer step under way finishes, a checkpoint of it is written to
                                   checkpoint_dir (needed; atomically, under DDP by rank 0 with every rank in
                                   agreement, as checkpoint_every's) and gdl_fit returns GDL_FIT_PREEMPTED. The
                                   program then exits with GDL_EXIT_PREEMPTED, which examples/cluster's sbatch
                                   scripts turn into `scontrol requeue`; the requeued run, with resume = 1, goes
                                   on bit for bit. Under DDP the ranks agree on it after every step (an 8-byte
                                   all-reduce; over NCCL a host wait per step). Default 0: the signals keep their
                                   actions */
    int val_tta_hflip;          /* 1: the validation averages each batch's outputs with those of its horizontal
                                   flip (gdl_evaluate_ex); default 0 */
    /* Early stopping and the best model (Keras' EarlyStopping and ModelCheckpoint(save_best_only)), after each
       epoch on the monitored figure; their best figures and patience count are in gdl_fit's checkpoints, so a
       resumed run stops where the uninterrupted one does. */
    int monitor;                /* GDL_MONITOR_VAL_LOSS (default), GDL_MONITOR_VAL_ACCURACY (both need val) or
                                   GDL_MONITOR_LOSS (training) */
    int mode;                   /* GDL_MODE_AUTO (default: min for a loss, max for the accuracy), _MIN or _MAX */
    int patience;               /* > 0: stop after this many epochs in a row with no improvement by more than
                                   min_delta over the best (the history's later epochs get epoch 0, NaN figures);
                                   0: off */
    double min_delta;           /* >= 0, default 0 */
    const char *best_path;      /* the model (gdl_save_model; with an EMA the averaged weights, as validated) is
                                   written here, atomically, each epoch whose figure is the best so far; under DDP
                                   by rank 0. NULL: off */
} gdl_fit_opts;

enum { GDL_MONITOR_VAL_LOSS = 0, GDL_MONITOR_VAL_ACCURACY = 1, GDL_MONITOR_LOSS = 2 };
enum { GDL_MODE_AUTO = 0, GDL_MODE_MIN = 1, GDL_MODE_MAX = 2 };

/* gdl_fit's return when opts.preempt stopped it after a checkpoint (0: it finished; -1: an error) */
#define GDL_FIT_PREEMPTED 1
/* The exit status that says "preempted, checkpoint saved, run me again" (sysexits' EX_TEMPFAIL); the
   sbatch scripts of examples/cluster requeue the job on it. */
#define GDL_EXIT_PREEMPTED 75

typedef struct gdl_epoch_stats {
    int epoch;                  /* 1-based */
    double loss, accuracy;      /* training, averaged over the epoch's samples; accuracy NaN if not a classifier */
    double val_loss, val_accuracy; /* NaN without a validation loader */
    double seconds, samples_per_sec;
    int64_t samples;
} gdl_epoch_stats;

/* wall-clock seconds (gettimeofday; clock() where that is missing), for timing loops */
GPUDL_API double gdl_now(void);
/* Loss objects with the gdl_loss_fn signature, PyTorch's nn.CrossEntropyLoss(...) etc.: give the
   function as gdl_fit_opts.loss and its options as .loss_user (NULL: PyTorch's defaults).
   user: const gdl_ce_opts * (cross entropy, nll; nll needs label_smoothing 0) or
   const gdl_reduction * (mse, bce_with_logits). */
GPUDL_API gdl_tensor *gdl_loss_cross_entropy(gdl_tensor *output, gdl_tensor *target, void *user);
GPUDL_API gdl_tensor *gdl_loss_nll(gdl_tensor *output, gdl_tensor *target, void *user);
GPUDL_API gdl_tensor *gdl_loss_mse(gdl_tensor *output, gdl_tensor *target, void *user);
GPUDL_API gdl_tensor *gdl_loss_bce_with_logits(gdl_tensor *output, gdl_tensor *target, void *user);
GPUDL_API gdl_fit_opts gdl_fit_defaults(void);
/* Trains for o->epochs over train; fills history[0..epochs-1] when not NULL. 0 / -1. */
GPUDL_API int gdl_fit(gdl_module *m, gdl_loader *train, gdl_optimizer *opt, const gdl_fit_opts *o,
                      gdl_epoch_stats *history);
/* What gdl_fit shows and writes, for hand-written loops (one implementation for both):
   gdl_progress_bar redraws "epoch 2/5 [=====>    ] 300/938 loss 0.4123 acc 85.10% 93312 samples/s ETA 3s"
   in place when f is a terminal, at most every 0.1 s and always for the last batch; on anything else it
   does nothing (a log file gets only the epoch lines). loss and accuracy are the epoch's running means
   (accuracy NaN: not shown), samples the epoch's count so far, t0 gdl_now() at the epoch's start.
   gdl_fit adds the GPU's utilisation and memory (gdl_gpu_stats) when it trains on CUDA and NVML is there.
   gdl_print_epoch prints the epoch's line (replacing the bar); val_* NaN are left out. */
GPUDL_API int gdl_progress_bar(FILE *f, int epoch, int epochs, int64_t batch, int64_t num_batches, double loss,
                               double accuracy, int64_t samples, double t0); /* 1 if it drew */
GPUDL_API void gdl_print_epoch(FILE *f, int epochs, const gdl_epoch_stats *s);
/* A per-epoch metrics CSV (epoch,loss,accuracy,val_loss,val_accuracy,seconds,samples_per_sec):
   gdl_metrics_csv_open writes the header (NULL + error); each gdl_metrics_csv_row appends one epoch and
   flushes, so the file is complete after every epoch (0 / -1). Close it with fclose. */
GPUDL_API FILE *gdl_metrics_csv_open(const char *path);
GPUDL_API int gdl_metrics_csv_row(FILE *f, const gdl_epoch_stats *s);
/* One pass over l in eval mode without gradients: mean loss and accuracy (either out may be NULL). 0 / -1.
   Called inside an autocast region, it runs in it (gdl_fit's autocast option puts its validation pass in one). */
GPUDL_API int gdl_evaluate(gdl_module *m, gdl_loader *l, gdl_loss_fn loss, void *user, double *loss_out,
                           double *accuracy_out);
/* The same; tta_hflip 1: test-time augmentation, the model's outputs on each batch and on its horizontal flip
   (the last dim reversed; batches of 3 or more dims) averaged before the loss and accuracy. */
GPUDL_API int gdl_evaluate_ex(gdl_module *m, gdl_loader *l, gdl_loss_fn loss, void *user, int tta_hflip,
                              double *loss_out, double *accuracy_out);

/* Preemption in a hand-written loop (gdl_fit's opts.preempt does the same): Slurm sends SIGUSR1 before a
   time limit (sbatch --signal=USR1@90) and SIGTERM at preemption and at the limit; Kubernetes SIGTERM
   before it kills a pod.
     gdl_preempt_catch(1);                          // at the program's start
     for (...) { ... gdl_step(opt);
                 if (gdl_preempt_check() > 0) { save a checkpoint; exit(GDL_EXIT_PREEMPTED); } }
   gdl_preempt_catch(1) installs a handler for SIGUSR1 and SIGTERM that only records the signal (nothing
   else is safe in a handler), SA_RESTART, each signal blocked while the other's handler runs; a second
   signal during a save changes nothing (the save is atomic and finishes). Keep the handler installed up to
   the preempted exit: a signal sent again after gdl_preempt_catch(0) would kill the process by its default
   action, and a scheduler would see a death by signal, not the exit status that asks for a requeue. Calls
   nest; gdl_preempt_catch(0) puts the previous handlers back at the outermost. Built without POSIX's sigaction (a bare -std=c99 on
   glibc hides it: define _POSIX_C_SOURCE 200809L), signal() is used and the handler sets itself again on
   entry. 0 / -1 + error. */
GPUDL_API int gdl_preempt_catch(int on);
/* The signal this process caught since gdl_preempt_catch(1) (0: none); a plain read, no collective. */
GPUDL_API int gdl_preempt_signal(void);
/* After a step, on every rank at the same point (a collective when gdl_dist_init made several ranks): the
   signal any rank caught (the largest number), 0 when none did, -1 + error. Every rank gets the same answer,
   so they stop at the same step. */
GPUDL_API int gdl_preempt_check(void);

/* Saving and loading take what is saved or loaded into first and the path last, as torch.save(obj, path):
   gdl_save_model, gdl_load_model, gdl_checkpoint_save, gdl_checkpoint_load, gdl_quant_save, gdl_quant_load,
   gdl_vocab_save. (The file-format readers that make new data from a file, gdl_st_read, gdl_idx_load,
   gdl_cifar10_load and gdl_vocab_load, take the path first and their outputs last, as fopen and fread; and
   so does gdl_st_write, gdl_st_read's mirror.) Errors name the call made ("gdl_load_model: PATH: cannot
   open: ..."). */
/* Model parameters and buffers, PyTorch names, F32. 0 / -1. */
GPUDL_API int gdl_save_model(gdl_module *m, const char *path);
/* Strict: the file must hold exactly the model's names with matching shapes (F32, F16, BF16 or F64). 0 / -1. */
GPUDL_API int gdl_load_model(gdl_module *m, const char *path);
/* The full training state; opt, sched may be NULL. epoch is the caller's counter (gdl_checkpoint_load's
   *epoch; epoch may be NULL there). 0 / -1. */
GPUDL_API int gdl_checkpoint_save(gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched, int64_t epoch,
                                  const char *path);
GPUDL_API int gdl_checkpoint_load(gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched, int64_t *epoch,
                                  const char *path);
/* Deprecated (kept for one release): the spellings before gdl_checkpoint_save / gdl_checkpoint_load, path
   first; the same files and behaviour. */
GDL_DEPRECATED("use gdl_checkpoint_save(m, opt, sched, epoch, path)")
GPUDL_API int gdl_save_checkpoint(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                                  int64_t epoch);
GDL_DEPRECATED("use gdl_checkpoint_load(m, opt, sched, &epoch, path)")
GPUDL_API int gdl_load_checkpoint(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                                  int64_t *epoch);

