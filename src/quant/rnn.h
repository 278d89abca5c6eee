/* src/quant/rnn.h — the recurrent modules, dynamically quantized. */

/* ---- the recurrent modules, dynamically quantized ----
   torch.ao.nn.quantized.dynamic.LSTM / GRU: per layer and direction, the input and hidden projections
   become DynamicQuantizedLinear children "ih_l<l>" / "hh_l<l>" ("_reverse" for the backward direction)
   with the biases b_ih, b_hh; the module keeps nn.LSTM's kind and configuration (flagged GDL__RNN_QUANT),
   so src/nn/'s recurrence runs it: the input projection of a whole sequence at once (one activation
   scale for all its steps, as PyTorch's CPU path), the hidden one per step, the gates in f32. */
static gdl_module *gdl__qrnn_new(const char *op, const gdl_module *m, const gdl_qconfig *qc) {
    const int D = m->ia[GDL__RNN_BIDIR] ? 2 : 1, bias = (int)m->ia[GDL__RNN_BIAS], per = bias ? 4 : 2;
    const int lstm = m->kind == GDL__M_LSTM;
    gdl_module *c, *k;
    int l, d, j;
    if (m->ia[GDL__RNN_PROJ]) { /* as PyTorch's dynamic LSTM, which has no weight_hr */
        gdl__set_error("%s: %s has proj_size=%lld: a dynamically quantized LSTM has no projection", op,
                       gdl__nn_label(m), (long long)m->ia[GDL__RNN_PROJ]);
        return NULL;
    }
    if (!(c = gdl__nn_new(op, m->kind, lstm ? "DynamicQuantizedLSTM" : "DynamicQuantizedGRU"))) return NULL;
    c->training = m->training;
    memcpy(c->ia, m->ia, sizeof c->ia);
    memcpy(c->fa, m->fa, sizeof c->fa);
    c->ia[GDL__RNN_QUANT] = 1;
    for (l = 0; l < (int)m->ia[GDL__RNN_LAYERS]; l++)
        for (d = 0; d < D; d++)
            for (j = 0; j < 2; j++) { /* ih, hh */
                const int base = (l * D + d) * per;
                const gdl_tensor *W = gdl__nn_param(m, base + j), *b = bias ? gdl__nn_param(m, base + 2 + j) : NULL;
                int64_t ia[GDL__NN_IA];
                char name[48], who[320];
                memset(ia, 0, sizeof ia);
                ia[GDL__LIN_IN] = W->shape[1];
                ia[GDL__LIN_OUT] = W->shape[0];
                snprintf(name, sizeof name, "%s_l%d%s", j ? "hh" : "ih", l, d ? "_reverse" : "");
                snprintf(who, sizeof who, "%s's %s", gdl__nn_label(m), m->param[base + j].name);
                k = gdl__qlayer_new(op, who, GDL__Q_DYNAMIC, 0, 0, ia, W, b, qc, NULL, NULL);
                if (!k || gdl__nn_add_child(op, c, name, k) < 0) {
                    gdl__nn_free_tree(c);
                    return NULL;
                }
            }
    return c;
}

/* A deep copy of m (parameters cloned) in which, by mode: every Linear (and LSTM, GRU) is dynamically
   quantized; every Linear and Conv2d observed (a ReLU after it in a Sequential fused in, and replaced by an
   Identity, as torch.ao.quantization.fuse_modules does); every observed layer converted. T records where the
   parameters went. */
static gdl_module *gdl__quant_copy(const char *op, const gdl_module *m, int mode, const gdl_qconfig *qc,
                                   gdl__qties *T) {
    gdl_module *c, *k;
    int i;
    if (mode == GDL__QC_DYNAMIC && m->kind == GDL__M_LINEAR) {
        k = gdl__qlayer_new(op, gdl__nn_label(m), GDL__Q_DYNAMIC, 0, 0, m->ia, gdl__nn_param(m, 0),
                            gdl__nn_param(m, 1), qc, NULL, NULL);
        if (k && gdl__qties_add(op, T, m->param[0].t, NULL, 0, (gdl__qlayer *)k->user, m->param[0].tied) < 0) {
            gdl__nn_free_tree(k);
            return NULL;
        }
        return k;
    }
    if (mode == GDL__QC_DYNAMIC && (m->kind == GDL__M_LSTM || m->kind == GDL__M_GRU) && !m->ia[GDL__RNN_QUANT])
        return gdl__qrnn_new(op, m, qc);
    if ((mode == GDL__QC_PREPARE || mode == GDL__QC_PREPARE_QAT) && (m->kind == GDL__M_LINEAR || m->kind == GDL__M_CONV2D)) {
        if (m->kind == GDL__M_CONV2D && m->ia[GDL__CONV_GROUPS] != 1) {
            gdl__set_error("%s: %s has groups=%lld: quantized convolutions take groups=1 only", op, gdl__nn_label(m),
                           (long long)m->ia[GDL__CONV_GROUPS]);
            return NULL;
        }
        k = gdl__qprep_new(op, m, NULL, 0, mode == GDL__QC_PREPARE_QAT, qc);
        if (k && gdl__qties_params(op, T, m, k) < 0) {
            gdl__nn_free_tree(k);
            return NULL;
        }
        return k;
    }
    if (mode == GDL__QC_CONVERT && gdl__is_qprep(m)) {
        k = gdl__qprep_convert(op, m);
        if (k && gdl__qties_add(op, T, m->param[0].t, NULL, 0, (gdl__qlayer *)k->user, m->param[0].tied) < 0) {
            gdl__nn_free_tree(k);
            return NULL;
        }
        return k;
    }
    if (m->kind == GDL__M_CUSTOM) {
        gdl__set_error("%s: %s is a custom module%s: it cannot be copied; quantize a model of built-in modules", op,
                       gdl__nn_label(m), gdl__is_qlayer(m) ? " (already quantized)" : gdl__is_qprep(m) ? " (prepared)" : "");
        return NULL;
    }
    if (!(c = gdl__nn_new(op, m->kind, m->kind_name))) return NULL;
    c->training = m->training;
    memcpy(c->ia, m->ia, sizeof c->ia);
    memcpy(c->fa, m->fa, sizeof c->fa);
    for (i = 0; i < m->nparam; i++)
        if (gdl__nn_add_tensor(op, c, m->param[i].name, gdl_clone(m->param[i].t), 0) < 0) goto fail;
    for (i = 0; i < m->nbuf; i++)
        if (gdl__nn_add_tensor(op, c, m->buf[i].name, gdl_clone(m->buf[i].t), 1) < 0) goto fail;
    if (gdl__qties_params(op, T, m, c) < 0) goto fail;
    for (i = 0; i < m->nchild; i++) {
        const gdl_module *ch = m->child[i], *bn;
        int relu, j, nf = mode == GDL__QC_PREPARE || mode == GDL__QC_PREPARE_QAT ? gdl__quant_fusable(m, i, &bn, &relu) : 0;
        /* fused: BatchNorm, ReLU become Identities */
        if (nf > 1 && (ch->kind == GDL__M_LINEAR || ch->ia[GDL__CONV_GROUPS] == 1)) {
            k = gdl__qprep_new(op, ch, bn, relu, mode == GDL__QC_PREPARE_QAT, qc);
            if (!k || gdl__nn_add_child(op, c, ch->name, k) < 0) goto fail;
            if (!bn && gdl__qties_params(op, T, ch, k) < 0) goto fail; /* a folded weight is another tensor */
            for (j = 1; j < nf; j++) {
                k = gdl_nn_identity();
                if (!k || gdl__nn_add_child(op, c, m->child[i + j]->name, k) < 0) goto fail;
            }
            i += nf - 1;
            continue;
        }
        k = gdl__quant_copy(op, ch, mode, qc, T);
        if (!k || gdl__nn_add_child(op, c, ch->name, k) < 0) goto fail;
    }
    return c;
fail:
    gdl__nn_free_tree(c);
    return NULL;
}

static gdl_module *gdl__quant_copy_root(const char *op, gdl_module *m, int mode, const gdl_qconfig *qc) {
    gdl_qconfig def = gdl_qconfig_default();
    gdl__qties T;
    gdl_module *r;
    int grad;
    if (!m) {
        gdl__null_arg(op, "module");
        return NULL;
    }
    if (!qc) qc = &def;
    if (qc->observer < GDL_QOBS_MINMAX || qc->observer > GDL_QOBS_HISTOGRAM || !(qc->averaging_constant > 0) ||
        !(qc->averaging_constant <= 1) || !(qc->percentile > 0.5) || !(qc->percentile <= 1)) {
        gdl__set_error("%s: bad qconfig: observer %d (GDL_QOBS_*), averaging_constant %g (in (0, 1]), percentile %g "
                       "(in (0.5, 1])", op, qc->observer, qc->averaging_constant, qc->percentile);
        return NULL;
    }
    memset(&T, 0, sizeof T);
    grad = gdl_set_grad_enabled(0);
    r = gdl__quant_copy(op, m, mode, qc, &T);
    gdl_set_grad_enabled(grad);
    if (r) gdl__qties_resolve(&T);
    GPUDL_FREE(T.r);
    return r;
}

GPUDL_API gdl_module *gdl_quantize_dynamic(gdl_module *m, const gdl_qconfig *qc) {
    return gdl__quant_copy_root("gdl_quantize_dynamic", m, GDL__QC_DYNAMIC, qc);
}

GPUDL_API gdl_module *gdl_quant_prepare(gdl_module *m, const gdl_qconfig *qc) {
    return gdl__quant_copy_root("gdl_quant_prepare", m, GDL__QC_PREPARE, qc);
}

GPUDL_API gdl_module *gdl_quant_prepare_qat(gdl_module *m, const gdl_qconfig *qc) {
    gdl_qconfig def = gdl_qconfig_default();
    gdl_module *r;
    if (!qc) { /* PyTorch's default QAT qconfig: moving-average observers */
        def.observer = GDL_QOBS_MOVING_AVERAGE;
        qc = &def;
    }
    r = gdl__quant_copy_root("gdl_quant_prepare_qat", m, GDL__QC_PREPARE_QAT, qc);
    if (r) gdl_module_train(r, gdl_module_is_training(m));
    return r;
}

/* sets the frozen flag of every observed layer under m; the count of them */
static int gdl__quant_freeze(gdl_module *m, int on) {
    int i, n = 0;
    if (gdl__is_qprep(m)) {
        ((gdl__qprep *)m->user)->frozen = on != 0;
        n++;
    }
    for (i = 0; i < m->nchild; i++) n += gdl__quant_freeze(m->child[i], on);
    return n;
}

GPUDL_API int gdl_quant_freeze_observers(gdl_module *m, int on) {
    if (!m) {
        gdl__null_arg("gdl_quant_freeze_observers", "module");
        return -1;
    }
    if (gdl__quant_freeze(m, on) == 0) {
        gdl__set_error("gdl_quant_freeze_observers: %s has no observed layer (gdl_quant_prepare_qat makes them)",
                       gdl__nn_label(m));
        return -1;
    }
    return 0;
}

/* 1 when m or a descendant passes test */
static int gdl__quant_any(const gdl_module *m, int (*test)(const gdl_module *)) {
    int i;
    if (!m) return 0;
    if (test(m)) return 1;
    for (i = 0; i < m->nchild; i++)
        if (gdl__quant_any(m->child[i], test)) return 1;
    return 0;
}

GPUDL_API gdl_module *gdl_quant_convert(gdl_module *m) {
    const char *op = "gdl_quant_convert";
    if (m && !gdl__quant_any(m, gdl__is_qprep)) {
        gdl__set_error("%s: %s has no observed layer: convert takes a model made by gdl_quant_prepare and "
                       "calibrated", op, gdl__nn_label(m));
        return NULL;
    }
    return gdl__quant_copy_root(op, m, GDL__QC_CONVERT, NULL);
}

GPUDL_API int64_t gdl_quant_calibrate(gdl_module *m, gdl_loader *l, int64_t max_batches) {
    const char *op = "gdl_quant_calibrate";
    gdl_tensor *x, *y;
    int64_t n = 0;
    int was_training, grad, rc = 0;
    if (!m || !l) {
        gdl__null_arg(op, !m ? "module" : "loader");
        return -1;
    }
    if (!gdl__quant_any(m, gdl__is_qprep)) {
        gdl__set_error("%s: %s has no observed layer: calibrate a model made by gdl_quant_prepare", op,
                       gdl__nn_label(m));
        return -1;
    }
    was_training = gdl_module_is_training(m);
    gdl_module_train(m, 0);
    grad = gdl_set_grad_enabled(0);
    while ((max_batches <= 0 || n < max_batches) && (rc = gdl_loader_next(l, &x, &y)) == 1) {
        gdl_arena_reset();
        if (!gdl_forward(m, x)) {
            rc = -1;
            break;
        }
        n++;
    }
    gdl_set_grad_enabled(grad);
    gdl_module_train(m, was_training);
    return rc < 0 ? -1 : n;
}

GPUDL_API int gdl_module_is_quantized(const gdl_module *m) { return gdl__quant_any(m, gdl__is_qlayer); }

