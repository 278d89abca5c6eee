/* fashion_data.h — the data lines that chapters 4, 5 and 14's programs share,
   written once: a slice of Fashion-MNIST and a DataLoader over a dataset.
   Not part of gpudl: a helper of the tutorial's programs, included after
   gpudl.h. Chapter 4 explains each call; chapter 6 the loader's options. */
#ifndef TUTORIAL_FASHION_DATA_H
#define TUTORIAL_FASHION_DATA_H

/* torch.utils.data.Subset(FashionMNIST(root, train=train), range(start, start + count)):
   the training set (train 1) or the test set (0). The dir NULL searches $GPUDL_DATA,
   ./data, /usr/share/datasets/fashion-mnist. A subset is a copy, so the full set is
   freed here. NULL on error (gdl_last_error says why). */
static gdl_dataset *fashion_slice(int train, int64_t start, int64_t count) {
    gdl_dataset *all = gdl_dataset_fashion_mnist(NULL, train);
    gdl_dataset *part = all ? gdl_dataset_subset(all, start, count) : NULL;
    gdl_dataset_free(all);
    return part;
}

/* DataLoader(ds, batch_size=batch, shuffle=shuffle), its batches delivered to dev
   (ds must outlive it). NULL on error (gdl_last_error says why). */
static gdl_loader *fashion_loader(gdl_dataset *ds, int batch, int shuffle, gdl_device dev) {
    gdl_loader_opts lo = gdl_loader_defaults();
    lo.batch_size = batch;
    lo.shuffle = shuffle;
    lo.device = dev;
    return gdl_loader_new(ds, &lo);
}

#endif
