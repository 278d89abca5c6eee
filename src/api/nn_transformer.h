/* ---------------------------------------------------------------------------
   src/api/nn.h (transformer)   nn.TransformerEncoderLayer, nn.TransformerEncoder,
   positional embeddings (learned, sinusoidal) and weight tying.
   ------------------------------------------------------------------------- */

/* nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
   norm_first, bias) with PyTorch's semantics and state_dict names: self_attn (gdl_nn_multihead_attention:
   self_attn.in_proj_weight, self_attn.in_proj_bias, self_attn.out_proj.weight/bias), linear1 [ff, d], linear2
   [d, ff], norm1, norm2 (LayerNorm(d, eps), without bias when bias is 0), and the parameterless dropout,
   dropout1, dropout2. gelu 0: ReLU, 1: GELU (exact, erf). Post-norm (norm_first 0):
       x = norm1(x + dropout1(self_attn(x))); x = norm2(x + dropout2(linear2(dropout(act(linear1(x))))))
   pre-norm (norm_first 1):
       x = x + dropout1(self_attn(norm1(x))); x = x + dropout2(linear2(dropout(act(linear1(norm2(x))))))
   Input [N, T, d] with batch_first, else [T, N, d]. gdl_forward(m, x) runs it without masks.
   Outputs at padded positions are computed as PyTorch's training path does (its eval-mode fast path with
   nested tensors zeroes them instead). */
GPUDL_API gdl_module *gdl_nn_transformer_encoder_layer(int64_t d_model, int nhead, int64_t dim_feedforward,
                                                       double dropout, int gelu, double layer_norm_eps,
                                                       int batch_first, int norm_first, int bias);
/* nn.TransformerEncoderLayer's keyword arguments under PyTorch's names; start from
   gdl_transformer_encoder_layer_defaults(). */
typedef struct gdl_transformer_encoder_layer_opts {
    int64_t dim_feedforward; /* default 2048 */
    double dropout;          /* default 0.1; in [0,1] */
    gdl_act activation;      /* default GDL_ACT_RELU; or GDL_ACT_GELU (exact, erf: PyTorch's "gelu") */
    double layer_norm_eps;   /* default 1e-5; > 0 */
    int batch_first;         /* default 0: [T, N, d]; 1: [N, T, d] */
    int norm_first;          /* default 0: post-norm; 1: pre-norm */
    int bias;                /* default 1: the Linear and LayerNorm biases */
} gdl_transformer_encoder_layer_opts;
/* dim_feedforward 2048, dropout 0.1, ReLU, layer_norm_eps 1e-5, batch_first 0, norm_first 0, bias 1 (PyTorch's). */
GPUDL_API gdl_transformer_encoder_layer_opts gdl_transformer_encoder_layer_defaults(void);
/* nn.TransformerEncoderLayer(d_model, nhead, **o); o NULL means defaults. NULL + error (also for an activation
   other than GDL_ACT_RELU and GDL_ACT_GELU). */
GPUDL_API gdl_module *gdl_nn_transformer_encoder_layer_ex(int64_t d_model, int nhead,
                                                          const gdl_transformer_encoder_layer_opts *o);
/* nn.TransformerEncoder(encoder_layer, num_layers, norm): num_layers copies of encoder_layer (a
   gdl_nn_transformer_encoder_layer; the copies start with its values, as PyTorch's deepcopy) under
   layers.0. ... layers.<n-1>., then the optional final norm (any module, usually gdl_nn_layernorm(d)) under
   norm. Takes ownership of encoder_layer and norm, also on failure. */
GPUDL_API gdl_module *gdl_nn_transformer_encoder(gdl_module *encoder_layer, int num_layers, gdl_module *norm);
/* The forward of a layer or a stack with masks: src_mask [T, T] or [N*nhead, T, T] and src_key_padding_mask
   [N, T] may be NULL; each u8 (non-zero: the key is LEFT OUT, PyTorch's bool convention) or additive (f32).
   is_causal with src_mask NULL masks the keys after each query (PyTorch asks for the mask and takes is_causal
   as a hint; gdl makes the mask); with a src_mask given it is a hint only, as in PyTorch. */
GPUDL_API gdl_tensor *gdl_transformer_encoder_forward(gdl_module *m, gdl_tensor *src, gdl_tensor *src_mask,
                                                      gdl_tensor *src_key_padding_mask, int is_causal);

/* Learned positions (GPT's wpe): a module "PositionalEmbedding" whose parameter weight [max_len, d] ~ N(0,1) (an
   nn.Embedding's); forward adds weight[:T] to x [N, T, d]. T > max_len is an error. */
GPUDL_API gdl_module *gdl_nn_learned_positional_embedding(int64_t max_len, int64_t d_model);
/* The sinusoidal encoding of "Attention is all you need" (PyTorch's tutorial PositionalEncoding, batch-first): a
   module "PositionalEncoding" with a buffer pe [max_len, d] (not trained, saved in state dicts),
   pe[p, 2i] = sin(p / 10000^(2i/d)), pe[p, 2i+1] = cos(p / 10000^(2i/d)); forward is dropout(x + pe[:T]) for x
   [N, T, d]. T > max_len is an error. */
GPUDL_API gdl_module *gdl_nn_sinusoidal_positional_encoding(int64_t max_len, int64_t d_model, double dropout);

/* Weight tying (nanoGPT's lm_head.weight = wte.weight): parameter `name` of root (a dotted state_dict name)
   becomes the parameter `target`, the same tensor: its own tensor is freed, its module's forward uses target's,
   and one gradient accumulates both uses. The tied parameter is counted, listed (gdl_module_named_tensors,
   hence optimizers, gdl_module_num_params), moved and freed once, under target's name; gdl_module_tensor(root,
   name) still finds it. gdl_save_model writes it once, under target's name (as safetensors.torch.save_model
   keeps one of the shared names); gdl_load_model takes it from target's name or, where the file lacks that
   (PyTorch's save_model may keep the other), from name's; a file with both (torch's state_dict) loads too.
   Both must be parameters of root's tree with the same shape. 0 / -1. */
GPUDL_API int gdl_module_tie(gdl_module *root, const char *name, const char *target);
