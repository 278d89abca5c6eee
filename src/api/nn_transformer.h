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
    gdl_act activation;      /* default GDL_ACT_RELU; GDL_ACT_GELU (erf: PyTorch's "gelu"), GDL_ACT_GELU_TANH */
    double layer_norm_eps;   /* default 1e-5; > 0 */
    int batch_first;         /* default 0: [T, N, d]; 1: [N, T, d] */
    int norm_first;          /* default 0: post-norm; 1: pre-norm */
    int bias;                /* default 1: the Linear and LayerNorm biases */
    const char *activation_name;                 /* default NULL; "relu", "gelu", "gelu_tanh" (see gdl_unary_fn) */
    gdl_tensor *(*activation_fn)(gdl_tensor *x); /* default NULL; a callable: any unary op (see gdl_unary_fn) */
} gdl_transformer_encoder_layer_opts;
/* dim_feedforward 2048, dropout 0.1, ReLU, layer_norm_eps 1e-5, batch_first 0, norm_first 0, bias 1 (PyTorch's). */
GPUDL_API gdl_transformer_encoder_layer_opts gdl_transformer_encoder_layer_defaults(void);
/* nn.TransformerEncoderLayer(d_model, nhead, **o); o NULL means defaults. NULL + error (also for an unknown
   activation). */
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

/* ---- nn.TransformerDecoderLayer, nn.TransformerDecoder, nn.Transformer ---- */

/* The activation of a Transformer layer's feed-forward block, as PyTorch's `activation` takes a name or a
   callable: activation_fn (any unary op of gdl: gdl_relu, gdl_tanh, gdl_sigmoid, or a function of yours),
   when set, wins; else activation_name, when set: "relu", "gelu" (erf) or "gelu_tanh" (PyTorch's
   F.gelu(approximate="tanh")); else the enum activation (GDL_ACT_RELU, GDL_ACT_GELU, GDL_ACT_GELU_TANH). These
   three fields close gdl_transformer_encoder_layer_opts too. */
typedef gdl_tensor *(*gdl_unary_fn)(gdl_tensor *x);

/* nn.TransformerDecoderLayer's keyword arguments under PyTorch's names; start from
   gdl_transformer_decoder_layer_defaults(). */
typedef struct gdl_transformer_decoder_layer_opts {
    int64_t dim_feedforward;     /* default 2048 */
    double dropout;              /* default 0.1; in [0,1] */
    gdl_act activation;          /* default GDL_ACT_RELU */
    double layer_norm_eps;       /* default 1e-5; > 0 */
    int batch_first;             /* default 0: [T, N, d]; 1: [N, T, d] */
    int norm_first;              /* default 0: post-norm; 1: pre-norm */
    int bias;                    /* default 1: the Linear and LayerNorm biases */
    const char *activation_name; /* default NULL; "relu", "gelu", "gelu_tanh" */
    gdl_unary_fn activation_fn;  /* default NULL; a callable */
} gdl_transformer_decoder_layer_opts;
/* dim_feedforward 2048, dropout 0.1, ReLU, layer_norm_eps 1e-5, batch_first 0, norm_first 0, bias 1 (PyTorch's). */
GPUDL_API gdl_transformer_decoder_layer_opts gdl_transformer_decoder_layer_defaults(void);
/* nn.TransformerDecoderLayer(d_model, nhead, **o); o NULL means defaults. State dict names PyTorch's: self_attn.*,
   multihead_attn.* (both MultiheadAttention(d_model, nhead, dropout, bias)), linear1 [ff, d], linear2 [d, ff], norm1,
   norm2, norm3; dropout, dropout1..3 hold nothing. Post-norm (norm_first 0):
       x = norm1(x + dropout1(self_attn(x, x, x)))
       x = norm2(x + dropout2(multihead_attn(x, mem, mem)))
       x = norm3(x + dropout3(linear2(dropout(act(linear1(x))))))
   pre-norm: x = x + dropout1(self_attn(norm1(x))); x = x + dropout2(multihead_attn(norm2(x), mem)); x = x + ff(norm3(x)).
   NULL + error. */
GPUDL_API gdl_module *gdl_transformer_decoder_layer(int64_t d_model, int nhead,
                                                    const gdl_transformer_decoder_layer_opts *o);
/* nn.TransformerDecoder(decoder_layer, num_layers, norm): num_layers copies of decoder_layer (starting with its values)
   under layers.0 ... layers.<n-1>, then the optional final norm (usually gdl_nn_layernorm(d)) under norm. Takes
   ownership of decoder_layer and norm, also on failure. */
GPUDL_API gdl_module *gdl_transformer_decoder(gdl_module *decoder_layer, int num_layers, gdl_module *norm);

/* nn.Transformer's keyword arguments under PyTorch's names; start from gdl_transformer_defaults(). */
typedef struct gdl_transformer_opts {
    int64_t d_model;             /* default 512 */
    int nhead;                   /* default 8 */
    int num_encoder_layers;      /* default 6 */
    int num_decoder_layers;      /* default 6 */
    int64_t dim_feedforward;     /* default 2048 */
    double dropout;              /* default 0.1 */
    gdl_act activation;          /* default GDL_ACT_RELU */
    double layer_norm_eps;       /* default 1e-5 */
    int batch_first;             /* default 0 */
    int norm_first;              /* default 0 */
    int bias;                    /* default 1 */
    const char *activation_name; /* default NULL; as the layers' */
    gdl_unary_fn activation_fn;  /* default NULL; as the layers' */
} gdl_transformer_opts;
/* d_model 512, nhead 8, 6 + 6 layers, dim_feedforward 2048, dropout 0.1, ReLU, eps 1e-5, batch_first 0, norm_first 0,
   bias 1 (PyTorch's). */
GPUDL_API gdl_transformer_opts gdl_transformer_defaults(void);
/* nn.Transformer(**o); o NULL means defaults: encoder (TransformerEncoder with a final LayerNorm, encoder.norm) and
   decoder (TransformerDecoder with decoder.norm), every parameter of two or more dims re-drawn xavier-uniform, as
   PyTorch's _reset_parameters. NULL + error. */
GPUDL_API gdl_module *gdl_transformer(const gdl_transformer_opts *o);

/* The masks of nn.Transformer's forward under PyTorch's names; all may be NULL / 0 (a zeroed struct, or a NULL pointer,
   is no mask). Each mask u8 (non-zero: LEFT OUT, PyTorch's bool convention) or additive (the input's dtype).
   src_mask [S, S] or [N*nhead, S, S]; tgt_mask [T, T] or [N*nhead, T, T]; memory_mask [T, S] or [N*nhead, T, S];
   *_key_padding_mask [N, S] / [N, T] / [N, S] ([S] / [T] / [S] for unbatched input). *_is_causal with its mask NULL
   makes the causal mask (keys after the query left out; memory: the top-left [T, S] triangle); with a mask given it
   is a hint only, as in PyTorch. */
typedef struct gdl_transformer_masks {
    gdl_tensor *src_mask, *tgt_mask, *memory_mask;
    gdl_tensor *src_key_padding_mask, *tgt_key_padding_mask, *memory_key_padding_mask;
    int src_is_causal, tgt_is_causal, memory_is_causal;
} gdl_transformer_masks;
/* nn.Transformer.forward(src, tgt, ...): decode(tgt, encode(src)). src [N, S, d], tgt [N, T, d] with batch_first
   ([S, N, d], [T, N, d] without; [S, d], [T, d] unbatched) -> [N, T, d] (tgt's layout). */
GPUDL_API gdl_tensor *gdl_transformer_forward(gdl_module *m, gdl_tensor *src, gdl_tensor *tgt,
                                              const gdl_transformer_masks *masks);
/* m's encoder with its final norm on src (src_mask, src_key_padding_mask, src_is_causal): the memory. m: a
   gdl_transformer, or a TransformerEncoder / TransformerEncoderLayer (then the same as gdl_transformer_encoder_forward). */
GPUDL_API gdl_tensor *gdl_transformer_encode(gdl_module *m, gdl_tensor *src, const gdl_transformer_masks *masks);
/* m's decoder with its final norm on tgt over memory (tgt_*, memory_* masks): reuse one memory for greedy or beam
   decoding. m: a gdl_transformer, a TransformerDecoder or a TransformerDecoderLayer. */
GPUDL_API gdl_tensor *gdl_transformer_decode(gdl_module *m, gdl_tensor *tgt, gdl_tensor *memory,
                                             const gdl_transformer_masks *masks);
/* nn.Transformer.generate_square_subsequent_mask(T): [T, T] f32 on the CPU, -inf above the diagonal and 0 elsewhere
   (query i sees keys 0..i), PyTorch's additive form; gdl_to it for another device, or pass tgt_is_causal instead.
   NULL + error for T < 1. */
GPUDL_API gdl_tensor *gdl_generate_square_subsequent_mask(int64_t T);
