/* gpudl.h — train neural networks in C on the CPU and on NVIDIA GPUs, the way
   a PyTorch user does. Single header, MIT licensed (the notice is at the end).

   ===========================================================================
   MANUAL
   ===========================================================================

   Build
   -----
   In exactly ONE .c file, after any other include of gpudl.h:

       #define GPUDL_IMPLEMENTATION
       #include "gpudl.h"

       cc -O2 -march=native my_net.c -lm -pthread -o my_net            (CPU)
       nvcc -O3 -arch=sm_90 -DGPUDL_CUDA my_net.c gpudl_cuda.cu \
            -lcublas -lcublasLt -lnccl -o my_net                                (CUDA)
       x86_64-w64-mingw32-gcc -O2 my_net.c -o my_net.exe            (Windows, CPU; no MPI)
   Add -DGPUDL_ZLIB ... -lz to read gzipped IDX files (Fashion-MNIST).
   README.md and examples/ show the module / optimizer / DataLoader level
   (gdl_nn_*, gdl_adam_new, gdl_loader_new, gdl_fit); the sample below is
   the tensor level underneath.

   A training step, as in PyTorch
   ------------------------------
       gdl_tensor *W = gdl_randn(GDL_DIMS(10, 784), gdl_cpu());
       gdl_mul_scalar_(W, 0.01); gdl_set_requires_grad(W, 1);
       for (int step = 0; step < 100; step++) {
           gdl_arena_reset();                 // temporaries of the last step go
           gdl_zero_grad_tensor(W);
           gdl_tensor *logits = gdl_linear(x, W, NULL);
           gdl_tensor *loss   = gdl_cross_entropy(logits, y);
           if (!loss || gdl_backward(loss) < 0) {
               fprintf(stderr, "%s\n", gdl_last_error()); break;
           }
           gdl_sgd_update_(W, 0.1);           // or an optimizer (gdl_step)
       }

   Memory model
   ------------
   * Factory functions (gdl_empty, gdl_zeros, gdl_randn, gdl_from_array, ...)
     return PERSISTENT tensors: they live until gdl_free().
   * Every op result (gdl_add, gdl_matmul, ...) is a TEMPORARY allocated in
     the per-step arena. gdl_arena_reset() releases all temporaries at once
     and keeps the memory, so a steady-state step allocates nothing and gets
     the same addresses as the step before. gdl_free() on a temporary is a
     no-op. Keep a temporary across steps with gdl_clone() (persistent copy).
   * Gradients of persistent tensors are persistent; gradients of
     temporaries are temporaries.
   * An optimizer moves its parameters, their gradients and its state into
     one flat buffer per device (llm.c's malloc_and_point_parameters): the
     gdl_tensor pointers stay the same, their data become views of it
     (src/api/nn.h, "The flat parameter buffer").
   * Temporaries, the tape and the arena are per thread ("Threads" below).

   Threads
   -------
   Several threads may call ops at once (tests/test_threads.c, also under
   ThreadSanitizer). Each thread has its own: step arena and temporaries,
   autograd tape, grad mode (gdl_set_grad_enabled), anomaly mode, autocast
   region, grad-ready hook, graph capture, gdl_module_summary's recording,
   error message (gdl_last_error), generator and model-FLOP count
   (gdl_flops_count). Shared by all: the CPU
   thread pool and its size (gdl_set_num_threads), the memory counters
   (atomic), the profiler, the fusion switch, the devices.
   * A temporary belongs to the thread that made it: gdl_arena_reset ends
     that thread's temporaries only, and another thread must not use them
     (gdl_clone makes a persistent copy that any thread may read).
   * Training: a model (its modules, optimizer, GradScaler, EMA, scheduler,
     gdl_fit) is trained by one thread at a time. Two threads may each
     train its own model at once; each gets the bits it would get alone.
     Training one model from two threads at once is not supported, and
     neither is a forward in training mode on a module another thread uses
     (batch norm writes its running statistics). Of that misuse, gdl_step
     catches only an overlap: a step of an optimizer while another thread
     is in a step of it fails ("... is in a step on another thread").
   * Inference: a module in eval mode (gdl_module_train(m, 0)) run with grad
     off may be shared by any number of threads at once: such a forward
     only reads the parameters and buffers.
   * Persistent tensors: any number of threads may read one; one that
     writes it (an optimizer step, an in-place op, a copy into it, freeing
     it) must be the only thread using it: the caller synchronises.
   * A DataLoader (and a dataset it reads) belongs to the thread that
     calls gdl_loader_next; its worker threads are its own.
   * The generator: gdl_manual_seed(s) sets the calling thread's generator
     to (s, 0) and makes s the process seed; a thread that has not seeded
     (or called gdl_rng_set_state) starts from (process seed, 0) at its first
     draw, so two unseeded threads draw the same numbers: seed each thread
     for streams of its own. A model built and trained on a thread after
     gdl_manual_seed(s) gets the bits it gets alone after gdl_manual_seed(s).
   * The CPU pool runs one parallel job at a time; a kernel that finds it
     held by another thread runs on its own thread instead, in the same bits
     (results never depend on the thread count). Two threads at once thus
     share the pool rather than each getting gdl_get_num_threads() threads.
   * gdl_thread_cleanup() gives back the calling thread's arenas: call it
     before a thread that ran ops ends, or its arena memory stays held
     until exit. gdl_shutdown (the caches, the profile: process-wide) is
     for one thread, when no other thread runs ops.
   * The profiler (gdl_profile_begin ...) is process-wide: profile while
     one thread runs ops.
   * GPUs: the same rules are meant to hold, but only the CPU backend is
     tested with several threads; drive a GPU from one thread.

   Ownership
   ---------
   Who frees what (every *_free is NULL-safe; tests/test_ownership.c does
   each of these under AddressSanitizer):
   * Tensors: factories (gdl_zeros, gdl_randn, gdl_from_array, gdl_clone,
     ...) return persistent tensors, the caller's until gdl_free. Op results
     are temporaries of the arena: never freed one by one (gdl_free on one is
     a no-op), all gone at gdl_arena_reset (read them before, or keep one
     with gdl_clone). A parameter's .grad belongs to the parameter.
     gdl_free refuses a tensor the library owns (parameter, buffer, .grad,
     optimizer state, batch): nothing freed, the error names its owner.
   * Modules: a constructor returns a root the caller frees with
     gdl_module_free, which frees its children and every parameter and
     buffer. Containers take their children: gdl_nn_sequential,
     gdl_nn_residual, gdl_module_add_child, gdl_nn_sequential_add,
     gdl_nn_transformer_encoder and gdl_transformer_decoder (the layer,
     norm), also when they fail, so constructors nest without leaks; a
     child is never freed on its own (gdl_module_free refuses it). gdl_module_add_param / add_buffer take the
     tensor, also on failure. gdl_module_tie frees the tied parameter's own
     tensor. gdl_quantize_dynamic, gdl_quant_prepare(_qat) and
     gdl_quant_convert return new roots and leave their input to the caller.
   * Optimizers keep pointers to their parameters, which must outlive the
     optimizer's use; gdl_optim_free frees the state, not the parameters.
     Free in this order: schedulers, EMA and GradScaler (each detaches
     itself; one freed after its optimizer is detached already), DDP
     (gdl_ddp_free leaves the module to the caller), the optimizer, then the
     model.
   * Data: a dataset (gdl_dataset_*) is the caller's, freed with
     gdl_dataset_free after its loaders: a loader does not own its dataset,
     which must outlive it. A loader owns its batches (gdl_loader_next's *x,
     *y, gdl_loader_lengths): persistent, so they survive gdl_arena_reset,
     valid until the next gdl_loader_next, freed by gdl_loader_free; never
     gdl_free them. gdl_idx_load's and gdl_st_read's structs are released
     with gdl_idx_free / gdl_st_free (gdl_cifar10_load's arrays with free());
     vocabularies with gdl_vocab_free, text lists with gdl_text_list_free,
     gdl_text_join's string with gdl_text_free.
   * Strings returned by the library (gdl_last_error, gdl_version,
     gdl_shape_str, gdl_device_str, gdl_vocab_token, the names of
     gdl_optim_state) are the library's: never freed; gdl_shape_str's live
     in a small thread-local ring.
   * gdl_shutdown frees the arenas and the backends' caches: call it last.

   Dtypes
   ------
   f32, bf16 and f16 tensors can all be computed on; i32 holds labels and
   indices, u8 raw pixels. As in PyTorch:
   * an op's result has its inputs' dtype: relu of bf16 is bf16; a binary
     op on two dtypes promotes to the wider (f32 + bf16 -> f32, and
     f16 + bf16 -> f32, as neither holds the other);
   * the arithmetic is f32 whatever the storage ("opmath"): GEMMs accumulate
     in f32, reductions, softmax, losses and the norms' statistics are f32,
     and the result is rounded to bf16/f16 once;
   * a tensor's gradient has its dtype (a bf16 weight gets a bf16 .grad);
   * gdl_to_dtype is differentiable between float dtypes (PyTorch's .to).
   How: these ops run natively in the low dtype, keeping only bf16/f16
   tensors (activations, saved inputs, gradients) in the arena:
   * matmul and linear, when their inputs share one low dtype (the backend
     entry gemm given the dtype: cublasGemmEx with f32 accumulation on CUDA);
   * conv2d (x, weight and bias of one low dtype; any stride, padding,
     dilation, groups): columns in the low dtype, the GEMMs in the low dtype,
     the bias folded into the GEMM so the output rounds once; backward: the
     weight and bias gradients through the GEMM (the batch summed in f32
     and rounded once; on a GPU once per chunk of samples of up to 64 MiB
     of f32 products), the input gradient's column sums (col2im) in f32
     with one rounding
     into the gradient;
   * scaled_dot_product_attention's fused path (q, k, v and an additive
     mask of one dtype; f32 arithmetic, out and the gradients rounded once);
   * max_pool2d (exact), avg_pool2d and global_avg_pool2d (sums in f32);
   * batch_norm with a low-precision input, as cuDNN under autocast: x, y and
     the input gradient in the low dtype; the statistics, running statistics
     and affine parameters (and their gradients) f32 -- low-precision weight
     and bias get an f32 copy inside the op (a cast);
   * the elementwise ops -- relu, leaky_relu, sigmoid, tanh, gelu (both),
     exp, log, add_scalar, mul_scalar (and gdl_mul_scalar_), pow_scalar,
     add, sub, mul, div with broadcasting, dropout, concat -- forward and
     backward (entries unary, unary_backward, binary, sum_to, dropout,
     dropout_backward, copy2d, given the dtype): each element is loaded
     to f32, computed with the f32 kernel's formula and rounded once on
     store, so the forward result is bit for bit the cast path's below,
     with no f32 temporaries (half of f32's memory); a gradient is summed
     in f32 and added to the low-precision .grad with one rounding (the
     f32 gradient rounded, when the .grad starts at zero). The backward of
     sigmoid, tanh and exp reads the rounded output, as PyTorch's does.
   On the CPU, which has no bf16/f16 arithmetic, the GEMM, conv, pooling
   and batch_norm kernels widen their operands to f32 in malloc'd memory
   for the duration of the call (not the arena) and round the result once.
   Every other op given bf16 or f16 runs its f32 kernel on f32 copies of
   the low-precision inputs and rounds its output once (one place in
   src/ops/: gdl__lowp_in/out, with differentiable casts, so autograd
   needs nothing else): PyTorch's numerics, but the f32 copies stay in the
   arena until the step's reset. Mixed dtypes (f16 with bf16, f32 with a
   low one) take that path too. BatchNorm's running statistics must be f32
   (the output has the input's dtype), as under torch.autocast. Optimizers
   take f32 parameters, or bf16/f16 ones that they keep f32 master weights
   for ("Master weights" below); gdl_sgd_update_ takes f32 ones.

   Mixed precision (autocast)
   --------------------------
   torch.autocast, as a region on the calling thread:
       gdl_arena_reset();                 // first: the region's casts are
       gdl_zero_grad(opt);                //   this step's temporaries
       gdl_autocast_begin(GDL_BF16);      // with torch.autocast("cuda", torch.bfloat16):
       loss = gdl_cross_entropy(gdl_forward(model, x), y);
       gdl_autocast_end();
       gdl_backward(loss);                // backward and the step outside it
       gdl_step(opt);
   or let gdl_fit do it: gdl_fit_opts.autocast = GDL_BF16 (or GDL_F16; 0 =
   GDL_F32 = off) runs each batch's forward and loss in a region, and its
   validation pass too; gdl_evaluate called inside a region runs in it.
   Inside a region each op follows its autocast class (GDL_OP_LIST;
   gdl_op_autocast_class), PyTorch's CUDA lists:
   * LOW (matmul, linear, conv2d, scaled_dot_product_attention): float inputs are cast to the region's
     dtype and the op runs in it natively, accumulating in f32 (the
     backend's gemm in that dtype); the result is bf16/f16;
   * F32 (softmax, log_softmax, cross_entropy, nll_loss, layer_norm,
     mse_loss, bce_with_logits, sum, cumsum, exp, log, rsqrt, pow_scalar,
     pow): inputs cast to f32, result f32 -- so a loss is f32;
   * PROMOTE (the rest: relu, add, pooling, batch_norm, dropout, concat ...):
     as outside a region, in the inputs' widest dtype (Dtypes above); the
     poolings and batch_norm of a low-precision activation run natively
     (batch_norm with the module's f32 parameters, as cuDNN).
   Parameters stay f32; what changes is the dtype of activations (a LOW
   op's output, and what the next op saves for backward). Casts are
   differentiable, so a parameter's gradient arrives in f32. The cast of a
   parameter (a persistent leaf that requires grad) to the low dtype is
   cached: a weight used by several ops in a region is cast once and its
   gradient flows back through one cast (gdl_autocast_stats counts casts
   and cache hits). The cache rule: a cached cast is an arena temporary, so
   it is valid until the next gdl_arena_reset or until the outermost
   gdl_autocast_end, whichever comes first; a gdl_backward also drops it
   (an optimizer step usually follows, and would leave the casts stale),
   and a cast made in no-grad mode is not reused with gradients on.
   Put the step's gdl_arena_reset before gdl_autocast_begin (as above and
   as gdl_fit does); a reset inside a region is allowed (the cache simply
   starts again). Weights changed in place inside a region without a
   backward (gdl_sgd_update_ on an outside gradient, gdl_copy_) are not
   noticed: end the region or reset first.
   Regions nest (gdl_autocast_end restores the enclosing region's dtype;
   the cache lives until the outermost end, as torch.autocast's) and are
   per host thread: another thread's ops are not affected.
   f16's narrow range can flush small gradients to zero: PyTorch pairs it
   with a GradScaler (loss scaling); bf16 has f32's range and needs none.
   Outside a region the cost is one thread-local compare per op. Natively
   in bf16/f16 (Dtypes above): matmul, linear, conv2d, the poolings,
   batch_norm and the elementwise ops (activations, add/sub/mul/div, the
   scalar ops, dropout, concat); an op of class PROMOTE on low-precision
   activations stays in their dtype without a cast. So an MLP's or a CNN's
   activations and saved tensors are bf16/f16 under autocast (memory per
   step against f32: bench/RESULTS.md, bench/amp.c); the few ops without
   native kernels (embedding, layer_norm outside autocast ...) compute on
   f32 copies.
   On the CPU, a lighter way with f32 tensors throughout:
   gdl_cpu_set_fp32_precision("bf16") (PyTorch's torch.backends.mkldnn
   fp32_precision) lets the GEMMs and the stride-1 convolutions round their
   operands to bf16 and sum in f32 on AMX's tile unit, or with AVX512-BF16's
   dot products, where the CPU has one (it returns -1 elsewhere);
   the training examples' --fp32-precision bf16 (speedrun, char_gpt, ...).

   Master weights
   --------------
   llm.c's way, for memory: the model's parameters and gradients in bf16
   (or f16), the optimizer keeping an f32 master copy of each parameter and
   its state in f32:
       gdl_optim_add_module(opt, model, 0);
       gdl_optim_set_master_weights(opt, GDL_BF16);   // GDL_F32 turns it off
   At once every parameter of opt becomes a bf16 tensor (the same
   gdl_tensor pointers, now views of bf16 slots of the flat buffer, rounded
   to nearest even from the f32 values, which become the masters); backward
   gives them bf16 gradients (bf16 slots: zero_grad stays one memset). A
   step reads the bf16 gradient, updates the f32 master and the f32 state by
   the same formulas as for f32 parameters (bit for bit what the f32
   optimizer would do with that gradient) and writes the parameter as the
   master rounded to nearest even: still one launch per device, lr and step
   counts read from the buffer (so CUDA graphs and gdl_fit's cuda_graph
   replay it). gdl_optim_master_weight(opt, i) is parameter i's master.
   The buffer: bf16 parameters, bf16 gradients, f32 masters, f32 state (so
   parameters + gradients take half the bytes of f32's; with Adam the whole
   buffer is the same 16 bytes per parameter as with f32 parameters, and an
   autocast forward no longer makes a bf16 copy of each weight per step).
   Under gdl_autocast_begin(GDL_BF16) the LOW ops take the weights as they
   are: no casts of parameters (gdl_autocast_stats); where each weight
   reaches its LOW ops through one cast (an MLP) training is the same
   computation as the f32 parameters' under autocast, whose gradients
   arrive through the bf16 casts anyway (bit for bit on the CPU; a GPU's
   cuBLAS may choose other kernels for the differently placed operands).
   Outside autocast the model computes in bf16 given bf16 inputs (an f32
   input promotes to f32).
   GDL_F32 makes the parameters f32 again with their masters' values (state
   and step counts kept); f16 works the same way (GDL_F16). Consequences:
   * checkpoints (gdl_checkpoint_save, gdl_fit's) save each master under its
     parameter's name, as f32, so resuming into a master-weights optimizer
     is bit for bit (the parameters are rounded from the masters loaded),
     and loading into a plain f32 model and optimizer gives it the masters
     as its parameters (and the same state); an f32 checkpoint loads into a
     master-weights run the same way. gdl_save_model / gdl_load_model of a
     bf16 model write the bf16 values widened to f32 and round them back
     (the masters are not touched: load weights through gdl_checkpoint_load
     with the optimizer, or before gdl_optim_set_master_weights). A write to
     a bf16 parameter by hand is overwritten by the next step's rounding of
     its master: write the master (gdl_optim_master_weight) instead;
   * gradient clipping (gdl_clip_grad_norm, gdl_optim_clip_grad_norm, gdl_fit's
     clip_grad_norm), the GradScaler (f16 training wants f32 gradients to
     unscale) and DDP (it all-reduces f32 gradients) refuse bf16/f16
     gradients with an error naming the dtype;
   * set_lr, set_momentum, the schedulers and gdl_optim_add_params work as
     before; an f32 parameter added later is converted at the optimizer's
     next use (a parameter of the master dtype is accepted too, and widened
     into its master); gdl_module_to moves masters with their parameters;
   * gdl_optim_free lets go of the masters: the parameters stay bf16 (call
     gdl_optim_set_master_weights(opt, GDL_F32) first to get f32 back).

   GradScaler
   ----------
   PyTorch's torch.amp.GradScaler, for f16 training whose small gradients
   would underflow: the loss is multiplied by a large scale before
   backward, the gradients divided by it before the step, and a step whose
   gradients overflowed (inf/NaN) is skipped while the scale backs off.
       gdl_grad_scaler *sc = gdl_grad_scaler_new(NULL);  // 2^16, x2, x0.5, 2000
       for each batch {
           gdl_arena_reset(); gdl_zero_grad(opt);
           loss = gdl_cross_entropy(gdl_forward(model, x), y);
           gdl_backward(gdl_grad_scaler_scale(sc, loss));
           gdl_grad_scaler_unscale(sc, opt);          // optional: before clipping
           gdl_optim_clip_grad_norm(opt, 1.0);
           gdl_grad_scaler_step(sc, opt);             // skipped on inf/NaN
           gdl_grad_scaler_update(sc);
       }
       gdl_grad_scaler_free(sc);
   or gdl_fit_opts.scaler = sc. As PyTorch: the scale is made on the device
   of the first loss scaled; unscale multiplies every gradient by
   (float)(1/(double)scale) and sets found_inf when one was inf or NaN
   before; once per optimizer between updates (a second call is an error,
   as is unscale after step); step unscales when that was not done; update
   multiplies the scale by backoff_factor after an overflow (the growth
   tracker restarts), else counts a clean step and after growth_interval of
   them multiplies it by growth_factor (kept if that is not finite).
   Everything stays on the device, nothing is waited for, so a step with the
   scaler is captured and replayed as any other (src/api/graph.h):
   * the scale, growth tracker and found_inf are device scalars; scale is a
     differentiable gdl_mul by the scale tensor;
   * unscale is one kernel over the optimizer's flat gradient region (the
     padding between slots is zero; a run of slots is cut where a parameter
     has no gradient, since its slot may hold an old one);
   * the optimizer's flat block holds a skip flag that unscale sets with
     found_inf and update clears; the SGD/Adam kernels read it and return
     at once, so a skipped step changes no parameter, state or step count
     (gdl_optim_get_step still counts the call);
   * update is a one-thread kernel (PyTorch's _amp_update_scale_).
   gdl_grad_scaler_get_scale and _get_growth_tracker read the device (a
   wait). The scaler's state goes into training checkpoints as metadata
   "scaler.scale", "scaler.growth_tracker", "scaler.growth_factor",
   "scaler.backoff_factor" and "scaler.growth_interval" (PyTorch's
   state_dict; a load restores all five) when it is attached to the
   optimizer saved (gdl_optim_set_grad_scaler; unscale and gdl_fit attach
   it); a checkpoint without them loads and leaves the scaler as it is.
   One scaler per optimizer; parameters on several devices with one scaler
   are refused ("one GradScaler over several devices is not supported").
   With a power-of-two scale and no overflow, scaled training gives the
   unscaled weights bit for bit. enabled = 0 makes every call a no-op
   (step is gdl_step), as GradScaler(enabled=False).

   Fused ops
   ---------
   gdl_linear_act(x, W, b, act) and gdl_conv2d_act(...) are act(linear) and
   act(conv2d) as one op (act: GDL_ACT_NONE, _RELU, _GELU_TANH, _GELU).
   On CUDA the linear is one cublasLtMatmul with a RELU_BIAS / GELU_AUX_BIAS
   / BIAS epilogue (GELU's input kept as the aux output for backward; erf
   GELU, a bias not 16-byte aligned, or GELU with out_features not a
   multiple of 8 take the GEMM and one bias+activation pass); the
   convolution's bias and activation are one pass over its output; either
   backward computes act' and the bias gradient in one kernel before the
   GEMMs. The arithmetic is the unfused ops' own, so in f32 the results are
   bitwise those of gdl_linear/gdl_conv2d then gdl_relu/gdl_gelu on the CPU
   (and on the emulator; a real cuBLASLt's GEMM and GELU may differ from
   cublasSgemm's and gpudl's kernel in the last bits). bf16/f16 inputs and
   autocast run the f32 op on f32 copies (the GDL__LOWP hook).
   gdl_nn_sequential uses them without code changes: a Linear followed by
   ReLU or GELU, a Conv2d followed by ReLU, and a BatchNorm followed by ReLU
   (gdl_batch_norm_relu; a BasicBlock's bn1 too) or erf GELU
   (gdl_batch_norm_act) run fused, except under
   anomaly mode, while gdl_module_summary records, under autocast or with
   non-f32 tensors. gdl_nn_set_fusion(0), or GPUDL_NO_FUSION=1 in the
   environment, turns it off (the per-op profiler then lists linear and
   relu rows instead of linear_act). Where cuBLASLt cannot fuse a call
   (erf GELU, a bias or aux buffer not 16-byte aligned, N not a multiple of
   8 with GELU, no algorithm from its heuristic) the GEMM runs, then one
   bias/activation kernel: the same result. GPUDL_VERBOSE=1 in the
   environment says once per process, on stderr, that and why it happened.

   Attention and Transformer modules (torch.nn's, under its names)
   ---------------------------------------------------------------
   Each takes PyTorch's arguments and defaults and saves PyTorch's state_dict
   names, so load_state_dict(strict=True) takes gpudl's files and back:
     nn.MultiheadAttention       gdl_nn_multihead_attention(_ex), gdl_mha_forward(_ex)
                                 (need_weights, average_attn_weights, is_causal,
                                 kdim / vdim, unbatched input)
     nn.TransformerEncoderLayer  gdl_nn_transformer_encoder_layer(_ex)
     nn.TransformerEncoder       gdl_nn_transformer_encoder, gdl_transformer_encoder_forward
     nn.TransformerDecoderLayer  gdl_transformer_decoder_layer
     nn.TransformerDecoder       gdl_transformer_decoder, gdl_transformer_decode
     nn.Transformer              gdl_transformer, gdl_transformer_forward, gdl_transformer_encode /
                                 gdl_transformer_decode (the memory reused),
                                 gdl_generate_square_subsequent_mask
     F.scaled_dot_product_attention  gdl_scaled_dot_product_attention(_ex) (enable_gqa),
                                 gdl_sdpa_heads, gdl_sdpa_qkv
   A layer's activation: "relu", "gelu", "gelu_tanh" or any unary function
   (activation_fn), as PyTorch's name or callable.

   Errors
   ------
   Functions return NULL (tensors) or a negative code (int). gdl_last_error()
   returns a thread-local message naming the op, shapes, dtypes and devices:
       "gdl_matmul: inner dimensions differ: [64,784] x [128,10]"
   Failed calls leave their inputs untouched. The library never exits.
   The message names the public call made, also when a helper underneath
   failed: gdl_load_model on a missing file says "gdl_load_model: PATH:
   cannot open: ...". gdl_item returns NaN on an error, which a NaN loss
   cannot be told from; gdl_item_ex(t, &v) returns 0 (v may be NaN) or -1
   with the error set. Calls kept for one release under an older spelling
   are marked GDL_DEPRECATED: the compiler warns where they are used
   (define GPUDL_NO_DEPRECATED_WARNINGS to silence it). The version is
   GPUDL_VERSION ("MAJOR.MINOR.PATCH", with GPUDL_VERSION_MAJOR, _MINOR,
   _PATCH) at compile time and gdl_version() in the built library; pkg-config
   and CMake's find_package(gpudl) take theirs from the same line.

   Table of contents (search for the file name)
   -----------------
   gpudl.h is generated from src/ by tools/amalgamate.sh: edit the parts.
   The parts are files under src/, joined in the order of src/PARTS (make
   amalgamate, which also writes this table from src/PARTS; make test checks
   that gpudl.h and the table are what src/PARTS makes); gpudl_cuda.cu is made
   the same way from cuda/ (cuda/PARTS). The layers and how to extend them:
   docs/DESIGN.md.

   api/manual.h             the manual: the opening comment (build, a training step, dtypes, the section map)
   api/types.h              the header guard, version, GPUDL_API; gdl_real, dtypes, devices, tensors, shapes
   api/tensor.h             tensor creation, copies, printing, dtype conversion, threads
   api/ops.h                the differentiable ops
   api/grad.h               autograd, no-grad mode, the arena, anomaly mode, autocast; GDL_OP_LIST
   api/formats.h            IDX, CIFAR-10 and safetensors files
   api/data.h               datasets, transforms, the DataLoader
   api/text.h               vocabularies, language-modelling windows, labelled text, the fortunes, splits, sampling
   api/nn.h                 modules, optimizers, learning-rate schedulers, GradScaler
   api/nn_attention.h       nn.MultiheadAttention
   api/nn_transformer.h     nn.TransformerEncoder(Layer), TransformerDecoder(Layer), Transformer, positional embeddings, weight tying
   api/train.h              fit / evaluate, checkpoints
   api/graph.h              a training step captured once as a CUDA graph and replayed
   api/dist.h               data parallel across processes, collectives, DDP
   api/monitor.h            GPU utilisation, memory, temperature, power (NVML); the profiler; model FLOPs and the peaks
   api/quant.h              INT8 quantization (dynamic, static PTQ, QAT), quantized models and their files, the int8 GEMM
   api/onnx.h               ONNX export by tracing and import (gdl_export_onnx, gdl_load_onnx, gdl_onnx_run)
   api/export.h             a model as one self-contained C99 file for microcontrollers (gdl_export_c)
   api/op_math.h            the elementwise ops' codes and their scalar math, one definition for the CPU and CUDA kernels
   api/backend.h            the backend table: runtime and kernel entries (GDL_RUNTIME_ENTRIES, GDL_KERNEL_ENTRIES); the end of the API (GPUDL_H)
   impl_begin.h             the GPUDL_IMPLEMENTATION guards, system includes, portability macros, gcc's vectoriser settings
   runtime/platform.h       the operating system (POSIX, Win32): threads, atomics, clocks, files, directories, dynamic loading, sockets
   runtime/errors.h         gdl__set_error, gdl_last_error
   runtime/env.h            the environment variables, parsed whole (numbers in range, strings that fit, 0/1 switches)
   runtime/devices.h        devices and the backend they select
   runtime/profiler.h       the profiler's spans and its trace
   runtime/flops.h          the model FLOPs this thread's GEMM-like ops ran (gdl_flops_count); GPUs' datasheet peaks
   runtime/arena.h          the per-step arenas (host and device)
   runtime/tensor.h         storage, tensors, the generator, half precision, copies
   runtime/thread_pool.h    the CPU thread pool (gdl__parallel_for)
   runtime/monitor.h        the allocators' counters, NVML
   cpu/memory.h             allocation and its counters, copies, stream and event stand-ins, fill, cast
   cpu/gemm.h               the GEMM (AVX-512 / AVX2 / portable micro-kernels, CBLAS; AMX bf16) and the backend's GEMM entries
   cpu/peak.h               the CPU's measured FMA peak (gdl_cpu_peak_gflops); the utilisation line (gdl_flops_line)
   cpu/gemm_int8.h          the int8 GEMM (AVX-512 VNNI / AVX2 / NEON sdot / NEON / portable), quantize, dequantize
   cpu/elementwise.h        binary ops with broadcasting, sum_to, unary ops and their gradients
   cpu/reductions.h         reductions over a middle dimension, argmax, softmax
   cpu/bias_act.h           fused bias + activation and its backward
   cpu/index.h              strided copies, gather / scatter-add, comparisons, where, tril / triu, cumsum
   cpu/conv_pool.h          im2col / col2im, the implicit GEMM and direct convolution (f32; AMX bf16), pooling, copy2d, dropout
   cpu/lowp.h               the elementwise entries that take dtypes: the native bf16/f16 kernels
   cpu/norm.h               batch norm and layer norm
   cpu/lowp_layers.h        the dtype entries of convolution columns, pooling and batch norm (bf16/f16 through f32)
   cpu/embedding_loss.h     embedding, losses
   cpu/attention.h          scaled dot-product attention (flash-attention style tiles, forward and backward)
   cpu/rnn.h                the fused LSTM / GRU gate steps and their backwards
   cpu/optimizers.h         SGD / Adam (master weights), the gradient-norm clip, the weight EMA's update
   cpu/amp_metrics.h        GradScaler's kernels, gdl_fit's metrics, non-finite counts
   cpu/backend_table.h      the entries a CPU has nothing for; the CPU backend table; gdl_shutdown
   ops/core.h               the op layer (checks, outputs, the tape), run-time dtypes, autocast
   ops/views.h              views: reshape, slices, detach
   ops/elementwise.h        elementwise binary ops with broadcasting, comparisons, unary ops
   ops/matmul.h             matmul and linear
   ops/reductions.h         reductions, softmax, cumsum
   ops/conv_pool.h          convolution and pooling
   ops/attention.h          scaled dot-product attention (the fused path's checks and backward, the unfused composition)
   ops/rnn.h                the recurrent gate ops (lstm_gates, gru_gates)
   ops/shape.h              concat, permute, slicing, split, stack, gather, where, tril / triu
   ops/nn.h                 dropout, normalisation, embedding, losses
   ops/op_table.h           the op table
   ops/autograd.h           requires_grad, gradient buffers, the backward walk over the tape, grad-ready hooks
   io/idx_cifar.h           shared helpers, IDX, CIFAR-10 binary
   io/safetensors_read.h    safetensors dtypes, UTF-8, the strict JSON parser, the reader
   io/safetensors_write.h   the safetensors writer
   io/protobuf.h            a protocol-buffers encoder (varints, length-delimited fields)
   data/loader.h            datasets, transforms, the DataLoader and its worker threads
   data/text.h              vocabularies, windows, padded labelled text, the fortune readers, splits, sampling
   nn/modules.h             modules: layers, forward, tree walks, summary
   nn/attention.h           nn.MultiheadAttention on scaled dot-product attention
   nn/resnet.h              ResNet's BasicBlock, under torchvision's names
   nn/transformer.h         the Transformer encoder, decoder and nn.Transformer, positional embeddings, weight tying
   nn/rnn.h                 the recurrent modules: LSTM, GRU and RNN (lengths, proj_size); gdl_forward_ex
   train/optimizers.h       optimizers (SGD, Adam, AdamW), master weights, the flat blocks
   train/ema.h              weight EMA (AveragedModel), mirroring the optimizer's flat parameter region
   train/gradscaler.h       GradScaler (torch.amp.GradScaler)
   train/clip_grad.h        gradient-norm clipping
   train/optimizer_state.h  an optimizer's state: master weights, state tensors, step, groups, lr and momentum
   train/schedulers.h       learning-rate schedulers
   quant/quantize.h         quantize / dequantize tensors, observers
   quant/layers.h           quantized layers, where they run, fake quantization (QAT)
   quant/prepare.h          observed layers (prepare, calibrate), model copies, weight tying in copies
   quant/rnn.h              the recurrent modules, dynamically quantized
   quant/files.h            quantized models' files
   export/c.h               gdl_export_c: a model lowered to one C99 file (the arena's placement, the INT8 requantization)
   dist/launch.h            the launcher's environment (shared state, integer variables)
   dist/rendezvous.h        the rendezvous without MPI: NCCL's id over TCP, to processes that prove the job's token (HMAC-SHA-256; docs/security.md)
   dist/process_group.h     the process group: init, ranks, shutdown, timeouts
   dist/collectives.h       collectives (MPI, NCCL)
   dist/ddp.h               DistributedDataParallel
   dist/cluster.h           Slurm's host lists, Kubernetes' environments, preemption signals
   train/fit.h              fit / evaluate, progress output, gdl_fit's CUDA graphs
   train/checkpoints.h      checkpoints
   train/graph.h            gdl_graph_capture / replay
   io/onnx_export.h         gdl_export_onnx: the trace, its ops as ONNX nodes, the ModelProto
   io/onnx_import.h         gdl_load_onnx: the checked ModelProto reader; gdl_onnx_run runs the graph with gdl's ops
   impl_end.h               the closing #endifs of the implementation; the license

   Adding an op
   ------------
   One list drives the op enum, names, backward table and autocast classes
   (GDL_OP_LIST, src/api/grad.h), two more the backends' tables (their
   runtime and kernel halves: GDL_RUNTIME_ENTRIES, GDL_KERNEL_ENTRIES,
   src/api/backend.h). The files an op touches, and
   its tests: docs/DESIGN.md, "Adding an op".

   Compile-time options
   --------------------
   GPUDL_STATIC           make every function static
   GPUDL_MALLOC/REALLOC/FREE  override the allocator (define all three or none)
   GPUDL_ASSERT(x)        override assert()
   GPUDL_CUDA             enable the CUDA backend (link gpudl_cuda.cu)
   GPUDL_CBLAS            route the CPU GEMM to cblas_sgemm (link -lopenblas)
   GPUDL_GEMM_PORTABLE    use the portable C GEMM micro-kernel even where the
                          compiler targets AVX2, AVX-512 or NEON (for tests);
                          the int8 GEMM's too (src/cpu/gemm_int8.h)
   GPUDL_ZLIB             read gzipped IDX files (link -lz)
   GPUDL_NO_THREADS       no pthreads: the CPU kernels run on one thread,
                          DataLoader workers inline
   GPUDL_MPI              collectives over MPI for multi-process training
                          (src/api/dist.h; build with mpicc); CUDA tensors use
                          NCCL (-lnccl with gpudl_cuda.cu)
   GPUDL_NO_NCCL          (gpudl_cuda.cu) build the CUDA backend without
                          NCCL: no collectives of CUDA tensors, no -lnccl
   GPUDL_NVML             GPU monitoring (gdl_gpu_stats) in a CPU build too;
                          on with GPUDL_CUDA. Uses dlopen (glibc < 2.34: -ldl)
   GPUDL_DOUBLE           compute in double precision on the CPU: the dtype
                          GDL_F32 then holds doubles. Used by the gradient
                          check (tests/test_gradcheck.c): central finite
                          differences need ~1e-10 accuracy, which float
                          cannot give, and a double build checks the very
                          f32 code paths (an F64 dtype would check other
                          kernels). Not for CUDA builds.
   Threads: the CPU kernels run on gpudl's own pool (-pthread; -fopenmp is
   not needed): gdl_set_num_threads, else the environment's
   GPUDL_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs the process may
   run on. Results are bitwise the same for any thread count.

   Environment variables
   ---------------------
   Every variable gpudl reads, parsed whole (src/runtime/env.h): a number is
   decimal digits only (no sign unless the range has negatives, no spaces, no
   suffix, no exponent) within its range; a string longer than its limit is
   an error, never cut short; a switch is 0 or 1 (unset or empty: 0). Where
   the value is read by a call that can fail, a bad one is that call's error
   naming the variable, its value and what is allowed; where it is read at
   first use (a thread count, a switch), it is one warning line on stderr,
   "gpudl: warning: ignoring NAME='value': ...", and the default.

   NAME                 what it does; allowed values; default; a bad value
   GPUDL_NUM_THREADS    the CPU pool's threads (gdl_set_num_threads wins);
                        1..1048576, capped at 256; the CPUs the process may
                        run on; a warning, the default
   OMP_NUM_THREADS      the same when GPUDL_NUM_THREADS is unset; N or a
                        list N,M,... (the first, OpenMP's outer level, is
                        used); as above; as above
   GPUDL_QUIET          1 hides gdl_default_device's notice that no CUDA
                        device was found; 0/1; 0; a warning, 0
   GPUDL_NO_FUSION      1 turns module fusion off (gdl_nn_set_fusion's
                        initial state); 0/1; 0; a warning, 0
   GPUDL_VERBOSE        (CUDA) 1: says once on stderr why a fused linear ran
                        without cuBLASLt's epilogue; 0/1; 0; a warning, 0
   GPUDL_CUDA_MAX_GRID  (CUDA; for tests) caps every kernel grid at N blocks;
                        1..2147483647; no cap below the built-in ones; a
                        warning, no cap
   GPUDL_NVML_LIB       another NVML library (the tests' stand-in): an
                        absolute path; honoured only with GPUDL_NVML or
                        GPUDL_CUDA, never in a setuid/setgid process (there:
                        the system's NVML); libnvidia-ml.so.1 (Windows:
                        nvml.dll from the system directory only); a relative
                        path: gdl_gpu_count / gdl_gpu_stats fail, "NVML not
                        available: GPUDL_NVML_LIB='...' is not an absolute
                        path"
   GPUDL_DATA           where gdl_dataset_fashion_mnist and the fortunes
                        (GPUDL_DATA/fortunes) are looked for when no
                        directory is given; a directory; ./data, then
                        Debian's package directory; too long for a path:
                        that call's error
   RANK, WORLD_SIZE, LOCAL_RANK (torchrun, PyTorchJob), OMPI_COMM_WORLD_RANK,
   OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK (mpirun), SLURM_PROCID,
   SLURM_NTASKS, SLURM_LOCALID (srun), JOB_COMPLETION_INDEX (Kubernetes'
   Indexed Job), PET_NODE_RANK
                        the process's rank, the world size, the local rank
                        (gdl_dist_init); the size 1..1048576, a rank 0..size-1;
                        one process; gdl_dist_init fails naming the variable
   PET_NNODES           Kubeflow's pod count; N or N:N; as above
   PET_NPROC_PER_NODE   Kubeflow's processes per pod; 1; 1; gdl_dist_init fails
   GPUDL_DIST_TIMEOUT   how long a collective waits for the other ranks, in
                        seconds; a decimal number > 0, or inf; 600 (see
                        gdl_dist_set_timeout); gdl_dist_init fails
   MASTER_ADDR, PET_MASTER_ADDR
                        rank 0's host for the rendezvous (several processes
                        without MPI); at most 255 bytes; from srun's node
                        list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST,
                        SLURM_NODELIST: Slurm's host list syntax); too long
                        or a bad node list: gdl_dist_init fails
   MASTER_PORT, PET_MASTER_PORT
                        its port; 1..65535; under srun 20000 + SLURM_JOB_ID
                        mod 20000 (SLURM_JOB_ID: a whole number >= 0); a bad
                        port or job id: gdl_dist_init fails
   GPUDL_DIST_BIND_ADDR the address rank 0 listens at (MASTER_ADDR: that
                        one's); at most 255 bytes; every address, or
                        MASTER_ADDR when it is a loopback; gdl_dist_init fails
   GPUDL_DIST_TOKEN, GPUDL_JOB_UID, TORCHELASTIC_RUN_ID, SLURM_JOB_ID with
   SLURM_STEP_ID, OMPI_MCA_orte_ess_jobid, PMIX_NAMESPACE
                        the rendezvous's shared secret, the first one set in
                        this order (TORCHELASTIC_RUN_ID "none" skipped); any
                        string, all of it (with the variable's name) keyed
                        into the HMAC; none: anyone may join, with a notice
*/
