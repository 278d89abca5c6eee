/* ---------------------------------------------------------------------------
   src/api/nn.h (attention)   nn.MultiheadAttention, on gdl_scaled_dot_product_attention.
   ------------------------------------------------------------------------- */

/* nn.MultiheadAttention(embed_dim, num_heads, dropout, bias, batch_first) with PyTorch's parameter names and
   layouts, so state dicts load both ways: in_proj_weight [3E, E] (xavier-uniform), in_proj_bias [3E] (0),
   out_proj.weight [E, E] (U(+-1/sqrt(E))), out_proj.bias [E] (0); embed_dim a multiple of num_heads, the
   same for query, key and value (kdim = vdim = embed_dim). dropout drops attention weights in training
   mode. gdl_forward(m, x) is self-attention without masks. */
GPUDL_API gdl_module *gdl_nn_multihead_attention(int64_t embed_dim, int num_heads, double dropout, int bias,
                                                 int batch_first);
/* nn.MultiheadAttention's keyword arguments under PyTorch's names; start from gdl_mha_defaults(). */
typedef struct gdl_mha_opts {
    double dropout;  /* default 0; in [0,1]: on the attention weights, in training mode */
    int bias;        /* default 1: in_proj_bias and out_proj.bias */
    int batch_first; /* default 0: [L, N, E]; 1: [N, L, E] */
    int64_t kdim;    /* default 0: embed_dim; key's width. Other than embed_dim (or vdim's): q_proj_weight [E, E], */
    int64_t vdim;    /* k_proj_weight [E, kdim], v_proj_weight [E, vdim] (each xavier-uniform) replace in_proj_weight */
} gdl_mha_opts;
/* dropout 0, bias 1, batch_first 0 (PyTorch's). */
GPUDL_API gdl_mha_opts gdl_mha_defaults(void);
/* nn.MultiheadAttention(embed_dim, num_heads, **o); o NULL means defaults. NULL + error. */
GPUDL_API gdl_module *gdl_nn_multihead_attention_ex(int64_t embed_dim, int num_heads, const gdl_mha_opts *o);
/* The attention output for query [N, L, E], key and value [N, S, E] ([L, N, E] and [S, N, E] unless
   batch_first); key_padding_mask [N, S] and attn_mask [L, S] or [N*num_heads, L, S] may be NULL, each u8
   (non-zero: the key is LEFT OUT, PyTorch's bool convention for this module, the opposite of
   gdl_scaled_dot_product_attention's) or additive, of the query's dtype. need_weights=False: only the
   output. The masks become one additive mask and the attention runs the fused kernels (the unfused
   composition with dropout in training mode). */
GPUDL_API gdl_tensor *gdl_mha_forward(gdl_module *m, gdl_tensor *query, gdl_tensor *key, gdl_tensor *value,
                                      gdl_tensor *key_padding_mask, gdl_tensor *attn_mask);


/* nn.MultiheadAttention.forward's keyword arguments beyond the masks; start from a zeroed struct (or pass NULL):
   need_weights 0 (PyTorch's default is True: ask for it here). */
typedef struct gdl_mha_args {
    gdl_tensor *key_padding_mask; /* [N, S] ([S] unbatched); as gdl_mha_forward's */
    gdl_tensor *attn_mask;        /* [L, S] or [N*num_heads, L, S]; as gdl_mha_forward's */
    int need_weights;             /* 1: *attn_weights gets the attention weights (the unfused path runs) */
    int average_attn_weights;     /* with need_weights: 1: [N, L, S], the mean over heads; 0: [N, num_heads, L, S] */
    int is_causal;                /* with attn_mask NULL: keys after each query left out; with one: a hint only */
} gdl_mha_args;
/* nn.MultiheadAttention.forward(query, key, value, **a) -> the output; *attn_weights (may be NULL when need_weights is 0)
   gets the weights after dropout, as PyTorch returns them (without batch dim for unbatched input), or NULL. query
   [N, L, E] (batch_first; [L, N, E] otherwise; [L, E] unbatched), key [N, S, kdim], value [N, S, vdim]. A query row
   with every key masked gets weights 0 and output out_proj's bias (PyTorch's weights path gives NaN there). NULL +
   error. */
GPUDL_API gdl_tensor *gdl_mha_forward_ex(gdl_module *m, gdl_tensor *query, gdl_tensor *key, gdl_tensor *value,
                                         const gdl_mha_args *a, gdl_tensor **attn_weights);
