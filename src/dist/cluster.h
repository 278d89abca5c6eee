/* ---------------------------------------------------------------------------
   src/dist/cluster.h   What workload managers hand a job: Slurm's host lists (the
   rendezvous's MASTER_ADDR under srun), the environments of Kubernetes'
   controllers (an Indexed Job, Kubeflow's PyTorchJob and TrainJob), and
   preemption: SIGUSR1 / SIGTERM caught as a flag that gdl_fit (or a
   hand-written loop, gdl_preempt_check) turns into a checkpoint and a stop.
   ------------------------------------------------------------------------- */
#include <signal.h>

/* ---- Slurm's host lists: "node[01-04,07],gpu-a[1-2]" ---- */

#define GDL__HOSTS_MAX (1 << 24) /* hosts in one list: more is taken for a damaged list */

/* One bracket group of a host list: its ranges, parsed from s (just after '['); *end is set after ']'.
   The hosts it stands for (> 0), or -1 + error. With k >= 0, the k-th number and its width go to *num,
   *width. */
static int64_t gdl__hostlist_group(const char *op, const char *list, const char *s, const char **end, int64_t k,
                                   unsigned long *num, int *width) {
    int64_t count = 0;
    const char *p = s;
    for (;;) {
        unsigned long lo, hi;
        int wl = 0, wh = 0;
        const char *q = p;
        while (*q >= '0' && *q <= '9') q++;
        wl = (int)(q - p);
        if (wl == 0 || wl > 9) {
            gdl__set_error("%s: host list '%s': %s at offset %d, in the brackets opened at %d (a range is "
                           "N or N-M, decimal, at most 9 digits)", op, list, wl ? "a number too long" : "no number",
                           (int)(p - list), (int)(s - 1 - list));
            return -1;
        }
        lo = hi = strtoul(p, NULL, 10);
        p = q;
        if (*p == '-') {
            q = ++p;
            while (*q >= '0' && *q <= '9') q++;
            wh = (int)(q - p);
            if (wh == 0 || wh > 9) {
                gdl__set_error("%s: host list '%s': the range at offset %d has %s", op, list, (int)(p - 1 - list),
                               wh ? "a number too long for its upper bound (at most 9 digits)" : "no upper bound");
                return -1;
            }
            hi = strtoul(p, NULL, 10);
            p = q;
            if (hi < lo) {
                gdl__set_error("%s: host list '%s': the range %lu-%lu at offset %d goes down", op, list, lo, hi,
                               (int)(p - list));
                return -1;
            }
        }
        if (k >= count && k < count + (int64_t)(hi - lo + 1)) {
            *num = lo + (unsigned long)(k - count);
            *width = wl; /* zero padding: as wide as the lower bound is written ("01-10": 01 ... 10) */
        }
        count += (int64_t)(hi - lo + 1);
        if (*p == ']') break;
        if (*p != ',') {
            gdl__set_error("%s: host list '%s': '%c' at offset %d inside brackets (expected a digit, '-', ',' or "
                           "']')%s", op, list, *p ? *p : '?', (int)(p - list), *p ? "" : ": the '[' is never closed");
            return -1;
        }
        p++;
    }
    *end = p + 1;
    return count;
}

/* The hosts of one item of a list (s to e: no comma outside brackets), > 0, or -1 + error; with k >= 0 the
   k-th host goes to out (len bytes). Several bracket groups multiply, the last varying fastest
   ("a[1-2]b[1-2]": a1b1 a1b2 a2b1 a2b2). */
static int64_t gdl__hostlist_item(const char *op, const char *list, const char *s, const char *e, int64_t k,
                                  char *out, size_t len) {
    int64_t total = 1, stride;
    const char *p;
    size_t o = 0;
    if (s == e) {
        gdl__set_error("%s: host list '%s': an empty name at offset %d", op, list, (int)(s - list));
        return -1;
    }
    for (p = s; p < e;) { /* count first: the k-th host's digits come from the total */
        if (*p == '[') {
            const char *end;
            unsigned long num;
            int w;
            int64_t g = gdl__hostlist_group(op, list, p + 1, &end, -1, &num, &w);
            if (g < 0) return -1;
            if (end > e) {
                gdl__set_error("%s: host list '%s': the '[' at offset %d is never closed", op, list, (int)(p - list));
                return -1;
            }
            if (g > GDL__HOSTS_MAX / total) {
                gdl__set_error("%s: host list '%s': more than %d hosts", op, list, GDL__HOSTS_MAX);
                return -1;
            }
            total *= g;
            p = end;
        } else if (*p == ']') {
            gdl__set_error("%s: host list '%s': a ']' at offset %d without its '['", op, list, (int)(p - list));
            return -1;
        } else {
            p++;
        }
    }
    if (k < 0 || k >= total) return total;
    stride = total;
    for (p = s; p < e;) {
        if (*p == '[') {
            const char *end;
            unsigned long num = 0;
            int w = 1;
            int64_t g = gdl__hostlist_group(op, list, p + 1, &end, -1, &num, &w);
            stride /= g;
            (void)gdl__hostlist_group(op, list, p + 1, &end, (k / stride) % g, &num, &w);
            if (o < len) o += (size_t)snprintf(out + o, len - o, "%0*lu", w, num);
            p = end;
        } else {
            if (o + 1 < len) out[o] = *p, out[o + 1] = 0;
            o++;
            p++;
        }
    }
    if (o >= len) {
        gdl__set_error("%s: host list '%s': host %lld is longer than %d characters", op, list, (long long)k,
                       (int)len - 1);
        return -1;
    }
    return total;
}

/* The hosts of list under op's name: their number, with host n in out when n < it; -1 + error. */
static int64_t gdl__hostlist(const char *op, const char *list, int64_t n, char *out, size_t len) {
    const char *s, *p;
    int64_t total = 0;
    int depth = 0;
    if (out && len) out[0] = 0;
    if (!list || !list[0]) {
        gdl__set_error("%s: the host list is empty", op);
        return -1;
    }
    for (s = p = list;; p++) {
        if (*p == '[') depth++;
        if (*p == ']') depth--;
        if (depth > 1) {
            gdl__set_error("%s: host list '%s': brackets inside brackets at offset %d", op, list, (int)(p - list));
            return -1;
        }
        if ((*p == ',' && depth == 0) || !*p) {
            int64_t c = gdl__hostlist_item(op, list, s, p, n - total, out, len);
            if (c < 0) return -1;
            if (c > GDL__HOSTS_MAX - total) {
                gdl__set_error("%s: host list '%s': more than %d hosts", op, list, GDL__HOSTS_MAX);
                return -1;
            }
            total += c;
            if (!*p) break;
            s = p + 1;
        }
        if (depth < 0) depth = 0; /* a stray ']': the item's check names it */
    }
    return total;
}

GPUDL_API int64_t gdl_hostlist_host(const char *list, int64_t n, char *out, size_t len) {
    if (!out || !len) {
        gdl__null_arg("gdl_hostlist_host", "out");
        return -1;
    }
    return gdl__hostlist("gdl_hostlist_host", list, n, out, len);
}

/* The rendezvous's address and port (gdl__rendezvous): MASTER_ADDR, MASTER_PORT as set; else
   Kubeflow's PET_MASTER_ADDR, PET_MASTER_PORT; else, in a process srun started (SLURM_PROCID), the
   first host of the step's (or job's) node list, where srun starts rank 0, and a port from the job's id.
   Unset ones stay "". 0, or -1 + error (a value too long for its buffer, a bad node list, a job id
   that is not a number). Only the rendezvous without MPI asks. */
#if defined(GDL__HAVE_RDV)
static int gdl__cluster_master(const char *op, char *addr, size_t alen, char *port, size_t plen) {
    static const char *const lists[3] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
    const char *a, *p, *job;
    int i;
    if (gdl__env_str(op, "MASTER_ADDR", alen - 1, &a) < 0 || gdl__env_str(op, "MASTER_PORT", plen - 1, &p) < 0)
        return -1;
    if (!a[0] && gdl__env_str(op, "PET_MASTER_ADDR", alen - 1, &a) < 0) return -1;
    if (!p[0] && gdl__env_str(op, "PET_MASTER_PORT", plen - 1, &p) < 0) return -1;
    snprintf(addr, alen, "%s", a);
    snprintf(port, plen, "%s", p);
    if (!getenv("SLURM_PROCID")) return 0;
    for (i = 0; i < 3 && !addr[0]; i++) {
        const char *l = getenv(lists[i]);
        char why[sizeof gdl__err];
        if (!l) continue;
        if (gdl__hostlist(lists[i], l, 0, addr, alen) < 0) {
            memcpy(why, gdl__err, sizeof why);
            gdl__set_error("%s: MASTER_ADDR is not set and cannot come from %s", op, why);
            return -1;
        }
    }
    /* a port of the job's own, the same on every rank; jobs sharing a node differ (Lightning's way too) */
    if (!port[0] && (job = getenv("SLURM_JOB_ID")) != NULL && job[0]) {
        long id;
        if (gdl__parse_long(job, 0, LONG_MAX, &id) < 0) {
            gdl__set_error("%s: MASTER_PORT is not set and cannot come from SLURM_JOB_ID='%.64s': not a whole "
                           "number >= 0 (set MASTER_PORT)", op, job);
            return -1;
        }
        snprintf(port, plen, "%ld", 20000 + id % 20000);
    }
    return 0;
}
#endif

/* ---- Kubernetes' environments ---- */

/* gdl__dist_env's part for Kubernetes: an Indexed Job (JOB_COMPLETION_INDEX, without RANK), a Kubeflow
   PyTorchJob (RANK and WORLD_SIZE without LOCAL_RANK, with its PET_* variables), or PET_* alone (Kubeflow's
   TrainJob, torchrun's variables). 1: found (rank, world, local, launcher set), 0: none of them, -1 + error. */
static int gdl__cluster_env(const char *op, int *rank, int *world, int *local, const char **launcher) {
    const char *nproc = getenv("PET_NPROC_PER_NODE"), *nn = getenv("PET_NNODES");
    int r;
    if (getenv("JOB_COMPLETION_INDEX") && !getenv("RANK")) {
        *launcher = "k8s-indexed-job";
        if (!getenv("WORLD_SIZE")) {
            gdl__set_error("%s: JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but WORLD_SIZE is not: set it "
                           "in the manifest to the Job's completions", op);
            return -1;
        }
        if (gdl__env_int(op, *launcher, "WORLD_SIZE", 1, 1L << 20, world) < 0 ||
            gdl__env_int(op, *launcher, "JOB_COMPLETION_INDEX", 0, *world - 1, rank) < 0 ||
            gdl__env_int(op, *launcher, "LOCAL_RANK", 0, *world - 1, local) < 0)
            return -1;
        return 1;
    }
    if (!nproc && !nn && !getenv("PET_NODE_RANK")) return 0;
    /* torchrun ran in the pod (it read PET_*, which its processes inherit): its variables say it all */
    if (getenv("RANK") && getenv("LOCAL_RANK")) return 0;
    /* Kubeflow: one process per pod, as this program runs without torchrun in between */
    if (nproc && strcmp(nproc, "1") != 0) {
        gdl__set_error("%s: PET_NPROC_PER_NODE='%s' (Kubeflow): gpudl runs one process per pod; set numProcPerNode "
                       "to 1 (and a pod per GPU), or start the processes with torchrun", op, nproc);
        return -1;
    }
    if (getenv("RANK") && getenv("WORLD_SIZE")) { /* PyTorchJob: RANK is the pod's, one process per pod */
        *launcher = "pytorchjob";
        if (gdl__env_int(op, *launcher, "WORLD_SIZE", 1, 1L << 20, world) < 0 ||
            gdl__env_int(op, *launcher, "RANK", 0, *world - 1, rank) < 0 ||
            gdl__env_int(op, *launcher, "LOCAL_RANK", 0, *world - 1, local) < 0)
            return -1;
        return 1;
    }
    if (getenv("RANK") || getenv("WORLD_SIZE")) return 0; /* torchrun's own rules name what is missing */
    *launcher = "kubeflow-pet";
    if (!nn || !getenv("PET_NODE_RANK")) {
        gdl__set_error("%s: %s is set (Kubeflow) but %s is not", op, nn ? "PET_NNODES" : "PET_NODE_RANK",
                       nn ? "PET_NODE_RANK" : "PET_NNODES");
        return -1;
    }
    { /* PET_NNODES: N, or an elastic range N:N of one size (torchrun's rendezvous decides a range) */
        char *end;
        long lo = strtol(nn, &end, 10), hi = lo;
        if (*end == ':') hi = strtol(end + 1, &end, 10);
        if (!nn[0] || *end || strspn(nn, "0123456789:") != strlen(nn) || lo < 1 || lo > (1L << 20) || hi != lo) {
            gdl__set_error("%s: PET_NNODES='%s' (Kubeflow) is not a number of pods%s", op, nn,
                           hi != lo ? ": an elastic range needs torchrun's rendezvous; gpudl takes a fixed size "
                                      "(minNodes = maxNodes)" : "");
            return -1;
        }
        *world = (int)lo;
    }
    if (gdl__env_int(op, *launcher, "PET_NODE_RANK", 0, *world - 1, &r) < 0) return -1;
    *rank = r;
    *local = 0;
    return 1;
}

/* ---- preemption ---- */

/* The signal caught (0: none). Written by the handler only: sig_atomic_t is all a handler may touch. */
static volatile sig_atomic_t gdl__preempt_sig;
static int gdl__preempt_depth; /* gdl_preempt_catch(1) calls not yet undone */

static void gdl__preempt_handler(int sig) {
#if !defined(SA_RESTART)
    signal(sig, gdl__preempt_handler); /* System V's signal() resets the handler: set it again at once */
#endif
    gdl__preempt_sig = sig;
}

#if defined(SA_RESTART) /* POSIX's sigaction is there (a bare -std=c99 hides it: then signal(), see the manual) */
static struct sigaction gdl__preempt_old[2];
#else
static void (*gdl__preempt_old[2])(int);
#endif

GPUDL_API int gdl_preempt_catch(int on) {
    static const int sigs[2] = {
#ifdef SIGUSR1
        SIGUSR1,
#else
        SIGINT,
#endif
        SIGTERM};
    int i;
    if (on && gdl__preempt_depth++ > 0) return 0;
    if (!on && (gdl__preempt_depth == 0 || --gdl__preempt_depth > 0)) return 0;
    for (i = 0; i < 2; i++) {
#if defined(SA_RESTART)
        int rc;
        if (on) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = gdl__preempt_handler;
            sigemptyset(&sa.sa_mask);
            sigaddset(&sa.sa_mask, sigs[0]); /* one handler at a time: the other signal waits */
            sigaddset(&sa.sa_mask, sigs[1]);
            sa.sa_flags = SA_RESTART; /* a save's write or fsync is restarted, not failed with EINTR */
            rc = sigaction(sigs[i], &sa, &gdl__preempt_old[i]);
        } else {
            rc = sigaction(sigs[i], &gdl__preempt_old[i], NULL);
        }
        if (rc != 0) {
            gdl__set_error("gdl_preempt_catch: sigaction(%d): %s", sigs[i], strerror(errno));
            return -1;
        }
#else
        if (on) gdl__preempt_old[i] = signal(sigs[i], gdl__preempt_handler);
        else signal(sigs[i], gdl__preempt_old[i]);
#endif
    }
    if (on) gdl__preempt_sig = 0;
    return 0;
}

GPUDL_API int gdl_preempt_signal(void) { return (int)gdl__preempt_sig; }

GPUDL_API int gdl_preempt_check(void) {
    double v = (double)gdl__preempt_sig;
    if (gdl__dist.init && gdl__dist.world > 1 &&
        gdl__dist_reduce_f64("gdl_preempt_check", "the ranks' agreement on a preemption signal", &v, 1, 1) < 0)
        return -1;
    return (int)v;
}
