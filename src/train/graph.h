/* ---------------------------------------------------------------------------
   src/train/graph.h   gdl_graph_capture / replay: the backend records the
   compute stream; here are the warm-up, the arena resets and the errors.
   ------------------------------------------------------------------------- */

struct gdl_graph {
    gdl_device dev;
    const gdl_backend *be;
    int (*step)(void *ctx);
    void *ctx;
    void *exec; /* the backend's graph; NULL on the CPU, where a replay calls the step */
};

GPUDL_API int gdl_graph_is_capturing(void) { return gdl__capturing; }

/* Records step (run before, so that its memory exists) into a graph; on the
   CPU only keeps it. NULL + error naming op. */
static gdl_graph *gdl__graph_record(const char *op, gdl_device dev, int (*step)(void *ctx), void *ctx) {
    gdl_graph *g;
    int rc;
    if (gdl__capturing) {
        gdl__set_error("%s: already capturing a step (graphs do not nest)", op);
        return NULL;
    }
    if (!(g = (gdl_graph *)gdl__zalloc(op, sizeof *g))) return NULL;
    g->dev = dev;
    g->step = step;
    g->ctx = ctx;
    if (!(g->be = gdl__be_lookup(op, dev))) goto fail;
    if (dev.type == GDL_DEVICE_CPU) return g;
    gdl_arena_reset();
    if (g->be->rt.graph_begin() < 0) goto fail;
    gdl__capturing = 1;
    rc = step(ctx);
    gdl__capturing = 0;
    if (rc < 0) {
        /* keep the step's error: ending the capture adds CUDA's own (invalidated) */
        char why[sizeof gdl__err];
        snprintf(why, sizeof why, "%s", gdl_last_error());
        g->be->rt.graph_end(&g->exec);
        gdl__set_error("%s: the step cannot be captured on %s: %s (MANUAL src/api/graph.h: no host reads, new "
                       "tensors or dropout inside a captured step)",
                       op, gdl_device_str(dev), why);
        goto fail;
    }
    if (g->be->rt.graph_end(&g->exec) < 0) {
        gdl__set_error("%s: capturing the step on %s failed: %s", op, gdl_device_str(dev), gdl_last_error());
        goto fail;
    }
    return g;
fail:
    gdl__capturing = 0;
    gdl_graph_free(g);
    return NULL;
}

GPUDL_API gdl_graph *gdl_graph_capture(gdl_device dev, int (*step)(void *ctx), void *ctx) {
    const char *op = "gdl_graph_capture";
    if (!step) {
        gdl__null_arg(op, "step");
        return NULL;
    }
    if (gdl__capturing) {
        gdl__set_error("%s: already capturing a step (graphs do not nest)", op);
        return NULL;
    }
    if (!gdl__be_lookup(op, dev)) return NULL;
    /* the warm-up: a real step, which makes everything the recorded one will use */
    gdl_arena_reset();
    if (step(ctx) < 0) {
        gdl__set_error("%s: the warm-up step failed: %s", op, gdl_last_error());
        return NULL;
    }
    return gdl__graph_record(op, dev, step, ctx);
}

GPUDL_API int gdl_graph_replay(gdl_graph *g) {
    if (!g) {
        gdl__null_arg("gdl_graph_replay", "g");
        return -1;
    }
    if (!g->exec) { /* the CPU: the step again, on a fresh arena as at capture */
        gdl_arena_reset();
        return g->step(g->ctx);
    }
    if (!gdl__be_lookup("gdl_graph_replay", g->dev)) return -1; /* makes the graph's device current */
    {
        int span = gdl__prof_on ? gdl__prof_push("gdl_graph_replay", g->dev) : 0, rc;
        rc = g->be->rt.graph_launch(g->exec);
        gdl__prof_pop(span, rc == 0);
        return rc;
    }
}

GPUDL_API void gdl_graph_free(gdl_graph *g) {
    if (!g) return;
    if (g->exec && gdl__be_lookup("gdl_graph_free", g->dev)) g->be->rt.graph_destroy(g->exec);
    GPUDL_FREE(g);
}

