/* ---------------------------------------------------------------------------
   src/nn/resnet.h — ResNet's BasicBlock (torchvision.models.resnet.BasicBlock), made
   of the built-in modules under torchvision's names, so a state_dict moves
   between the two: conv1, bn1, conv2, bn2 and, where the stride or the width
   changes, downsample (0: a 1x1 convolution, 1: its BatchNorm).
   ------------------------------------------------------------------------- */

/* relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), the children by position; a failing child's error
   is left as it is. bn1 and its ReLU run as one op where a Sequential would fuse them (gdl_nn_set_fusion). */
static gdl_tensor *gdl__basic_block_forward(gdl_module *m, gdl_tensor *x) {
    gdl_tensor *y = x, *sc = x;
    int i;
    for (i = 0; i < 4 && y; i++) {
        gdl_module *c = gdl_module_child_at(m, i);
        if (i == 1 && c->kind == GDL__M_BATCHNORM && gdl__nn_fuse_ok(c, y)) {
            y = gdl__nn_batchnorm_forward(c, y, 1);
            if (!y) gdl__nn_fwd_error(c);
            continue;
        }
        y = gdl_forward(c, y);
        if (y && i == 1) y = gdl_relu(y);
    }
    if (y && m->nchild > 4) sc = gdl_forward(gdl_module_child_at(m, 4), x);
    if (!y || !sc) return NULL;
    if (!gdl_same_shape(y, sc)) {
        gdl__set_error("gdl_forward: %s: the block's output %s and its shortcut's %s differ (input %s)",
                       gdl__nn_label(m), gdl_shape_str(y), gdl_shape_str(sc), gdl_shape_str(x));
        return NULL;
    }
    return gdl_relu(gdl_add(y, sc));
}

GPUDL_API gdl_module *gdl_nn_basic_block(int in_channels, int out_channels, int stride) {
    static const char op[] = "gdl_nn_basic_block";
    gdl_module *m, *down[2];
    int proj = stride != 1 || in_channels != out_channels;
    if (in_channels < 1 || out_channels < 1 || stride < 1) {
        gdl__set_error("%s: in_channels %d, out_channels %d and stride %d must be >= 1", op, in_channels, out_channels,
                       stride);
        return NULL;
    }
    if (!(m = gdl_nn_custom("BasicBlock", gdl__basic_block_forward, NULL, NULL))) return NULL;
    m->ia[GDL__BLOCK_IN] = in_channels, m->ia[GDL__BLOCK_OUT] = out_channels, m->ia[GDL__BLOCK_STRIDE] = stride;
    /* gdl_module_add_child and gdl_nn_sequential take each child, also on failure */
    if (gdl_module_add_child(m, "conv1", gdl_nn_conv2d(in_channels, out_channels, 3, stride, 1, 1, 1, 0)) < 0 ||
        gdl_module_add_child(m, "bn1", gdl_nn_batchnorm2d(out_channels)) < 0 ||
        gdl_module_add_child(m, "conv2", gdl_nn_conv2d(out_channels, out_channels, 3, 1, 1, 1, 1, 0)) < 0 ||
        gdl_module_add_child(m, "bn2", gdl_nn_batchnorm2d(out_channels)) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    if (proj) {
        down[0] = gdl_nn_conv2d(in_channels, out_channels, 1, stride, 0, 1, 1, 0);
        down[1] = gdl_nn_batchnorm2d(out_channels);
        if (gdl_module_add_child(m, "downsample", gdl_nn_sequential(2, down)) < 0) {
            gdl_module_free(m);
            return NULL;
        }
    }
    return m;
}
