/* gpudl.h — train neural networks in C on the CPU and on NVIDIA GPUs, the way
   a PyTorch user does. Single header, public domain-style (MIT, see the end).

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
     ([api-nn], "The flat parameter buffer").
   * The op layer is single-threaded: call ops from one thread at a time.

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
     entry gemm_lp: cublasGemmEx with f32 accumulation on CUDA);
   * conv2d (x, weight and bias of one low dtype; any stride, padding,
     dilation, groups): columns in the low dtype, the GEMMs through gemm_lp,
     the bias folded into the GEMM so the output rounds once; backward: the
     weight and bias gradients through gemm_lp (the batch summed in f32
     and rounded once; on a GPU once per chunk of samples of up to 64 MiB
     of f32 products), the input gradient's column sums (col2im) in f32
     with one rounding
     into the gradient;
   * max_pool2d (exact), avg_pool2d and global_avg_pool2d (sums in f32);
   * batch_norm with a low-precision input, as cuDNN under autocast: x, y and
     the input gradient in the low dtype; the statistics, running statistics
     and affine parameters (and their gradients) f32 -- low-precision weight
     and bias get an f32 copy inside the op (a cast);
   * the elementwise ops -- relu, leaky_relu, sigmoid, tanh, gelu (both),
     exp, log, add_scalar, mul_scalar (and gdl_mul_scalar_), pow_scalar,
     add, sub, mul, div with broadcasting, dropout, concat -- forward and
     backward (entries unary_lp, unary_backward_lp, binary_lp, sum_to_lp,
     dropout_lp, dropout_backward_lp, copy2d_lp): each element is loaded
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
   [impl-ops]: gdl__lowp_in/out, with differentiable casts, so autograd
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
   * LOW (matmul, linear, conv2d): float inputs are cast to the region's
     dtype and the op runs in it natively, accumulating in f32 (the
     backend's gemm_lp); the result is bf16/f16;
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
   * checkpoints (gdl_save_checkpoint, gdl_fit's) save each master under its
     parameter's name, as f32, so resuming into a master-weights optimizer
     is bit for bit (the parameters are rounded from the masters loaded),
     and loading into a plain f32 model and optimizer gives it the masters
     as its parameters (and the same state); an f32 checkpoint loads into a
     master-weights run the same way. gdl_save_model / gdl_load_model of a
     bf16 model write the bf16 values widened to f32 and round them back
     (the masters are not touched: load weights through gdl_load_checkpoint
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
   scaler is captured and replayed as any other ([api-graph]):
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
   ReLU or GELU, and a Conv2d followed by ReLU, run fused, except under
   anomaly mode, while gdl_module_summary records, under autocast or with
   non-f32 tensors. gdl_nn_set_fusion(0), or GPUDL_NO_FUSION=1 in the
   environment, turns it off (the per-op profiler then lists linear and
   relu rows instead of linear_act). Where cuBLASLt cannot fuse a call
   (erf GELU, a bias or aux buffer not 16-byte aligned, N not a multiple of
   8 with GELU, no algorithm from its heuristic) the GEMM runs, then one
   bias/activation kernel: the same result. GPUDL_VERBOSE=1 in the
   environment says once per process, on stderr, that and why it happened.

   Errors
   ------
   Functions return NULL (tensors) or a negative code (int). gdl_last_error()
   returns a thread-local message naming the op, shapes, dtypes and devices:
       "gdl_matmul: inner dimensions differ: [64,784] x [128,10]"
   Failed calls leave their inputs untouched. The library never exits.

   Table of contents (search for the tag)
   -----------------
   gpudl.h is generated from src/ by tools/amalgamate.sh: edit the parts.
   Each section is one or more files of src/, joined in the order of
   src/PARTS (make amalgamate; make test checks that gpudl.h is what they
   make); gpudl_cuda.cu is made the same way from cuda/ (cuda/PARTS). The
   design, layer by layer, and how to extend it: docs/DESIGN.md.
   tag             file in src/                   holds
                   00_manual.h                    the manual (this comment)
   [types]         10_types.h                     version, dtypes, devices, tensors
   [api-tensor]    20_api_tensor.h                creation, copies, dtypes, threads
   [api-ops]       21_api_ops.h                   the differentiable ops
   [api-grad]      22_api_grad.h                  autograd, arena, autocast; GDL_OP_LIST
   [api-formats]   23_api_formats.h               IDX, CIFAR-10, safetensors files
   [api-data]      24_api_data.h                  datasets, transforms, the DataLoader
   [api-nn]        25_api_nn.h                    modules, optimizers, schedulers, scaler
   [api-train]     26_api_train.h                 fit / evaluate, checkpoints
   [api-graph]     27_api_graph.h                 a training step as a CUDA graph
   [api-dist]      28_api_dist.h                  processes, collectives, DDP, restarts
   [api-monitor]   29_api_monitor.h               NVML, memory statistics, the profiler
   [api-quant]     29q_api_quant.h                INT8 quantization, the int8 GEMM
   [backend]       30_backend.h                   the kernel table GDL_BACKEND_ENTRIES
                   40_impl_prelude.h              the implementation: guards, includes
   [impl-platform] 40p_platform.h                 the OS: threads, clocks, files (POSIX, Win32)
   [impl-errors]   41_errors.h                    gdl__set_error, gdl_last_error
   [impl-devices]  42_devices.h                   devices and their backends (gdl__be)
   [impl-profile]  43_profile.h                   the profiler's spans and trace
   [impl-memory]   44_memory.h                    the per-step arenas
   [impl-tensor]   45_tensor.h                    storage, tensors, RNG, f16/bf16, copies
   [impl-pool]     46_pool.h                      the CPU thread pool
   [impl-gemm]     47_gemm.h                      the CPU GEMM kernels (AVX, CBLAS)
   [impl-gemm-int8] 48_gemm_int8.h                the CPU int8 GEMM kernels
   [impl-cpu]      50_cpu_core.h                  elementwise, reductions, softmax
                   51_cpu_conv_pool.h             im2col, pooling, copy2d, dropout
                   52_cpu_lowp.h                  native bf16/f16 elementwise kernels
                   53_cpu_norm_loss.h             norms, embedding, losses
                   54_cpu_optim.h                 SGD/Adam, scaler, metrics; the table
   [impl-ops]      60_ops_core.h                  checks, outputs, tape, dtypes, autocast
                   61_ops_elementwise.h           views, elementwise, matmul, linear
                   62_ops_conv.h                  reductions, softmax, conv, pooling
                   63_ops_nn.h                    concat, norms, losses; the op table
   [impl-autograd] 65_autograd.h                  gradient buffers, the backward walk
   [impl-formats]  70_formats_idx_cifar.h         IDX, CIFAR-10
                   71_formats_safetensors_read.h  safetensors reader (strict JSON)
                   72_formats_safetensors_write.h safetensors writer
   [impl-data]     75_data.h                      datasets, transforms, the DataLoader
   [impl-nn]       80_nn_modules.h                modules
                   81_optimizers.h                optimizers, master weights, flat blocks
                   82_gradscaler.h                GradScaler
                   83_schedulers.h                learning-rate schedulers
   [impl-quant]    84_quant.h                     quantized modules and their files
   [impl-train]    85_train.h                     fit / evaluate, gdl_fit's CUDA graphs
                   86_checkpoints.h               checkpoints
   [impl-graph]    87_graph.h                     gdl_graph_capture / replay
   [impl-dist]     90_dist.h                      launchers, rendezvous, MPI and NCCL
                   91_ddp.h                       DistributedDataParallel
   [impl-cluster]  92_cluster.h                   host lists, Kubernetes' variables, preemption
   [impl-monitor]  95_monitor.h                   allocator counters, NVML
                   99_end.h                       the closing #endifs; the license

   Adding an op
   ------------
   One list drives the op enum, names, backward table and autocast classes
   (GDL_OP_LIST, [api-grad]), another the backends' kernel tables
   (GDL_BACKEND_ENTRIES, [backend]). Files are in src/ unless named.
   An op touches:
     1. a line in GDL_OP_LIST (22_api_grad.h): id, name, backward, kernel
        code, autocast class (PyTorch's: matmul-like LOW, the f32 list F32,
        else PROMOTE);
     2. its declaration in [api-ops] (21_api_ops.h);
     3. the op (checks, output, backend call, tape node) and its gdl__bw_
        backward in [impl-ops] (60-63_ops_*.h; a backward adds into the
        gradients, never assigns); an op taking float tensors starts with
        GDL__LOWP1/2/3(name, GDL_OP_ id, call, each float argument), which
        runs it on f32 copies of bf16/f16 inputs and rounds the result, and
        under autocast casts its inputs as the op's autocast class says (a
        native low-precision path, as conv2d's or batch_norm's, comes
        before the hook: inputs of one low dtype, gdl__lp_native, and
        gdl__ac_native for an op of class LOW);
     4. only for a new kernel: a line in GDL_BACKEND_ENTRIES (30_backend.h)
        plus its two implementations, gdl__cpu_NAME ([impl-cpu], 50-54_cpu_*.h)
        and gdl__cu_NAME (cuda/, joined into gpudl_cuda.cu) -- a backend without
        one does not compile; a CUDA, cuBLAS or NCCL call new to
        gpudl_cuda.cu also goes into the emulator (tests/cuda_emu/cuda_emu.cpp);
     5. tests: a row in tests/op_cases.h (a test fails for an op without
        one): it runs in the gradient check (tests/test_gradcheck.c), the
        CPU/GPU parity table, the bf16/f16 parity tables (tests/test_dtype.c,
        tests/test_cuda.c) and the autocast table (tests/autocast_cases.h);
        an op of class LOW or F32 also goes into the lists of
        test_op_list_autocast_classes (tests/test_gradcheck.c);
     6. sh tools/amalgamate.sh (make amalgamate); commit gpudl.h and
        gpudl_cuda.cu with the parts. Run test_gradcheck, test_dtype,
        test_core and make test-emu: the GPU side is checked only there.
   A new unary function (gdl_sqrt, say) needs no new backend entry: it is
   1, 2, 3 (a one-line gdl_NAME calling gdl__unary; the backward is
   gdl__bw_unary), 5, 6 and a new kernel code:
     a. a GDL_UN_ code in enum gdl_unary_op (30_backend.h), named in its
        GDL_OP_LIST line;
     b. a case in gdl__unary1 (the value) and in gdl__unary_grad1 (dy/dx,
        given x and the output y), both in 50_cpu_core.h AND both in
        cuda/40_elementwise.cu: the switches' default is pow, so a missing
        case computes pow without an error;
     c. when dy/dx reads y (as sigmoid's, tanh's, exp's): the code in need_y
        of gdl__unary_backward_lp_part (52_cpu_lowp.h), or the bf16/f16
        backward on the CPU reads y as 0.
   It is then native in bf16/f16 on both backends (the low-precision
   kernels call the same gdl__unary1 and gdl__unary_grad1).

   Compile-time options
   --------------------
   GPUDL_STATIC           make every function static
   GPUDL_MALLOC/REALLOC/FREE  override the allocator (define all three or none)
   GPUDL_ASSERT(x)        override assert()
   GPUDL_CUDA             enable the CUDA backend (link gpudl_cuda.cu)
   GPUDL_CBLAS            route the CPU GEMM to cblas_sgemm (link -lopenblas)
   GPUDL_GEMM_PORTABLE    use the portable C GEMM micro-kernel even where the
                          compiler targets AVX2, AVX-512 or NEON (for tests);
                          the int8 GEMM's too ([impl-gemm-int8])
   GPUDL_ZLIB             read gzipped IDX files (link -lz)
   GPUDL_NO_THREADS       no pthreads: the CPU kernels run on one thread,
                          DataLoader workers inline
   GPUDL_MPI              collectives over MPI for multi-process training
                          ([api-dist]; build with mpicc); CUDA tensors use
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
*/
#ifndef GPUDL_H
#define GPUDL_H

#define GPUDL_VERSION_MAJOR 0
#define GPUDL_VERSION_MINOR 1
#define GPUDL_VERSION_PATCH 0
#define GPUDL_VERSION "0.1.0"

#if defined(__MINGW32__) && !defined(__USE_MINGW_ANSI_STDIO)
#define __USE_MINGW_ANSI_STDIO 1 /* C99's printf (%zu, %lld), not msvcrt's: gpudl's messages use them */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef GPUDL_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define GPUDL_API static __attribute__((unused)) /* a program uses only some of them */
#else
#define GPUDL_API static
#endif
#else
#define GPUDL_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
   [types]
   ------------------------------------------------------------------------- */

#ifdef GPUDL_DOUBLE
typedef double gdl_real;   /* the compute type behind GDL_F32 */
#else
typedef float gdl_real;
#endif

/* The float dtypes are all computed on, in f32 arithmetic (MANUAL: Dtypes). */
typedef enum gdl_dtype {
    GDL_F32 = 0, /* float (gdl_real), the kernels' compute type */
    GDL_I32,     /* labels, indices */
    GDL_U8,      /* raw pixels */
    GDL_F16,     /* IEEE half: ops compute in f32 and round their result to f16 */
    GDL_BF16,    /* bfloat16: likewise */
    GDL_DTYPE_COUNT
} gdl_dtype;

typedef enum gdl_device_type { GDL_DEVICE_CPU = 0, GDL_DEVICE_CUDA = 1 } gdl_device_type;

typedef struct gdl_device {
    int type;  /* gdl_device_type */
    int index; /* GPU ordinal; 0 for the CPU */
} gdl_device;

#define GDL_MAX_DIMS 6

typedef struct gdl_tensor gdl_tensor;
struct gdl_node;
struct gdl__flat;

/* Read the fields; change them only through the API. */
struct gdl_tensor {
    gdl_dtype dtype;
    gdl_device device;
    int ndim;                     /* 0 for a scalar */
    int64_t shape[GDL_MAX_DIMS];
    int64_t numel;
    void *data;                   /* contiguous, row-major, on `device` */
    gdl_tensor *grad;             /* filled by gdl_backward */
    int requires_grad;
    /* private */
    unsigned flags;               /* GDL__T_* */
    unsigned gen;                 /* a temporary's arena generation (gdl_arena_reset count); 0 if persistent */
    struct gdl_node *node;        /* the op that made it, NULL for leaves */
    struct gdl_node *last_use;    /* during gdl_backward with a gradient-ready hook: the oldest node reading it */
    const char *name;             /* optional, for messages and checkpoints */
    struct gdl__flat *flat;       /* data is a view into an optimizer's flat block (one reference held) */
};

/* GDL_DIMS(2, 3) expands to the (ndim, shape) argument pair (C only). */
#ifndef __cplusplus
#define GDL_DIMS(...) \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}
#endif

/* ---------------------------------------------------------------------------
   [api-tensor]
   ------------------------------------------------------------------------- */

GPUDL_API const char *gdl_last_error(void);
GPUDL_API void gdl_clear_error(void);
GPUDL_API const char *gdl_version(void);

GPUDL_API const char *gdl_dtype_name(gdl_dtype dt);
GPUDL_API size_t gdl_dtype_size(gdl_dtype dt); /* 0 for an invalid dtype */

GPUDL_API gdl_device gdl_cpu(void);
GPUDL_API gdl_device gdl_cuda(int index);
GPUDL_API int gdl_cuda_is_available(void);
GPUDL_API int gdl_cuda_device_count(void);
/* cuda:0 if available, else cpu. A CUDA build (GPUDL_CUDA) that finds no GPU says so once on stderr
   ("gpudl: no CUDA device ...: using the CPU"); GPUDL_QUIET=1 in the environment silences it. */
GPUDL_API gdl_device gdl_default_device(void);
GPUDL_API int gdl_device_equal(gdl_device a, gdl_device b);
GPUDL_API const char *gdl_device_str(gdl_device d); /* "cpu", "cuda:0" (static) */
GPUDL_API const char *gdl_device_name(gdl_device d); /* "CPU" or the GPU's name */
/* How many times so far the host waited for a device: copies to the host
   (gdl_item, gdl_copy_to_host), synchronisations, a wait for an event not
   yet reached. A steady-state training step should make none. */
GPUDL_API int64_t gdl_sync_count(void);

/* Persistent tensors (free with gdl_free). */
GPUDL_API gdl_tensor *gdl_empty(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev);
GPUDL_API gdl_tensor *gdl_zeros(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev);
GPUDL_API gdl_tensor *gdl_ones(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev);
GPUDL_API gdl_tensor *gdl_full(int ndim, const int64_t *shape, double value, gdl_dtype dt, gdl_device dev);
/* Copies `data` (host memory holding numel elements of dtype dt). */
GPUDL_API gdl_tensor *gdl_from_array(const void *data, int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev);
GPUDL_API gdl_tensor *gdl_arange(int64_t n, gdl_dtype dt, gdl_device dev); /* 0..n-1 */
GPUDL_API gdl_tensor *gdl_rand(int ndim, const int64_t *shape, gdl_device dev);  /* U[0,1), f32 */
GPUDL_API gdl_tensor *gdl_randn(int ndim, const int64_t *shape, gdl_device dev); /* N(0,1), f32 */
GPUDL_API gdl_tensor *gdl_uniform(int ndim, const int64_t *shape, double lo, double hi, gdl_device dev);
GPUDL_API void gdl_free(gdl_tensor *t); /* NULL and temporaries: no-op */

/* The global generator: counter-based, same seed gives the same numbers. */
GPUDL_API void gdl_manual_seed(uint64_t seed);
GPUDL_API uint64_t gdl_rng_get_state(uint64_t *counter); /* returns seed */
GPUDL_API void gdl_rng_set_state(uint64_t seed, uint64_t counter);
GPUDL_API uint64_t gdl_rng_next_u64(void);
GPUDL_API double gdl_rng_uniform(void); /* [0,1) */

/* Copies and conversions. gdl_to keeps the lifetime kind of its source: a
   persistent source gives a persistent copy (a new leaf); a temporary gives
   a temporary that passes gradients back to its source, as PyTorch's .to(). */
GPUDL_API gdl_tensor *gdl_to(gdl_tensor *t, gdl_device dev);
/* a temporary; between float dtypes it passes gradients back (rounded to t's dtype) */
GPUDL_API gdl_tensor *gdl_to_dtype(gdl_tensor *t, gdl_dtype dt);
GPUDL_API gdl_tensor *gdl_clone(const gdl_tensor *t);            /* persistent, no grad */
/* Moves a persistent tensor (and its grad) to dev in place: the same
   gdl_tensor* now lives on dev, so pointers to it (optimizers) stay valid. */
GPUDL_API int gdl_move_(gdl_tensor *t, gdl_device dev);
GPUDL_API int gdl_copy_(gdl_tensor *dst, const gdl_tensor *src); /* same shape & dtype, any devices */
GPUDL_API int gdl_fill_(gdl_tensor *t, double value);
GPUDL_API int gdl_mul_scalar_(gdl_tensor *t, double s);          /* in place, no grad */
GPUDL_API int gdl_copy_to_host(const gdl_tensor *t, void *dst, size_t bytes);
GPUDL_API double gdl_item(const gdl_tensor *t); /* one element; NaN + error otherwise */
GPUDL_API int gdl_print(const gdl_tensor *t, FILE *f);
GPUDL_API const char *gdl_shape_str(const gdl_tensor *t); /* "[64,784]" (thread-local ring) */
GPUDL_API int gdl_same_shape(const gdl_tensor *a, const gdl_tensor *b);

/* Half-precision conversions, round to nearest even. */
GPUDL_API uint16_t gdl_f32_to_f16(float x);
GPUDL_API float gdl_f16_to_f32(uint16_t h);
GPUDL_API uint16_t gdl_f32_to_bf16(float x);
GPUDL_API float gdl_bf16_to_f32(uint16_t h);

/* Row-major GEMM on host memory: C = alpha*op(A)*op(B) + beta*C,
   op(A) is MxK, op(B) is KxN. The built-in blocked kernel (or CBLAS). */
GPUDL_API void gdl_gemm_cpu(int transA, int transB, int M, int N, int K, gdl_real alpha,
                            const gdl_real *A, int lda, const gdl_real *B, int ldb,
                            gdl_real beta, gdl_real *C, int ldc);
/* The GEMM micro-kernel compiled in, e.g. "avx512 8x32", "avx2 6x16",
   "neon 8x12", "portable 4x8" or "cblas" (chosen at compile time). */
GPUDL_API const char *gdl_gemm_kernel_name(void);

/* Threads of the CPU kernels (gpudl's own pool; see [impl-pool]). The
   default is the environment's GPUDL_NUM_THREADS, else OMP_NUM_THREADS,
   else the CPUs this process may run on (sched_getaffinity). n <= 0 goes
   back to that default. Results are bitwise the same for any count. A
   GPUDL_NO_THREADS build always has 1. */
GPUDL_API void gdl_set_num_threads(int n);
GPUDL_API int gdl_get_num_threads(void);

/* ---------------------------------------------------------------------------
   [api-ops]   Every result is a temporary. NULL + gdl_last_error() on error.
   Float inputs may be f32, bf16 or f16; the result's dtype follows them
   (MANUAL: Dtypes).
   ------------------------------------------------------------------------- */

typedef enum gdl_reduction { GDL_REDUCE_MEAN = 0, GDL_REDUCE_SUM = 1, GDL_REDUCE_NONE = 2 } gdl_reduction;

/* views (share data) */
GPUDL_API gdl_tensor *gdl_reshape(gdl_tensor *x, int ndim, const int64_t *shape); /* one -1 allowed */
GPUDL_API gdl_tensor *gdl_flatten(gdl_tensor *x, int start_dim);
GPUDL_API gdl_tensor *gdl_slice(gdl_tensor *x, int64_t start, int64_t end); /* rows [start,end) of dim 0 */
GPUDL_API gdl_tensor *gdl_detach(gdl_tensor *x);

/* Tensors are contiguous, so what PyTorch makes a strided view is a copy here
   (one strided-copy kernel; the backward adds back through the same
   geometry): permute and transpose, and a slice or select whose elements are
   not one contiguous block. Where the result is contiguous in the input (a
   slice along a dim all of whose outer dims have size 1; a permute moving
   only size-1 dims) it is a view, as gdl_reshape. Any dtype; dims may be
   negative, as in PyTorch. */
GPUDL_API gdl_tensor *gdl_permute(gdl_tensor *x, int ndim, const int *dims);
GPUDL_API gdl_tensor *gdl_transpose(gdl_tensor *x, int dim0, int dim1);
/* x[..., start:start+length, ...] along dim (start may be negative) */
GPUDL_API gdl_tensor *gdl_narrow(gdl_tensor *x, int dim, int64_t start, int64_t length);
/* x[..., start:end:step, ...] along dim, with Python's clamping of start and end (negative ones count from
   the end; step >= 1) */
GPUDL_API gdl_tensor *gdl_slice_dim(gdl_tensor *x, int dim, int64_t start, int64_t end, int64_t step);
/* x[..., index, ...]: dim removed (index may be negative) */
GPUDL_API gdl_tensor *gdl_select(gdl_tensor *x, int dim, int64_t index);
/* pieces of split_size along dim (the last one shorter) / `chunks` pieces of ceil(size/chunks): written to
   out (room for max_out), their count returned (-1 on error); torch.split / torch.chunk */
GPUDL_API int gdl_split(gdl_tensor *x, int64_t split_size, int dim, gdl_tensor **out, int max_out);
GPUDL_API int gdl_chunk(gdl_tensor *x, int chunks, int dim, gdl_tensor **out);
/* n tensors of one shape joined along a new dim (0..ndim); gdl_concat (below) is torch.cat */
GPUDL_API gdl_tensor *gdl_stack(int n, gdl_tensor *const *xs, int dim);

/* indexing: index is i32. index_select: x's slices at index (1-D) along dim; gather: out[i][j][k] =
   x[i][index[i][j][k]][k] for dim 1 (index has x's ndim; index.size(d) <= x.size(d) off dim). Backward
   by scatter-add. The CPU rejects an index out of range; on a GPU such an element reads 0. */
GPUDL_API gdl_tensor *gdl_index_select(gdl_tensor *x, int dim, gdl_tensor *index);
GPUDL_API gdl_tensor *gdl_gather(gdl_tensor *x, int dim, gdl_tensor *index);

/* comparisons with broadcasting: a u8 tensor of 0 / 1 (PyTorch's bool). Any dtypes: two integer tensors
   compare exactly, otherwise both as f32 (an i32 rounded to f32, as PyTorch promotes); NaN is unequal to
   everything. Not differentiable. */
typedef enum gdl_compare_op { GDL_CMP_EQ, GDL_CMP_NE, GDL_CMP_LT, GDL_CMP_LE, GDL_CMP_GT, GDL_CMP_GE } gdl_compare_op;
GPUDL_API gdl_tensor *gdl_compare(gdl_tensor *a, gdl_tensor *b, gdl_compare_op op);
GPUDL_API gdl_tensor *gdl_eq(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_ne(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_lt(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_le(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_gt(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_ge(gdl_tensor *a, gdl_tensor *b);
/* x op value; the value is taken in x's dtype for a float x (x_bf16 == 0.1 compares with bf16(0.1), as
   PyTorch), as i32 for an i32/u8 x when it is an integer of at most 2^24, else as f32 */
GPUDL_API gdl_tensor *gdl_compare_scalar(gdl_tensor *x, gdl_compare_op op, double value);
/* cond (u8, a comparison's result) ? a : b, all three broadcast; the result has a and b's promoted dtype */
GPUDL_API gdl_tensor *gdl_where(gdl_tensor *cond, gdl_tensor *a, gdl_tensor *b);
/* x with value where mask (u8, broadcastable to x's shape) is non-zero */
GPUDL_API gdl_tensor *gdl_masked_fill(gdl_tensor *x, gdl_tensor *mask, double value);
/* the lower / upper triangle of the last two dims (diagonal 0: the main one; > 0 above it), the rest 0 */
GPUDL_API gdl_tensor *gdl_tril(gdl_tensor *x, int64_t diagonal);
GPUDL_API gdl_tensor *gdl_triu(gdl_tensor *x, int64_t diagonal);

/* elementwise, with NumPy broadcasting */
GPUDL_API gdl_tensor *gdl_add(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_sub(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_mul(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_div(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_add_scalar(gdl_tensor *x, double s);
GPUDL_API gdl_tensor *gdl_mul_scalar(gdl_tensor *x, double s);
GPUDL_API gdl_tensor *gdl_pow_scalar(gdl_tensor *x, double p);
GPUDL_API gdl_tensor *gdl_exp(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_log(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_sqrt(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_rsqrt(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_abs(gdl_tensor *x);
/* torch.clamp with scalar bounds: -INFINITY / INFINITY for none (a NaN bound is an error); the gradient
   passes where min <= x <= max. clamp_min / clamp_max: one bound. */
GPUDL_API gdl_tensor *gdl_clamp(gdl_tensor *x, double min, double max);
GPUDL_API gdl_tensor *gdl_clamp_min(gdl_tensor *x, double min);
GPUDL_API gdl_tensor *gdl_clamp_max(gdl_tensor *x, double max);
/* elementwise with broadcasting: torch.minimum / maximum (NaN propagates; a tie sends half the gradient
   each way) and torch.pow of tensors */
GPUDL_API gdl_tensor *gdl_minimum(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_maximum(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_pow(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_relu(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_leaky_relu(gdl_tensor *x, double negative_slope);
GPUDL_API gdl_tensor *gdl_sigmoid(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_tanh(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_gelu(gdl_tensor *x, int tanh_approximation);

/* linear algebra */
/* torch.matmul: [..., M, K] x [..., K, N] with the batch dims broadcast; a 1-D operand is a row (a) or a
   column (b) vector whose dim is removed from the result */
GPUDL_API gdl_tensor *gdl_matmul(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_bmm(gdl_tensor *a, gdl_tensor *b); /* [B,M,K] x [B,K,N], no broadcasting */
GPUDL_API gdl_tensor *gdl_linear(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias); /* W [out,in]; bias may be NULL */
/* The activation fused into gdl_linear_act / gdl_conv2d_act: GELU_TANH is
   gdl_gelu(x, 1) (the tanh approximation, cuBLASLt's GELU epilogue), GELU
   is gdl_gelu(x, 0) (erf). */
typedef enum gdl_act { GDL_ACT_NONE = 0, GDL_ACT_RELU, GDL_ACT_GELU_TANH, GDL_ACT_GELU } gdl_act;
/* act(linear(x, weight, bias)) as one op: on the CPU the GEMM, then bias and
   activation in one pass over the output (bitwise linear then relu/gelu in
   f32); on CUDA one cublasLtMatmul with a bias/activation epilogue; backward
   one kernel for act' and the bias gradient, then the two GEMMs. */
GPUDL_API gdl_tensor *gdl_linear_act(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias, gdl_act act);

/* reductions */
GPUDL_API gdl_tensor *gdl_sum(gdl_tensor *x);  /* all elements -> scalar */
GPUDL_API gdl_tensor *gdl_mean(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_sum_dim(gdl_tensor *x, int dim, int keepdim);
GPUDL_API gdl_tensor *gdl_mean_dim(gdl_tensor *x, int dim, int keepdim);
GPUDL_API gdl_tensor *gdl_max_dim(gdl_tensor *x, int dim, int keepdim);
GPUDL_API gdl_tensor *gdl_argmax(gdl_tensor *x, int dim); /* i32, not differentiable */
GPUDL_API gdl_tensor *gdl_softmax(gdl_tensor *x, int dim);
GPUDL_API gdl_tensor *gdl_log_softmax(gdl_tensor *x, int dim);
GPUDL_API gdl_tensor *gdl_cumsum(gdl_tensor *x, int dim);

/* images, NCHW */
GPUDL_API gdl_tensor *gdl_conv2d(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias,
                                 int stride, int padding, int dilation, int groups);
GPUDL_API gdl_tensor *gdl_conv2d_ex(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias,
                                    const int stride[2], const int padding[2],
                                    const int dilation[2], int groups);
/* act(conv2d(...)): bias add and activation in one pass over the convolution's
   output, and their backward (act' and the bias gradient) in one pass too */
GPUDL_API gdl_tensor *gdl_conv2d_act(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias,
                                     int stride, int padding, int dilation, int groups, gdl_act act);
GPUDL_API gdl_tensor *gdl_max_pool2d(gdl_tensor *x, int kernel, int stride, int padding);
GPUDL_API gdl_tensor *gdl_avg_pool2d(gdl_tensor *x, int kernel, int stride, int padding); /* count_include_pad */
GPUDL_API gdl_tensor *gdl_global_avg_pool2d(gdl_tensor *x); /* [N,C,H,W] -> [N,C,1,1] */

/* structure */
GPUDL_API gdl_tensor *gdl_concat(int n, gdl_tensor *const *xs, int dim);

/* layers as functions (PyTorch's F.*) */
GPUDL_API gdl_tensor *gdl_dropout(gdl_tensor *x, double p, int training);
/* x is [N,C] or [N,C,L] (1-D) or [N,C,H,W] (2-D). running_* may be NULL
   (then training statistics are used even in eval). weight/bias may be NULL. */
GPUDL_API gdl_tensor *gdl_batch_norm(gdl_tensor *x, gdl_tensor *running_mean, gdl_tensor *running_var,
                                     gdl_tensor *weight, gdl_tensor *bias, int training,
                                     double momentum, double eps);
/* normalises over the last dim (size D = weight's numel when given) */
GPUDL_API gdl_tensor *gdl_layer_norm(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias, double eps);
GPUDL_API gdl_tensor *gdl_embedding(gdl_tensor *indices, gdl_tensor *weight); /* i32 [...] -> [...,D] */

/* losses */
typedef struct gdl_ce_opts {
    gdl_reduction reduction; /* default mean */
    int ignore_index;        /* default -100 */
    double label_smoothing;  /* default 0 */
} gdl_ce_opts;
GPUDL_API gdl_ce_opts gdl_ce_defaults(void);
GPUDL_API gdl_tensor *gdl_cross_entropy(gdl_tensor *logits, gdl_tensor *targets); /* [B,C], i32 [B] */
GPUDL_API gdl_tensor *gdl_cross_entropy_ex(gdl_tensor *logits, gdl_tensor *targets, const gdl_ce_opts *opts);
GPUDL_API gdl_tensor *gdl_nll_loss(gdl_tensor *log_probs, gdl_tensor *targets, gdl_reduction r, int ignore_index);
GPUDL_API gdl_tensor *gdl_mse_loss(gdl_tensor *input, gdl_tensor *target, gdl_reduction r);
GPUDL_API gdl_tensor *gdl_bce_with_logits(gdl_tensor *input, gdl_tensor *target, gdl_reduction r);

/* ---------------------------------------------------------------------------
   [api-grad]
   ------------------------------------------------------------------------- */

GPUDL_API int gdl_set_requires_grad(gdl_tensor *t, int on); /* float leaves only */
GPUDL_API int gdl_backward(gdl_tensor *loss);              /* loss: one element */
/* Called by gdl_backward for every leaf that requires grad as soon as its gradient is complete
   (after the last op of the walk that adds to it), while the rest of backward still runs: the
   signal a bucketed all-reduce starts on (gdl_ddp). NULL removes it. Per thread. */
typedef void (*gdl_grad_ready_fn)(gdl_tensor *leaf, void *user);
GPUDL_API void gdl_set_grad_ready_hook(gdl_grad_ready_fn fn, void *user);
GPUDL_API int gdl_backward_grad(gdl_tensor *t, const gdl_tensor *grad); /* t.backward(grad) */
GPUDL_API int gdl_zero_grad_tensor(gdl_tensor *t);
GPUDL_API int gdl_sgd_update_(gdl_tensor *param, double lr); /* p -= lr*grad, no grad */
GPUDL_API int gdl_set_grad_enabled(int on);                  /* returns the previous mode */
GPUDL_API int gdl_is_grad_enabled(void);

/* Per-step arena of temporaries. */
GPUDL_API void gdl_arena_reset(void);
GPUDL_API size_t gdl_arena_used(void);     /* bytes handed out since the reset */
GPUDL_API size_t gdl_arena_reserved(void); /* bytes held */
GPUDL_API void gdl_shutdown(void);         /* frees the arenas, backends' caches and the last profile */

/* The op list: every op the autograd tape records, one line each, as
   X(ID, name, backward function, backend kernel code, autocast class).
   It makes the gdl_op enum (GDL_OP_ID), gdl_op_name, the op table with each
   op's backward (the functions gdl__bw_* in [impl-ops]) and the autocast
   class (torch.autocast's CUDA lists: matmul, linear and conv run in the low
   dtype; softmax, losses, layer norm, sum, cumsum, exp, log, rsqrt and pow
   in f32; every other op in its inputs' widest dtype). The manual says how to add an op. */
#define GDL_OP_LIST(X) \
    X(RESHAPE, "reshape", gdl__bw_view, 0, GDL_AUTOCAST_PROMOTE) \
    X(SLICE, "slice", gdl__bw_view, 0, GDL_AUTOCAST_PROMOTE) \
    X(ADD, "add", gdl__bw_binary, GDL_BIN_ADD, GDL_AUTOCAST_PROMOTE) \
    X(SUB, "sub", gdl__bw_binary, GDL_BIN_SUB, GDL_AUTOCAST_PROMOTE) \
    X(MUL, "mul", gdl__bw_binary, GDL_BIN_MUL, GDL_AUTOCAST_PROMOTE) \
    X(DIV, "div", gdl__bw_binary, GDL_BIN_DIV, GDL_AUTOCAST_PROMOTE) \
    X(ADD_SCALAR, "add_scalar", gdl__bw_unary, GDL_UN_ADD_SCALAR, GDL_AUTOCAST_PROMOTE) \
    X(MUL_SCALAR, "mul_scalar", gdl__bw_unary, GDL_UN_SCALE, GDL_AUTOCAST_PROMOTE) \
    X(POW_SCALAR, "pow_scalar", gdl__bw_unary, GDL_UN_POW, GDL_AUTOCAST_F32) \
    X(EXP, "exp", gdl__bw_unary, GDL_UN_EXP, GDL_AUTOCAST_F32) \
    X(LOG, "log", gdl__bw_unary, GDL_UN_LOG, GDL_AUTOCAST_F32) \
    X(RELU, "relu", gdl__bw_unary, GDL_UN_RELU, GDL_AUTOCAST_PROMOTE) \
    X(LEAKY_RELU, "leaky_relu", gdl__bw_unary, GDL_UN_LEAKY_RELU, GDL_AUTOCAST_PROMOTE) \
    X(SIGMOID, "sigmoid", gdl__bw_unary, GDL_UN_SIGMOID, GDL_AUTOCAST_PROMOTE) \
    X(TANH, "tanh", gdl__bw_unary, GDL_UN_TANH, GDL_AUTOCAST_PROMOTE) \
    X(GELU, "gelu", gdl__bw_unary, GDL_UN_GELU_ERF, GDL_AUTOCAST_PROMOTE) \
    X(GELU_TANH, "gelu_tanh", gdl__bw_unary, GDL_UN_GELU_TANH, GDL_AUTOCAST_PROMOTE) \
    X(MATMUL, "matmul", gdl__bw_matmul, 0, GDL_AUTOCAST_LOW) \
    X(LINEAR, "linear", gdl__bw_linear, 0, GDL_AUTOCAST_LOW) \
    X(LINEAR_ACT, "linear_act", gdl__bw_linear_act, 0, GDL_AUTOCAST_LOW) \
    X(SUM, "sum", gdl__bw_reduce, GDL_RED_SUM, GDL_AUTOCAST_F32) \
    X(MEAN, "mean", gdl__bw_reduce, GDL_RED_MEAN, GDL_AUTOCAST_PROMOTE) \
    X(MAX, "max", gdl__bw_reduce, GDL_RED_MAX, GDL_AUTOCAST_PROMOTE) \
    X(SOFTMAX, "softmax", gdl__bw_softmax, 0, GDL_AUTOCAST_F32) \
    X(LOG_SOFTMAX, "log_softmax", gdl__bw_softmax, 0, GDL_AUTOCAST_F32) \
    X(CONV2D, "conv2d", gdl__bw_conv2d, 0, GDL_AUTOCAST_LOW) \
    X(CONV2D_ACT, "conv2d_act", gdl__bw_conv2d, 0, GDL_AUTOCAST_LOW) \
    X(MAX_POOL2D, "max_pool2d", gdl__bw_pool, 0, GDL_AUTOCAST_PROMOTE) \
    X(AVG_POOL2D, "avg_pool2d", gdl__bw_pool, 0, GDL_AUTOCAST_PROMOTE) \
    X(GLOBAL_AVG_POOL2D, "global_avg_pool2d", gdl__bw_reduce, GDL_RED_MEAN, GDL_AUTOCAST_PROMOTE) \
    X(CONCAT, "concat", gdl__bw_concat, 0, GDL_AUTOCAST_PROMOTE) \
    X(SQRT, "sqrt", gdl__bw_unary, GDL_UN_SQRT, GDL_AUTOCAST_PROMOTE) \
    X(RSQRT, "rsqrt", gdl__bw_unary, GDL_UN_RSQRT, GDL_AUTOCAST_F32) \
    X(ABS, "abs", gdl__bw_unary, GDL_UN_ABS, GDL_AUTOCAST_PROMOTE) \
    X(CLAMP_MIN, "clamp_min", gdl__bw_unary, GDL_UN_CLAMP_MIN, GDL_AUTOCAST_PROMOTE) \
    X(CLAMP_MAX, "clamp_max", gdl__bw_unary, GDL_UN_CLAMP_MAX, GDL_AUTOCAST_PROMOTE) \
    X(MINIMUM, "minimum", gdl__bw_binary, GDL_BIN_MIN, GDL_AUTOCAST_PROMOTE) \
    X(MAXIMUM, "maximum", gdl__bw_binary, GDL_BIN_MAX, GDL_AUTOCAST_PROMOTE) \
    X(POW, "pow", gdl__bw_binary, GDL_BIN_POW, GDL_AUTOCAST_F32) \
    X(PERMUTE, "permute", gdl__bw_strided, 0, GDL_AUTOCAST_PROMOTE) \
    X(NARROW, "narrow", gdl__bw_strided, 0, GDL_AUTOCAST_PROMOTE) \
    X(INDEX_SELECT, "index_select", gdl__bw_gather, 0, GDL_AUTOCAST_PROMOTE) \
    X(GATHER, "gather", gdl__bw_gather, 0, GDL_AUTOCAST_PROMOTE) \
    X(WHERE, "where", gdl__bw_where, 0, GDL_AUTOCAST_PROMOTE) \
    X(MASKED_FILL, "masked_fill", gdl__bw_where, 0, GDL_AUTOCAST_PROMOTE) \
    X(TRIL, "tril", gdl__bw_tri, 0, GDL_AUTOCAST_PROMOTE) \
    X(TRIU, "triu", gdl__bw_tri, 0, GDL_AUTOCAST_PROMOTE) \
    X(CUMSUM, "cumsum", gdl__bw_cumsum, 0, GDL_AUTOCAST_F32) \
    X(DROPOUT, "dropout", gdl__bw_dropout, 0, GDL_AUTOCAST_PROMOTE) \
    X(BATCH_NORM, "batch_norm", gdl__bw_batch_norm, 0, GDL_AUTOCAST_PROMOTE) \
    X(LAYER_NORM, "layer_norm", gdl__bw_layer_norm, 0, GDL_AUTOCAST_F32) \
    X(EMBEDDING, "embedding", gdl__bw_embedding, 0, GDL_AUTOCAST_PROMOTE) \
    X(CROSS_ENTROPY, "cross_entropy", gdl__bw_xent, 0, GDL_AUTOCAST_F32) \
    X(NLL_LOSS, "nll_loss", gdl__bw_xent, 0, GDL_AUTOCAST_F32) \
    X(MSE, "mse_loss", gdl__bw_pointwise_loss, 0, GDL_AUTOCAST_F32) \
    X(BCE_WITH_LOGITS, "bce_with_logits", gdl__bw_pointwise_loss, 0, GDL_AUTOCAST_F32) \
    X(TO, "to", gdl__bw_to, 0, GDL_AUTOCAST_PROMOTE) \
    X(CAST, "cast", gdl__bw_cast, 0, GDL_AUTOCAST_PROMOTE)

typedef enum gdl_autocast_class {
    GDL_AUTOCAST_PROMOTE = 0, /* the inputs' widest floating dtype */
    GDL_AUTOCAST_LOW,         /* the autocast dtype (bf16 / f16), accumulating in f32 */
    GDL_AUTOCAST_F32          /* f32 */
} gdl_autocast_class;

#define GDL__OP_ENUM(id, name, backward, kernel, autocast) GDL_OP_##id,
typedef enum gdl_op { GDL_OP_LIST(GDL__OP_ENUM) GDL_OP_COUNT } gdl_op;
#undef GDL__OP_ENUM
GPUDL_API const char *gdl_op_name(int op);
GPUDL_API int gdl_op_autocast_class(int op); /* gdl_autocast_class; -1 for an invalid op */

/* Autocast (MANUAL: Mixed precision), torch.autocast's regions: per host
   thread, nestable (gdl_autocast_end restores the enclosing region's state). */
GPUDL_API int gdl_autocast_begin(gdl_dtype dt); /* GDL_BF16 or GDL_F16; -1 + error otherwise */
GPUDL_API int gdl_autocast_end(void);           /* -1 + error without an open region */
GPUDL_API int gdl_autocast_enabled(void);       /* 1 inside a region on this thread */
GPUDL_API gdl_dtype gdl_autocast_dtype(void);   /* the region's dtype; GDL_F32 outside */
/* this thread's counts since it started: casts autocast made, and casts of parameters taken from its cache */
GPUDL_API void gdl_autocast_stats(int64_t *casts, int64_t *cache_hits);
GPUDL_API int gdl_tensor_op(const gdl_tensor *t); /* the op that made t, -1 for a leaf */

/* Anomaly mode: every op checks its outputs (forward and backward) and
   fails with "gdl_<op>: produced NaN/Inf ..." at the first non-finite. */
GPUDL_API void gdl_set_anomaly_mode(int on);

/* ---------------------------------------------------------------------------
   [api-formats] data and checkpoint files: IDX (MNIST, Fashion-MNIST),
   CIFAR-10 binary, safetensors. Every loader returns 0 on success and -1 with
   gdl_last_error() set ("gdl_idx_load: PATH: truncated: expected ..."); on
   failure the outputs are left untouched and nothing is leaked.
   ------------------------------------------------------------------------- */

#define GDL_IDX_MAX_DIMS 8
#define GDL_ST_MAX_DIMS 8
#define GDL_ST_NAME_MAX 256  /* tensor names are at most 255 bytes */

/* An IDX file: data in C order, already converted to host byte order. */
typedef struct gdl_idx {
    int dtype_code;               /* 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64 */
    int ndim;                     /* 1..8 */
    int64_t dims[GDL_IDX_MAX_DIMS];
    size_t elem_size;             /* bytes per element: 1, 2, 4 or 8 */
    int64_t count;                /* number of elements: the product of dims */
    void *data;                   /* count * elem_size bytes, owned; free with gdl_idx_free */
} gdl_idx;

/* Load an IDX file, plain or gzipped (gzip needs -DGPUDL_ZLIB -lz). 0 / -1. */
GPUDL_API int gdl_idx_load(const char *path, gdl_idx *out);
/* Release an IDX file's data and zero the struct (NULL-safe). */
GPUDL_API void gdl_idx_free(gdl_idx *idx);
/* Check an (images, labels) pair: u8 [n,rows,cols] and u8 [n], labels < num_classes. 0 / -1. */
GPUDL_API int gdl_idx_check_pair(const gdl_idx *images, const gdl_idx *labels, int num_classes,
                                 const char *what);

/* Load one CIFAR-10 binary file: *images u8 [n,3,32,32] (planes R,G,B), *labels u8 [n]. 0 / -1. */
GPUDL_API int gdl_cifar10_load(const char *path, uint8_t **images, uint8_t **labels, int64_t *n);
/* Load dir/data_batch_1..5.bin concatenated (train != 0) or dir/test_batch.bin. 0 / -1. */
GPUDL_API int gdl_cifar10_load_dir(const char *dir, int train, uint8_t **images, uint8_t **labels,
                                   int64_t *n);

/* One tensor of a safetensors file; its bytes are data[begin, end) of the file. */
typedef struct gdl_st_entry {
    char name[GDL_ST_NAME_MAX];   /* NUL-terminated UTF-8 */
    char dtype[8];                /* "F32", "F16", "BF16", "I64", "U8", "BOOL", ... */
    int ndim;                     /* 0 (a scalar) .. 8 */
    int64_t shape[GDL_ST_MAX_DIMS];
    uint64_t begin, end;          /* byte range in the data buffer */
} gdl_st_entry;

/* A parsed safetensors file. Tensor bytes are little-endian, C order. */
typedef struct gdl_st_file {
    int n;                        /* number of tensors */
    gdl_st_entry *entries;        /* in header order */
    int n_meta;                   /* number of __metadata__ pairs */
    char **meta_keys, **meta_vals;/* NUL-terminated UTF-8 strings */
    const unsigned char *data;    /* the data buffer: data_len bytes */
    uint64_t data_len;
    unsigned char *owned;         /* private: the file buffer (gdl_st_read) or NULL */
} gdl_st_file;

/* One tensor to write: the bytes are read in host order, written little-endian. */
typedef struct gdl_st_tensor {
    const char *name;             /* unique, valid UTF-8, < 256 bytes, not "__metadata__" */
    const char *dtype;            /* a name gdl_st_dtype_size() knows */
    int ndim;                     /* 0..8 */
    const int64_t *shape;         /* ndim dims >= 0 (may be NULL when ndim == 0) */
    const void *data;             /* dtype size * prod(shape) bytes (may be NULL when 0) */
} gdl_st_tensor;

/* Bytes per element of a safetensors dtype name ("F32" -> 4), 0 if unknown. */
GPUDL_API size_t gdl_st_dtype_size(const char *dtype);
/* Read and validate a whole .safetensors file. 0 / -1; *out untouched on failure. */
GPUDL_API int gdl_st_read(const char *path, gdl_st_file *out);
/* Validate buf[0, len) as safetensors; out->data points INTO buf (keep it alive). 0 / -1. */
GPUDL_API int gdl_st_parse(const unsigned char *buf, uint64_t len, gdl_st_file *out, const char *what);
/* Release what gdl_st_read / gdl_st_parse allocated and zero the struct (NULL-safe). */
GPUDL_API void gdl_st_free(gdl_st_file *f);
/* The entry called name, or NULL. */
GPUDL_API const gdl_st_entry *gdl_st_find(const gdl_st_file *f, const char *name);
/* Write tensors in the given order + metadata atomically (path.tmp.*, fsync, rename); path kept on failure.
   Temporaries left by saves that were killed (their process is gone) are removed first. 0 / -1. */
GPUDL_API int gdl_st_write(const char *path, int n, const gdl_st_tensor *tensors, int n_meta,
                           const char *const *meta_keys, const char *const *meta_vals);

/* ---------------------------------------------------------------------------
   [api-data]   Datasets, transforms and the DataLoader (PyTorch's Dataset,
   torchvision.transforms and torch.utils.data.DataLoader).

       gdl_dataset *ds = gdl_dataset_fashion_mnist(NULL, 1);   // 60000 x [1,28,28]
       gdl_loader_opts o = gdl_loader_defaults();
       o.batch_size = 128; o.shuffle = 1; o.num_workers = 2; o.device = dev;
       gdl_loader *L = gdl_loader_new(ds, &o);
       for (int epoch = 0; epoch < 10; epoch++) {
           gdl_tensor *x, *y;                 // f32 [B,1,28,28], i32 [B] on dev
           gdl_loader_set_epoch(L, epoch);
           while (gdl_loader_next(L, &x, &y) == 1) { ... a training step ... }
       }
       gdl_loader_free(L); gdl_dataset_free(ds);

   A dataset keeps its samples on the host, compactly (u8 pixels as loaded,
   or f32). The loader turns each sample into f32 when it assembles a batch:
   u8 scaled to [0,1] (ToTensor), then the transform in this order:
   Normalize(mean, std) per channel, RandomCrop(size, padding) with zero
   padding (the zeros are placed after normalisation), RandomHorizontalFlip().
   The random choices of a sample are a function of (seed, epoch, sample
   index) only, so a run is reproducible and does not depend on num_workers.
   A dataset must outlive the loaders made from it; neither is thread-safe
   (use each from one thread; the loader's workers are internal).
   ------------------------------------------------------------------------- */

/* A labelled dataset in host memory. Read the fields; do not change them. */
typedef struct gdl_dataset {
    int64_t n;                      /* number of samples, >= 1 */
    int ndim;                       /* sample dims, 1 .. GDL_MAX_DIMS-1 */
    int64_t shape[GDL_MAX_DIMS];    /* sample shape, e.g. [1,28,28], [3,32,32], [D] */
    int64_t sample_numel;           /* elements per sample */
    gdl_dtype dtype;                /* storage: GDL_U8 or GDL_F32 (gdl_real) */
    int num_classes;                /* labels are in [0, num_classes) */
    void *x;                        /* n * sample_numel elements of dtype, C order */
    int32_t *labels;                /* n labels */
} gdl_dataset;

/* A copy of x (n samples of sample_shape, dtype GDL_U8 or GDL_F32 = gdl_real) and labels. NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_from_arrays(const void *x, gdl_dtype x_dtype, int ndim,
                                               const int64_t *sample_shape, const int32_t *labels,
                                               int64_t n, int num_classes);
/* IDX images u8 [N,H,W] + labels u8 [N] (plain or gzipped), 10 classes; samples [1,H,W]. NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_from_idx(const char *images_path, const char *labels_path);
/* gdl_dataset_from_idx with num_classes (1..256) classes, e.g. 26 for EMNIST letters. NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_from_idx_ex(const char *images_path, const char *labels_path,
                                               int num_classes);
/* CIFAR-10 binary: dir/data_batch_1..5.bin (train != 0) or dir/test_batch.bin; u8 [3,32,32]. NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_from_cifar10(const char *dir, int train);
/* Fashion-MNIST train (60000) or t10k (10000) split, [1,28,28] u8, 10 classes. dir != NULL: only
   that dir; NULL: the directory in the environment variable GPUDL_DATA if it is set and not
   empty (only there), else ./data, then /usr/share/datasets/fashion-mnist (apt-get install
   dataset-fashion-mnist; in gpudl's repository `make data` installs or downloads them).
   Files *-idx?-ubyte or *-idx?-ubyte.gz (needs GPUDL_ZLIB). NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_fashion_mnist(const char *dir_or_NULL, int train);
/* A new dataset holding a copy of samples [start, start+count) of ds. NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_subset(const gdl_dataset *ds, int64_t start, int64_t count);
/* Release a dataset (NULL-safe). Free its loaders first. */
GPUDL_API void gdl_dataset_free(gdl_dataset *ds);

#define GDL_TRANSFORM_MAX_CHANNELS 16

/* Per-sample transforms; all zero (memset) means none. Crop and flip need [C,H,W] or [H,W] samples. */
typedef struct gdl_transform {
    int normalize;                  /* channels to normalise: 0 off, 1 (one mean/std for all), or shape[0] */
    double mean[GDL_TRANSFORM_MAX_CHANNELS]; /* x = (x - mean[c]) / std[c], after scaling u8 to [0,1] */
    double std[GDL_TRANSFORM_MAX_CHANNELS];  /* each > 0 */
    int crop_padding;               /* RandomCrop: zeros added on each side before cropping, >= 0 */
    int crop_size;                  /* RandomCrop output H = W (batches [B,C,size,size]); 0: the sample's H, W */
    int hflip;                      /* RandomHorizontalFlip with p = 0.5 */
} gdl_transform;

/* DataLoader options; start from gdl_loader_defaults(). */
typedef struct gdl_loader_opts {
    int64_t batch_size;             /* default 1, as PyTorch */
    int shuffle;                    /* a new permutation each epoch, a function of (seed, epoch); default 0 */
    int drop_last;                  /* drop the last incomplete batch; default 0 */
    int num_workers;                /* threads assembling batches ahead; 0 (default, and always under
                                       GPUDL_NO_THREADS): assembled inline in gdl_loader_next */
    int prefetch;                   /* batches assembled ahead (raised to num_workers; 0 means 2); default 2 */
    uint64_t seed;                  /* shuffle and random transforms; default 0 */
    int pin_memory;                 /* CUDA device: page-locked host buffers, copied on the loader's own stream
                                       into one of two device buffers, ordered against the compute stream with
                                       events, so the host never waits for the device; CPU: no effect */
    gdl_device device;              /* where batches are delivered; default cpu */
    gdl_transform transform;        /* default: none */
    /* DistributedSampler: deliver only this process's shard of each epoch, as PyTorch's sampler does:
       the epoch's indices (shuffled alike on every rank: same seed) are padded to a multiple of
       num_replicas by repeating the first ones, and rank r takes positions r, r + num_replicas, ...
       Every rank then has ceil(N / num_replicas) samples. 0 or 1 (default 0): the whole dataset.
       gdl_dist_world_size() and gdl_dist_rank() give the values for a distributed job. */
    int num_replicas, rank;
} gdl_loader_opts;

typedef struct gdl_loader gdl_loader;

/* batch_size 1, no shuffle, no drop_last, 0 workers, prefetch 2, seed 0, cpu, no transform. */
GPUDL_API gdl_loader_opts gdl_loader_defaults(void);
/* A loader over ds (which must outlive it); o NULL means defaults. NULL + error. */
GPUDL_API gdl_loader *gdl_loader_new(gdl_dataset *ds, const gdl_loader_opts *o);
/* 1: *x f32 [B, sample shape] and *y i32 [B] on the loader's device (owned by the loader: do not free;
   persistent, so gdl_arena_reset keeps them; valid until the next call); 0: end of the epoch, *x = *y =
   NULL (the next call starts the next epoch); -1: error. A GPU batch is copied after a device sync. */
GPUDL_API int gdl_loader_next(gdl_loader *l, gdl_tensor **x, gdl_tensor **y);
/* Batches per epoch: floor(N/B) with drop_last, else ceil(N/B) (the last one smaller). -1 if l is NULL. */
GPUDL_API int64_t gdl_loader_num_batches(const gdl_loader *l);
/* The epoch the next batches come from (abandons an epoch in progress). 0 / -1. */
GPUDL_API int gdl_loader_set_epoch(gdl_loader *l, uint64_t epoch);
/* The current epoch number: starts at 0, +1 after each epoch's end (0 returned by next). */
GPUDL_API uint64_t gdl_loader_epoch(const gdl_loader *l);
/* Resume mid-epoch: the next batch handed out is batch `batch` (0 .. num_batches) of `epoch`, the very
   batch an uninterrupted run would get there (abandons an epoch in progress). 0 / -1. */
GPUDL_API int gdl_loader_set_position(gdl_loader *l, uint64_t epoch, int64_t batch);
/* Stop and join the workers (also mid-epoch) and free the loader and its batches (NULL-safe). */
GPUDL_API void gdl_loader_free(gdl_loader *l);

/* ---------------------------------------------------------------------------
   [api-nn]   Modules (PyTorch's nn.Module), optimizers (torch.optim) and
   learning-rate schedulers (torch.optim.lr_scheduler).

   Modules
   -------
   A gdl_module is a tree: a kind ("Linear", "Sequential", ...), child modules
   (named "0","1",... in a Sequential, "body"/"shortcut" in a Residual), and
   persistent parameters and buffers. Modules are made on the CPU and moved
   with gdl_module_to(). Containers (gdl_nn_sequential, gdl_nn_residual,
   gdl_module_add_child) TAKE OWNERSHIP of the modules given to them, also
   when they fail, so constructors nest without leaks:

       gdl_module *mlp = gdl_nn_sequential(3, (gdl_module *[]){
           gdl_nn_linear(784, 128, 1), gdl_nn_relu(), gdl_nn_linear(128, 10, 1)});
       if (!mlp) fprintf(stderr, "%s\n", gdl_last_error());
       ...
       gdl_module_free(mlp);      // frees the children and every tensor

   Parameters and buffers have PyTorch's state_dict names ("0.weight",
   "1.running_mean", "3.body.0.weight"). Default initialisation is PyTorch's:
   Linear and Conv2d weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))
   (fan_in = in_features, or in_channels/groups*kh*kw), weight first, drawn
   from the global generator (gdl_manual_seed); BatchNorm gamma 1, beta 0,
   running mean 0, running var 1, eps 1e-5, momentum 0.1; LayerNorm gamma 1,
   beta 0, eps 1e-5; Embedding N(0,1). PyTorch's BatchNorm also has an int64
   `num_batches_tracked` buffer, only used when momentum=None; gdl has no
   int64 dtype and always uses the momentum, so it is left out.

   Modules start in training mode; gdl_module_train(m, 0) is PyTorch's
   .eval() (dropout becomes the identity, BatchNorm uses its running stats).

   Optimizers and schedulers
   -------------------------
       gdl_optimizer *opt = gdl_sgd_new(0.1, 0.9, 0, 5e-4, 0);
       gdl_optim_add_module(opt, model, 1);   // no weight decay on biases/norms
       gdl_scheduler *sched = gdl_cosine_lr_new(opt, epochs, 0);
       for each epoch { for each batch {
           gdl_arena_reset(); gdl_zero_grad(opt);
           loss = gdl_cross_entropy(gdl_forward(model, x), y);
           gdl_backward(loss); gdl_step(opt); }
         gdl_scheduler_step(sched); }
       gdl_scheduler_free(sched); gdl_optim_free(opt); gdl_module_free(model);

   The optimizer keeps pointers to the parameters (they must outlive the
   optimizer's use) and persistent state tensors made lazily (zeros) at a
   parameter's first step or by gdl_optim_state. The formulas are
   PyTorch's, step for step (docs/DESIGN.md). Schedulers compute each group's
   lr in closed form from their step count (last_epoch), as PyTorch's
   _get_closed_form_lr does, so a restored scheduler continues exactly; one
   scheduler per optimizer (a second one overwrites the lr of the first).
   Free schedulers before their optimizer, the optimizer before the model.

   The flat parameter buffer
   -------------------------
   At its first gdl_zero_grad, gdl_step or gdl_optim_state an optimizer
   makes one allocation per device its parameters are on, and moves into it
   (in parameter order, every slot 64-byte aligned) the parameters, then
   their gradients in the same layout, then SGD's momentum buffers or Adam's
   exp_avg and exp_avg_sq, then its per-group hyper-parameters and
   per-parameter step counts. The same gdl_tensor pointers now view the
   buffer, so modules, checkpoints and user code see no change; backward
   gives a parameter its gradient slot; the buffer lives as long as any
   tensor viewing it (parameters may outlive the optimizer). Consequences:
   * gdl_zero_grad is one memset per device; gdl_step is one backend call
     (one kernel launch) per device over a table of the parameters that is
     made once and kept while they stay the same;
   * the kernels read lr, the other hyper-parameters and the step counts
     (hence Adam's bias corrections) from the buffer, and advance the counts
     themselves: a steady-state step copies nothing to the device and waits
     for nothing, and a captured step stays right when lr changes.
     gdl_optim_set_lr, set_momentum and the schedulers write the new values
     into the buffer at once (an asynchronous copy on the compute stream);
   * the host's step tensors of gdl_optim_state ("state.<i>.step") are read
     back from the buffer by gdl_optim_state (a wait, for checkpoints), and
     written back to it by the next step (so a checkpoint load sets them);
   * the buffer is made again (values, state and counts kept) when
     parameters are added (gdl_optim_add_params) or moved (gdl_module_to to
     another device), or when an SGD without momentum gets some
     (gdl_optim_set_momentum, OneCycle): a step that does so copies and
     allocates. A gradient made outside the buffer (by hand, before it
     existed) is moved into its slot at the next zero_grad or step.
   Two optimizers over the same parameters each take them into their own
   buffer in turn (right, but each switch copies).
   ------------------------------------------------------------------------- */

typedef struct gdl_module gdl_module;       /* opaque: a layer or a tree of layers */
typedef struct gdl_optimizer gdl_optimizer; /* opaque: SGD, Adam or AdamW with param groups */
typedef struct gdl_scheduler gdl_scheduler; /* opaque: a learning-rate schedule */

/* The forward of a custom module (gdl_nn_custom): returns a tensor or NULL + error. */
typedef gdl_tensor *(*gdl_forward_fn)(gdl_module *self, gdl_tensor *x);

/* Which tensors gdl_module_named_tensors lists. */
typedef enum gdl_tensor_set { GDL_PARAMS = 1, GDL_BUFFERS = 2, GDL_PARAMS_AND_BUFFERS = 3 } gdl_tensor_set;

/* ---- layers (NULL + gdl_last_error() on bad arguments) ---- */
/* nn.Linear: y = x W^T + b, W [out,in], b [out] (bias != 0). Input [..., in]. */
GPUDL_API gdl_module *gdl_nn_linear(int64_t in_features, int64_t out_features, int bias);
/* nn.Conv2d, square kernel/stride/padding/dilation; W [out, in/groups, k, k]. Input [N,in,H,W]. */
GPUDL_API gdl_module *gdl_nn_conv2d(int in_channels, int out_channels, int kernel, int stride, int padding,
                                    int dilation, int groups, int bias);
/* nn.Conv2d with separate (h, w) kernel, stride, padding and dilation; NULL stride/padding/dilation = 1/0/1. */
GPUDL_API gdl_module *gdl_nn_conv2d_ex(int in_channels, int out_channels, const int kernel[2], const int stride[2],
                                       const int padding[2], const int dilation[2], int groups, int bias);
/* nn.BatchNorm1d(C): input [N,C] or [N,C,L]; eps 1e-5, momentum 0.1, affine, running stats. */
GPUDL_API gdl_module *gdl_nn_batchnorm1d(int64_t num_features);
/* nn.BatchNorm2d(C): input [N,C,H,W]; eps 1e-5, momentum 0.1, affine, running stats. */
GPUDL_API gdl_module *gdl_nn_batchnorm2d(int64_t num_features);
/* BatchNorm with every option: spatial_dims 1 (BatchNorm1d) or 2 (BatchNorm2d). */
GPUDL_API gdl_module *gdl_nn_batchnorm_ex(int spatial_dims, int64_t num_features, double eps, double momentum,
                                          int affine, int track_running_stats);
/* nn.LayerNorm(D) over the last dim: eps 1e-5, weight 1, bias 0. */
GPUDL_API gdl_module *gdl_nn_layernorm(int64_t normalized_dim);
/* nn.Dropout(p): zeroes with probability p and scales by 1/(1-p) in training; identity in eval. */
GPUDL_API gdl_module *gdl_nn_dropout(double p);
/* nn.Embedding(V, D): i32 indices [...] -> [..., D]; weight [V,D] ~ N(0,1). */
GPUDL_API gdl_module *gdl_nn_embedding(int64_t num_embeddings, int64_t embedding_dim);
/* nn.ReLU() */
GPUDL_API gdl_module *gdl_nn_relu(void);
/* nn.LeakyReLU(negative_slope) (PyTorch's default slope is 0.01) */
GPUDL_API gdl_module *gdl_nn_leaky_relu(double negative_slope);
/* nn.Sigmoid() */
GPUDL_API gdl_module *gdl_nn_sigmoid(void);
/* nn.Tanh() */
GPUDL_API gdl_module *gdl_nn_tanh(void);
/* nn.GELU(approximate = tanh_approx ? "tanh" : "none") */
GPUDL_API gdl_module *gdl_nn_gelu(int tanh_approx);
/* nn.Identity() */
GPUDL_API gdl_module *gdl_nn_identity(void);
/* nn.MaxPool2d(kernel, stride, padding); stride 0 means stride = kernel (PyTorch's None). */
GPUDL_API gdl_module *gdl_nn_maxpool2d(int kernel, int stride, int padding);
/* nn.AvgPool2d(kernel, stride, padding), count_include_pad; stride 0 means kernel. */
GPUDL_API gdl_module *gdl_nn_avgpool2d(int kernel, int stride, int padding);
/* nn.AdaptiveAvgPool2d(1): [N,C,H,W] -> [N,C,1,1]. */
GPUDL_API gdl_module *gdl_nn_global_avgpool2d(void);
/* nn.Flatten(start_dim) (end_dim -1); PyTorch's default start_dim is 1. */
GPUDL_API gdl_module *gdl_nn_flatten(int start_dim);
/* nn.Sequential of n modules (children "0".."n-1"); takes ownership of mods[], also on failure. */
GPUDL_API gdl_module *gdl_nn_sequential(int n, gdl_module *const *mods);
/* Appends m to a Sequential as child "<count>"; takes ownership of m (freed on failure unless it has a parent). 0 / -1. */
GPUDL_API int gdl_nn_sequential_add(gdl_module *seq, gdl_module *m);
/* Fusion in Sequential's forward: a Linear followed by ReLU or GELU (either
   form), or a Conv2d followed by ReLU, runs as one gdl_linear_act /
   gdl_conv2d_act op (fewer kernel launches and memory passes; the same
   outputs and gradients bit for bit in f32 on the CPU). Not fused: under
   anomaly mode, during gdl_module_summary, under autocast or with non-f32
   inputs or parameters. On by default; the environment variable
   GPUDL_NO_FUSION=1 turns it off at start. on: 1 / 0 sets it, -1 only asks;
   returns the previous setting. Process-wide. */
GPUDL_API int gdl_nn_set_fusion(int on);
/* relu(body(x) + shortcut(x)), shortcut NULL = identity (a ResNet basic block); takes ownership of both. */
GPUDL_API gdl_module *gdl_nn_residual(gdl_module *body, gdl_module *shortcut);

/* ---- custom modules ---- */
/* A module of kind `kind` whose forward is `forward`; user data is freed with free_user (may be NULL). */
GPUDL_API gdl_module *gdl_nn_custom(const char *kind, gdl_forward_fn forward, void *user, void (*free_user)(void *));
/* The user pointer given to gdl_nn_custom (NULL for built-in modules). */
GPUDL_API void *gdl_module_user(const gdl_module *m);
/* Adds a named child (no '.' in the name); takes ownership of child, also on failure. 0 / -1. */
GPUDL_API int gdl_module_add_child(gdl_module *m, const char *name, gdl_module *child);
/* Adds a persistent f32 leaf as a parameter (sets requires_grad); takes ownership, also on failure. 0 / -1. */
GPUDL_API int gdl_module_add_param(gdl_module *m, const char *name, gdl_tensor *t);
/* Adds a persistent tensor as a buffer (saved, moved, not trained); takes ownership, also on failure. 0 / -1. */
GPUDL_API int gdl_module_add_buffer(gdl_module *m, const char *name, gdl_tensor *t);

/* ---- using modules ---- */
/* The module's forward on x (a temporary, recorded on the tape); errors name the module ("Linear '0'"). */
GPUDL_API gdl_tensor *gdl_forward(gdl_module *m, gdl_tensor *x);
/* Sets training mode (on != 0) or eval mode on m and all its descendants, like .train()/.eval(). 0 / -1. */
GPUDL_API int gdl_module_train(gdl_module *m, int on);
/* 1 if m is in training mode, 0 in eval mode (or m NULL). */
GPUDL_API int gdl_module_is_training(const gdl_module *m);
/* Moves every parameter (with its grad) and buffer to dev in place (gdl_move_), like model.to(dev). 0 / -1.
   Parameters leave their optimizer's flat buffer; the optimizer makes one on dev at its next use, with the
   state and step counts. */
GPUDL_API int gdl_module_to(gdl_module *m, gdl_device dev);
/* The device of the module's first parameter or buffer (the CPU when it has none). */
GPUDL_API gdl_device gdl_module_device(const gdl_module *m);
/* Frees a root module, its descendants and all their tensors (NULL: no-op; a child: refused). */
GPUDL_API void gdl_module_free(gdl_module *m);
/* Zeroes the grads of all parameters in place (those without a grad are left alone). 0 / -1. */
GPUDL_API int gdl_module_zero_grad(gdl_module *m);

/* ---- introspection and state_dict names ---- */
/* Lists parameters and/or buffers (which: GDL_PARAMS, GDL_BUFFERS or both) in state_dict order with
   their dotted names; fills at most max entries of names/tensors (either may be NULL) and returns the
   total count (max 0 counts), -1 on error. Names stay valid while the module lives. */
GPUDL_API int gdl_module_named_tensors(gdl_module *m, int which, const char **names, gdl_tensor **tensors, int max);
/* The parameter or buffer with state_dict name `name` ("3.body.0.weight"), NULL + error if none. */
GPUDL_API gdl_tensor *gdl_module_tensor(gdl_module *m, const char *name);
/* The descendant at dotted path `path` ("3.body"), NULL + error if none. */
GPUDL_API gdl_module *gdl_module_child(gdl_module *m, const char *path);
/* Number of direct children (0 for NULL). */
GPUDL_API int gdl_module_num_children(const gdl_module *m);
/* The i-th direct child, NULL + error when out of range. */
GPUDL_API gdl_module *gdl_module_child_at(gdl_module *m, int i);
/* The kind: "Linear", "Conv2d", "BatchNorm2d", "Sequential", "Residual", ... ("" for NULL). */
GPUDL_API const char *gdl_module_kind(const gdl_module *m);
/* The name in the parent ("0", "body"); "" for a root. */
GPUDL_API const char *gdl_module_name(const gdl_module *m);
/* Total number of parameter elements, recursively (-1 for NULL). */
GPUDL_API int64_t gdl_module_num_params(const gdl_module *m);
/* Keras-style summary: runs a no-grad eval-mode forward on zeros of input_shape (i32 zeros when the
   first layer is an Embedding) on the module's device, then prints layer, output shape and parameter
   count per module and the totals to f. Training flags are restored after. 0 / -1. */
GPUDL_API int gdl_module_summary(gdl_module *m, int ndim, const int64_t *input_shape, FILE *f);

/* ---- optimizers (NULL + error on bad hyperparameters) ---- */
/* torch.optim.SGD(lr, momentum, dampening, weight_decay, nesterov); nesterov needs momentum > 0, dampening 0. */
GPUDL_API gdl_optimizer *gdl_sgd_new(double lr, double momentum, double dampening, double weight_decay, int nesterov);
/* torch.optim.Adam (PyTorch defaults: 1e-3, 0.9, 0.999, 1e-8, 0); L2 weight decay added to the gradient. */
GPUDL_API gdl_optimizer *gdl_adam_new(double lr, double beta1, double beta2, double eps, double weight_decay);
/* torch.optim.AdamW (PyTorch defaults: 1e-3, 0.9, 0.999, 1e-8, 1e-2); decoupled weight decay. */
GPUDL_API gdl_optimizer *gdl_adamw_new(double lr, double beta1, double beta2, double eps, double weight_decay);
/* Adds a parameter group (persistent f32 leaves, or of the master weights' dtype, each in one group only); lr or
   weight_decay < 0 takes the optimizer's default. Returns the group index, -1 on error. */
GPUDL_API int gdl_optim_add_params(gdl_optimizer *opt, gdl_tensor *const *params, int n, double lr, double weight_decay);
/* Master weights (llm.c's, for memory): dt GDL_BF16 or GDL_F16 makes every parameter of opt a dt tensor (the same
   gdl_tensor pointers, rounded to nearest even) with dt gradients, while the optimizer keeps an f32 master copy of
   each in its flat buffer, with its state in f32; a step reads the dt gradient, updates master and state by the
   same f32 formulas and writes the parameter rounded from the master (one launch). GDL_F32 turns it off: the
   parameters become f32 again, with their masters' values. Parameters added later convert at the optimizer's
   next use. Gradients present are converted too. See MANUAL "Master weights". 0 / -1. */
GPUDL_API int gdl_optim_set_master_weights(gdl_optimizer *opt, gdl_dtype dt);
/* The parameters' dtype with master weights, GDL_F32 when off (or opt NULL). */
GPUDL_API gdl_dtype gdl_optim_master_weights(const gdl_optimizer *opt);
/* Parameter i's f32 master (a view of the flat buffer; owned by opt), NULL + error without master weights. */
GPUDL_API gdl_tensor *gdl_optim_master_weight(gdl_optimizer *opt, int i);
/* Adds m's parameters: one group, or with no_decay_on_bias_and_norm two groups, the 2-D+ weights with the
   default weight decay and the 0-D/1-D ones (biases, norm weights) with 0 (empty groups are skipped). 0 / -1. */
GPUDL_API int gdl_optim_add_module(gdl_optimizer *opt, gdl_module *m, int no_decay_on_bias_and_norm);
/* Zeroes every parameter's grad in place (PyTorch's zero_grad(set_to_none=False)): one memset per device
   over the flat gradient buffer (made here if not yet). 0 / -1. */
GPUDL_API int gdl_zero_grad(gdl_optimizer *opt);
/* set_to_none != 0: frees the grads instead (PyTorch's default), so untouched parameters are skipped by gdl_step;
   the next backward gives each parameter its slot of the flat buffer again (zeroed). */
GPUDL_API int gdl_zero_grad_ex(gdl_optimizer *opt, int set_to_none);
/* One optimizer step over every parameter that has a grad (others are skipped, as in PyTorch). 0 / -1.
   All or nothing: everything is checked and all missing state made first, then one multi-tensor update per
   device (one kernel launch on a GPU, as PyTorch's foreach optimizers); on an error (out of memory, a failed
   launch) no parameter, state tensor or step count has changed, so the step can be retried. In steady state
   nothing is copied to the device, allocated or waited for (see "The flat parameter buffer"). */
GPUDL_API int gdl_step(gdl_optimizer *opt);
/* torch.nn.utils.clip_grad_norm_: global L2 norm of the grads; if max_norm/(norm+1e-6) < 1 the grads are
   scaled by it. Returns the norm before clipping, -1 on error. */
GPUDL_API double gdl_clip_grad_norm(gdl_tensor *const *params, int n, double max_norm);
/* gdl_clip_grad_norm over all of the optimizer's parameters. */
GPUDL_API double gdl_optim_clip_grad_norm(gdl_optimizer *opt, double max_norm);
/* The same clipping without reading the norm back (0 / -1): on a GPU the norm and the scaling stay on
   the device (three kernel launches, no host synchronisation), as gdl_fit's clip_grad_norm does. */
GPUDL_API int gdl_clip_grad_norm_nosync(gdl_tensor *const *params, int n, double max_norm);
/* Lists the optimizer state for checkpoints, creating missing state (zeros, step 0): per parameter index i
   (in the order added) "state.<i>.step" (i32 scalar on the CPU) and "state.<i>.momentum_buffer" (SGD with
   momentum) or "state.<i>.exp_avg", "state.<i>.exp_avg_sq" (Adam, AdamW; views of the flat buffer). Fills at
   most max entries (names or tensors may be NULL), returns the total count, -1 on error. Names live as long
   as opt. The step tensors are read back from the device here (a wait); values written into them reach the
   device at the next step. */
GPUDL_API int gdl_optim_state(gdl_optimizer *opt, const char **names, gdl_tensor **tensors, int max);
/* Number of gdl_step calls made, steps a GradScaler skipped on the device included (-1 for NULL). */
GPUDL_API int64_t gdl_optim_get_step(const gdl_optimizer *opt);
/* Sets that count (for checkpoints; the per-parameter steps are in gdl_optim_state). 0 / -1. */
GPUDL_API int gdl_optim_set_step(gdl_optimizer *opt, int64_t step);
/* Number of parameter groups (-1 for NULL). */
GPUDL_API int gdl_optim_num_groups(const gdl_optimizer *opt);
/* Number of parameters over all groups (-1 for NULL). */
GPUDL_API int gdl_optim_num_params(const gdl_optimizer *opt);
/* The learning rate of a group (NaN + error if out of range). */
GPUDL_API double gdl_optim_get_lr(const gdl_optimizer *opt, int group);
/* Sets the learning rate of a group (lr >= 0), also in the flat buffer (an asynchronous copy). 0 / -1. */
GPUDL_API int gdl_optim_set_lr(gdl_optimizer *opt, int group, double lr);
/* A group's momentum (SGD) or beta1 (Adam, AdamW) (NaN + error if out of range). */
GPUDL_API double gdl_optim_get_momentum(const gdl_optimizer *opt, int group);
/* Sets a group's momentum (SGD) or beta1 (Adam, AdamW), in [0,1). 0 / -1. */
GPUDL_API int gdl_optim_set_momentum(gdl_optimizer *opt, int group, double momentum);
/* Frees the optimizer and its state (not the parameters). NULL: no-op. */
GPUDL_API void gdl_optim_free(gdl_optimizer *opt);

/* ---- learning-rate schedulers: each sets lr = f(last_epoch, base lr of the group) on creation
   (last_epoch 0) and on every gdl_scheduler_step ---- */
/* StepLR: lr = base * gamma^floor(last_epoch / step_size). */
GPUDL_API gdl_scheduler *gdl_steplr_new(gdl_optimizer *opt, int step_size, double gamma);
/* CosineAnnealingLR: lr = eta_min + (base - eta_min) * (1 + cos(pi * last_epoch / T_max)) / 2. */
GPUDL_API gdl_scheduler *gdl_cosine_lr_new(gdl_optimizer *opt, int T_max, double eta_min);
/* OneCycleLR(max_lr, total_steps): pct_start 0.3, div_factor 25, final_div_factor 1e4, cosine annealing,
   cycle_momentum on (momentum or beta1 0.95 -> 0.85 -> 0.95, as PyTorch; plain SGD gets momentum too). */
GPUDL_API gdl_scheduler *gdl_onecycle_lr_new(gdl_optimizer *opt, double max_lr, int total_steps);
/* OneCycleLR with every option (PyTorch's defaults: 0.3, 25, 1e4, 1, 0.85, 0.95). */
GPUDL_API gdl_scheduler *gdl_onecycle_lr_new_ex(gdl_optimizer *opt, double max_lr, int total_steps, double pct_start,
                                                double div_factor, double final_div_factor, int cycle_momentum,
                                                double base_momentum, double max_momentum);
/* LinearLR: lr = base * (start + (end - start) * min(last_epoch, total_iters) / total_iters). */
GPUDL_API gdl_scheduler *gdl_linear_warmup_new(gdl_optimizer *opt, double start_factor, double end_factor,
                                               int total_iters);
/* Advances last_epoch by one and sets the groups' lr (OneCycle refuses to pass total_steps). 0 / -1. */
GPUDL_API int gdl_scheduler_step(gdl_scheduler *s);
/* The scheduler's step count, last_epoch (0 after creation; -1 for NULL). */
GPUDL_API int64_t gdl_scheduler_get_last_epoch(const gdl_scheduler *s);
/* Sets last_epoch (for checkpoints) and applies the lr (and momentum) for it. 0 / -1. */
GPUDL_API int gdl_scheduler_set_last_epoch(gdl_scheduler *s, int64_t last_epoch);
/* The lr the scheduler last set for a group (NaN + error if out of range). */
GPUDL_API double gdl_scheduler_get_lr(const gdl_scheduler *s, int group);
/* Frees the scheduler (not the optimizer). NULL: no-op. */
GPUDL_API void gdl_scheduler_free(gdl_scheduler *s);

/* ---- GradScaler (torch.amp.GradScaler; MANUAL: "GradScaler"): the loss scaled before backward, the gradients
   unscaled and checked for inf/NaN, the step skipped and the scale backed off on an overflow, all on the device
   with no host synchronisation ---- */
typedef struct gdl_grad_scaler gdl_grad_scaler;
typedef struct gdl_grad_scaler_opts {
    double init_scale;     /* default 65536 (2^16); > 0 */
    double growth_factor;  /* default 2; > 1 */
    double backoff_factor; /* default 0.5; in (0,1) */
    int growth_interval;   /* default 2000 clean steps before the scale grows; >= 1 */
    int enabled;           /* default 1; 0: scale returns the loss, unscale and update do nothing, step is gdl_step */
} gdl_grad_scaler_opts;
GPUDL_API gdl_grad_scaler_opts gdl_grad_scaler_defaults(void);
/* NULL opts: the defaults. NULL + error on bad options. The scale lives on the device of the first loss scaled. */
GPUDL_API gdl_grad_scaler *gdl_grad_scaler_new(const gdl_grad_scaler_opts *o);
/* loss * scale (differentiable; the scale is read from device memory, nothing is waited for). A temporary. */
GPUDL_API gdl_tensor *gdl_grad_scaler_scale(gdl_grad_scaler *s, gdl_tensor *loss);
/* unscale_: every gradient of opt times (float)(1/(double)scale), and the step's found_inf flag set when one
   was inf or NaN. At most once per optimizer between updates, before gdl_grad_scaler_step. 0 / -1. */
GPUDL_API int gdl_grad_scaler_unscale(gdl_grad_scaler *s, gdl_optimizer *opt);
/* Unscales (if not done yet), then gdl_step, which the optimizer's kernels skip on the device when found_inf is
   set (no parameter, state or step count changes). 0 / -1. */
GPUDL_API int gdl_grad_scaler_step(gdl_grad_scaler *s, gdl_optimizer *opt);
/* _amp_update_scale_: after an overflow scale *= backoff_factor and the tracker restarts; else the tracker
   counts, and at growth_interval scale *= growth_factor (if finite) and the tracker restarts. Clears found_inf
   for the next step. 0 / -1 (also when no optimizer was unscaled or stepped since the last update). */
GPUDL_API int gdl_grad_scaler_update(gdl_grad_scaler *s);
/* The current scale (reads the device: a wait). 1.0 when disabled; NaN + error for NULL. */
GPUDL_API double gdl_grad_scaler_get_scale(gdl_grad_scaler *s);
/* The clean steps counted towards the next growth (reads the device). -1 + error for NULL. */
GPUDL_API int64_t gdl_grad_scaler_get_growth_tracker(gdl_grad_scaler *s);
/* Sets the scale (> 0, finite) and the growth tracker (>= 0), as load_state_dict. 0 / -1. */
GPUDL_API int gdl_grad_scaler_set_state(gdl_grad_scaler *s, double scale, int64_t growth_tracker);
/* Attaches s to opt (NULL detaches) so gdl_save_checkpoint / gdl_load_checkpoint with opt save and restore its
   state ("scaler.scale", "scaler.growth_tracker", the factors and the interval: PyTorch's state_dict); gdl_grad_scaler_unscale attaches it too. An optimizer has
   at most one scaler. 0 / -1. */
GPUDL_API int gdl_optim_set_grad_scaler(gdl_optimizer *opt, gdl_grad_scaler *s);
/* Frees the scaler (detaching it from its optimizers). NULL: no-op. */
GPUDL_API void gdl_grad_scaler_free(gdl_grad_scaler *s);

/* ---------------------------------------------------------------------------
   [api-train]   Keras-style fit/evaluate, and checkpoints.
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
                                   [api-dist]). Give each rank its shard of the data (the loader's num_replicas,
                                   rank). NULL (default): one process */
    int cuda_graph;             /* 1 (default): on a GPU, after an input shape's first (eager) step its whole step
                                   (forward, loss, backward, optimizer, zero_grad, the metrics) is captured as a
                                   CUDA graph ([api-graph]) and later batches of that shape replay it: one
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
} gdl_fit_opts;

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

/* Model parameters and buffers, PyTorch names, F32. 0 / -1. */
GPUDL_API int gdl_save_model(gdl_module *m, const char *path);
/* Strict: the file must hold exactly the model's names with matching shapes (F32, F16, BF16 or F64). 0 / -1. */
GPUDL_API int gdl_load_model(gdl_module *m, const char *path);
/* The full training state; opt, sched may be NULL. epoch is the caller's counter. 0 / -1. */
GPUDL_API int gdl_save_checkpoint(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                                  int64_t epoch);
GPUDL_API int gdl_load_checkpoint(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                                  int64_t *epoch);

/* ---------------------------------------------------------------------------
   [api-graph]   A whole training step captured once and replayed, as
   torch.cuda.graphs: on a GPU, a step of small kernels costs more in launch
   overhead than in work; a graph launches all of them with one call.
       typedef struct { gdl_tensor *x, *y, *loss; ... } my_step;
       static int step(void *c) {           // zero_grad, forward, loss,
           my_step *s = c; ...               // backward, update: no host reads
           s->loss = gdl_cross_entropy(gdl_forward(m, s->x), s->y);
           return s->loss && gdl_backward(s->loss) == 0 ? 0 : -1;
       }
       gdl_graph *g = gdl_graph_capture(dev, step, &s);  // runs the step once
       for (...) { gdl_copy_(s.x, next_x); gdl_copy_(s.y, next_y); gdl_graph_replay(g); }
       printf("%f\n", gdl_item(s.loss));    // the last replay's loss
       gdl_graph_free(g);
   gdl_graph_capture first runs the step once for real (a warm-up that makes
   the gradients, optimizer state, cuBLAS workspace and step arena), then
   records a second call of it without running it. Each replay runs the
   recorded kernels again on the same memory. The rules, as CUDA's:
   * inputs go into the same tensors before each replay (gdl_copy_); the
     step's temporaries (the loss) keep their addresses and hold the last
     replay's values until the next gdl_arena_reset;
   * inside the step: no host reads (gdl_item, gdl_copy_to_host), no new
     persistent tensors or other device allocations, no dropout (its mask
     would repeat); such a call fails the capture with an error naming it,
     and nothing of the device's memory has changed since the warm-up;
   * host values the step passes to kernels are recorded: a learning rate or
     a step count read on the host stays as it was at capture;
   * the memory a graph runs on (the step arena, workspaces kept by the
     backend) lives until gdl_shutdown: replay nothing after it. A CUDA
     device keeps the clipping tables of the last 16 sets of gradients
     clipped: record a graph again after clipping 16 other sets.
   gdl_fit does all this itself on a GPU (gdl_fit_opts.cuda_graph), with no
   copy of the inputs: its graphs read the loader's own device buffers.
   gdl_graph_capture resets the arena before the warm-up and before the
   capture. On the CPU there are no graphs: a replay resets the arena and
   calls the step again, so one program runs unchanged on both devices.
   ------------------------------------------------------------------------- */

typedef struct gdl_graph gdl_graph;
/* The step's graph on dev (after one real run of the step). NULL + error. */
GPUDL_API gdl_graph *gdl_graph_capture(gdl_device dev, int (*step)(void *ctx), void *ctx);
/* Runs the recorded step once more, queued on the device's compute stream. 0 / -1. */
GPUDL_API int gdl_graph_replay(gdl_graph *g);
GPUDL_API void gdl_graph_free(gdl_graph *g);
/* 1 while gdl_graph_capture records a step (ops that cannot be captured ask) */
GPUDL_API int gdl_graph_is_capturing(void);

/* ---------------------------------------------------------------------------
   [api-dist]   Several processes training one model (data parallel), as
   launched by torchrun, Slurm's srun or OpenMPI's mpirun:

       gdl_dist_init();                          // reads the launcher's variables
       gdl_device dev = gdl_dist_device();       // cuda:(local rank) or cpu
       o.num_replicas = gdl_dist_world_size();   // the loader's shard (DistributedSampler)
       o.rank = gdl_dist_rank();
       ... forward, backward, then for every parameter:
       gdl_dist_all_reduce(p->grad, GDL_AVG);    // the same gradient on every rank
       ... gdl_step(opt); and at the end gdl_dist_shutdown();

   The environment, first match wins:
     torchrun   RANK, WORLD_SIZE, LOCAL_RANK (MASTER_ADDR, MASTER_PORT)
     mpirun     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
     srun       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (start the processes with
                srun: inside an sbatch script without srun, SLURM_NTASKS counts
                processes that were never started)
     Kubernetes Indexed Job   JOB_COMPLETION_INDEX (without RANK), WORLD_SIZE (set in the
                manifest), LOCAL_RANK optional (0)
     Kubeflow PyTorchJob      RANK, WORLD_SIZE (one process per pod; LOCAL_RANK optional, 0),
                with its PET_* variables (PET_NPROC_PER_NODE must be 1)
     Kubeflow PET_* alone     PET_NNODES (N, or an elastic N:N), PET_NODE_RANK, PET_NPROC_PER_NODE
                1 (TrainJob; torchrun's variables): rank PET_NODE_RANK of PET_NNODES
   none: a single process (rank 0 of 1). A variable missing, not a whole
   number or out of range is an error naming it. The rendezvous without MPI
   reads MASTER_ADDR and MASTER_PORT, else PET_MASTER_ADDR and PET_MASTER_PORT;
   in a process srun started, an unset MASTER_ADDR is the first host of
   SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST, SLURM_NODELIST: Slurm's host
   list syntax, gdl_hostlist_host below), where srun starts rank 0, and an
   unset MASTER_PORT is 20000 + SLURM_JOB_ID mod 20000.

   Transports: collectives of CPU tensors go through MPI; collectives of CUDA
   tensors (and gdl_ddp over a module on a GPU) through NCCL, one GPU per
   process (cuda:(local rank)), on a communication stream of that device:
   it starts after the compute stream's work so far (a gradient bucket is
   complete), and the compute stream waits for it before what comes next
   (DDP: before the gradients are taken back, so the optimizer reads
   averaged gradients); the host does not wait. NCCL's unique id (128 bytes)
   is made by rank 0 at gdl_dist_init and handed round over MPI (MPI_Bcast)
   when built with -DGPUDL_MPI, otherwise over TCP: rank 0 listens at
   MASTER_PORT, the others connect to MASTER_ADDR:MASTER_PORT (retrying
   until rank 0 is up) and receive it. The communicator itself is made at
   the first collective of a CUDA tensor (gdl_ddp_new's broadcast), which
   returns once every rank has made its own. gdl_fit's epoch figures under
   DDP are summed over MPI, or without MPI through NCCL. Builds:
     CPU, MPI:    mpicc -O2 -DGPUDL_MPI app.c -lm -pthread -o app
     GPU, NCCL:   nvcc -O3 -arch=sm_90 -DGPUDL_CUDA app.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -o app
     both (CPU tensors over MPI, CUDA tensors over NCCL, the id over MPI):
                  nvcc -O3 -arch=sm_90 -DGPUDL_CUDA -c gpudl_cuda.cu
                  mpicc -O2 -DGPUDL_MPI -DGPUDL_CUDA -c app.c
                  mpicc app.o gpudl_cuda.o -L/usr/local/cuda/lib64 -lcudart -lcublas -lcublasLt -lnccl -lstdc++ -lm \
                      -pthread -o app
   Launch (2 GPUs on one machine):
     mpirun -np 2 ./app                                         (MPI build)
     torchrun-style, no MPI: one process per GPU, e.g.
       for r in 0 1; do RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
                        MASTER_PORT=29500 ./app & done; wait
     srun -n 2 ./app        (MPI build; or set MASTER_ADDR/MASTER_PORT too)
   Without MPI, a job of several processes needs a GPU (NCCL) and its
   collectives of CPU tensors are refused (they say to build with
   -DGPUDL_MPI); without MPI or a GPU it is refused at gdl_dist_init. One
   process on a GPU goes through NCCL too (a communicator of one rank).

   A rank that stalls or dies: gpudl's waits for the other ranks last at
   most gdl_dist_timeout() seconds, like the timeout of PyTorch's
   init_process_group: GPUDL_DIST_TIMEOUT=<seconds> (read at gdl_dist_init;
   'inf': for ever), or gdl_dist_set_timeout, which wins over the variable
   from its first call on (a later gdl_dist_init still checks the variable
   but keeps the call's value); default 600 (PyTorch's for NCCL; tests use 1 or 2). Bounded:
   - with MPI, every collective of CPU tensors, gdl_ddp_backward's gradient
     all-reduces, gdl_dist_barrier, the meeting in gdl_dist_shutdown and the
     broadcast of NCCL's id at gdl_dist_init. The collectives first meet in a
     non-blocking barrier, then run MPI's blocking collective (faster than
     its non-blocking one; a failed call leaves its tensors as they were);
     gdl_ddp_backward's buckets are non-blocking all-reduces. Either wait
     polls MPI_Test (yielding the processor between tests for 0.1 s, then
     napping a millisecond); on timeout it returns -1 with an error naming
     the collective, the ranks that did not arrive (the waiting ranks ask
     each other where they are, for a quarter of the timeout, 0.5 to 5 s:
     those that answer are named as waiting, and in which collective), the
     timeout and the variable;
   - with NCCL (CUDA tensors), the TCP rendezvous without MPI (a rank that
     never comes: an error naming MASTER_ADDR, MASTER_PORT and the missing
     rank; a different WORLD_SIZE: an error on both sides), and every place
     where the host waits for NCCL's queued collectives: gdl_dist_barrier,
     gdl_dist_shutdown, gdl_fit's reads of its loss and accuracy sums (each
     epoch's end, a checkpoint, the progress bar) and its agreements between
     ranks (resume, checkpoint saves). A peer that left or never comes: the
     communicator is aborted, and every later collective fails.
   Not bounded: collectives of CUDA tensors (gdl_dist_all_reduce...,
   gdl_ddp_backward's buckets) do not wait on the host; an error of NCCL
   shows at the next collective, barrier or shutdown, and a program's own
   read of a CUDA tensor after them (gdl_item, gdl_to) waits for the device
   without a limit: call gdl_dist_barrier first where a peer may be gone.
   NCCL's own ncclCommInitRank (at the first collective of CUDA tensors)
   waits for every rank without a limit of gpudl's (NCCL's non-blocking
   mode, which would bound it, makes every later NCCL call a poll; not done
   yet); a rank that never comes past the rendezvous hangs the others there.
   gdl_fit returns the
   error of a wait that timed out. The library never exits: the process
   group is unusable after a timeout or an MPI error (later collectives fail
   at once, no further MPI call is made, gdl_dist_shutdown skips MPI's
   finalisation, which would wait for ever), so the program should end with
   a non-zero status: the launcher (mpirun, srun, torchrun) then ends the
   other ranks. A rank killed outright usually ends the job sooner, by the
   launcher's teardown (mpirun's, when a rank exits on a signal).

   gdl_fit under DDP (gdl_fit_opts.ddp) with checkpoint_every and resume:
   rank 0 writes checkpoint_dir/gdl_fit.safetensors (atomically) with the
   model, the optimizer's state and step, the scheduler, rank 0's generator,
   the epoch, the batch, the loader's epoch, the epoch's running loss and
   accuracy summed over every rank, the world size (the loader's
   num_replicas) and the batch size per rank; no rank goes on before the file
   is whole, and a failed save fails every rank. checkpoint_dir must be the
   same directory for every rank (one machine, or a shared file system). On
   resume rank 0 says whether a checkpoint is there; every rank loads it, all
   or none (checked everywhere before anything changes), and the run goes on
   as the uninterrupted one would, bit for bit on every rank (per-rank random
   streams, e.g. dropout seeded by rank, restart from rank 0's generator).
   Elastic restarts (torchrun's, or the job started again on fewer or more
   ranks, or with another batch size per rank, one process too): the
   checkpoint's position is counted in samples of the epoch, batch x batch
   size x world size, and the sampler shards the rest of the epoch for the
   new world size. A checkpoint at an epoch's end always
   resumes; one mid-epoch needs its samples to be a whole number of the new
   steps (batch size x world size), else the error says so. With the same
   samples per step (2 ranks x 32 then 1 x 64) the run continues on the same
   global batches: equal to the uninterrupted run to rounding (the mean of two
   half-batch means against one mean: about 1e-7 relative), not bit for bit.
   ------------------------------------------------------------------------- */

typedef enum gdl_dist_op { GDL_SUM = 0, GDL_AVG = 1 } gdl_dist_op;

/* 0 / -1 + error. Once per process: a second call is an error (MPI cannot start twice). */
GPUDL_API int gdl_dist_init(void);
GPUDL_API int gdl_dist_is_initialized(void);
GPUDL_API int gdl_dist_rank(void);       /* 0 when not initialised */
GPUDL_API int gdl_dist_world_size(void); /* 1 when not initialised */
GPUDL_API int gdl_dist_local_rank(void); /* the rank among this machine's processes; 0 */
/* "torchrun", "mpirun", "srun", "k8s-indexed-job", "pytorchjob", "kubeflow-pet", "mpi" (another MPI launcher),
   "single" */
GPUDL_API const char *gdl_dist_launcher(void);
/* cuda:(local rank mod the GPUs this process sees) where CUDA has a GPU, else cpu */
GPUDL_API gdl_device gdl_dist_device(void);
GPUDL_API int gdl_dist_barrier(void); /* 0 / -1 */
/* How long a wait for the other ranks lasts, in seconds (what is bounded: [api-dist] above): what
   gdl_dist_set_timeout set last once it has been called (> 0; INFINITY waits for ever), else
   GPUDL_DIST_TIMEOUT as it was at the last gdl_dist_init ('inf' too), else 600 (PyTorch's default for
   NCCL). 0 / -1 + error. */
GPUDL_API int gdl_dist_set_timeout(double seconds);
GPUDL_API double gdl_dist_timeout(void);
/* In place, on every rank: t = sum (or mean) over the ranks of t. f32 or i32 (GDL_SUM only); CPU (MPI) or
   CUDA (NCCL, ordered on the device's streams). */
GPUDL_API int gdl_dist_all_reduce(gdl_tensor *t, gdl_dist_op op);
/* t on every rank = t of rank root. */
GPUDL_API int gdl_dist_broadcast(gdl_tensor *t, int root);
/* out (world_size x in's elements, same dtype) = every rank's in, in rank order. */
GPUDL_API int gdl_dist_all_gather(gdl_tensor *out, const gdl_tensor *in);
/* out = rank r's slice of the sum (or mean) over ranks of in (world_size x out's elements). */
GPUDL_API int gdl_dist_reduce_scatter(gdl_tensor *out, const gdl_tensor *in, gdl_dist_op op);
GPUDL_API void gdl_dist_shutdown(void);
/* Slurm's host list syntax, as `scontrol show hostnames` expands it: names separated by commas, each with
   any number of bracket groups of numbers and ranges, zero-padded to the lower bound's width, the last
   group varying fastest ("node[01-03,07],gpu-a[1-2]": node01 node02 node03 node07 gpu-a1 gpu-a2). Returns
   the number of hosts of list, with host n (0-based) in out (len bytes) when n is below it; -1 + error
   naming what is wrong and where (unclosed or nested brackets, a range going down, an empty name...). */
GPUDL_API int64_t gdl_hostlist_host(const char *list, int64_t n, char *out, size_t len);

/* DistributedDataParallel over a module whose tensors are on the CPU (MPI) or on one GPU (NCCL): the
   parameters and buffers are broadcast from rank 0 when it is made; the
   gradients are grouped in buckets (the parameters in reverse order, the
   first bucket first_bucket_mb, the others bucket_cap_mb, as PyTorch), and
   each bucket's all-reduce starts as soon as its gradients are complete,
   while backward goes on; gdl_ddp_backward returns with every gradient the
   mean over the ranks. */
typedef struct gdl_ddp gdl_ddp;
typedef struct gdl_ddp_opts {
    double bucket_cap_mb;   /* default 25 */
    double first_bucket_mb; /* default 1 */
    int broadcast_buffers;  /* default 1: buffers (BatchNorm's running statistics) from rank 0 at each forward */
} gdl_ddp_opts;
GPUDL_API gdl_ddp_opts gdl_ddp_defaults(void);
GPUDL_API gdl_ddp *gdl_ddp_new(gdl_module *m, const gdl_ddp_opts *o); /* NULL + error */
GPUDL_API gdl_tensor *gdl_ddp_forward(gdl_ddp *d, gdl_tensor *x);
GPUDL_API int gdl_ddp_backward(gdl_ddp *d, gdl_tensor *loss); /* 0 / -1 */
/* on != 0: backward accumulates the local gradients without communicating (PyTorch's no_sync, for
   gradient accumulation); the next backward with it off averages what was accumulated. */
GPUDL_API void gdl_ddp_set_no_sync(gdl_ddp *d, int on);
GPUDL_API int gdl_ddp_num_buckets(const gdl_ddp *d);
GPUDL_API gdl_module *gdl_ddp_module(const gdl_ddp *d); /* the module it wraps */
GPUDL_API void gdl_ddp_free(gdl_ddp *d);

/* ---------------------------------------------------------------------------
   [api-monitor]   What nvidia-smi shows, from NVIDIA's management library
   (NVML), loaded at run time with dlopen: no link dependency, and a program
   without the NVIDIA driver (CI, the CUDA emulator, a CPU-only machine)
   gets a clear "NVML not available" error instead. GPUDL_NVML_LIB in the
   environment names another library file (tests use a stand-in).
   Enabled with GPUDL_CUDA or GPUDL_NVML; otherwise the calls fail with a
   message saying how to enable them.
       gdl_gpu_status s;
       if (gdl_gpu_stats(0, &s) == 0) printf("%s %d%% %.1f GiB\n", s.name, s.utilization, s.memory_used / 1073741824.0);
   ------------------------------------------------------------------------- */
typedef struct gdl_gpu_status {
    char name[96];
    int utilization;            /* % of the last sample period a kernel ran; -1 if the GPU does not say */
    int memory_utilization;     /* % of it device memory was read or written; -1 likewise */
    size_t memory_used, memory_total; /* bytes */
    int temperature;            /* degrees C; -1 if unknown */
    double power, power_limit;  /* watts; NaN if unknown */
    int sm_clock, memory_clock; /* MHz; -1 if unknown */
} gdl_gpu_status;

/* The GPUs gdl_gpu_stats takes (indices 0..count-1): CUDA's where CUDA sees a GPU, else NVML's.
   -1 + error (NVML not available). */
GPUDL_API int gdl_gpu_count(void);
/* The current figures of GPU index. 0 / -1 + error (NVML not available, no such GPU).
   Where CUDA sees a GPU (GPUDL_CUDA), index is CUDA's (gdl_cuda(index)): the NVML device with the
   same PCI bus id, right under CUDA_VISIBLE_DEVICES too. Elsewhere (a CPU build with GPUDL_NVML, or
   a CUDA build that found no GPU) index is NVML's own (the order of nvidia-smi). */
GPUDL_API int gdl_gpu_stats(int index, gdl_gpu_status *s);

/* What gpudl's own allocators hold on a device, like torch.cuda.memory_stats / memory_summary /
   reset_peak_memory_stats. Counted by the allocator of the device's backend since the program started
   (peaks since the last gdl_memory_reset_peak); sizes in bytes.
   CUDA: the caching allocator. Sizes are its rounded block sizes (multiples of 512 bytes);
   reserved = handed out + cached; a request is served from the cache (a hit) or by cudaMalloc.
   CPU: malloc for persistent tensors' data; nothing is cached, so reserved = allocated and every
   request is a malloc. Arena: the per-step arena of temporaries (CPU: with their headers and the tape).
       printf("%s", gdl_memory_summary(gdl_cuda(0)));                                                  */
typedef struct gdl_memory_status {
    size_t allocated, peak_allocated; /* handed out and not yet freed */
    size_t reserved, peak_reserved;   /* held from the system (CUDA: allocated + the cache) */
    int64_t requests;                 /* allocations asked of the allocator */
    int64_t cache_hits;               /* served from the cache (CUDA) */
    int64_t device_mallocs;           /* cudaMalloc (CUDA) or malloc (CPU) calls */
    int64_t frees;
    int64_t cache_releases;           /* times the cache went back to the driver (an out-of-memory retry,
                                         gdl_shutdown) */
    size_t arena_used, arena_reserved;
} gdl_memory_status;
GPUDL_API int gdl_memory_stats(gdl_device dev, gdl_memory_status *s); /* 0 / -1 + error */
/* peak_allocated and peak_reserved restart from the current figures. 0 / -1 + error. */
GPUDL_API int gdl_memory_reset_peak(gdl_device dev);
/* gdl_memory_stats as a table (a thread-local buffer, valid until the next call; NULL + error). */
GPUDL_API const char *gdl_memory_summary(gdl_device dev);

/* The profiler, like torch.profiler's key_averages().table(): between gdl_profile_begin and
   gdl_profile_end every op (gdl_matmul, ...), every backward function ("gdl_matmul backward"),
   gdl_step, gdl_copy_ (and so gdl_to) and gdl_loader_next (its wait for a batch) is timed per call.
       gdl_profile_begin();
       ... some training steps ...
       gdl_profile_end();
       gdl_profile_print(stdout);              (Name, Device, Calls, Total, Avg, Max, %, Launches)
       gdl_profile_trace("trace.json");        (open in Perfetto or chrome://tracing)
   The CPU is timed with the host's monotonic clock around the op (gdl_now, microseconds,
   where -std=c99 hides clock_gettime). A CUDA op is timed on the GPU by events
   recorded in its stream before and after it; they are read at gdl_profile_end (one wait
   there, none per op), and "Launches" counts its kernels (a cuBLAS call counts as one).
   An op's time starts after its argument checks and ends when it returns its result; an op
   that fails is not counted. The op layer's thread is profiled (ops are single-threaded).
   With the profiler off an op pays an untaken branch where it starts and one where it ends.
   gdl_profile_begin while it runs, or gdl_profile_end while it does not: -1 + error. */
typedef struct gdl_profile_row {
    const char *name;       /* "gdl_linear", "gdl_linear backward", "gdl_step", ... */
    gdl_device device;      /* where it ran (CUDA rows are timed on the GPU) */
    int64_t calls;
    double total_ms, avg_ms, max_ms, percent; /* percent of all rows' total */
    int64_t launches;       /* kernels launched; -1 on the CPU (not counted) */
} gdl_profile_row;
GPUDL_API int gdl_profile_begin(void);
GPUDL_API int gdl_profile_end(void);
/* The last profile's rows, sorted by total time (longest first): their count, *rows valid until
   the next gdl_profile_begin. -1 + error before any profile has ended. */
GPUDL_API int gdl_profile_rows(const gdl_profile_row **rows);
GPUDL_API int gdl_profile_print(FILE *f); /* the rows as a table. 0 / -1 + error */
/* The last profile in Chrome's Trace Event Format: one "X" event per call, in microseconds
   from gdl_profile_begin; host times on tid 1, GPU times on tid 2 + the device index. 0 / -1. */
GPUDL_API int gdl_profile_trace(const char *path);

/* ---------------------------------------------------------------------------
   [api-quant]  INT8 quantization: PyTorch's dynamic quantization
   (torch.ao.quantization.quantize_dynamic), static post-training
   quantization (prepare, calibrate, convert), quantization-aware training
   and the int8 GEMM under them.

   Dynamic quantization
   --------------------
       gdl_module *q = gdl_quantize_dynamic(model, NULL);   // model is kept
       gdl_evaluate(q, test_loader, NULL, NULL, &loss, &acc);
       gdl_module_summary(q, 2, (int64_t[]){1, 784}, stdout); // with its size
       gdl_quant_save(q, "mlp_int8.safetensors");
   returns a copy of the model with every Linear replaced by a
   DynamicQuantizedLinear (the other modules copied as they are), as
   quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8) with
   per_channel_dynamic_qconfig on the x86 engine (fbgemm):
   * weights int8 [-128, 127], symmetric (zero point 0), per output channel:
     scale = max(|min(w, 0)|, max(w, 0)) / 127.5, at least FLT_EPSILON
     (PyTorch's per_channel_symmetric observer), q = round-half-even(w *
     (1/scale)) clamped; gdl_qconfig.per_channel = 0 gives one scale for the
     tensor (quantize_dynamic's default_dynamic_qconfig);
   * activations quantized per batch, at run time: min and max over the
     whole input (widened to hold 0), u8 with 7 bits (0..127, PyTorch's
     reduce_range, which keeps the AVX2 kernel exact and fast) or 8
     (reduce_range = 0), scale and zero point as fbgemm's
     ChooseQuantizationParams (scale (max - min) / (qmax - qmin); the zero
     point from the side with the smaller error, rounded and clamped; 0.1 for
     a zero range);
   * the products summed in int32 (the int8 GEMM below); then
     y = (acc - zero_point * sum_k w_q[n][k]) * (scale_x * scale_w[n]) + bias[n]
     in f32.
   No gradient flows through a quantized module (as PyTorch's): the output is
   a temporary without a tape node. Quantized modules run on the CPU only
   (a model on a GPU is refused: move it with gdl_module_to first).

   Files: gdl_quant_save writes every tensor of a quantized model to
   safetensors with names that say what they are:
       "0.weight_int8" I8 [out, in] (a convolution's [out, in, kh, kw]),
       "0.weight_scale" F32 [out] (or [1]), "0.weight_zero_point" I32 [out],
       "0.bias" F32 [out]; for static layers also "0.input_scale" F32 [1],
       "0.input_zero_point" I32 [1], "0.output_scale", "0.output_zero_point"
   and the other modules' parameters and buffers as F32 under their usual
   names; metadata "gpudl.quantized" = "int8". gdl_quant_load reads such
   a file into a quantized model of the same structure (strictly: names,
   dtypes and shapes), so: build the float model, gdl_quantize_dynamic it,
   gdl_quant_load the file (for static models: prepare, calibrate on any
   batch, convert, load). gdl_module_nbytes is the bytes of a model's
   tensors as stored (what the file holds, less its header); the summary
   prints it.

   Static post-training quantization (eager mode's prepare / calibrate / convert)
   ---------------------------------------------------------------------------
       gdl_module *p = gdl_quant_prepare(model, NULL);    // model is kept
       gdl_quant_calibrate(p, calib_loader, 32);         // 32 batches, eval, no grad
       gdl_module *q = gdl_quant_convert(p);              // p is kept
   prepare copies the model with every Linear and Conv2d (groups 1) made an
   observed layer (ObservedLinear, ObservedConv2d): the float layer, with an
   observer on its input and one on its output. A Linear or Conv2d followed
   by a ReLU in a Sequential is fused with it, as fuse_modules does
   (ObservedLinearReLU, ObservedConvReLU2d; the ReLU's place gets an
   Identity): its output is observed after the ReLU. Observers
   (gdl_qconfig.observer), per tensor:
   * GDL_QOBS_MINMAX (default): the running min and max (MinMaxObserver);
   * GDL_QOBS_MOVING_AVERAGE: the first batch's min and max, then
     v += averaging_constant * (batch's - v) (MovingAverageMinMaxObserver,
     0.01);
   * GDL_QOBS_HISTOGRAM: a 2048-bin histogram over the range seen (re-binned
     as it grows), the range taken between its (1 - percentile) and
     percentile quantiles (0.9999): clipping outliers. (PyTorch's
     HistogramObserver searches the range that minimises the L2 error
     instead; this is the percentile method.)
   The parameters are PyTorch's affine ones for u8 (0..127 with reduce_range,
   the x86 default, or 0..255): scale = (max - min) / (qmax - qmin) over the
   range widened to hold 0, at least FLT_EPSILON, zero point qmin -
   round(min / scale); weights as the dynamic layers' (int8 symmetric per
   output channel). Any forward pass of the prepared model in eval mode is
   calibration (gdl_quant_calibrate only loops over a loader); the summary's
   pass is not observed.
   convert replaces each observed layer by QuantizedLinear(ReLU) or
   QuantizedConv(ReLU)2d: the input quantized with its observed parameters,
   the int32 sums (a convolution through u8 columns, im2col, whose taps in
   the padding hold the zero point), then bias and ReLU in f32 and the result
   requantized with the output's parameters. Between layers the activations
   are kept as f32 values on that grid (exactly representable, so the next
   layer's quantization gets the integers back): the numerics of PyTorch's
   quint8 tensors between quantized modules, while pooling, flatten and the
   other float modules run unchanged (max pooling commutes with
   quantization). A layer not calibrated is refused at convert.

   Conv2d + BatchNorm2d (+ ReLU) in a Sequential are fused too: the
   BatchNorm is folded into the convolution with its running statistics
   (fuse_conv_bn_eval: w * gamma / sqrt(var + eps) per channel, bias
   (b - mean) * gamma / sqrt(var + eps) + beta) and its place gets an
   Identity.

   Quantization-aware training
   ---------------------------
       gdl_module *p = gdl_quant_prepare_qat(model, NULL);
       ... train p (gdl_fit, or a loop: its parameters are p's own) ...
       gdl_quant_freeze_observers(p, 1);                 // e.g. after an epoch
       ... train on ...
       gdl_module *q = gdl_quant_convert(p);
   prepare_qat is prepare with fake quantization in the observed layers
   (QATLinear, QATLinearReLU, QATConv2d, QATConvReLU2d): the input fake-
   quantized with its observer's parameters, the weight fake-quantized
   symmetric per channel from its current values, the output observed (after
   a fused ReLU) and fake-quantized, so training sees the rounding the int8
   model will do. The observers are moving-average min-max by default
   (PyTorch's default QAT qconfig); gdl_quant_freeze_observers stops their
   updates (PyTorch's disable_observer), the parameters then stay as they
   are. Fake quantization (gdl_fake_quantize, PyTorch's
   fake_quantize_per_tensor_affine) is
       y = (clamp(round(x / scale) + zp, qmin, qmax) - zp) * scale
   with the clipped straight-through estimator as gradient: 1 where
   round(x / scale) + zp lies in [qmin, qmax], 0 elsewhere; nothing is
   learnable (no LSQ). Unlike PyTorch's QAT ConvBn2d, which keeps the
   BatchNorm training and simulates the folding, a BatchNorm after a
   convolution is folded at prepare_qat, with its running statistics, and
   training goes on without it.

   The int8 GEMM
   -------------
   gdl_gemm_u8s8_cpu: C[M,N] (int32) = A[M,K] (u8) * B[N,K]^T (s8), exact, on
   AVX-512 VNNI, AVX2, NEON (sdot where the compiler targets it) or portable
   C, chosen as the float GEMM's ([impl-gemm-int8] says how; K at most
   65536 so that no sum overflows int32). The quantized layers pack their
   weight once and call its kernels directly.
   ------------------------------------------------------------------------- */

/* Activation observers of static quantization */
enum { GDL_QOBS_MINMAX = 0, GDL_QOBS_MOVING_AVERAGE = 1, GDL_QOBS_HISTOGRAM = 2 };

typedef struct gdl_qconfig {
    int per_channel;           /* 1 (default): a weight scale per output channel; 0: one per tensor */
    int reduce_range;          /* 1 (default): activations 0..127 (PyTorch's x86 default); 0: 0..255 */
    int observer;              /* static: GDL_QOBS_MINMAX (default), _MOVING_AVERAGE, _HISTOGRAM */
    double averaging_constant; /* GDL_QOBS_MOVING_AVERAGE's, in (0, 1]: default 0.01 */
    double percentile;         /* GDL_QOBS_HISTOGRAM's, in (0.5, 1]: default 0.9999 */
} gdl_qconfig;

/* per_channel 1, reduce_range 1, min-max observers (0.01, 0.9999 for the others) */
GPUDL_API gdl_qconfig gdl_qconfig_default(void);
/* A copy of m with every Linear made a DynamicQuantizedLinear (qc NULL: the default). m is not changed.
   Custom modules are refused (they cannot be copied). NULL + error. */
GPUDL_API gdl_module *gdl_quantize_dynamic(gdl_module *m, const gdl_qconfig *qc);
/* A copy of m with observed Linear and Conv2d layers (ReLU fused), for calibration. NULL + error. */
GPUDL_API gdl_module *gdl_quant_prepare(gdl_module *m, const gdl_qconfig *qc);
/* Forward passes of a prepared model over l (at most max_batches; <= 0: the rest of the epoch) in eval mode
   without gradients, so its observers see the data. Returns the batches run, -1 on error. */
GPUDL_API int64_t gdl_quant_calibrate(gdl_module *prepared, gdl_loader *l, int64_t max_batches);
/* A copy of a calibrated prepared model with its observed layers quantized (static). NULL + error (a model
   with no observed layer, a layer that has observed nothing). */
GPUDL_API gdl_module *gdl_quant_convert(gdl_module *prepared);
/* prepare for quantization-aware training (see above); qc NULL: the default with moving-average observers. The
   copy is in m's training mode. NULL + error. */
GPUDL_API gdl_module *gdl_quant_prepare_qat(gdl_module *m, const gdl_qconfig *qc);
/* on 1: the observers of every observed layer of m stop updating; 0: they update again. 0 / -1. */
GPUDL_API int gdl_quant_freeze_observers(gdl_module *m, int on);
/* y = (clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale, differentiable with the clipped
   straight-through estimator. x f32 on the CPU. NULL + error. */
GPUDL_API gdl_tensor *gdl_fake_quantize(gdl_tensor *x, float scale, int32_t zero_point, int qmin, int qmax);
/* 1 when m or one of its descendants is a quantized module, 0 if not (or NULL). */
GPUDL_API int gdl_module_is_quantized(const gdl_module *m);
/* The bytes of m's tensors as stored: parameters and buffers at their dtype's size, quantized modules' int8
   weights, scales, zero points and bias. -1 for NULL. */
GPUDL_API int64_t gdl_module_nbytes(const gdl_module *m);
/* Saves a quantized model (see above); a model with no quantized module is refused. 0 / -1. */
GPUDL_API int gdl_quant_save(gdl_module *m, const char *path);
/* Loads gdl_quant_save's file into a quantized model of the same structure (nothing changed on error). 0 / -1. */
GPUDL_API int gdl_quant_load(gdl_module *m, const char *path);
/* PyTorch's (fbgemm's) ChooseQuantizationParams for the range [min, max] (widened to hold 0) and the integer
   range [qmin, qmax]: the dynamic layers' activation parameters. 0 / -1 (qmin >= qmax, NaN). */
GPUDL_API int gdl_choose_qparams(float min, float max, int qmin, int qmax, float *scale, int32_t *zero_point);

/* The largest K of the int8 GEMM: 65536 * 255 * 128 < 2^31, so no sum can overflow int32. */
#define GDL_GEMM_INT8_MAX_K 65536
/* C[M,N] (int32, rows ldc apart) = A[M,K] (u8, lda) * B[N,K]^T (s8, ldb): exact. 0 / -1 (sizes, K > 65536). */
GPUDL_API int gdl_gemm_u8s8_cpu(int M, int N, int K, const uint8_t *A, int lda, const int8_t *B, int ldb, int32_t *C,
                                int ldc);
/* The int8 kernel this build selected: "avx512vnni 8x32", "avx2 4x16", "neon-sdot 8x8", "neon 4x8", "portable 4x8". */
GPUDL_API const char *gdl_gemm_int8_kernel_name(void);
/* ---------------------------------------------------------------------------
   [backend]   A backend is a table of kernels on raw device pointers.
   The CPU backend lives in this header; gpudl_cuda.cu provides the CUDA one
   through gdl_cuda_backend(). Kernels return 0, or -1 after gdl__set_error.
   All gdl_real pointers are contiguous row-major device memory. "+=" in a
   comment means the kernel accumulates into its output (gradients).
   ------------------------------------------------------------------------- */

/* MIN, MAX, POW: torch.minimum, maximum and pow (NaN propagates through min and max); the rest are their
   derivatives, for the backwards: MAX_DA = d max(a,b)/da (1 where a > b, 1/2 on a tie, 0 where a < b, 1
   where unordered; MIN_DA the same for min; d/db is the same code with a and b swapped), POW_DA = d a^b/da
   (0 where b == 0), POW_DB = d a^b/db (0 where a == 0 and b >= 0), GRAD_SCALE = a * b but exactly 0 where
   b == 0 (PyTorch masks such gradients: an infinite one does not become NaN) */
enum gdl_binary_op {
    GDL_BIN_ADD, GDL_BIN_SUB, GDL_BIN_MUL, GDL_BIN_DIV, GDL_BIN_MIN, GDL_BIN_MAX, GDL_BIN_POW,
    GDL_BIN_MAX_DA, GDL_BIN_MIN_DA, GDL_BIN_POW_DA, GDL_BIN_POW_DB, GDL_BIN_GRAD_SCALE
};
/* CLAMP_MIN / CLAMP_MAX: max(x, alpha) / min(x, alpha), NaN kept, the gradient passing where x >= alpha /
   x <= alpha (torch.clamp_min / clamp_max) */
enum gdl_unary_op {
    GDL_UN_RELU, GDL_UN_LEAKY_RELU, GDL_UN_SIGMOID, GDL_UN_TANH, GDL_UN_GELU_ERF,
    GDL_UN_GELU_TANH, GDL_UN_EXP, GDL_UN_LOG, GDL_UN_SCALE, GDL_UN_ADD_SCALAR,
    GDL_UN_POW, GDL_UN_SQRT, GDL_UN_RSQRT, GDL_UN_ABS, GDL_UN_CLAMP_MIN, GDL_UN_CLAMP_MAX
};

enum gdl_reduce_op { GDL_RED_SUM, GDL_RED_MEAN, GDL_RED_MAX };
enum gdl_pointwise_loss { GDL_LOSS_MSE, GDL_LOSS_BCE_LOGITS };

/* geometry of a 2-D convolution or pooling window */
typedef struct gdl_conv_geom {
    int N, C, H, W;        /* input */
    int KH, KW;            /* window */
    int SH, SW, PH, PW, DH, DW;
    int OH, OW;            /* output */
} gdl_conv_geom;

/* A parameter group's hyper-parameters as the optimizer kernels read them:
   in the device's memory (the optimizer's flat block), written by
   gdl_optim_set_lr / set_momentum and the schedulers with an asynchronous
   copy, so a captured step reads the current values. */
typedef struct gdl_opt_hyper {
    double lr, weight_decay;
    double momentum, dampening; /* SGD */
    double beta1, beta2, eps;   /* Adam */
    int32_t nesterov, pad_;     /* SGD */
} gdl_opt_hyper;

/* One parameter of a multi-tensor optimizer table (gdl_backend.opt_table_new): device pointers, fixed
   while the parameter set stays the same. */
typedef struct gdl_opt_tensor {
    int64_t n;
    gdl_real *p;                /* updated in place */
    const gdl_real *g;
    gdl_real *s1, *s2;          /* SGD: s1 the momentum buffer (NULL: no momentum); Adam: exp_avg, exp_avg_sq */
    const gdl_opt_hyper *hyper; /* its group's hyper-parameters (device memory) */
    int32_t *step;              /* its step count (device memory; NULL: not counted): SGD's buffer starts as the
                                   gradient when it is 0; Adam corrects the bias for step + 1. Each call adds 1
                                   (saturating at INT32_MAX) once every element is updated. */
    const gdl_real *skip;       /* NULL, or a device flag (GradScaler's found_inf): non-zero, the call changes
                                   nothing, step counts included. One flag per table: the first entry's is read. */
    /* master weights (gdl_optim_set_master_weights): p is the f32 master and g is NULL; the gradient is read
       from glow (dtype low) and, after p's update, plow (dtype low) is set to p rounded to nearest even.
       low is GDL_F32 (0) without master weights (plow, glow NULL). */
    void *plow;
    const void *glow;
    int32_t low, pad_;
} gdl_opt_tensor;

/* the collectives of the backend entry `collective`; an id of comm_id has at most GDL_COMM_ID_BYTES */
enum gdl_collective { GDL_COLL_ALL_REDUCE, GDL_COLL_BROADCAST, GDL_COLL_ALL_GATHER, GDL_COLL_REDUCE_SCATTER };
#define GDL_COMM_ID_BYTES 128

/* The backend's entries, one line each: X(return type, name, (parameters)).
   This list makes the gdl_backend struct and both backends' tables (the CPU
   one in this header, gdl__cpu_NAME; the CUDA one in gpudl_cuda.cu,
   gdl__cu_NAME), so an entry a backend does not define does not compile. */
#define GDL_BACKEND_ENTRIES(X) \
    /* memory, on the current device */ \
    X(void *, alloc, (size_t bytes)) \
    X(void, free, (void *p)) \
    /* copies between host and device or within a device; kind: 0 h2d, 1 d2h, 2 d2d */ \
    X(int, copy, (void *dst, const void *src, size_t bytes, int kind)) \
    X(int, memset0, (void *p, size_t bytes)) \
    X(int, synchronize, (void)) \
    /* page-locked host memory where the device has it (fast, asynchronous \
       copies), plain host memory on the CPU */ \
    X(void *, host_alloc, (size_t bytes)) \
    X(void, host_free, (void *p)) \
    /* streams and events order copies against the compute stream without \
       the host waiting. A NULL stream is the device's compute stream; the \
       CPU's are stand-ins (work on the CPU is done when the call returns). */ \
    X(void *, stream_create, (void)) \
    X(void, stream_destroy, (void *stream)) \
    X(int, copy_async, (void *dst, const void *src, size_t bytes, int kind, void *stream)) \
    X(void *, event_create, (void)) \
    X(void, event_destroy, (void *event)) \
    X(int, event_record, (void *event, void *stream)) \
    X(int, stream_wait_event, (void *stream, void *event)) \
    /* waits (counted by gdl_sync_count) only if the event is not reached yet */ \
    X(int, event_synchronize, (void *event)) \
    X(int, fill, (gdl_real *x, int64_t n, gdl_real v)) \
    X(int, cast, (void *dst, gdl_dtype dt, const void *src, gdl_dtype st, int64_t n)) \
    /* C[b] = alpha*op(A[b])*op(B[b]) + beta*C[b], row-major, b < batch, \
       element strides sA, sB, sC between batches (0 repeats a matrix; sC 0: every batch in turn into \
       the one C, so beta 1 sums the products -- a GPU sums a chunk of them in f32 first) */ \
    X(int, gemm, (int ta, int tb, int M, int N, int K, gdl_real alpha, const gdl_real *A, int lda, \
        int64_t sA, const gdl_real *B, int ldb, int64_t sB, gdl_real beta, gdl_real *C, int ldc, \
        int64_t sC, int batch)) \
    /* the same GEMM on f16 or bf16 matrices (dt): products summed in f32, \
       C = alpha*AB + beta*C formed in f32 and rounded once to dt (cuBLAS: \
       GemmEx, CUBLAS_COMPUTE_32F; the CPU: f32 copies, the f32 kernel) */ \
    X(int, gemm_lp, (gdl_dtype dt, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda, \
        int64_t sA, const void *B, int ldb, int64_t sB, float beta, void *C, int ldc, int64_t sC, int batch)) \
    /* out[i] = a[i·astr] op b[i·bstr] over `shape` (ndim dims, out contiguous; \
       a stride of 0 broadcasts) */ \
    X(int, binary, (int op, int ndim, const int64_t *shape, const gdl_real *a, const int64_t *astr, \
        const gdl_real *b, const int64_t *bstr, gdl_real *out)) \
    /* dst[i·dstr] += alpha*src[i] over `shape` (src contiguous): sums broadcast dims */ \
    X(int, sum_to, (int ndim, const int64_t *shape, const gdl_real *src, gdl_real *dst, \
        const int64_t *dstr, gdl_real alpha)) \
    /* y = f(x; alpha) ; gx += f'(x)·gy (y is the forward output) */ \
    X(int, unary, (int op, int64_t n, const gdl_real *x, gdl_real *y, gdl_real alpha)) \
    X(int, unary_backward, (int op, int64_t n, const gdl_real *x, const gdl_real *y, const gdl_real *gy, \
        gdl_real *gx, gdl_real alpha)) \
    /* fused bias + activation; act: GDL_UN_RELU, GDL_UN_GELU_TANH, GDL_UN_GELU_ERF, or -1 (none). \
       bias_act: y viewed as [outer, C, inner], in place: pre = y + bias[c] (bias NULL: y), kept in `pre` \
       when not NULL, and y = act(pre), in one pass, with unary's and binary's arithmetic. linear_act: \
       y[M,N] = act(x[M,K]·w[N,K]^T + bias) the same way (cuBLASLt's epilogues on CUDA). \
       act_backward_reduce over [outer, n, inner]: gpre = 0 + act'(pre)·gy (set, as unary_backward adds \
       to zeros; ReLU's pre may be its output), and when sum != NULL, sum[o,i] (+= when accumulate) = \
       the sum over k of gpre[o,k,i], in reduce's order */ \
    X(int, bias_act, (int act, int64_t outer, int64_t C, int64_t inner, const gdl_real *bias, gdl_real *y, \
        gdl_real *pre)) \
    X(int, linear_act, (int act, int M, int N, int K, const gdl_real *x, const gdl_real *w, const gdl_real *bias, \
        gdl_real *y, gdl_real *pre)) \
    X(int, act_backward_reduce, (int act, int64_t outer, int64_t n, int64_t inner, const gdl_real *pre, \
        const gdl_real *gy, gdl_real *gpre, gdl_real *sum, int accumulate)) \
    /* x viewed as [outer, n, inner]; y[o,i] = reduce_k x[o,k,i] (y += when accumulate); \
       idx (MAX only) receives the arg-max k as int32 */ \
    X(int, reduce, (int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y, \
        int32_t *idx, int accumulate)) \
    X(int, reduce_backward, (int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *gy, \
        const int32_t *idx, gdl_real *gx)) \
    X(int, argmax, (int64_t outer, int64_t n, int64_t inner, const gdl_real *x, int32_t *out)) \
    /* softmax over the middle dim of [outer, n, inner]; log_ selects log_softmax */ \
    X(int, softmax, (int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y)) \
    X(int, softmax_backward, (int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *y, \
        const gdl_real *gy, gdl_real *gx)) \
    /* x [N,C,H,W] -> col [N, C*KH*KW, OH*OW]; col2im: x += (adjoint) */ \
    X(int, im2col, (const gdl_conv_geom *g, const gdl_real *x, gdl_real *col)) \
    X(int, col2im, (const gdl_conv_geom *g, const gdl_real *col, gdl_real *x)) \
    /* pooling per (n,c) plane; idx: flat h*W+w of the max; avg counts padding */ \
    X(int, maxpool, (const gdl_conv_geom *g, const gdl_real *x, gdl_real *y, int32_t *idx)) \
    X(int, maxpool_backward, (const gdl_conv_geom *g, const gdl_real *gy, const int32_t *idx, gdl_real *gx)) \
    X(int, avgpool, (const gdl_conv_geom *g, const gdl_real *x, gdl_real *y)) \
    X(int, avgpool_backward, (const gdl_conv_geom *g, const gdl_real *gy, gdl_real *gx)) \
    /* the same on f16/bf16 tensors (dt): im2col copies; col2im, the pooling \
       backward and avgpool sum in f32 and round each result once (x/gx: \
       the old value plus the sum, rounded once); max pooling is exact */ \
    X(int, im2col_lp, (gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *col)) \
    X(int, col2im_lp, (gdl_dtype dt, const gdl_conv_geom *g, const void *col, void *x)) \
    X(int, maxpool_lp, (gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *y, int32_t *idx)) \
    X(int, maxpool_backward_lp, (gdl_dtype dt, const gdl_conv_geom *g, const void *gy, const int32_t *idx, void *gx)) \
    X(int, avgpool_lp, (gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *y)) \
    X(int, avgpool_backward_lp, (gdl_dtype dt, const gdl_conv_geom *g, const void *gy, void *gx)) \
    /* native bf16/f16 elementwise kernels (dt: GDL_BF16 or GDL_F16; binary_lp and sum_to_lp take \
       each operand's dtype, f32 or one low dtype): every element is loaded to f32, computed with \
       the f32 kernel's formula and rounded once on store; "+=" loads the accumulator, adds in f32 \
       and rounds once. binary_lp's out may be a itself (same strides: an in-place add); sum_to_lp \
       sums each destination's sources in f32 first (from 0, as the f32 sum_to into a zeroed \
       buffer), then adds that to dst and rounds */ \
    X(int, unary_lp, (gdl_dtype dt, int op, int64_t n, const void *x, void *y, float alpha)) \
    X(int, unary_backward_lp, (gdl_dtype dt, int op, int64_t n, const void *x, const void *y, const void *gy, \
        void *gx, float alpha)) \
    X(int, binary_lp, (int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr, \
        gdl_dtype bt, const void *b, const int64_t *bstr, gdl_dtype ot, void *out)) \
    X(int, sum_to_lp, (int ndim, const int64_t *shape, gdl_dtype st, const void *src, gdl_dtype dt, void *dst, \
        const int64_t *dstr, float alpha)) \
    X(int, dropout_lp, (gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *x, void *y)) \
    X(int, dropout_backward_lp, (gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *gy, void *gx)) \
    /* copy2d on elements of dt: a copy is exact; accumulate adds in f32 and rounds once */ \
    X(int, copy2d_lp, (gdl_dtype dt, int64_t rows, int64_t cols, const void *src, int64_t sld, void *dst, \
        int64_t dld, int accumulate)) \
    /* dst[r*dld + c] (+)= src[r*sld + c] for r < rows, c < cols */ \
    X(int, copy2d, (int64_t rows, int64_t cols, const gdl_real *src, int64_t sld, gdl_real *dst, \
        int64_t dld, int accumulate)) \
    /* indexing and copies. strided_copy: dst[i·dstr] (+)= src[i·sstr] over `shape` (i its row-major \
       multi-index), elements of any dtype dt; accumulate (a float dt, no two i sharing a destination): \
       the destination loaded, the source added in f32, rounded once */ \
    X(int, strided_copy, (gdl_dtype dt, int ndim, const int64_t *shape, const void *src, const int64_t *sstr, \
        void *dst, const int64_t *dstr, int accumulate)) \
    /* gather: out[i] = x at i·xstr with the `dim` coordinate replaced by idx[i·istr], over `shape` (out \
       contiguous, any dtype dt; x's dim has xn elements: an index outside [0,xn) gives 0 -- the op layer \
       rejects it first on the CPU); scatter_add, its adjoint: dst (f32) at those places += src[i] (src \
       contiguous, dtype st: f32, bf16 or f16; on a GPU with atomics, so sums in any order) */ \
    X(int, gather, (gdl_dtype dt, int ndim, const int64_t *shape, int dim, const void *x, const int64_t *xstr, \
        int64_t xn, const int32_t *idx, const int64_t *istr, void *out)) \
    X(int, scatter_add, (gdl_dtype st, int ndim, const int64_t *shape, int dim, const void *src, \
        const int32_t *idx, const int64_t *istr, gdl_real *dst, const int64_t *dstr, int64_t dn)) \
    /* out[i] = a[i·astr] op b[i·bstr] as 1 or 0 (op: gdl_compare_op) over `shape`, out contiguous; at, bt \
       any dtypes: two integer ones compare exactly, else both as f32 (NaN: only NE holds) */ \
    X(int, compare, (int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr, \
        gdl_dtype bt, const void *b, const int64_t *bstr, uint8_t *out)) \
    /* out[i] = cond[i·cstr] ? a[i·astr] : b[i·bstr] over `shape` (cond u8; a, b and the contiguous out of \
       one float dtype dt: an exact selection) */ \
    X(int, where, (gdl_dtype dt, int ndim, const int64_t *shape, const uint8_t *cond, const int64_t *cstr, \
        const void *a, const int64_t *astr, const void *b, const int64_t *bstr, void *out)) \
    /* x, y viewed as [batch, R, C] (float dtype dt): y (+)= x where col - row <= k (upper 0: tril) or \
       col - row >= k (upper 1: triu), else y = 0 (nothing added) */ \
    X(int, tri, (gdl_dtype dt, int upper, int64_t batch, int64_t R, int64_t C, int64_t k, const void *x, \
        void *y, int accumulate)) \
    /* inclusive prefix sums over the middle dim of [outer, n, inner], from the end when reverse (cumsum's \
       backward); y (+)= them */ \
    X(int, cumsum, (int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y, int reverse, \
        int accumulate)) \
    /* keep element i iff gdl_dropout_keep(seed, i, p); kept values scale by 1/(1-p) */ \
    X(int, dropout, (int64_t n, double p, uint64_t seed, const gdl_real *x, gdl_real *y)) \
    X(int, dropout_backward, (int64_t n, double p, uint64_t seed, const gdl_real *gy, gdl_real *gx)) \
    /* x [N,C,S]. Training: batch stats (biased var) -> mean, invstd (saved), \
       running stats updated with unbiased var when run_mean != NULL. \
       Eval: mean/invstd are computed from running stats into mean/invstd. \
       gamma/beta may be NULL (1 and 0). */ \
    X(int, batchnorm, (int64_t N, int64_t C, int64_t S, const gdl_real *x, const gdl_real *gamma, \
        const gdl_real *beta, gdl_real *y, gdl_real *mean, gdl_real *invstd, gdl_real *run_mean, \
        gdl_real *run_var, int training, double momentum, double eps)) \
    /* gx/ggamma/gbeta may be NULL; +=. training selects the batch-stats formula */ \
    X(int, batchnorm_backward, (int64_t N, int64_t C, int64_t S, const gdl_real *x, const gdl_real *gy, \
        const gdl_real *gamma, const gdl_real *mean, const gdl_real *invstd, int training, gdl_real *gx, \
        gdl_real *ggamma, gdl_real *gbeta)) \
    /* the same with x, y, gy and gx f16/bf16 (dt) and the rest f32 (cuDNN's \
       under torch.autocast): f32 arithmetic, y and gx rounded once */ \
    X(int, batchnorm_lp, (gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const gdl_real *gamma, \
        const gdl_real *beta, void *y, gdl_real *mean, gdl_real *invstd, gdl_real *run_mean, gdl_real *run_var, \
        int training, double momentum, double eps)) \
    X(int, batchnorm_backward_lp, (gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const void *gy, \
        const gdl_real *gamma, const gdl_real *mean, const gdl_real *invstd, int training, void *gx, \
        gdl_real *ggamma, gdl_real *gbeta)) \
    /* rows of D; mean/rstd saved per row */ \
    X(int, layernorm, (int64_t rows, int64_t D, const gdl_real *x, const gdl_real *gamma, \
        const gdl_real *beta, double eps, gdl_real *y, gdl_real *mean, gdl_real *rstd)) \
    X(int, layernorm_backward, (int64_t rows, int64_t D, const gdl_real *x, const gdl_real *gy, \
        const gdl_real *gamma, const gdl_real *mean, const gdl_real *rstd, gdl_real *gx, gdl_real *ggamma, \
        gdl_real *gbeta)) \
    /* out[i,:] = W[idx[i],:]; backward gW[idx[i],:] += gy[i,:]. Indices are \
       checked by the op layer on the CPU; on a GPU out-of-range rows give 0. */ \
    X(int, embedding, (int64_t n, int64_t D, int64_t V, const int32_t *idx, const gdl_real *W, \
        gdl_real *out)) \
    X(int, embedding_backward, (int64_t n, int64_t D, int64_t V, const int32_t *idx, const gdl_real *gy, \
        gdl_real *gW)) \
    /* cross entropy over rows of C classes. from_log_probs: x already holds \
       log-probabilities (nll_loss). rows[b] = per-row loss (0 when ignored); \
       out[0] = sum or mean of rows (reduction != NONE); count[0] = the number \
       of non-ignored rows. Targets out of [0,C) and != ignore give NaN rows \
       on a GPU; the CPU op layer rejects them first. */ \
    X(int, xent, (int64_t B, int64_t C, const gdl_real *x, const int32_t *tgt, int ignore_index, \
        double smoothing, int from_log_probs, int reduction, gdl_real *rows, gdl_real *out, \
        gdl_real *count)) \
    /* gx += d loss / dx; gy has B elements (NONE) or 1 */ \
    X(int, xent_backward, (int64_t B, int64_t C, const gdl_real *x, const int32_t *tgt, int ignore_index, \
        double smoothing, int from_log_probs, int reduction, const gdl_real *gy, const gdl_real *count, \
        gdl_real *gx)) \
    /* elementwise loss(x, y) -> out; backward gx, gy (+=, either may be NULL) */ \
    X(int, pointwise_loss, (int kind, int64_t n, const gdl_real *x, const gdl_real *y, gdl_real *out)) \
    X(int, pointwise_loss_backward, (int kind, int64_t n, const gdl_real *x, const gdl_real *y, \
        const gdl_real *gout, gdl_real *gx, gdl_real *gy)) \
    /* optimizers (PyTorch's formulas: docs/DESIGN.md) over the `count` parameters of a table at once, as \
       PyTorch's foreach / multi_tensor_apply: one call, one kernel launch on a GPU, so a failure \
       updates nothing. The table is built once (one copy to the device) and kept while the parameters \
       stay the same; lr, the step counts and the bias corrections are read from device memory at each \
       call, so a captured call stays right when they change. decoupled: AdamW's weight decay. */ \
    X(void *, opt_table_new, (int count, const gdl_opt_tensor *t)) \
    X(void, opt_table_free, (void *table)) \
    X(int, sgd_multi, (const void *table)) \
    X(int, adam_multi, (const void *table, int decoupled)) \
    /* GradScaler, nothing read back (PyTorch's _amp_foreach_non_finite_check_and_unscale_ and \
       _amp_update_scale_): g[i] *= (float)(1 / (double)*scale) (left as is when that is 1), and *found_inf \
       and *found_inf2 (when not NULL) set to 1 when some g[i] was inf or NaN before; update, one element: \
       *found_inf non-zero: scale *= backoff, tracker 0; else tracker + 1, at `interval` scale *= growth \
       (kept when that is not finite) and tracker 0; then *found_inf = 0 (scale rounded to float) */ \
    X(int, amp_unscale, (int64_t n, gdl_real *g, const gdl_real *scale, gdl_real *found_inf, gdl_real *found_inf2)) \
    X(int, amp_update_scale, (gdl_real *scale, int32_t *tracker, gdl_real *found_inf, double growth, double backoff, \
        int interval)) \
    /* training metrics kept on the device, so a step reads nothing back: acc[0] += loss[0]*B, acc[1] += B; \
       with logits [B,C] and i32 labels y: acc[2] += rows whose argmax (gdl_argmax's rule) is y, acc[3] += B */ \
    X(int, fit_metrics, (const gdl_real *loss, int64_t B, int64_t C, const gdl_real *logits, const int32_t *y, \
        double *acc)) \
    /* clip_grad_norm_ without reading anything back: the global L2 norm of `count` gradients (g[i], n[i] \
       elements), written to *norm (device memory, may be NULL), and when max_norm / (norm + 1e-6) < 1 (or \
       NaN) every gradient scaled by it; the sum of squares in double, tensor by tensor in order */ \
    X(int, clip_grad_norm, (int count, gdl_real *const *g, const int64_t *n, double max_norm, double *norm)) \
    /* host-visible results (synchronising) */ \
    X(int, count_nonfinite, (int64_t n, const gdl_real *x, int64_t *out)) \
    X(int, sum_squares, (int64_t n, const gdl_real *x, double *out)) \
    /* the allocator's counters for one device (gdl_memory_stats; the arena fields are left to the \
       front end) and the restart of its peaks */ \
    X(int, memory_stats, (int device, gdl_memory_status *s)) \
    X(int, memory_reset_peak, (int device)) \
    /* the profiler (gdl_profile_*): a timing marker recorded in the current device's compute stream \
       (NULL without an error where the device has none: the CPU, whose ops the host clock times; freed \
       with event_destroy); the milliseconds between two markers, waiting for the second; the kernels \
       launched so far (-1: not counted) */ \
    X(void *, timing_event, (void)) \
    X(int, event_elapsed, (void *start, void *end, double *ms)) \
    X(int64_t, launch_count, (void)) \
    /* a device's PCI bus id ("0000:65:00.0"), which NVML's devices are matched by; -1 + error: none */ \
    X(int, pci_bus_id, (int device, char *buf, int len)) \
    /* CUDA graphs (gdl_graph_*): record the current device's compute stream instead of running it \
       (device allocations are refused meanwhile), stop into a ready-to-launch graph (also after a \
       failure, which leaves *graph NULL), launch one on the compute stream, free one. The CPU has none. */ \
    X(int, graph_begin, (void)) \
    X(int, graph_end, (void **graph)) \
    X(int, graph_launch, (void *graph)) \
    X(void, graph_destroy, (void *graph)) \
    /* collectives among the processes of a job, one device per process ([impl-dist]; NCCL on a GPU; \
       the CPU's collectives are MPI's, in the front end, so its entries refuse). comm_id: the job's id \
       (at most GDL_COMM_ID_BYTES), made by rank 0, which the front end hands to every rank; comm_init: \
       this rank joins on `device` (returns once every rank has); collective: kind (GDL_COLL_*) on the \
       device's communication stream, after the compute stream's work so far; count is per rank (all-gather: \
       sent, reduce-scatter: received); avg divides the sum by the world size; join: the compute stream \
       waits for it now, else at the next comm_join (DDP's buckets overlap the rest of backward); \
       comm_sync: the host waits for the communication stream (barrier: an all-reduce of one element \
       first) at most timeout_s seconds; a timeout or a peer's error aborts the communicator and every \
       later call fails; comm_destroy frees it (nothing to do when none was made) */ \
    X(int, comm_id, (void *id, int bytes)) \
    X(int, comm_init, (int device, const void *id, int world, int rank)) \
    X(int, collective, (int kind, const void *send, void *recv, int64_t count, gdl_dtype dt, int avg, int root, \
        int join)) \
    X(int, comm_join, (void)) \
    X(int, comm_sync, (int barrier, double timeout_s)) \
    X(void, comm_destroy, (void))

#define GDL__BACKEND_MEMBER(ret, entry, params) ret(*entry) params;
typedef struct gdl_backend {
    const char *name;
    GDL_BACKEND_ENTRIES(GDL__BACKEND_MEMBER)
} gdl_backend;

#ifdef __CUDACC__
#define GDL_HD __host__ __device__
#else
#define GDL_HD
#endif

/* The dropout mask both backends use: a counter-based hash, bit-identical
   on every device. */
static inline GDL_HD uint64_t gdl_hash64(uint64_t seed, uint64_t i) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline GDL_HD int gdl_dropout_keep(uint64_t seed, uint64_t i, double p) {
    /* 24 random bits against p; keep with probability 1-p */
    return (double)(gdl_hash64(seed, i) >> 40) * (1.0 / 16777216.0) >= p;
}

GPUDL_API void gdl__set_error(const char *fmt, ...);
/* a backend calls it each time the host waits for its device (gdl_sync_count) */
GPUDL_API void gdl__count_sync(void);
/* The op that last chose a backend (gdl__be), for backends' error messages; "" before any. */
GPUDL_API const char *gdl__backend_op(void);
#ifdef GPUDL_CUDA
/* defined in gpudl_cuda.cu */
const gdl_backend *gdl_cuda_backend(void);
int gdl_cuda_runtime_device_count(void);
int gdl_cuda_set_device(int index);
int gdl_cuda_device_info(int index, char *name, size_t name_len, size_t *total_mem, size_t *free_mem,
                         int *cc_major, int *cc_minor, int *sm_count, int *clock_khz);
void gdl_cuda_release_cache(void);          /* cudaFree the allocator's cached blocks */
int gdl_cuda_memory_stats(size_t *allocated, size_t *max_allocated, size_t *reserved);
void gdl_cuda_reset_peak_memory(void);
void gdl_cuda_set_tf32(int on);               /* off by default, as PyTorch's matmul */
#endif

#ifdef __cplusplus
}
#endif
#endif /* GPUDL_H */

/* ===========================================================================
   IMPLEMENTATION
   =========================================================================== */
#ifdef GPUDL_IMPLEMENTATION
#ifndef GPUDL_IMPLEMENTATION_DONE
#define GPUDL_IMPLEMENTATION_DONE

#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdarg.h>
#include <float.h>

#if defined(GPUDL_MALLOC) && defined(GPUDL_REALLOC) && defined(GPUDL_FREE)
/* user allocator */
#elif !defined(GPUDL_MALLOC) && !defined(GPUDL_REALLOC) && !defined(GPUDL_FREE)
#define GPUDL_MALLOC(sz) malloc(sz)
#define GPUDL_REALLOC(p, sz) realloc(p, sz)
#define GPUDL_FREE(p) free(p)
#else
#error "gpudl: define all of GPUDL_MALLOC, GPUDL_REALLOC and GPUDL_FREE, or none"
#endif

#ifndef GPUDL_ASSERT
#include <assert.h>
#define GPUDL_ASSERT(x) assert(x)
#endif

#if defined(__cplusplus) && __cplusplus >= 201103L
#define GDL__TLS thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_THREADS__)
#define GDL__TLS _Thread_local
#elif defined(__GNUC__) || defined(__clang__)
#define GDL__TLS __thread
#elif defined(_MSC_VER)
#define GDL__TLS __declspec(thread)
#else
#define GDL__TLS
#endif

#if defined(__cplusplus)
#define GDL__RESTRICT __restrict
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
#define GDL__RESTRICT restrict
#else
#define GDL__RESTRICT
#endif

/* ---------------------------------------------------------------------------
   [impl-platform]  The one part that talks to the operating system, with a
   POSIX version (Linux, macOS, the BSDs) and a Win32 one (MinGW-w64, MSVC):
   threads, mutexes, condition variables, once-only initialisation, atomics,
   clocks, sleeping, directory listing, processes, files (atomic replace,
   temporaries, fsync), the CPU count, dynamic loading and the sockets of the
   TCP rendezvous. The parts after this one call only what is here: no other
   part includes a POSIX-only or Windows header (tests/msvc_check.sh, run by
   make test, greps for that).

   What Windows lacks yet compiles out, and says so when it is used:
     - MPI: GPUDL_MPI is ignored there; gdl_dist_init with several processes
       fails with an error naming MPI and Windows;
     - the TCP rendezvous (several processes without MPI, for NCCL):
       GDL__OS_SOCKETS is not defined; gdl_dist_init says the platform lacks it.
   A platform that is neither POSIX nor Windows gets one thread
   (GPUDL_NO_THREADS), wall-clock time from clock(), no directory listing and
   no dynamic loading; it still compiles.

   Win32 needs Windows Vista or later (slim reader/writer locks, condition
   variables, InitOnceExecuteOnce).
   ------------------------------------------------------------------------- */

#if defined(_WIN32)
#define GDL__OS_WIN 1
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX /* windows.h's min / max macros would rewrite any later min( or max( */
#endif
#if !defined(_WIN32_WINNT) || _WIN32_WINNT < 0x0600
#undef _WIN32_WINNT
#define _WIN32_WINNT 0x0600
#endif
#include <windows.h>
#include <process.h>  /* _beginthreadex */
#include <io.h>       /* _commit, _isatty, _open_osfhandle */
#include <fcntl.h>    /* _O_RDONLY, _O_BINARY */
#include <direct.h>   /* _mkdir */
#include <errno.h>
#include <time.h>
#elif defined(__unix__) || defined(__APPLE__)
#define GDL__OS_POSIX 1
#define GDL__HAVE_POSIX 1
#include <errno.h>
#include <time.h>
#include <sys/types.h> /* pid_t, which -std=c99 hides in unistd.h */
#include <unistd.h>    /* getpid, fsync, isatty, sysconf */
#include <dirent.h>    /* opendir: stale temporaries of killed saves */
#include <sys/stat.h>  /* mkdir: gdl_fit's checkpoint_dir */
#include <sys/time.h>  /* gettimeofday */
#include <signal.h>    /* kill(pid, 0): is a process alive */
#include <fcntl.h>     /* a save locks its temporary: a live writer's is never removed */
#include <poll.h>      /* poll(NULL, 0, ms): a millisecond's sleep that -std=c99 does not hide */
#include <sched.h>     /* sched_yield; sched_getaffinity */
#if !defined(GPUDL_NO_THREADS)
#include <pthread.h>
#endif
#if defined(GPUDL_CUDA) || defined(GPUDL_NVML)
#include <dlfcn.h>
#endif
#if !defined(GPUDL_MPI)
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <netdb.h>
#define GDL__OS_SOCKETS 1 /* the TCP rendezvous ([impl-dist]) */
#endif
#if !defined(__cplusplus) && !defined(__APPLE__)
/* POSIX headers declare them, but a bare -std=c99 hides them (glibc, musl); the declarations are identical.
   (macOS shows them in any mode, with its own asm names.) */
#ifndef fileno
int fileno(FILE *stream);
#endif
int kill(pid_t pid, int sig);
#endif
#if defined(__linux__) && defined(__GLIBC__) && !defined(__USE_GNU)
extern int sched_getaffinity(pid_t, size_t, cpu_set_t *); /* -std=c99 hides it; the symbol is in every glibc */
#endif
#else
#include <errno.h>
#include <time.h>
#ifndef GPUDL_NO_THREADS
#define GPUDL_NO_THREADS 1 /* no thread API known here */
#endif
#endif

/* The functions below: static inline, so that a configuration that uses only some of them gets no
   "defined but not used" warning. */
#if defined(__cplusplus) || (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L)
#define GDL__OSFN static inline
#elif defined(_MSC_VER) || defined(__GNUC__)
#define GDL__OSFN static __inline
#else
#define GDL__OSFN static
#endif

/* MPI has no Windows version here yet: compiled out, gdl_dist_init says so (GDL__OS_NO_MPI). */
#if defined(GDL__OS_WIN) && defined(GPUDL_MPI)
#undef GPUDL_MPI
#define GDL__OS_NO_MPI "MPI (GPUDL_MPI) has no Windows version in gpudl yet"
#endif

/* One spelling for alignment, what every compiler accepts (MSVC rejects _Alignas in C before C11 and
   GCC's attribute everywhere). */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define GDL__ALIGNAS(n) alignas(n)
#elif defined(_MSC_VER)
#define GDL__ALIGNAS(n) __declspec(align(n))
#elif defined(__GNUC__) || defined(__clang__)
#define GDL__ALIGNAS(n) __attribute__((aligned(n)))
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define GDL__ALIGNAS(n) _Alignas(n)
#else
#define GDL__ALIGNAS(n)
#endif

/* ---- atomics ----
   gdl__atomic_load / store / add (returns the new value) / cas (on failure *expected becomes the value
   seen) on int, int64_t and uint64_t objects, with C11's memory orders. GCC and clang: their __atomic
   builtins. Windows otherwise (MSVC; -DGDL__ATOMICS_INTERLOCKED takes this path under MinGW, which is how
   make test-windows checks it): the Interlocked functions, full barriers, so at least the order asked
   for. GDL__ATOMICS is left undefined where there are neither: no thread pool then. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(GDL__ATOMICS_INTERLOCKED)
#define GDL__ATOMICS 1
#define GDL__MO_RELAXED __ATOMIC_RELAXED
#define GDL__MO_ACQUIRE __ATOMIC_ACQUIRE
#define GDL__MO_RELEASE __ATOMIC_RELEASE
#define GDL__MO_ACQ_REL __ATOMIC_ACQ_REL
#define GDL__MO_SEQ_CST __ATOMIC_SEQ_CST
#define gdl__atomic_load(p, mo) __atomic_load_n(p, mo)
#define gdl__atomic_store(p, v, mo) __atomic_store_n(p, v, mo)
#define gdl__atomic_add(p, v, mo) __atomic_add_fetch(p, v, mo)
#define gdl__atomic_cas(p, expected, desired, weak, mo_ok, mo_fail) \
    __atomic_compare_exchange_n(p, expected, desired, weak, mo_ok, mo_fail)
#elif defined(GDL__OS_WIN)
#define GDL__ATOMICS 1
#define GDL__ATOMICS_INTERLOCKED 1
#define GDL__MO_RELAXED 0
#define GDL__MO_ACQUIRE 0
#define GDL__MO_RELEASE 0
#define GDL__MO_ACQ_REL 0
#define GDL__MO_SEQ_CST 0
/* the object's size picks the 32- or 64-bit function; the value travels as int64_t */
GDL__OSFN int64_t gdl__il_load(volatile void *p, size_t size) {
    if (size == 8) return (int64_t)InterlockedOr64((volatile LONG64 *)p, 0);
    return (int64_t)InterlockedOr((volatile LONG *)p, 0);
}
GDL__OSFN void gdl__il_store(volatile void *p, size_t size, int64_t v) {
    if (size == 8) (void)InterlockedExchange64((volatile LONG64 *)p, (LONG64)v);
    else (void)InterlockedExchange((volatile LONG *)p, (LONG)v);
}
GDL__OSFN int64_t gdl__il_add(volatile void *p, size_t size, int64_t v) {
    if (size == 8) return (int64_t)InterlockedExchangeAdd64((volatile LONG64 *)p, (LONG64)v) + v;
    return (int64_t)(LONG)((LONG)InterlockedExchangeAdd((volatile LONG *)p, (LONG)v) + (LONG)v);
}
GDL__OSFN int gdl__il_cas(volatile void *p, size_t size, void *expected, int64_t desired) {
    if (size == 8) {
        LONG64 e, seen;
        memcpy(&e, expected, 8);
        if ((seen = InterlockedCompareExchange64((volatile LONG64 *)p, (LONG64)desired, e)) == e) return 1;
        memcpy(expected, &seen, 8);
    } else {
        LONG e, seen;
        memcpy(&e, expected, 4);
        if ((seen = InterlockedCompareExchange((volatile LONG *)p, (LONG)desired, e)) == e) return 1;
        memcpy(expected, &seen, 4);
    }
    return 0;
}
#define gdl__atomic_load(p, mo) ((void)(mo), gdl__il_load((volatile void *)(p), sizeof *(p)))
#define gdl__atomic_store(p, v, mo) ((void)(mo), gdl__il_store((volatile void *)(p), sizeof *(p), (int64_t)(v)))
#define gdl__atomic_add(p, v, mo) ((void)(mo), gdl__il_add((volatile void *)(p), sizeof *(p), (int64_t)(v)))
#define gdl__atomic_cas(p, expected, desired, weak, mo_ok, mo_fail) \
    ((void)(weak), (void)(mo_ok), (void)(mo_fail),                  \
     gdl__il_cas((volatile void *)(p), sizeof *(p), (void *)(expected), (int64_t)(desired)))
#endif

/* a spin-wait's pause */
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define GDL__CPU_PAUSE() __builtin_ia32_pause()
#elif (defined(__GNUC__) || defined(__clang__)) && (defined(__aarch64__) || defined(__arm__))
#define GDL__CPU_PAUSE() __asm__ __volatile__("yield")
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#define GDL__CPU_PAUSE() _mm_pause()
#elif defined(_MSC_VER) && (defined(_M_ARM64) || defined(_M_ARM))
#define GDL__CPU_PAUSE() __yield()
#else
#define GDL__CPU_PAUSE() ((void)0)
#endif

/* ---- threads, mutexes, condition variables, once ----
   Defined unless GPUDL_NO_THREADS. gdl__thread_start runs fn(arg) on a new thread: 0, or an errno value.
   *t must stay where it is until the thread is joined (Windows' start reads fn and arg from it). */
#if !defined(GPUDL_NO_THREADS) && defined(GDL__OS_POSIX)
#define GDL__OS_THREADS 1
typedef pthread_t gdl__thread;
typedef pthread_mutex_t gdl__mutex;
typedef pthread_cond_t gdl__cond;
typedef pthread_once_t gdl__once_flag;
#define GDL__MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
#define GDL__COND_INIT PTHREAD_COND_INITIALIZER
#define GDL__ONCE_INIT PTHREAD_ONCE_INIT
GDL__OSFN int gdl__thread_start(gdl__thread *t, void *(*fn)(void *), void *arg) {
    return pthread_create(t, NULL, fn, arg);
}
GDL__OSFN void gdl__thread_join(gdl__thread *t) { pthread_join(*t, NULL); }
GDL__OSFN int gdl__mutex_init(gdl__mutex *m) { return pthread_mutex_init(m, NULL); }
GDL__OSFN void gdl__mutex_destroy(gdl__mutex *m) { pthread_mutex_destroy(m); }
GDL__OSFN void gdl__mutex_lock(gdl__mutex *m) { pthread_mutex_lock(m); }
GDL__OSFN void gdl__mutex_unlock(gdl__mutex *m) { pthread_mutex_unlock(m); }
GDL__OSFN int gdl__cond_init(gdl__cond *c) { return pthread_cond_init(c, NULL); }
GDL__OSFN void gdl__cond_destroy(gdl__cond *c) { pthread_cond_destroy(c); }
GDL__OSFN void gdl__cond_wait(gdl__cond *c, gdl__mutex *m) { pthread_cond_wait(c, m); }
GDL__OSFN void gdl__cond_signal(gdl__cond *c) { pthread_cond_signal(c); }
GDL__OSFN void gdl__cond_broadcast(gdl__cond *c) { pthread_cond_broadcast(c); }
GDL__OSFN void gdl__once(gdl__once_flag *o, void (*fn)(void)) { pthread_once(o, fn); }
/* fn runs in the child of a fork() */
GDL__OSFN void gdl__os_after_fork(void (*fn)(void)) { pthread_atfork(NULL, NULL, fn); }
#elif !defined(GPUDL_NO_THREADS) && defined(GDL__OS_WIN)
#define GDL__OS_THREADS 1
typedef struct {
    HANDLE h;
    void *(*fn)(void *);
    void *arg;
} gdl__thread;
typedef SRWLOCK gdl__mutex;
typedef CONDITION_VARIABLE gdl__cond;
typedef INIT_ONCE gdl__once_flag;
#define GDL__MUTEX_INIT SRWLOCK_INIT
#define GDL__COND_INIT CONDITION_VARIABLE_INIT
#define GDL__ONCE_INIT INIT_ONCE_STATIC_INIT
GDL__OSFN unsigned __stdcall gdl__thread_entry(void *p) {
    gdl__thread *t = (gdl__thread *)p;
    (void)t->fn(t->arg);
    return 0;
}
GDL__OSFN int gdl__thread_start(gdl__thread *t, void *(*fn)(void *), void *arg) {
    t->fn = fn;
    t->arg = arg;
    t->h = (HANDLE)_beginthreadex(NULL, 0, gdl__thread_entry, t, 0, NULL);
    return t->h ? 0 : errno ? errno : EAGAIN;
}
GDL__OSFN void gdl__thread_join(gdl__thread *t) {
    WaitForSingleObject(t->h, INFINITE);
    CloseHandle(t->h);
}
GDL__OSFN int gdl__mutex_init(gdl__mutex *m) {
    InitializeSRWLock(m);
    return 0;
}
GDL__OSFN void gdl__mutex_destroy(gdl__mutex *m) { (void)m; } /* an SRW lock holds no resources */
GDL__OSFN void gdl__mutex_lock(gdl__mutex *m) { AcquireSRWLockExclusive(m); }
GDL__OSFN void gdl__mutex_unlock(gdl__mutex *m) { ReleaseSRWLockExclusive(m); }
GDL__OSFN int gdl__cond_init(gdl__cond *c) {
    InitializeConditionVariable(c);
    return 0;
}
GDL__OSFN void gdl__cond_destroy(gdl__cond *c) { (void)c; }
GDL__OSFN void gdl__cond_wait(gdl__cond *c, gdl__mutex *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
GDL__OSFN void gdl__cond_signal(gdl__cond *c) { WakeConditionVariable(c); }
GDL__OSFN void gdl__cond_broadcast(gdl__cond *c) { WakeAllConditionVariable(c); }
typedef struct {
    void (*fn)(void);
} gdl__once_call;
GDL__OSFN BOOL CALLBACK gdl__once_entry(PINIT_ONCE o, PVOID p, PVOID *ctx) {
    (void)o, (void)ctx;
    ((const gdl__once_call *)p)->fn();
    return TRUE;
}
GDL__OSFN void gdl__once(gdl__once_flag *o, void (*fn)(void)) {
    gdl__once_call c;
    c.fn = fn;
    InitOnceExecuteOnce(o, gdl__once_entry, &c, NULL);
}
GDL__OSFN void gdl__os_after_fork(void (*fn)(void)) { (void)fn; } /* no fork() on Windows */
#endif

/* ---- clocks, sleeping ---- */

/* wall-clock seconds (gdl_now): microseconds on POSIX, 100 ns on Windows, else clock() */
GDL__OSFN double gdl__os_wall_seconds(void) {
#if defined(GDL__OS_POSIX)
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
#elif defined(GDL__OS_WIN)
    FILETIME ft;
    ULARGE_INTEGER u;
    GetSystemTimeAsFileTime(&ft);
    u.LowPart = ft.dwLowDateTime;
    u.HighPart = ft.dwHighDateTime;
    return (double)(u.QuadPart - 116444736000000000ULL) * 1e-7; /* 100 ns since 1601 -> s since 1970 */
#else
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}

/* monotonic seconds with nanoseconds where the platform offers it (POSIX's CLOCK_MONOTONIC, which a
   bare -std=c99 hides; Windows' performance counter); -1 where not */
GDL__OSFN double gdl__os_monotonic_seconds(void) {
#if defined(GDL__OS_POSIX) && defined(CLOCK_MONOTONIC)
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0) return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#elif defined(GDL__OS_WIN)
    LARGE_INTEGER c, f;
    if (QueryPerformanceCounter(&c) && QueryPerformanceFrequency(&f) && f.QuadPart > 0)
        return (double)c.QuadPart / (double)f.QuadPart;
#endif
    return -1;
}

/* sleeps ms milliseconds; 0: gives the CPU to another thread */
GDL__OSFN void gdl__os_sleep_ms(int ms) {
#if defined(GDL__OS_POSIX)
    if (ms > 0) poll(NULL, 0, ms);
    else sched_yield();
#elif defined(GDL__OS_WIN)
    if (ms > 0) Sleep((DWORD)ms);
    else SwitchToThread();
#else
    (void)ms;
#endif
}

/* ---- the CPU count ----
   The CPUs this process may run on: its affinity on Linux (glibc) and Windows (the first 64: one
   processor group), else the online CPUs; 0 when unknown. */
GDL__OSFN long gdl__os_cpu_count(void) {
    long n = 0;
#if defined(GDL__OS_POSIX)
#if defined(__linux__) && defined(__GLIBC__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const unsigned char *b = (const unsigned char *)&set;
        size_t i;
        for (i = 0; i < sizeof set; i++) n += __builtin_popcount(b[i]);
    }
#endif
#ifdef _SC_NPROCESSORS_ONLN /* macOS hides it under a strict _POSIX_C_SOURCE */
    if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
#endif
#elif defined(GDL__OS_WIN)
    DWORD_PTR mine, sys;
    if (GetProcessAffinityMask(GetCurrentProcess(), &mine, &sys))
        for (; mine; mine &= mine - 1) n++;
    if (n <= 0) {
        SYSTEM_INFO si;
        GetSystemInfo(&si);
        n = (long)si.dwNumberOfProcessors;
    }
#endif
    return n > 0 ? n : 0;
}

/* ---- processes ---- */

GDL__OSFN long gdl__os_pid(void) {
#if defined(GDL__OS_POSIX)
    return (long)getpid();
#elif defined(GDL__OS_WIN)
    return (long)GetCurrentProcessId();
#else
    return 0;
#endif
}

/* 1 when no process `pid` exists here for sure; 0 when it lives, or nobody can tell */
GDL__OSFN int gdl__os_pid_gone(long pid) {
#if defined(GDL__OS_POSIX)
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
#elif defined(GDL__OS_WIN)
    HANDLE h = OpenProcess(SYNCHRONIZE, FALSE, (DWORD)pid);
    int gone;
    if (!h) return GetLastError() == ERROR_INVALID_PARAMETER; /* no such process (else: not ours to open) */
    gone = WaitForSingleObject(h, 0) == WAIT_OBJECT_0;       /* it exited; a handle somewhere keeps its id */
    CloseHandle(h);
    return gone;
#else
    (void)pid;
    return 0;
#endif
}

/* ---- directory listing: gdl__dir_open (0 / -1), gdl__dir_next (a name, "." and ".." included; NULL at
   the end), gdl__dir_close ---- */
typedef struct {
#if defined(GDL__OS_POSIX)
    DIR *d;
#elif defined(GDL__OS_WIN)
    HANDLE h;
    WIN32_FIND_DATAA e;
    int pending; /* e holds an entry not yet returned (FindFirstFile's) */
#else
    int none;
#endif
} gdl__dir;

GDL__OSFN int gdl__dir_open(gdl__dir *d, const char *path) {
#if defined(GDL__OS_POSIX)
    return (d->d = opendir(path)) ? 0 : -1;
#elif defined(GDL__OS_WIN)
    char pattern[4200];
    if (strlen(path) + 3 > sizeof pattern) return -1;
    snprintf(pattern, sizeof pattern, "%s\\*", path);
    d->h = FindFirstFileA(pattern, &d->e);
    d->pending = 1;
    return d->h == INVALID_HANDLE_VALUE ? -1 : 0;
#else
    (void)d, (void)path;
    return -1;
#endif
}
GDL__OSFN const char *gdl__dir_next(gdl__dir *d) {
#if defined(GDL__OS_POSIX)
    struct dirent *e = readdir(d->d);
    return e ? e->d_name : NULL;
#elif defined(GDL__OS_WIN)
    if (!d->pending && !FindNextFileA(d->h, &d->e)) return NULL;
    d->pending = 0;
    return d->e.cFileName;
#else
    (void)d;
    return NULL;
#endif
}
GDL__OSFN void gdl__dir_close(gdl__dir *d) {
#if defined(GDL__OS_POSIX)
    closedir(d->d);
#elif defined(GDL__OS_WIN)
    FindClose(d->h);
#else
    (void)d;
#endif
}

/* ---- files ---- */

/* 0, or -1 with errno (EEXIST when it is there already); 0 where directories cannot be made from here */
GDL__OSFN int gdl__os_mkdir(const char *path) {
#if defined(GDL__OS_POSIX)
    return mkdir(path, 0777);
#elif defined(GDL__OS_WIN)
    return _mkdir(path);
#else
    (void)path;
    return 0;
#endif
}

GDL__OSFN int gdl__os_isatty(FILE *f) {
#if defined(GDL__OS_POSIX)
    return isatty(fileno(f));
#elif defined(GDL__OS_WIN)
    return _isatty(_fileno(f));
#else
    (void)f;
    return 0;
#endif
}

/* f's data on the disk (after fflush): 0 / -1 with errno */
GDL__OSFN int gdl__os_fsync(FILE *f) {
#if defined(GDL__OS_POSIX)
    int fd = fileno(f);
    return fd < 0 ? -1 : fsync(fd);
#elif defined(GDL__OS_WIN)
    return _commit(_fileno(f));
#else
    (void)f; /* fflush already done; no portable fsync */
    return 0;
#endif
}

/* A file opened for reading ("rb"). On Windows with FILE_SHARE_DELETE too, so that others may delete or
   rename it meanwhile. Windows (and Wine) still refuse to replace a file that is open: a save over a
   checkpoint being read fails there with "cannot rename", the old file intact (tests/test_platform.c). */
GDL__OSFN FILE *gdl__os_fopen_read(const char *path) {
#if defined(GDL__OS_WIN)
    HANDLE h = CreateFileA(path, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                           OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    int fd;
    FILE *f;
    if (h == INVALID_HANDLE_VALUE) {
        DWORD e = GetLastError();
        errno = e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND ? ENOENT
              : e == ERROR_ACCESS_DENIED || e == ERROR_SHARING_VIOLATION ? EACCES : EIO;
        return NULL;
    }
    if ((fd = _open_osfhandle((intptr_t)h, _O_RDONLY | _O_BINARY)) < 0) {
        CloseHandle(h);
        return NULL;
    }
    if (!(f = _fdopen(fd, "rb"))) _close(fd);
    return f;
#else
    return fopen(path, "rb");
#endif
}

/* Replaces `to` by `from` in one step: a reader sees the old file or the new one, never a mix or
   none. POSIX: rename. Windows: MoveFileExW with MOVEFILE_REPLACE_EXISTING (rename refuses an existing
   target there), write-through; the names are converted as fopen converts them (the ANSI code page:
   UTF-8 where the program declares it). 0, or -1 with errno. */
GDL__OSFN int gdl__os_replace(const char *from, const char *to) {
#if defined(GDL__OS_WIN)
    wchar_t wf[4096], wt[4096];
    DWORD e;
    if (!MultiByteToWideChar(CP_ACP, 0, from, -1, wf, 4096) || !MultiByteToWideChar(CP_ACP, 0, to, -1, wt, 4096)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (MoveFileExW(wf, wt, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)) return 0;
    e = GetLastError();
    errno = e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND ? ENOENT
          : e == ERROR_ACCESS_DENIED || e == ERROR_SHARING_VIOLATION || e == ERROR_LOCK_VIOLATION ? EACCES
          : e == ERROR_NOT_SAME_DEVICE ? EXDEV : EIO;
    return -1;
#else
    return rename(from, to);
#endif
}

/* A save writes to a temporary next to its target, named path.tmp.<pid>.<counter>, and replaces the
   target with it (gdl__os_replace). While it writes, the temporary is locked, so that a later process
   that finds it (gdl__os_remove_if_unlocked) leaves a live writer's file alone: on POSIX an advisory
   write lock, which the kernel drops when the writer dies (no lock taken: NFS without lockd; harmless);
   on Windows nothing is needed, since a file open in stdio's sharing mode cannot be deleted. */
GDL__OSFN void gdl__os_lock_temporary(FILE *f) {
#if defined(GDL__OS_POSIX)
    struct flock lk;
    memset(&lk, 0, sizeof lk);
    lk.l_type = F_WRLCK;
    lk.l_whence = SEEK_SET;
    (void)fcntl(fileno(f), F_SETLK, &lk);
#else
    (void)f;
#endif
}
GDL__OSFN void gdl__os_remove_if_unlocked(const char *path) {
#if defined(GDL__OS_POSIX)
    struct flock lk;
    int fd = open(path, O_RDWR);
    if (fd < 0) return;
    memset(&lk, 0, sizeof lk);
    lk.l_type = F_WRLCK;
    lk.l_whence = SEEK_SET;
    if (fcntl(fd, F_SETLK, &lk) == 0) remove(path); /* nobody writes it */
    close(fd);
#else
    remove(path); /* fails while its writer has it open */
#endif
}

/* ---- dynamic loading (NVML): gdl__dl_open (NULL + why), gdl__dl_sym (the symbol's address as an
   object pointer: the caller memcpys it into a function pointer), gdl__dl_close. GDL__OS_DL where it
   exists. ---- */
#if defined(GDL__OS_POSIX) && (defined(GPUDL_CUDA) || defined(GPUDL_NVML))
#define GDL__OS_DL 1
#define GDL__NVML_DEFAULT_LIB "libnvidia-ml.so.1"
GDL__OSFN void *gdl__dl_open(const char *name, char *why, size_t why_size) {
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, why_size, "%s", e ? e : name);
    }
    return h;
}
GDL__OSFN void *gdl__dl_sym(void *h, const char *sym) { return dlsym(h, sym); }
GDL__OSFN void gdl__dl_close(void *h) { dlclose(h); }
#elif defined(GDL__OS_WIN) && (defined(GPUDL_CUDA) || defined(GPUDL_NVML))
#define GDL__OS_DL 1
#define GDL__NVML_DEFAULT_LIB "nvml.dll"
GDL__OSFN void *gdl__dl_open(const char *name, char *why, size_t why_size) {
    HMODULE h = LoadLibraryA(name);
    if (!h) snprintf(why, why_size, "%s: LoadLibrary failed, error %lu", name, (unsigned long)GetLastError());
    return (void *)h;
}
GDL__OSFN void *gdl__dl_sym(void *h, const char *sym) {
    FARPROC f = GetProcAddress((HMODULE)h, sym);
    void *p;
    memcpy(&p, &f, sizeof p); /* ISO C has no cast between function and object pointers */
    return p;
}
GDL__OSFN void gdl__dl_close(void *h) { FreeLibrary((HMODULE)h); }
#endif
/* ---------------------------------------------------------------------------
   [impl-errors]
   ------------------------------------------------------------------------- */

static GDL__TLS char gdl__err[1024];

GPUDL_API void gdl__set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gdl__err, sizeof gdl__err, fmt, ap);
    va_end(ap);
}
GPUDL_API const char *gdl_last_error(void) { return gdl__err; }
GPUDL_API void gdl_clear_error(void) { gdl__err[0] = 0; }

static int64_t gdl__syncs; /* host waits for a device, from every thread */
GPUDL_API void gdl__count_sync(void) {
#ifdef GDL__ATOMICS
    (void)gdl__atomic_add(&gdl__syncs, 1, GDL__MO_RELAXED);
#else
    gdl__syncs++;
#endif
}
GPUDL_API int64_t gdl_sync_count(void) {
#ifdef GDL__ATOMICS
    return gdl__atomic_load(&gdl__syncs, GDL__MO_RELAXED);
#else
    return gdl__syncs;
#endif
}
GPUDL_API const char *gdl_version(void) { return GPUDL_VERSION; }

/* A NULL argument usually follows an earlier failure: keep that message. */
static void gdl__null_arg(const char *op, const char *arg) {
    char prev[sizeof gdl__err];
    memcpy(prev, gdl__err, sizeof prev);
    if (prev[0])
        gdl__set_error("%s: %s is NULL (after: %s)", op, arg, prev);
    else
        gdl__set_error("%s: %s is NULL", op, arg);
}

static const char *const gdl__dtype_names[GDL_DTYPE_COUNT] = {"f32", "i32", "u8", "f16", "bf16"};
static const size_t gdl__dtype_sizes[GDL_DTYPE_COUNT] = {sizeof(gdl_real), 4, 1, 2, 2};

GPUDL_API const char *gdl_dtype_name(gdl_dtype dt) {
    return ((unsigned)dt < GDL_DTYPE_COUNT) ? gdl__dtype_names[dt] : "invalid";
}
GPUDL_API size_t gdl_dtype_size(gdl_dtype dt) {
    return ((unsigned)dt < GDL_DTYPE_COUNT) ? gdl__dtype_sizes[dt] : 0;
}

static const char *gdl__shape_fmt(int ndim, const int64_t *shape) {
    static GDL__TLS char ring[8][128];
    static GDL__TLS int slot;
    char *s = ring[slot++ & 7];
    size_t k = 0;
    int i;
    s[k++] = '[';
    for (i = 0; i < ndim && k < 100; i++)
        k += (size_t)snprintf(s + k, 128 - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    s[k++] = ']';
    s[k] = 0;
    return s;
}
GPUDL_API const char *gdl_shape_str(const gdl_tensor *t) {
    return t ? gdl__shape_fmt(t->ndim, t->shape) : "(null)";
}

/* ---------------------------------------------------------------------------
   [impl-devices]
   ------------------------------------------------------------------------- */

GPUDL_API gdl_device gdl_cpu(void) {
    gdl_device d;
    d.type = GDL_DEVICE_CPU;
    d.index = 0;
    return d;
}
GPUDL_API gdl_device gdl_cuda(int index) {
    gdl_device d;
    d.type = GDL_DEVICE_CUDA;
    d.index = index;
    return d;
}
GPUDL_API int gdl_device_equal(gdl_device a, gdl_device b) {
    return a.type == b.type && (a.type == GDL_DEVICE_CPU || a.index == b.index);
}
GPUDL_API const char *gdl_device_str(gdl_device d) {
    static const char *const names[8] = {"cuda:0", "cuda:1", "cuda:2", "cuda:3",
                                         "cuda:4", "cuda:5", "cuda:6", "cuda:7"};
    if (d.type == GDL_DEVICE_CPU) return "cpu";
    if (d.type == GDL_DEVICE_CUDA) return (d.index >= 0 && d.index < 8) ? names[d.index] : "cuda:?";
    return "invalid-device";
}
/* The GPU backends of this build: a table of what the front end asks of a
   device runtime, the one place that names GPUDL_CUDA. NULL: not built in
   (the CPU backend is always there). */
typedef struct gdl__gpu_kind {
    int (*count)(void);
    int (*set_device)(int index);
    int (*name)(int index, char *buf, size_t len);
    void (*release_cache)(void);
    const gdl_backend *(*backend)(void);
} gdl__gpu_kind;
#ifdef GPUDL_CUDA
static int gdl__cuda_name(int index, char *buf, size_t len) {
    return gdl_cuda_device_info(index, buf, len, NULL, NULL, NULL, NULL, NULL, NULL);
}
static const gdl__gpu_kind gdl__cuda_kind = {gdl_cuda_runtime_device_count, gdl_cuda_set_device, gdl__cuda_name,
                                             gdl_cuda_release_cache, gdl_cuda_backend};
static const gdl__gpu_kind *const gdl__cuda_registry = &gdl__cuda_kind;
#else
static const gdl__gpu_kind *const gdl__cuda_registry = NULL;
#endif

GPUDL_API int gdl_cuda_device_count(void) { return gdl__cuda_registry ? gdl__cuda_registry->count() : 0; }
GPUDL_API int gdl_cuda_is_available(void) { return gdl_cuda_device_count() > 0; }
GPUDL_API gdl_device gdl_default_device(void) {
    static int told; /* once per process: a notice, not a log */
    if (!gdl__cuda_registry) return gdl_cpu();
    if (gdl_cuda_is_available()) return gdl_cuda(0);
    if (!told) {
        const char *q = getenv("GPUDL_QUIET");
        told = 1;
        if (!q || !q[0] || strcmp(q, "0") == 0)
            fprintf(stderr, "gpudl: no CUDA device found (no GPU, or no driver): using the CPU "
                            "(GPUDL_QUIET=1 hides this notice)\n");
    }
    return gdl_cpu();
}
GPUDL_API const char *gdl_device_name(gdl_device d) {
    static GDL__TLS char name[256];
    if (d.type == GDL_DEVICE_CUDA && gdl__cuda_registry)
        return gdl__cuda_registry->name(d.index, name, sizeof name) < 0 ? "unknown CUDA device" : name;
    return d.type == GDL_DEVICE_CPU ? "CPU" : "unavailable";
}

static const gdl_backend *gdl__cpu_backend(void);

#define GDL__MAX_GPUS 16
/* The profiler's switch (its state and code: [impl-profile]). */
static int gdl__prof_on;
static void gdl__prof_open(const char *op, gdl_device d, const gdl_backend *be);

static GDL__TLS const char *gdl__be_op = "";
GPUDL_API const char *gdl__backend_op(void) { return gdl__be_op; }

static const gdl_backend *gdl__be_lookup(const char *op, gdl_device d);
/* The backend of a device, made current. NULL + error if unusable. Every op asks here once its
   arguments are checked, so this is where the profiler starts timing it (gdl__finish stops), and
   where backends learn which op their error messages are about (gdl__backend_op). */
static const gdl_backend *gdl__be(const char *op, gdl_device d) {
    const gdl_backend *be;
    gdl__be_op = op;
    be = gdl__be_lookup(op, d);
    if (gdl__prof_on && be) gdl__prof_open(op, d, be);
    return be;
}
static const gdl_backend *gdl__be_lookup(const char *op, gdl_device d) {
    if (d.type == GDL_DEVICE_CPU) return gdl__cpu_backend();
    if (d.type == GDL_DEVICE_CUDA && gdl__cuda_registry) {
        static GDL__TLS int current = -1; /* CUDA's current device is per host thread */
        if (d.index < 0 || d.index >= gdl_cuda_device_count()) {
            gdl__set_error("%s: device %s is not available (%d CUDA devices)", op, gdl_device_str(d),
                           gdl_cuda_device_count());
            return NULL;
        }
        if (d.index != current) {
            if (gdl__cuda_registry->set_device(d.index) < 0) return NULL;
            current = d.index;
        }
        return gdl__cuda_registry->backend();
    }
    gdl__set_error("%s: device %s is not available in this build (built without GPUDL_CUDA)", op,
                   gdl_device_str(d));
    return NULL;
}

/* ---------------------------------------------------------------------------
   [impl-profile]   Spans: an op's opens in gdl__be and closes in gdl__finish
   (an op that asks for a backend but never finishes — a factory, gdl_free, a
   view — leaves its span open until the next one replaces it, uncounted).
   Explicit spans (backward functions, gdl_step, copies, loader waits) cover
   everything inside them. Each closed span is a record; gdl_profile_end
   reads the GPU's events and sums the records per (name, device).
   ------------------------------------------------------------------------- */
typedef struct gdl__prof_rec {
    const char *name;
    gdl_device dev;
    double t0, t1;          /* host seconds (gdl__prof_clock) */
    void *e0, *e1;          /* GPU events; NULL on the CPU */
    double gpu_t0, gpu_ms;  /* from the device's first event, and the duration (ms) */
    int64_t launches;       /* -1: not counted */
    int gpu;                /* timed on the GPU */
} gdl__prof_rec;

static struct {
    int ended;              /* rows hold a finished profile */
    double begin;           /* gdl__prof_clock at gdl_profile_begin */
    gdl__prof_rec *rec;
    size_t n, cap;
    gdl__prof_rec cur;      /* the open span (cur.name != NULL) */
    const gdl_backend *cur_be;
    int explicit_;          /* the open span is explicit: ops inside it belong to it */
    void *base[GDL__MAX_GPUS];     /* each device's first event, the origin of its GPU times */
    const gdl_backend *base_be[GDL__MAX_GPUS];
    double base_t[GDL__MAX_GPUS];  /* host time when it was recorded */
    gdl_profile_row *rows;
    int nrows;
    char bw_names[GDL_OP_COUNT][48];   /* "gdl_<op> backward" */
} gdl__prof;

/* The profiler's host clock in seconds: monotonic with nanoseconds where the platform offers it
   (gdl__os_monotonic_seconds), else gdl_now (microseconds). */
static double gdl__prof_clock(void) {
    double t = gdl__os_monotonic_seconds();
    return t >= 0 ? t : gdl_now();
}

static void gdl__prof_drop(gdl__prof_rec *r, const gdl_backend *be) {
    if (be && be->event_destroy) {
        be->event_destroy(r->e0);
        be->event_destroy(r->e1);
    }
    r->e0 = r->e1 = NULL;
}

static void gdl__prof_start(const char *name, gdl_device d, const gdl_backend *be) {
    gdl__prof_rec *c = &gdl__prof.cur;
    if (c->name) gdl__prof_drop(c, gdl__prof.cur_be); /* an open span that never closed */
    memset(c, 0, sizeof *c);
    c->name = name;
    c->dev = d;
    c->launches = be->launch_count();
    gdl__prof.cur_be = be;
    if (d.type != GDL_DEVICE_CPU && d.index >= 0 && d.index < GDL__MAX_GPUS) { /* the CPU: the host clock */
        if (!gdl__prof.base[d.index]) {
            gdl__prof.base[d.index] = be->timing_event();
            gdl__prof.base_be[d.index] = be;
            gdl__prof.base_t[d.index] = gdl__prof_clock();
        }
        if (gdl__prof.base[d.index]) c->e0 = be->timing_event(); /* NULL on failure: host time only */
    }
    c->t0 = gdl__prof_clock();
}

static void gdl__prof_stop(void) {
    gdl__prof_rec *c = &gdl__prof.cur;
    const gdl_backend *be = gdl__prof.cur_be;
    c->t1 = gdl__prof_clock();
    if (c->e0) c->e1 = be->timing_event();
    if (c->launches >= 0) c->launches = be->launch_count() - c->launches;
    if (gdl__prof.n == gdl__prof.cap) {
        size_t cap = gdl__prof.cap ? 2 * gdl__prof.cap : 1024;
        gdl__prof_rec *r = (gdl__prof_rec *)GPUDL_REALLOC(gdl__prof.rec, cap * sizeof *r);
        if (!r) { /* out of memory: this call goes uncounted rather than failing the op */
            gdl__prof_drop(c, be);
            c->name = NULL;
            return;
        }
        gdl__prof.rec = r;
        gdl__prof.cap = cap;
    }
    gdl__prof.rec[gdl__prof.n++] = *c;
    c->name = NULL;
}

static void gdl__prof_open(const char *op, gdl_device d, const gdl_backend *be) {
    const char *cur = gdl__prof.cur.name;
    if (gdl__prof.explicit_ || (cur && (cur == op || strcmp(cur, op) == 0))) return; /* inside a span */
    gdl__prof_start(op, d, be);
}
/* gdl__finish: the op named op returns its result */
static void gdl__prof_close(const char *op) {
    const char *cur = gdl__prof.cur.name;
    if (!gdl__prof.explicit_ && cur && (cur == op || strcmp(cur, op) == 0)) gdl__prof_stop();
}
/* an explicit span around work that is not one op; 1 if it opened one (pass it to _pop) */
static int gdl__prof_push(const char *name, gdl_device d) {
    const gdl_backend *be;
    if (!gdl__prof_on || gdl__prof.explicit_) return 0;
    if (!(be = gdl__be_lookup(name, d))) return 0;
    gdl__prof_start(name, d, be);
    gdl__prof.explicit_ = 1;
    return 1;
}
static void gdl__prof_pop(int opened, int ok) {
    if (!opened) return;
    gdl__prof.explicit_ = 0;
    if (!gdl__prof_on) return;
    if (ok) {
        gdl__prof_stop();
    } else {
        gdl__prof_drop(&gdl__prof.cur, gdl__prof.cur_be);
        gdl__prof.cur.name = NULL;
    }
}
static const char *gdl__prof_bw_name(int op) {
    char *b = gdl__prof.bw_names[op];
    if (!b[0]) snprintf(b, sizeof gdl__prof.bw_names[op], "gdl_%s backward", gdl_op_name(op));
    return b;
}

static void gdl__prof_free(void) {
    size_t i;
    int d;
    for (i = 0; i < gdl__prof.n; i++) {
        gdl__prof_rec *r = &gdl__prof.rec[i];
        if (r->e0 || r->e1) {
            const gdl_backend *be = gdl__prof.base_be[r->dev.index];
            gdl__prof_drop(r, be);
        }
    }
    for (d = 0; d < GDL__MAX_GPUS; d++) {
        if (gdl__prof.base[d]) gdl__prof.base_be[d]->event_destroy(gdl__prof.base[d]);
        gdl__prof.base[d] = NULL;
    }
    GPUDL_FREE(gdl__prof.rec);
    GPUDL_FREE(gdl__prof.rows);
    gdl__prof.rec = NULL;
    gdl__prof.rows = NULL;
    gdl__prof.n = gdl__prof.cap = 0;
    gdl__prof.nrows = 0;
    gdl__prof.ended = 0;
}

GPUDL_API int gdl_profile_begin(void) {
    if (gdl__prof_on) {
        gdl__set_error("gdl_profile_begin: the profiler is already running (call gdl_profile_end first)");
        return -1;
    }
    gdl__prof_free();
    gdl__prof.cur.name = NULL;
    gdl__prof.explicit_ = 0;
    gdl__prof.begin = gdl__prof_clock();
    gdl__prof_on = 1;
    return 0;
}

static int gdl__prof_row_cmp(const void *a, const void *b) {
    const gdl_profile_row *x = (const gdl_profile_row *)a, *y = (const gdl_profile_row *)b;
    if (x->total_ms != y->total_ms) return x->total_ms > y->total_ms ? -1 : 1;
    return strcmp(x->name, y->name);
}

GPUDL_API int gdl_profile_end(void) {
    size_t i;
    int k, rc = 0;
    double all = 0;
    if (!gdl__prof_on) {
        gdl__set_error("gdl_profile_end: the profiler is not running (call gdl_profile_begin first)");
        return -1;
    }
    gdl__prof_on = 0;
    if (gdl__prof.cur.name) gdl__prof_drop(&gdl__prof.cur, gdl__prof.cur_be);
    gdl__prof.cur.name = NULL;
    gdl__prof.explicit_ = 0;
    /* the GPU times: the first read waits for the device, the rest are done by then */
    for (i = 0; i < gdl__prof.n; i++) {
        gdl__prof_rec *r = &gdl__prof.rec[i];
        const gdl_backend *be;
        double ms = 0, at = 0;
        if (!r->e0) continue;
        be = gdl__prof.base_be[r->dev.index];
        if (!r->e1 || be->event_elapsed(r->e0, r->e1, &ms) < 0 ||
            be->event_elapsed(gdl__prof.base[r->dev.index], r->e0, &at) < 0) {
            rc = -1;
            break;
        }
        r->gpu_ms = ms < 0 ? 0 : ms;
        r->gpu = 1;
        r->gpu_t0 = gdl__prof.base_t[r->dev.index] - gdl__prof.begin + at / 1e3;
        gdl__prof_drop(r, be);
    }
    if (rc < 0) {
        char why[sizeof gdl__err];
        memcpy(why, gdl__err, sizeof why);
        gdl__prof_free();
        gdl__set_error("gdl_profile_end: cannot read the GPU's timings: %s", why);
        return -1;
    }
    /* one row per (name, device) */
    gdl__prof.rows = (gdl_profile_row *)GPUDL_MALLOC((gdl__prof.n ? gdl__prof.n : 1) * sizeof(gdl_profile_row));
    if (!gdl__prof.rows) {
        gdl__prof_free();
        gdl__set_error("gdl_profile_end: out of memory for %lu records", (unsigned long)gdl__prof.n);
        return -1;
    }
    for (i = 0; i < gdl__prof.n; i++) {
        const gdl__prof_rec *r = &gdl__prof.rec[i];
        double ms = r->gpu ? r->gpu_ms : (r->t1 - r->t0) * 1e3;
        gdl_profile_row *w = NULL;
        if (ms < 0) ms = 0; /* the host clock stepped back */
        for (k = 0; k < gdl__prof.nrows; k++)
            if (gdl_device_equal(gdl__prof.rows[k].device, r->dev) && strcmp(gdl__prof.rows[k].name, r->name) == 0) {
                w = &gdl__prof.rows[k];
                break;
            }
        if (!w) {
            w = &gdl__prof.rows[gdl__prof.nrows++];
            memset(w, 0, sizeof *w);
            w->name = r->name;
            w->device = r->dev;
            w->launches = r->launches < 0 ? -1 : 0;
        }
        w->calls++;
        w->total_ms += ms;
        if (ms > w->max_ms) w->max_ms = ms;
        if (w->launches >= 0 && r->launches >= 0) w->launches += r->launches;
        all += ms;
    }
    for (k = 0; k < gdl__prof.nrows; k++) {
        gdl_profile_row *w = &gdl__prof.rows[k];
        w->avg_ms = w->total_ms / (double)w->calls;
        w->percent = all > 0 ? 100.0 * w->total_ms / all : 0;
    }
    qsort(gdl__prof.rows, (size_t)gdl__prof.nrows, sizeof(gdl_profile_row), gdl__prof_row_cmp);
    gdl__prof.ended = 1;
    return 0;
}

/* The readers of a profile: their argument is there, and so is a finished profile. 0 / -1 + error. */
static int gdl__prof_ready(const char *fn, const char *arg, const void *p) {
    if (!p) {
        gdl__null_arg(fn, arg);
        return -1;
    }
    if (!gdl__prof.ended) {
        gdl__set_error("%s: no profile has ended yet (gdl_profile_begin ... gdl_profile_end)", fn);
        return -1;
    }
    return 0;
}

GPUDL_API int gdl_profile_rows(const gdl_profile_row **rows) {
    if (gdl__prof_ready("gdl_profile_rows", "rows", rows) < 0) return -1;
    *rows = gdl__prof.rows;
    return gdl__prof.nrows;
}

GPUDL_API int gdl_profile_print(FILE *f) {
    const gdl_profile_row *r;
    double all = 0;
    int n, k;
    if (gdl__prof_ready("gdl_profile_print", "f", f) < 0) return -1;
    n = gdl_profile_rows(&r);
    for (k = 0; k < n; k++) all += r[k].total_ms;
    fprintf(f, "%-28s %-7s %8s %12s %12s %12s %7s %9s\n", "Name", "Device", "Calls", "Total (ms)", "Avg (ms)",
            "Max (ms)", "%", "Launches");
    for (k = 0; k < n; k++) {
        char l[24];
        if (r[k].launches < 0) snprintf(l, sizeof l, "-");
        else snprintf(l, sizeof l, "%lld", (long long)r[k].launches);
        fprintf(f, "%-28s %-7s %8lld %12.3f %12.4f %12.4f %6.2f%% %9s\n", r[k].name, gdl_device_str(r[k].device),
                (long long)r[k].calls, r[k].total_ms, r[k].avg_ms, r[k].max_ms, r[k].percent, l);
    }
    fprintf(f, "%-28s %-7s %8s %12.3f\n", "Total", "", "", all);
    return ferror(f) ? -1 : 0;
}

GPUDL_API int gdl_profile_trace(const char *path) {
    FILE *f;
    size_t i;
    if (gdl__prof_ready("gdl_profile_trace", "path", path) < 0) return -1;
    if (!(f = fopen(path, "w"))) {
        gdl__set_error("gdl_profile_trace: cannot write %s", path);
        return -1;
    }
    /* names are gpudl's own ("gdl_x backward"): nothing to escape in JSON */
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"host\"}}");
    for (i = 0; i < gdl__prof.n; i++) {
        const gdl__prof_rec *r = &gdl__prof.rec[i];
        fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":1}",
                r->name, gdl_device_str(r->dev), (r->t0 - gdl__prof.begin) * 1e6, (r->t1 - r->t0) * 1e6);
        if (r->gpu)
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%d}",
                    r->name, gdl_device_str(r->dev), r->gpu_t0 * 1e6, r->gpu_ms * 1e3, 2 + r->dev.index);
    }
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\"}\n");
    if (ferror(f) | fclose(f)) {
        gdl__set_error("gdl_profile_trace: write error on %s", path);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
   [impl-memory]   The per-step arenas: one for the host (tensor structs, tape
   nodes and CPU data) and one per GPU. An arena is a list of chunks; a reset
   rewinds to the first chunk and keeps them all, so the next step, making
   the same requests in the same order, lands at the same addresses and
   allocates nothing.
   ------------------------------------------------------------------------- */

typedef struct gdl__chunk {
    struct gdl__chunk *next;
    char *base;
    size_t size, used;
} gdl__chunk;

typedef struct gdl__arena {
    gdl__chunk *head, *cur;
    size_t used, reserved;
    const gdl_backend *be; /* NULL: host memory from GPUDL_MALLOC */
} gdl__arena;

#define GDL__ALIGN 64
static gdl__arena gdl__host_arena;
static gdl__arena gdl__gpu_arena[GDL__MAX_GPUS];
/* Temporaries' headers live in two arenas used in turn, one per arena
   generation: a header made before the last gdl_arena_reset is not written
   over during this step, so its generation still shows that it is stale
   (its data has been reused). One kept across two resets is caught unless a
   new header took its place; both cost one comparison per op input. */
static gdl__arena gdl__hdr_arena[2];
static unsigned gdl__arena_gen = 1; /* never 0: persistent tensors have gen 0 */
static struct gdl_node *gdl__tape;  /* last recorded node */
static int gdl__grad_enabled = 1;
static int gdl__anomaly = 0;
static int gdl__capturing = 0; /* gdl_graph_capture is recording a step ([impl-graph]) */

static void *gdl__arena_alloc(gdl__arena *a, size_t bytes) {
    size_t need = (bytes + GDL__ALIGN - 1) / GDL__ALIGN * GDL__ALIGN;
    gdl__chunk *c;
    if (need == 0) need = GDL__ALIGN;
    if (need < bytes) return NULL; /* overflow */
    for (c = a->cur; c; c = c->next) {
        if (c->size - c->used >= need) {
            void *p = c->base + c->used;
            c->used += need;
            a->cur = c;
            a->used += need;
            return p;
        }
        if (c->next && c->next->used == 0 && c->next->size < need) break; /* insert a bigger one here */
    }
    {
        /* a new chunk after the current one: at least 1 MiB, at least double the last */
        size_t size = need, last = a->cur ? a->cur->size : 0;
        gdl__chunk *nc = (gdl__chunk *)GPUDL_MALLOC(sizeof(gdl__chunk));
        if (size < ((size_t)1 << 20)) size = (size_t)1 << 20;
        if (size < 2 * last && 2 * last <= ((size_t)1 << 30)) size = 2 * last;
        if (!nc) return NULL;
        nc->base = a->be ? (char *)a->be->alloc(size) : (char *)GPUDL_MALLOC(size);
        if (!nc->base && size > need) { /* retry with what is needed */
            size = need;
            nc->base = a->be ? (char *)a->be->alloc(size) : (char *)GPUDL_MALLOC(size);
        }
        if (!nc->base) {
            GPUDL_FREE(nc);
            return NULL;
        }
        nc->size = size;
        nc->used = need;
        if (a->cur) {
            /* the current chunk is full for this request: it stays in the list */
            nc->next = a->cur->next;
            a->cur->next = nc;
        } else {
            nc->next = a->head;
            a->head = nc;
        }
        a->cur = nc;
        a->used += need;
        a->reserved += size;
        return nc->base;
    }
}

static void gdl__arena_reset(gdl__arena *a) {
    gdl__chunk *c;
    for (c = a->head; c; c = c->next) c->used = 0;
    a->cur = a->head;
    a->used = 0;
}

static void gdl__arena_release(gdl__arena *a) {
    gdl__chunk *c = a->head;
    while (c) {
        gdl__chunk *n = c->next;
        if (a->be) a->be->free(c->base);
        else GPUDL_FREE(c->base);
        GPUDL_FREE(c);
        c = n;
    }
    a->head = a->cur = NULL;
    a->used = a->reserved = 0;
}

GPUDL_API void gdl_arena_reset(void) {
    int i;
    if (++gdl__arena_gen == 0) gdl__arena_gen = 2; /* never 0, and the parity keeps alternating */
    gdl__arena_reset(&gdl__hdr_arena[gdl__arena_gen & 1]);
    gdl__arena_reset(&gdl__host_arena);
    for (i = 0; i < GDL__MAX_GPUS; i++) gdl__arena_reset(&gdl__gpu_arena[i]);
    gdl__tape = NULL;
}
GPUDL_API size_t gdl_arena_used(void) {
    size_t s = gdl__host_arena.used + gdl__hdr_arena[gdl__arena_gen & 1].used; /* this step's headers only */
    int i;
    for (i = 0; i < GDL__MAX_GPUS; i++) s += gdl__gpu_arena[i].used;
    return s;
}
GPUDL_API size_t gdl_arena_reserved(void) {
    size_t s = gdl__host_arena.reserved + gdl__hdr_arena[0].reserved + gdl__hdr_arena[1].reserved;
    int i;
    for (i = 0; i < GDL__MAX_GPUS; i++) s += gdl__gpu_arena[i].reserved;
    return s;
}

static void gdl__gemm_release(void);
/* Gives back what the library keeps between steps: the arenas' chunks, the
   GEMM packing buffers and the CUDA allocator's cached blocks (gdl_fit's
   out-of-memory retry; gdl_shutdown). Between steps only: temporaries die. */
static void gdl__release_cached_memory(void) {
    int i;
    if (!gdl__prof_on) gdl__prof_free(); /* its GPU events go before the devices' memory */
    gdl__arena_release(&gdl__host_arena);
    gdl__arena_release(&gdl__hdr_arena[0]);
    gdl__arena_release(&gdl__hdr_arena[1]);
    for (i = 0; i < GDL__MAX_GPUS; i++) gdl__arena_release(&gdl__gpu_arena[i]);
    gdl__tape = NULL;
    gdl__gemm_release();
    if (gdl_cuda_device_count() > 0) gdl__cuda_registry->release_cache();
}
GPUDL_API void gdl_shutdown(void) { gdl__release_cached_memory(); }

/* Temporary device memory for op scratch and outputs. */
static void *gdl__scratch(const char *op, gdl_device dev, size_t bytes) {
    gdl__arena *a;
    void *p;
    if (dev.type == GDL_DEVICE_CPU) {
        a = &gdl__host_arena;
    } else {
        if (dev.index < 0 || dev.index >= GDL__MAX_GPUS) {
            gdl__set_error("%s: device %s out of range", op, gdl_device_str(dev));
            return NULL;
        }
        a = &gdl__gpu_arena[dev.index];
        if (!(a->be = gdl__be(op, dev))) return NULL; /* also makes dev current */
    }
    p = gdl__arena_alloc(a, bytes);
    if (!p)
        gdl__set_error("%s: out of memory: %.0f bytes for temporaries on %s", op, (double)bytes,
                       gdl_device_str(dev));
    return p;
}

/* ---------------------------------------------------------------------------
   [impl-tensor]
   ------------------------------------------------------------------------- */

enum { GDL__T_PERSISTENT = 1, GDL__T_OWNS_DATA = 2 };

static int gdl__is_persistent(const gdl_tensor *t) { return (t->flags & GDL__T_PERSISTENT) != 0; }

/* One allocation of a device holding parameters, gradients and optimizer
   state as views (llm.c's malloc_and_point_parameters; made by an optimizer,
   [impl-nn]). Reference counted: every tensor viewing it holds a reference
   and so does the optimizer, so tensors and optimizer may be freed in any
   order. data: the allocation; base: its first 64-byte boundary, where the
   slots start (whatever the backend's alignment). grad_shift: bytes from a
   parameter's data to its gradient's slot (the gradients mirror the
   parameters); params_bytes: the parameters' region, at base. */
typedef struct gdl__flat {
    int refs;
    gdl_device device;
    void *data;
    char *base;
    size_t bytes, params_bytes, grad_shift;
} gdl__flat;

static void gdl__flat_unref(gdl__flat *f) {
    if (!f || --f->refs > 0) return;
    {
        const gdl_backend *be = gdl__be("gdl_free", f->device);
        if (be) be->free(f->data);
    }
    GPUDL_FREE(f);
}
/* persistent tensors whose storage is their own: an allocation or a slot of a flat block */
static int gdl__own_storage(const gdl_tensor *t) {
    return gdl__is_persistent(t) && ((t->flags & GDL__T_OWNS_DATA) || t->flat);
}

/* A temporary made before the last gdl_arena_reset: its memory holds this step's data now. -1 + error. */
static int gdl__stale(const char *op, const char *arg, const gdl_tensor *t) {
    if (gdl__is_persistent(t) || t->gen == gdl__arena_gen) return 0;
    gdl__set_error("%s: %s is a temporary from before the last gdl_arena_reset(), whose memory now holds newer "
                   "data: read what you need before the reset (gdl_item), or keep the tensor with gdl_clone()",
                   op, arg);
    return -1;
}

/* records an op on the autograd tape ([impl-ops]); gdl_to uses it */
static struct gdl_node *gdl__record(const char *opname, int op, gdl_tensor *out, int nin, gdl_tensor *const *in,
                                    int *err);

/* Validates and computes numel; 0 on success. */
static int gdl__check_shape(const char *op, int ndim, const int64_t *shape, int64_t *numel) {
    int64_t n = 1;
    int i;
    if (ndim < 0 || ndim > GDL_MAX_DIMS) {
        gdl__set_error("%s: ndim %d out of range [0,%d]", op, ndim, GDL_MAX_DIMS);
        return -1;
    }
    if (ndim > 0 && !shape) {
        gdl__set_error("%s: shape is NULL", op);
        return -1;
    }
    for (i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            gdl__set_error("%s: negative dimension in shape %s", op, gdl__shape_fmt(ndim, shape));
            return -1;
        }
        if (shape[i] > 0 && n > ((int64_t)1 << 46) / shape[i]) {
            gdl__set_error("%s: shape %s is too large", op, gdl__shape_fmt(ndim, shape));
            return -1;
        }
        n *= shape[i];
    }
    *numel = n;
    return 0;
}

/* A tensor header (and its data unless `data` is given). persistent: heap,
   else the per-step arenas. */
static gdl_tensor *gdl__make(const char *op, int ndim, const int64_t *shape, gdl_dtype dt,
                             gdl_device dev, int persistent, void *data) {
    int64_t numel;
    gdl_tensor *t;
    const gdl_backend *be;
    size_t bytes;
    if ((unsigned)dt >= GDL_DTYPE_COUNT) {
        gdl__set_error("%s: invalid dtype %d", op, (int)dt);
        return NULL;
    }
    if (gdl__check_shape(op, ndim, shape, &numel) < 0) return NULL;
    if (!(be = gdl__be(op, dev))) return NULL;
    bytes = (size_t)numel * gdl_dtype_size(dt);
    if (persistent) {
        t = (gdl_tensor *)GPUDL_MALLOC(sizeof(gdl_tensor));
        if (!t) {
            gdl__set_error("%s: out of memory for a tensor header", op);
            return NULL;
        }
    } else {
        t = (gdl_tensor *)gdl__arena_alloc(&gdl__hdr_arena[gdl__arena_gen & 1], sizeof(gdl_tensor));
        if (!t) {
            gdl__set_error("%s: out of memory in the step arena", op);
            return NULL;
        }
    }
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->device = dev;
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    t->numel = numel;
    t->flags = persistent ? GDL__T_PERSISTENT : 0;
    t->gen = persistent ? 0 : gdl__arena_gen;
    if (data) {
        t->data = data;
    } else if (persistent) {
        t->data = be->alloc(bytes ? bytes : 1);
        if (!t->data) {
            if (dev.type == GDL_DEVICE_CPU)
                gdl__set_error("%s: out of memory allocating %.0f bytes for %s %s on %s", op,
                               (double)bytes, gdl_dtype_name(dt), gdl__shape_fmt(ndim, shape),
                               gdl_device_str(dev));
            GPUDL_FREE(t);
            return NULL;
        }
        t->flags |= GDL__T_OWNS_DATA;
    } else {
        t->data = gdl__scratch(op, dev, bytes);
        if (!t->data) return NULL;
    }
    return t;
}

static gdl_tensor *gdl__tmp(const char *op, int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev) {
    return gdl__make(op, ndim, shape, dt, dev, 0, NULL);
}

GPUDL_API void gdl_free(gdl_tensor *t) {
    if (!t || !gdl__is_persistent(t)) return;
    if (t->grad) gdl_free(t->grad);
    if (t->flags & GDL__T_OWNS_DATA) {
        const gdl_backend *be = gdl__be("gdl_free", t->device);
        if (be) be->free(t->data);
    }
    gdl__flat_unref(t->flat);
    GPUDL_FREE(t);
}

GPUDL_API gdl_tensor *gdl_empty(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev) {
    return gdl__make("gdl_empty", ndim, shape, dt, dev, 1, NULL);
}

/* Converts one double to dtype dt at dst (host memory). */
static void gdl__store(void *dst, gdl_dtype dt, double v) {
    switch (dt) {
    case GDL_F32: *(gdl_real *)dst = (gdl_real)v; break;
    /* integers: truncate toward zero and saturate (an out-of-range cast is undefined in C); NaN gives 0 */
    case GDL_I32: *(int32_t *)dst = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v; break;
    case GDL_U8: *(uint8_t *)dst = v != v ? 0 : v >= 255.0 ? 255 : v <= 0.0 ? 0 : (uint8_t)v; break;
    case GDL_F16: *(uint16_t *)dst = gdl_f32_to_f16((float)v); break;
    case GDL_BF16: *(uint16_t *)dst = gdl_f32_to_bf16((float)v); break;
    default: break;
    }
}
static double gdl__load(const void *src, gdl_dtype dt) {
    switch (dt) {
    case GDL_F32: return (double)*(const gdl_real *)src;
    case GDL_I32: return (double)*(const int32_t *)src;
    case GDL_U8: return (double)*(const uint8_t *)src;
    case GDL_F16: return (double)gdl_f16_to_f32(*(const uint16_t *)src);
    case GDL_BF16: return (double)gdl_bf16_to_f32(*(const uint16_t *)src);
    default: return 0;
    }
}

GPUDL_API int gdl_fill_(gdl_tensor *t, double value) {
    const gdl_backend *be;
    if (!t) {
        gdl__null_arg("gdl_fill_", "t");
        return -1;
    }
    if (!(be = gdl__be("gdl_fill_", t->device))) return -1;
    if (t->dtype == GDL_F32) return be->fill((gdl_real *)t->data, t->numel, (gdl_real)value);
    {
        /* other dtypes: fill one f32 scratch value then cast elementwise on host */
        size_t es = gdl_dtype_size(t->dtype);
        unsigned char one[8];
        int64_t i;
        gdl__store(one, t->dtype, value);
        if (t->device.type == GDL_DEVICE_CPU) {
            for (i = 0; i < t->numel; i++) memcpy((char *)t->data + (size_t)i * es, one, es);
            return 0;
        } else {
            unsigned char *h = (unsigned char *)GPUDL_MALLOC((size_t)t->numel * es + 1);
            int rc;
            if (!h) {
                gdl__set_error("gdl_fill_: out of memory (host)");
                return -1;
            }
            for (i = 0; i < t->numel; i++) memcpy(h + (size_t)i * es, one, es);
            rc = be->copy(t->data, h, (size_t)t->numel * es, 0);
            GPUDL_FREE(h);
            return rc;
        }
    }
}

GPUDL_API gdl_tensor *gdl_full(int ndim, const int64_t *shape, double value, gdl_dtype dt, gdl_device dev) {
    gdl_tensor *t = gdl__make("gdl_full", ndim, shape, dt, dev, 1, NULL);
    if (t && gdl_fill_(t, value) < 0) {
        gdl_free(t);
        return NULL;
    }
    return t;
}
GPUDL_API gdl_tensor *gdl_zeros(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev) {
    return gdl_full(ndim, shape, 0.0, dt, dev);
}
GPUDL_API gdl_tensor *gdl_ones(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev) {
    return gdl_full(ndim, shape, 1.0, dt, dev);
}

GPUDL_API gdl_tensor *gdl_from_array(const void *data, int ndim, const int64_t *shape, gdl_dtype dt,
                                     gdl_device dev) {
    gdl_tensor *t;
    if (!data) {
        gdl__null_arg("gdl_from_array", "data");
        return NULL;
    }
    t = gdl__make("gdl_from_array", ndim, shape, dt, dev, 1, NULL);
    if (!t) return NULL;
    if (gdl__be("gdl_from_array", dev)->copy(t->data, data, (size_t)t->numel * gdl_dtype_size(dt), 0) < 0) {
        gdl_free(t);
        return NULL;
    }
    return t;
}

/* Persistent tensor filled on the host by fn(i) then copied to dev. */
static gdl_tensor *gdl__host_fill(const char *op, int ndim, const int64_t *shape, gdl_dtype dt,
                                  gdl_device dev, double (*fn)(int64_t, const double *), const double *arg) {
    int64_t numel, i;
    size_t es = gdl_dtype_size(dt);
    unsigned char *h;
    gdl_tensor *t;
    if (gdl__check_shape(op, ndim, shape, &numel) < 0) return NULL;
    if ((unsigned)dt >= GDL_DTYPE_COUNT) {
        gdl__set_error("%s: invalid dtype %d", op, (int)dt);
        return NULL;
    }
    h = (unsigned char *)GPUDL_MALLOC((size_t)numel * es + 1);
    if (!h) {
        gdl__set_error("%s: out of memory (host)", op);
        return NULL;
    }
    for (i = 0; i < numel; i++) gdl__store(h + (size_t)i * es, dt, fn(i, arg));
    t = gdl_from_array(h, ndim, shape, dt, dev);
    GPUDL_FREE(h);
    if (!t) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        gdl__set_error("%s: %s", op, prev);
    }
    return t;
}

/* ---- the generator: counter-based (splitmix64 of seed and a counter) ---- */
static uint64_t gdl__rng_seed = 0x5eed;
static uint64_t gdl__rng_counter = 0;

GPUDL_API void gdl_manual_seed(uint64_t seed) {
    gdl__rng_seed = seed;
    gdl__rng_counter = 0;
}
GPUDL_API uint64_t gdl_rng_get_state(uint64_t *counter) {
    if (counter) *counter = gdl__rng_counter;
    return gdl__rng_seed;
}
GPUDL_API void gdl_rng_set_state(uint64_t seed, uint64_t counter) {
    gdl__rng_seed = seed;
    gdl__rng_counter = counter;
}
GPUDL_API uint64_t gdl_rng_next_u64(void) { return gdl_hash64(gdl__rng_seed, gdl__rng_counter++); }
GPUDL_API double gdl_rng_uniform(void) { return (double)(gdl_rng_next_u64() >> 11) * (1.0 / 9007199254740992.0); }
static double gdl__rng_normal(void) {
    /* Box-Muller; 1-u keeps the log finite */
    double u1 = 1.0 - gdl_rng_uniform(), u2 = gdl_rng_uniform();
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double gdl__fill_arange(int64_t i, const double *a) { (void)a; return (double)i; }
static double gdl__fill_uniform(int64_t i, const double *a) { (void)i; return a[0] + (a[1] - a[0]) * gdl_rng_uniform(); }
static double gdl__fill_normal(int64_t i, const double *a) { (void)i; (void)a; return gdl__rng_normal(); }

GPUDL_API gdl_tensor *gdl_arange(int64_t n, gdl_dtype dt, gdl_device dev) {
    return gdl__host_fill("gdl_arange", 1, &n, dt, dev, gdl__fill_arange, NULL);
}
GPUDL_API gdl_tensor *gdl_uniform(int ndim, const int64_t *shape, double lo, double hi, gdl_device dev) {
    double a[2];
    a[0] = lo;
    a[1] = hi;
    return gdl__host_fill("gdl_uniform", ndim, shape, GDL_F32, dev, gdl__fill_uniform, a);
}
GPUDL_API gdl_tensor *gdl_rand(int ndim, const int64_t *shape, gdl_device dev) {
    return gdl_uniform(ndim, shape, 0.0, 1.0, dev);
}
GPUDL_API gdl_tensor *gdl_randn(int ndim, const int64_t *shape, gdl_device dev) {
    return gdl__host_fill("gdl_randn", ndim, shape, GDL_F32, dev, gdl__fill_normal, NULL);
}

/* ---- half precision, round to nearest even ---- */
static uint32_t gdl__f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float gdl__bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

GPUDL_API uint16_t gdl_f32_to_f16(float f) {
    uint32_t x = gdl__f32_bits(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu, h, rem;
    if (a >= 0x7f800000u) return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {                                  /* below 2^-14: subnormal or 0 */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift, half;
        if (a < 0x33000000u) return (uint16_t)sign;         /* below 2^-25 */
        shift = 126 - e;
        h = m >> shift;
        rem = m & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    h = (a - 0x38000000u) >> 13;
    rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* a carry may reach inf: correct */
    return (uint16_t)(sign | h);
}
GPUDL_API float gdl_f16_to_f32(uint16_t hv) {
    uint32_t sign = (uint32_t)(hv & 0x8000u) << 16, e = (hv >> 10) & 0x1fu, m = hv & 0x3ffu, bits;
    if (e == 0) {
        if (m == 0) {
            bits = sign;
        } else {
            int ee = 1;
            while (!(m & 0x400u)) {
                m <<= 1;
                ee--;
            }
            m &= 0x3ffu;
            bits = sign | ((uint32_t)(ee + 112) << 23) | (m << 13);
        }
    } else if (e == 31) {
        bits = sign | 0x7f800000u | (m << 13);
    } else {
        bits = sign | ((e + 112) << 23) | (m << 13);
    }
    return gdl__bits_f32(bits);
}
GPUDL_API uint16_t gdl_f32_to_bf16(float f) {
    uint32_t x = gdl__f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
GPUDL_API float gdl_bf16_to_f32(uint16_t h) { return gdl__bits_f32((uint32_t)h << 16); }

/* ---- copies ---- */
static int gdl__copy_kind(gdl_device dst, gdl_device src) {
    if (src.type == GDL_DEVICE_CPU) return dst.type == GDL_DEVICE_CPU ? 2 : 0;
    return dst.type == GDL_DEVICE_CPU ? 1 : 2;
}

/* Raw byte copy between any two devices. */
static int gdl__copy_bytes(const char *op, void *dst, gdl_device ddev, const void *src, gdl_device sdev, size_t bytes) {
    const gdl_backend *be;
    int kind = gdl__copy_kind(ddev, sdev);
    if (ddev.type == GDL_DEVICE_CUDA && sdev.type == GDL_DEVICE_CUDA && ddev.index != sdev.index) {
        /* through the host: simple, and rare */
        void *h = GPUDL_MALLOC(bytes + 1);
        int rc;
        if (!h) {
            gdl__set_error("%s: out of memory (host)", op);
            return -1;
        }
        rc = gdl__be(op, sdev) && gdl__be(op, sdev)->copy(h, src, bytes, 1) == 0 && gdl__be(op, ddev) &&
                     gdl__be(op, ddev)->copy(dst, h, bytes, 0) == 0
                 ? 0
                 : -1;
        GPUDL_FREE(h);
        return rc;
    }
    be = gdl__be(op, ddev.type == GDL_DEVICE_CUDA ? ddev : sdev);
    if (!be) return -1;
    return be->copy(dst, src, bytes, kind);
}

GPUDL_API int gdl_copy_(gdl_tensor *dst, const gdl_tensor *src) {
    if (!dst || !src) {
        gdl__null_arg("gdl_copy_", dst ? "src" : "dst");
        return -1;
    }
    if (gdl__stale("gdl_copy_", "dst", dst) < 0 || gdl__stale("gdl_copy_", "src", src) < 0) return -1;
    if (dst->dtype != src->dtype || dst->numel != src->numel) {
        gdl__set_error("gdl_copy_: %s %s into %s %s: shapes or dtypes differ", gdl_dtype_name(src->dtype),
                       gdl_shape_str(src), gdl_dtype_name(dst->dtype), gdl_shape_str(dst));
        return -1;
    }
    {
        int span = gdl__prof_on ? gdl__prof_push("gdl_copy_", dst->device.type != GDL_DEVICE_CPU ? dst->device
                                                                                                 : src->device)
                                : 0;
        int rc = gdl__copy_bytes("gdl_copy_", dst->data, dst->device, src->data, src->device,
                                 (size_t)src->numel * gdl_dtype_size(src->dtype));
        gdl__prof_pop(span, rc == 0);
        return rc;
    }
}

GPUDL_API gdl_tensor *gdl_to(gdl_tensor *t, gdl_device dev) {
    gdl_tensor *r;
    if (!t) {
        gdl__null_arg("gdl_to", "t");
        return NULL;
    }
    if (gdl__stale("gdl_to", "t", t) < 0) return NULL;
    r = gdl__make("gdl_to", t->ndim, t->shape, t->dtype, dev, gdl__is_persistent(t), NULL);
    if (!r) return NULL;
    if (gdl_copy_(r, t) < 0) {
        gdl_free(r);
        return NULL;
    }
    r->name = t->name;
    if (gdl__is_persistent(t)) {
        r->requires_grad = t->requires_grad;
    } else {
        int err;
        gdl__record("gdl_to", GDL_OP_TO, r, 1, &t, &err);
        if (err) return NULL;
    }
    return r;
}

GPUDL_API gdl_tensor *gdl_clone(const gdl_tensor *t) {
    gdl_tensor *r;
    if (!t) {
        gdl__null_arg("gdl_clone", "t");
        return NULL;
    }
    if (gdl__stale("gdl_clone", "t", t) < 0) return NULL;
    r = gdl__make("gdl_clone", t->ndim, t->shape, t->dtype, t->device, 1, NULL);
    if (r && gdl_copy_(r, t) < 0) {
        gdl_free(r);
        return NULL;
    }
    return r;
}

GPUDL_API int gdl_move_(gdl_tensor *t, gdl_device dev) {
    gdl_tensor *copy;
    if (!t) {
        gdl__null_arg("gdl_move_", "t");
        return -1;
    }
    if (!gdl__own_storage(t)) {
        gdl__set_error("gdl_move_: %s is a temporary or a view; only persistent tensors move in place", gdl_shape_str(t));
        return -1;
    }
    if (gdl_device_equal(t->device, dev)) return 0;
    if (t->grad && gdl_move_(t->grad, dev) < 0) return -1;
    if (!(copy = gdl__make("gdl_move_", t->ndim, t->shape, t->dtype, dev, 1, NULL))) return -1;
    if (gdl_copy_(copy, t) < 0) {
        gdl_free(copy);
        return -1;
    }
    { /* swap the storage: t takes the new data, copy takes the old (an allocation or a flat slot) and is freed */
        void *old = t->data;
        gdl_device od = t->device;
        gdl__flat *of = t->flat;
        unsigned oflags = t->flags;
        t->data = copy->data;
        t->device = dev;
        t->flat = NULL;
        t->flags |= GDL__T_OWNS_DATA;
        copy->data = old;
        copy->device = od;
        copy->flat = of;
        copy->flags = oflags;
        gdl_free(copy);
    }
    return 0;
}

static gdl_tensor *gdl__cast_t(const char *op, gdl_tensor *x, gdl_dtype dt); /* [impl-ops] */
static gdl_tensor *gdl__finish(const char *op, gdl_tensor *out);
GPUDL_API gdl_tensor *gdl_to_dtype(gdl_tensor *t, gdl_dtype dt) {
    if (!t) {
        gdl__null_arg("gdl_to_dtype", "t");
        return NULL;
    }
    if (gdl__stale("gdl_to_dtype", "t", t) < 0) return NULL;
    if ((unsigned)dt >= GDL_DTYPE_COUNT) {
        gdl__set_error("gdl_to_dtype: invalid dtype %d", (int)dt);
        return NULL;
    }
    return gdl__finish("gdl_to_dtype", gdl__cast_t("gdl_to_dtype", t, dt));
}

/* A host read of a GPU tensor cannot be part of a CUDA graph (it would wait
   for work that is only being recorded): say so before CUDA does. */
static int gdl__no_capture(const char *op, gdl_device d) {
    if (!gdl__capturing || d.type == GDL_DEVICE_CPU) return 0;
    gdl__set_error("%s: reads %s inside a CUDA graph capture (read the step's results after gdl_graph_replay)", op,
                   gdl_device_str(d));
    return -1;
}

GPUDL_API int gdl_copy_to_host(const gdl_tensor *t, void *dst, size_t bytes) {
    size_t need;
    if (!t || !dst) {
        gdl__null_arg("gdl_copy_to_host", t ? "dst" : "t");
        return -1;
    }
    if (gdl__stale("gdl_copy_to_host", "t", t) < 0 || gdl__no_capture("gdl_copy_to_host", t->device) < 0) return -1;
    need = (size_t)t->numel * gdl_dtype_size(t->dtype);
    if (bytes < need) {
        gdl__set_error("gdl_copy_to_host: buffer of %.0f bytes is too small for %s %s (%.0f bytes)",
                       (double)bytes, gdl_dtype_name(t->dtype), gdl_shape_str(t), (double)need);
        return -1;
    }
    return gdl__copy_bytes("gdl_copy_to_host", dst, gdl_cpu(), t->data, t->device, need);
}

GPUDL_API double gdl_item(const gdl_tensor *t) {
    unsigned char buf[8];
    if (!t) {
        gdl__null_arg("gdl_item", "t");
        return NAN;
    }
    if (gdl__stale("gdl_item", "t", t) < 0 || gdl__no_capture("gdl_item", t->device) < 0) return NAN;
    if (t->numel != 1) {
        gdl__set_error("gdl_item: tensor %s has %lld elements, expected 1", gdl_shape_str(t), (long long)t->numel);
        return NAN;
    }
    if (gdl_copy_to_host(t, buf, sizeof buf) < 0) return NAN;
    return gdl__load(buf, t->dtype);
}

GPUDL_API int gdl_same_shape(const gdl_tensor *a, const gdl_tensor *b) {
    return a && b && a->ndim == b->ndim &&
           (a->ndim == 0 || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0);
}

/* prints one dim; long dims show 3 items each end */
static void gdl__print_rec(FILE *f, const unsigned char *h, const gdl_tensor *t, int d, int64_t off, int64_t stride) {
    int64_t n = t->shape[d], i, inner = stride / (n ? n : 1);
    int summarize = t->numel > 1000 && n > 6;
    fputc('[', f);
    for (i = 0; i < n; i++) {
        if (summarize && i == 3) {
            fputs(d == t->ndim - 1 ? " ...," : "\n ...,", f);
            i = n - 3;
        }
        if (d == t->ndim - 1) {
            double v = gdl__load(h + (size_t)(off + i) * gdl_dtype_size(t->dtype), t->dtype);
            if (t->dtype == GDL_I32 || t->dtype == GDL_U8) fprintf(f, "%s%.0f", i ? ", " : "", v);
            else fprintf(f, "%s%.4f", i ? ", " : "", v);
        } else {
            if (i) fprintf(f, ",\n%*s", d + 8, "");
            gdl__print_rec(f, h, t, d + 1, off + i * inner, inner);
        }
    }
    fputc(']', f);
}

GPUDL_API int gdl_print(const gdl_tensor *t, FILE *f) {
    unsigned char *h;
    size_t bytes;
    if (!t || !f) {
        gdl__null_arg("gdl_print", t ? "f" : "t");
        return -1;
    }
    if (gdl__stale("gdl_print", "t", t) < 0) return -1;
    bytes = (size_t)t->numel * gdl_dtype_size(t->dtype);
    h = (unsigned char *)GPUDL_MALLOC(bytes + 1);
    if (!h) {
        gdl__set_error("gdl_print: out of memory (host)");
        return -1;
    }
    if (gdl_copy_to_host(t, h, bytes) < 0) {
        GPUDL_FREE(h);
        return -1;
    }
    fputs("tensor(", f);
    if (t->ndim == 0) fprintf(f, "%.4f", gdl__load(h, t->dtype));
    else if (t->numel == 0) fputs("[]", f);
    else gdl__print_rec(f, h, t, 0, 0, t->numel);
    fprintf(f, ", shape=%s, dtype=%s, device=%s%s)\n", gdl_shape_str(t), gdl_dtype_name(t->dtype),
            gdl_device_str(t->device), t->requires_grad ? ", requires_grad" : "");
    GPUDL_FREE(h);
    return 0;
}

/* ---------------------------------------------------------------------------
   [impl-pool]  The CPU thread pool: gpudl's own workers run the GEMM and the
   parallel loops of the CPU kernels (OpenMP is not used).

   Why our own: libgomp's idle threads spin for milliseconds before they
   sleep, and OMP_WAIT_POLICY is read before main (too late for a library to
   set), so one other busy process on the machine made training 6-15x
   slower. Here an idle worker spins for GDL__POOL_SPIN (tens of
   microseconds: back-to-back ops find it awake), then sleeps on a condition
   variable.

   A job is nt tasks fn(ctx, t, nt), 0 <= t < nt. The calling thread and the
   workers claim tasks from one counter, so a worker that the OS has
   descheduled holds nobody up: the caller takes its task. What a task
   computes depends only on t and nt, never on the thread that runs it, so
   results are bitwise the same for any thread count and any timing.

   One job at a time. The pool (and the GEMM's packing buffers) belong to the
   thread that acquired it; a parallel region entered while the pool is held
   (from inside a task, or from another thread such as a DataLoader worker)
   runs serially on its own thread. After fork() the child starts with no
   workers and makes new ones when it needs them (gdl__os_after_fork). At exit
   the workers are stopped and joined (atexit).

   Thread count: gdl_set_num_threads(n); else the environment's
   GPUDL_NUM_THREADS, else OMP_NUM_THREADS (its first number), else the CPUs
   this process may run on (gdl__os_cpu_count). GPUDL_NO_THREADS (or a
   compiler without atomics, [impl-platform]): no pool, one thread.
   ------------------------------------------------------------------------- */

#if defined(GDL__OS_THREADS) && defined(GDL__ATOMICS)
#define GDL__POOL 1
#endif

typedef void (*gdl__task_fn)(void *ctx, int t, int nt);

#define GDL__POOL_MAX 256     /* threads, the caller included */
#ifdef GDL__POOL
static int gdl__nthreads_want; /* gdl_set_num_threads; 0: from the environment */
static int gdl__nthreads_env;  /* the environment's choice, once read; 0: not yet */

static int gdl__env_threads(void) {
    const char *s = getenv("GPUDL_NUM_THREADS");
    long n = 0;
    if (!s || !*s) s = getenv("OMP_NUM_THREADS"); /* "4" or "4,2": the outer level */
    if (s && *s) n = strtol(s, NULL, 10);
    if (n <= 0) n = gdl__os_cpu_count();
    if (n < 1) n = 1;
    return n > GDL__POOL_MAX ? GDL__POOL_MAX : (int)n;
}
#endif

GPUDL_API int gdl_get_num_threads(void) {
#ifdef GDL__POOL
    int n = gdl__atomic_load(&gdl__nthreads_want, GDL__MO_RELAXED);
    if (n > 0) return n;
    n = gdl__atomic_load(&gdl__nthreads_env, GDL__MO_RELAXED);
    if (n > 0) return n;
    n = gdl__env_threads();
    gdl__atomic_store(&gdl__nthreads_env, n, GDL__MO_RELAXED);
    return n;
#else
    return 1;
#endif
}

GPUDL_API void gdl_set_num_threads(int n) {
#ifdef GDL__POOL
    gdl__atomic_store(&gdl__nthreads_want, n <= 0 ? 0 : n > GDL__POOL_MAX ? GDL__POOL_MAX : n, GDL__MO_RELAXED);
#else
    (void)n;
#endif
}

#ifdef GDL__POOL
#define GDL__POOL_PAUSE() GDL__CPU_PAUSE()
#ifndef GDL__POOL_SPIN
#define GDL__POOL_SPIN 1000 /* pause instructions, ~5-50 us: then sleep */
#endif

static gdl__mutex gdl__pool_mu = GDL__MUTEX_INIT;
static gdl__cond gdl__pool_work_cv = GDL__COND_INIT; /* a new job, or stop */
static gdl__cond gdl__pool_done_cv = GDL__COND_INIT; /* the last task finished */
static gdl__thread gdl__pool_th[GDL__POOL_MAX];
static int gdl__pool_nworkers;     /* started; changed by the pool's holder only */
static int gdl__pool_busy;         /* atomic: 1 while a thread holds the pool */
static uint64_t gdl__pool_state;   /* atomic: generation << 32 | tasks not yet claimed */
static int gdl__pool_ndone;        /* atomic: tasks of this generation finished */
static int gdl__pool_sleepers;     /* atomic: workers asleep (or about to be) */
static int gdl__pool_stop;         /* atomic: workers exit */
static int gdl__pool_waiting;      /* under mu: the holder sleeps on done_cv */
static int gdl__pool_hooks;        /* atexit / after-fork hook registered */
static gdl__task_fn gdl__pool_fn;  /* the job: written before its generation is published */
static void *gdl__pool_ctx;
static int gdl__pool_nt;
static int gdl__pool_active;       /* atomic: workers 0 .. active-1 take part in this job */
static uint32_t gdl__pool_gen0[GDL__POOL_MAX]; /* a new worker's generation before its first job */
static GDL__TLS int gdl__pool_slot; /* 0 on the holder's thread, 1 + index on a worker: whose buffers */

static int gdl__pool_acquire(void) {
    int free_ = 0;
    return gdl__atomic_cas(&gdl__pool_busy, &free_, 1, 0, GDL__MO_ACQUIRE, GDL__MO_RELAXED);
}
static void gdl__pool_release(void) { gdl__atomic_store(&gdl__pool_busy, 0, GDL__MO_RELEASE); }

/* Claims and runs tasks of generation gen until none is left. A successful
   claim means the job is still in flight, so its fields are stable. */
static void gdl__pool_claim(uint32_t gen) {
    uint64_t s = gdl__atomic_load(&gdl__pool_state, GDL__MO_ACQUIRE);
    while ((uint32_t)(s >> 32) == gen && (uint32_t)s > 0) {
        if (gdl__atomic_cas(&gdl__pool_state, &s, s - 1, 1, GDL__MO_ACQ_REL, GDL__MO_ACQUIRE)) {
            const int nt = gdl__pool_nt;
            gdl__pool_fn(gdl__pool_ctx, nt - (int)(uint32_t)s, nt);
            if (gdl__atomic_add(&gdl__pool_ndone, 1, GDL__MO_ACQ_REL) == nt) {
                gdl__mutex_lock(&gdl__pool_mu);
                if (gdl__pool_waiting) gdl__cond_signal(&gdl__pool_done_cv);
                gdl__mutex_unlock(&gdl__pool_mu);
            }
            s = gdl__atomic_load(&gdl__pool_state, GDL__MO_ACQUIRE);
        }
    }
}

static void *gdl__pool_worker(void *arg) {
    const int index = (int)(intptr_t)arg;
    uint32_t seen = gdl__pool_gen0[index];
    gdl__pool_slot = 1 + index;
    for (;;) {
        uint32_t gen;
        int spin = 0;
        while ((gen = (uint32_t)(gdl__atomic_load(&gdl__pool_state, GDL__MO_ACQUIRE) >> 32)) == seen &&
               !gdl__atomic_load(&gdl__pool_stop, GDL__MO_ACQUIRE)) {
            if (spin++ < GDL__POOL_SPIN) {
                GDL__POOL_PAUSE();
                continue;
            }
            gdl__mutex_lock(&gdl__pool_mu);
            gdl__atomic_add(&gdl__pool_sleepers, 1, GDL__MO_SEQ_CST);
            while ((uint32_t)(gdl__atomic_load(&gdl__pool_state, GDL__MO_SEQ_CST) >> 32) == seen &&
                   !gdl__atomic_load(&gdl__pool_stop, GDL__MO_SEQ_CST))
                gdl__cond_wait(&gdl__pool_work_cv, &gdl__pool_mu);
            gdl__atomic_add(&gdl__pool_sleepers, -1, GDL__MO_SEQ_CST);
            gdl__mutex_unlock(&gdl__pool_mu);
        }
        if (gdl__atomic_load(&gdl__pool_stop, GDL__MO_ACQUIRE)) return NULL;
        seen = gen;
        /* workers past the thread count (it was lowered) sit this job out */
        if (index < gdl__atomic_load(&gdl__pool_active, GDL__MO_ACQUIRE)) gdl__pool_claim(gen);
    }
}

/* Stops and joins the workers (at exit). Skipped while another thread holds
   the pool: the process is ending anyway. */
static void gdl__pool_shutdown(void) {
    int i;
    if (!gdl__pool_acquire()) return;
    gdl__atomic_store(&gdl__pool_stop, 1, GDL__MO_SEQ_CST);
    gdl__mutex_lock(&gdl__pool_mu);
    gdl__cond_broadcast(&gdl__pool_work_cv);
    gdl__mutex_unlock(&gdl__pool_mu);
    for (i = 0; i < gdl__pool_nworkers; i++) gdl__thread_join(&gdl__pool_th[i]);
    gdl__pool_nworkers = 0;
    gdl__atomic_store(&gdl__pool_stop, 0, GDL__MO_SEQ_CST);
    gdl__pool_release();
}

/* In the child of fork(): only the forking thread exists. Forget the
   parent's workers (new ones start on demand) and reset the locks, which a
   parent thread may have held at the fork. */
static void gdl__pool_after_fork(void) {
    gdl__mutex_init(&gdl__pool_mu);
    gdl__cond_init(&gdl__pool_work_cv);
    gdl__cond_init(&gdl__pool_done_cv);
    gdl__pool_nworkers = 0;
    gdl__pool_sleepers = 0;
    gdl__pool_waiting = 0;
    gdl__pool_stop = 0;
    gdl__pool_busy = 0;
}

/* Runs the job on the holder's thread and the workers (up to
   gdl_get_num_threads() - 1 of them). The caller holds the pool
   (gdl__pool_acquire). */
static void gdl__pool_run(int nt, gdl__task_fn fn, void *ctx) {
    uint32_t gen;
    int spin = 0, workers = (nt < gdl_get_num_threads() ? nt : gdl_get_num_threads()) - 1;
    if (nt <= 1) {
        if (nt == 1) fn(ctx, 0, 1);
        return;
    }
    if (!gdl__pool_hooks) {
        gdl__pool_hooks = 1;
        atexit(gdl__pool_shutdown);
        gdl__os_after_fork(gdl__pool_after_fork);
    }
    gen = (uint32_t)(gdl__atomic_load(&gdl__pool_state, GDL__MO_RELAXED) >> 32);
    while (gdl__pool_nworkers < workers && gdl__pool_nworkers < GDL__POOL_MAX - 1) {
        gdl__pool_gen0[gdl__pool_nworkers] = gen;
        if (gdl__thread_start(&gdl__pool_th[gdl__pool_nworkers], gdl__pool_worker,
                              (void *)(intptr_t)gdl__pool_nworkers) != 0)
            break; /* if one can't start, the caller claims its tasks */
        gdl__pool_nworkers++;
    }
    gdl__atomic_store(&gdl__pool_active, workers, GDL__MO_RELAXED); /* published with the state below */
    gdl__pool_fn = fn;
    gdl__pool_ctx = ctx;
    gdl__pool_nt = nt;
    gdl__atomic_store(&gdl__pool_ndone, 0, GDL__MO_RELAXED);
    gen++;
    gdl__atomic_store(&gdl__pool_state, ((uint64_t)gen << 32) | (uint32_t)nt, GDL__MO_SEQ_CST);
    if (gdl__atomic_load(&gdl__pool_sleepers, GDL__MO_SEQ_CST)) {
        gdl__mutex_lock(&gdl__pool_mu);
        gdl__cond_broadcast(&gdl__pool_work_cv);
        gdl__mutex_unlock(&gdl__pool_mu);
    }
    gdl__pool_claim(gen);
    while (gdl__atomic_load(&gdl__pool_ndone, GDL__MO_ACQUIRE) != nt) {
        if (spin++ < GDL__POOL_SPIN) {
            GDL__POOL_PAUSE();
            continue;
        }
        gdl__mutex_lock(&gdl__pool_mu);
        gdl__pool_waiting = 1;
        while (gdl__atomic_load(&gdl__pool_ndone, GDL__MO_ACQUIRE) != nt)
            gdl__cond_wait(&gdl__pool_done_cv, &gdl__pool_mu);
        gdl__pool_waiting = 0;
        gdl__mutex_unlock(&gdl__pool_mu);
    }
}
#else
static int gdl__pool_acquire(void) { return 1; }
static void gdl__pool_release(void) {}
static void gdl__pool_run(int nt, gdl__task_fn fn, void *ctx) {
    int t;
    for (t = 0; t < nt; t++) fn(ctx, t, nt);
}
#endif /* GDL__POOL */

/* A loop over [0, n) cut into one contiguous range per thread. work (the
   element count the loop touches) below GDL__PAR_MIN stays on the calling
   thread: there waking the workers costs more than it saves. Each index is
   computed the same way whatever range it falls in. */
#ifndef GDL__PAR_MIN
#define GDL__PAR_MIN 32768
#endif
/* Tasks per thread of a parallel loop: with more tasks than threads, the
   others take over the work of a thread the OS has descheduled (another
   busy process on the machine) instead of waiting for it. (The GEMM keeps
   one rectangle per thread: more would pack its panels more often.) */
#ifndef GDL__POOL_SPLIT
#define GDL__POOL_SPLIT 4
#endif
typedef void (*gdl__range_fn)(const void *ctx, int64_t lo, int64_t hi);

/* The CPU kernels' parallel loops: the loop body is a function over a range
   [lo, hi) of the loop's indices, and its arguments travel in one shared
   struct, gdl__args, with a slot per role, so a kernel needs no struct of
   its own and its body reads a.x, a.out ... directly:

       static void gdl__scale_part(gdl__args a, int64_t lo, int64_t hi) {
           int64_t i;
           for (i = lo; i < hi; i++) a.out[i] = a.alpha * a.x[i];
       }
       ...
       gdl__args a = gdl__args_none();
       a.x = x; a.out = y; a.alpha = alpha;
       gdl__parallel_loop(n, n, gdl__scale_part, &a);

   A kernel sets only the slots its body reads; the rest stay 0 / NULL. A
   kernel whose arguments fit no slot points ctx at a struct of them. The
   body takes the struct by value: its own copy, which no store through
   a.out can change, so the compiler keeps the slots in registers. A loop
   that branches on slots reads them from locals (gdl__bias_act_part):
   gcc unswitches loops on those (a vectorised version per case), not on
   a's fields. */
typedef struct gdl__args {
    int op;                            /* the variant the body switches on: an op or activation, log_, decoupled */
    int accumulate;                    /* add into the output instead of overwriting it */
    int64_t n, inner, C;               /* sizes besides the loop's own: [outer][n][inner]; channels */
    const gdl_real *x, *y, *gy, *bias; /* f32 inputs */
    gdl_real *out, *pre;               /* f32 outputs */
    int32_t *idx;                      /* argmax indices written (reduce, maxpool) */
    const int32_t *argmax;             /* ... and read back (reduce_backward) */
    gdl_real alpha;                    /* a scalar operand: unary's alpha, fill's value */
    double p;                          /* dropout's probability ... */
    uint64_t seed;                     /* ... and seed */
    gdl_dtype dt;                      /* the low-precision kernels' dtype: of lx, ly, lgy, lout */
    const void *lx, *ly, *lgy;
    void *lout;
    const gdl_conv_geom *g;            /* convolution and pooling */
    const gdl_opt_tensor *t;           /* an optimizer's tensor */
    const void *ctx;                   /* anything else: a struct of the caller's */
} gdl__args;
typedef void (*gdl__loop_fn)(gdl__args a, int64_t lo, int64_t hi);

/* every slot 0 / NULL */
static gdl__args gdl__args_none(void) {
    gdl__args a;
    memset(&a, 0, sizeof a);
    return a;
}

typedef struct {
    gdl__range_fn fn;
    const void *ctx;
    int64_t n;
} gdl__pfor_job;

/* Range boundaries are multiples of 16 (but the last): a kernel with a
   vector body and a scalar tail then treats each index the same way for
   any thread count. */
static int64_t gdl__pfor_bound(int64_t n, int t, int nt) { return t == nt ? n : n * t / nt / 16 * 16; }
static void gdl__pfor_task(void *p, int t, int nt) {
    const gdl__pfor_job *j = (const gdl__pfor_job *)p;
    const int64_t lo = gdl__pfor_bound(j->n, t, nt), hi = gdl__pfor_bound(j->n, t + 1, nt);
    if (hi > lo) j->fn(j->ctx, lo, hi);
}

/* The tasks a loop over [0, n) of `work` elements is cut into: 1 (run it on
   the calling thread) below GDL__PAR_MIN */
static int gdl__pfor_tasks(int64_t n, int64_t work) {
    int64_t nt = work > GDL__PAR_MIN ? (int64_t)GDL__POOL_SPLIT * gdl_get_num_threads() : 1;
    return (int)(nt > n ? n : nt);
}

/* fn(ctx, lo, hi) over the ranges of [0, n) */
static void gdl__parallel_for(int64_t n, int64_t work, gdl__range_fn fn, const void *ctx) {
    const int nt = gdl__pfor_tasks(n, work);
    if (n <= 0) return;
    if (nt > 1 && gdl__pool_acquire()) {
        gdl__pfor_job j;
        j.fn = fn;
        j.ctx = ctx;
        j.n = n;
        gdl__pool_run(nt, gdl__pfor_task, &j);
        gdl__pool_release();
    } else {
        fn(ctx, 0, n);
    }
}

/* body(*a, lo, hi) over the ranges of [0, n): the CPU kernels' form. On one
   thread, body is called here, directly, so that the compiler can inline
   it into the kernel, as it would the loop written out there. */
typedef struct {
    gdl__loop_fn body;
    const gdl__args *a;
} gdl__loop_job;
static void gdl__loop_range(const void *p, int64_t lo, int64_t hi) {
    const gdl__loop_job *j = (const gdl__loop_job *)p;
    j->body(*j->a, lo, hi);
}
static void gdl__parallel_loop(int64_t n, int64_t work, gdl__loop_fn body, const gdl__args *a) {
    if (n <= 0) return;
    if (gdl__pfor_tasks(n, work) > 1) {
        gdl__loop_job j;
        j.body = body;
        j.a = a;
        gdl__parallel_for(n, work, gdl__loop_range, &j);
    } else {
        body(*a, 0, n);
    }
}
/* ---------------------------------------------------------------------------
   [impl-gemm]  CPU GEMM, row-major: C = alpha*op(A)*op(B) + beta*C

   A GotoBLAS/BLIS-style blocked GEMM. Loops, outermost first:

     for jc over N step NC        B panel op(B)[pc:pc+kc, jc:jc+nc] is packed
       for pc over K step KC        into NR-wide micro-panels (k-major); it
                                    stays in L2/L3 while the A blocks use it
         for ic over M step MC    A block op(A)[ic:ic+mc, pc:pc+kc] is packed
                                    into MR-tall micro-panels; it stays in L2
           for jr over nc step NR   one B micro-panel (kc x NR) stays in L1...
             for ir over mc step MR ...while the A micro-panels stream past
               micro-kernel: an MR x NR tile of C in registers, one rank-1
               update per k, then C = alpha*acc + beta*C (the caller's beta
               for the first K block, beta = 1 for the later ones)

   Packing copies op(A) and op(B) into contiguous, zero-padded panels, so the
   transposes, leading dimensions and ragged edges are dealt with once, in
   the packing, and the micro-kernel only ever sees full MR x NR tiles. An
   edge tile is computed into a local tile and its valid part copied out.

   Micro-kernels and block sizes (float; measured on a Sapphire Rapids core:
   KC*NR*4 bytes of B stay in L1 (48 KB), MC*KC*4 bytes of A in L2):
     AVX-512   8x32: 16 zmm accumulators, 2 loads + 8 broadcasts per k.
               MC=64 KC=256 NC=3072 (32 KB of B in L1, 64 KB of A).
               Taken whenever the compiler targets AVX-512 (-march=native
               on Skylake-X ... Sapphire Rapids, Zen 4).
     AVX2+FMA  6x16: 12 ymm accumulators, 2 loads + 6 broadcasts per k.
               MC=72 KC=256 NC=3072 (16 KB of B in L1, 72 KB of A).
     NEON      8x12 (AArch64 Advanced SIMD): 24 q-register accumulators,
               2 A loads + 3 B loads and 24 by-lane FMAs per k.
               MC=128 KC=256 NC=768 (12 KB of B in L1, 128 KB of A, a
               768 KB B panel for the 1-2 MB L2/L3 of Cortex-A72/A76
               boards). Not yet timed on an ARM board (only run under qemu).
     portable  4x8: plain C that the compiler vectorises; it also serves the
               GPUDL_DOUBLE build and -DGPUDL_GEMM_PORTABLE. MC=128 KC=256
               NC=2048.
   Large square products run at ~85% (AVX-512) and ~95% (AVX2) of the
   measured FMA peak; at MLP sizes the rest is mostly packing. The
   transposing packs (A not transposed, B transposed as in y = x*W^T) use
   8x8 / 4x4 register transposes (4x4 on NEON).
   K is cut into equal blocks (K=784 -> 4 x 196, not 3 x 256 + 16) and M, N
   likewise (rounded to MR/NR), so no block is a sliver.

   Same bits on every SIMD path: the AVX-512, AVX2 and NEON kernels all
   compute an element of C as one chain of fused multiply-adds over k, in
   order, within K blocks that depend only on K and KC (256 for all), then
   alpha*acc (rounded) + beta*c, unfused. Tile shapes only decide which
   element goes where, so the three give bitwise identical products. The
   portable kernel multiplies and adds separately (x86-64 has no FMA
   baseline), so it differs from them by rounding only.

   Threads (the pool of [impl-pool]): C is cut, at tile boundaries, into a
   grid of at most gdl_get_num_threads() rectangles (the grid that
   minimises per-thread work + packing); each thread runs the blocked loops
   above on its rectangle with the packing buffers of its rectangle. No
   barriers inside the parallel region, no shared writes. K is never split, and every tile
   and K block is the same whatever the grid, so each element of C is
   computed by the same operations in the same order with 1 or 64 threads:
   results are bitwise identical for any thread count. Problems with
   M*N*K < GDL__GEMM_MT_MIN (64^3) stay on the calling thread: there the
   fork/join costs more than it saves. The backend's batched GEMM (one
   product per convolution sample) runs its products as the tasks of one
   parallel region, each whole on its thread's buffers; with sC == 0 (all
   products summed into one C, the weight gradient) it is one product whose
   K runs over the samples in turn. Both give the bits of a loop of calls.

   Memory: the packing buffers of all threads are one block, allocated on
   first use with GPUDL_MALLOC, grow-only and reused by later calls, so the
   steady state allocates nothing; gdl__gemm_release() frees it. If the
   allocation fails, a simple unpacked loop computes the result (slower;
   same K blocks and summation order). That loop is also used when another
   thread holds the pool (gdl_gemm_cpu called from inside a parallel region,
   or from two threads at once), because the buffers are shared.

   With -DGPUDL_CBLAS (float build) everything routes to cblas_sgemm.
   ------------------------------------------------------------------------- */

#if defined(GPUDL_CBLAS) && !defined(GPUDL_DOUBLE)
#define GDL__GEMM_CBLAS 1
#include <cblas.h>
#endif

/* Kernel selection, from what the compiler targets (no run-time dispatch:
   build with -march=native, or the flags of the oldest CPU to run on). */
#if !defined(GDL__GEMM_CBLAS) && !defined(GPUDL_DOUBLE) && !defined(GPUDL_GEMM_PORTABLE)
/* MSVC's /arch:AVX2 and /arch:AVX512 imply FMA but define no __FMA__; its AArch64 target defines _M_ARM64 */
#if defined(__AVX2__) && (defined(__FMA__) || defined(_MSC_VER))
#include <immintrin.h>
#if defined(__AVX512F__)
#define GDL__GEMM_AVX512 1 /* e.g. -march=native on Skylake-X ... Sapphire Rapids, Zen 4 */
#else
#define GDL__GEMM_AVX2 1
#endif
#elif (defined(__aarch64__) && defined(__ARM_NEON)) || defined(_M_ARM64)
#include <arm_neon.h> /* every AArch64 CPU has Advanced SIMD: Raspberry Pi 3-5, Jetson */
#define GDL__GEMM_NEON 1
#endif
#endif

#ifndef GDL__RESTRICT
#if defined(__cplusplus)
#define GDL__RESTRICT __restrict
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
#define GDL__RESTRICT restrict
#else
#define GDL__RESTRICT
#endif
#endif

#ifndef GDL__GEMM_CBLAS

/* Block sizes (elements). MC must be a multiple of MR and NC of NR. They may
   be overridden with -D for tuning. KC sets the K blocks and so the rounding
   of the results; MC and NC only change the order in which tiles are done. */
#if defined(GDL__GEMM_AVX512)
#define GDL__GEMM_MR 8
#define GDL__GEMM_NR 32
#ifndef GDL__GEMM_MC
#define GDL__GEMM_MC 64
#endif
#ifndef GDL__GEMM_KC
#define GDL__GEMM_KC 256
#endif
#ifndef GDL__GEMM_NC
#define GDL__GEMM_NC 3072
#endif
#elif defined(GDL__GEMM_AVX2)
#define GDL__GEMM_MR 6
#define GDL__GEMM_NR 16
#ifndef GDL__GEMM_MC
#define GDL__GEMM_MC 72
#endif
#ifndef GDL__GEMM_KC
#define GDL__GEMM_KC 256
#endif
#ifndef GDL__GEMM_NC
#define GDL__GEMM_NC 3072
#endif
#elif defined(GDL__GEMM_NEON)
#define GDL__GEMM_MR 8
#define GDL__GEMM_NR 12
#ifndef GDL__GEMM_MC
#define GDL__GEMM_MC 128
#endif
#ifndef GDL__GEMM_KC
#define GDL__GEMM_KC 256
#endif
#ifndef GDL__GEMM_NC
#define GDL__GEMM_NC 768
#endif
#else
#define GDL__GEMM_MR 4
#define GDL__GEMM_NR 8
#ifndef GDL__GEMM_MC
#define GDL__GEMM_MC 128
#endif
#ifndef GDL__GEMM_KC
#define GDL__GEMM_KC 256
#endif
#ifndef GDL__GEMM_NC
#define GDL__GEMM_NC 2048
#endif
#endif

/* Below this many multiply-adds (M*N*K) the call stays on one thread. */
#ifndef GDL__GEMM_MT_MIN
#define GDL__GEMM_MT_MIN (64.0 * 64.0 * 64.0)
#endif

/* acc + a*b with the same rounding as the micro-kernel, so the fallback loop
   sums like the packed path (fused on the SIMD paths; needs <math.h>). */
#if defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_AVX512) || defined(GDL__GEMM_NEON)
#define GDL__GEMM_MADD(a, b, acc) fmaf((a), (b), (acc))
#else
#define GDL__GEMM_MADD(a, b, acc) ((acc) + (a) * (b))
#endif

/* The packing buffers of all threads, one block: grow-only, 64-byte aligned
   inside the raw allocation. */
static void *gdl__gemm_raw;
static gdl_real *gdl__gemm_buf;
static size_t gdl__gemm_cap; /* in elements */

static void gdl__gemm_release(void) {
    GPUDL_FREE(gdl__gemm_raw);
    gdl__gemm_raw = NULL;
    gdl__gemm_buf = NULL;
    gdl__gemm_cap = 0;
}

/* Make the buffer hold at least n elements. Returns 0 on allocation failure
   (the old buffer is kept). The contents are not preserved: free + malloc,
   not realloc, so nothing is copied. */
static int gdl__gemm_reserve(size_t n) {
    void *p;
    if (n <= gdl__gemm_cap) return 1;
    p = GPUDL_MALLOC(n * sizeof(gdl_real) + 64);
    if (!p) return 0;
    GPUDL_FREE(gdl__gemm_raw);
    gdl__gemm_raw = p;
    gdl__gemm_buf = (gdl_real *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    gdl__gemm_cap = n;
    return 1;
}

/* --- micro-kernels -------------------------------------------------------
   gdl__gemm_kernel(kc, a, b, c, ldc, alpha, beta): one full MR x NR tile.
   a: packed A micro-panel, a[k*MR + i]; b: packed B micro-panel, b[k*NR + j]
   (64-byte aligned). c[i*ldc + j] = alpha*sum_k a*b + beta*c[i*ldc + j];
   beta == 0 writes c without reading it. alpha*acc is rounded before beta*c
   is added. (Edge tiles are finished in scalar code, which the compiler may
   contract into an FMA; whether a tile is an edge tile depends only on its
   position, never on the thread count.) */

#if defined(GDL__GEMM_AVX512)

/* One 16-wide store of alpha*acc (+ beta*c). mode: 0 beta==0, 1 beta==1, 2 other. */
static inline void gdl__gemm_store16(float *c, __m512 acc, __m512 va, __m512 vb, int mode) {
    __m512 r = _mm512_mul_ps(va, acc);
    if (mode == 1) r = _mm512_add_ps(r, _mm512_loadu_ps(c));
    else if (mode == 2) r = _mm512_add_ps(r, _mm512_mul_ps(vb, _mm512_loadu_ps(c)));
    _mm512_storeu_ps(c, r);
}

#define GDL__GEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
static void gdl__gemm_kernel(int kc, const float *GDL__RESTRICT a, const float *GDL__RESTRICT b,
                             float *GDL__RESTRICT c, ptrdiff_t ldc, float alpha, float beta) {
#define GDL__GEMM_DECL(r) __m512 c##r##_0 = _mm512_setzero_ps(), c##r##_1 = _mm512_setzero_ps();
    GDL__GEMM_ROWS(GDL__GEMM_DECL)
#undef GDL__GEMM_DECL
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const int mode = beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
    int k;
    /* Fetch the C tile now so the stores at the end do not wait for it
       (rows of C are often a multiple of 4 KB apart and conflict in L1). */
#define GDL__GEMM_PF(r)                                                   \
    _mm_prefetch((const char *)(c + (r) * ldc), _MM_HINT_T0);             \
    _mm_prefetch((const char *)(c + (r) * ldc + 31), _MM_HINT_T0);
    GDL__GEMM_ROWS(GDL__GEMM_PF)
#undef GDL__GEMM_PF
    for (k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        __m512 ar;
#define GDL__GEMM_FMA(r)                              \
    ar = _mm512_set1_ps(a[r]);                        \
    c##r##_0 = _mm512_fmadd_ps(ar, b0, c##r##_0);     \
    c##r##_1 = _mm512_fmadd_ps(ar, b1, c##r##_1);
        GDL__GEMM_ROWS(GDL__GEMM_FMA)
#undef GDL__GEMM_FMA
        a += GDL__GEMM_MR;
        b += 32;
    }
#define GDL__GEMM_STORE(r)                                          \
    gdl__gemm_store16(c + (r) * ldc, c##r##_0, va, vb, mode);       \
    gdl__gemm_store16(c + (r) * ldc + 16, c##r##_1, va, vb, mode);
    GDL__GEMM_ROWS(GDL__GEMM_STORE)
#undef GDL__GEMM_STORE
}
#undef GDL__GEMM_ROWS

#elif defined(GDL__GEMM_AVX2)

/* One 8-wide store of alpha*acc (+ beta*c). mode: 0 beta==0, 1 beta==1, 2 other. */
static inline void gdl__gemm_store8(float *c, __m256 acc, __m256 va, __m256 vb, int mode) {
    __m256 r = _mm256_mul_ps(va, acc);
    if (mode == 1) r = _mm256_add_ps(r, _mm256_loadu_ps(c));
    else if (mode == 2) r = _mm256_add_ps(r, _mm256_mul_ps(vb, _mm256_loadu_ps(c)));
    _mm256_storeu_ps(c, r);
}

static void gdl__gemm_kernel(int kc, const float *GDL__RESTRICT a, const float *GDL__RESTRICT b,
                             float *GDL__RESTRICT c, ptrdiff_t ldc, float alpha, float beta) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    const int mode = beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
    int k;
    /* fetch the C tile now so the stores at the end do not wait for it */
#define GDL__GEMM_PF(r)                                                   \
    _mm_prefetch((const char *)(c + (r) * ldc), _MM_HINT_T0);             \
    _mm_prefetch((const char *)(c + (r) * ldc + 15), _MM_HINT_T0);
    GDL__GEMM_PF(0) GDL__GEMM_PF(1) GDL__GEMM_PF(2) GDL__GEMM_PF(3) GDL__GEMM_PF(4) GDL__GEMM_PF(5)
#undef GDL__GEMM_PF
    for (k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        __m256 ar;
#define GDL__GEMM_ROW(r)                           \
    ar = _mm256_broadcast_ss(a + r);               \
    c##r##0 = _mm256_fmadd_ps(ar, b0, c##r##0);    \
    c##r##1 = _mm256_fmadd_ps(ar, b1, c##r##1);
        GDL__GEMM_ROW(0) GDL__GEMM_ROW(1) GDL__GEMM_ROW(2)
        GDL__GEMM_ROW(3) GDL__GEMM_ROW(4) GDL__GEMM_ROW(5)
#undef GDL__GEMM_ROW
        a += 6;
        b += 16;
    }
#define GDL__GEMM_STORE(r)                                         \
    gdl__gemm_store8(c + (r) * ldc, c##r##0, va, vb, mode);         \
    gdl__gemm_store8(c + (r) * ldc + 8, c##r##1, va, vb, mode);
    GDL__GEMM_STORE(0) GDL__GEMM_STORE(1) GDL__GEMM_STORE(2)
    GDL__GEMM_STORE(3) GDL__GEMM_STORE(4) GDL__GEMM_STORE(5)
#undef GDL__GEMM_STORE
}

#elif defined(GDL__GEMM_NEON)

/* One 4-wide store of alpha*acc (+ beta*c), unfused as on x86. mode: 0 beta==0,
   1 beta==1, 2 other. */
static inline void gdl__gemm_store4(float *c, float32x4_t acc, float alpha, float beta, int mode) {
    float32x4_t r = vmulq_n_f32(acc, alpha);
    if (mode == 1) r = vaddq_f32(r, vld1q_f32(c));
    else if (mode == 2) r = vaddq_f32(r, vmulq_n_f32(vld1q_f32(c), beta));
    vst1q_f32(c, r);
}

/* Rows 0-3 take their a from lanes of a0, rows 4-7 from lanes of a1. */
#define GDL__GEMM_ROWS(X) X(0, a0, 0) X(1, a0, 1) X(2, a0, 2) X(3, a0, 3) \
                          X(4, a1, 0) X(5, a1, 1) X(6, a1, 2) X(7, a1, 3)
static void gdl__gemm_kernel(int kc, const float *GDL__RESTRICT a, const float *GDL__RESTRICT b,
                             float *GDL__RESTRICT c, ptrdiff_t ldc, float alpha, float beta) {
    const float32x4_t z = vdupq_n_f32(0.0f);
#define GDL__GEMM_DECL(r, av, l) float32x4_t c##r##_0 = z, c##r##_1 = z, c##r##_2 = z;
    GDL__GEMM_ROWS(GDL__GEMM_DECL)
#undef GDL__GEMM_DECL
    const int mode = beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
    int k;
    for (k = 0; k < kc; k++) {
        const float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);
        const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
        /* c += b * a[l], fused: the same single rounding as _mm*_fmadd_ps */
#define GDL__GEMM_FMA(r, av, l)                        \
    c##r##_0 = vfmaq_laneq_f32(c##r##_0, b0, av, l);   \
    c##r##_1 = vfmaq_laneq_f32(c##r##_1, b1, av, l);   \
    c##r##_2 = vfmaq_laneq_f32(c##r##_2, b2, av, l);
        GDL__GEMM_ROWS(GDL__GEMM_FMA)
#undef GDL__GEMM_FMA
        a += 8;
        b += 12;
    }
#define GDL__GEMM_STORE(r, av, l)                                  \
    gdl__gemm_store4(c + (r) * ldc, c##r##_0, alpha, beta, mode);   \
    gdl__gemm_store4(c + (r) * ldc + 4, c##r##_1, alpha, beta, mode); \
    gdl__gemm_store4(c + (r) * ldc + 8, c##r##_2, alpha, beta, mode);
    GDL__GEMM_ROWS(GDL__GEMM_STORE)
#undef GDL__GEMM_STORE
}
#undef GDL__GEMM_ROWS

#else /* portable */

static void gdl__gemm_kernel(int kc, const gdl_real *GDL__RESTRICT a, const gdl_real *GDL__RESTRICT b,
                             gdl_real *GDL__RESTRICT c, ptrdiff_t ldc, gdl_real alpha, gdl_real beta) {
    /* Fixed trip counts: the compiler unrolls i and vectorises j, and keeps
       acc in registers where it has enough of them. */
    gdl_real acc[GDL__GEMM_MR][GDL__GEMM_NR];
    int i, j, k;
    for (i = 0; i < GDL__GEMM_MR; i++)
        for (j = 0; j < GDL__GEMM_NR; j++) acc[i][j] = 0;
    for (k = 0; k < kc; k++) {
        for (i = 0; i < GDL__GEMM_MR; i++) {
            const gdl_real ai = a[i];
            for (j = 0; j < GDL__GEMM_NR; j++) acc[i][j] = GDL__GEMM_MADD(ai, b[j], acc[i][j]);
        }
        a += GDL__GEMM_MR;
        b += GDL__GEMM_NR;
    }
    for (i = 0; i < GDL__GEMM_MR; i++) {
        gdl_real *ci = c + i * ldc;
        if (beta == 0)
            for (j = 0; j < GDL__GEMM_NR; j++) ci[j] = alpha * acc[i][j];
        else if (beta == 1)
            for (j = 0; j < GDL__GEMM_NR; j++) ci[j] = alpha * acc[i][j] + ci[j];
        else
            for (j = 0; j < GDL__GEMM_NR; j++) ci[j] = alpha * acc[i][j] + beta * ci[j];
    }
}

#endif

/* --- packing -------------------------------------------------------------
   op(A)[i][k] = transA ? A[k*lda + i] : A[i*lda + k]   (op(A) is M x K)
   op(B)[k][j] = transB ? B[j*ldb + k] : B[k*ldb + j]   (op(B) is K x N)
   A micro-panel: dst[k*MR + i], B micro-panel: dst[k*NR + j]. Both are
   "kc rows of width W, zero-padded from w to W", so two helpers do all
   four cases: a row copy (transA, !transB) and a transpose (!transA,
   transB: y = x*W^T). The transpose is the hot one for small batches, so
   the SIMD builds do it with 8x8 and 4x4 register transposes. */

#if defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_AVX512)
/* d[c*ldd + r] = s[r*lds + c] for r, c < 8 */
static inline void gdl__gemm_tr8x8(const float *s, ptrdiff_t lds, float *d, ptrdiff_t ldd) {
    const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds);
    const __m256 r2 = _mm256_loadu_ps(s + 2 * lds), r3 = _mm256_loadu_ps(s + 3 * lds);
    const __m256 r4 = _mm256_loadu_ps(s + 4 * lds), r5 = _mm256_loadu_ps(s + 5 * lds);
    const __m256 r6 = _mm256_loadu_ps(s + 6 * lds), r7 = _mm256_loadu_ps(s + 7 * lds);
    /* t0 = r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5], ... */
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    /* u0 = column 0 | column 4 of rows 0-3, u1 = columns 1 | 5, ... */
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* d[c*ldd + r] = s[r*lds + c] for r, c < 4 */
static inline void gdl__gemm_tr4x4(const float *s, ptrdiff_t lds, float *d, ptrdiff_t ldd) {
    __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + lds);
    __m128 r2 = _mm_loadu_ps(s + 2 * lds), r3 = _mm_loadu_ps(s + 3 * lds);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps(d, r0);
    _mm_storeu_ps(d + ldd, r1);
    _mm_storeu_ps(d + 2 * ldd, r2);
    _mm_storeu_ps(d + 3 * ldd, r3);
}
#elif defined(GDL__GEMM_NEON)
/* d[c*ldd + r] = s[r*lds + c] for r, c < 4 */
static inline void gdl__gemm_tr4x4(const float *s, ptrdiff_t lds, float *d, ptrdiff_t ldd) {
    /* t01.val[0] = r0[0] r1[0] r0[2] r1[2], t01.val[1] = r0[1] r1[1] r0[3] r1[3] */
    const float32x4x2_t t01 = vtrnq_f32(vld1q_f32(s), vld1q_f32(s + lds));
    const float32x4x2_t t23 = vtrnq_f32(vld1q_f32(s + 2 * lds), vld1q_f32(s + 3 * lds));
    vst1q_f32(d, vcombine_f32(vget_low_f32(t01.val[0]), vget_low_f32(t23.val[0])));
    vst1q_f32(d + ldd, vcombine_f32(vget_low_f32(t01.val[1]), vget_low_f32(t23.val[1])));
    vst1q_f32(d + 2 * ldd, vcombine_f32(vget_high_f32(t01.val[0]), vget_high_f32(t23.val[0])));
    vst1q_f32(d + 3 * ldd, vcombine_f32(vget_high_f32(t01.val[1]), vget_high_f32(t23.val[1])));
}
#endif

/* dst[k*W + x] = src[k*lds + x] for x < w, 0 for w <= x < W (k < kc). */
static inline void gdl__gemm_pack_copy(const gdl_real *src, ptrdiff_t lds, int w, int kc, int W,
                                       gdl_real *GDL__RESTRICT dst) {
    int k, x;
    if (w == W) { /* full panel: fixed-length copies the compiler turns into vector moves */
        for (k = 0; k < kc; k++, src += lds, dst += W)
            for (x = 0; x < W; x++) dst[x] = src[x];
        return;
    }
    for (k = 0; k < kc; k++, src += lds, dst += W) {
        for (x = 0; x < w; x++) dst[x] = src[x];
        for (; x < W; x++) dst[x] = 0;
    }
}

/* dst[k*W + x] = src[x*lds + k] for x < w, 0 for w <= x < W (k < kc). */
static inline void gdl__gemm_pack_trans(const gdl_real *src, ptrdiff_t lds, int w, int kc, int W,
                                        gdl_real *GDL__RESTRICT dst) {
    int k, x = 0;
#if defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_AVX512)
    for (; x + 8 <= w; x += 8) {
        const float *s = src + x * lds;
        for (k = 0; k + 8 <= kc; k += 8) gdl__gemm_tr8x8(s + k, lds, dst + k * W + x, W);
        for (; k < kc; k++) {
            int i;
            for (i = 0; i < 8; i++) dst[k * W + x + i] = s[i * lds + k];
        }
    }
#endif
#if defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_AVX512) || defined(GDL__GEMM_NEON)
    for (; x + 4 <= w; x += 4) {
        const float *s = src + x * lds;
        for (k = 0; k + 4 <= kc; k += 4) gdl__gemm_tr4x4(s + k, lds, dst + k * W + x, W);
        for (; k < kc; k++) {
            int i;
            for (i = 0; i < 4; i++) dst[k * W + x + i] = s[i * lds + k];
        }
    }
#endif
    for (; x < w; x++) { /* read row x sequentially, write with stride W */
        const gdl_real *s = src + x * lds;
        for (k = 0; k < kc; k++) dst[k * W + x] = s[k];
    }
    for (; x < W; x++)
        for (k = 0; k < kc; k++) dst[k * W + x] = 0;
}

/* op(A)[i0:i0+m, p0:p0+kc] -> A micro-panel; rows m..MR-1 are zero. */
static void gdl__gemm_pack_a(int transA, const gdl_real *A, ptrdiff_t lda, int i0, int m, int p0, int kc,
                             gdl_real *GDL__RESTRICT dst) {
    if (transA)
        gdl__gemm_pack_copy(A + (ptrdiff_t)p0 * lda + i0, lda, m, kc, GDL__GEMM_MR, dst);
    else
        gdl__gemm_pack_trans(A + (ptrdiff_t)i0 * lda + p0, lda, m, kc, GDL__GEMM_MR, dst);
}

/* op(B)[p0:p0+kc, j0:j0+n] -> B micro-panel; columns n..NR-1 are zero. */
static void gdl__gemm_pack_b(int transB, const gdl_real *B, ptrdiff_t ldb, int p0, int kc, int j0, int n,
                             gdl_real *GDL__RESTRICT dst) {
    if (transB)
        gdl__gemm_pack_trans(B + (ptrdiff_t)j0 * ldb + p0, ldb, n, kc, GDL__GEMM_NR, dst);
    else
        gdl__gemm_pack_copy(B + (ptrdiff_t)p0 * ldb + j0, ldb, n, kc, GDL__GEMM_NR, dst);
}

/* --- drivers -------------------------------------------------------------- */

typedef struct gdl__gemm_args {
    int transA, transB, M, N, K;
    gdl_real alpha, beta;
    const gdl_real *A, *B;
    gdl_real *C;
    ptrdiff_t lda, ldb, ldc;
    /* nseg > 1: C = beta*C + sum over s < nseg of alpha*op(A + s*sA)*op(B + s*sB),
       the segments in turn, each cut into K blocks as a call of its own
       would: the batched GEMM with sC == 0 and beta 1 (a convolution's
       weight gradient over the samples), bitwise as a loop of calls. */
    int nseg;
    ptrdiff_t sA, sB;
} gdl__gemm_args;

/* Split n into equal blocks of at most max, each a multiple of q (max is a
   multiple of q). */
static int gdl__gemm_block(int n, int max, int q) {
    int nblocks = (n + max - 1) / max;
    int b = (n + nblocks - 1) / nblocks;
    return (b + q - 1) / q * q;
}

/* C = beta*C; beta == 0 writes zeros without reading C. */
static void gdl__gemm_scale(const gdl__gemm_args *g) {
    int i, j;
    if (g->beta == 1) return;
    for (i = 0; i < g->M; i++) {
        gdl_real *c = g->C + i * g->ldc;
        if (g->beta == 0)
            for (j = 0; j < g->N; j++) c[j] = 0;
        else
            for (j = 0; j < g->N; j++) c[j] *= g->beta;
    }
}

/* Unpacked fallback: the same K blocks and summation order as the packed
   path, one dot product per element. Correct for any sizes, slow. */
static void gdl__gemm_simple(const gdl__gemm_args *g, int kc_blk) {
    const ptrdiff_t sa_i = g->transA ? 1 : g->lda, sa_k = g->transA ? g->lda : 1;
    const ptrdiff_t sb_k = g->transB ? 1 : g->ldb, sb_j = g->transB ? g->ldb : 1;
    int i, j, k, pc, seg;
    for (seg = 0; seg < g->nseg; seg++)
    for (pc = 0; pc < g->K; pc += kc_blk) {
        const int kend = pc + kc_blk < g->K ? pc + kc_blk : g->K;
        const gdl_real beta = seg == 0 && pc == 0 ? g->beta : (gdl_real)1;
        for (i = 0; i < g->M; i++) {
            gdl_real *c = g->C + i * g->ldc;
            for (j = 0; j < g->N; j++) {
                const gdl_real *a = g->A + seg * g->sA + i * sa_i, *b = g->B + seg * g->sB + j * sb_j;
                gdl_real acc = 0, t;
                for (k = pc; k < kend; k++) acc = GDL__GEMM_MADD(a[k * sa_k], b[k * sb_k], acc);
                t = g->alpha * acc;
                c[j] = beta == 0 ? t : beta == 1 ? t + c[j] : t + beta * c[j];
            }
        }
    }
}

/* The packed, blocked path on one thread, for the rows [m0,m1) and columns
   [n0,n1) of C (m0 a multiple of MR, n0 of NR). abuf holds mc_blk x kc_blk,
   bbuf kc_blk x nc_blk elements, both 64-byte aligned. */
static void gdl__gemm_blocked(const gdl__gemm_args *g, int m0, int m1, int n0, int n1, int mc_blk, int kc_blk,
                              int nc_blk, gdl_real *GDL__RESTRICT abuf, gdl_real *GDL__RESTRICT bbuf) {
    int jc, pc, ic, ir, jr, seg;
    for (jc = n0; jc < n1; jc += nc_blk) {
        const int nc = n1 - jc < nc_blk ? n1 - jc : nc_blk;
        for (seg = 0; seg < g->nseg; seg++)
        for (pc = 0; pc < g->K; pc += kc_blk) {
            const int kc = g->K - pc < kc_blk ? g->K - pc : kc_blk;
            /* later K blocks (and segments) accumulate */
            const gdl_real beta = seg == 0 && pc == 0 ? g->beta : (gdl_real)1;
            for (jr = 0; jr < nc; jr += GDL__GEMM_NR) {
                const int n = nc - jr < GDL__GEMM_NR ? nc - jr : GDL__GEMM_NR;
                gdl__gemm_pack_b(g->transB, g->B + seg * g->sB, g->ldb, pc, kc, jc + jr, n, bbuf + (size_t)jr * kc);
            }
            for (ic = m0; ic < m1; ic += mc_blk) {
                const int mc = m1 - ic < mc_blk ? m1 - ic : mc_blk;
                for (ir = 0; ir < mc; ir += GDL__GEMM_MR) {
                    const int m = mc - ir < GDL__GEMM_MR ? mc - ir : GDL__GEMM_MR;
                    gdl__gemm_pack_a(g->transA, g->A + seg * g->sA, g->lda, ic + ir, m, pc, kc,
                                     abuf + (size_t)ir * kc);
                }
                /* jr outside ir: one B micro-panel stays in L1 while the
                   A micro-panels stream past it from L2 */
                for (jr = 0; jr < nc; jr += GDL__GEMM_NR) {
                    const int n = nc - jr < GDL__GEMM_NR ? nc - jr : GDL__GEMM_NR;
                    const gdl_real *bp = bbuf + (size_t)jr * kc;
                    for (ir = 0; ir < mc; ir += GDL__GEMM_MR) {
                        const int m = mc - ir < GDL__GEMM_MR ? mc - ir : GDL__GEMM_MR;
                        const gdl_real *ap = abuf + (size_t)ir * kc;
                        gdl_real *c = g->C + (ic + ir) * g->ldc + jc + jr;
                        if (m == GDL__GEMM_MR && n == GDL__GEMM_NR) {
                            gdl__gemm_kernel(kc, ap, bp, c, g->ldc, g->alpha, beta);
                        } else { /* edge: the full tile into tmp, then the valid part */
                            gdl_real tmp[GDL__GEMM_MR * GDL__GEMM_NR];
                            int i, j;
                            gdl__gemm_kernel(kc, ap, bp, tmp, GDL__GEMM_NR, g->alpha, 0);
                            for (i = 0; i < m; i++) {
                                const gdl_real *ti = tmp + i * GDL__GEMM_NR;
                                gdl_real *ci = c + i * g->ldc;
                                if (beta == 0)
                                    for (j = 0; j < n; j++) ci[j] = ti[j];
                                else if (beta == 1)
                                    for (j = 0; j < n; j++) ci[j] = ti[j] + ci[j];
                                else
                                    for (j = 0; j < n; j++) ci[j] = ti[j] + beta * ci[j];
                            }
                        }
                    }
                }
            }
        }
    }
}

#ifdef GDL__POOL
/* Cut the MR x NR tiles of C into a tm x tn grid of at most nthreads
   rectangles, one per thread. Each thread runs gdl__gemm_blocked on its own
   rectangle with its own packing buffers: no barriers, no shared writes.
   Cost of a rectangle of r rows and c columns: r*c*K multiply-adds
   (~32 per cycle) plus (r + c)*K packed elements (~1 per cycle), so pick
   the grid with the least r*c + 32*(r + c). Splitting along N makes every
   thread pack all of its rows of A, splitting along M all of B. */
static void gdl__gemm_grid(int M, int N, int nthreads, int *tm, int *tn) {
    const int pm = (M + GDL__GEMM_MR - 1) / GDL__GEMM_MR, pn = (N + GDL__GEMM_NR - 1) / GDL__GEMM_NR;
    double best = -1;
    int a, b;
    *tm = *tn = 1;
    for (b = 1; b <= nthreads && b <= pn; b++)
        for (a = 1; a * b <= nthreads && a <= pm; a++) {
            const double r = (double)((pm + a - 1) / a) * GDL__GEMM_MR;
            const double c = (double)((pn + b - 1) / b) * GDL__GEMM_NR;
            const double cost = r * c + 32.0 * (r + c);
            if (best < 0 || cost < best) {
                best = cost;
                *tm = a;
                *tn = b;
            }
        }
}

/* Rectangle t of the grid: rows [*m0,*m1), columns [*n0,*n1) of C, cut at
   tile boundaries so every element is computed by the same tile, with the
   same operations, whatever the grid. */
static void gdl__gemm_cell(int M, int N, int tm, int tn, int t, int *m0, int *m1, int *n0, int *n1) {
    const int pm = (M + GDL__GEMM_MR - 1) / GDL__GEMM_MR, pn = (N + GDL__GEMM_NR - 1) / GDL__GEMM_NR;
    const int ti = t / tn, tj = t % tn;
    *m0 = (int)((long long)pm * ti / tm) * GDL__GEMM_MR;
    *m1 = (int)((long long)pm * (ti + 1) / tm) * GDL__GEMM_MR;
    *n0 = (int)((long long)pn * tj / tn) * GDL__GEMM_NR;
    *n1 = (int)((long long)pn * (tj + 1) / tn) * GDL__GEMM_NR;
    if (*m1 > M) *m1 = M;
    if (*n1 > N) *n1 = N;
}

/* A threaded GEMM's tasks, each on its thread's packing buffers (asz + bsz
   elements): the rectangles of a tm x tn grid of C (gdl__gemm_task), or the
   products of a batch, sA, sB, sC apart (gdl__gemm_batch_task). */
typedef struct {
    const gdl__gemm_args *g;
    int mc_blk, kc_blk, nc_blk, tm, tn;
    size_t asz, bsz;
    ptrdiff_t sA, sB, sC;
} gdl__gemm_job;

/* One rectangle of the grid: the pool's task t. */
static void gdl__gemm_task(void *p, int t, int nt) {
    const gdl__gemm_job *j = (const gdl__gemm_job *)p;
    gdl_real *buf = gdl__gemm_buf + (size_t)t * (j->asz + j->bsz);
    int m0, m1, n0, n1;
    (void)nt;
    gdl__gemm_cell(j->g->M, j->g->N, j->tm, j->tn, t, &m0, &m1, &n0, &n1);
    gdl__gemm_blocked(j->g, m0, m1, n0, n1, j->mc_blk, j->kc_blk, j->nc_blk, buf, buf + j->asz);
}
#endif /* GDL__POOL */

#endif /* !GDL__GEMM_CBLAS */

#ifndef GDL__GEMM_CBLAS
/* The built-in GEMM on g (M, N > 0): threads, packing buffers, fallbacks. */
static void gdl__gemm_run(const gdl__gemm_args *g) {
    const int M = g->M, N = g->N, K = g->K;
    int mc_blk, kc_blk, nc_blk, tm = 1, tn = 1;
    size_t asz, bsz;
    if (K <= 0 || g->alpha == 0) { /* A and B are not read */
        gdl__gemm_scale(g);
        return;
    }
    mc_blk = gdl__gemm_block(M, GDL__GEMM_MC, GDL__GEMM_MR);
    kc_blk = gdl__gemm_block(K, GDL__GEMM_KC, 1);
    nc_blk = gdl__gemm_block(N, GDL__GEMM_NC, GDL__GEMM_NR);
    if (!gdl__pool_acquire()) { /* the packing buffers are in use: don't race */
        gdl__gemm_simple(g, kc_blk);
        return;
    }
#ifdef GDL__POOL
    if ((double)M * N * K * g->nseg >= GDL__GEMM_MT_MIN) gdl__gemm_grid(M, N, gdl_get_num_threads(), &tm, &tn);
#endif
    /* per thread: an A block and a B panel, each rounded up to 64 bytes */
    asz = ((size_t)mc_blk * kc_blk + 15) & ~(size_t)15;
    bsz = ((size_t)kc_blk * nc_blk + 15) & ~(size_t)15;
    if (!gdl__gemm_reserve((size_t)tm * tn * (asz + bsz))) {
        tm = tn = 1; /* no memory for every thread: try one thread */
        if (!gdl__gemm_reserve(asz + bsz)) {
            gdl__pool_release();
            gdl__gemm_simple(g, kc_blk);
            return;
        }
    }
#ifdef GDL__POOL
    if (tm * tn > 1) {
        gdl__gemm_job j;
        j.g = g;
        j.mc_blk = mc_blk; j.kc_blk = kc_blk; j.nc_blk = nc_blk;
        j.tm = tm; j.tn = tn;
        j.asz = asz; j.bsz = bsz;
        j.sA = j.sB = j.sC = 0;
        gdl__pool_run(tm * tn, gdl__gemm_task, &j);
        gdl__pool_release();
        return;
    }
#endif
    gdl__gemm_blocked(g, 0, M, 0, N, mc_blk, kc_blk, nc_blk, gdl__gemm_buf, gdl__gemm_buf + asz);
    gdl__pool_release();
}
#endif

#if defined(GDL__POOL) && !defined(GDL__GEMM_CBLAS)
#define GDL__GEMM_BATCH 1
/* A batch of independent products (a convolution's samples): task t is
   product t, whole, on the thread's own packing buffers. One parallel region
   instead of one per product, and products too small to split are spread
   over the threads too. Each product is computed as a call of its own would
   (the grid never changes the bits). */
static void gdl__gemm_batch_task(void *p, int t, int nt) {
    const gdl__gemm_job *j = (const gdl__gemm_job *)p;
    gdl__gemm_args g = *j->g;
    gdl_real *buf = gdl__gemm_buf + (size_t)gdl__pool_slot * (j->asz + j->bsz);
    (void)nt;
    g.A += t * j->sA;
    g.B += t * j->sB;
    g.C += t * j->sC;
    gdl__gemm_blocked(&g, 0, g.M, 0, g.N, j->mc_blk, j->kc_blk, j->nc_blk, buf, buf + j->asz);
}

/* Returns 0 (nothing done) when the pool or the memory is not to be had. */
static int gdl__gemm_batch(const gdl__gemm_args *g, ptrdiff_t sA, ptrdiff_t sB, ptrdiff_t sC, int batch, int threads) {
    gdl__gemm_job j;
    j.g = g;
    j.tm = j.tn = 1; /* not a grid */
    j.sA = sA; j.sB = sB; j.sC = sC;
    j.mc_blk = gdl__gemm_block(g->M, GDL__GEMM_MC, GDL__GEMM_MR);
    j.kc_blk = gdl__gemm_block(g->K, GDL__GEMM_KC, 1);
    j.nc_blk = gdl__gemm_block(g->N, GDL__GEMM_NC, GDL__GEMM_NR);
    j.asz = ((size_t)j.mc_blk * j.kc_blk + 15) & ~(size_t)15;
    j.bsz = ((size_t)j.kc_blk * j.nc_blk + 15) & ~(size_t)15;
    if (!gdl__pool_acquire()) return 0;
    if (!gdl__gemm_reserve((size_t)threads * (j.asz + j.bsz))) {
        gdl__pool_release();
        return 0;
    }
    gdl__pool_run(batch, gdl__gemm_batch_task, &j);
    gdl__pool_release();
    return 1;
}
#endif

GPUDL_API void gdl_gemm_cpu(int transA, int transB, int M, int N, int K, gdl_real alpha,
                            const gdl_real *A, int lda, const gdl_real *B, int ldb,
                            gdl_real beta, gdl_real *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    GPUDL_ASSERT(C && ldc >= N);
    GPUDL_ASSERT(K <= 0 || alpha == 0 || (A && lda >= (transA ? M : K)));
    GPUDL_ASSERT(K <= 0 || alpha == 0 || (B && ldb >= (transB ? K : N)));
#ifdef GDL__GEMM_CBLAS
    if (K <= 0) { /* BLAS wants lda >= 1 even when K == 0: scale C ourselves */
        int i, j;
        for (i = 0; i < M; i++)
            for (j = 0; j < N; j++) C[(ptrdiff_t)i * ldc + j] = beta == 0 ? 0.0f : beta * C[(ptrdiff_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
#else
    {
        gdl__gemm_args g;
        g.transA = transA; g.transB = transB;
        g.M = M; g.N = N; g.K = K;
        g.alpha = alpha; g.beta = beta;
        g.A = A; g.B = B; g.C = C;
        g.lda = lda; g.ldb = ldb; g.ldc = ldc;
        g.nseg = 1; g.sA = g.sB = 0;
        gdl__gemm_run(&g);
    }
#endif
}

#ifdef GDL__GEMM_CBLAS
static void gdl__gemm_release(void) {} /* nothing cached on the CBLAS path */
#endif

GPUDL_API const char *gdl_gemm_kernel_name(void) {
#if defined(GDL__GEMM_CBLAS)
    return "cblas";
#elif defined(GDL__GEMM_AVX512)
    return "avx512 8x32";
#elif defined(GDL__GEMM_AVX2)
    return "avx2 6x16";
#elif defined(GDL__GEMM_NEON)
    return "neon 8x12";
#elif defined(GPUDL_DOUBLE)
    return "portable 4x8 (double)";
#else
    return "portable 4x8";
#endif
}

/* ---------------------------------------------------------------------------
   [impl-gemm-int8]  The CPU int8 GEMM of the quantized layers ([api-quant]):

       C[M,N] (int32) = A[M,K] (u8) * B[N,K]^T (s8)

   A is a batch of quantized activations, B a quantized weight in Linear's
   layout [out, in], so C = x W^T. Every path computes the exact integer
   sums, so all paths, tile sizes and thread counts give the same bits. K is
   at most GDL_GEMM_INT8_MAX_K (65536): then no partial sum can leave int32
   (65536 * 255 * 128 < 2^31), on any path.

   B is packed once (a quantized layer packs its weight when it is made):
   panels of NR columns, K padded to KP (a multiple of 4) with zeros, and in
   a panel the 4 k's of each group side by side per column:
       packed[p][g][j][r] = B[p*NR + j][4g + r]     (0 outside B)
   which is the operand layout of the 4-wide dot-product instructions. Its
   column sums (int32) are kept with it: the zero-point correction of the
   quantized layers needs them, and so does the NEON path below. A is read
   in place, rows KP bytes apart or more, the padding of each row any value
   (it meets B's zero padding). The micro-kernel computes an MR x NR tile
   into a local tile; the driver copies the valid part out.

   Micro-kernels (chosen from what the compiler targets, as [impl-gemm]'s):
     AVX-512 VNNI 8x32  vpdpbusd: u8 x s8, 4 products summed into an int32
                        lane, exact. Needs -mavx512vnni -mavx512bw
                        (-march=native on Cascade Lake, Ice Lake, Sapphire
                        Rapids, Zen 4).
     AVX2 4x16          vpmaddubsw (u8 x s8, pairs summed into int16 WITH
                        SATURATION) then vpmaddwd by 1 into int32. A pair
                        of products exceeds int16 only when an activation is
                        above 127 (255*-128*2 = -65280), which is why
                        PyTorch's x86 engine quantizes activations to 7 bits
                        (reduce_range). Here: rows whose activations are all
                        <= 127 (the quantized layers' activations, which are
                        7-bit as PyTorch's) take that fast form; a tile with
                        a byte above 127 splits each activation a = l + 128h
                        (l <= 127, h in {0, 1}) and sums l*b and h*b with
                        two vpmaddubsw, the second scaled by 128 in
                        vpmaddwd: exact for all u8, at twice the cost. So
                        the AVX2 path is exact for any input.
     NEON sdot 8x8      (AArch64 with the dot-product extension,
                        __ARM_FEATURE_DOTPROD: -march=armv8.2-a+dotprod,
                        Cortex-A55/A76 and later) vdotq_s32 is s8 x s8, so
                        activations enter as a - 128 (a XOR 0x80) and
                        128 * colsum(B) is added back: exact.
     NEON 4x8           (any AArch64) the same a - 128, products by vmull_s8
                        (each fits int16: |128*128|), pairs widened and
                        summed into int32 by vpadalq_s16: exact.
     portable 4x8       plain C; also -DGPUDL_GEMM_PORTABLE.
   Threads: the MR x NR tiles are cut into contiguous ranges, one task per
   range ([impl-pool]); every tile is computed whole by one task, so the
   threads change nothing but the time.
   ------------------------------------------------------------------------- */

#if !defined(GPUDL_GEMM_PORTABLE)
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
#include <immintrin.h>
#define GDL__QG_VNNI 1
#elif defined(__AVX2__)
#include <immintrin.h>
#define GDL__QG_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>
#define GDL__QG_SDOT 1
#elif (defined(__aarch64__) && defined(__ARM_NEON)) || defined(_M_ARM64) /* MSVC's AArch64: NEON, sdot unknown */
#include <arm_neon.h>
#define GDL__QG_NEON 1
#endif
#endif

#if defined(GDL__QG_VNNI)
#define GDL__QG_MR 8
#define GDL__QG_NR 32
#elif defined(GDL__QG_AVX2)
#define GDL__QG_MR 4
#define GDL__QG_NR 16
#elif defined(GDL__QG_SDOT)
#define GDL__QG_MR 8
#define GDL__QG_NR 8
#else /* NEON without sdot, portable */
#define GDL__QG_MR 4
#define GDL__QG_NR 8
#endif
#if defined(GDL__QG_SDOT) || defined(GDL__QG_NEON)
#define GDL__QG_SIGNED_A 1 /* the kernel multiplies a - 128: the driver adds 128 * colsum */
#endif

/* A packed B (gdl__qpack_init): npanel panels of NR columns x KP bytes. */
typedef struct gdl__qpack {
    int N, K, KP, npanel;
    int8_t *b;       /* npanel * NR * KP bytes, 64-byte aligned inside raw */
    int32_t *colsum; /* [N]: sum over k of B[n][k] */
    void *raw;
} gdl__qpack;

static void gdl__qpack_free(gdl__qpack *p) {
    if (!p) return;
    GPUDL_FREE(p->raw);
    GPUDL_FREE(p->colsum);
    memset(p, 0, sizeof *p);
}

/* The checks every entry makes; 0, or -1 after the error naming op. */
static int gdl__qgemm_check(const char *op, int M, int N, int K) {
    if (M < 0 || N < 0 || K < 0 || K > GDL_GEMM_INT8_MAX_K) {
        gdl__set_error("%s: the int8 GEMM cannot take M=%d N=%d K=%d: sizes must be >= 0 and K <= %d (beyond it an "
                       "int32 sum of u8*s8 products could overflow)", op, M, N, K, GDL_GEMM_INT8_MAX_K);
        return -1;
    }
    return 0;
}

/* Packs B [N, K] (rows ldb apart) for the kernel. 0 / -1. */
static int gdl__qpack_init(const char *op, gdl__qpack *p, int N, int K, const int8_t *B, ptrdiff_t ldb) {
    const int NR = GDL__QG_NR;
    int n, k;
    size_t bytes;
    memset(p, 0, sizeof *p);
    if (gdl__qgemm_check(op, 1, N, K) < 0) return -1;
    p->N = N;
    p->K = K;
    p->KP = (K + 3) / 4 * 4;
    p->npanel = (N + NR - 1) / NR;
    bytes = (size_t)p->npanel * NR * (size_t)p->KP;
    p->raw = GPUDL_MALLOC(bytes + 64);
    p->colsum = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)(N ? N : 1));
    if (!p->raw || !p->colsum) {
        gdl__qpack_free(p);
        gdl__set_error("%s: out of memory packing a %dx%d int8 weight", op, N, K);
        return -1;
    }
    p->b = (int8_t *)(((uintptr_t)p->raw + 63) & ~(uintptr_t)63);
    memset(p->b, 0, bytes);
    for (n = 0; n < N; n++) {
        const int8_t *src = B + (ptrdiff_t)n * ldb;
        int8_t *dst = p->b + (size_t)(n / NR) * NR * p->KP + (size_t)(n % NR) * 4;
        int32_t s = 0;
        for (k = 0; k < K; k++) {
            dst[(size_t)(k / 4) * NR * 4 + (k & 3)] = src[k];
            s += src[k];
        }
        p->colsum[n] = s;
    }
    return 0;
}

/* --- micro-kernels --------------------------------------------------------
   gdl__qg_kernel(kg, a, lda, m, b, wide, tile): tile[i*NR + j] = sum over the
   kg groups of 4 k's of a[i][k] * b (packed panel), for rows i < m of A
   (rows lda bytes apart; rows m..MR-1 repeat row m-1 and are discarded).
   wide (AVX2 only): some activation of these rows is above 127. */

#if defined(GDL__QG_VNNI)

#define GDL__QG_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
static void gdl__qg_kernel(int kg, const uint8_t *a, ptrdiff_t lda, int m, const int8_t *GDL__RESTRICT b, int wide,
                           int32_t *GDL__RESTRICT tile) {
#define GDL__QG_DECL(r)                                                   \
    const uint8_t *a##r = a + (ptrdiff_t)((r) < m ? (r) : m - 1) * lda;  \
    __m512i c##r##_0 = _mm512_setzero_si512(), c##r##_1 = _mm512_setzero_si512();
    GDL__QG_ROWS(GDL__QG_DECL)
#undef GDL__QG_DECL
    int g;
    (void)wide;
    for (g = 0; g < kg; g++) {
        const __m512i b0 = _mm512_load_si512((const void *)b), b1 = _mm512_load_si512((const void *)(b + 64));
        int32_t v;
        __m512i av;
#define GDL__QG_DOT(r)                                   \
    memcpy(&v, a##r + 4 * g, 4);                         \
    av = _mm512_set1_epi32(v);                           \
    c##r##_0 = _mm512_dpbusd_epi32(c##r##_0, av, b0);    \
    c##r##_1 = _mm512_dpbusd_epi32(c##r##_1, av, b1);
        GDL__QG_ROWS(GDL__QG_DOT)
#undef GDL__QG_DOT
        b += 128;
    }
#define GDL__QG_STORE(r)                                                        \
    _mm512_storeu_si512((void *)(tile + (r) * 32), c##r##_0);                   \
    _mm512_storeu_si512((void *)(tile + (r) * 32 + 16), c##r##_1);
    GDL__QG_ROWS(GDL__QG_STORE)
#undef GDL__QG_STORE
}
#undef GDL__QG_ROWS

#elif defined(GDL__QG_AVX2)

#define GDL__QG_ROWS(X) X(0) X(1) X(2) X(3)
static void gdl__qg_kernel(int kg, const uint8_t *a, ptrdiff_t lda, int m, const int8_t *GDL__RESTRICT b, int wide,
                           int32_t *GDL__RESTRICT tile) {
#define GDL__QG_DECL(r)                                                   \
    const uint8_t *a##r = a + (ptrdiff_t)((r) < m ? (r) : m - 1) * lda;  \
    __m256i c##r##_0 = _mm256_setzero_si256(), c##r##_1 = _mm256_setzero_si256();
    GDL__QG_ROWS(GDL__QG_DECL)
#undef GDL__QG_DECL
    const __m256i ones = _mm256_set1_epi16(1), v128 = _mm256_set1_epi16(128);
    int g;
    if (!wide) { /* activations <= 127: a pair of products fits int16 */
        for (g = 0; g < kg; g++) {
            const __m256i b0 = _mm256_load_si256((const __m256i *)b), b1 = _mm256_load_si256((const __m256i *)(b + 32));
            int32_t v;
            __m256i av;
#define GDL__QG_DOT(r)                                                                          \
    memcpy(&v, a##r + 4 * g, 4);                                                                \
    av = _mm256_set1_epi32(v);                                                                  \
    c##r##_0 = _mm256_add_epi32(c##r##_0, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b0), ones)); \
    c##r##_1 = _mm256_add_epi32(c##r##_1, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b1), ones));
            GDL__QG_ROWS(GDL__QG_DOT)
#undef GDL__QG_DOT
            b += 64;
        }
    } else { /* a = l + 128 h: l*b and h*b never saturate */
        for (g = 0; g < kg; g++) {
            const __m256i b0 = _mm256_load_si256((const __m256i *)b), b1 = _mm256_load_si256((const __m256i *)(b + 32));
            uint32_t v;
            __m256i lo, hi;
#define GDL__QG_DOT(r)                                                                                       \
    memcpy(&v, a##r + 4 * g, 4);                                                                             \
    lo = _mm256_set1_epi32((int32_t)(v & 0x7F7F7F7Fu));                                                      \
    hi = _mm256_set1_epi32((int32_t)((v >> 7) & 0x01010101u));                                               \
    c##r##_0 = _mm256_add_epi32(c##r##_0, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, b0), ones));            \
    c##r##_0 = _mm256_add_epi32(c##r##_0, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, b0), v128));            \
    c##r##_1 = _mm256_add_epi32(c##r##_1, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, b1), ones));            \
    c##r##_1 = _mm256_add_epi32(c##r##_1, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, b1), v128));
            GDL__QG_ROWS(GDL__QG_DOT)
#undef GDL__QG_DOT
            b += 64;
        }
    }
#define GDL__QG_STORE(r)                                                        \
    _mm256_storeu_si256((__m256i *)(tile + (r) * 16), c##r##_0);                \
    _mm256_storeu_si256((__m256i *)(tile + (r) * 16 + 8), c##r##_1);
    GDL__QG_ROWS(GDL__QG_STORE)
#undef GDL__QG_STORE
}
#undef GDL__QG_ROWS

#elif defined(GDL__QG_SDOT)

#define GDL__QG_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
static void gdl__qg_kernel(int kg, const uint8_t *a, ptrdiff_t lda, int m, const int8_t *GDL__RESTRICT b, int wide,
                           int32_t *GDL__RESTRICT tile) {
#define GDL__QG_DECL(r)                                                   \
    const uint8_t *a##r = a + (ptrdiff_t)((r) < m ? (r) : m - 1) * lda;  \
    int32x4_t c##r##_0 = vdupq_n_s32(0), c##r##_1 = vdupq_n_s32(0);
    GDL__QG_ROWS(GDL__QG_DECL)
#undef GDL__QG_DECL
    const uint8x16_t flip = vdupq_n_u8(0x80);
    int g;
    (void)wide;
    for (g = 0; g < kg; g++) {
        const int8x16_t b0 = vld1q_s8(b), b1 = vld1q_s8(b + 16);
        int32_t v;
        int8x16_t av;
#define GDL__QG_DOT(r)                                                                         \
    memcpy(&v, a##r + 4 * g, 4);                                                               \
    av = vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_s32(vdupq_n_s32(v)), flip));            \
    c##r##_0 = vdotq_s32(c##r##_0, b0, av);                                                    \
    c##r##_1 = vdotq_s32(c##r##_1, b1, av);
        GDL__QG_ROWS(GDL__QG_DOT)
#undef GDL__QG_DOT
        b += 32;
    }
#define GDL__QG_STORE(r)                       \
    vst1q_s32(tile + (r) * 8, c##r##_0);       \
    vst1q_s32(tile + (r) * 8 + 4, c##r##_1);
    GDL__QG_ROWS(GDL__QG_STORE)
#undef GDL__QG_STORE
}
#undef GDL__QG_ROWS

#elif defined(GDL__QG_NEON)

/* per row 4 accumulators of 2 columns each: lanes (j, k0+k1), (j, k2+k3), (j+1, ...), folded at the end */
#define GDL__QG_ROWS(X) X(0) X(1) X(2) X(3)
static void gdl__qg_kernel(int kg, const uint8_t *a, ptrdiff_t lda, int m, const int8_t *GDL__RESTRICT b, int wide,
                           int32_t *GDL__RESTRICT tile) {
#define GDL__QG_DECL(r)                                                   \
    const uint8_t *a##r = a + (ptrdiff_t)((r) < m ? (r) : m - 1) * lda;  \
    int32x4_t c##r##_0 = vdupq_n_s32(0), c##r##_1 = c##r##_0, c##r##_2 = c##r##_0, c##r##_3 = c##r##_0;
    GDL__QG_ROWS(GDL__QG_DECL)
#undef GDL__QG_DECL
    const uint8x16_t flip = vdupq_n_u8(0x80);
    int g;
    (void)wide;
    for (g = 0; g < kg; g++) {
        const int8x16_t b0 = vld1q_s8(b), b1 = vld1q_s8(b + 16);
        int32_t v;
        int8x16_t av;
#define GDL__QG_DOT(r)                                                                         \
    memcpy(&v, a##r + 4 * g, 4);                                                               \
    av = vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_s32(vdupq_n_s32(v)), flip));            \
    c##r##_0 = vpadalq_s16(c##r##_0, vmull_s8(vget_low_s8(b0), vget_low_s8(av)));              \
    c##r##_1 = vpadalq_s16(c##r##_1, vmull_high_s8(b0, av));                                   \
    c##r##_2 = vpadalq_s16(c##r##_2, vmull_s8(vget_low_s8(b1), vget_low_s8(av)));              \
    c##r##_3 = vpadalq_s16(c##r##_3, vmull_high_s8(b1, av));
        GDL__QG_ROWS(GDL__QG_DOT)
#undef GDL__QG_DOT
        b += 32;
    }
#define GDL__QG_STORE(r)                                                \
    vst1q_s32(tile + (r) * 8, vpaddq_s32(c##r##_0, c##r##_1));          \
    vst1q_s32(tile + (r) * 8 + 4, vpaddq_s32(c##r##_2, c##r##_3));
    GDL__QG_ROWS(GDL__QG_STORE)
#undef GDL__QG_STORE
}
#undef GDL__QG_ROWS

#else /* portable */

static void gdl__qg_kernel(int kg, const uint8_t *a, ptrdiff_t lda, int m, const int8_t *GDL__RESTRICT b, int wide,
                           int32_t *GDL__RESTRICT tile) {
    int32_t acc[GDL__QG_MR][GDL__QG_NR];
    int i, j, g, r;
    (void)wide;
    memset(acc, 0, sizeof acc);
    for (g = 0; g < kg; g++, b += GDL__QG_NR * 4)
        for (i = 0; i < GDL__QG_MR; i++) {
            const uint8_t *ai = a + (ptrdiff_t)(i < m ? i : m - 1) * lda + 4 * g;
            for (j = 0; j < GDL__QG_NR; j++)
                for (r = 0; r < 4; r++) acc[i][j] += (int32_t)ai[r] * b[j * 4 + r];
        }
    memcpy(tile, acc, sizeof acc);
}

#endif

/* --- driver --------------------------------------------------------------- */

typedef struct gdl__qgemm_job {
    int M, mt;             /* rows, row tiles */
    const uint8_t *A;
    ptrdiff_t lda, ldc;
    const gdl__qpack *p;
    const unsigned char *wide; /* per row tile (AVX2), or NULL */
    int32_t *C;
} gdl__qgemm_job;

/* Tiles [lo, hi): tile u is row tile u % mt of panel u / mt (a panel stays in
   cache while the row tiles pass). */
static void gdl__qgemm_range(const void *ctx, int64_t lo, int64_t hi) {
    const gdl__qgemm_job *j = (const gdl__qgemm_job *)ctx;
    const gdl__qpack *p = j->p;
    int32_t tile[GDL__QG_MR * GDL__QG_NR];
    int64_t u;
    for (u = lo; u < hi; u++) {
        const int panel = (int)(u / j->mt), rt = (int)(u % j->mt);
        const int i0 = rt * GDL__QG_MR, j0 = panel * GDL__QG_NR;
        const int m = j->M - i0 < GDL__QG_MR ? j->M - i0 : GDL__QG_MR;
        const int n = p->N - j0 < GDL__QG_NR ? p->N - j0 : GDL__QG_NR;
        int i, c;
        gdl__qg_kernel(p->KP / 4, j->A + (ptrdiff_t)i0 * j->lda, j->lda, m, p->b + (size_t)panel * GDL__QG_NR * p->KP,
                       j->wide ? j->wide[rt] : 1, tile);
        for (i = 0; i < m; i++) {
            int32_t *ci = j->C + (ptrdiff_t)(i0 + i) * j->ldc + j0;
            const int32_t *ti = tile + i * GDL__QG_NR;
#ifdef GDL__QG_SIGNED_A
            for (c = 0; c < n; c++) ci[c] = ti[c] + 128 * p->colsum[j0 + c];
#else
            for (c = 0; c < n; c++) ci[c] = ti[c];
#endif
        }
    }
}

/* C [M, N] (rows ldc apart) = A [M, K] * B^T for a packed B; A's rows are
   lda >= KP bytes apart, readable up to KP. 0 / -1 (out of memory). */
static int gdl__qgemm(const char *op, int M, const uint8_t *A, ptrdiff_t lda, const gdl__qpack *p, int32_t *C,
                      ptrdiff_t ldc) {
    gdl__qgemm_job j;
    unsigned char *wide = NULL;
    int64_t ntiles;
    if (M <= 0 || p->N <= 0) return 0;
    j.M = M;
    j.mt = (M + GDL__QG_MR - 1) / GDL__QG_MR;
    j.A = A;
    j.lda = lda;
    j.ldc = ldc;
    j.p = p;
    j.C = C;
    j.wide = NULL;
    if (p->K == 0) {
        int i;
        for (i = 0; i < M; i++) memset(C + (ptrdiff_t)i * ldc, 0, sizeof(int32_t) * (size_t)p->N);
        return 0;
    }
#ifdef GDL__QG_AVX2
    { /* which row tiles hold an activation above 127 (the exact, slower form) */
        int t, i, k;
        if (!(wide = (unsigned char *)GPUDL_MALLOC((size_t)j.mt))) {
            gdl__set_error("%s: out of memory", op);
            return -1;
        }
        for (t = 0; t < j.mt; t++) {
            unsigned acc = 0;
            for (i = t * GDL__QG_MR; i < M && i < (t + 1) * GDL__QG_MR; i++)
                for (k = 0; k < p->KP; k++) acc |= A[(ptrdiff_t)i * lda + k];
            wide[t] = (acc & 0x80) != 0;
        }
        j.wide = wide;
    }
#endif
    (void)op;
    ntiles = (int64_t)j.mt * p->npanel;
    gdl__parallel_for(ntiles, (int64_t)M * p->N * (p->KP / 16), gdl__qgemm_range, &j);
    GPUDL_FREE(wide);
    return 0;
}

GPUDL_API int gdl_gemm_u8s8_cpu(int M, int N, int K, const uint8_t *A, int lda, const int8_t *B, int ldb, int32_t *C,
                                int ldc) {
    const char *op = "gdl_gemm_u8s8_cpu";
    gdl__qpack p;
    uint8_t *a = NULL;
    int KP, i, rc;
    if (gdl__qgemm_check(op, M, N, K) < 0) return -1;
    if (M == 0 || N == 0) return 0;
    if ((K > 0 && (!A || !B)) || !C || lda < K || ldb < K || ldc < N) {
        gdl__set_error("%s: bad arguments: A %s, B %s, C %s, lda %d, ldb %d (>= K = %d), ldc %d (>= N = %d)", op,
                       A ? "given" : "NULL", B ? "given" : "NULL", C ? "given" : "NULL", lda, ldb, K, ldc, N);
        return -1;
    }
    if (gdl__qpack_init(op, &p, N, K, B, ldb) < 0) return -1;
    KP = p.KP;
    /* A's rows with KP bytes each (the last group of a row read whole) */
    if (!(a = (uint8_t *)GPUDL_MALLOC((size_t)M * KP + 1))) {
        gdl__qpack_free(&p);
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    for (i = 0; i < M; i++) {
        if (K) memcpy(a + (size_t)i * KP, A + (ptrdiff_t)i * lda, (size_t)K);
        memset(a + (size_t)i * KP + K, 0, (size_t)(KP - K));
    }
    rc = gdl__qgemm(op, M, a, KP, &p, C, ldc);
    GPUDL_FREE(a);
    gdl__qpack_free(&p);
    return rc;
}

GPUDL_API const char *gdl_gemm_int8_kernel_name(void) {
#if defined(GDL__QG_VNNI)
    return "avx512vnni 8x32";
#elif defined(GDL__QG_AVX2)
    return "avx2 4x16";
#elif defined(GDL__QG_SDOT)
    return "neon-sdot 8x8";
#elif defined(GDL__QG_NEON)
    return "neon 4x8";
#else
    return "portable 4x8";
#endif
}
/* ---------------------------------------------------------------------------
   [impl-cpu]   The CPU backend: plain loops over contiguous memory. The
   reductions accumulate in double and run serially over the reduced
   dimension, so results do not depend on the thread count.
   ------------------------------------------------------------------------- */

/* The loops worth threads run through gdl__parallel_loop ([impl-pool]): the
   loop over a range [lo, hi) in a _part function, its arguments in the
   slots of a gdl__args. */

/* Each block starts with its size, so that a free knows what it gives back (gdl_memory_stats). 64 bytes
   keep the alignment malloc gave. The counters belong to the op layer's thread, as the allocations do. */
#define GDL__CPU_HDR 64
static gdl_memory_status gdl__cpu_mem;
static void *gdl__cpu_alloc(size_t bytes) {
    char *p = bytes <= SIZE_MAX - GDL__CPU_HDR ? (char *)GPUDL_MALLOC(GDL__CPU_HDR + (bytes ? bytes : 1)) : NULL;
    gdl__cpu_mem.requests++;
    if (!p) {
        gdl__set_error("gdl: out of memory allocating %.0f bytes on the host", (double)bytes);
        return NULL;
    }
    memcpy(p, &bytes, sizeof bytes);
    gdl__cpu_mem.device_mallocs++;
    gdl__cpu_mem.allocated += bytes;
    if (gdl__cpu_mem.allocated > gdl__cpu_mem.peak_allocated) gdl__cpu_mem.peak_allocated = gdl__cpu_mem.allocated;
    return p + GDL__CPU_HDR;
}
static void gdl__cpu_free(void *p) {
    size_t bytes;
    if (!p) return;
    memcpy(&bytes, (char *)p - GDL__CPU_HDR, sizeof bytes);
    gdl__cpu_mem.allocated -= bytes;
    gdl__cpu_mem.frees++;
    GPUDL_FREE((char *)p - GDL__CPU_HDR);
}
static int gdl__cpu_memory_stats(int device, gdl_memory_status *s) {
    (void)device;
    *s = gdl__cpu_mem;
    s->reserved = s->allocated; /* nothing is cached */
    s->peak_reserved = s->peak_allocated;
    return 0;
}
static int gdl__cpu_memory_reset_peak(int device) {
    (void)device;
    gdl__cpu_mem.peak_allocated = gdl__cpu_mem.allocated;
    return 0;
}
static int gdl__cpu_copy(void *dst, const void *src, size_t bytes, int kind) {
    (void)kind;
    if (bytes && dst != src) memmove(dst, src, bytes);
    return 0;
}
static int gdl__cpu_memset0(void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
    return 0;
}
static int gdl__cpu_synchronize(void) { return 0; }
static void *gdl__cpu_host_alloc(size_t bytes) { return gdl__cpu_alloc(bytes); }
static void gdl__cpu_host_free(void *p) { GPUDL_FREE(p); }
/* CPU work is finished when its call returns: streams and events are
   stand-ins that order nothing, distinct non-NULL handles so that callers
   can tell them from a failure */
static char gdl__cpu_stream_token, gdl__cpu_event_token;
static void *gdl__cpu_stream_create(void) { return &gdl__cpu_stream_token; }
static void gdl__cpu_stream_destroy(void *stream) { (void)stream; }
static int gdl__cpu_copy_async(void *dst, const void *src, size_t bytes, int kind, void *stream) {
    (void)stream;
    return gdl__cpu_copy(dst, src, bytes, kind);
}
static void *gdl__cpu_event_create(void) { return &gdl__cpu_event_token; }
static void gdl__cpu_event_destroy(void *event) { (void)event; }
static int gdl__cpu_event_record(void *event, void *stream) {
    (void)event;
    (void)stream;
    return 0;
}
static int gdl__cpu_stream_wait_event(void *stream, void *event) {
    (void)stream;
    (void)event;
    return 0;
}
static int gdl__cpu_event_synchronize(void *event) {
    (void)event;
    return 0;
}

static void gdl__fill_part(gdl__args a, int64_t lo, int64_t hi) {
    int64_t i;
    for (i = lo; i < hi; i++) a.out[i] = a.alpha;
}
static int gdl__cpu_fill(gdl_real *x, int64_t n, gdl_real v) {
    gdl__args a = gdl__args_none();
    a.out = x; a.alpha = v;
    gdl__parallel_loop(n, n, gdl__fill_part, &a);
    return 0;
}

static int gdl__cpu_cast(void *dst, gdl_dtype dt, const void *src, gdl_dtype st, int64_t n) {
    int64_t i;
    size_t ds = gdl_dtype_size(dt), ss = gdl_dtype_size(st);
    if (dt == st) {
        memmove(dst, src, (size_t)n * ds);
        return 0;
    }
    if (dt == GDL_F32 && (st == GDL_F16 || st == GDL_BF16)) { /* the low-precision ops' inputs: a tight loop */
        const uint16_t *h = (const uint16_t *)src;
        gdl_real *f = (gdl_real *)dst;
        if (st == GDL_F16)
            for (i = 0; i < n; i++) f[i] = (gdl_real)gdl_f16_to_f32(h[i]);
        else
            for (i = 0; i < n; i++) f[i] = (gdl_real)gdl_bf16_to_f32(h[i]);
        return 0;
    }
    for (i = 0; i < n; i++) {
        const void *s = (const char *)src + (size_t)i * ss;
        void *d = (char *)dst + (size_t)i * ds;
        if (st == GDL_F32 && (dt == GDL_F16 || dt == GDL_BF16)) {
            /* direct, so the float rounds once */
            float v = (float)*(const gdl_real *)s;
            *(uint16_t *)d = dt == GDL_F16 ? gdl_f32_to_f16(v) : gdl_f32_to_bf16(v);
        } else {
            gdl__store(d, dt, gdl__load(s, st));
        }
    }
    return 0;
}

/* elements a row-major operand spans: rows of cols, ld apart, batch copies s apart */
static int64_t gdl__gemm_span(int rows, int cols, int ld, int64_t s, int batch) {
    if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
    return (int64_t)(rows - 1) * ld + cols + (int64_t)(batch - 1) * (s > 0 ? s : 0);
}
static int gdl__cpu_gemm(int ta, int tb, int M, int N, int K, gdl_real alpha, const gdl_real *A, int lda,
                         int64_t sA, const gdl_real *B, int ldb, int64_t sB, gdl_real beta, gdl_real *C,
                         int ldc, int64_t sC, int batch);
/* f32 copies of the spans (C's gaps between rows too, so they go back as
   they were), the f32 kernel, C rounded once */
static int gdl__cpu_gemm_lp(gdl_dtype dt, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                            int64_t sA, const void *B, int ldb, int64_t sB, float beta, void *C, int ldc, int64_t sC,
                            int batch) {
    int64_t na, nb, nc;
    gdl_real *f;
    int rc;
    if (M <= 0 || N <= 0 || batch <= 0) return 0;
    na = K > 0 ? gdl__gemm_span(ta ? K : M, ta ? M : K, lda, sA, batch) : 0;
    nb = K > 0 ? gdl__gemm_span(tb ? N : K, tb ? K : N, ldb, sB, batch) : 0;
    nc = gdl__gemm_span(M, N, ldc, sC, batch);
    if (!(f = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)(na + nb + nc + 1)))) {
        gdl__set_error("%s: out of host memory for a %s GEMM's f32 copies", gdl__be_op, gdl_dtype_name(dt));
        return -1;
    }
    gdl__cpu_cast(f, GDL_F32, A, dt, na);
    gdl__cpu_cast(f + na, GDL_F32, B, dt, nb);
    gdl__cpu_cast(f + na + nb, GDL_F32, C, dt, nc);
    rc = gdl__cpu_gemm(ta, tb, M, N, K, alpha, f, lda, sA, f + na, ldb, sB, beta, f + na + nb, ldc, sC, batch);
    if (rc == 0) gdl__cpu_cast(C, dt, f + na + nb, GDL_F32, nc);
    GPUDL_FREE(f);
    return rc;
}

static int gdl__cpu_gemm(int ta, int tb, int M, int N, int K, gdl_real alpha, const gdl_real *A, int lda,
                         int64_t sA, const gdl_real *B, int ldb, int64_t sB, gdl_real beta, gdl_real *C,
                         int ldc, int64_t sC, int batch) {
    int b;
#ifndef GDL__GEMM_CBLAS
    if (sC == 0 && batch > 1 && beta == 1 && K > 0 && alpha != 0 && M > 0 && N > 0) {
        /* every batch accumulates into one C: one call over K segments, so
           the threads share the whole sum (same bits as the loop below) */
        gdl__gemm_args g;
        GPUDL_ASSERT(A && B && C && ldc >= N && lda >= (ta ? M : K) && ldb >= (tb ? K : N));
        g.transA = ta; g.transB = tb;
        g.M = M; g.N = N; g.K = K;
        g.alpha = alpha; g.beta = beta;
        g.A = A; g.B = B; g.C = C;
        g.lda = lda; g.ldb = ldb; g.ldc = ldc;
        g.nseg = batch; g.sA = (ptrdiff_t)sA; g.sB = (ptrdiff_t)sB;
        gdl__gemm_run(&g);
        return 0;
    }
#ifdef GDL__GEMM_BATCH
    if (sC != 0 && batch > 1 && K > 0 && alpha != 0 && M > 0 && N > 0 && batch >= gdl_get_num_threads() &&
        gdl_get_num_threads() > 1 && (double)M * N * K * batch >= GDL__GEMM_MT_MIN) {
        gdl__gemm_args g;
        GPUDL_ASSERT(A && B && C && ldc >= N && lda >= (ta ? M : K) && ldb >= (tb ? K : N));
        g.transA = ta; g.transB = tb;
        g.M = M; g.N = N; g.K = K;
        g.alpha = alpha; g.beta = beta;
        g.A = A; g.B = B; g.C = C;
        g.lda = lda; g.ldb = ldb; g.ldc = ldc;
        g.nseg = 1; g.sA = g.sB = 0;
        if (gdl__gemm_batch(&g, (ptrdiff_t)sA, (ptrdiff_t)sB, (ptrdiff_t)sC, batch, gdl_get_num_threads())) return 0;
    }
#endif
#endif
    for (b = 0; b < batch; b++)
        gdl_gemm_cpu(ta, tb, M, N, K, alpha, A + b * sA, lda, B + b * sB, ldb, beta, C + b * sC, ldc);
    return 0;
}

/* Walks `shape` in row-major order, advancing two strided offsets. */
typedef struct gdl__iter {
    int ndim;
    int64_t idx[GDL_MAX_DIMS];
} gdl__iter;

/* one element of a binary op (enum gdl_binary_op); the CUDA backend's gdl__bin1 is the same in f32 */
static gdl_real gdl__bin1(int op, gdl_real a, gdl_real b) {
    switch (op) {
    case GDL_BIN_ADD: return a + b;
    case GDL_BIN_SUB: return a - b;
    case GDL_BIN_MUL: return a * b;
    case GDL_BIN_DIV: return a / b;
    case GDL_BIN_MIN: return a != a ? a : b != b ? b : a < b ? a : b;
    case GDL_BIN_MAX: return a != a ? a : b != b ? b : a > b ? a : b;
    case GDL_BIN_POW: return (gdl_real)pow((double)a, (double)b);
    case GDL_BIN_MAX_DA: return a > b ? 1 : a == b ? (gdl_real)0.5 : a < b ? 0 : 1;
    case GDL_BIN_MIN_DA: return a < b ? 1 : a == b ? (gdl_real)0.5 : a > b ? 0 : 1;
    case GDL_BIN_POW_DA: return b == 0 ? 0 : (gdl_real)((double)b * pow((double)a, (double)b - 1));
    case GDL_BIN_POW_DB: return a == 0 && b >= 0 ? 0 : (gdl_real)(pow((double)a, (double)b) * log((double)a));
    default: return b == 0 ? 0 : a * b; /* GDL_BIN_GRAD_SCALE */
    }
}

/* one row of a binary op: o[i] = a[i*sa] op b[i*sb]; the contiguous and
   broadcast-scalar cases of the four arithmetic ops get their own loops so
   they vectorise */
static void gdl__bin_row(int op, int64_t n, const gdl_real *a, int64_t sa, const gdl_real *b, int64_t sb, gdl_real *o) {
    int64_t i;
    if (op > GDL_BIN_DIV) {
        for (i = 0; i < n; i++) o[i] = gdl__bin1(op, a[i * sa], b[i * sb]);
    } else if (sa == 1 && sb == 1) {
        switch (op) {
        case GDL_BIN_ADD: for (i = 0; i < n; i++) o[i] = a[i] + b[i]; break;
        case GDL_BIN_SUB: for (i = 0; i < n; i++) o[i] = a[i] - b[i]; break;
        case GDL_BIN_MUL: for (i = 0; i < n; i++) o[i] = a[i] * b[i]; break;
        default: for (i = 0; i < n; i++) o[i] = a[i] / b[i]; break;
        }
    } else if (sa == 1 && sb == 0) {
        const gdl_real v = b[0];
        switch (op) {
        case GDL_BIN_ADD: for (i = 0; i < n; i++) o[i] = a[i] + v; break;
        case GDL_BIN_SUB: for (i = 0; i < n; i++) o[i] = a[i] - v; break;
        case GDL_BIN_MUL: for (i = 0; i < n; i++) o[i] = a[i] * v; break;
        default: for (i = 0; i < n; i++) o[i] = a[i] / v; break;
        }
    } else {
        switch (op) {
        case GDL_BIN_ADD: for (i = 0; i < n; i++) o[i] = a[i * sa] + b[i * sb]; break;
        case GDL_BIN_SUB: for (i = 0; i < n; i++) o[i] = a[i * sa] - b[i * sb]; break;
        case GDL_BIN_MUL: for (i = 0; i < n; i++) o[i] = a[i * sa] * b[i * sb]; break;
        default: for (i = 0; i < n; i++) o[i] = a[i * sa] / b[i * sb]; break;
        }
    }
}

/* Walks the outer dims (all but the last) in row-major order, advancing
   two strided offsets: the odometer shared by binary and sum_to. */
static void gdl__odometer_step(int ndim, const int64_t *shape, int64_t *idx, int64_t *oa, const int64_t *astr,
                               int64_t *ob, const int64_t *bstr) {
    int d;
    for (d = ndim - 2; d >= 0; d--) {
        *oa += astr[d];
        *ob += bstr[d];
        if (++idx[d] < shape[d]) return;
        *oa -= astr[d] * shape[d];
        *ob -= bstr[d] * shape[d];
        idx[d] = 0;
    }
}

static int gdl__cpu_binary(int op, int ndim, const int64_t *shape, const gdl_real *a, const int64_t *astr,
                           const gdl_real *b, const int64_t *bstr, gdl_real *out) {
    int64_t rows = 1, inner = ndim ? shape[ndim - 1] : 1, r, oa = 0, ob = 0, idx[GDL_MAX_DIMS] = {0};
    int d;
    for (d = 0; d + 1 < ndim; d++) rows *= shape[d];
    if (inner == 0) return 0;
    for (r = 0; r < rows; r++) {
        gdl__bin_row(op, inner, a + oa, ndim ? astr[ndim - 1] : 0, b + ob, ndim ? bstr[ndim - 1] : 0, out + r * inner);
        gdl__odometer_step(ndim, shape, idx, &oa, astr, &ob, bstr);
    }
    return 0;
}

static int gdl__cpu_sum_to(int ndim, const int64_t *shape, const gdl_real *src, gdl_real *dst,
                           const int64_t *dstr, gdl_real alpha) {
    int64_t rows = 1, inner = ndim ? shape[ndim - 1] : 1, r, i, o = 0, unused = 0, idx[GDL_MAX_DIMS] = {0};
    int64_t ds = ndim ? dstr[ndim - 1] : 0, zero[GDL_MAX_DIMS] = {0};
    int d;
    for (d = 0; d + 1 < ndim; d++) rows *= shape[d];
    if (inner == 0) return 0;
    for (r = 0; r < rows; r++) {
        const gdl_real *p = src + r * inner;
        gdl_real *q = dst + o;
        if (ds == 0) { /* the row sums into one element */
            gdl_real acc = 0;
            for (i = 0; i < inner; i++) acc += p[i];
            q[0] += alpha * acc;
        } else if (ds == 1) {
            for (i = 0; i < inner; i++) q[i] += alpha * p[i];
        } else {
            for (i = 0; i < inner; i++) q[i * ds] += alpha * p[i];
        }
        gdl__odometer_step(ndim, shape, idx, &o, dstr, &unused, zero);
    }
    return 0;
}

#define GDL__SQRT_2_OVER_PI 0.7978845608028654
#define GDL__INV_SQRT_2 0.7071067811865476

static gdl_real gdl__unary1(int op, gdl_real x, gdl_real alpha) {
    switch (op) {
    case GDL_UN_RELU: return x > 0 ? x : 0;
    case GDL_UN_LEAKY_RELU: return x > 0 ? x : alpha * x;
    case GDL_UN_SIGMOID: return (gdl_real)(1.0 / (1.0 + exp(-(double)x)));
    case GDL_UN_TANH: return (gdl_real)tanh((double)x);
    case GDL_UN_GELU_ERF: return (gdl_real)(0.5 * x * (1.0 + erf(x * GDL__INV_SQRT_2)));
    case GDL_UN_GELU_TANH:
        return (gdl_real)(0.5 * x * (1.0 + tanh(GDL__SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))));
    case GDL_UN_EXP: return (gdl_real)exp((double)x);
    case GDL_UN_LOG: return (gdl_real)log((double)x);
    case GDL_UN_SQRT: return (gdl_real)sqrt((double)x);
    case GDL_UN_RSQRT: return (gdl_real)(1.0 / sqrt((double)x));
    case GDL_UN_ABS: return (gdl_real)fabs((double)x);
    case GDL_UN_CLAMP_MIN: return x < alpha ? alpha : x;
    case GDL_UN_CLAMP_MAX: return x > alpha ? alpha : x;
    case GDL_UN_SCALE: return alpha * x;
    case GDL_UN_ADD_SCALAR: return x + alpha;
    default: return (gdl_real)pow((double)x, (double)alpha); /* GDL_UN_POW */
    }
}

/* d y / d x at x (y = f(x) given) */
static double gdl__unary_grad1(int op, double x, double y, double alpha) {
    switch (op) {
    case GDL_UN_RELU: return x > 0 ? 1 : 0;
    case GDL_UN_LEAKY_RELU: return x > 0 ? 1 : alpha;
    case GDL_UN_SIGMOID: return y * (1 - y);
    case GDL_UN_TANH: return 1 - y * y;
    case GDL_UN_GELU_ERF: return 0.5 * (1 + erf(x * GDL__INV_SQRT_2)) + x * exp(-0.5 * x * x) * 0.3989422804014327;
    case GDL_UN_GELU_TANH: {
        double u = GDL__SQRT_2_OVER_PI * (x + 0.044715 * x * x * x), th = tanh(u);
        return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * GDL__SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x);
    }
    case GDL_UN_EXP: return y;
    case GDL_UN_LOG: return 1 / x;
    case GDL_UN_SQRT: return 0.5 / y;      /* PyTorch: grad / (2 * result) */
    case GDL_UN_RSQRT: return -0.5 * y * y * y; /* -0.5 * grad * result^3 */
    case GDL_UN_ABS: return x > 0 ? 1 : x < 0 ? -1 : 0; /* sgn: 0 at 0 and NaN */
    case GDL_UN_CLAMP_MIN: return x >= alpha ? 1 : 0;
    case GDL_UN_CLAMP_MAX: return x <= alpha ? 1 : 0;
    case GDL_UN_SCALE: return alpha;
    case GDL_UN_ADD_SCALAR: return 1;
    default: return alpha * pow(x, alpha - 1); /* GDL_UN_POW */
    }
}

/* the cheap ops get their own loops (they vectorise); the rest go through
   gdl__unary1 */
/* The unary ops that cost more than a memory pass, in parallel. */
static void gdl__unary_part(gdl__args a, int64_t lo, int64_t hi) {
    int64_t i;
    for (i = lo; i < hi; i++) a.out[i] = gdl__unary1(a.op, a.x[i], a.alpha);
}
static void gdl__unary_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    int64_t i;
    for (i = lo; i < hi; i++) a.out[i] += (gdl_real)(a.gy[i] * gdl__unary_grad1(a.op, a.x[i], a.y[i], a.alpha));
}
static int gdl__cpu_unary(int op, int64_t n, const gdl_real *x, gdl_real *y, gdl_real alpha) {
    int64_t i;
    switch (op) {
    case GDL_UN_RELU:
        for (i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
        break;
    case GDL_UN_SCALE:
        for (i = 0; i < n; i++) y[i] = alpha * x[i];
        break;
    case GDL_UN_ADD_SCALAR:
        for (i = 0; i < n; i++) y[i] = x[i] + alpha;
        break;
    default: {
        gdl__args a = gdl__args_none();
        a.op = op; a.x = x; a.out = y; a.alpha = alpha;
        gdl__parallel_loop(n, n, gdl__unary_part, &a);
        break;
    }
    }
    return 0;
}
static int gdl__cpu_unary_backward(int op, int64_t n, const gdl_real *x, const gdl_real *y, const gdl_real *gy,
                                   gdl_real *gx, gdl_real alpha) {
    int64_t i;
    switch (op) {
    case GDL_UN_RELU:
        for (i = 0; i < n; i++) gx[i] += x[i] > 0 ? gy[i] : 0;
        break;
    case GDL_UN_LEAKY_RELU:
        for (i = 0; i < n; i++) gx[i] += x[i] > 0 ? gy[i] : alpha * gy[i];
        break;
    case GDL_UN_CLAMP_MIN: /* a selection, as PyTorch's where: an infinite gradient outside stays out */
        for (i = 0; i < n; i++) gx[i] += x[i] >= alpha ? gy[i] : 0;
        break;
    case GDL_UN_CLAMP_MAX:
        for (i = 0; i < n; i++) gx[i] += x[i] <= alpha ? gy[i] : 0;
        break;
    case GDL_UN_SCALE:
        for (i = 0; i < n; i++) gx[i] += alpha * gy[i];
        break;
    case GDL_UN_ADD_SCALAR:
        for (i = 0; i < n; i++) gx[i] += gy[i];
        break;
    case GDL_UN_SIGMOID:
        for (i = 0; i < n; i++) gx[i] += gy[i] * y[i] * (1 - y[i]);
        break;
    case GDL_UN_TANH:
        for (i = 0; i < n; i++) gx[i] += gy[i] * (1 - y[i] * y[i]);
        break;
    default: {
        gdl__args a = gdl__args_none();
        a.op = op; a.x = x; a.y = y; a.gy = gy; a.out = gx; a.alpha = alpha;
        gdl__parallel_loop(n, n, gdl__unary_backward_part, &a);
        break;
    }
    }
    return 0;
}

/* [outer][n][inner] layouts: one part does the outer indices [lo, hi) */
static void gdl__reduce_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t n = a.n, inner = a.inner;
    int64_t o, i, k;
    for (o = lo; o < hi; o++)
        for (i = 0; i < inner; i++) {
            const gdl_real *p = a.x + o * n * inner + i;
            gdl_real r;
            if (a.op == GDL_RED_MAX) {
                int64_t best = 0;
                for (k = 1; k < n; k++)
                    if (p[k * inner] > p[best * inner] || (p[k * inner] != p[k * inner] && p[best * inner] == p[best * inner]))
                        best = k; /* first max; NaN wins as in PyTorch */
                r = n ? p[best * inner] : (gdl_real)-INFINITY;
                if (a.idx) a.idx[o * inner + i] = (int32_t)best;
            } else {
                double s = 0;
                for (k = 0; k < n; k++) s += p[k * inner];
                r = (gdl_real)(a.op == GDL_RED_MEAN ? s / (double)n : s);
            }
            if (a.accumulate) a.out[o * inner + i] += r;
            else a.out[o * inner + i] = r;
        }
}
static int gdl__cpu_reduce(int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y,
                           int32_t *idx, int accumulate) {
    gdl__args a = gdl__args_none();
    a.op = op; a.n = n; a.inner = inner; a.x = x; a.out = y; a.idx = idx; a.accumulate = accumulate;
    gdl__parallel_loop(outer, outer * n * inner, gdl__reduce_part, &a);
    return 0;
}

/* Fused bias + activation (gdl_linear_act, gdl_conv2d_act). The arithmetic is
   the unfused ops' own (binary add in f32, then gdl__unary1; the backward's
   gdl__unary_grad1 product rounded and added to zero), so the fused path is
   bitwise the unfused one. */
/* y = out in place: y + bias, its copy in pre (when asked), then the activation act (< 0: none). The
   slots in locals: read from a, gcc does not unswitch the loop on them and leaves it scalar. */
static void gdl__bias_act_part(gdl__args a, int64_t lo, int64_t hi) {
    const int act = a.op;
    const int64_t C = a.C, inner = a.inner;
    const gdl_real *bias = a.bias;
    gdl_real *y = a.out, *pre = a.pre;
    int64_t i;
    for (i = lo; i < hi; i++) {
        gdl_real v = y[i];
        if (bias) v = v + bias[(i / inner) % C];
        if (pre) pre[i] = v;
        y[i] = act < 0 ? v : act == GDL_UN_RELU ? (v > 0 ? v : 0) : gdl__unary1(act, v, 0);
    }
}
static int gdl__cpu_bias_act(int act, int64_t outer, int64_t C, int64_t inner, const gdl_real *bias, gdl_real *y,
                             gdl_real *pre) {
    gdl__args a = gdl__args_none();
    int64_t n = outer * C * inner;
    a.op = act; a.C = C; a.inner = inner ? inner : 1; a.bias = bias; a.out = y; a.pre = pre;
    gdl__parallel_loop(n, act == GDL_UN_GELU_TANH || act == GDL_UN_GELU_ERF ? 8 * n : n, gdl__bias_act_part, &a);
    return 0;
}
static int gdl__cpu_linear_act(int act, int M, int N, int K, const gdl_real *x, const gdl_real *w, const gdl_real *bias,
                               gdl_real *y, gdl_real *pre) {
    if (gdl__cpu_gemm(0, 1, M, N, K, 1, x, K, 0, w, K, 0, 0, y, N, 0, 1) < 0) return -1;
    return gdl__cpu_bias_act(act, M, N, 1, bias, y, pre);
}
/* x: the pre-activation */
static void gdl__act_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    int64_t i;
    if (a.op < 0)
        for (i = lo; i < hi; i++) a.out[i] = (gdl_real)0 + a.gy[i];
    else if (a.op == GDL_UN_RELU)
        for (i = lo; i < hi; i++) a.out[i] = (gdl_real)0 + (a.x[i] > 0 ? a.gy[i] : 0);
    else
        for (i = lo; i < hi; i++)
            a.out[i] = (gdl_real)0 + (gdl_real)(a.gy[i] * gdl__unary_grad1(a.op, a.x[i], 0, 0));
}
static int gdl__cpu_act_backward_reduce(int act, int64_t outer, int64_t n, int64_t inner, const gdl_real *pre,
                                        const gdl_real *gy, gdl_real *gpre, gdl_real *sum, int accumulate) {
    gdl__args a = gdl__args_none();
    int64_t total = outer * n * inner;
    a.op = act; a.x = pre; a.gy = gy; a.out = gpre;
    gdl__parallel_loop(total, act == GDL_UN_GELU_TANH || act == GDL_UN_GELU_ERF ? 8 * total : total,
                       gdl__act_backward_part, &a);
    return sum ? gdl__cpu_reduce(GDL_RED_SUM, outer, n, inner, gpre, sum, NULL, accumulate) : 0;
}

static void gdl__reduce_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t n = a.n, inner = a.inner;
    int64_t o, i, k;
    for (o = lo; o < hi; o++)
        for (i = 0; i < inner; i++) {
            gdl_real g = a.gy[o * inner + i];
            if (a.op == GDL_RED_MAX) {
                a.out[(o * n + a.argmax[o * inner + i]) * inner + i] += g;
            } else {
                if (a.op == GDL_RED_MEAN) g = (gdl_real)(g / (double)n);
                for (k = 0; k < n; k++) a.out[(o * n + k) * inner + i] += g;
            }
        }
}
static int gdl__cpu_reduce_backward(int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *gy,
                                    const int32_t *idx, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.op = op; a.n = n; a.inner = inner; a.gy = gy; a.argmax = idx; a.out = gx;
    gdl__parallel_loop(outer, outer * n * inner, gdl__reduce_backward_part, &a);
    return 0;
}

static int gdl__cpu_argmax(int64_t outer, int64_t n, int64_t inner, const gdl_real *x, int32_t *out) {
    int64_t o, i, k;
    for (o = 0; o < outer; o++)
        for (i = 0; i < inner; i++) {
            const gdl_real *p = x + o * n * inner + i;
            int64_t best = 0;
            for (k = 1; k < n; k++)
                if (p[k * inner] > p[best * inner] || (p[k * inner] != p[k * inner] && p[best * inner] == p[best * inner]))
                    best = k; /* first max; NaN wins, as in max_dim and PyTorch */
            out[o * inner + i] = (int32_t)best;
        }
    return 0;
}

/* op: log_softmax */
static void gdl__softmax_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t n = a.n, inner = a.inner;
    int64_t o, i, k;
    for (o = lo; o < hi; o++)
        for (i = 0; i < inner; i++) {
            const gdl_real *p = a.x + o * n * inner + i;
            gdl_real *q = a.out + o * n * inner + i;
            double mx = -INFINITY, s = 0, lse;
            for (k = 0; k < n; k++)
                if (p[k * inner] > mx) mx = p[k * inner];
            for (k = 0; k < n; k++) s += exp(p[k * inner] - mx);
            lse = mx + log(s);
            for (k = 0; k < n; k++)
                q[k * inner] = (gdl_real)(a.op ? p[k * inner] - lse : exp(p[k * inner] - lse));
        }
}
static int gdl__cpu_softmax(int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y) {
    gdl__args a = gdl__args_none();
    a.op = log_; a.n = n; a.inner = inner; a.x = x; a.out = y;
    gdl__parallel_loop(outer, outer * n * inner, gdl__softmax_part, &a);
    return 0;
}

static void gdl__softmax_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t n = a.n, inner = a.inner;
    const gdl_real *y = a.y, *gy = a.gy;
    int64_t o, i, k;
    for (o = lo; o < hi; o++)
        for (i = 0; i < inner; i++) {
            int64_t base = o * n * inner + i;
            double s = 0;
            for (k = 0; k < n; k++)
                s += a.op ? gy[base + k * inner] : gy[base + k * inner] * y[base + k * inner];
            for (k = 0; k < n; k++) {
                int64_t j = base + k * inner;
                a.out[j] += (gdl_real)(a.op ? gy[j] - exp(y[j]) * s : y[j] * (gy[j] - s));
            }
        }
}
static int gdl__cpu_softmax_backward(int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *y,
                                     const gdl_real *gy, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.op = log_; a.n = n; a.inner = inner; a.y = y; a.gy = gy; a.out = gx;
    gdl__parallel_loop(outer, outer * n * inner, gdl__softmax_backward_part, &a);
    return 0;
}


/* ---- indexing and copies: strided copies, gather / scatter-add, comparisons, where, tril/triu, cumsum ----
   Elements of any dtype move as bytes (a copy or a selection is exact in every dtype); what adds, adds in
   f32 (the f32 kernels' type) and rounds once. */

/* the offsets of element i (row-major over shape) in k strided operands */
static void gdl__elem_offsets(int ndim, const int64_t *shape, int64_t i, int k, const int64_t *const *str, int64_t *off) {
    int d, j;
    for (j = 0; j < k; j++) off[j] = 0;
    for (d = ndim - 1; d >= 0; d--) {
        int64_t id = i % shape[d];
        i /= shape[d];
        for (j = 0; j < k; j++) off[j] += id * str[j][d];
    }
}
static int64_t gdl__numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    int d;
    for (d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* the arguments of the strided loops below, through a.ctx */
typedef struct {
    int ndim, dim, op;
    const int64_t *shape, *s0, *s1, *s2;
    gdl_dtype t0, t1, dt;
    const void *p0, *p1, *p2;
    void *out;
    int64_t xn;
} gdl__strided_job;

static void gdl__strided_copy_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    const int64_t *str[2];
    size_t es = gdl_dtype_size(j->dt);
    int64_t i, off[2];
    str[0] = j->s0;
    str[1] = j->s1;
    for (i = lo; i < hi; i++) {
        const char *src;
        char *dst;
        gdl__elem_offsets(j->ndim, j->shape, i, 2, str, off);
        src = (const char *)j->p0 + (size_t)off[0] * es;
        dst = (char *)j->out + (size_t)off[1] * es;
        if (!a.accumulate) memcpy(dst, src, es);
        else if (j->dt == GDL_F32) *(gdl_real *)dst += *(const gdl_real *)src;
        else gdl__store(dst, j->dt, (double)(float)(gdl__load(dst, j->dt) + gdl__load(src, j->dt)));
    }
}
static int gdl__cpu_strided_copy(gdl_dtype dt, int ndim, const int64_t *shape, const void *src, const int64_t *sstr,
                                 void *dst, const int64_t *dstr, int accumulate) {
    gdl__strided_job j;
    gdl__args a = gdl__args_none();
    int64_t n = gdl__numel_of(ndim, shape);
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.shape = shape; j.s0 = sstr; j.s1 = dstr; j.dt = dt; j.p0 = src; j.out = dst;
    a.ctx = &j;
    a.accumulate = accumulate;
    gdl__parallel_loop(n, n, gdl__strided_copy_part, &a);
    return 0;
}

/* gather's and scatter_add's element i: the offset in x (dim's coordinate from the index) and the index;
   -1 for an index outside [0, xn) */
static int64_t gdl__gather_offset(const gdl__strided_job *j, int64_t i) {
    int64_t rem = i, xo = 0, io = 0, c;
    int d;
    for (d = j->ndim - 1; d >= 0; d--) {
        int64_t id = rem % j->shape[d];
        rem /= j->shape[d];
        if (d != j->dim) xo += id * j->s0[d];
        io += id * j->s1[d];
    }
    c = ((const int32_t *)j->p1)[io];
    return c < 0 || c >= j->xn ? -1 : xo + c * j->s0[j->dim];
}
static void gdl__gather_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    size_t es = gdl_dtype_size(j->dt);
    int64_t i;
    for (i = lo; i < hi; i++) {
        int64_t o = gdl__gather_offset(j, i);
        if (o < 0) memset((char *)j->out + (size_t)i * es, 0, es);
        else memcpy((char *)j->out + (size_t)i * es, (const char *)j->p0 + (size_t)o * es, es);
    }
}
static int gdl__cpu_gather(gdl_dtype dt, int ndim, const int64_t *shape, int dim, const void *x, const int64_t *xstr,
                           int64_t xn, const int32_t *idx, const int64_t *istr, void *out) {
    gdl__strided_job j;
    gdl__args a = gdl__args_none();
    int64_t n = gdl__numel_of(ndim, shape);
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.dim = dim; j.shape = shape; j.s0 = xstr; j.s1 = istr; j.dt = dt; j.p0 = x; j.p1 = idx;
    j.out = out; j.xn = xn;
    a.ctx = &j;
    gdl__parallel_loop(n, n, gdl__gather_part, &a);
    return 0;
}
/* serial: destinations repeat, and the sums keep one order (the same bits for any thread count) */
static int gdl__cpu_scatter_add(gdl_dtype st, int ndim, const int64_t *shape, int dim, const void *src,
                                const int32_t *idx, const int64_t *istr, gdl_real *dst, const int64_t *dstr, int64_t dn) {
    gdl__strided_job j;
    int64_t i, n = gdl__numel_of(ndim, shape);
    size_t es = gdl_dtype_size(st);
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.dim = dim; j.shape = shape; j.s0 = dstr; j.s1 = istr; j.p1 = idx; j.xn = dn;
    for (i = 0; i < n; i++) {
        int64_t o = gdl__gather_offset(&j, i);
        if (o >= 0)
            dst[o] += st == GDL_F32 ? ((const gdl_real *)src)[i] : (gdl_real)gdl__load((const char *)src + (size_t)i * es, st);
    }
    return 0;
}

/* a compare operand: integers exactly; an integer facing a float is rounded to f32 (PyTorch's promotion) */
static double gdl__cmp_load(const void *p, gdl_dtype dt, int64_t i, int as_float) {
    double v = gdl__load((const char *)p + (size_t)i * gdl_dtype_size(dt), dt);
    return as_float && dt == GDL_I32 ? (double)(float)v : v;
}
static int gdl__cmp1(int op, double a, double b) {
    switch (op) {
    case GDL_CMP_EQ: return a == b;
    case GDL_CMP_NE: return a != b;
    case GDL_CMP_LT: return a < b;
    case GDL_CMP_LE: return a <= b;
    case GDL_CMP_GT: return a > b;
    default: return a >= b; /* GDL_CMP_GE */
    }
}
static void gdl__compare_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    const int64_t *str[2];
    int64_t i, off[2];
    int as_float = !((j->t0 == GDL_I32 || j->t0 == GDL_U8) && (j->t1 == GDL_I32 || j->t1 == GDL_U8));
    str[0] = j->s0;
    str[1] = j->s1;
    for (i = lo; i < hi; i++) {
        gdl__elem_offsets(j->ndim, j->shape, i, 2, str, off);
        ((uint8_t *)j->out)[i] = (uint8_t)gdl__cmp1(j->op, gdl__cmp_load(j->p0, j->t0, off[0], as_float),
                                                    gdl__cmp_load(j->p1, j->t1, off[1], as_float));
    }
}
static int gdl__cpu_compare(int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr,
                            gdl_dtype bt, const void *b, const int64_t *bstr, uint8_t *out) {
    gdl__strided_job j;
    gdl__args args = gdl__args_none();
    int64_t n = gdl__numel_of(ndim, shape);
    memset(&j, 0, sizeof j);
    j.op = op; j.ndim = ndim; j.shape = shape; j.s0 = astr; j.s1 = bstr; j.t0 = at; j.t1 = bt; j.p0 = a; j.p1 = b;
    j.out = out;
    args.ctx = &j;
    gdl__parallel_loop(n, n, gdl__compare_part, &args);
    return 0;
}

static void gdl__where_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    const int64_t *str[3];
    size_t es = gdl_dtype_size(j->dt);
    int64_t i, off[3];
    str[0] = j->s0;
    str[1] = j->s1;
    str[2] = j->s2;
    for (i = lo; i < hi; i++) {
        gdl__elem_offsets(j->ndim, j->shape, i, 3, str, off);
        memcpy((char *)j->out + (size_t)i * es,
               ((const uint8_t *)j->p0)[off[0]] ? (const char *)j->p1 + (size_t)off[1] * es
                                                : (const char *)j->p2 + (size_t)off[2] * es,
               es);
    }
}
static int gdl__cpu_where(gdl_dtype dt, int ndim, const int64_t *shape, const uint8_t *cond, const int64_t *cstr,
                          const void *a, const int64_t *astr, const void *b, const int64_t *bstr, void *out) {
    gdl__strided_job j;
    gdl__args args = gdl__args_none();
    int64_t n = gdl__numel_of(ndim, shape);
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.shape = shape; j.s0 = cstr; j.s1 = astr; j.s2 = bstr; j.dt = dt;
    j.p0 = cond; j.p1 = a; j.p2 = b; j.out = out;
    args.ctx = &j;
    gdl__parallel_loop(n, n, gdl__where_part, &args);
    return 0;
}

static int gdl__cpu_tri(gdl_dtype dt, int upper, int64_t batch, int64_t R, int64_t C, int64_t k, const void *x, void *y,
                        int accumulate) {
    size_t es = gdl_dtype_size(dt);
    int64_t b, r, c;
    for (b = 0; b < batch; b++)
        for (r = 0; r < R; r++)
            for (c = 0; c < C; c++) {
                int64_t i = (b * R + r) * C + c;
                int keep = upper ? c - r >= k : c - r <= k;
                char *q = (char *)y + (size_t)i * es;
                const char *p = (const char *)x + (size_t)i * es;
                if (accumulate) {
                    if (!keep) continue;
                    if (dt == GDL_F32) *(gdl_real *)q += *(const gdl_real *)p;
                    else gdl__store(q, dt, (double)(float)(gdl__load(q, dt) + gdl__load(p, dt)));
                } else if (keep) {
                    memcpy(q, p, es);
                } else {
                    memset(q, 0, es);
                }
            }
    return 0;
}

/* sums in double, as the reductions */
static void gdl__cumsum_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t n = a.n, inner = a.inner;
    int64_t o, i, k;
    for (o = lo; o < hi; o++)
        for (i = 0; i < inner; i++) {
            const gdl_real *p = a.x + o * n * inner + i;
            gdl_real *q = a.out + o * n * inner + i;
            double s = 0;
            for (k = 0; k < n; k++) {
                int64_t kk = a.op ? n - 1 - k : k;
                s += p[kk * inner];
                if (a.accumulate) q[kk * inner] += (gdl_real)s;
                else q[kk * inner] = (gdl_real)s;
            }
        }
}
static int gdl__cpu_cumsum(int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y, int reverse,
                           int accumulate) {
    gdl__args a = gdl__args_none();
    a.op = reverse; a.n = n; a.inner = inner; a.x = x; a.out = y; a.accumulate = accumulate;
    gdl__parallel_loop(outer, outer * n * inner, gdl__cumsum_part, &a);
    return 0;
}
/* The output columns ow whose input column ow*SW - PW + kw*DW lies inside
   [0, W): [*lo, *hi). Rows of im2col are then a zero head, a strided copy
   and a zero tail, with no test per element. */
static void gdl__valid_cols(const gdl_conv_geom *g, int kw, int *lo, int *hi) {
    int off = kw * g->DW - g->PW, l = 0, h = g->OW;
    while (l < h && l * g->SW + off < 0) l++;
    while (h > l && (h - 1) * g->SW + off >= g->W) h--;
    *lo = l;
    *hi = h;
}

/* The conv and pool parts do the planes (n, c) in [lo, hi) of a.g's geometry. */
static void gdl__im2col_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t nc, OHW = (int64_t)g->OH * g->OW;
    for (nc = lo; nc < hi; nc++) {
        const gdl_real *xp = a.x + nc * g->H * g->W;
        gdl_real *cp = a.out + nc * g->KH * g->KW * OHW; /* [n][c*KK + kk][ohw] */
        int kh, kw, oh, ow, lo, hi;
        for (kh = 0; kh < g->KH; kh++)
            for (kw = 0; kw < g->KW; kw++) {
                gdl_real *row = cp + (kh * g->KW + kw) * OHW;
                gdl__valid_cols(g, kw, &lo, &hi);
                for (oh = 0; oh < g->OH; oh++) {
                    int ih = oh * g->SH - g->PH + kh * g->DH;
                    gdl_real *r = row + oh * g->OW;
                    int64_t base = (int64_t)ih * g->W + kw * g->DW - g->PW; /* input index of ow = 0 */
                    if (ih < 0 || ih >= g->H) {
                        for (ow = 0; ow < g->OW; ow++) r[ow] = 0;
                        continue;
                    }
                    for (ow = 0; ow < lo; ow++) r[ow] = 0;
                    if (g->SW == 1)
                        for (ow = lo; ow < hi; ow++) r[ow] = xp[base + ow];
                    else
                        for (ow = lo; ow < hi; ow++) r[ow] = xp[base + (int64_t)ow * g->SW];
                    for (ow = hi; ow < g->OW; ow++) r[ow] = 0;
                }
            }
    }
}
static int gdl__cpu_im2col(const gdl_conv_geom *g, const gdl_real *x, gdl_real *col) {
    gdl__args a = gdl__args_none();
    a.g = g; a.x = x; a.out = col;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->KH * g->KW * (int64_t)g->OH * g->OW, gdl__im2col_part, &a);
    return 0;
}

/* x: the columns; out: the image they add into */
static void gdl__col2im_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t nc, OHW = (int64_t)g->OH * g->OW;
    for (nc = lo; nc < hi; nc++) {
        gdl_real *xp = a.out + nc * g->H * g->W;
        const gdl_real *cp = a.x + nc * g->KH * g->KW * OHW;
        int kh, kw, oh, ow, lo, hi;
        for (kh = 0; kh < g->KH; kh++)
            for (kw = 0; kw < g->KW; kw++) {
                const gdl_real *row = cp + (kh * g->KW + kw) * OHW;
                gdl__valid_cols(g, kw, &lo, &hi);
                for (oh = 0; oh < g->OH; oh++) {
                    int ih = oh * g->SH - g->PH + kh * g->DH;
                    const gdl_real *r = row + oh * g->OW;
                    int64_t base = (int64_t)ih * g->W + kw * g->DW - g->PW;
                    if (ih < 0 || ih >= g->H) continue;
                    if (g->SW == 1)
                        for (ow = lo; ow < hi; ow++) xp[base + ow] += r[ow];
                    else
                        for (ow = lo; ow < hi; ow++) xp[base + (int64_t)ow * g->SW] += r[ow];
                }
            }
    }
}
static int gdl__cpu_col2im(const gdl_conv_geom *g, const gdl_real *col, gdl_real *x) {
    gdl__args a = gdl__args_none();
    a.g = g; a.x = col; a.out = x;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->KH * g->KW * (int64_t)g->OH * g->OW, gdl__col2im_part, &a);
    return 0;
}

/* gdl_real's bits, for selects by mask */
#ifdef GPUDL_DOUBLE
typedef uint64_t gdl__rbits;
#else
typedef uint32_t gdl__rbits;
#endif

/* v replaces best (and j the index bi) if v is larger, or the first NaN:
   by bit masks, not branches, since after a ReLU ties and the max's place
   are random (5x faster than the branches compilers emit for ?: here). */
#define GDL__MAXSEL(v, j)                                                                       \
    do {                                                                                         \
        const gdl__rbits m_ = (gdl__rbits)0 - (gdl__rbits)(((v) > best) | (((v) != (v)) & (best == best))); \
        gdl__rbits bb_, vb_;                                                                     \
        memcpy(&bb_, &best, sizeof bb_);                                                         \
        memcpy(&vb_, &(v), sizeof vb_);                                                          \
        bb_ ^= (bb_ ^ vb_) & m_;                                                                 \
        memcpy(&best, &bb_, sizeof bb_);                                                         \
        bi ^= (bi ^ (uint32_t)(j)) & (uint32_t)m_;                                               \
    } while (0)

/* One output row of a 2x2, stride-2 max pool (the common case): r0 is the
   top input row, at plane index base. Vectorised at -O3. */
static void gdl__maxpool2x2_row(const gdl_real *r0, int W, int32_t base, int OW, gdl_real *y, int32_t *idx) {
    const gdl_real *r1 = r0 + W;
    int ow;
    for (ow = 0; ow < OW; ow++) {
        const gdl_real b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
        const uint32_t j = (uint32_t)(base + 2 * ow);
        gdl_real best = r0[2 * ow];
        uint32_t bi = j;
        GDL__MAXSEL(b, j + 1);
        GDL__MAXSEL(c, j + (uint32_t)W);
        GDL__MAXSEL(d, j + (uint32_t)W + 1);
        y[ow] = best;
        idx[ow] = (int32_t)bi;
    }
}

static void gdl__maxpool_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t p;
    for (p = lo; p < hi; p++) {
        const gdl_real *xp = a.x + p * g->H * g->W;
        int oh, ow, kh, kw;
        if (g->KH == 2 && g->KW == 2 && g->SH == 2 && g->SW == 2 && g->PH == 0 && g->PW == 0) {
            const int W = g->W, OH = g->OH, OW = g->OW;
            for (oh = 0; oh < OH; oh++)
                gdl__maxpool2x2_row(xp + 2 * oh * W, W, 2 * oh * W, OW, a.out + (p * OH + oh) * OW,
                                    a.idx + (p * OH + oh) * OW);
            continue;
        }
        if (g->PH == 0 && g->PW == 0 && g->DH == 1 && g->DW == 1) { /* every window inside the plane */
            for (oh = 0; oh < g->OH; oh++)
                for (ow = 0; ow < g->OW; ow++) {
                    int32_t base = oh * g->SH * g->W + ow * g->SW, bi = base;
                    gdl_real best = xp[base];
                    for (kh = 0; kh < g->KH; kh++)
                        for (kw = 0; kw < g->KW; kw++) {
                            int32_t j = base + kh * g->W + kw;
                            gdl_real v = xp[j];
                            /* first max; first NaN wins. Branch-free: the max's place is random */
                            int take = (v > best) | ((v != v) & (best == best));
                            best = take ? v : best;
                            bi = take ? j : bi;
                        }
                    a.out[(p * g->OH + oh) * g->OW + ow] = best;
                    a.idx[(p * g->OH + oh) * g->OW + ow] = bi;
                }
            continue;
        }
        for (oh = 0; oh < g->OH; oh++)
            for (ow = 0; ow < g->OW; ow++) {
                gdl_real best = (gdl_real)-INFINITY;
                int32_t bi = -1;
                for (kh = 0; kh < g->KH; kh++) {
                    int ih = oh * g->SH - g->PH + kh * g->DH;
                    if (ih < 0 || ih >= g->H) continue;
                    for (kw = 0; kw < g->KW; kw++) {
                        int iw = ow * g->SW - g->PW + kw * g->DW;
                        if (iw < 0 || iw >= g->W) continue;
                        gdl_real v = xp[ih * g->W + iw];
                        if (bi < 0 || v > best || (v != v && best == best)) { /* first max; first NaN wins */
                            best = v;
                            bi = ih * g->W + iw;
                        }
                    }
                }
                a.out[(p * g->OH + oh) * g->OW + ow] = best;
                a.idx[(p * g->OH + oh) * g->OW + ow] = bi < 0 ? 0 : bi;
            }
    }
}
static int gdl__cpu_maxpool(const gdl_conv_geom *g, const gdl_real *x, gdl_real *y, int32_t *idx) {
    gdl__args a = gdl__args_none();
    a.g = g; a.x = x; a.out = y; a.idx = idx;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->OH * g->OW * g->KH * g->KW, gdl__maxpool_part, &a);
    return 0;
}

static int gdl__cpu_maxpool_backward(const gdl_conv_geom *g, const gdl_real *gy, const int32_t *idx, gdl_real *gx) {
    int64_t p, OHW = (int64_t)g->OH * g->OW;
    for (p = 0; p < (int64_t)g->N * g->C; p++) {
        int64_t o;
        for (o = 0; o < OHW; o++) gx[p * g->H * g->W + idx[p * OHW + o]] += gy[p * OHW + o];
    }
    return 0;
}

static void gdl__avgpool_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t p;
    for (p = lo; p < hi; p++) {
        const gdl_real *xp = a.x + p * g->H * g->W;
        int oh, ow, kh, kw;
        for (oh = 0; oh < g->OH; oh++)
            for (ow = 0; ow < g->OW; ow++) {
                double s = 0;
                for (kh = 0; kh < g->KH; kh++) {
                    int ih = oh * g->SH - g->PH + kh;
                    if (ih < 0 || ih >= g->H) continue;
                    for (kw = 0; kw < g->KW; kw++) {
                        int iw = ow * g->SW - g->PW + kw;
                        if (iw >= 0 && iw < g->W) s += xp[ih * g->W + iw];
                    }
                }
                a.out[(p * g->OH + oh) * g->OW + ow] = (gdl_real)(s / (g->KH * g->KW));
            }
    }
}
static int gdl__cpu_avgpool(const gdl_conv_geom *g, const gdl_real *x, gdl_real *y) {
    gdl__args a = gdl__args_none();
    a.g = g; a.x = x; a.out = y;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->OH * g->OW * g->KH * g->KW, gdl__avgpool_part, &a);
    return 0;
}

static void gdl__avgpool_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t p;
    for (p = lo; p < hi; p++) {
        gdl_real *xp = a.out + p * g->H * g->W;
        int oh, ow, kh, kw;
        for (oh = 0; oh < g->OH; oh++)
            for (ow = 0; ow < g->OW; ow++) {
                gdl_real v = a.gy[(p * g->OH + oh) * g->OW + ow] / (gdl_real)(g->KH * g->KW);
                for (kh = 0; kh < g->KH; kh++) {
                    int ih = oh * g->SH - g->PH + kh;
                    if (ih < 0 || ih >= g->H) continue;
                    for (kw = 0; kw < g->KW; kw++) {
                        int iw = ow * g->SW - g->PW + kw;
                        if (iw >= 0 && iw < g->W) xp[ih * g->W + iw] += v;
                    }
                }
            }
    }
}
static int gdl__cpu_avgpool_backward(const gdl_conv_geom *g, const gdl_real *gy, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.g = g; a.gy = gy; a.out = gx;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->OH * g->OW * g->KH * g->KW, gdl__avgpool_backward_part, &a);
    return 0;
}

static int gdl__cpu_copy2d(int64_t rows, int64_t cols, const gdl_real *src, int64_t sld, gdl_real *dst,
                           int64_t dld, int accumulate) {
    int64_t r, c;
    for (r = 0; r < rows; r++) {
        if (accumulate)
            for (c = 0; c < cols; c++) dst[r * dld + c] += src[r * sld + c];
        else
            memmove(dst + r * dld, src + r * sld, sizeof(gdl_real) * (size_t)cols);
    }
    return 0;
}

static void gdl__dropout_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_real scale = a.p < 1 ? (gdl_real)(1.0 / (1.0 - a.p)) : 0;
    int64_t i;
    for (i = lo; i < hi; i++) a.out[i] = gdl_dropout_keep(a.seed, (uint64_t)i, a.p) ? a.x[i] * scale : 0;
}
static int gdl__cpu_dropout(int64_t n, double p, uint64_t seed, const gdl_real *x, gdl_real *y) {
    gdl__args a = gdl__args_none();
    a.p = p; a.seed = seed; a.x = x; a.out = y;
    gdl__parallel_loop(n, n, gdl__dropout_part, &a);
    return 0;
}
static void gdl__dropout_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_real scale = a.p < 1 ? (gdl_real)(1.0 / (1.0 - a.p)) : 0;
    int64_t i;
    for (i = lo; i < hi; i++)
        if (gdl_dropout_keep(a.seed, (uint64_t)i, a.p)) a.out[i] += a.gy[i] * scale;
}
static int gdl__cpu_dropout_backward(int64_t n, double p, uint64_t seed, const gdl_real *gy, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.p = p; a.seed = seed; a.gy = gy; a.out = gx;
    gdl__parallel_loop(n, n, gdl__dropout_backward_part, &a);
    return 0;
}

/* ---- native bf16/f16 elementwise kernels ----
   Chunks of GDL__LP_CHUNK elements are loaded to f32 on the stack, computed
   with the f32 kernels' formulas (the same expressions, so a result equals
   the f32 kernel's on the same values, then rounded once) and stored. */
#define GDL__LP_CHUNK 256

/* x86's F16C converts 8 halves at a time, rounding to nearest even as
   gdl_f32_to_f16 does; groups holding an infinity or NaN take the scalar
   functions, so every bit (NaN payloads included) stays theirs. (MSVC has no __F16C__: its /arch:AVX2
   implies F16C.) */
#if (defined(__F16C__) || (defined(_MSC_VER) && defined(__AVX2__))) && defined(__AVX__) && !defined(GPUDL_DOUBLE)
#include <immintrin.h>
#define GDL__F16C 1
#endif

/* n elements of src (dtype st: f32 or low) from element off, s apart, as f32 */
static void gdl__lp_get(gdl_dtype st, const void *src, int64_t off, int64_t s, int64_t n, gdl_real *buf) {
    int64_t i = 0, k;
    if (st == GDL_F32) {
        const gdl_real *p = (const gdl_real *)src + off;
        for (i = 0; i < n; i++) buf[i] = p[i * s];
    } else if (st == GDL_F16) {
        const uint16_t *h = (const uint16_t *)src + off;
#ifdef GDL__F16C
        if (s == 1)
            for (; i + 8 <= n; i += 8) {
                __m128i hv = _mm_loadu_si128((const __m128i *)(const void *)(h + i)), e = _mm_set1_epi16(0x7c00);
                if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(hv, e), e)) == 0)
                    _mm256_storeu_ps(buf + i, _mm256_cvtph_ps(hv));
                else
                    for (k = i; k < i + 8; k++) buf[k] = gdl_f16_to_f32(h[k]);
            }
#endif
        for (k = i; k < n; k++) buf[k] = (gdl_real)gdl_f16_to_f32(h[k * s]);
    } else {
        const uint16_t *h = (const uint16_t *)src + off;
        for (i = 0; i < n; i++) buf[i] = (gdl_real)gdl_bf16_to_f32(h[i * s]);
    }
}
/* n contiguous elements of dst (dtype dt) from element off, rounded once from buf */
static void gdl__lp_put(gdl_dtype dt, void *dst, int64_t off, int64_t n, const gdl_real *buf) {
    int64_t i;
    if (dt == GDL_F32) {
        memcpy((gdl_real *)dst + off, buf, sizeof(gdl_real) * (size_t)n);
    } else if (dt == GDL_F16) {
        uint16_t *h = (uint16_t *)dst + off;
        i = 0;
#ifdef GDL__F16C
        for (; i + 8 <= n; i += 8) {
            __m256 v = _mm256_loadu_ps(buf + i);
            /* |v| < inf for all 8 (false for NaN) */
            __m256 fin = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), _mm256_set1_ps(INFINITY), _CMP_LT_OQ);
            if (_mm256_movemask_ps(fin) == 0xff) {
                _mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            } else {
                int64_t k;
                for (k = i; k < i + 8; k++) h[k] = gdl_f32_to_f16(buf[k]);
            }
        }
#endif
        for (; i < n; i++) h[i] = gdl_f32_to_f16((float)buf[i]);
    } else {
        uint16_t *h = (uint16_t *)dst + off;
        for (i = 0; i < n; i++) h[i] = gdl_f32_to_bf16((float)buf[i]);
    }
}

/* The parts below read and write a.dt's lx, ly, lgy, lout. */
static void gdl__unary_lp_part(gdl__args a, int64_t lo, int64_t hi) {
    gdl_real xb[GDL__LP_CHUNK], ob[GDL__LP_CHUNK], alpha = a.alpha;
    int64_t c, i, m;
    for (c = lo; c < hi; c += m) {
        m = hi - c < GDL__LP_CHUNK ? hi - c : GDL__LP_CHUNK;
        gdl__lp_get(a.dt, a.lx, c, 1, m, xb);
        switch (a.op) { /* gdl__cpu_unary's loops */
        case GDL_UN_RELU: for (i = 0; i < m; i++) ob[i] = xb[i] > 0 ? xb[i] : 0; break;
        case GDL_UN_SCALE: for (i = 0; i < m; i++) ob[i] = alpha * xb[i]; break;
        case GDL_UN_ADD_SCALAR: for (i = 0; i < m; i++) ob[i] = xb[i] + alpha; break;
        default: for (i = 0; i < m; i++) ob[i] = gdl__unary1(a.op, xb[i], alpha); break;
        }
        gdl__lp_put(a.dt, a.lout, c, m, ob);
    }
}
static int gdl__cpu_unary_lp(gdl_dtype dt, int op, int64_t n, const void *x, void *y, float alpha) {
    gdl__args a = gdl__args_none();
    a.dt = dt; a.op = op; a.lx = x; a.lout = y; a.alpha = (gdl_real)alpha;
    gdl__parallel_loop(n, op == GDL_UN_RELU || op == GDL_UN_SCALE || op == GDL_UN_ADD_SCALAR ? n : 8 * n,
                       gdl__unary_lp_part, &a);
    return 0;
}

static void gdl__unary_backward_lp_part(gdl__args a, int64_t lo, int64_t hi) {
    gdl_real xb[GDL__LP_CHUNK], yb[GDL__LP_CHUNK], gyb[GDL__LP_CHUNK], gb[GDL__LP_CHUNK], alpha = a.alpha;
    int64_t c, i, m;
    int op = a.op, need_y = op == GDL_UN_SIGMOID || op == GDL_UN_TANH || op == GDL_UN_EXP || op == GDL_UN_SQRT ||
                            op == GDL_UN_RSQRT;
    for (c = lo; c < hi; c += m) {
        m = hi - c < GDL__LP_CHUNK ? hi - c : GDL__LP_CHUNK;
        gdl__lp_get(a.dt, a.lx, c, 1, m, xb);
        if (need_y) gdl__lp_get(a.dt, a.ly, c, 1, m, yb);
        else for (i = 0; i < m; i++) yb[i] = 0;
        gdl__lp_get(a.dt, a.lgy, c, 1, m, gyb);
        gdl__lp_get(a.dt, a.lout, c, 1, m, gb);
        switch (op) { /* gdl__cpu_unary_backward's loops */
        case GDL_UN_RELU: for (i = 0; i < m; i++) gb[i] += xb[i] > 0 ? gyb[i] : 0; break;
        case GDL_UN_LEAKY_RELU: for (i = 0; i < m; i++) gb[i] += xb[i] > 0 ? gyb[i] : alpha * gyb[i]; break;
        case GDL_UN_CLAMP_MIN: for (i = 0; i < m; i++) gb[i] += xb[i] >= alpha ? gyb[i] : 0; break;
        case GDL_UN_CLAMP_MAX: for (i = 0; i < m; i++) gb[i] += xb[i] <= alpha ? gyb[i] : 0; break;
        case GDL_UN_SCALE: for (i = 0; i < m; i++) gb[i] += alpha * gyb[i]; break;
        case GDL_UN_ADD_SCALAR: for (i = 0; i < m; i++) gb[i] += gyb[i]; break;
        case GDL_UN_SIGMOID: for (i = 0; i < m; i++) gb[i] += gyb[i] * yb[i] * (1 - yb[i]); break;
        case GDL_UN_TANH: for (i = 0; i < m; i++) gb[i] += gyb[i] * (1 - yb[i] * yb[i]); break;
        default:
            for (i = 0; i < m; i++) gb[i] += (gdl_real)(gyb[i] * gdl__unary_grad1(op, xb[i], yb[i], alpha));
            break;
        }
        gdl__lp_put(a.dt, a.lout, c, m, gb);
    }
}
static int gdl__cpu_unary_backward_lp(gdl_dtype dt, int op, int64_t n, const void *x, const void *y, const void *gy,
                                      void *gx, float alpha) {
    gdl__args a = gdl__args_none();
    a.dt = dt; a.op = op; a.lx = x; a.ly = y; a.lgy = gy; a.lout = gx; a.alpha = (gdl_real)alpha;
    gdl__parallel_loop(n, 8 * n, gdl__unary_backward_lp_part, &a);
    return 0;
}

/* the offsets of row r (all dims but the last, row-major) in two strided operands */
static void gdl__row_offsets(int ndim, const int64_t *shape, int64_t r, const int64_t *astr, int64_t *oa,
                             const int64_t *bstr, int64_t *ob) {
    int d;
    *oa = *ob = 0;
    for (d = ndim - 2; d >= 0; d--) {
        int64_t id = r % shape[d];
        r /= shape[d];
        *oa += id * astr[d];
        *ob += id * bstr[d];
    }
}

/* rows [lo, hi); a.ctx: the arguments (their own kinds: strides, three dtypes) */
typedef struct {
    int op, ndim;
    const int64_t *shape, *astr, *bstr;
    gdl_dtype at, bt, ot;
    const void *a, *b;
    void *out;
} gdl__binary_lp_job;
static void gdl__binary_lp_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__binary_lp_job *j = (const gdl__binary_lp_job *)a.ctx;
    int nd = j->ndim;
    int64_t inner = nd ? j->shape[nd - 1] : 1, sa = nd ? j->astr[nd - 1] : 0, sb = nd ? j->bstr[nd - 1] : 0, r, c, m;
    gdl_real ab[GDL__LP_CHUNK], bb[GDL__LP_CHUNK], ob[GDL__LP_CHUNK];
    for (r = lo; r < hi; r++) {
        int64_t oa, ob_;
        gdl__row_offsets(nd, j->shape, r, j->astr, &oa, j->bstr, &ob_);
        for (c = 0; c < inner; c += m) {
            m = inner - c < GDL__LP_CHUNK ? inner - c : GDL__LP_CHUNK;
            gdl__lp_get(j->at, j->a, oa + c * sa, sa, m, ab);
            gdl__lp_get(j->bt, j->b, ob_ + c * sb, sb, m, bb);
            gdl__bin_row(j->op, m, ab, 1, bb, 1, ob);
            gdl__lp_put(j->ot, j->out, r * inner + c, m, ob);
        }
    }
}
static int gdl__cpu_binary_lp(int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr,
                              gdl_dtype bt, const void *b, const int64_t *bstr, gdl_dtype ot, void *out) {
    int64_t rows = 1, inner = ndim ? shape[ndim - 1] : 1;
    int d;
    gdl__binary_lp_job j;
    gdl__args args = gdl__args_none();
    for (d = 0; d + 1 < ndim; d++) rows *= shape[d];
    if (inner == 0 || rows == 0) return 0;
    j.op = op; j.ndim = ndim; j.shape = shape; j.astr = astr; j.bstr = bstr;
    j.at = at; j.bt = bt; j.ot = ot; j.a = a; j.b = b; j.out = out;
    args.ctx = &j;
    gdl__parallel_loop(rows, rows * inner, gdl__binary_lp_part, &args);
    return 0;
}

/* gdl__cpu_sum_to into a zeroed f32 buffer over dst's elements, then added
   to dst and rounded: the f32 path's gradient of an f32 copy, then its cast */
static int gdl__cpu_sum_to_lp(int ndim, const int64_t *shape, gdl_dtype st, const void *src, gdl_dtype dt, void *dst,
                              const int64_t *dstr, float alpha_) {
    int64_t rows = 1, inner = ndim ? shape[ndim - 1] : 1, r, i, c, m, o = 0, unused = 0, span = 1, idx[GDL_MAX_DIMS] = {0};
    int64_t ds = ndim ? dstr[ndim - 1] : 0, zero[GDL_MAX_DIMS] = {0};
    gdl_real *acc, buf[GDL__LP_CHUNK], db[GDL__LP_CHUNK], alpha = (gdl_real)alpha_;
    int d;
    for (d = 0; d < ndim; d++) {
        if (shape[d] == 0) return 0;
        span += (shape[d] - 1) * dstr[d];
    }
    for (d = 0; d + 1 < ndim; d++) rows *= shape[d];
    if (!(acc = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)span))) {
        gdl__set_error("%s: out of host memory for a %s gradient's f32 sums", gdl__be_op, gdl_dtype_name(dt));
        return -1;
    }
    memset(acc, 0, sizeof(gdl_real) * (size_t)span);
    for (r = 0; r < rows; r++) {
        gdl_real *q = acc + o, racc = 0;
        for (c = 0; c < inner; c += m) {
            m = inner - c < GDL__LP_CHUNK ? inner - c : GDL__LP_CHUNK;
            gdl__lp_get(st, src, r * inner + c, 1, m, buf);
            if (ds == 0) for (i = 0; i < m; i++) racc += buf[i];
            else if (ds == 1) for (i = 0; i < m; i++) q[c + i] += alpha * buf[i];
            else for (i = 0; i < m; i++) q[(c + i) * ds] += alpha * buf[i];
        }
        if (ds == 0) q[0] += alpha * racc;
        gdl__odometer_step(ndim, shape, idx, &o, dstr, &unused, zero);
    }
    for (c = 0; c < span; c += m) {
        m = span - c < GDL__LP_CHUNK ? span - c : GDL__LP_CHUNK;
        gdl__lp_get(dt, dst, c, 1, m, db);
        for (i = 0; i < m; i++) db[i] += acc[c + i];
        gdl__lp_put(dt, dst, c, m, db);
    }
    GPUDL_FREE(acc);
    return 0;
}

static void gdl__dropout_lp_part(gdl__args a, int64_t lo, int64_t hi) {
    gdl_real xb[GDL__LP_CHUNK], ob[GDL__LP_CHUNK], scale = a.p < 1 ? (gdl_real)(1.0 / (1.0 - a.p)) : 0;
    int64_t c, i, m;
    for (c = lo; c < hi; c += m) {
        m = hi - c < GDL__LP_CHUNK ? hi - c : GDL__LP_CHUNK;
        gdl__lp_get(a.dt, a.lx, c, 1, m, xb);
        if (a.lgy) { /* backward: gx += kept gy * scale (a dropped element adds 0, as the cast path's f32 gradient) */
            gdl__lp_get(a.dt, a.lout, c, 1, m, ob);
            for (i = 0; i < m; i++) ob[i] += gdl_dropout_keep(a.seed, (uint64_t)(c + i), a.p) ? xb[i] * scale : 0;
        } else {
            for (i = 0; i < m; i++) ob[i] = gdl_dropout_keep(a.seed, (uint64_t)(c + i), a.p) ? xb[i] * scale : 0;
        }
        gdl__lp_put(a.dt, a.lout, c, m, ob);
    }
}
static int gdl__cpu_dropout_lp(gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *x, void *y) {
    gdl__args a = gdl__args_none();
    a.dt = dt; a.lx = x; a.lout = y; a.p = p; a.seed = seed;
    gdl__parallel_loop(n, n, gdl__dropout_lp_part, &a);
    return 0;
}
static int gdl__cpu_dropout_backward_lp(gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *gy, void *gx) {
    gdl__args a = gdl__args_none();
    a.dt = dt; a.lx = gy; a.lgy = gy; a.lout = gx; a.p = p; a.seed = seed;
    gdl__parallel_loop(n, n, gdl__dropout_lp_part, &a);
    return 0;
}

static int gdl__cpu_copy2d_lp(gdl_dtype dt, int64_t rows, int64_t cols, const void *src, int64_t sld, void *dst,
                              int64_t dld, int accumulate) {
    size_t es = gdl_dtype_size(dt);
    gdl_real sb[GDL__LP_CHUNK], db[GDL__LP_CHUNK];
    int64_t r, c, i, m;
    for (r = 0; r < rows; r++) {
        if (!accumulate) {
            memmove((char *)dst + (size_t)(r * dld) * es, (const char *)src + (size_t)(r * sld) * es, es * (size_t)cols);
            continue;
        }
        for (c = 0; c < cols; c += m) {
            m = cols - c < GDL__LP_CHUNK ? cols - c : GDL__LP_CHUNK;
            gdl__lp_get(dt, src, r * sld + c, 1, m, sb);
            gdl__lp_get(dt, dst, r * dld + c, 1, m, db);
            for (i = 0; i < m; i++) db[i] += sb[i];
            gdl__lp_put(dt, dst, r * dld + c, m, db);
        }
    }
    return 0;
}

/* The normalisations' arguments are theirs alone: a struct of them in a.ctx,
   copied (as gdl__args is) so that the loops keep its fields in registers.
   A part does the channels (batchnorm) or rows (layernorm) [lo, hi). */
typedef struct {
    int64_t N, C, S;
    const gdl_real *x, *gamma, *beta;
    gdl_real *y, *mean, *invstd, *run_mean, *run_var;
    int training;
    double momentum, eps;
} gdl__batchnorm_job;
static void gdl__batchnorm_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__batchnorm_job b = *(const gdl__batchnorm_job *)a.ctx;
    const int64_t N = b.N, C = b.C, S = b.S;
    const gdl_real *x = b.x;
    int64_t c;
    for (c = lo; c < hi; c++) {
        int64_t n, s, M = N * S;
        double mu, var, is, gm = b.gamma ? b.gamma[c] : 1, bt = b.beta ? b.beta[c] : 0;
        if (b.training) {
            double sum = 0, sq = 0;
            for (n = 0; n < N; n++)
                for (s = 0; s < S; s++) sum += x[(n * C + c) * S + s];
            mu = sum / (double)M;
            for (n = 0; n < N; n++)
                for (s = 0; s < S; s++) {
                    double d = x[(n * C + c) * S + s] - mu;
                    sq += d * d;
                }
            var = sq / (double)M;
            if (b.run_mean) {
                b.run_mean[c] = (gdl_real)((1 - b.momentum) * b.run_mean[c] + b.momentum * mu);
                b.run_var[c] = (gdl_real)((1 - b.momentum) * b.run_var[c] + b.momentum * (M > 1 ? sq / (double)(M - 1) : var));
            }
        } else {
            mu = b.run_mean[c];
            var = b.run_var[c];
        }
        is = 1.0 / sqrt(var + b.eps);
        b.mean[c] = (gdl_real)mu;
        b.invstd[c] = (gdl_real)is;
        for (n = 0; n < N; n++)
            for (s = 0; s < S; s++) {
                int64_t j = (n * C + c) * S + s;
                b.y[j] = (gdl_real)((x[j] - mu) * is * gm + bt);
            }
    }
}
static int gdl__cpu_batchnorm(int64_t N, int64_t C, int64_t S, const gdl_real *x, const gdl_real *gamma,
                              const gdl_real *beta, gdl_real *y, gdl_real *mean, gdl_real *invstd,
                              gdl_real *run_mean, gdl_real *run_var, int training, double momentum, double eps) {
    gdl__batchnorm_job b = {N, C, S, x, gamma, beta, y, mean, invstd, run_mean, run_var, training, momentum, eps};
    gdl__args a = gdl__args_none();
    a.ctx = &b;
    gdl__parallel_loop(C, N * C * S, gdl__batchnorm_part, &a);
    return 0;
}

typedef struct {
    int64_t N, C, S;
    const gdl_real *x, *gy, *gamma, *mean, *invstd;
    int training;
    gdl_real *gx, *ggamma, *gbeta;
} gdl__batchnorm_backward_job;
static void gdl__batchnorm_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__batchnorm_backward_job b = *(const gdl__batchnorm_backward_job *)a.ctx;
    const int64_t N = b.N, C = b.C, S = b.S;
    const gdl_real *x = b.x, *gy = b.gy;
    int64_t c;
    for (c = lo; c < hi; c++) {
        int64_t n, s, M = N * S;
        double sg = 0, sgx = 0, mu = b.mean[c], is = b.invstd[c], gm = b.gamma ? b.gamma[c] : 1;
        for (n = 0; n < N; n++)
            for (s = 0; s < S; s++) {
                int64_t j = (n * C + c) * S + s;
                sg += gy[j];
                sgx += gy[j] * (x[j] - mu) * is;
            }
        if (b.ggamma) b.ggamma[c] += (gdl_real)sgx;
        if (b.gbeta) b.gbeta[c] += (gdl_real)sg;
        if (!b.gx) continue;
        for (n = 0; n < N; n++)
            for (s = 0; s < S; s++) {
                int64_t j = (n * C + c) * S + s;
                if (b.training)
                    b.gx[j] += (gdl_real)(gm * is / (double)M * ((double)M * gy[j] - sg - (x[j] - mu) * is * sgx));
                else
                    b.gx[j] += (gdl_real)(gy[j] * gm * is);
            }
    }
}
static int gdl__cpu_batchnorm_backward(int64_t N, int64_t C, int64_t S, const gdl_real *x, const gdl_real *gy,
                                       const gdl_real *gamma, const gdl_real *mean, const gdl_real *invstd,
                                       int training, gdl_real *gx, gdl_real *ggamma, gdl_real *gbeta) {
    gdl__batchnorm_backward_job b = {N, C, S, x, gy, gamma, mean, invstd, training, gx, ggamma, gbeta};
    gdl__args a = gdl__args_none();
    a.ctx = &b;
    gdl__parallel_loop(C, N * C * S, gdl__batchnorm_backward_part, &a);
    return 0;
}

/* The low-precision entries on the CPU, which has no bf16/f16 arithmetic:
   the operands widened to f32 in malloc'd memory (not the arena, so only
   the low-precision tensors stay for backward), the f32 kernel, the output
   rounded once -- as gdl__cpu_gemm_lp. An accumulated output (x, gx) is
   widened too, so its old value and the new sum round once together. */
static gdl_real *gdl__cpu_lp_wide(gdl_dtype dt, int nbuf, const void *const *src, const int64_t *n, gdl_real **out) {
    int64_t total = 1;
    int k;
    gdl_real *f;
    for (k = 0; k < nbuf; k++) total += n[k] > 0 ? n[k] : 0;
    if (!(f = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)total))) {
        gdl__set_error("%s: out of host memory for the f32 copies of a %s kernel", gdl__be_op, gdl_dtype_name(dt));
        return NULL;
    }
    total = 0;
    for (k = 0; k < nbuf; k++) {
        out[k] = f + total;
        if (src[k] && n[k] > 0) gdl__cpu_cast(out[k], GDL_F32, src[k], dt, n[k]);
        total += n[k] > 0 ? n[k] : 0;
    }
    return f;
}
static int gdl__cpu_lp_check(const char *entry, gdl_dtype dt) {
    if (dt == GDL_F16 || dt == GDL_BF16) return 0;
    gdl__set_error("%s: the low-precision %s takes f16 or bf16, not %s", gdl__be_op, entry, gdl_dtype_name(dt));
    return -1;
}
#define GDL__GEOM_IN(g) ((int64_t)(g)->N * (g)->C * (g)->H * (g)->W)
#define GDL__GEOM_OUT(g) ((int64_t)(g)->N * (g)->C * (g)->OH * (g)->OW)
#define GDL__GEOM_COL(g) (GDL__GEOM_OUT(g) * (g)->KH * (g)->KW)

/* im2col moves values without arithmetic: the 16-bit patterns are gathered
   as they are (f16 and bf16 alike; +0 is 0 in both), in the f32 kernel's
   layout, planes split over the threads */
static void gdl__im2col16_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t nc, OHW = (int64_t)g->OH * g->OW;
    for (nc = lo; nc < hi; nc++) {
        const uint16_t *xp = (const uint16_t *)a.lx + nc * g->H * g->W;
        uint16_t *cp = (uint16_t *)a.lout + nc * g->KH * g->KW * OHW;
        int kh, kw, oh, ow;
        for (kh = 0; kh < g->KH; kh++)
            for (kw = 0; kw < g->KW; kw++)
                for (oh = 0; oh < g->OH; oh++) {
                    int ih = oh * g->SH - g->PH + kh * g->DH;
                    uint16_t *r = cp + (kh * g->KW + kw) * OHW + (int64_t)oh * g->OW;
                    if (ih < 0 || ih >= g->H) {
                        memset(r, 0, sizeof(uint16_t) * (size_t)g->OW);
                        continue;
                    }
                    for (ow = 0; ow < g->OW; ow++) {
                        int iw = ow * g->SW - g->PW + kw * g->DW;
                        r[ow] = iw >= 0 && iw < g->W ? xp[(int64_t)ih * g->W + iw] : (uint16_t)0;
                    }
                }
    }
}
static int gdl__cpu_im2col_lp(gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *col) {
    gdl__args a = gdl__args_none();
    if (gdl__cpu_lp_check("im2col", dt) < 0) return -1;
    a.g = g; a.lx = x; a.lout = col;
    gdl__parallel_loop((int64_t)g->N * g->C, GDL__GEOM_COL(g), gdl__im2col16_part, &a);
    return 0;
}
static int gdl__cpu_col2im_lp(gdl_dtype dt, const gdl_conv_geom *g, const void *col, void *x) {
    const void *src[2];
    int64_t n[2];
    gdl_real *b[2], *f;
    if (gdl__cpu_lp_check("col2im", dt) < 0) return -1;
    src[0] = col; n[0] = GDL__GEOM_COL(g); src[1] = x; n[1] = GDL__GEOM_IN(g);
    if (n[0] <= 0 || n[1] <= 0) return 0;
    if (!(f = gdl__cpu_lp_wide(dt, 2, src, n, b))) return -1;
    gdl__cpu_col2im(g, b[0], b[1]);
    gdl__cpu_cast(x, dt, b[1], GDL_F32, n[1]);
    GPUDL_FREE(f);
    return 0;
}
/* pooling forward (avg selects avgpool; idx for the max) */
static int gdl__cpu_pool_lp(gdl_dtype dt, int avg, const gdl_conv_geom *g, const void *x, void *y, int32_t *idx) {
    const void *src[2];
    int64_t n[2];
    gdl_real *b[2], *f;
    if (gdl__cpu_lp_check(avg ? "avgpool" : "maxpool", dt) < 0) return -1;
    src[0] = x; n[0] = GDL__GEOM_IN(g); src[1] = NULL; n[1] = GDL__GEOM_OUT(g);
    if (n[1] <= 0) return 0;
    if (!(f = gdl__cpu_lp_wide(dt, 2, src, n, b))) return -1;
    if (avg) gdl__cpu_avgpool(g, b[0], b[1]);
    else gdl__cpu_maxpool(g, b[0], b[1], idx);
    gdl__cpu_cast(y, dt, b[1], GDL_F32, n[1]);
    GPUDL_FREE(f);
    return 0;
}
static int gdl__cpu_pool_backward_lp(gdl_dtype dt, int avg, const gdl_conv_geom *g, const void *gy, const int32_t *idx,
                                     void *gx) {
    const void *src[2];
    int64_t n[2];
    gdl_real *b[2], *f;
    if (gdl__cpu_lp_check(avg ? "avgpool_backward" : "maxpool_backward", dt) < 0) return -1;
    src[0] = gy; n[0] = GDL__GEOM_OUT(g); src[1] = gx; n[1] = GDL__GEOM_IN(g);
    if (n[0] <= 0 || n[1] <= 0) return 0;
    if (!(f = gdl__cpu_lp_wide(dt, 2, src, n, b))) return -1;
    if (avg) gdl__cpu_avgpool_backward(g, b[0], b[1]);
    else gdl__cpu_maxpool_backward(g, b[0], idx, b[1]);
    gdl__cpu_cast(gx, dt, b[1], GDL_F32, n[1]);
    GPUDL_FREE(f);
    return 0;
}
static int gdl__cpu_maxpool_lp(gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *y, int32_t *idx) {
    return gdl__cpu_pool_lp(dt, 0, g, x, y, idx);
}
static int gdl__cpu_maxpool_backward_lp(gdl_dtype dt, const gdl_conv_geom *g, const void *gy, const int32_t *idx, void *gx) {
    return gdl__cpu_pool_backward_lp(dt, 0, g, gy, idx, gx);
}
static int gdl__cpu_avgpool_lp(gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *y) {
    return gdl__cpu_pool_lp(dt, 1, g, x, y, NULL);
}
static int gdl__cpu_avgpool_backward_lp(gdl_dtype dt, const gdl_conv_geom *g, const void *gy, void *gx) {
    return gdl__cpu_pool_backward_lp(dt, 1, g, gy, NULL, gx);
}
static int gdl__cpu_batchnorm_lp(gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const gdl_real *gamma,
                                 const gdl_real *beta, void *y, gdl_real *mean, gdl_real *invstd, gdl_real *run_mean,
                                 gdl_real *run_var, int training, double momentum, double eps) {
    const void *src[2];
    int64_t n[2];
    gdl_real *b[2], *f;
    int rc;
    if (gdl__cpu_lp_check("batchnorm", dt) < 0) return -1;
    src[0] = x; n[0] = N * C * S; src[1] = NULL; n[1] = N * C * S;
    if (!(f = gdl__cpu_lp_wide(dt, 2, src, n, b))) return -1;
    rc = gdl__cpu_batchnorm(N, C, S, b[0], gamma, beta, b[1], mean, invstd, run_mean, run_var, training, momentum, eps);
    if (rc == 0) gdl__cpu_cast(y, dt, b[1], GDL_F32, n[1]);
    GPUDL_FREE(f);
    return rc;
}
static int gdl__cpu_batchnorm_backward_lp(gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const void *gy,
                                          const gdl_real *gamma, const gdl_real *mean, const gdl_real *invstd,
                                          int training, void *gx, gdl_real *ggamma, gdl_real *gbeta) {
    const void *src[3];
    int64_t n[3];
    gdl_real *b[3], *f;
    int rc;
    if (gdl__cpu_lp_check("batchnorm_backward", dt) < 0) return -1;
    src[0] = x; src[1] = gy; src[2] = gx;
    n[0] = n[1] = N * C * S; n[2] = gx ? N * C * S : 0;
    if (!(f = gdl__cpu_lp_wide(dt, 3, src, n, b))) return -1;
    rc = gdl__cpu_batchnorm_backward(N, C, S, b[0], b[1], gamma, mean, invstd, training, gx ? b[2] : NULL, ggamma, gbeta);
    if (rc == 0 && gx) gdl__cpu_cast(gx, dt, b[2], GDL_F32, n[2]);
    GPUDL_FREE(f);
    return rc;
}

typedef struct {
    int64_t rows, D;
    const gdl_real *x, *gamma, *beta;
    double eps;
    gdl_real *y, *mean, *rstd;
} gdl__layernorm_job;
static void gdl__layernorm_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__layernorm_job b = *(const gdl__layernorm_job *)a.ctx;
    const int64_t D = b.D;
    int64_t r;
    for (r = lo; r < hi; r++) {
        const gdl_real *p = b.x + r * D;
        double s = 0, sq = 0, mu, rs;
        int64_t k;
        for (k = 0; k < D; k++) s += p[k];
        mu = s / (double)D;
        for (k = 0; k < D; k++) sq += (p[k] - mu) * (p[k] - mu);
        rs = 1.0 / sqrt(sq / (double)D + b.eps);
        b.mean[r] = (gdl_real)mu;
        b.rstd[r] = (gdl_real)rs;
        for (k = 0; k < D; k++)
            b.y[r * D + k] = (gdl_real)((p[k] - mu) * rs * (b.gamma ? b.gamma[k] : 1) + (b.beta ? b.beta[k] : 0));
    }
}
static int gdl__cpu_layernorm(int64_t rows, int64_t D, const gdl_real *x, const gdl_real *gamma,
                              const gdl_real *beta, double eps, gdl_real *y, gdl_real *mean, gdl_real *rstd) {
    gdl__layernorm_job b = {rows, D, x, gamma, beta, eps, y, mean, rstd};
    gdl__args a = gdl__args_none();
    a.ctx = &b;
    gdl__parallel_loop(rows, rows * D, gdl__layernorm_part, &a);
    return 0;
}

static int gdl__cpu_layernorm_backward(int64_t rows, int64_t D, const gdl_real *x, const gdl_real *gy,
                                       const gdl_real *gamma, const gdl_real *mean, const gdl_real *rstd,
                                       gdl_real *gx, gdl_real *ggamma, gdl_real *gbeta) {
    int64_t r, k;
    for (r = 0; r < rows; r++) { /* serial over rows: ggamma/gbeta accumulate */
        const gdl_real *p = x + r * D, *g = gy + r * D;
        double mu = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
        for (k = 0; k < D; k++) {
            double xh = (p[k] - mu) * rs, gh = g[k] * (gamma ? gamma[k] : 1);
            s1 += gh;
            s2 += gh * xh;
            if (ggamma) ggamma[k] += (gdl_real)(g[k] * xh);
            if (gbeta) gbeta[k] += g[k];
        }
        if (gx)
            for (k = 0; k < D; k++) {
                double xh = (p[k] - mu) * rs, gh = g[k] * (gamma ? gamma[k] : 1);
                gx[r * D + k] += (gdl_real)(rs * (gh - s1 / (double)D - xh * s2 / (double)D));
            }
    }
    return 0;
}

static int gdl__cpu_embedding(int64_t n, int64_t D, int64_t V, const int32_t *idx, const gdl_real *W, gdl_real *out) {
    int64_t i;
    for (i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= V) memset(out + i * D, 0, sizeof(gdl_real) * (size_t)D);
        else memcpy(out + i * D, W + (int64_t)idx[i] * D, sizeof(gdl_real) * (size_t)D);
    }
    return 0;
}
static int gdl__cpu_embedding_backward(int64_t n, int64_t D, int64_t V, const int32_t *idx, const gdl_real *gy,
                                       gdl_real *gW) {
    int64_t i, k;
    for (i = 0; i < n; i++)
        if (idx[i] >= 0 && idx[i] < V)
            for (k = 0; k < D; k++) gW[(int64_t)idx[i] * D + k] += gy[i * D + k];
    return 0;
}

/* log-sum-exp of a row, stable */
static double gdl__lse(const gdl_real *p, int64_t C) {
    double mx = -INFINITY, s = 0;
    int64_t c;
    for (c = 0; c < C; c++)
        if (p[c] > mx) mx = p[c];
    for (c = 0; c < C; c++) s += exp(p[c] - mx);
    return mx + log(s);
}

static int gdl__cpu_xent(int64_t B, int64_t C, const gdl_real *x, const int32_t *tgt, int ignore_index,
                         double smoothing, int from_log_probs, int reduction, gdl_real *rows, gdl_real *out,
                         gdl_real *count) {
    int64_t b, c, cnt = 0;
    double total = 0;
    for (b = 0; b < B; b++) {
        const gdl_real *p = x + b * C;
        double lse = from_log_probs ? 0 : gdl__lse(p, C), sum_lp = 0, l;
        if (tgt[b] == ignore_index) {
            rows[b] = 0;
            continue;
        }
        if (smoothing > 0)
            for (c = 0; c < C; c++) sum_lp += p[c] - lse;
        l = -((1 - smoothing) * (p[tgt[b]] - lse) + smoothing / (double)C * sum_lp);
        rows[b] = (gdl_real)l;
        total += l;
        cnt++;
    }
    if (count) count[0] = (gdl_real)cnt;
    if (reduction == GDL_REDUCE_SUM) out[0] = (gdl_real)total;
    else if (reduction == GDL_REDUCE_MEAN) out[0] = (gdl_real)(total / (double)cnt); /* 0/0 = NaN as PyTorch */
    return 0;
}

static int gdl__cpu_xent_backward(int64_t B, int64_t C, const gdl_real *x, const int32_t *tgt, int ignore_index,
                                  double smoothing, int from_log_probs, int reduction, const gdl_real *gy,
                                  const gdl_real *count, gdl_real *gx) {
    int64_t b, c;
    for (b = 0; b < B; b++) {
        const gdl_real *p = x + b * C;
        double g, lse;
        if (tgt[b] == ignore_index) continue;
        g = reduction == GDL_REDUCE_NONE ? gy[b] : reduction == GDL_REDUCE_SUM ? gy[0] : gy[0] / (double)count[0];
        lse = from_log_probs ? 0 : gdl__lse(p, C);
        for (c = 0; c < C; c++) {
            double target = (1 - smoothing) * (c == tgt[b]) + smoothing / (double)C;
            double d = from_log_probs ? -target : exp(p[c] - lse) - target;
            gx[b * C + c] += (gdl_real)(g * d);
        }
    }
    return 0;
}

static int gdl__cpu_pointwise_loss(int kind, int64_t n, const gdl_real *x, const gdl_real *y, gdl_real *out) {
    int64_t i;
    for (i = 0; i < n; i++) {
        double a = x[i], t = y[i];
        out[i] = (gdl_real)(kind == GDL_LOSS_MSE ? (a - t) * (a - t) : (a > 0 ? a : 0) - a * t + log1p(exp(-fabs(a))));
    }
    return 0;
}
static int gdl__cpu_pointwise_loss_backward(int kind, int64_t n, const gdl_real *x, const gdl_real *y,
                                            const gdl_real *gout, gdl_real *gx, gdl_real *gy) {
    int64_t i;
    for (i = 0; i < n; i++) {
        double a = x[i], t = y[i], g = gout[i];
        if (kind == GDL_LOSS_MSE) {
            if (gx) gx[i] += (gdl_real)(2 * (a - t) * g);
            if (gy) gy[i] -= (gdl_real)(2 * (a - t) * g);
        } else {
            if (gx) gx[i] += (gdl_real)((1.0 / (1.0 + exp(-a)) - t) * g);
            if (gy) gy[i] -= (gdl_real)(a * g);
        }
    }
    return 0;
}

/* master weights: a low-precision gradient element in f32, and an f32 master rounded (nearest even); bf16 spelt
   out (gdl_bf16_to_f32, gdl_f32_to_bf16) so the loops below keep no call */
static float gdl__opt_lowf(int low, uint16_t h) {
    return low == GDL_F16 ? gdl_f16_to_f32(h) : gdl__bits_f32((uint32_t)h << 16);
}
static uint16_t gdl__opt_round(int low, float f) {
    uint32_t x, r, q;
    if (low == GDL_F16) return gdl_f32_to_f16(f);
    x = gdl__f32_bits(f);
    r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    q = (x >> 16) | 0x40u;                                  /* a NaN stays a (quiet) NaN */
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? q : r); /* a select: the loops vectorise */
}
/* The optimizers' parts update the elements [lo, hi) of the tensor a.t with
   its group's hyper-parameters (both copied: see gdl__args). */
static void gdl__sgd_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_opt_tensor t = *a.t;
    const gdl_opt_hyper h = *t.hyper;
    gdl_real *p = t.p, *buf = t.s1; /* s1: the momentum buffer */
    const gdl_real *g = t.g;
    const double momentum = buf ? h.momentum : 0;
    const int first_step = a.op; /* the buffer starts as the gradient */
    /* locals, and first_step from the caller: gcc then unswitches the loops on them (a vectorised
       version each); with first_step read from *t.step here it does not (gcc 12, -fopt-info-vec) */
    const double lr = h.lr, dampening = h.dampening, weight_decay = h.weight_decay;
    const int nesterov = h.nesterov;
    int64_t i;
    if (t.low) { /* the same formula on the f32 master, the gradient read from dtype low */
        const uint16_t *glow = (const uint16_t *)t.glow;
        uint16_t *plow = (uint16_t *)t.plow;
        const int low = t.low;
        if (low == GDL_BF16) /* the loop below with the dtype a constant (no call: vectorised) */
            for (i = lo; i < hi; i++) {
                double d = (double)gdl__opt_lowf(GDL_BF16, glow[i]) + weight_decay * p[i];
                if (momentum != 0) {
                    double b = first_step ? d : momentum * buf[i] + (1 - dampening) * d;
                    buf[i] = (gdl_real)b;
                    d = nesterov ? d + momentum * b : b;
                }
                p[i] = (gdl_real)(p[i] - lr * d);
                plow[i] = gdl__opt_round(GDL_BF16, (float)p[i]);
            }
        else for (i = lo; i < hi; i++) {
            double d = (double)gdl__opt_lowf(low, glow[i]) + weight_decay * p[i];
            if (momentum != 0) {
                double b = first_step ? d : momentum * buf[i] + (1 - dampening) * d;
                buf[i] = (gdl_real)b;
                d = nesterov ? d + momentum * b : b;
            }
            p[i] = (gdl_real)(p[i] - lr * d);
            plow[i] = gdl__opt_round(low, (float)p[i]);
        }
        return;
    }
    for (i = lo; i < hi; i++) {
        double d = g[i] + weight_decay * p[i];
        if (momentum != 0) {
            double b = first_step ? d : momentum * buf[i] + (1 - dampening) * d;
            buf[i] = (gdl_real)b;
            d = nesterov ? d + momentum * b : b;
        }
        p[i] = (gdl_real)(p[i] - lr * d);
    }
}
/* The CPU's table is a copy of the entries: device memory is host memory. */
typedef struct {
    int count;
    gdl_opt_tensor t[1];
} gdl__cpu_opt_table;
static void *gdl__cpu_opt_table_new(int count, const gdl_opt_tensor *t) {
    gdl__cpu_opt_table *tab;
    if (count < 0) count = 0;
    tab = (gdl__cpu_opt_table *)GPUDL_MALLOC(sizeof(gdl__cpu_opt_table) + sizeof(gdl_opt_tensor) * (size_t)count);
    if (!tab) {
        gdl__set_error("gdl: out of memory for the optimizer's table of %d tensors", count);
        return NULL;
    }
    tab->count = count;
    if (count) memcpy(tab->t, t, sizeof(gdl_opt_tensor) * (size_t)count);
    return tab;
}
static void gdl__cpu_opt_table_free(void *table) { GPUDL_FREE(table); }
static void gdl__cpu_opt_count(const gdl__cpu_opt_table *tab) {
    int k;
    for (k = 0; k < tab->count; k++)
        if (tab->t[k].step && *tab->t[k].step < INT32_MAX) (*tab->t[k].step)++;
}
/* GradScaler's found_inf set: the step is skipped, counts included */
static int gdl__cpu_opt_skipped(const gdl__cpu_opt_table *tab) {
    return tab->count > 0 && tab->t[0].skip && *tab->t[0].skip != 0;
}
static int gdl__cpu_sgd_multi(const void *table) {
    const gdl__cpu_opt_table *tab = (const gdl__cpu_opt_table *)table;
    int k;
    if (gdl__cpu_opt_skipped(tab)) return 0;
    for (k = 0; k < tab->count; k++) {
        const gdl_opt_tensor *t = &tab->t[k];
        gdl__args a = gdl__args_none();
        a.t = t; a.op = !t->step || *t->step == 0;
        gdl__parallel_loop(t->n, t->n, gdl__sgd_part, &a);
    }
    gdl__cpu_opt_count(tab);
    return 0;
}

#if defined(GDL__GEMM_AVX512)
/* master weights, 8 bf16 at a time: widened exactly; rounded as gdl__opt_round (nearest even, NaN kept quiet) */
static __m256 gdl__bf16v_load(const uint16_t *h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)h)), 16));
}
static void gdl__bf16v_store(uint16_t *h, __m256 f) {
    const __m256i x = _mm256_castps_si256(f), one = _mm256_set1_epi32(1);
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
                                 _mm256_and_si256(_mm256_srli_epi32(x, 16), one));
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), q, nan);
    r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08); /* the 8 halves, in order, in the low 128 bits */
    _mm_storeu_si128((__m128i *)h, _mm256_castsi256_si128(r));
}
#elif defined(GDL__GEMM_AVX2)
/* the same, 4 at a time */
static __m128 gdl__bf16v_load(const uint16_t *h) {
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)h)), 16));
}
static void gdl__bf16v_store(uint16_t *h, __m128 f) {
    const __m128i x = _mm_castps_si128(f), one = _mm_set1_epi32(1);
    __m128i r = _mm_add_epi32(_mm_add_epi32(x, _mm_set1_epi32(0x7fff)), _mm_and_si128(_mm_srli_epi32(x, 16), one));
    __m128i q = _mm_or_si128(_mm_srli_epi32(x, 16), _mm_set1_epi32(0x40));
    __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(x, _mm_set1_epi32(0x7fffffff)), _mm_set1_epi32(0x7f800000));
    r = _mm_blendv_epi8(_mm_srli_epi32(r, 16), q, nan);
    _mm_storel_epi64((__m128i *)h, _mm_packus_epi32(r, r));
}
#endif
static void gdl__adam_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_opt_tensor t = *a.t;
    const gdl_opt_hyper h = *t.hyper;
    gdl_real *p = t.p, *m = t.s1, *v = t.s2; /* s1, s2: exp_avg, exp_avg_sq */
    const gdl_real *g = t.g;
    const int decoupled = a.op; /* AdamW */
    const double lr = h.lr, beta1 = h.beta1, beta2 = h.beta2, eps = h.eps, weight_decay = h.weight_decay;
    const int64_t stp = t.step ? *t.step : 0, step = stp < INT32_MAX ? stp + 1 : stp;
    int64_t i = lo;
    double bc1 = 1 - pow(beta1, (double)step), bc2 = 1 - pow(beta2, (double)step);
#if defined(GDL__GEMM_AVX512) || defined(GDL__GEMM_AVX2)
    /* the loop below, 8 (4) elements at a time: the same operations in
       double, so the same bits; compilers do not vectorise the loop itself
       (sqrt's errno). Master weights in bf16 too (bg, bp: the gradient read
       from bf16, the parameter rounded to it); f16's go to the scalar loop. */
    if (!t.low || t.low == GDL_BF16) {
        const uint16_t *bg = t.low ? (const uint16_t *)t.glow : NULL;
        uint16_t *bp = t.low ? (uint16_t *)t.plow : NULL;
#ifdef GDL__GEMM_AVX512
#define GDL__AW 8
#define GDL__AV(f) _mm512_##f
#define GDL__AF(f) _mm256_##f
        typedef __m512d vd;
        typedef __m256 vf;
#else
#define GDL__AW 4
#define GDL__AV(f) _mm256_##f
#define GDL__AF(f) _mm_##f
        typedef __m256d vd;
        typedef __m128 vf;
#endif
        const vd b1 = GDL__AV(set1_pd)(beta1), b1c = GDL__AV(set1_pd)(1 - beta1), b2 = GDL__AV(set1_pd)(beta2);
        const vd b2c = GDL__AV(set1_pd)(1 - beta2), vlr = GDL__AV(set1_pd)(lr), vbc1 = GDL__AV(set1_pd)(bc1);
        const vd vbc2 = GDL__AV(set1_pd)(bc2), veps = GDL__AV(set1_pd)(eps);
        const vd vwd = GDL__AV(set1_pd)(decoupled ? lr * weight_decay : weight_decay);
        for (; i + GDL__AW <= hi; i += GDL__AW) {
            vd gi = GDL__AV(cvtps_pd)(bg ? gdl__bf16v_load(bg + i) : GDL__AF(loadu_ps)(g + i));
            vd pi = GDL__AV(cvtps_pd)(GDL__AF(loadu_ps)(p + i)), md, den;
            vf mf, vv, pn;
            if (decoupled) pi = GDL__AV(sub_pd)(pi, GDL__AV(mul_pd)(vwd, pi));
            else gi = GDL__AV(add_pd)(gi, GDL__AV(mul_pd)(vwd, pi));
            mf = GDL__AV(cvtpd_ps)(GDL__AV(add_pd)(GDL__AV(mul_pd)(b1, GDL__AV(cvtps_pd)(GDL__AF(loadu_ps)(m + i))),
                                                   GDL__AV(mul_pd)(b1c, gi)));
            vv = GDL__AV(cvtpd_ps)(GDL__AV(add_pd)(GDL__AV(mul_pd)(b2, GDL__AV(cvtps_pd)(GDL__AF(loadu_ps)(v + i))),
                                                   GDL__AV(mul_pd)(GDL__AV(mul_pd)(b2c, gi), gi)));
            GDL__AF(storeu_ps)(m + i, mf);
            GDL__AF(storeu_ps)(v + i, vv);
            md = GDL__AV(mul_pd)(vlr, GDL__AV(div_pd)(GDL__AV(cvtps_pd)(mf), vbc1));
            den = GDL__AV(add_pd)(GDL__AV(sqrt_pd)(GDL__AV(div_pd)(GDL__AV(cvtps_pd)(vv), vbc2)), veps);
            pn = GDL__AV(cvtpd_ps)(GDL__AV(sub_pd)(pi, GDL__AV(div_pd)(md, den)));
            GDL__AF(storeu_ps)(p + i, pn);
            if (bp) gdl__bf16v_store(bp + i, pn);
        }
#undef GDL__AW
#undef GDL__AV
#undef GDL__AF
    }
#endif
    if (t.low) { /* the scalar loop below on the f32 master, the gradient read from dtype low */
        const uint16_t *glow = (const uint16_t *)t.glow;
        uint16_t *plow = (uint16_t *)t.plow;
        const int low = t.low;
        for (; i < hi; i++) {
            double gi = gdl__opt_lowf(low, glow[i]), pi = p[i];
            gdl_real mi, vi;
            if (decoupled) pi -= lr * weight_decay * pi;
            else gi += weight_decay * pi;
            m[i] = mi = (gdl_real)(beta1 * m[i] + (1 - beta1) * gi);
            v[i] = vi = (gdl_real)(beta2 * v[i] + (1 - beta2) * gi * gi);
            p[i] = (gdl_real)(pi - lr * (mi / bc1) / (sqrt(vi / bc2) + eps));
            plow[i] = gdl__opt_round(low, (float)p[i]);
        }
        return;
    }
    for (; i < hi; i++) {
        double gi = g[i], pi = p[i];
        if (decoupled) pi -= lr * weight_decay * pi;
        else gi += weight_decay * pi;
        m[i] = (gdl_real)(beta1 * m[i] + (1 - beta1) * gi);
        v[i] = (gdl_real)(beta2 * v[i] + (1 - beta2) * gi * gi);
        p[i] = (gdl_real)(pi - lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + eps));
    }
}
static int gdl__cpu_adam_multi(const void *table, int decoupled) {
    const gdl__cpu_opt_table *tab = (const gdl__cpu_opt_table *)table;
    int k;
    if (gdl__cpu_opt_skipped(tab)) return 0;
    for (k = 0; k < tab->count; k++) {
        const gdl_opt_tensor *t = &tab->t[k];
        gdl__args a = gdl__args_none();
        a.t = t; a.op = decoupled;
        gdl__parallel_loop(t->n, t->n, gdl__adam_part, &a);
    }
    gdl__cpu_opt_count(tab);
    return 0;
}

static int gdl__cpu_amp_unscale(int64_t n, gdl_real *g, const gdl_real *scale, gdl_real *found_inf,
                                gdl_real *found_inf2) {
    float inv = (float)(1.0 / (double)*scale); /* PyTorch: scale.double().reciprocal().float() */
    int64_t i;
    int found = 0;
    for (i = 0; i < n; i++) {
        found |= !(g[i] - g[i] == 0); /* inf and NaN give NaN */
        if (inv != 1.0f) g[i] = (gdl_real)(g[i] * inv);
    }
    if (found) {
        *found_inf = 1;
        if (found_inf2) *found_inf2 = 1;
    }
    return 0;
}
static int gdl__cpu_amp_update_scale(gdl_real *scale, int32_t *tracker, gdl_real *found_inf, double growth,
                                     double backoff, int interval) {
    if (*found_inf != 0) {
        *scale = (gdl_real)(float)(*scale * backoff);
        *tracker = 0;
    } else if (*tracker + 1 >= interval) {
        float grown = (float)(*scale * growth);
        if (grown - grown == 0) *scale = (gdl_real)grown;
        *tracker = 0;
    } else {
        (*tracker)++;
    }
    *found_inf = 0;
    return 0;
}
static int gdl__cpu_fit_metrics(const gdl_real *loss, int64_t B, int64_t C, const gdl_real *logits, const int32_t *y,
                                double *acc) {
    acc[0] += (double)loss[0] * (double)B;
    acc[1] += (double)B;
    if (logits) {
        int64_t r, k, correct = 0;
        for (r = 0; r < B; r++) {
            const gdl_real *p = logits + r * C;
            int64_t best = 0;
            for (k = 1; k < C; k++)
                if (p[k] > p[best] || (p[k] != p[k] && p[best] == p[best])) best = k; /* gdl__cpu_argmax's rule */
            correct += best == y[r];
        }
        acc[2] += (double)correct;
        acc[3] += (double)B;
    }
    return 0;
}
static int gdl__cpu_clip_grad_norm(int count, gdl_real *const *g, const int64_t *n, double max_norm, double *norm) {
    double total = 0, nrm, coef;
    int i;
    for (i = 0; i < count; i++) {
        double s = 0;
        int64_t j;
        for (j = 0; j < n[i]; j++) s += (double)g[i][j] * g[i][j];
        total += s;
    }
    nrm = sqrt(total);
    coef = max_norm / (nrm + 1e-6);
    if (norm) *norm = nrm;
    if (!(coef >= 1)) /* PyTorch multiplies by min(coef, 1); a NaN norm spreads NaN as there */
        for (i = 0; i < count; i++) {
            int64_t j;
            for (j = 0; j < n[i]; j++) g[i][j] = (gdl_real)coef * g[i][j];
        }
    return 0;
}
static int gdl__cpu_count_nonfinite(int64_t n, const gdl_real *x, int64_t *out) {
    int64_t i, c = 0;
    for (i = 0; i < n; i++) c += !(x[i] - x[i] == 0); /* NaN and Inf give NaN */
    *out = c;
    return 0;
}
static int gdl__cpu_sum_squares(int64_t n, const gdl_real *x, double *out) {
    int64_t i;
    double s = 0;
    for (i = 0; i < n; i++) s += (double)x[i] * x[i];
    *out = s;
    return 0;
}

/* The profiler's and the monitor's entries that a CPU has nothing for: its
   ops are timed with the host clock, it launches no kernels, it has no PCI
   bus id. */
static void *gdl__cpu_timing_event(void) { return NULL; }
static int gdl__cpu_event_elapsed(void *start, void *end, double *ms) {
    (void)start;
    (void)end;
    (void)ms;
    gdl__set_error("gdl: the CPU has no timing events (its ops are timed with the host clock)");
    return -1;
}
static int64_t gdl__cpu_launch_count(void) { return -1; }
static int gdl__cpu_pci_bus_id(int device, char *buf, int len) {
    (void)device;
    if (buf && len > 0) buf[0] = 0;
    gdl__set_error("gdl: the CPU has no PCI bus id");
    return -1;
}

/* No graphs on the CPU: gdl_graph_* call the step itself there. */
static int gdl__cpu_graph_begin(void) {
    gdl__set_error("gdl: the CPU has no CUDA graphs");
    return -1;
}
static int gdl__cpu_graph_end(void **graph) {
    *graph = NULL;
    return gdl__cpu_graph_begin();
}
static int gdl__cpu_graph_launch(void *graph) {
    (void)graph;
    return gdl__cpu_graph_begin();
}
static void gdl__cpu_graph_destroy(void *graph) { (void)graph; }

/* Collectives of CPU tensors are MPI's ([impl-dist]), not the backend's. */
static int gdl__cpu_no_comm(void) {
    gdl__set_error("gdl: the CPU backend has no communicator: collectives of CPU tensors go through MPI");
    return -1;
}
static int gdl__cpu_comm_id(void *id, int bytes) {
    (void)id;
    (void)bytes;
    return gdl__cpu_no_comm();
}
static int gdl__cpu_comm_init(int device, const void *id, int world, int rank) {
    (void)device, (void)id, (void)world, (void)rank;
    return gdl__cpu_no_comm();
}
static int gdl__cpu_collective(int kind, const void *send, void *recv, int64_t count, gdl_dtype dt, int avg,
                               int root, int join) {
    (void)kind, (void)send, (void)recv, (void)count, (void)dt, (void)avg, (void)root, (void)join;
    return gdl__cpu_no_comm();
}
static int gdl__cpu_comm_join(void) { return gdl__cpu_no_comm(); }
static int gdl__cpu_comm_sync(int barrier, double timeout_s) {
    (void)barrier, (void)timeout_s;
    return gdl__cpu_no_comm();
}
static void gdl__cpu_comm_destroy(void) {}

/* The table is the list's entries in the list's order (the struct is made
   from the same list): a constant, ready before any thread asks for it. */
#define GDL__BACKEND_INIT_CPU(ret, entry, params) gdl__cpu_##entry,
static const gdl_backend gdl__cpu_table = {"cpu", GDL_BACKEND_ENTRIES(GDL__BACKEND_INIT_CPU)};
#undef GDL__BACKEND_INIT_CPU
static const gdl_backend *gdl__cpu_backend(void) { return &gdl__cpu_table; }

/* ---------------------------------------------------------------------------
   [impl-ops]   The op layer: check arguments, allocate the output, call the
   backend, record a tape node. Each op's backward is listed in the op table
   (gdl__ops, at the end of this section) under its gdl_op id.
   ------------------------------------------------------------------------- */

typedef struct gdl_node {
    int op;               /* gdl_op */
    int nin;
    gdl_tensor **in;      /* inputs; an entry may be NULL (optional bias) */
    gdl_tensor *out;
    gdl_tensor *saved[2]; /* extra tensors kept for backward (indices, stats) */
    void *buf;            /* scratch kept for backward (im2col columns) */
    int64_t i[8];         /* integer parameters */
    double f[2];          /* real parameters */
    gdl_conv_geom geom;
    struct gdl_node *prev;
} gdl_node;

typedef int (*gdl__backward_fn)(gdl_node *n, const gdl_backend *be);
typedef struct gdl__op_info {
    const char *name;
    gdl__backward_fn backward;
    int kernel; /* the backend's gdl_binary_op / gdl_unary_op / gdl_reduce_op code */
    int autocast; /* gdl_autocast_class */
} gdl__op_info;
static const gdl__op_info *gdl__op(int op); /* the op table, defined after the ops */

#define GDL__R(t) ((gdl_real *)(t)->data)
#define GDL__G(t) ((t) && (t)->requires_grad ? (gdl_real *)(t)->grad->data : (gdl_real *)NULL)

GPUDL_API const char *gdl_op_name(int op) {
    return (op >= 0 && op < GDL_OP_COUNT) ? gdl__op(op)->name : "invalid-op";
}
GPUDL_API int gdl_op_autocast_class(int op) { return (op >= 0 && op < GDL_OP_COUNT) ? gdl__op(op)->autocast : -1; }
GPUDL_API int gdl_tensor_op(const gdl_tensor *t) { return t && t->node ? t->node->op : -1; }

GPUDL_API int gdl_set_grad_enabled(int on) {
    int prev = gdl__grad_enabled;
    gdl__grad_enabled = on != 0;
    return prev;
}
GPUDL_API int gdl_is_grad_enabled(void) { return gdl__grad_enabled; }
GPUDL_API void gdl_set_anomaly_mode(int on) { gdl__anomaly = on != 0; }

static int gdl__check_in(const char *op, const char *arg, const gdl_tensor *t, int need_f32) {
    if (!t) {
        gdl__null_arg(op, arg);
        return -1;
    }
    if (gdl__stale(op, arg, t) < 0) return -1;
    if (need_f32 && t->dtype != GDL_F32) {
        gdl__set_error(t->dtype == GDL_F16 || t->dtype == GDL_BF16 ? "%s: %s must be f32 here (no bf16/f16 path), got %s %s"
                                                                   : "%s: %s must be a float tensor, got %s %s",
                       op, arg, gdl_dtype_name(t->dtype), gdl_shape_str(t));
        return -1;
    }
    return 0;
}

static int gdl__check_dev(const char *op, const gdl_tensor *a, const gdl_tensor *b) {
    if (a && b && !gdl_device_equal(a->device, b->device)) {
        gdl__set_error("%s: expected all tensors on the same device, but found %s %s and %s %s", op,
                       gdl_shape_str(a), gdl_device_str(a->device), gdl_shape_str(b), gdl_device_str(b->device));
        return -1;
    }
    return 0;
}

/* The two tensors of an op (a_f32, b_f32: f32 only), each checked, then on one device. */
static int gdl__check_two(const char *op, const char *aname, const gdl_tensor *a, int a_f32, const char *bname,
                          const gdl_tensor *b, int b_f32) {
    if (gdl__check_in(op, aname, a, a_f32) < 0 || gdl__check_in(op, bname, b, b_f32) < 0 || gdl__check_dev(op, a, b) < 0)
        return -1;
    return 0;
}

/* The input, weight and optional bias of an op (linear, convolution; need_f32: f32 only), each checked, then
   all on the input's device. */
static int gdl__check_xwb(const char *op, const gdl_tensor *x, const gdl_tensor *w, const gdl_tensor *bias,
                          int need_f32) {
    if (gdl__check_in(op, "input", x, need_f32) < 0 || gdl__check_in(op, "weight", w, need_f32) < 0 ||
        (bias && gdl__check_in(op, "bias", bias, need_f32) < 0) || gdl__check_dev(op, x, w) < 0 ||
        gdl__check_dev(op, x, bias) < 0)
        return -1;
    return 0;
}

static int gdl__needs_grad(int nin, gdl_tensor *const *in) {
    int k;
    if (!gdl__grad_enabled) return 0;
    for (k = 0; k < nin; k++)
        if (in[k] && in[k]->requires_grad) return 1;
    return 0;
}

/* Records out = op(in...) on the tape when an input needs a gradient.
   Returns the node, or NULL when none is needed (*err set on failure). */
static gdl_node *gdl__record(const char *opname, int op, gdl_tensor *out, int nin, gdl_tensor *const *in, int *err) {
    gdl_node *n;
    *err = 0;
    if (!gdl__needs_grad(nin, in)) return NULL;
    n = (gdl_node *)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_node));
    if (n) {
        memset(n, 0, sizeof *n);
        n->in = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)nin);
    }
    if (!n || !n->in) {
        gdl__set_error("%s: out of memory recording the autograd tape", opname);
        *err = 1;
        return NULL;
    }
    memcpy(n->in, in, sizeof(gdl_tensor *) * (size_t)nin);
    n->op = op;
    n->nin = nin;
    n->out = out;
    n->prev = gdl__tape;
    gdl__tape = n;
    out->node = n;
    out->requires_grad = 1;
    return n;
}

/* Anomaly mode: fail on a non-finite output. */
static gdl_tensor *gdl__finish(const char *op, gdl_tensor *out) {
    int64_t bad = 0;
    if (gdl__prof_on) gdl__prof_close(op);
    if (out && gdl__anomaly && (out->dtype == GDL_F32 || out->dtype == GDL_F16 || out->dtype == GDL_BF16)) {
        const gdl_backend *be = gdl__be(op, out->device);
        gdl_real *f = GDL__R(out);
        if (!be) return NULL;
        if (out->dtype != GDL_F32 && /* a native low-precision op's output: checked in f32 */
            (!(f = (gdl_real *)gdl__scratch(op, out->device, sizeof(gdl_real) * (size_t)(out->numel + 1))) ||
             be->cast(f, GDL_F32, out->data, out->dtype, out->numel) < 0))
            return NULL;
        if (be->count_nonfinite(out->numel, f, &bad) < 0) return NULL;
        if (bad) {
            gdl__set_error("%s: produced %lld NaN/Inf values in its output %s (anomaly mode)", op, (long long)bad,
                           gdl_shape_str(out));
            return NULL;
        }
    }
    return out;
}

/* ---- run-time dtypes ----
   The kernels compute in f32 (gdl_real). An op given bf16 or f16 inputs
   without a native path (matmul, linear, conv2d, the poolings and
   batch_norm have one: their *_lp backend entries) runs through
   gdl__lowp_in / gdl__lowp_out, the one place that knows about low
   precision: each low-precision input becomes an f32 temporary (a
   differentiable cast), the f32 op runs unchanged, and its result is rounded
   once to the output dtype (another cast). That is PyTorch's "compute in
   opmath (f32), round the output". Autograd needs nothing else: the casts
   are tape nodes, so a bf16 tensor's gradient arrives in bf16. The ops that
   have native low-precision kernels (matmul, linear, the elementwise ones:
   gdl__lp_native) test for one low dtype before the hook and skip it. */

static int gdl__is_float(gdl_dtype dt) { return dt == GDL_F32 || dt == GDL_F16 || dt == GDL_BF16; }
static int gdl__is_low(gdl_dtype dt) { return dt == GDL_F16 || dt == GDL_BF16; }

/* PyTorch's promotion among the float dtypes: equal stays, anything else is
   f32 (f32 + bf16, f16 + bf16) */
static gdl_dtype gdl__promote(gdl_dtype a, gdl_dtype b) { return a == b ? a : GDL_F32; }

/* dst += src over n elements of any float dtypes (sums in f32, rounds once) */
static int gdl__acc_any(const char *op, const gdl_backend *be, gdl_device dev, void *dst, gdl_dtype ddt,
                        const void *src, gdl_dtype sdt, int64_t n) {
    static const int64_t one = 1;
    (void)op;
    (void)dev;
    if (n <= 0) return 0;
    if (sdt == GDL_F32 && ddt == GDL_F32) return be->copy2d(1, n, (const gdl_real *)src, 0, (gdl_real *)dst, 0, 1);
    /* in place, no f32 copies: the sum is formed in f32 and rounded once */
    return be->binary_lp(GDL_BIN_ADD, 1, &n, ddt, dst, &one, sdt, src, &one, ddt, dst);
}

/* a new temporary x converted to dt; recorded (GDL_OP_CAST) when x needs a
   gradient and both dtypes are floats */
static gdl_tensor *gdl__cast_t(const char *op, gdl_tensor *x, gdl_dtype dt) {
    gdl_tensor *r;
    const gdl_backend *be;
    int err;
    if (!(be = gdl__be(op, x->device)) || !(r = gdl__tmp(op, x->ndim, x->shape, dt, x->device))) return NULL;
    if (x->numel && be->cast(r->data, dt, x->data, x->dtype, x->numel) < 0) return NULL;
    r->name = x->name;
    if (gdl__is_float(x->dtype) && gdl__is_float(dt)) {
        gdl__record(op, GDL_OP_CAST, r, 1, &x, &err);
        if (err) return NULL;
    }
    return r;
}

static int gdl__bw_cast(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    if (!x->requires_grad) return 0;
    return gdl__acc_any("gdl_backward", be, x->device, x->grad->data, x->grad->dtype, n->out->grad->data,
                        n->out->grad->dtype, x->numel);
}

/* ---- autocast (MANUAL: Mixed precision) ----
   The state is per host thread, as torch.autocast's: the dtype ops of class
   GDL_AUTOCAST_LOW run in (GDL_F32 = off, so the hooks' test is one compare
   of it), the enclosing regions' dtypes, and the cache of parameters' casts.
   A cache entry is valid only in the arena generation it was made in: the
   cast is a temporary, and gdl_arena_reset hands its memory to the next
   step. */
#define GDL__AC_DEPTH 32
#define GDL__AC_CACHE 256
typedef struct gdl__ac_entry {
    const gdl_tensor *src;
    gdl_tensor *cast;
    unsigned gen;
} gdl__ac_entry;
static GDL__TLS gdl_dtype gdl__ac_dt = GDL_F32;
static GDL__TLS int gdl__ac_depth;
static GDL__TLS gdl_dtype gdl__ac_outer[GDL__AC_DEPTH];
static GDL__TLS gdl__ac_entry gdl__ac_cache[GDL__AC_CACHE];
static GDL__TLS int gdl__ac_ncache;
static GDL__TLS int64_t gdl__ac_stat[2]; /* casts made, cache hits */

GPUDL_API int gdl_autocast_begin(gdl_dtype dt) {
    if (dt != GDL_BF16 && dt != GDL_F16) {
        gdl__set_error("gdl_autocast_begin: the autocast dtype must be bf16 or f16, got %s", gdl_dtype_name(dt));
        return -1;
    }
    if (gdl__ac_depth == GDL__AC_DEPTH) {
        gdl__set_error("gdl_autocast_begin: more than %d nested autocast regions", GDL__AC_DEPTH);
        return -1;
    }
    gdl__ac_outer[gdl__ac_depth++] = gdl__ac_dt;
    gdl__ac_dt = dt;
    return 0;
}

GPUDL_API int gdl_autocast_end(void) {
    if (gdl__ac_depth == 0) {
        gdl__set_error("gdl_autocast_end: no autocast region is open on this thread (gdl_autocast_begin)");
        return -1;
    }
    gdl__ac_dt = gdl__ac_outer[--gdl__ac_depth];
    if (gdl__ac_depth == 0) gdl__ac_ncache = 0; /* torch.autocast drops its cache on leaving the outermost region */
    return 0;
}

GPUDL_API gdl_dtype gdl_autocast_dtype(void) { return gdl__ac_dt; }
GPUDL_API int gdl_autocast_enabled(void) { return gdl__ac_dt != GDL_F32; }
GPUDL_API void gdl_autocast_stats(int64_t *casts, int64_t *cache_hits) {
    if (casts) *casts = gdl__ac_stat[0];
    if (cache_hits) *cache_hits = gdl__ac_stat[1];
}

/* x in dt for an autocast op. A parameter (a persistent leaf that requires a
   gradient) going to a low dtype is cast once per region and step, as
   torch.autocast caches: a weight used by several ops is rounded once and
   its gradient arrives through one cast, in f32. */
static gdl_tensor *gdl__ac_cast(const char *op, gdl_tensor *x, gdl_dtype dt) {
    int i, cache = gdl__is_low(dt) && x->requires_grad && !x->node && gdl__is_persistent(x);
    gdl_tensor *r;
    if (cache)
        for (i = 0; i < gdl__ac_ncache; i++)
            if (gdl__ac_cache[i].src == x && gdl__ac_cache[i].gen == gdl__arena_gen && gdl__ac_cache[i].cast->dtype == dt &&
                (gdl__ac_cache[i].cast->node != NULL) == (gdl__grad_enabled != 0)) { /* a no-grad cast has no way back */
                gdl__ac_stat[1]++;
                return gdl__ac_cache[i].cast;
            }
    if (!(r = gdl__cast_t(op, x, dt))) return NULL;
    gdl__ac_stat[0]++;
    if (cache) {
        for (i = 0; i < gdl__ac_ncache && gdl__ac_cache[i].gen == gdl__arena_gen; i++) {}
        if (i == gdl__ac_ncache && i < GDL__AC_CACHE) gdl__ac_ncache++; /* else a stale entry's slot, or none */
        if (i < GDL__AC_CACHE) {
            gdl__ac_cache[i].src = x;
            gdl__ac_cache[i].cast = r;
            gdl__ac_cache[i].gen = gdl__arena_gen;
        }
    }
    return r;
}

/* a native low-precision GEMM in dt is what autocast wants (or autocast is off) */
static int gdl__ac_native(gdl_dtype dt) { return gdl__ac_dt == GDL_F32 || gdl__ac_dt == dt; }

/* An op on input, weight and optional bias (linear, convolution) leaves its f32 path: autocast is on, or one
   of them is not f32. */
static int gdl__xwb_not_f32(const gdl_tensor *x, const gdl_tensor *w, const gdl_tensor *bias) {
    return gdl__ac_dt != GDL_F32 || (x && x->dtype != GDL_F32) || (w && w->dtype != GDL_F32) ||
           (bias && bias->dtype != GDL_F32);
}

/* ... and runs natively in their dtype: all of one low dtype, which autocast wants (or autocast is off). */
static int gdl__xwb_native(const gdl_tensor *x, const gdl_tensor *w, const gdl_tensor *bias) {
    return x && w && x->dtype == w->dtype && gdl__is_low(x->dtype) && (!bias || bias->dtype == x->dtype) &&
           gdl__ac_native(x->dtype);
}

/* an elementwise op (opid) whose float inputs all have the low dtype dt runs
   natively in dt (the backend's *_lp kernels) unless autocast wants its
   inputs cast: class F32 (exp, log, pow_scalar) in a region, or class LOW in
   a region of the other low dtype */
static int gdl__lp_native(int opid, gdl_dtype dt) {
    int cls;
    if (!gdl__is_low(dt)) return 0;
    if (gdl__ac_dt == GDL_F32) return 1;
    cls = gdl__op(opid)->autocast;
    return cls == GDL_AUTOCAST_PROMOTE || (cls == GDL_AUTOCAST_LOW && gdl__ac_dt == dt);
}

/* Autocast's part of the hooks' slow path: an op of class LOW (F32) whose
   float arguments are not all the autocast dtype (f32) gets them cast, and
   `call` re-runs it on them: 1. Otherwise 0, and the op goes on as outside
   autocast (class PROMOTE always does). */
static int gdl__ac_in(const char *op, int opid, int n, gdl_tensor **const *args) {
    int k, j, cls = opid >= 0 ? gdl__op(opid)->autocast : GDL_AUTOCAST_PROMOTE;
    gdl_tensor *orig[8] = {0};
    gdl_dtype to;
    if (cls == GDL_AUTOCAST_PROMOTE) return 0;
    to = cls == GDL_AUTOCAST_LOW ? gdl__ac_dt : GDL_F32;
    for (k = 0; k < n; k++) /* a non-float argument: the op's own error, naming the dtypes given */
        if (*args[k] && !gdl__is_float((*args[k])->dtype)) return 0;
    for (k = 0; k < n; k++)
        if (*args[k] && (*args[k])->dtype != to) break;
    if (k == n) return 0;
    for (k = 0; k < n; k++) {
        gdl_tensor *t = *args[k];
        if (!t || t->dtype == to) continue;
        if (gdl__stale(op, "an input", t) < 0) return -1;
        for (j = 0; j < k && j < 8; j++) /* a tensor passed twice: one cast (see gdl__lowp_in) */
            if (orig[j] == t) break;
        if (k < 8) orig[k] = t;
        if (j < k && j < 8) *args[k] = *args[j];
        else if (!(*args[k] = gdl__ac_cast(op, t, to))) return -1;
    }
    return 1;
}

/* The slow path of the GDL__LOWP hooks (below), taken when a float argument
   of an op is not f32 or autocast is on; args point at its float arguments
   (NULL entries: absent optional arguments); opid: the op's GDL_OP_ id (its
   autocast class), -1 for none. Under autocast, an op of class LOW or F32
   gets its arguments cast to its dtype and re-runs (1, *out_dt f32: the
   result stays as it comes). Otherwise returns 0 when all are f32; -1 with
   an error naming the dtypes when one is not a float; 1 when some are bf16/f16:
   then each of them is replaced by an f32 copy, *out_dt is the dtype the
   op's result must be rounded to (PyTorch's promotion; follow_first: the
   first argument's dtype, as the norms' and embedding's output), and autocast
   is off until gdl__lowp_out: the re-run is the f32 computation itself. */
static int gdl__lowp_in(const char *op, int opid, int n, gdl_tensor **const *args, int follow_first, gdl_dtype *out_dt) {
    int k, low = 0, first = 1;
    gdl_dtype dt = GDL_F32;
    gdl_tensor *orig[8] = {0};
    if (gdl__ac_dt != GDL_F32 && (k = gdl__ac_in(op, opid, n, args)) != 0) {
        *out_dt = GDL_F32;
        return k;
    }
    for (k = 0; k < n; k++)
        if (*args[k] && (*args[k])->dtype != GDL_F32) break;
    if (k == n) return 0;
    for (k = 0; k < n; k++) {
        gdl_tensor *t = *args[k];
        if (!t) continue;
        if (gdl__stale(op, "an input", t) < 0) return -1;
        if (!gdl__is_float(t->dtype)) {
            char buf[256];
            int j, len = 0, last = 0;
            buf[0] = 0;
            for (j = 0; j < n; j++)
                if (*args[j]) last = j;
            for (j = 0; j < n && len < (int)sizeof buf - 64; j++)
                if (*args[j])
                    len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%s %s", len ? (j < last ? ", " : " and ") : "",
                                    gdl_dtype_name((*args[j])->dtype), gdl_shape_str(*args[j]));
            if (strcmp(op, "gdl_matmul") == 0 && *args[0] && *args[1])
                gdl__set_error("%s: cannot multiply %s %s by %s %s", op, gdl_dtype_name((*args[0])->dtype),
                               gdl_shape_str(*args[0]), gdl_dtype_name((*args[1])->dtype), gdl_shape_str(*args[1]));
            else
                gdl__set_error("%s: expected %s (f32, bf16 or f16), got %s", op,
                               strchr(buf, ',') || strstr(buf, " and ") ? "float tensors" : "a float tensor", buf);
            return -1;
        }
        if (t->dtype != GDL_F32) low = 1;
        if (first) dt = t->dtype;
        else if (!follow_first) dt = gdl__promote(dt, t->dtype);
        first = 0;
    }
    if (!low) return 0;
    for (k = 1; k < n; k++)
        if (*args[0] && gdl__check_dev(op, *args[0], *args[k]) < 0) return -1;
    for (k = 0; k < n; k++) {
        gdl_tensor *t = *args[k];
        int j;
        if (!t || t->dtype == GDL_F32) continue;
        /* a tensor passed twice (x / x) gets one copy, so its two partial
           gradients sum in f32 and round once: two casts would round each
           and add in the low dtype, which loses a cancelling sum */
        for (j = 0; j < k && j < 8; j++)
            if (orig[j] == t) break;
        if (j < k && j < 8) {
            *args[k] = *args[j];
            continue;
        }
        if (k < 8) orig[k] = t;
        if (!(*args[k] = gdl__cast_t(op, t, GDL_F32))) return -1;
    }
    *out_dt = dt;
    gdl__ac_dt = GDL_F32;
    return 1;
}

/* the f32 result of an op that had low-precision inputs, rounded to dt;
   ac: the autocast dtype before gdl__lowp_in, restored */
static gdl_tensor *gdl__lowp_out(const char *op, gdl_tensor *r, gdl_dtype dt, gdl_dtype ac) {
    gdl__ac_dt = ac;
    if (!r || r->dtype != GDL_F32 || dt == GDL_F32) return r;
    return gdl__finish(op, gdl__cast_t(op, r, dt));
}

/* The hook at the top of an op, naming its GDL_OP_ id (its autocast class;
   -1: none) and its float arguments (up to three variables; NULL ones are
   absent optional arguments): `call` re-runs the op on the copies. The f32
   path outside autocast pays one compare per argument and one for autocast;
   the arguments' addresses are never taken, so they stay in registers. */
#define GDL__LOWP_(op, opid, follow, call, a, b, c)                                                   \
    do {                                                                                              \
        gdl_tensor *lp_none_ = NULL;                                                                  \
        if (gdl__ac_dt != GDL_F32 || ((a) && (a)->dtype != GDL_F32) || ((b) && (b)->dtype != GDL_F32) || \
            ((c) && (c)->dtype != GDL_F32)) {                                                         \
            gdl_tensor *lp_t_[3];                                                                     \
            gdl_tensor **const lp_p_[3] = {&lp_t_[0], &lp_t_[1], &lp_t_[2]};                          \
            gdl_dtype lp_dt_ = GDL_F32, lp_ac_ = gdl__ac_dt;                                          \
            int lp_rc_;                                                                               \
            lp_t_[0] = (a);                                                                           \
            lp_t_[1] = (b);                                                                           \
            lp_t_[2] = (c);                                                                           \
            lp_rc_ = gdl__lowp_in(op, opid, 3, lp_p_, follow, &lp_dt_);                               \
            if (lp_rc_ < 0) return NULL;                                                              \
            if (lp_rc_ > 0) {                                                                         \
                (a) = lp_t_[0];                                                                       \
                (b) = lp_t_[1];                                                                       \
                (c) = lp_t_[2];                                                                       \
                return gdl__lowp_out(op, call, lp_dt_, lp_ac_);                                       \
            }                                                                                         \
        }                                                                                             \
        (void)lp_none_;                                                                               \
    } while (0)
#define GDL__LOWP1(op, opid, call, a) GDL__LOWP_(op, opid, 0, call, a, lp_none_, lp_none_)
#define GDL__LOWP2(op, opid, call, a, b) GDL__LOWP_(op, opid, 0, call, a, b, lp_none_)
#define GDL__LOWP3(op, opid, call, a, b, c) GDL__LOWP_(op, opid, 0, call, a, b, c)
/* the result follows the first argument's dtype (the norms) */
#define GDL__LOWP3_FIRST(op, opid, call, a, b, c) GDL__LOWP_(op, opid, 1, call, a, b, c)

/* normalises a possibly negative dim */
static int gdl__dim(const char *op, const gdl_tensor *x, int dim, int *out) {
    int d = dim < 0 ? dim + x->ndim : dim;
    if (d < 0 || d >= x->ndim) {
        gdl__set_error("%s: dim %d out of range for %s (ndim %d)", op, dim, gdl_shape_str(x), x->ndim);
        return -1;
    }
    *out = d;
    return 0;
}

/* [outer, n, inner] around dim d */
static void gdl__split(const gdl_tensor *x, int d, int64_t *outer, int64_t *n, int64_t *inner) {
    int k;
    *outer = 1;
    *inner = 1;
    for (k = 0; k < d; k++) *outer *= x->shape[k];
    for (k = d + 1; k < x->ndim; k++) *inner *= x->shape[k];
    *n = x->shape[d];
}

/* ---- views ---- */

static gdl_tensor *gdl__view(const char *opname, gdl_tensor *x, int ndim, const int64_t *shape, int64_t elem_offset) {
    gdl_tensor *t;
    gdl_node *n;
    int err;
    t = gdl__make(opname, ndim, shape, x->dtype, x->device, 0,
                  (char *)x->data + (size_t)elem_offset * gdl_dtype_size(x->dtype));
    if (!t) return NULL;
    t->name = x->name;
    n = gdl__record(opname, elem_offset == 0 && t->numel == x->numel ? GDL_OP_RESHAPE : GDL_OP_SLICE, t, 1, &x, &err);
    if (err) return NULL;
    if (n) n->i[0] = elem_offset;
    return t;
}

static int gdl__bw_view(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    gdl_real *gx = GDL__G(x);
    if (gx && x->dtype != GDL_F32)
        return gdl__acc_any("gdl_backward", be, x->device, (char *)x->grad->data + (size_t)n->i[0] * gdl_dtype_size(x->dtype),
                            x->dtype, n->out->grad->data, n->out->grad->dtype, n->out->numel);
    return gx ? be->copy2d(1, n->out->numel, GDL__R(n->out->grad), 0, gx + n->i[0], 0, 1) : 0;
}

/* gdl_to: the gradient goes back to the source's device and adds there */
static int gdl__bw_to(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    gdl_real *gx = GDL__G(x), *g = GDL__R(n->out->grad);
    const gdl_backend *bx;
    (void)be;
    size_t es = gdl_dtype_size(x->grad->dtype);
    if (!gx || !x->numel) return 0;
    if (!gdl_device_equal(x->device, n->out->device)) {
        gdl_real *tmp = (gdl_real *)gdl__scratch("gdl_backward", x->device, es * (size_t)x->numel);
        if (!tmp || gdl__copy_bytes("gdl_backward", tmp, x->device, g, n->out->device, es * (size_t)x->numel) < 0)
            return -1;
        g = tmp;
    }
    if (!(bx = gdl__be("gdl_backward", x->device))) return -1;
    if (x->grad->dtype != GDL_F32)
        return gdl__acc_any("gdl_backward", bx, x->device, gx, x->grad->dtype, g, x->grad->dtype, x->numel);
    return bx->copy2d(1, x->numel, g, 0, gx, 0, 1);
}

GPUDL_API gdl_tensor *gdl_reshape(gdl_tensor *x, int ndim, const int64_t *shape) {
    int64_t s[GDL_MAX_DIMS], known = 1;
    int k, infer = -1;
    if (gdl__check_in("gdl_reshape", "x", x, 0) < 0) return NULL;
    if (ndim < 0 || ndim > GDL_MAX_DIMS || (ndim > 0 && !shape)) {
        gdl__set_error("gdl_reshape: bad target ndim %d", ndim);
        return NULL;
    }
    for (k = 0; k < ndim; k++) {
        s[k] = shape[k];
        if (s[k] == -1 && infer < 0) infer = k;
        else if (s[k] < 0) {
            gdl__set_error("gdl_reshape: bad target shape %s", gdl__shape_fmt(ndim, shape));
            return NULL;
        } else known *= s[k];
    }
    if (infer >= 0) {
        if (known == 0 || x->numel % known) {
            gdl__set_error("gdl_reshape: cannot reshape %s into %s", gdl_shape_str(x), gdl__shape_fmt(ndim, shape));
            return NULL;
        }
        s[infer] = x->numel / known;
        known *= s[infer];
    }
    if (known != x->numel) {
        gdl__set_error("gdl_reshape: cannot reshape %s (%lld elements) into %s", gdl_shape_str(x),
                       (long long)x->numel, gdl__shape_fmt(ndim, shape));
        return NULL;
    }
    return gdl__view("gdl_reshape", x, ndim, s, 0);
}

GPUDL_API gdl_tensor *gdl_flatten(gdl_tensor *x, int start_dim) {
    int64_t s[GDL_MAX_DIMS];
    int d, k;
    if (gdl__check_in("gdl_flatten", "x", x, 0) < 0) return NULL;
    if (x->ndim == 0) return gdl__view("gdl_flatten", x, 1, &x->numel, 0);
    if (gdl__dim("gdl_flatten", x, start_dim, &d) < 0) return NULL;
    for (k = 0; k < d; k++) s[k] = x->shape[k];
    s[d] = 1;
    for (k = d; k < x->ndim; k++) s[d] *= x->shape[k];
    return gdl__view("gdl_flatten", x, d + 1, s, 0);
}

GPUDL_API gdl_tensor *gdl_slice(gdl_tensor *x, int64_t start, int64_t end) {
    int64_t s[GDL_MAX_DIMS], row;
    if (gdl__check_in("gdl_slice", "x", x, 0) < 0) return NULL;
    if (x->ndim < 1 || start < 0 || end < start || end > x->shape[0]) {
        gdl__set_error("gdl_slice: rows [%lld,%lld) out of range for %s", (long long)start, (long long)end,
                       gdl_shape_str(x));
        return NULL;
    }
    memcpy(s, x->shape, sizeof s);
    s[0] = end - start;
    row = x->shape[0] ? x->numel / x->shape[0] : 0;
    return gdl__view("gdl_slice", x, x->ndim, s, start * row);
}

GPUDL_API gdl_tensor *gdl_detach(gdl_tensor *x) {
    if (gdl__check_in("gdl_detach", "x", x, 0) < 0) return NULL;
    return gdl__make("gdl_detach", x->ndim, x->shape, x->dtype, x->device, 0, x->data);
}

/* ---- elementwise binary ops with broadcasting ---- */

static int gdl__broadcast(const char *op, const gdl_tensor *a, const gdl_tensor *b, int *ndim, int64_t *shape,
                          int64_t *astr, int64_t *bstr) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim, d;
    int64_t sa = 1, sb = 1;
    for (d = nd - 1; d >= 0; d--) {
        int ia = d - (nd - a->ndim), ib = d - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            gdl__set_error("%s: shapes %s and %s cannot be broadcast", op, gdl_shape_str(a), gdl_shape_str(b));
            return -1;
        }
        shape[d] = da == 1 ? db : da;
        astr[d] = da == 1 ? 0 : sa;
        bstr[d] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
    }
    *ndim = nd;
    return 0;
}

/* row-major strides (in elements) of a shape */
static void gdl__contig_strides(int ndim, const int64_t *shape, int64_t *str) {
    int64_t s = 1;
    int d;
    for (d = ndim - 1; d >= 0; d--) {
        str[d] = s;
        s *= shape[d];
    }
}

/* NumPy broadcasting of k (2 or 3) tensors: the result's shape, and each tensor's strides into it (0 along
   the dims it is broadcast over) */
static int gdl__broadcast_k(const char *op, int k, const gdl_tensor *const *t, int *ndim, int64_t *shape,
                            int64_t str[][GDL_MAX_DIMS]) {
    int nd = 0, d, j;
    for (j = 0; j < k; j++)
        if (t[j]->ndim > nd) nd = t[j]->ndim;
    for (d = 0; d < nd; d++) shape[d] = 1;
    for (j = 0; j < k; j++)
        for (d = 0; d < t[j]->ndim; d++) {
            int64_t v = t[j]->shape[d], *sd = &shape[d + nd - t[j]->ndim];
            if (v == 1) continue;
            if (*sd != 1 && *sd != v) {
                if (k == 2)
                    gdl__set_error("%s: shapes %s and %s cannot be broadcast", op, gdl_shape_str(t[0]), gdl_shape_str(t[1]));
                else
                    gdl__set_error("%s: shapes %s, %s and %s cannot be broadcast", op, gdl_shape_str(t[0]),
                                   gdl_shape_str(t[1]), gdl_shape_str(t[2]));
                return -1;
            }
            *sd = v;
        }
    for (j = 0; j < k; j++) {
        int64_t cs[GDL_MAX_DIMS];
        int off = nd - t[j]->ndim;
        gdl__contig_strides(t[j]->ndim, t[j]->shape, cs);
        for (d = 0; d < nd; d++) str[j][d] = d < off || t[j]->shape[d - off] == 1 ? 0 : cs[d - off];
    }
    *ndim = nd;
    return 0;
}

static gdl_tensor *gdl__binary(const char *opname, int op, gdl_tensor *a, gdl_tensor *b) {
    int nd, err;
    int64_t shape[GDL_MAX_DIMS], astr[GDL_MAX_DIMS], bstr[GDL_MAX_DIMS];
    gdl_tensor *in[2], *out;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (gdl__ac_dt != GDL_F32 || (a && a->dtype != GDL_F32) || (b && b->dtype != GDL_F32)) {
        if (a && b && a->dtype == b->dtype && gdl__lp_native(op, a->dtype)) dt = a->dtype; /* native */
        else GDL__LOWP2(opname, op, gdl__binary(opname, op, a, b), a, b);
    }
    if (gdl__check_two(opname, "a", a, dt == GDL_F32, "b", b, dt == GDL_F32) < 0 ||
        gdl__broadcast(opname, a, b, &nd, shape, astr, bstr) < 0)
        return NULL;
    if (!(be = gdl__be(opname, a->device))) return NULL;
    if (!(out = gdl__tmp(opname, nd, shape, dt, a->device))) return NULL;
    if (out->numel &&
        (dt == GDL_F32 ? be->binary(gdl__op(op)->kernel, nd, shape, GDL__R(a), astr, GDL__R(b), bstr, GDL__R(out))
                       : be->binary_lp(gdl__op(op)->kernel, nd, shape, dt, a->data, astr, dt, b->data, bstr, dt, out->data)) < 0)
        return NULL;
    in[0] = a;
    in[1] = b;
    gdl__record(opname, op, out, 2, in, &err);
    return err ? NULL : gdl__finish(opname, out);
}

/* the backward of a native low-precision binary op: the products in an f32
   scratch (as the f32 path forms them), each gradient summed in f32 and
   rounded once into the input's gradient. A tensor passed twice (x / x)
   gets both partial gradients summed in f32 first and rounded once, as the
   cast path's one f32 copy: two roundings would lose a cancelling sum. */
static int gdl__bw_binary_lp(gdl_node *n, const gdl_backend *be, int nd, const int64_t *shape, const int64_t *astr,
                             const int64_t *bstr, const int64_t *gstr) {
    gdl_tensor *a = n->in[0], *b = n->in[1];
    gdl_dtype dt = n->out->dtype, gat = dt, gbt = dt;
    const void *g = n->out->grad->data;
    void *ga = a->requires_grad ? a->grad->data : NULL, *gb = b->requires_grad ? b->grad->data : NULL;
    gdl_real *tmp = NULL, *both = NULL;
    int op = n->op, rc = 0;
    const gdl_device dev = n->out->device;
    if (op == GDL_OP_MUL || op == GDL_OP_DIV) {
        tmp = (gdl_real *)gdl__scratch("gdl_backward", dev, sizeof(gdl_real) * (size_t)n->out->numel);
        if (!tmp) return -1;
    }
    if (a == b && ga) {
        if (!(both = (gdl_real *)gdl__scratch("gdl_backward", dev, sizeof(gdl_real) * (size_t)(a->numel + 1))) ||
            be->fill(both, a->numel, 0) < 0)
            return -1;
        ga = gb = both;
        gat = gbt = GDL_F32;
    }
    switch (op) {
    case GDL_OP_ADD:
    case GDL_OP_SUB:
        if (ga) rc = rc || be->sum_to_lp(nd, shape, dt, g, gat, ga, astr, 1) < 0;
        if (gb) rc = rc || be->sum_to_lp(nd, shape, dt, g, gbt, gb, bstr, op == GDL_OP_SUB ? -1.0f : 1.0f) < 0;
        break;
    case GDL_OP_MUL:
        if (ga) rc = rc || be->binary_lp(GDL_BIN_MUL, nd, shape, dt, g, gstr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->sum_to_lp(nd, shape, GDL_F32, tmp, gat, ga, astr, 1) < 0;
        if (gb) rc = rc || be->binary_lp(GDL_BIN_MUL, nd, shape, dt, g, gstr, dt, a->data, astr, GDL_F32, tmp) < 0 ||
                     be->sum_to_lp(nd, shape, GDL_F32, tmp, gbt, gb, bstr, 1) < 0;
        break;
    default: /* DIV: d(a/b)/db = -(a/b)/b, with a/b formed again in f32 (the rounded output would lose
                cancelling sums over broadcast dims; PyTorch recomputes it too) */
        if (ga) rc = rc || be->binary_lp(GDL_BIN_DIV, nd, shape, dt, g, gstr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->sum_to_lp(nd, shape, GDL_F32, tmp, gat, ga, astr, 1) < 0;
        if (gb) rc = rc || be->binary_lp(GDL_BIN_DIV, nd, shape, dt, a->data, astr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->binary_lp(GDL_BIN_MUL, nd, shape, dt, g, gstr, GDL_F32, tmp, gstr, GDL_F32, tmp) < 0 ||
                     be->binary_lp(GDL_BIN_DIV, nd, shape, GDL_F32, tmp, gstr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->sum_to_lp(nd, shape, GDL_F32, tmp, gbt, gb, bstr, -1) < 0;
        break;
    }
    if (!rc && both) rc = gdl__acc_any("gdl_backward", be, dev, a->grad->data, dt, both, GDL_F32, a->numel) < 0;
    return rc ? -1 : 0;
}

/* the backward of minimum, maximum and pow, in f32 or natively in a low dtype dt (binary_lp / sum_to_lp:
   the derivative and its product with the gradient formed in f32, each gradient rounded once): for each
   input, d = the op's derivative code on (a, b) (min/max: on (b, a) for b), t = g * d (min/max mask
   exactly: GRAD_SCALE), summed over the broadcast dims into the gradient. A tensor passed twice gets
   both parts summed in f32 first, rounded once. */
static int gdl__bw_binary_deriv(gdl_node *n, const gdl_backend *be, int nd, const int64_t *shape, const int64_t *astr,
                                const int64_t *bstr, const int64_t *gstr) {
    gdl_tensor *a = n->in[0], *b = n->in[1];
    gdl_dtype dt = n->out->dtype, gt[2];
    const void *g = n->out->grad->data;
    void *gp[2];
    gdl_real *tmp, *both = NULL;
    const gdl_device dev = n->out->device;
    int k, pw = n->op == GDL_OP_POW, scale = pw ? GDL_BIN_MUL : GDL_BIN_GRAD_SCALE;
    int code[2];
    code[0] = pw ? GDL_BIN_POW_DA : n->op == GDL_OP_MAXIMUM ? GDL_BIN_MAX_DA : GDL_BIN_MIN_DA;
    code[1] = pw ? GDL_BIN_POW_DB : code[0];
    gp[0] = a->requires_grad ? a->grad->data : NULL;
    gp[1] = b->requires_grad ? b->grad->data : NULL;
    gt[0] = gt[1] = dt;
    if (!(tmp = (gdl_real *)gdl__scratch("gdl_backward", dev, sizeof(gdl_real) * (size_t)(n->out->numel + 1)))) return -1;
    if (a == b && gp[0] && dt != GDL_F32) {
        if (!(both = (gdl_real *)gdl__scratch("gdl_backward", dev, sizeof(gdl_real) * (size_t)(a->numel + 1))) ||
            be->fill(both, a->numel, 0) < 0)
            return -1;
        gp[0] = gp[1] = both;
        gt[0] = gt[1] = GDL_F32;
    }
    for (k = 0; k < 2; k++) {
        /* min/max's derivative for b is the same code with the operands swapped */
        int swap = k == 1 && !pw;
        const void *x = swap ? b->data : a->data, *y = swap ? a->data : b->data;
        const int64_t *xs = swap ? bstr : astr, *ys = swap ? astr : bstr;
        if (!gp[k]) continue;
        if (dt == GDL_F32) {
            if (be->binary(code[k], nd, shape, (const gdl_real *)x, xs, (const gdl_real *)y, ys, tmp) < 0 ||
                be->binary(scale, nd, shape, (const gdl_real *)g, gstr, tmp, gstr, tmp) < 0 ||
                be->sum_to(nd, shape, tmp, (gdl_real *)gp[k], k ? bstr : astr, 1) < 0)
                return -1;
        } else if (be->binary_lp(code[k], nd, shape, dt, x, xs, dt, y, ys, GDL_F32, tmp) < 0 ||
                   be->binary_lp(scale, nd, shape, dt, g, gstr, GDL_F32, tmp, gstr, GDL_F32, tmp) < 0 ||
                   be->sum_to_lp(nd, shape, GDL_F32, tmp, gt[k], gp[k], k ? bstr : astr, 1) < 0) {
            return -1;
        }
    }
    return both ? gdl__acc_any("gdl_backward", be, dev, a->grad->data, dt, both, GDL_F32, a->numel) : 0;
}

static int gdl__bw_binary(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *a = n->in[0], *b = n->in[1];
    gdl_real *g = GDL__R(n->out->grad), *ga = GDL__G(a), *gb = GDL__G(b), *tmp = NULL;
    int64_t shape[GDL_MAX_DIMS], astr[GDL_MAX_DIMS], bstr[GDL_MAX_DIMS], gstr[GDL_MAX_DIMS];
    int nd, op = n->op, rc = 0;
    if (gdl__broadcast("gdl_backward", a, b, &nd, shape, astr, bstr) < 0) return -1;
    gdl__broadcast("gdl_backward", n->out, n->out, &nd, shape, gstr, gstr);
    if (op == GDL_OP_MINIMUM || op == GDL_OP_MAXIMUM || op == GDL_OP_POW)
        return n->out->numel ? gdl__bw_binary_deriv(n, be, nd, shape, astr, bstr, gstr) : 0;
    if (n->out->dtype != GDL_F32) return gdl__bw_binary_lp(n, be, nd, shape, astr, bstr, gstr);
    if (op == GDL_OP_MUL || op == GDL_OP_DIV) {
        tmp = (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)n->out->numel);
        if (!tmp) return -1;
    }
    switch (op) {
    /* each product goes to tmp, then sums into the gradient: in that order (||, not |) */
    case GDL_OP_ADD:
    case GDL_OP_SUB:
        if (ga) rc = rc || be->sum_to(nd, shape, g, ga, astr, 1) < 0;
        if (gb) rc = rc || be->sum_to(nd, shape, g, gb, bstr, op == GDL_OP_SUB ? -1 : 1) < 0;
        break;
    case GDL_OP_MUL:
        if (ga) rc = rc || be->binary(GDL_BIN_MUL, nd, shape, g, gstr, GDL__R(b), bstr, tmp) < 0 ||
                     be->sum_to(nd, shape, tmp, ga, astr, 1) < 0;
        if (gb) rc = rc || be->binary(GDL_BIN_MUL, nd, shape, g, gstr, GDL__R(a), astr, tmp) < 0 ||
                     be->sum_to(nd, shape, tmp, gb, bstr, 1) < 0;
        break;
    default: /* DIV: d(a/b)/db = -out/b */
        if (ga) rc = rc || be->binary(GDL_BIN_DIV, nd, shape, g, gstr, GDL__R(b), bstr, tmp) < 0 ||
                     be->sum_to(nd, shape, tmp, ga, astr, 1) < 0;
        if (gb) rc = rc || be->binary(GDL_BIN_MUL, nd, shape, g, gstr, GDL__R(n->out), gstr, tmp) < 0 ||
                     be->binary(GDL_BIN_DIV, nd, shape, tmp, gstr, GDL__R(b), bstr, tmp) < 0 ||
                     be->sum_to(nd, shape, tmp, gb, bstr, -1) < 0;
        break;
    }
    return rc ? -1 : 0;
}

GPUDL_API gdl_tensor *gdl_add(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_add", GDL_OP_ADD, a, b); }
GPUDL_API gdl_tensor *gdl_sub(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_sub", GDL_OP_SUB, a, b); }
GPUDL_API gdl_tensor *gdl_mul(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_mul", GDL_OP_MUL, a, b); }
GPUDL_API gdl_tensor *gdl_div(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_div", GDL_OP_DIV, a, b); }
GPUDL_API gdl_tensor *gdl_minimum(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_minimum", GDL_OP_MINIMUM, a, b); }
GPUDL_API gdl_tensor *gdl_maximum(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_maximum", GDL_OP_MAXIMUM, a, b); }
GPUDL_API gdl_tensor *gdl_pow(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_pow", GDL_OP_POW, a, b); }

/* ---- comparisons (not differentiable: a u8 result, no tape node) ---- */

static gdl_tensor *gdl__compare(const char *opname, gdl_tensor *a, gdl_tensor *b, int op) {
    int nd;
    int64_t shape[GDL_MAX_DIMS], str[2][GDL_MAX_DIMS];
    const gdl_tensor *t[2];
    gdl_tensor *out;
    const gdl_backend *be;
    if (gdl__check_two(opname, "a", a, 0, "b", b, 0) < 0) return NULL;
    if ((unsigned)op > GDL_CMP_GE) {
        gdl__set_error("%s: unknown comparison %d (GDL_CMP_EQ ... GDL_CMP_GE)", opname, op);
        return NULL;
    }
    t[0] = a;
    t[1] = b;
    if (gdl__broadcast_k(opname, 2, t, &nd, shape, str) < 0 || !(be = gdl__be(opname, a->device)) ||
        !(out = gdl__tmp(opname, nd, shape, GDL_U8, a->device)))
        return NULL;
    if (out->numel &&
        be->compare(op, nd, shape, a->dtype, a->data, str[0], b->dtype, b->data, str[1], (uint8_t *)out->data) < 0)
        return NULL;
    return gdl__finish(opname, out);
}

GPUDL_API gdl_tensor *gdl_compare(gdl_tensor *a, gdl_tensor *b, gdl_compare_op op) { return gdl__compare("gdl_compare", a, b, (int)op); }
GPUDL_API gdl_tensor *gdl_eq(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_eq", a, b, GDL_CMP_EQ); }
GPUDL_API gdl_tensor *gdl_ne(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_ne", a, b, GDL_CMP_NE); }
GPUDL_API gdl_tensor *gdl_lt(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_lt", a, b, GDL_CMP_LT); }
GPUDL_API gdl_tensor *gdl_le(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_le", a, b, GDL_CMP_LE); }
GPUDL_API gdl_tensor *gdl_gt(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_gt", a, b, GDL_CMP_GT); }
GPUDL_API gdl_tensor *gdl_ge(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_ge", a, b, GDL_CMP_GE); }

/* a one-element temporary of dtype dt on dev holding v (through f32, then rounded to dt) */
static gdl_tensor *gdl__scalar_tmp(const char *op, const gdl_backend *be, gdl_device dev, gdl_dtype dt, double v) {
    static const int64_t one = 1;
    gdl_tensor *f = gdl__tmp(op, 0, &one, GDL_F32, dev), *r;
    if (!f || be->fill(GDL__R(f), 1, (gdl_real)v) < 0) return NULL;
    if (dt == GDL_F32) return f;
    if (!(r = gdl__tmp(op, 0, &one, dt, dev)) || be->cast(r->data, dt, f->data, GDL_F32, 1) < 0) return NULL;
    return r;
}

GPUDL_API gdl_tensor *gdl_compare_scalar(gdl_tensor *x, gdl_compare_op op, double value) {
    const char *name = "gdl_compare_scalar";
    const gdl_backend *be;
    gdl_tensor *s;
    gdl_dtype dt;
    if (gdl__check_in(name, "x", x, 0) < 0 || !(be = gdl__be(name, x->device))) return NULL;
    if (gdl__is_float(x->dtype)) dt = x->dtype;
    else dt = value == floor(value) && fabs(value) <= 16777216.0 ? GDL_I32 : GDL_F32;
    if (!(s = gdl__scalar_tmp(name, be, x->device, dt, value))) return NULL;
    return gdl__compare(name, x, s, (int)op);
}

/* ---- elementwise unary ops ---- */

static gdl_tensor *gdl__unary(const char *opname, int op, gdl_tensor *x, double alpha) {
    gdl_tensor *out;
    gdl_node *n;
    const gdl_backend *be;
    int err;
    gdl_dtype dt = GDL_F32;
    if (gdl__ac_dt != GDL_F32 || (x && x->dtype != GDL_F32)) {
        if (x && gdl__lp_native(op, x->dtype)) dt = x->dtype; /* native */
        else GDL__LOWP1(opname, op, gdl__unary(opname, op, x, alpha), x);
    }
    if (gdl__check_in(opname, "x", x, dt == GDL_F32) < 0 || !(be = gdl__be(opname, x->device))) return NULL;
    if (!(out = gdl__tmp(opname, x->ndim, x->shape, dt, x->device))) return NULL;
    if ((dt == GDL_F32 ? be->unary(gdl__op(op)->kernel, x->numel, GDL__R(x), GDL__R(out), (gdl_real)alpha)
                       : be->unary_lp(dt, gdl__op(op)->kernel, x->numel, x->data, out->data, (float)alpha)) < 0)
        return NULL;
    n = gdl__record(opname, op, out, 1, &x, &err);
    if (err) return NULL;
    if (n) n->f[0] = alpha;
    return gdl__finish(opname, out);
}

static int gdl__bw_unary(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    if (!gx) return 0;
    if (n->out->dtype != GDL_F32) /* native: the saved output is the rounded one, as PyTorch's */
        return be->unary_backward_lp(n->out->dtype, gdl__op(n->op)->kernel, n->out->numel, n->in[0]->data, n->out->data,
                                     n->out->grad->data, gx, (float)n->f[0]);
    return be->unary_backward(gdl__op(n->op)->kernel, n->out->numel, GDL__R(n->in[0]), GDL__R(n->out),
                              GDL__R(n->out->grad), gx, (gdl_real)n->f[0]);
}

GPUDL_API gdl_tensor *gdl_add_scalar(gdl_tensor *x, double s) { return gdl__unary("gdl_add_scalar", GDL_OP_ADD_SCALAR, x, s); }
GPUDL_API gdl_tensor *gdl_mul_scalar(gdl_tensor *x, double s) { return gdl__unary("gdl_mul_scalar", GDL_OP_MUL_SCALAR, x, s); }
GPUDL_API gdl_tensor *gdl_pow_scalar(gdl_tensor *x, double p) { return gdl__unary("gdl_pow_scalar", GDL_OP_POW_SCALAR, x, p); }
GPUDL_API gdl_tensor *gdl_exp(gdl_tensor *x) { return gdl__unary("gdl_exp", GDL_OP_EXP, x, 0); }
GPUDL_API gdl_tensor *gdl_log(gdl_tensor *x) { return gdl__unary("gdl_log", GDL_OP_LOG, x, 0); }
GPUDL_API gdl_tensor *gdl_sqrt(gdl_tensor *x) { return gdl__unary("gdl_sqrt", GDL_OP_SQRT, x, 0); }
GPUDL_API gdl_tensor *gdl_rsqrt(gdl_tensor *x) { return gdl__unary("gdl_rsqrt", GDL_OP_RSQRT, x, 0); }
GPUDL_API gdl_tensor *gdl_abs(gdl_tensor *x) { return gdl__unary("gdl_abs", GDL_OP_ABS, x, 0); }
GPUDL_API gdl_tensor *gdl_clamp_min(gdl_tensor *x, double min) {
    if (min != min) {
        gdl__set_error("gdl_clamp_min: the bound is NaN");
        return NULL;
    }
    return gdl__unary("gdl_clamp_min", GDL_OP_CLAMP_MIN, x, min);
}
GPUDL_API gdl_tensor *gdl_clamp_max(gdl_tensor *x, double max) {
    if (max != max) {
        gdl__set_error("gdl_clamp_max: the bound is NaN");
        return NULL;
    }
    return gdl__unary("gdl_clamp_max", GDL_OP_CLAMP_MAX, x, max);
}
/* max(x, min) then min(.., max): PyTorch's order, so min > max gives max everywhere, and the gradient
   passes where min <= x <= max */
GPUDL_API gdl_tensor *gdl_clamp(gdl_tensor *x, double min, double max) {
    if (min != min || max != max) {
        gdl__set_error("gdl_clamp: a bound is NaN (min %g, max %g)", min, max);
        return NULL;
    }
    if (max == INFINITY) return gdl_clamp_min(x, min);
    return gdl_clamp_max(min == -INFINITY ? x : gdl_clamp_min(x, min), max);
}
GPUDL_API gdl_tensor *gdl_relu(gdl_tensor *x) { return gdl__unary("gdl_relu", GDL_OP_RELU, x, 0); }
GPUDL_API gdl_tensor *gdl_leaky_relu(gdl_tensor *x, double slope) { return gdl__unary("gdl_leaky_relu", GDL_OP_LEAKY_RELU, x, slope); }
GPUDL_API gdl_tensor *gdl_sigmoid(gdl_tensor *x) { return gdl__unary("gdl_sigmoid", GDL_OP_SIGMOID, x, 0); }
GPUDL_API gdl_tensor *gdl_tanh(gdl_tensor *x) { return gdl__unary("gdl_tanh", GDL_OP_TANH, x, 0); }
GPUDL_API gdl_tensor *gdl_gelu(gdl_tensor *x, int tanh_approximation) {
    return tanh_approximation ? gdl__unary("gdl_gelu", GDL_OP_GELU_TANH, x, 0) : gdl__unary("gdl_gelu", GDL_OP_GELU, x, 0);
}

GPUDL_API int gdl_mul_scalar_(gdl_tensor *t, double s) {
    const gdl_backend *be;
    if (gdl__check_in("gdl_mul_scalar_", "t", t, 0) < 0 || !(be = gdl__be("gdl_mul_scalar_", t->device))) return -1;
    if (t->dtype == GDL_F16 || t->dtype == GDL_BF16) /* in f32, rounded once, in place */
        return be->unary_lp(t->dtype, GDL_UN_SCALE, t->numel, t->data, t->data, (float)s);
    if (gdl__check_in("gdl_mul_scalar_", "t", t, 1) < 0) return -1;
    return be->unary(GDL_UN_SCALE, t->numel, GDL__R(t), GDL__R(t), (gdl_real)s);
}

/* ---- matmul and linear ----
   Both run natively in f16 and bf16 (inputs of one low dtype): the
   backend's gemm_lp sums in f32 and rounds C once, forward and backward. */

#define GDL__AT(p, dt, off) ((void *)((char *)(p) + (size_t)(off) * gdl_dtype_size(dt)))

/* C = op(A)op(B) + beta*C in dtype dt: the f32 kernels or the low-precision GEMM */
static int gdl__gemm_dt(const gdl_backend *be, gdl_dtype dt, int ta, int tb, int M, int N, int K, const void *A, int lda,
                        int64_t sA, const void *B, int ldb, int64_t sB, int beta, void *C, int ldc, int64_t sC, int batch) {
    if (dt == GDL_F32)
        return be->gemm(ta, tb, M, N, K, 1, (const gdl_real *)A, lda, sA, (const gdl_real *)B, ldb, sB, (gdl_real)beta,
                        (gdl_real *)C, ldc, sC, batch);
    return be->gemm_lp(dt, ta, tb, M, N, K, 1.0f, A, lda, sA, B, ldb, sB, (float)beta, C, ldc, sC, batch);
}

/* n ones of dtype dt (a low-precision linear's bias goes in and out through a rank-1 GEMM with them) */
static void *gdl__ones_dt(const char *op, const gdl_backend *be, gdl_device dev, gdl_dtype dt, int64_t n) {
    gdl_real *f = (gdl_real *)gdl__scratch(op, dev, sizeof(gdl_real) * (size_t)(n ? n : 1));
    void *o = gdl__scratch(op, dev, gdl_dtype_size(dt) * (size_t)(n ? n : 1));
    if (!f || !o || be->fill(f, n, 1) < 0 || be->cast(o, dt, f, GDL_F32, n) < 0) return NULL;
    return o;
}

/* How a matmul of a [..., M, K] and b [..., K, N] runs: the batch dims broadcast, size-1 ones dropped and
   neighbours that are contiguous in a, b and the output merged; the GEMM is batched over the innermost of
   them (element strides sa, sb, sc; sa or sb 0 where that operand repeats) and called once per index of
   the outer ones. fold: b has no batch and a's batches are contiguous: one GEMM of all a's rows. */
typedef struct gdl__mm_plan {
    int64_t M, N, K;
    int nb;                         /* batch dims kept */
    int64_t bs[GDL_MAX_DIMS], sa[GDL_MAX_DIMS], sb[GDL_MAX_DIMS], sc[GDL_MAX_DIMS];
    int out_nd;
    int64_t out_shape[GDL_MAX_DIMS];
} gdl__mm_plan;

static int gdl__mm_plan_of(const char *op, const gdl_tensor *a, const gdl_tensor *b, gdl__mm_plan *p) {
    int nda = a->ndim - 2, ndb = b->ndim - 2, nbd = nda > ndb ? nda : ndb, d, k = 0;
    int64_t ma, mb, mc, cnt = 1, rsa = 1, rsb = 1, rsc = 1, bsz[GDL_MAX_DIMS], ba[GDL_MAX_DIMS], bb[GDL_MAX_DIMS];
    p->M = a->shape[a->ndim - 2];
    p->K = a->shape[a->ndim - 1];
    p->N = b->shape[b->ndim - 1];
    if (b->shape[b->ndim - 2] != p->K) {
        gdl__set_error("%s: inner dimensions differ: %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
        return -1;
    }
    if (nbd + 2 > GDL_MAX_DIMS) {
        gdl__set_error("%s: the result of %s x %s has more than %d dims", op, gdl_shape_str(a), gdl_shape_str(b), GDL_MAX_DIMS);
        return -1;
    }
    for (d = 0; d < nbd; d++) {
        int ia = d - (nbd - nda), ib = d - (nbd - ndb);
        ba[d] = ia >= 0 ? a->shape[ia] : 1;
        bb[d] = ib >= 0 ? b->shape[ib] : 1;
        if (ba[d] != bb[d] && ba[d] != 1 && bb[d] != 1) {
            gdl__set_error("%s: batch dimensions cannot be broadcast: %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
            return -1;
        }
        bsz[d] = ba[d] == 1 ? bb[d] : ba[d];
        p->out_shape[d] = bsz[d];
    }
    p->out_nd = nbd + 2;
    p->out_shape[nbd] = p->M;
    p->out_shape[nbd + 1] = p->N;
    if (p->M > INT32_MAX || p->N > INT32_MAX || p->K > INT32_MAX) {
        gdl__set_error("%s: dimensions too large for the GEMM: %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
        return -1;
    }
    /* inner to outer: the strides in elements, merging a dim into the kept one inside it when all three
       continue it */
    ma = p->M * p->K;
    mb = p->K * p->N;
    mc = p->M * p->N;
    p->nb = 0;
    for (d = nbd - 1; d >= 0; d--) {
        int64_t sa = ba[d] == 1 ? 0 : rsa * ma, sb = bb[d] == 1 ? 0 : rsb * mb, sc = rsc * mc;
        if (ba[d] != 1) rsa *= ba[d];
        if (bb[d] != 1) rsb *= bb[d];
        rsc *= bsz[d];
        if (bsz[d] == 1) continue;
        if (k > 0 && sa == p->sa[k - 1] * p->bs[k - 1] && sb == p->sb[k - 1] * p->bs[k - 1] &&
            sc == p->sc[k - 1] * p->bs[k - 1]) {
            p->bs[k - 1] *= bsz[d];
            continue;
        }
        p->bs[k] = bsz[d];
        p->sa[k] = sa;
        p->sb[k] = sb;
        p->sc[k] = sc;
        k++;
    }
    for (d = 0; d < k / 2; d++) { /* outer first */
        int64_t t;
        t = p->bs[d]; p->bs[d] = p->bs[k - 1 - d]; p->bs[k - 1 - d] = t;
        t = p->sa[d]; p->sa[d] = p->sa[k - 1 - d]; p->sa[k - 1 - d] = t;
        t = p->sb[d]; p->sb[d] = p->sb[k - 1 - d]; p->sb[k - 1 - d] = t;
        t = p->sc[d]; p->sc[d] = p->sc[k - 1 - d]; p->sc[k - 1 - d] = t;
    }
    p->nb = k;
    for (d = 0; d < k; d++) cnt *= p->bs[d];
    /* fold: one GEMM of batch*M rows when b repeats for every batch and a and the output run on */
    if (k == 1 && p->sb[0] == 0 && p->sa[0] == ma) {
        p->M *= p->bs[0];
        p->nb = 0;
    }
    if (cnt > INT32_MAX || p->M > INT32_MAX) {
        gdl__set_error("%s: dimensions too large for the GEMM: %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
        return -1;
    }
    return 0;
}

/* what: 0 the forward C = A B, 1 gA += G B^T, 2 gB += A^T G; each GEMM batched over the plan's innermost
   batch dim, once per index of the outer ones. An operand that repeats along the batched dim (stride 0)
   gets the products summed into it (the backend's sC == 0: beta 1); along an outer dim, calls in turn. */
static int gdl__mm_run(const gdl_backend *be, gdl_dtype dt, const gdl__mm_plan *p, int what, const void *A,
                       const void *B, void *C) {
    int M = (int)p->M, N = (int)p->N, K = (int)p->K, last = p->nb - 1, d;
    int64_t outer = 1, o, idx[GDL_MAX_DIMS] = {0}, oa = 0, ob = 0, oc = 0;
    int batch = last >= 0 ? (int)p->bs[last] : 1;
    int64_t sa = last >= 0 ? p->sa[last] : 0, sb = last >= 0 ? p->sb[last] : 0, sc = last >= 0 ? p->sc[last] : 0;
    for (d = 0; d < last; d++) outer *= p->bs[d];
    for (o = 0; o < outer; o++) {
        const void *a = GDL__AT(A, dt, oa), *b = GDL__AT(B, dt, ob);
        int rc;
        if (what == 0)
            rc = gdl__gemm_dt(be, dt, 0, 0, M, N, K, a, K, sa, b, N, sb, 0, GDL__AT(C, dt, oc), N, sc, batch);
        else if (what == 1) /* A is G here, B is b; C is ga */
            rc = gdl__gemm_dt(be, dt, 0, 1, M, K, N, GDL__AT(A, dt, oc), N, sc, b, N, sb, 1, GDL__AT(C, dt, oa), K, sa,
                              batch);
        else /* A is a, B is G; C is gb */
            rc = gdl__gemm_dt(be, dt, 1, 0, K, N, M, a, K, sa, GDL__AT(B, dt, oc), N, sc, 1, GDL__AT(C, dt, ob), N, sb,
                              batch);
        if (rc < 0) return -1;
        for (d = last - 1; d >= 0; d--) { /* the odometer over the outer batch dims */
            oa += p->sa[d];
            ob += p->sb[d];
            oc += p->sc[d];
            if (++idx[d] < p->bs[d]) break;
            oa -= p->sa[d] * p->bs[d];
            ob -= p->sb[d] * p->bs[d];
            oc -= p->sc[d] * p->bs[d];
            idx[d] = 0;
        }
    }
    return 0;
}

static gdl_tensor *gdl__matmul_nd(const char *op, gdl_tensor *a, gdl_tensor *b, gdl_dtype dt) {
    gdl__mm_plan p;
    gdl_tensor *out, *in[2];
    const gdl_backend *be;
    int err;
    if (gdl__mm_plan_of(op, a, b, &p) < 0) return NULL;
    if (!(be = gdl__be(op, a->device)) || !(out = gdl__tmp(op, p.out_nd, p.out_shape, dt, a->device))) return NULL;
    if (out->numel && gdl__mm_run(be, dt, &p, 0, a->data, b->data, out->data) < 0) return NULL;
    in[0] = a;
    in[1] = b;
    gdl__record(op, GDL_OP_MATMUL, out, 2, in, &err);
    return err ? NULL : gdl__finish(op, out);
}

GPUDL_API gdl_tensor *gdl_matmul(gdl_tensor *a, gdl_tensor *b) {
    const char *op = "gdl_matmul";
    gdl_dtype dt = GDL_F32;
    gdl_tensor *r;
    int64_t s[GDL_MAX_DIMS];
    int k, nd;
    if (gdl__ac_dt != GDL_F32 || (a && a->dtype != GDL_F32) || (b && b->dtype != GDL_F32)) {
        if (a && b && a->dtype == b->dtype && gdl__is_low(a->dtype) && gdl__ac_native(a->dtype)) dt = a->dtype; /* native */
        else GDL__LOWP2(op, GDL_OP_MATMUL, gdl_matmul(a, b), a, b);
    }
    if (gdl__check_two(op, "a", a, dt == GDL_F32, "b", b, dt == GDL_F32) < 0) return NULL;
    if (a->ndim < 1 || b->ndim < 1) {
        gdl__set_error("%s: both operands need at least 1 dim, got %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
        return NULL;
    }
    if (a->ndim >= 2 && b->ndim >= 2) return gdl__matmul_nd(op, a, b, dt);
    /* a vector: a row [1,K] (a) or a column [K,1] (b), its dim taken out of the result (torch.matmul) */
    if ((a->ndim == 1 ? a->shape[0] : a->shape[a->ndim - 1]) != (b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2])) {
        gdl__set_error("%s: inner dimensions differ: %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
        return NULL;
    }
    {
        int64_t row[2], col[2];
        gdl_tensor *a2 = a, *b2 = b;
        row[0] = 1;
        row[1] = a->shape[0];
        col[0] = b->shape[0];
        col[1] = 1;
        if (a->ndim == 1 && !(a2 = gdl__view(op, a, 2, row, 0))) return NULL;
        if (b->ndim == 1 && !(b2 = gdl__view(op, b, 2, col, 0))) return NULL;
        if (!(r = gdl__matmul_nd(op, a2, b2, dt))) return NULL;
    }
    nd = 0;
    for (k = 0; k < r->ndim; k++)
        if (!((a->ndim == 1 && k == r->ndim - 2) || (b->ndim == 1 && k == r->ndim - 1))) s[nd++] = r->shape[k];
    return gdl__view(op, r, nd, s, 0);
}

GPUDL_API gdl_tensor *gdl_bmm(gdl_tensor *a, gdl_tensor *b) {
    if (a && b && (a->ndim != 3 || b->ndim != 3 || a->shape[0] != b->shape[0])) {
        gdl__set_error("gdl_bmm: expected [B,M,K] x [B,K,N] with one B, got %s x %s", gdl_shape_str(a), gdl_shape_str(b));
        return NULL;
    }
    return gdl_matmul(a, b);
}

static int gdl__bw_matmul(gdl_node *n, const gdl_backend *be) {
    gdl__mm_plan p;
    gdl_dtype dt = n->out->dtype; /* f32, or the inputs' one low dtype */
    void *g = n->out->grad->data, *A = n->in[0]->data, *B = n->in[1]->data;
    if (!n->out->numel || gdl__mm_plan_of("gdl_backward", n->in[0], n->in[1], &p) < 0) return n->out->numel ? -1 : 0;
    if (n->in[0]->requires_grad && gdl__mm_run(be, dt, &p, 1, g, B, n->in[0]->grad->data) < 0) return -1;
    if (n->in[1]->requires_grad && gdl__mm_run(be, dt, &p, 2, A, g, n->in[1]->grad->data) < 0) return -1;
    return 0;
}

/* gdl_linear's and gdl_linear_act's shapes: input [..., in_features], weight [out_features, in_features],
   bias [out_features]; the output's shape and the GEMM's rows (the input's leading dims). -1 after an error. */
static int gdl__linear_shapes(const char *op, const gdl_tensor *x, const gdl_tensor *w, const gdl_tensor *bias,
                              int64_t shape[GDL_MAX_DIMS], int64_t *rows) {
    int64_t in_f, out_f;
    int k;
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1]) {
        gdl__set_error("%s: input %s does not match weight %s (expected the input's last dim = in_features = weight dim 1)",
                       op, gdl_shape_str(x), gdl_shape_str(w));
        return -1;
    }
    in_f = w->shape[1];
    out_f = w->shape[0];
    if (bias && (bias->ndim != 1 || bias->shape[0] != out_f)) {
        gdl__set_error("%s: bias %s does not match weight %s (expected [%lld])", op, gdl_shape_str(bias),
                       gdl_shape_str(w), (long long)out_f);
        return -1;
    }
    memcpy(shape, x->shape, sizeof(int64_t) * GDL_MAX_DIMS);
    shape[x->ndim - 1] = out_f;
    *rows = 1;
    for (k = 0; k + 1 < x->ndim; k++) *rows *= x->shape[k];
    if (*rows > INT32_MAX || in_f > INT32_MAX || out_f > INT32_MAX) {
        gdl__set_error("%s: dimensions too large for the GEMM: input %s, weight %s", op, gdl_shape_str(x), gdl_shape_str(w));
        return -1;
    }
    return 0;
}

GPUDL_API gdl_tensor *gdl_linear(gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias) {
    const char *op = "gdl_linear";
    int64_t in_f, out_f, rows, shape[GDL_MAX_DIMS];
    int err;
    gdl_tensor *out, *in[3];
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (gdl__xwb_not_f32(x, w, bias)) {
        if (gdl__xwb_native(x, w, bias)) dt = x->dtype;
        else GDL__LOWP3(op, GDL_OP_LINEAR, gdl_linear(x, w, bias), x, w, bias);
    }
    if (gdl__check_xwb(op, x, w, bias, dt == GDL_F32) < 0 || gdl__linear_shapes(op, x, w, bias, shape, &rows) < 0)
        return NULL;
    in_f = w->shape[1];
    out_f = w->shape[0];
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, shape, dt, x->device))) return NULL;
    if (out->numel && dt != GDL_F32) { /* out = bias rows (ones x bias), then out += x W^T: one rounding */
        void *ones = bias ? gdl__ones_dt(op, be, x->device, dt, rows) : NULL;
        if ((bias && (!ones || gdl__gemm_dt(be, dt, 0, 0, (int)rows, (int)out_f, 1, ones, 1, 0, bias->data, (int)out_f, 0,
                                            0, out->data, (int)out_f, 0, 1) < 0)) ||
            gdl__gemm_dt(be, dt, 0, 1, (int)rows, (int)out_f, (int)in_f, x->data, (int)in_f, 0, w->data, (int)in_f, 0,
                         bias ? 1 : 0, out->data, (int)out_f, 0, 1) < 0)
            return NULL;
    } else if (out->numel) {
        int64_t s2[2], ystr[2], bstr[2];
        if (be->gemm(0, 1, (int)rows, (int)out_f, (int)in_f, 1, GDL__R(x), (int)in_f, 0, GDL__R(w), (int)in_f, 0, 0,
                     GDL__R(out), (int)out_f, 0, 1) < 0)
            return NULL;
        s2[0] = rows; s2[1] = out_f;
        ystr[0] = out_f; ystr[1] = 1;
        bstr[0] = 0; bstr[1] = 1;
        if (bias && be->binary(GDL_BIN_ADD, 2, s2, GDL__R(out), ystr, GDL__R(bias), bstr, GDL__R(out)) < 0) return NULL;
    }
    in[0] = x;
    in[1] = w;
    in[2] = bias;
    gdl__record(op, GDL_OP_LINEAR, out, 3, in, &err);
    return err ? NULL : gdl__finish(op, out);
}

static int gdl__bw_linear(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0], *w = n->in[1];
    int in_f = (int)w->shape[1], out_f = (int)w->shape[0], rows = (int)(n->out->numel / (out_f ? out_f : 1));
    gdl_real *g = GDL__R(n->out->grad), *gx = GDL__G(x), *gw = GDL__G(w), *gb = GDL__G(n->in[2]);
    gdl_dtype dt = n->out->dtype;
    if (!n->out->numel) return 0;
    if (dt != GDL_F32) { /* the same GEMMs in dt; the bias gradient is ones^T g */
        void *ones = gb ? gdl__ones_dt("gdl_backward", be, x->device, dt, rows) : NULL;
        if (gx && gdl__gemm_dt(be, dt, 0, 0, rows, in_f, out_f, g, out_f, 0, w->data, in_f, 0, 1, gx, in_f, 0, 1) < 0) return -1;
        if (gw && gdl__gemm_dt(be, dt, 1, 0, out_f, in_f, rows, g, out_f, 0, x->data, in_f, 0, 1, gw, in_f, 0, 1) < 0) return -1;
        if (gb && (!ones || gdl__gemm_dt(be, dt, 0, 0, 1, out_f, rows, ones, rows, 0, g, out_f, 0, 1, gb, out_f, 0, 1) < 0))
            return -1;
        return 0;
    }
    if (gx && be->gemm(0, 0, rows, in_f, out_f, 1, g, out_f, 0, GDL__R(w), in_f, 0, 1, gx, in_f, 0, 1) < 0) return -1;
    if (gw && be->gemm(1, 0, out_f, in_f, rows, 1, g, out_f, 0, GDL__R(x), in_f, 0, 1, gw, in_f, 0, 1) < 0) return -1;
    if (gb && be->reduce(GDL_RED_SUM, 1, rows, out_f, g, gb, NULL, 1) < 0) return -1;
    return 0;
}

/* gdl_act -> the backend's activation code (GDL_UN_*, -1 none); -2 after an error naming op */
static int gdl__act_code(const char *op, int act) {
    switch (act) {
    case GDL_ACT_NONE: return -1;
    case GDL_ACT_RELU: return GDL_UN_RELU;
    case GDL_ACT_GELU_TANH: return GDL_UN_GELU_TANH;
    case GDL_ACT_GELU: return GDL_UN_GELU_ERF;
    default:
        gdl__set_error("%s: unknown activation %d (GDL_ACT_NONE, GDL_ACT_RELU, GDL_ACT_GELU_TANH or GDL_ACT_GELU)", op,
                       act);
        return -2;
    }
}

GPUDL_API gdl_tensor *gdl_linear_act(gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, gdl_act act) {
    const char *op = "gdl_linear_act";
    int64_t in_f, out_f, rows, shape[GDL_MAX_DIMS];
    int err, ua = gdl__act_code(op, (int)act);
    gdl_tensor *out, *pre = NULL, *in[3];
    gdl_node *n;
    const gdl_backend *be;
    if (ua == -2) return NULL;
    /* low dtypes and autocast: the f32 op on f32 copies, rounded once */
    GDL__LOWP3(op, GDL_OP_LINEAR_ACT, gdl_linear_act(x, w, bias, act), x, w, bias);
    if (gdl__check_xwb(op, x, w, bias, 1) < 0 || gdl__linear_shapes(op, x, w, bias, shape, &rows) < 0) return NULL;
    in_f = w->shape[1];
    out_f = w->shape[0];
    in[0] = x;
    in[1] = w;
    in[2] = bias;
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, shape, GDL_F32, x->device))) return NULL;
    /* GELU's backward needs its input (cuBLASLt's aux output); ReLU's reads the output */
    if ((ua == GDL_UN_GELU_TANH || ua == GDL_UN_GELU_ERF) && gdl__needs_grad(3, in) &&
        !(pre = gdl__tmp(op, x->ndim, shape, GDL_F32, x->device)))
        return NULL;
    if (out->numel && be->linear_act(ua, (int)rows, (int)out_f, (int)in_f, GDL__R(x), GDL__R(w),
                                     bias ? GDL__R(bias) : NULL, GDL__R(out), pre ? GDL__R(pre) : NULL) < 0)
        return NULL;
    n = gdl__record(op, GDL_OP_LINEAR_ACT, out, 3, in, &err);
    if (err) return NULL;
    if (n) {
        n->i[0] = ua;
        n->saved[0] = pre;
    }
    return gdl__finish(op, out);
}

static int gdl__bw_linear_act(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0], *w = n->in[1];
    int in_f = (int)w->shape[1], out_f = (int)w->shape[0], rows = (int)(n->out->numel / (out_f ? out_f : 1));
    int ua = (int)n->i[0];
    gdl_real *g = GDL__R(n->out->grad), *gx = GDL__G(x), *gw = GDL__G(w), *gb = GDL__G(n->in[2]);
    if (!n->out->numel) return 0;
    if (ua >= 0 && (gx || gw || gb)) { /* act' and the bias gradient in one pass; then the GEMMs take act'·g */
        gdl_real *gp = (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)n->out->numel);
        const gdl_real *pre = n->saved[0] ? GDL__R(n->saved[0]) : GDL__R(n->out);
        if (!gp || be->act_backward_reduce(ua, 1, rows, out_f, pre, g, gp, gb, 1) < 0) return -1;
        g = gp;
    } else if (gb && be->reduce(GDL_RED_SUM, 1, rows, out_f, g, gb, NULL, 1) < 0) {
        return -1;
    }
    if (gx && be->gemm(0, 0, rows, in_f, out_f, 1, g, out_f, 0, GDL__R(w), in_f, 0, 1, gx, in_f, 0, 1) < 0) return -1;
    if (gw && be->gemm(1, 0, out_f, in_f, rows, 1, g, out_f, 0, GDL__R(x), in_f, 0, 1, gw, in_f, 0, 1) < 0) return -1;
    return 0;
}

/* ---- reductions and softmax ---- */

static gdl_tensor *gdl__reduce(const char *opname, int op, gdl_tensor *x, int all, int dim, int keepdim) {
    int64_t outer, nred, inner, shape[GDL_MAX_DIMS] = {0};
    int d = 0, nd = 0, k, err;
    gdl_tensor *out, *idx = NULL;
    gdl_node *n;
    const gdl_backend *be;
    GDL__LOWP1(opname, op, gdl__reduce(opname, op, x, all, dim, keepdim), x);
    if (gdl__check_in(opname, "x", x, 1) < 0) return NULL;
    if (all) {
        outer = inner = 1;
        nred = x->numel;
    } else {
        if (gdl__dim(opname, x, dim, &d) < 0) return NULL;
        gdl__split(x, d, &outer, &nred, &inner);
        for (k = 0; k < x->ndim; k++) {
            if (k != d) shape[nd++] = x->shape[k];
            else if (keepdim) shape[nd++] = 1;
        }
    }
    if (op == GDL_OP_MAX && nred == 0) {
        gdl__set_error("%s: cannot take the max over an empty dimension of %s", opname, gdl_shape_str(x));
        return NULL;
    }
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, nd, shape, GDL_F32, x->device))) return NULL;
    if (op == GDL_OP_MAX && !(idx = gdl__tmp(opname, nd, shape, GDL_I32, x->device))) return NULL;
    if (out->numel && be->reduce(gdl__op(op)->kernel, outer, nred, inner, GDL__R(x), GDL__R(out),
                                 idx ? (int32_t *)idx->data : NULL, 0) < 0)
        return NULL;
    n = gdl__record(opname, op, out, 1, &x, &err);
    if (err) return NULL;
    if (n) {
        n->i[0] = outer; n->i[1] = nred; n->i[2] = inner;
        n->saved[0] = idx;
    }
    return gdl__finish(opname, out);
}

static int gdl__gap_lp(const char *op, const gdl_backend *be, gdl_dtype dt, gdl_device dev, int64_t P, int64_t HW,
                       const void *src, void *dst, int backward);
static int gdl__bw_reduce(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    if (!gx || !n->out->numel) return 0;
    if (n->op == GDL_OP_GLOBAL_AVG_POOL2D && n->out->dtype != GDL_F32) /* the native low-precision one */
        return gdl__gap_lp("gdl_backward", be, n->out->dtype, n->out->device, n->i[0], n->i[1], n->out->grad->data, gx, 1);
    return be->reduce_backward(gdl__op(n->op)->kernel, n->i[0], n->i[1], n->i[2], GDL__R(n->out->grad),
                               n->saved[0] ? (const int32_t *)n->saved[0]->data : NULL, gx);
}

GPUDL_API gdl_tensor *gdl_sum(gdl_tensor *x) { return gdl__reduce("gdl_sum", GDL_OP_SUM, x, 1, 0, 0); }
GPUDL_API gdl_tensor *gdl_mean(gdl_tensor *x) { return gdl__reduce("gdl_mean", GDL_OP_MEAN, x, 1, 0, 0); }
GPUDL_API gdl_tensor *gdl_sum_dim(gdl_tensor *x, int dim, int keepdim) { return gdl__reduce("gdl_sum_dim", GDL_OP_SUM, x, 0, dim, keepdim); }
GPUDL_API gdl_tensor *gdl_mean_dim(gdl_tensor *x, int dim, int keepdim) { return gdl__reduce("gdl_mean_dim", GDL_OP_MEAN, x, 0, dim, keepdim); }
GPUDL_API gdl_tensor *gdl_max_dim(gdl_tensor *x, int dim, int keepdim) { return gdl__reduce("gdl_max_dim", GDL_OP_MAX, x, 0, dim, keepdim); }

GPUDL_API gdl_tensor *gdl_argmax(gdl_tensor *x, int dim) {
    int64_t outer, nred, inner, shape[GDL_MAX_DIMS];
    int d, k, nd = 0;
    gdl_tensor *out;
    const gdl_backend *be;
    GDL__LOWP1("gdl_argmax", -1, gdl_argmax(x, dim), x);
    if (gdl__check_in("gdl_argmax", "x", x, 1) < 0 || gdl__dim("gdl_argmax", x, dim, &d) < 0) return NULL;
    gdl__split(x, d, &outer, &nred, &inner);
    if (nred == 0) {
        gdl__set_error("gdl_argmax: empty dimension %d of %s", dim, gdl_shape_str(x));
        return NULL;
    }
    for (k = 0; k < x->ndim; k++)
        if (k != d) shape[nd++] = x->shape[k];
    if (!(be = gdl__be("gdl_argmax", x->device)) || !(out = gdl__tmp("gdl_argmax", nd, shape, GDL_I32, x->device)))
        return NULL;
    if (out->numel && be->argmax(outer, nred, inner, GDL__R(x), (int32_t *)out->data) < 0) return NULL;
    return gdl__finish("gdl_argmax", out);
}

static gdl_tensor *gdl__softmax(const char *opname, int op, gdl_tensor *x, int dim) {
    int64_t outer, nred, inner;
    int d, err;
    gdl_tensor *out;
    gdl_node *n;
    const gdl_backend *be;
    GDL__LOWP1(opname, op, gdl__softmax(opname, op, x, dim), x);
    if (gdl__check_in(opname, "x", x, 1) < 0 || gdl__dim(opname, x, dim, &d) < 0) return NULL;
    gdl__split(x, d, &outer, &nred, &inner);
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, x->ndim, x->shape, GDL_F32, x->device))) return NULL;
    if (out->numel && be->softmax(op == GDL_OP_LOG_SOFTMAX, outer, nred, inner, GDL__R(x), GDL__R(out)) < 0) return NULL;
    n = gdl__record(opname, op, out, 1, &x, &err);
    if (err) return NULL;
    if (n) {
        n->i[0] = outer; n->i[1] = nred; n->i[2] = inner;
    }
    return gdl__finish(opname, out);
}

static int gdl__bw_softmax(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    if (!gx || !n->out->numel) return 0;
    return be->softmax_backward(n->op == GDL_OP_LOG_SOFTMAX, n->i[0], n->i[1], n->i[2], GDL__R(n->out),
                                GDL__R(n->out->grad), gx);
}

GPUDL_API gdl_tensor *gdl_softmax(gdl_tensor *x, int dim) { return gdl__softmax("gdl_softmax", GDL_OP_SOFTMAX, x, dim); }
GPUDL_API gdl_tensor *gdl_log_softmax(gdl_tensor *x, int dim) { return gdl__softmax("gdl_log_softmax", GDL_OP_LOG_SOFTMAX, x, dim); }

/* cumsum: an F32-class op (torch.autocast), so bf16/f16 inputs run on f32 copies (the hook) */
GPUDL_API gdl_tensor *gdl_cumsum(gdl_tensor *x, int dim) {
    const char *op = "gdl_cumsum";
    int64_t outer, nred, inner;
    int d, err;
    gdl_tensor *out;
    gdl_node *n;
    const gdl_backend *be;
    GDL__LOWP1(op, GDL_OP_CUMSUM, gdl_cumsum(x, dim), x);
    if (gdl__check_in(op, "x", x, 1) < 0) return NULL;
    if (x->ndim == 0) { /* a scalar: itself, as torch.cumsum(dim 0 or -1) */
        if (dim != 0 && dim != -1) {
            gdl__set_error("%s: dim %d out of range for a scalar", op, dim);
            return NULL;
        }
        d = 0;
        outer = nred = inner = 1;
    } else {
        if (gdl__dim(op, x, dim, &d) < 0) return NULL;
        gdl__split(x, d, &outer, &nred, &inner);
    }
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, x->shape, GDL_F32, x->device))) return NULL;
    if (out->numel && be->cumsum(outer, nred, inner, GDL__R(x), GDL__R(out), 0, 0) < 0) return NULL;
    n = gdl__record(op, GDL_OP_CUMSUM, out, 1, &x, &err);
    if (err) return NULL;
    if (n) {
        n->i[0] = outer; n->i[1] = nred; n->i[2] = inner;
    }
    return gdl__finish(op, out);
}

/* the gradient of a prefix sum is the suffix sum of the gradient */
static int gdl__bw_cumsum(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    if (!gx || !n->out->numel) return 0;
    return be->cumsum(n->i[0], n->i[1], n->i[2], GDL__R(n->out->grad), gx, 1, 1);
}

/* ---- convolution and pooling (NCHW) ---- */

/* A convolution on f16/bf16 (dt) x, w, bias: the columns in dt, the GEMMs
   through gemm_lp (f32 sums), the bias first written into out by a rank-1
   GEMM with ones so that out = bias + W*col rounds once, as gdl_linear's
   low path. *colp: the columns (x's data when direct). */
static int gdl__conv2d_lp(const char *op, const gdl_backend *be, gdl_dtype dt, const gdl_conv_geom *g, int groups,
                          int direct, gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, gdl_tensor *out, void **colp) {
    int64_t OC = out->shape[1], Cg = g->C / groups, OCg = OC / groups, KK = (int64_t)g->KH * g->KW;
    int64_t OHW = (int64_t)g->OH * g->OW;
    void *col = x->data;
    int gi;
    if (!direct && (!(col = gdl__scratch(op, x->device, gdl_dtype_size(dt) * (size_t)(g->N * g->C * KK * OHW))) ||
                    be->im2col_lp(dt, g, x->data, col) < 0))
        return -1;
    *colp = col;
    if (bias) {
        void *ones = gdl__ones_dt(op, be, x->device, dt, OHW);
        if (!ones || gdl__gemm_dt(be, dt, 0, 0, (int)OC, (int)OHW, 1, bias->data, 1, 0, ones, (int)OHW, 0, 0, out->data,
                                  (int)OHW, OC * OHW, g->N) < 0)
            return -1;
    }
    for (gi = 0; gi < groups; gi++)
        if (gdl__gemm_dt(be, dt, 0, 0, (int)OCg, (int)OHW, (int)(Cg * KK), GDL__AT(w->data, dt, gi * OCg * Cg * KK),
                         (int)(Cg * KK), 0, GDL__AT(col, dt, gi * Cg * KK * OHW), (int)OHW, g->C * KK * OHW, bias ? 1 : 0,
                         GDL__AT(out->data, dt, gi * OCg * OHW), (int)OHW, OC * OHW, g->N) < 0)
            return -1;
    return 0;
}

/* its backward: the same GEMMs as the f32 one, in dt; the bias gradient is
   gy times ones; the columns' gradient goes back through col2im_lp, whose
   sums are f32 (gx rounded once; the columns' gradient itself is rounded
   to dt first, as the GEMM's output). The weight and bias gradients sum
   over the samples in one gemm_lp call with sC == 0, which sums the
   products in f32 and rounds once (on a GPU once per chunk of samples:
   gdl__cu_gemm_sum), not once a sample. */
static int gdl__bw_conv2d_lp(gdl_node *n, const gdl_backend *be) {
    const gdl_conv_geom *g = &n->geom;
    gdl_dtype dt = n->out->dtype;
    int groups = (int)n->i[0], direct = (int)n->i[1], gi;
    int64_t OC = n->out->shape[1], Cg = g->C / groups, OCg = OC / groups, KK = (int64_t)g->KH * g->KW;
    int64_t OHW = (int64_t)g->OH * g->OW, CKK = (int64_t)g->C * KK;
    void *gy = n->out->grad->data, *W = n->in[1]->data, *col = n->buf;
    void *gx = n->in[0]->requires_grad ? n->in[0]->grad->data : NULL;
    void *gw = n->in[1]->requires_grad ? n->in[1]->grad->data : NULL;
    void *gb = n->in[2] && n->in[2]->requires_grad ? n->in[2]->grad->data : NULL;
    if (gb) {
        void *ones = gdl__ones_dt("gdl_backward", be, n->out->device, dt, OHW);
        if (!ones || gdl__gemm_dt(be, dt, 0, 1, 1, (int)OC, (int)OHW, ones, (int)OHW, 0, gy, (int)OHW, OC * OHW, 1, gb,
                                  (int)OC, 0, g->N) < 0)
            return -1;
    }
    if (gw)
        for (gi = 0; gi < groups; gi++) {
            int64_t wg = OCg * Cg * KK; /* one group's block of gw: OCg rows of Cg*KK, contiguous */
            if (gdl__gemm_dt(be, dt, 0, 1, (int)OCg, (int)(Cg * KK), (int)OHW, GDL__AT(gy, dt, gi * OCg * OHW), (int)OHW,
                             OC * OHW, GDL__AT(col, dt, gi * Cg * KK * OHW), (int)OHW, CKK * OHW, 1,
                             GDL__AT(gw, dt, gi * wg), (int)(Cg * KK), 0, g->N) < 0)
                return -1;
        }
    if (gx) {
        void *gcol = direct ? gx : gdl__scratch("gdl_backward", n->out->device, gdl_dtype_size(dt) * (size_t)(g->N * CKK * OHW));
        if (!gcol) return -1;
        for (gi = 0; gi < groups; gi++)
            if (gdl__gemm_dt(be, dt, 1, 0, (int)(Cg * KK), (int)OHW, (int)OCg, GDL__AT(W, dt, gi * OCg * Cg * KK),
                             (int)(Cg * KK), 0, GDL__AT(gy, dt, gi * OCg * OHW), (int)OHW, OC * OHW, direct ? 1 : 0,
                             GDL__AT(gcol, dt, gi * Cg * KK * OHW), (int)OHW, CKK * OHW, g->N) < 0)
                return -1;
        if (!direct && be->col2im_lp(dt, g, gcol, gx) < 0) return -1;
    }
    return 0;
}

/* conv2d (act -2: GDL_OP_CONV2D) or conv2d then bias + act (the backend's code, -1 none) in one pass
   (GDL_OP_CONV2D_ACT) */
static gdl_tensor *gdl__conv2d(const char *op, gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, const int stride[2],
                               const int padding[2], const int dilation[2], int groups, int act) {
    gdl_conv_geom g;
    int64_t OC, Cg, OCg, KK, OHW, shape[4];
    gdl_tensor *out, *pre = NULL, *in[3];
    gdl_real *col;
    gdl_node *n;
    int gi, err, direct, opid = act >= -1 ? GDL_OP_CONV2D_ACT : GDL_OP_CONV2D;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (gdl__xwb_not_f32(x, w, bias)) {
        /* native (gdl__conv2d_lp) for the plain convolution; the fused one in low precision through f32 copies */
        if (act == -2 && gdl__xwb_native(x, w, bias)) dt = x->dtype;
        else GDL__LOWP3(op, opid, gdl__conv2d(op, x, w, bias, stride, padding, dilation, groups, act), x, w, bias);
    }
    if (gdl__check_xwb(op, x, w, bias, dt == GDL_F32) < 0) return NULL;
    if (!stride || !padding || !dilation) {
        gdl__null_arg(op, !stride ? "stride" : !padding ? "padding" : "dilation");
        return NULL;
    }
    if (x->ndim != 4 || w->ndim != 4) {
        gdl__set_error("%s: expected input [N,C,H,W] and weight [OC,C/groups,KH,KW], got %s and %s", op,
                       gdl_shape_str(x), gdl_shape_str(w));
        return NULL;
    }
    OC = w->shape[0];
    if (groups < 1 || x->shape[1] % groups || OC % groups || w->shape[1] * groups != x->shape[1]) {
        gdl__set_error("%s: input %s, weight %s and groups %d do not match (need C = weight dim 1 x groups, "
                       "both C and OC divisible by groups)", op, gdl_shape_str(x), gdl_shape_str(w), groups);
        return NULL;
    }
    if (stride[0] < 1 || stride[1] < 1 || padding[0] < 0 || padding[1] < 0 || dilation[0] < 1 || dilation[1] < 1) {
        gdl__set_error("%s: bad stride (%d,%d), padding (%d,%d) or dilation (%d,%d)", op, stride[0], stride[1],
                       padding[0], padding[1], dilation[0], dilation[1]);
        return NULL;
    }
    if (bias && (bias->ndim != 1 || bias->shape[0] != OC)) {
        gdl__set_error("%s: bias %s does not match %lld output channels", op, gdl_shape_str(bias), (long long)OC);
        return NULL;
    }
    g.N = (int)x->shape[0]; g.C = (int)x->shape[1]; g.H = (int)x->shape[2]; g.W = (int)x->shape[3];
    g.KH = (int)w->shape[2]; g.KW = (int)w->shape[3];
    g.SH = stride[0]; g.SW = stride[1]; g.PH = padding[0]; g.PW = padding[1]; g.DH = dilation[0]; g.DW = dilation[1];
    g.OH = (g.H + 2 * g.PH - g.DH * (g.KH - 1) - 1) / g.SH + 1;
    g.OW = (g.W + 2 * g.PW - g.DW * (g.KW - 1) - 1) / g.SW + 1;
    if (g.H + 2 * g.PH - g.DH * (g.KH - 1) - 1 < 0 || g.W + 2 * g.PW - g.DW * (g.KW - 1) - 1 < 0 || g.OH < 1 || g.OW < 1) {
        gdl__set_error("%s: kernel %dx%d (dilation %d,%d) is larger than the padded input %s", op, g.KH, g.KW, g.DH,
                       g.DW, gdl_shape_str(x));
        return NULL;
    }
    Cg = g.C / groups; OCg = OC / groups; KK = (int64_t)g.KH * g.KW; OHW = (int64_t)g.OH * g.OW;
    shape[0] = g.N; shape[1] = OC; shape[2] = g.OH; shape[3] = g.OW;
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, 4, shape, dt, x->device))) return NULL;
    /* a 1x1 stride-1 unpadded convolution is a GEMM on the input itself */
    direct = g.KH == 1 && g.KW == 1 && g.SH == 1 && g.SW == 1 && g.PH == 0 && g.PW == 0;
    if (dt != GDL_F32) {
        void *lcol = NULL;
        if (gdl__conv2d_lp(op, be, dt, &g, groups, direct, x, w, bias, out, &lcol) < 0) return NULL;
        col = (gdl_real *)lcol;
    } else if (direct) {
        col = GDL__R(x);
    } else {
        col = (gdl_real *)gdl__scratch(op, x->device, sizeof(gdl_real) * (size_t)(g.N * g.C * KK * OHW));
        if (!col || be->im2col(&g, GDL__R(x), col) < 0) return NULL;
    }
    for (gi = 0; gi < groups && dt == GDL_F32; gi++) /* (the low path made out above) */
        if (be->gemm(0, 0, (int)OCg, (int)OHW, (int)(Cg * KK), 1, GDL__R(w) + gi * OCg * Cg * KK, (int)(Cg * KK), 0,
                     col + gi * Cg * KK * OHW, (int)OHW, g.C * KK * OHW, 0, GDL__R(out) + gi * OCg * OHW, (int)OHW,
                     OC * OHW, g.N) < 0)
            return NULL;
    in[0] = x; in[1] = w; in[2] = bias;
    if (act >= -1) {
        if (act >= 0 && act != GDL_UN_RELU && gdl__needs_grad(3, in) && !(pre = gdl__tmp(op, 4, shape, GDL_F32, x->device)))
            return NULL;
        if (out->numel && be->bias_act(act, g.N, OC, OHW, bias ? GDL__R(bias) : NULL, GDL__R(out),
                                       pre ? GDL__R(pre) : NULL) < 0)
            return NULL;
    } else if (bias && dt == GDL_F32) {
        int64_t s3[3], ostr[3], bstr[3];
        s3[0] = g.N; s3[1] = OC; s3[2] = OHW;
        ostr[0] = OC * OHW; ostr[1] = OHW; ostr[2] = 1;
        bstr[0] = 0; bstr[1] = 1; bstr[2] = 0;
        if (be->binary(GDL_BIN_ADD, 3, s3, GDL__R(out), ostr, GDL__R(bias), bstr, GDL__R(out)) < 0) return NULL;
    }
    n = gdl__record(op, opid, out, 3, in, &err);
    if (err) return NULL;
    if (n) {
        n->geom = g;
        n->buf = col;
        n->i[0] = groups;
        n->i[1] = direct;
        n->i[2] = act;
        n->saved[0] = pre;
    }
    return gdl__finish(op, out);
}

GPUDL_API gdl_tensor *gdl_conv2d_ex(gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, const int stride[2],
                                    const int padding[2], const int dilation[2], int groups) {
    return gdl__conv2d("gdl_conv2d", x, w, bias, stride, padding, dilation, groups, -2);
}

GPUDL_API gdl_tensor *gdl_conv2d_act(gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, int stride, int padding,
                                     int dilation, int groups, gdl_act act) {
    int s[2], p[2], d[2], ua = gdl__act_code("gdl_conv2d_act", (int)act);
    if (ua == -2) return NULL;
    s[0] = s[1] = stride;
    p[0] = p[1] = padding;
    d[0] = d[1] = dilation;
    return gdl__conv2d("gdl_conv2d_act", x, w, bias, s, p, d, groups, ua);
}

GPUDL_API gdl_tensor *gdl_conv2d(gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, int stride, int padding,
                                 int dilation, int groups) {
    int s[2], p[2], d[2];
    s[0] = s[1] = stride;
    p[0] = p[1] = padding;
    d[0] = d[1] = dilation;
    return gdl_conv2d_ex(x, w, bias, s, p, d, groups);
}

static int gdl__bw_conv2d(gdl_node *n, const gdl_backend *be) {
    const gdl_conv_geom *g = &n->geom;
    int groups = (int)n->i[0], direct = (int)n->i[1], gi;
    int64_t OC = n->out->shape[1], Cg = g->C / groups, OCg = OC / groups, KK = (int64_t)g->KH * g->KW;
    int64_t OHW = (int64_t)g->OH * g->OW, CKK = (int64_t)g->C * KK;
    gdl_real *gy = GDL__R(n->out->grad), *gx = GDL__G(n->in[0]), *gw = GDL__G(n->in[1]), *gb = GDL__G(n->in[2]);
    gdl_real *W = GDL__R(n->in[1]), *col = (gdl_real *)n->buf;
    if (n->out->dtype != GDL_F32) return gdl__bw_conv2d_lp(n, be);
    int act = n->op == GDL_OP_CONV2D_ACT ? (int)n->i[2] : -1;
    if (act >= 0 && n->out->numel && (gx || gw || gb)) {
        /* act' into a scratch gradient, with the bias gradient's per-(n,c) sums in the same pass, in the
           unfused backward's order (sum over the pixels, then over N) */
        gdl_real *gp = (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)n->out->numel);
        gdl_real *t = gb ? (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)(g->N * OC))
                         : NULL;
        const gdl_real *pre = n->saved[0] ? GDL__R(n->saved[0]) : GDL__R(n->out);
        if (!gp || (gb && !t) || be->act_backward_reduce(act, g->N * OC, OHW, 1, pre, gy, gp, t, 0) < 0 ||
            (gb && be->reduce(GDL_RED_SUM, 1, g->N, OC, t, gb, NULL, 1) < 0))
            return -1;
        gy = gp;
    } else if (gb) { /* sum over N and the pixels */
        gdl_real *t = (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)(g->N * OC));
        if (!t || be->reduce(GDL_RED_SUM, g->N * OC, OHW, 1, gy, t, NULL, 0) < 0 ||
            be->reduce(GDL_RED_SUM, 1, g->N, OC, t, gb, NULL, 1) < 0)
            return -1;
    }
    if (gw) /* summed over the samples in turn: one batched call with sC == 0 per group */
        for (gi = 0; gi < groups; gi++)
            if (be->gemm(0, 1, (int)OCg, (int)(Cg * KK), (int)OHW, 1, gy + gi * OCg * OHW, (int)OHW, OC * OHW,
                         col + gi * Cg * KK * OHW, (int)OHW, CKK * OHW, 1, gw + gi * OCg * Cg * KK, (int)(Cg * KK), 0,
                         g->N) < 0)
                return -1;
    if (gx) {
        /* direct: the columns are the input, so accumulate straight into gx */
        gdl_real *gcol = direct ? gx : (gdl_real *)gdl__scratch("gdl_backward", n->out->device,
                                                                 sizeof(gdl_real) * (size_t)(g->N * CKK * OHW));
        if (!gcol) return -1;
        for (gi = 0; gi < groups; gi++)
            if (be->gemm(1, 0, (int)(Cg * KK), (int)OHW, (int)OCg, 1, W + gi * OCg * Cg * KK, (int)(Cg * KK), 0,
                         gy + gi * OCg * OHW, (int)OHW, OC * OHW, direct ? 1 : 0, gcol + gi * Cg * KK * OHW, (int)OHW,
                         CKK * OHW, g->N) < 0)
                return -1;
        if (!direct && be->col2im(g, gcol, gx) < 0) return -1;
    }
    return 0;
}

static gdl_tensor *gdl__pool(const char *opname, int op, gdl_tensor *x, int kernel, int stride, int padding) {
    gdl_conv_geom g;
    int64_t shape[4];
    gdl_tensor *out, *idx = NULL;
    gdl_node *n;
    int err, rc;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (x && gdl__is_low(x->dtype)) dt = x->dtype; /* native (autocast's class PROMOTE casts nothing) */
    else GDL__LOWP1(opname, op, gdl__pool(opname, op, x, kernel, stride, padding), x);
    if (gdl__check_in(opname, "input", x, dt == GDL_F32) < 0) return NULL;
    if (x->ndim != 4) {
        gdl__set_error("%s: expected input [N,C,H,W], got %s", opname, gdl_shape_str(x));
        return NULL;
    }
    if (stride == 0) stride = kernel;
    if (kernel < 1 || stride < 1 || padding < 0 || padding > kernel / 2) {
        gdl__set_error("%s: bad kernel %d, stride %d or padding %d (padding must be at most half the kernel)", opname,
                       kernel, stride, padding);
        return NULL;
    }
    memset(&g, 0, sizeof g);
    g.N = (int)x->shape[0]; g.C = (int)x->shape[1]; g.H = (int)x->shape[2]; g.W = (int)x->shape[3];
    g.KH = g.KW = kernel; g.SH = g.SW = stride; g.PH = g.PW = padding; g.DH = g.DW = 1;
    if (g.H + 2 * padding < kernel || g.W + 2 * padding < kernel) {
        gdl__set_error("%s: kernel %d is larger than the padded input %s", opname, kernel, gdl_shape_str(x));
        return NULL;
    }
    g.OH = (g.H + 2 * padding - kernel) / stride + 1;
    g.OW = (g.W + 2 * padding - kernel) / stride + 1;
    shape[0] = g.N; shape[1] = g.C; shape[2] = g.OH; shape[3] = g.OW;
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, 4, shape, dt, x->device))) return NULL;
    if (op == GDL_OP_MAX_POOL2D) {
        if (!(idx = gdl__tmp(opname, 4, shape, GDL_I32, x->device))) return NULL;
        rc = !out->numel ? 0
             : dt != GDL_F32 ? be->maxpool_lp(dt, &g, x->data, out->data, (int32_t *)idx->data)
                             : be->maxpool(&g, GDL__R(x), GDL__R(out), (int32_t *)idx->data);
    } else {
        rc = !out->numel ? 0 : dt != GDL_F32 ? be->avgpool_lp(dt, &g, x->data, out->data) : be->avgpool(&g, GDL__R(x), GDL__R(out));
    }
    if (rc < 0) return NULL;
    n = gdl__record(opname, op, out, 1, &x, &err);
    if (err) return NULL;
    if (n) {
        n->geom = g;
        n->saved[0] = idx;
    }
    return gdl__finish(opname, out);
}

static int gdl__bw_pool(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    gdl_dtype dt = n->out->dtype;
    if (!gx || !n->out->numel) return 0;
    if (dt != GDL_F32) {
        if (n->op == GDL_OP_MAX_POOL2D)
            return be->maxpool_backward_lp(dt, &n->geom, n->out->grad->data, (const int32_t *)n->saved[0]->data, gx);
        return be->avgpool_backward_lp(dt, &n->geom, n->out->grad->data, gx);
    }
    if (n->op == GDL_OP_MAX_POOL2D)
        return be->maxpool_backward(&n->geom, GDL__R(n->out->grad), (const int32_t *)n->saved[0]->data, gx);
    return be->avgpool_backward(&n->geom, GDL__R(n->out->grad), gx);
}

GPUDL_API gdl_tensor *gdl_max_pool2d(gdl_tensor *x, int kernel, int stride, int padding) {
    return gdl__pool("gdl_max_pool2d", GDL_OP_MAX_POOL2D, x, kernel, stride, padding);
}
GPUDL_API gdl_tensor *gdl_avg_pool2d(gdl_tensor *x, int kernel, int stride, int padding) {
    return gdl__pool("gdl_avg_pool2d", GDL_OP_AVG_POOL2D, x, kernel, stride, padding);
}

/* global average pooling of rows [P, HW] in dt as GEMMs with a vector of
   ones and alpha = 1/HW: forward y = x ones / HW, backward gx += gy ones^T /
   HW (f32 sums, rounded once) */
static int gdl__gap_lp(const char *op, const gdl_backend *be, gdl_dtype dt, gdl_device dev, int64_t P, int64_t HW,
                       const void *src, void *dst, int backward) {
    void *ones;
    float inv = (float)(1.0 / (double)HW);
    if (P > INT32_MAX || HW > INT32_MAX) {
        gdl__set_error("%s: input too large for the low-precision path (%lld planes of %lld)", op, (long long)P, (long long)HW);
        return -1;
    }
    if (!(ones = gdl__ones_dt(op, be, dev, dt, HW))) return -1;
    if (backward) /* dst = gx [P,HW] += src = gy [P,1] x ones [1,HW] / HW */
        return be->gemm_lp(dt, 0, 0, (int)P, (int)HW, 1, inv, src, 1, 0, ones, (int)HW, 0, 1.0f, dst, (int)HW, 0, 1);
    return be->gemm_lp(dt, 0, 0, (int)P, 1, (int)HW, inv, src, (int)HW, 0, ones, 1, 0, 0.0f, dst, 1, 0, 1);
}

GPUDL_API gdl_tensor *gdl_global_avg_pool2d(gdl_tensor *x) {
    const char *op = "gdl_global_avg_pool2d";
    int64_t shape[4];
    gdl_tensor *out;
    gdl_node *n;
    int err;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (x && gdl__is_low(x->dtype)) dt = x->dtype; /* native: a GEMM with ones (f32 sums, one rounding) */
    else GDL__LOWP1(op, GDL_OP_GLOBAL_AVG_POOL2D, gdl_global_avg_pool2d(x), x);
    if (gdl__check_in(op, "input", x, dt == GDL_F32) < 0) return NULL;
    if (x->ndim != 4 || x->shape[2] * x->shape[3] == 0) {
        gdl__set_error("%s: expected a non-empty input [N,C,H,W], got %s", op, gdl_shape_str(x));
        return NULL;
    }
    shape[0] = x->shape[0]; shape[1] = x->shape[1]; shape[2] = shape[3] = 1;
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, 4, shape, dt, x->device))) return NULL;
    if (dt != GDL_F32) {
        if (out->numel && gdl__gap_lp(op, be, dt, x->device, shape[0] * shape[1], x->shape[2] * x->shape[3], x->data,
                                      out->data, 0) < 0)
            return NULL;
    } else if (out->numel && be->reduce(GDL_RED_MEAN, shape[0] * shape[1], x->shape[2] * x->shape[3], 1, GDL__R(x),
                                        GDL__R(out), NULL, 0) < 0) {
        return NULL;
    }
    n = gdl__record(op, GDL_OP_GLOBAL_AVG_POOL2D, out, 1, &x, &err);
    if (err) return NULL;
    if (n) {
        n->i[0] = shape[0] * shape[1]; n->i[1] = x->shape[2] * x->shape[3]; n->i[2] = 1;
    }
    return gdl__finish(op, out);
}

/* ---- concat ---- */

GPUDL_API gdl_tensor *gdl_concat(int count, gdl_tensor *const *xs, int dim) {
    const char *op = "gdl_concat";
    int64_t shape[GDL_MAX_DIMS], outer, nd0, inner, total, off = 0;
    int k, j, d, err;
    gdl_tensor *out;
    gdl_node *n;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (count < 1 || !xs) {
        gdl__set_error("%s: need at least one tensor (got %d)", op, count);
        return NULL;
    }
    for (k = 0; k < count; k++)
        if (!xs[k] || xs[k]->dtype != xs[0]->dtype) break;
    /* native in one low dtype, unless a tensor comes twice (its gradients
       are summed in f32 by the cast path's one copy, rounded once) */
    if (k == count && gdl__lp_native(GDL_OP_CONCAT, xs[0]->dtype)) {
        dt = xs[0]->dtype;
        for (k = 1; k < count && dt != GDL_F32; k++)
            for (j = 0; j < k; j++)
                if (xs[j] == xs[k]) dt = GDL_F32;
    }
    for (k = 0; k < count && dt == GDL_F32; k++)
        if (xs[k] && xs[k]->dtype != GDL_F32) break;
    if (dt == GDL_F32 && k < count) { /* the low-precision path on a copy of the list (the caller's stays as it is) */
        gdl_tensor **cv = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)count);
        gdl_tensor ***pp = (gdl_tensor ***)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor **) * (size_t)count);
        if (!cv || !pp) {
            gdl__set_error("%s: out of host memory", op);
            return NULL;
        }
        for (k = 0; k < count; k++) {
            cv[k] = xs[k];
            pp[k] = &cv[k];
        }
        gdl_dtype ac = gdl__ac_dt;
        if ((k = gdl__lowp_in(op, GDL_OP_CONCAT, count, pp, 0, &dt)) <= 0) {
            if (k < 0) return NULL;
        } else {
            return gdl__lowp_out(op, gdl_concat(count, cv, dim), dt, ac);
        }
    }
    for (k = 0; k < count; k++) {
        if (gdl__check_in(op, "an input", xs[k], dt == GDL_F32) < 0 || gdl__check_dev(op, xs[0], xs[k]) < 0) return NULL;
        if (xs[k]->ndim != xs[0]->ndim) {
            gdl__set_error("%s: tensors %s and %s differ in ndim", op, gdl_shape_str(xs[0]), gdl_shape_str(xs[k]));
            return NULL;
        }
    }
    if (gdl__dim(op, xs[0], dim, &d) < 0) return NULL;
    memcpy(shape, xs[0]->shape, sizeof shape);
    shape[d] = 0;
    for (k = 0; k < count; k++) {
        for (j = 0; j < xs[0]->ndim; j++)
            if (j != d && xs[k]->shape[j] != xs[0]->shape[j]) {
                gdl__set_error("%s: tensors %s and %s differ outside dim %d", op, gdl_shape_str(xs[0]),
                               gdl_shape_str(xs[k]), d);
                return NULL;
            }
        shape[d] += xs[k]->shape[d];
    }
    if (!(be = gdl__be(op, xs[0]->device)) || !(out = gdl__tmp(op, xs[0]->ndim, shape, dt, xs[0]->device)))
        return NULL;
    gdl__split(out, d, &outer, &total, &inner);
    total *= inner;
    for (k = 0; k < count; k++) {
        gdl__split(xs[k], d, &outer, &nd0, &inner);
        if (outer * nd0 * inner != 0 &&
            (dt == GDL_F32 ? be->copy2d(outer, nd0 * inner, GDL__R(xs[k]), nd0 * inner, GDL__R(out) + off, total, 0)
                           : be->copy2d_lp(dt, outer, nd0 * inner, xs[k]->data, nd0 * inner,
                                           (char *)out->data + (size_t)off * gdl_dtype_size(dt), total, 0)) < 0)
            return NULL;
        off += nd0 * inner;
    }
    n = gdl__record(op, GDL_OP_CONCAT, out, count, xs, &err);
    if (err) return NULL;
    if (n) n->i[0] = d;
    return gdl__finish(op, out);
}

static int gdl__bw_concat(gdl_node *n, const gdl_backend *be) {
    int64_t outer, nd0, inner, total, off = 0;
    int k, d = (int)n->i[0];
    gdl__split(n->out, d, &outer, &total, &inner);
    total *= inner;
    for (k = 0; k < n->nin; k++) {
        gdl_real *gx = GDL__G(n->in[k]);
        gdl_dtype dt = n->out->dtype;
        gdl__split(n->in[k], d, &outer, &nd0, &inner);
        if (gx && outer * nd0 * inner != 0 &&
            (dt == GDL_F32 ? be->copy2d(outer, nd0 * inner, GDL__R(n->out->grad) + off, total, gx, nd0 * inner, 1)
                           : be->copy2d_lp(dt, outer, nd0 * inner, (const char *)n->out->grad->data + (size_t)off * gdl_dtype_size(dt),
                                           total, gx, nd0 * inner, 1)) < 0)
            return -1;
        off += nd0 * inner;
    }
    return 0;
}

/* ---- permute, slicing, split and stack ----
   Tensors are contiguous (MANUAL: the tensor struct), so a permute or a
   slice whose elements are not one block is a copy, made by the backend's
   strided_copy; its backward adds the gradient back through the same
   geometry (strided_copy accumulating). Copies move elements as they are:
   exact in every dtype, so no dtype hook. Where the result is one block of
   the input it is a view (gdl__view). */

/* the geometry of a PERMUTE or NARROW copy (node op and parameters p): the output's shape (nd dims) and,
   per output dim, the stride in x of one step along it; off: the first element's offset in x */
static void gdl__strided_geom(int op, const gdl_tensor *x, const int64_t *p, int *nd, int64_t *shape, int64_t *xstr,
                              int64_t *off) {
    int64_t cs[GDL_MAX_DIMS];
    int k;
    gdl__contig_strides(x->ndim, x->shape, cs);
    if (op == GDL_OP_PERMUTE) { /* p: the permutation */
        *nd = x->ndim;
        for (k = 0; k < x->ndim; k++) {
            shape[k] = x->shape[p[k]];
            xstr[k] = cs[p[k]];
        }
        *off = 0;
    } else { /* NARROW, p: dim, start, step, length */
        int64_t outer, n, inner;
        gdl__split(x, (int)p[0], &outer, &n, &inner);
        *nd = 3;
        shape[0] = outer;
        shape[1] = p[3];
        shape[2] = inner;
        xstr[0] = n * inner;
        xstr[1] = p[2] * inner;
        xstr[2] = 1;
        *off = p[1] * inner;
    }
}

/* a PERMUTE or NARROW copy of x with parameters p (gdl__strided_geom) into an output of out_nd dims */
static gdl_tensor *gdl__strided_op(const char *opname, int op, gdl_tensor *x, const int64_t *p, int out_nd,
                                   const int64_t *out_shape) {
    int64_t shape[GDL_MAX_DIMS], xstr[GDL_MAX_DIMS], ostr[GDL_MAX_DIMS], off;
    int nd, err, k;
    gdl_tensor *out;
    gdl_node *n;
    const gdl_backend *be;
    gdl__strided_geom(op, x, p, &nd, shape, xstr, &off);
    gdl__contig_strides(nd, shape, ostr);
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, out_nd, out_shape, x->dtype, x->device))) return NULL;
    if (out->numel && be->strided_copy(x->dtype, nd, shape, GDL__AT(x->data, x->dtype, off), xstr, out->data, ostr, 0) < 0)
        return NULL;
    n = gdl__record(opname, op, out, 1, &x, &err);
    if (err) return NULL;
    if (n)
        for (k = 0; k < 8; k++) n->i[k] = p[k];
    return gdl__finish(opname, out);
}

static int gdl__bw_strided(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    int64_t shape[GDL_MAX_DIMS], xstr[GDL_MAX_DIMS], gstr[GDL_MAX_DIMS], off;
    int nd;
    if (!x->requires_grad || !n->out->numel) return 0;
    gdl__strided_geom(n->op, x, n->i, &nd, shape, xstr, &off);
    gdl__contig_strides(nd, shape, gstr);
    return be->strided_copy(x->grad->dtype, nd, shape, n->out->grad->data, gstr,
                            GDL__AT(x->grad->data, x->grad->dtype, off), xstr, 1);
}

GPUDL_API gdl_tensor *gdl_permute(gdl_tensor *x, int ndim, const int *dims) {
    const char *op = "gdl_permute";
    int64_t p[8] = {0}, shape[GDL_MAX_DIMS];
    int k, j, last = -1, view = 1;
    if (gdl__check_in(op, "x", x, 0) < 0) return NULL;
    if (ndim != x->ndim || (ndim && !dims)) {
        gdl__set_error("%s: %d dims given for %s (ndim %d)", op, dims ? ndim : 0, gdl_shape_str(x), x->ndim);
        return NULL;
    }
    for (k = 0; k < ndim; k++) {
        int d = dims[k] < 0 ? dims[k] + ndim : dims[k];
        for (j = 0; j < k && d >= 0 && d < ndim; j++)
            if (p[j] == d) d = -1;
        if (d < 0 || d >= ndim) {
            gdl__set_error("%s: dims are not a permutation of 0..%d for %s (dim %d at position %d)", op, ndim - 1,
                           gdl_shape_str(x), dims[k], k);
            return NULL;
        }
        p[k] = d;
        shape[k] = x->shape[d];
        if (shape[k] != 1) { /* a view when the dims longer than 1 keep their order */
            if (d < last) view = 0;
            last = d;
        }
    }
    if (view) return gdl__view(op, x, ndim, shape, 0);
    return gdl__strided_op(op, GDL_OP_PERMUTE, x, p, ndim, shape);
}

GPUDL_API gdl_tensor *gdl_transpose(gdl_tensor *x, int dim0, int dim1) {
    int dims[GDL_MAX_DIMS], k, d0, d1;
    if (gdl__check_in("gdl_transpose", "x", x, 0) < 0 || gdl__dim("gdl_transpose", x, dim0, &d0) < 0 ||
        gdl__dim("gdl_transpose", x, dim1, &d1) < 0)
        return NULL;
    for (k = 0; k < x->ndim; k++) dims[k] = k;
    dims[d0] = d1;
    dims[d1] = d0;
    return gdl_permute(x, x->ndim, dims);
}

/* elements start, start + step, ... (len of them, in range) along dim d */
static gdl_tensor *gdl__narrow(const char *op, gdl_tensor *x, int d, int64_t start, int64_t len, int64_t step) {
    int64_t shape[GDL_MAX_DIMS], p[8] = {0}, outer, n, inner;
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = len;
    gdl__split(x, d, &outer, &n, &inner);
    if (len == 1) step = 1;
    if (step == 1 && (outer == 1 || len == n)) /* one block of x */
        return gdl__view(op, x, x->ndim, shape, start * inner);
    p[0] = d;
    p[1] = start;
    p[2] = step;
    p[3] = len;
    return gdl__strided_op(op, GDL_OP_NARROW, x, p, x->ndim, shape);
}

GPUDL_API gdl_tensor *gdl_narrow(gdl_tensor *x, int dim, int64_t start, int64_t length) {
    const char *op = "gdl_narrow";
    int d;
    int64_t n;
    if (gdl__check_in(op, "x", x, 0) < 0 || gdl__dim(op, x, dim, &d) < 0) return NULL;
    n = x->shape[d];
    if (start < 0 && start >= -n) start += n;
    if (start < 0 || start > n || length < 0 || length > n - start) {
        gdl__set_error("%s: start %lld, length %lld out of range for dim %d (size %lld) of %s", op, (long long)start,
                       (long long)length, dim, (long long)n, gdl_shape_str(x));
        return NULL;
    }
    return gdl__narrow(op, x, d, start, length, 1);
}

GPUDL_API gdl_tensor *gdl_slice_dim(gdl_tensor *x, int dim, int64_t start, int64_t end, int64_t step) {
    const char *op = "gdl_slice_dim";
    int d;
    int64_t n;
    if (gdl__check_in(op, "x", x, 0) < 0 || gdl__dim(op, x, dim, &d) < 0) return NULL;
    if (step < 1) {
        gdl__set_error("%s: step %lld must be positive", op, (long long)step);
        return NULL;
    }
    n = x->shape[d];
    if (start < 0) start += n;
    if (end < 0) end += n;
    start = start < 0 ? 0 : start > n ? n : start;
    end = end < start ? start : end > n ? n : end;
    return gdl__narrow(op, x, d, start, (end - start + step - 1) / step, step);
}

GPUDL_API gdl_tensor *gdl_select(gdl_tensor *x, int dim, int64_t index) {
    const char *op = "gdl_select";
    int64_t shape[GDL_MAX_DIMS];
    int d, k, nd = 0;
    gdl_tensor *r;
    if (gdl__check_in(op, "x", x, 0) < 0 || gdl__dim(op, x, dim, &d) < 0) return NULL;
    if (index < -x->shape[d] || index >= x->shape[d]) {
        gdl__set_error("%s: index %lld is out of range for dim %d (size %lld) of %s", op, (long long)index, dim,
                       (long long)x->shape[d], gdl_shape_str(x));
        return NULL;
    }
    if (!(r = gdl__narrow(op, x, d, index < 0 ? index + x->shape[d] : index, 1, 1))) return NULL;
    for (k = 0; k < x->ndim; k++)
        if (k != d) shape[nd++] = x->shape[k];
    return gdl__view(op, r, nd, shape, 0);
}

GPUDL_API int gdl_split(gdl_tensor *x, int64_t split_size, int dim, gdl_tensor **out, int max_out) {
    const char *op = "gdl_split";
    int d, k, count;
    int64_t n;
    if (gdl__check_in(op, "x", x, 0) < 0 || gdl__dim(op, x, dim, &d) < 0) return -1;
    n = x->shape[d];
    if (!out || split_size < 1) {
        gdl__set_error(!out ? "%s: out is NULL" : "%s: split_size %lld must be positive", op, (long long)split_size);
        return -1;
    }
    count = n == 0 ? 1 : (int)((n + split_size - 1) / split_size);
    if (count > max_out) {
        gdl__set_error("%s: %s in pieces of %lld along dim %d makes %d tensors, room for %d", op, gdl_shape_str(x),
                       (long long)split_size, dim, count, max_out);
        return -1;
    }
    for (k = 0; k < count; k++) {
        int64_t s = (int64_t)k * split_size, len = n - s < split_size ? n - s : split_size;
        if (!(out[k] = gdl__narrow(op, x, d, s, len, 1))) return -1;
    }
    return count;
}

GPUDL_API int gdl_chunk(gdl_tensor *x, int chunks, int dim, gdl_tensor **out) {
    int d;
    if (gdl__check_in("gdl_chunk", "x", x, 0) < 0 || gdl__dim("gdl_chunk", x, dim, &d) < 0) return -1;
    if (chunks < 1) {
        gdl__set_error("gdl_chunk: chunks %d must be positive", chunks);
        return -1;
    }
    return gdl_split(x, x->shape[d] ? (x->shape[d] + chunks - 1) / chunks : 1, dim, out, chunks);
}

GPUDL_API gdl_tensor *gdl_stack(int count, gdl_tensor *const *xs, int dim) {
    const char *op = "gdl_stack";
    int64_t shape[GDL_MAX_DIMS];
    gdl_tensor **v;
    int k, d, nd;
    if (count < 1 || !xs) {
        gdl__set_error("%s: need at least one tensor (got %d)", op, count);
        return NULL;
    }
    for (k = 0; k < count; k++) {
        if (gdl__check_in(op, "an input", xs[k], 0) < 0) return NULL;
        if (!gdl_same_shape(xs[k], xs[0])) {
            gdl__set_error("%s: every tensor must have one shape, got %s at entry 0 and %s at entry %d", op,
                           gdl_shape_str(xs[0]), gdl_shape_str(xs[k]), k);
            return NULL;
        }
    }
    nd = xs[0]->ndim + 1;
    d = dim < 0 ? dim + nd : dim;
    if (d < 0 || d >= nd || nd > GDL_MAX_DIMS) {
        gdl__set_error("%s: dim %d out of range for stacking %s tensors", op, dim, gdl_shape_str(xs[0]));
        return NULL;
    }
    if (!(v = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)count))) {
        gdl__set_error("%s: out of host memory", op);
        return NULL;
    }
    for (k = 0; k < nd; k++) shape[k] = k < d ? xs[0]->shape[k] : k == d ? 1 : xs[0]->shape[k - 1];
    for (k = 0; k < count; k++)
        if (!(v[k] = gdl__view(op, xs[k], nd, shape, 0))) return NULL;
    return gdl_concat(count, v, d);
}

/* ---- index_select and gather (the backend's gather; backward: scatter_add) ---- */

/* the CPU checks every index (a GPU's out-of-range element reads 0: checking would wait for the device) */
static int gdl__check_index_range(const char *op, const gdl_tensor *idx, int64_t n) {
    int64_t i;
    if (idx->device.type != GDL_DEVICE_CPU) return 0;
    for (i = 0; i < idx->numel; i++) {
        int32_t v = ((const int32_t *)idx->data)[i];
        if (v < 0 || v >= n) {
            gdl__set_error("%s: index %d at position %lld is out of range [0,%lld)", op, (int)v, (long long)i, (long long)n);
            return -1;
        }
    }
    return 0;
}

/* index strides for an op: INDEX_SELECT's 1-D index moves along dim d only; GATHER's has the output's shape */
static void gdl__gather_istr(int op, int d, int nd, const int64_t *shape, int64_t *istr) {
    int k;
    if (op == GDL_OP_GATHER) {
        gdl__contig_strides(nd, shape, istr);
        return;
    }
    for (k = 0; k < nd; k++) istr[k] = k == d ? 1 : 0;
}

static gdl_tensor *gdl__gather_op(const char *opname, int op, gdl_tensor *x, int dim, gdl_tensor *index) {
    int64_t shape[GDL_MAX_DIMS], xstr[GDL_MAX_DIMS], istr[GDL_MAX_DIMS];
    int d, k, err;
    gdl_tensor *out, *in[2];
    gdl_node *n;
    const gdl_backend *be;
    if (gdl__check_two(opname, "x", x, 0, "index", index, 0) < 0 || gdl__dim(opname, x, dim, &d) < 0) return NULL;
    if (index->dtype != GDL_I32) {
        gdl__set_error("%s: index must be i32, got %s %s", opname, gdl_dtype_name(index->dtype), gdl_shape_str(index));
        return NULL;
    }
    memcpy(shape, x->shape, sizeof shape);
    if (op == GDL_OP_INDEX_SELECT) {
        if (index->ndim > 1) {
            gdl__set_error("%s: index must have at most 1 dim, got %s", opname, gdl_shape_str(index));
            return NULL;
        }
        shape[d] = index->numel;
    } else {
        for (k = 0; k < x->ndim && index->ndim == x->ndim; k++)
            if (k != d && index->shape[k] > x->shape[k]) break;
        if (index->ndim != x->ndim || k < x->ndim) {
            gdl__set_error("%s: index %s does not fit x %s (the same ndim, no longer than x outside dim %d)", opname,
                           gdl_shape_str(index), gdl_shape_str(x), d);
            return NULL;
        }
        memcpy(shape, index->shape, sizeof(int64_t) * (size_t)x->ndim);
    }
    if (gdl__check_index_range(opname, index, x->shape[d]) < 0) return NULL;
    gdl__contig_strides(x->ndim, x->shape, xstr);
    gdl__gather_istr(op, d, x->ndim, shape, istr);
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, x->ndim, shape, x->dtype, x->device))) return NULL;
    if (out->numel && be->gather(x->dtype, x->ndim, shape, d, x->data, xstr, x->shape[d], (const int32_t *)index->data,
                                 istr, out->data) < 0)
        return NULL;
    in[0] = x;
    in[1] = index;
    n = gdl__record(opname, op, out, 2, in, &err);
    if (err) return NULL;
    if (n) n->i[0] = d;
    return gdl__finish(opname, out);
}

/* scatter-add into f32: x's own gradient, or an f32 sum added to a bf16/f16 one with one rounding */
static int gdl__bw_gather(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0], *out = n->out;
    int64_t xstr[GDL_MAX_DIMS], istr[GDL_MAX_DIMS];
    int d = (int)n->i[0];
    gdl_real *dst;
    if (!x->requires_grad || !out->numel) return 0;
    gdl__contig_strides(x->ndim, x->shape, xstr);
    gdl__gather_istr(n->op, d, out->ndim, out->shape, istr);
    dst = x->grad->dtype == GDL_F32 ? GDL__R(x->grad)
                                    : (gdl_real *)gdl__scratch("gdl_backward", x->device, sizeof(gdl_real) * (size_t)(x->numel + 1));
    if (!dst || (x->grad->dtype != GDL_F32 && be->fill(dst, x->numel, 0) < 0)) return -1;
    if (be->scatter_add(out->grad->dtype, out->ndim, out->shape, d, out->grad->data, (const int32_t *)n->in[1]->data, istr,
                        dst, xstr, x->shape[d]) < 0)
        return -1;
    return x->grad->dtype == GDL_F32 ? 0
                                     : gdl__acc_any("gdl_backward", be, x->device, x->grad->data, x->grad->dtype, dst,
                                                    GDL_F32, x->numel);
}

GPUDL_API gdl_tensor *gdl_index_select(gdl_tensor *x, int dim, gdl_tensor *index) {
    return gdl__gather_op("gdl_index_select", GDL_OP_INDEX_SELECT, x, dim, index);
}
GPUDL_API gdl_tensor *gdl_gather(gdl_tensor *x, int dim, gdl_tensor *index) {
    return gdl__gather_op("gdl_gather", GDL_OP_GATHER, x, dim, index);
}

/* ---- where, masked_fill (the backend's where: a selection, exact in every float dtype) ---- */

static int gdl__check_mask(const char *op, const char *arg, const gdl_tensor *m, const gdl_tensor *x) {
    if (gdl__check_in(op, arg, m, 0) < 0 || gdl__check_dev(op, x, m) < 0) return -1;
    if (m->dtype != GDL_U8) {
        gdl__set_error("%s: %s must be u8 (a comparison's result), got %s %s", op, arg, gdl_dtype_name(m->dtype),
                       gdl_shape_str(m));
        return -1;
    }
    return 0;
}

GPUDL_API gdl_tensor *gdl_where(gdl_tensor *cond, gdl_tensor *a, gdl_tensor *b) {
    const char *op = "gdl_where";
    int64_t shape[GDL_MAX_DIMS], str[3][GDL_MAX_DIMS];
    const gdl_tensor *t[3];
    gdl_tensor *out, *in[3];
    const gdl_backend *be;
    int nd, err;
    gdl_dtype dt = GDL_F32;
    if (gdl__ac_dt != GDL_F32 || (a && a->dtype != GDL_F32) || (b && b->dtype != GDL_F32)) {
        /* native in one low dtype, unless a is b (its two gradients are summed by the cast path's one copy) */
        if (a && b && a != b && a->dtype == b->dtype && gdl__lp_native(GDL_OP_WHERE, a->dtype)) dt = a->dtype;
        else GDL__LOWP2(op, GDL_OP_WHERE, gdl_where(cond, a, b), a, b);
    }
    if (gdl__check_two(op, "a", a, dt == GDL_F32, "b", b, dt == GDL_F32) < 0 || gdl__check_mask(op, "cond", cond, a) < 0)
        return NULL;
    t[0] = cond;
    t[1] = a;
    t[2] = b;
    if (gdl__broadcast_k(op, 3, t, &nd, shape, str) < 0 || !(be = gdl__be(op, a->device)) ||
        !(out = gdl__tmp(op, nd, shape, dt, a->device)))
        return NULL;
    if (out->numel && be->where(dt, nd, shape, (const uint8_t *)cond->data, str[0], a->data, str[1], b->data, str[2],
                                out->data) < 0)
        return NULL;
    in[0] = cond;
    in[1] = a;
    in[2] = b;
    gdl__record(op, GDL_OP_WHERE, out, 3, in, &err);
    return err ? NULL : gdl__finish(op, out);
}

GPUDL_API gdl_tensor *gdl_masked_fill(gdl_tensor *x, gdl_tensor *mask, double value) {
    const char *op = "gdl_masked_fill";
    int64_t shape[GDL_MAX_DIMS], str[2][GDL_MAX_DIMS], zero[GDL_MAX_DIMS] = {0};
    const gdl_tensor *t[2];
    gdl_tensor *out, *v, *in[2];
    const gdl_backend *be;
    int nd, err;
    if (gdl__check_in(op, "x", x, 0) < 0 || gdl__check_mask(op, "mask", mask, x) < 0) return NULL;
    if (!gdl__is_float(x->dtype)) {
        gdl__set_error("%s: expected a float tensor (f32, bf16 or f16), got %s %s", op, gdl_dtype_name(x->dtype),
                       gdl_shape_str(x));
        return NULL;
    }
    t[0] = mask;
    t[1] = x;
    if (gdl__broadcast_k(op, 2, t, &nd, shape, str) < 0 || nd != x->ndim || gdl__numel_of(nd, shape) != x->numel) {
        gdl__set_error("%s: mask %s cannot be broadcast to x %s", op, gdl_shape_str(mask), gdl_shape_str(x));
        return NULL;
    }
    if (!(be = gdl__be(op, x->device)) || !(v = gdl__scalar_tmp(op, be, x->device, x->dtype, value)) ||
        !(out = gdl__tmp(op, x->ndim, x->shape, x->dtype, x->device)))
        return NULL;
    if (out->numel &&
        be->where(x->dtype, nd, shape, (const uint8_t *)mask->data, str[0], v->data, zero, x->data, str[1], out->data) < 0)
        return NULL;
    in[0] = x;
    in[1] = mask;
    gdl__record(op, GDL_OP_MASKED_FILL, out, 2, in, &err);
    return err ? NULL : gdl__finish(op, out);
}

/* where's gradient to a branch is where(cond, g, 0) (the false branch: where(cond, 0, g)), summed over
   what the branch was broadcast along; masked_fill's x is where's false branch */
static int gdl__bw_where(gdl_node *n, const gdl_backend *be) {
    int fill = n->op == GDL_OP_MASKED_FILL, nd, k;
    gdl_tensor *cond = n->in[fill ? 1 : 0], *br[2], *out = n->out;
    int64_t shape[GDL_MAX_DIMS], str[3][GDL_MAX_DIMS], gstr[GDL_MAX_DIMS], zstr[GDL_MAX_DIMS] = {0};
    const gdl_tensor *t[3];
    gdl_dtype dt = out->dtype;
    void *zero, *tmp;
    br[0] = fill ? NULL : n->in[1];
    br[1] = n->in[fill ? 0 : 2];
    t[0] = cond;
    t[1] = fill ? br[1] : br[0];
    t[2] = br[1];
    if (!out->numel || gdl__broadcast_k("gdl_backward", fill ? 2 : 3, t, &nd, shape, str) < 0) return out->numel ? -1 : 0;
    gdl__contig_strides(nd, shape, gstr);
    if (!(zero = gdl__scratch("gdl_backward", out->device, 8)) || be->memset0(zero, 8) < 0 ||
        !(tmp = gdl__scratch("gdl_backward", out->device, gdl_dtype_size(dt) * (size_t)out->numel)))
        return -1;
    for (k = 0; k < 2; k++) {
        gdl_tensor *x = br[k];
        const int64_t *xs = fill ? str[1] : str[k + 1];
        if (!x || !x->requires_grad) continue;
        if (be->where(dt, nd, shape, (const uint8_t *)cond->data, str[0], k ? zero : out->grad->data, k ? zstr : gstr,
                      k ? out->grad->data : zero, k ? gstr : zstr, tmp) < 0)
            return -1;
        if ((dt == GDL_F32 && x->grad->dtype == GDL_F32 ? be->sum_to(nd, shape, (const gdl_real *)tmp, GDL__R(x->grad), xs, 1)
                                                       : be->sum_to_lp(nd, shape, dt, tmp, x->grad->dtype, x->grad->data, xs, 1)) < 0)
            return -1;
    }
    return 0;
}

/* ---- tril / triu (the backend's tri; exact in every float dtype) ---- */

static gdl_tensor *gdl__tri_op(const char *opname, int op, gdl_tensor *x, int64_t k) {
    int64_t R, C;
    int err;
    gdl_tensor *out;
    gdl_node *n;
    const gdl_backend *be;
    if (gdl__check_in(opname, "x", x, 0) < 0) return NULL;
    if (!gdl__is_float(x->dtype) || x->ndim < 2) {
        gdl__set_error("%s: expected a float tensor (f32, bf16 or f16) of at least 2 dims, got %s %s", opname,
                       gdl_dtype_name(x->dtype), gdl_shape_str(x));
        return NULL;
    }
    R = x->shape[x->ndim - 2];
    C = x->shape[x->ndim - 1];
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, x->ndim, x->shape, x->dtype, x->device))) return NULL;
    if (out->numel && be->tri(x->dtype, op == GDL_OP_TRIU, x->numel / (R * C), R, C, k, x->data, out->data, 0) < 0)
        return NULL;
    n = gdl__record(opname, op, out, 1, &x, &err);
    if (err) return NULL;
    if (n) n->i[0] = k;
    return gdl__finish(opname, out);
}

static int gdl__bw_tri(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    int64_t R = x->shape[x->ndim - 2], C = x->shape[x->ndim - 1];
    if (!x->requires_grad || !x->numel) return 0;
    return be->tri(x->grad->dtype, n->op == GDL_OP_TRIU, x->numel / (R * C), R, C, n->i[0], n->out->grad->data,
                   x->grad->data, 1);
}

GPUDL_API gdl_tensor *gdl_tril(gdl_tensor *x, int64_t diagonal) { return gdl__tri_op("gdl_tril", GDL_OP_TRIL, x, diagonal); }
GPUDL_API gdl_tensor *gdl_triu(gdl_tensor *x, int64_t diagonal) { return gdl__tri_op("gdl_triu", GDL_OP_TRIU, x, diagonal); }

/* ---- dropout ---- */

GPUDL_API gdl_tensor *gdl_dropout(gdl_tensor *x, double p, int training) {
    const char *op = "gdl_dropout";
    gdl_tensor *out;
    gdl_node *n;
    uint64_t seed;
    int err;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (gdl__ac_dt != GDL_F32 || (x && x->dtype != GDL_F32)) {
        if (x && gdl__lp_native(GDL_OP_DROPOUT, x->dtype)) dt = x->dtype; /* native */
        else GDL__LOWP1(op, GDL_OP_DROPOUT, gdl_dropout(x, p, training), x);
    }
    if (gdl__check_in(op, "x", x, dt == GDL_F32) < 0) return NULL;
    if (!(p >= 0 && p <= 1)) {
        gdl__set_error("%s: probability %g is not in [0,1]", op, p);
        return NULL;
    }
    if (!training || p == 0) return x; /* identity, as PyTorch */
    if (gdl__capturing) { /* the host draws the mask's seed: a replay would repeat it */
        gdl__set_error("%s: dropout in training cannot be captured in a CUDA graph (every replay would drop the "
                       "same elements)", op);
        return NULL;
    }
    seed = gdl_rng_next_u64();
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, x->shape, dt, x->device))) return NULL;
    if ((dt == GDL_F32 ? be->dropout(x->numel, p, seed, GDL__R(x), GDL__R(out))
                       : be->dropout_lp(dt, x->numel, p, seed, x->data, out->data)) < 0)
        return NULL;
    n = gdl__record(op, GDL_OP_DROPOUT, out, 1, &x, &err);
    if (err) return NULL;
    if (n) {
        n->f[0] = p;
        memcpy(&n->i[0], &seed, sizeof seed);
    }
    return gdl__finish(op, out);
}

static int gdl__bw_dropout(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    uint64_t seed;
    memcpy(&seed, &n->i[0], sizeof seed);
    if (gx && n->out->dtype != GDL_F32)
        return be->dropout_backward_lp(n->out->dtype, n->out->numel, n->f[0], seed, n->out->grad->data, gx);
    return gx ? be->dropout_backward(n->out->numel, n->f[0], seed, GDL__R(n->out->grad), gx) : 0;
}

/* ---- normalisation ---- */

static int gdl__check_vec(const char *op, const char *arg, const gdl_tensor *v, int64_t len, const gdl_tensor *x) {
    if (!v) return 0;
    if (gdl__check_in(op, arg, v, 1) < 0 || gdl__check_dev(op, x, v) < 0) return -1;
    if (v->numel != len) {
        gdl__set_error("%s: %s %s should have %lld elements to match input %s", op, arg, gdl_shape_str(v),
                       (long long)len, gdl_shape_str(x));
        return -1;
    }
    return 0;
}

GPUDL_API gdl_tensor *gdl_batch_norm(gdl_tensor *x, gdl_tensor *rmean, gdl_tensor *rvar, gdl_tensor *weight,
                                     gdl_tensor *bias, int training, double momentum, double eps) {
    const char *op = "gdl_batch_norm";
    int64_t N, C, S = 1, cshape;
    int k, err, use_batch;
    gdl_tensor *out, *mean, *invstd, *in[3];
    gdl_node *n;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (x && gdl__is_low(x->dtype) && (!weight || weight->dtype == GDL_F32 || weight->dtype == x->dtype) &&
        (!bias || bias->dtype == GDL_F32 || bias->dtype == x->dtype)) {
        /* native (cuDNN's under autocast): x and y in dt, the statistics and
           the affine parameters f32 -- low ones get an f32 copy (a cast) */
        dt = x->dtype;
        if (gdl__check_in(op, "weight", weight ? weight : x, 0) < 0 || gdl__check_in(op, "bias", bias ? bias : x, 0) < 0 ||
            gdl__check_dev(op, x, weight) < 0 || gdl__check_dev(op, x, bias) < 0)
            return NULL;
        if (weight && weight->dtype != GDL_F32) {
            gdl_tensor *w0 = weight; /* passed twice (weight is bias): one copy, so its gradient rounds once */
            if (!(weight = gdl__cast_t(op, weight, GDL_F32))) return NULL;
            if (bias == w0) bias = weight;
        }
        if (bias && bias->dtype != GDL_F32 && !(bias = gdl__cast_t(op, bias, GDL_F32))) return NULL;
    } else {
        GDL__LOWP3_FIRST(op, GDL_OP_BATCH_NORM, gdl_batch_norm(x, rmean, rvar, weight, bias, training, momentum, eps), x,
                         weight, bias);
    }
    if (gdl__check_in(op, "input", x, dt == GDL_F32) < 0) return NULL;
    if (x->ndim < 2 || x->ndim > 4) {
        gdl__set_error("%s: expected input [N,C], [N,C,L] or [N,C,H,W], got %s", op, gdl_shape_str(x));
        return NULL;
    }
    N = x->shape[0];
    C = x->shape[1];
    for (k = 2; k < x->ndim; k++) S *= x->shape[k];
    if (gdl__check_vec(op, "running_mean", rmean, C, x) < 0 || gdl__check_vec(op, "running_var", rvar, C, x) < 0 ||
        gdl__check_vec(op, "weight", weight, C, x) < 0 || gdl__check_vec(op, "bias", bias, C, x) < 0)
        return NULL;
    if ((rmean == NULL) != (rvar == NULL)) {
        gdl__set_error("%s: give both running_mean and running_var, or neither", op);
        return NULL;
    }
    use_batch = training || !rmean;
    if (use_batch && N * S <= 1) {
        gdl__set_error("%s: expected more than 1 value per channel when training, got input %s", op, gdl_shape_str(x));
        return NULL;
    }
    cshape = C;
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, x->shape, dt, x->device)) ||
        !(mean = gdl__tmp(op, 1, &cshape, GDL_F32, x->device)) || !(invstd = gdl__tmp(op, 1, &cshape, GDL_F32, x->device)))
        return NULL;
    if (dt != GDL_F32) {
        if (be->batchnorm_lp(dt, N, C, S, x->data, weight ? GDL__R(weight) : NULL, bias ? GDL__R(bias) : NULL, out->data,
                             GDL__R(mean), GDL__R(invstd), rmean ? GDL__R(rmean) : NULL, rvar ? GDL__R(rvar) : NULL,
                             use_batch, momentum, eps) < 0)
            return NULL;
    } else if (be->batchnorm(N, C, S, GDL__R(x), weight ? GDL__R(weight) : NULL, bias ? GDL__R(bias) : NULL, GDL__R(out),
                             GDL__R(mean), GDL__R(invstd), rmean ? GDL__R(rmean) : NULL,
                             rvar ? GDL__R(rvar) : NULL, use_batch, momentum, eps) < 0) {
        return NULL;
    }
    in[0] = x; in[1] = weight; in[2] = bias;
    n = gdl__record(op, GDL_OP_BATCH_NORM, out, 3, in, &err);
    if (err) return NULL;
    if (n) {
        n->saved[0] = mean;
        n->saved[1] = invstd;
        n->i[0] = N; n->i[1] = C; n->i[2] = S; n->i[3] = use_batch;
    }
    return gdl__finish(op, out);
}

static int gdl__bw_batch_norm(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *w = n->in[1];
    if (n->out->dtype != GDL_F32)
        return be->batchnorm_backward_lp(n->out->dtype, n->i[0], n->i[1], n->i[2], n->in[0]->data, n->out->grad->data,
                                         w ? GDL__R(w) : NULL, GDL__R(n->saved[0]), GDL__R(n->saved[1]), (int)n->i[3],
                                         n->in[0]->requires_grad ? n->in[0]->grad->data : NULL, GDL__G(w),
                                         GDL__G(n->in[2]));
    return be->batchnorm_backward(n->i[0], n->i[1], n->i[2], GDL__R(n->in[0]), GDL__R(n->out->grad),
                                  w ? GDL__R(w) : NULL, GDL__R(n->saved[0]), GDL__R(n->saved[1]), (int)n->i[3],
                                  GDL__G(n->in[0]), GDL__G(w), GDL__G(n->in[2]));
}

GPUDL_API gdl_tensor *gdl_layer_norm(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias, double eps) {
    const char *op = "gdl_layer_norm";
    int64_t D, rows;
    int err;
    gdl_tensor *out, *mean, *rstd, *in[3];
    gdl_node *n;
    const gdl_backend *be;
    GDL__LOWP3_FIRST(op, GDL_OP_LAYER_NORM, gdl_layer_norm(x, weight, bias, eps), x, weight, bias);
    if (gdl__check_in(op, "input", x, 1) < 0) return NULL;
    if (x->ndim < 1 || x->shape[x->ndim - 1] == 0) {
        gdl__set_error("%s: expected an input with a non-empty last dim, got %s", op, gdl_shape_str(x));
        return NULL;
    }
    D = x->shape[x->ndim - 1];
    rows = x->numel / D;
    if (gdl__check_vec(op, "weight", weight, D, x) < 0 || gdl__check_vec(op, "bias", bias, D, x) < 0) return NULL;
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, x->shape, GDL_F32, x->device)) ||
        !(mean = gdl__tmp(op, 1, &rows, GDL_F32, x->device)) || !(rstd = gdl__tmp(op, 1, &rows, GDL_F32, x->device)))
        return NULL;
    if (rows && be->layernorm(rows, D, GDL__R(x), weight ? GDL__R(weight) : NULL, bias ? GDL__R(bias) : NULL, eps,
                              GDL__R(out), GDL__R(mean), GDL__R(rstd)) < 0)
        return NULL;
    in[0] = x; in[1] = weight; in[2] = bias;
    n = gdl__record(op, GDL_OP_LAYER_NORM, out, 3, in, &err);
    if (err) return NULL;
    if (n) {
        n->saved[0] = mean;
        n->saved[1] = rstd;
        n->i[0] = rows; n->i[1] = D;
    }
    return gdl__finish(op, out);
}

static int gdl__bw_layer_norm(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *w = n->in[1];
    if (!n->i[0]) return 0;
    return be->layernorm_backward(n->i[0], n->i[1], GDL__R(n->in[0]), GDL__R(n->out->grad), w ? GDL__R(w) : NULL,
                                  GDL__R(n->saved[0]), GDL__R(n->saved[1]), GDL__G(n->in[0]), GDL__G(w),
                                  GDL__G(n->in[2]));
}

/* ---- embedding ---- */

/* Host-side range check of integer indices (CPU tensors only). */
static int gdl__check_indices(const char *op, const gdl_tensor *idx, int64_t lo, int64_t hi, int ignore_ok, int ignore) {
    int64_t i;
    const int32_t *p = (const int32_t *)idx->data;
    if (idx->device.type != GDL_DEVICE_CPU) return 0;
    for (i = 0; i < idx->numel; i++)
        if ((p[i] < lo || p[i] >= hi) && !(ignore_ok && p[i] == ignore)) {
            gdl__set_error("%s: index %d at position %lld is out of range [%lld,%lld)", op, p[i], (long long)i,
                           (long long)lo, (long long)hi);
            return -1;
        }
    return 0;
}

GPUDL_API gdl_tensor *gdl_embedding(gdl_tensor *idx, gdl_tensor *w) {
    const char *op = "gdl_embedding";
    int64_t shape[GDL_MAX_DIMS];
    int err;
    gdl_tensor *out, *in[2];
    const gdl_backend *be;
    GDL__LOWP1(op, GDL_OP_EMBEDDING, gdl_embedding(idx, w), w);
    if (gdl__check_two(op, "indices", idx, 0, "weight", w, 1) < 0) return NULL;
    if (idx->dtype != GDL_I32 || w->ndim != 2 || idx->ndim >= GDL_MAX_DIMS) {
        gdl__set_error("%s: expected i32 indices and a weight [V,D], got %s %s and %s %s", op, gdl_dtype_name(idx->dtype),
                       gdl_shape_str(idx), gdl_dtype_name(w->dtype), gdl_shape_str(w));
        return NULL;
    }
    if (gdl__check_indices(op, idx, 0, w->shape[0], 0, 0) < 0) return NULL;
    memcpy(shape, idx->shape, sizeof shape);
    shape[idx->ndim] = w->shape[1];
    if (!(be = gdl__be(op, w->device)) || !(out = gdl__tmp(op, idx->ndim + 1, shape, GDL_F32, w->device))) return NULL;
    if (out->numel && be->embedding(idx->numel, w->shape[1], w->shape[0], (const int32_t *)idx->data, GDL__R(w), GDL__R(out)) < 0)
        return NULL;
    in[0] = idx;
    in[1] = w;
    gdl__record(op, GDL_OP_EMBEDDING, out, 2, in, &err);
    return err ? NULL : gdl__finish(op, out);
}

static int gdl__bw_embedding(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *w = n->in[1];
    gdl_real *gw = GDL__G(w);
    if (!gw || !n->out->numel) return 0;
    return be->embedding_backward(n->in[0]->numel, w->shape[1], w->shape[0], (const int32_t *)n->in[0]->data,
                                  GDL__R(n->out->grad), gw);
}

/* ---- losses ---- */

GPUDL_API gdl_ce_opts gdl_ce_defaults(void) {
    gdl_ce_opts o;
    o.reduction = GDL_REDUCE_MEAN;
    o.ignore_index = -100;
    o.label_smoothing = 0;
    return o;
}

static gdl_tensor *gdl__xent(const char *opname, int op, gdl_tensor *x, gdl_tensor *tgt, const gdl_ce_opts *o) {
    int64_t B, C, one = 1;
    int err;
    gdl_tensor *rows, *out, *count, *in[2];
    gdl_node *n;
    const gdl_backend *be;
    GDL__LOWP1(opname, op, gdl__xent(opname, op, x, tgt, o), x);
    if (gdl__check_two(opname, "input", x, 1, "target", tgt, 0) < 0) return NULL;
    if (x->ndim != 2 || tgt->ndim != 1 || tgt->dtype != GDL_I32 || tgt->shape[0] != x->shape[0]) {
        gdl__set_error("%s: expected input [B,C] and i32 target [B], got %s %s and %s %s", opname,
                       gdl_dtype_name(x->dtype), gdl_shape_str(x), gdl_dtype_name(tgt->dtype), gdl_shape_str(tgt));
        return NULL;
    }
    if ((unsigned)o->reduction > GDL_REDUCE_NONE || !(o->label_smoothing >= 0 && o->label_smoothing <= 1)) {
        gdl__set_error("%s: bad reduction %d or label_smoothing %g", opname, (int)o->reduction, o->label_smoothing);
        return NULL;
    }
    B = x->shape[0];
    C = x->shape[1];
    if (C == 0) {
        gdl__set_error("%s: input %s has no classes", opname, gdl_shape_str(x));
        return NULL;
    }
    if (gdl__check_indices(opname, tgt, 0, C, 1, o->ignore_index) < 0) return NULL;
    if (!(be = gdl__be(opname, x->device)) || !(rows = gdl__tmp(opname, 1, &B, GDL_F32, x->device)) ||
        !(count = gdl__tmp(opname, 1, &one, GDL_F32, x->device)))
        return NULL;
    out = rows;
    if (o->reduction != GDL_REDUCE_NONE && !(out = gdl__tmp(opname, 0, NULL, GDL_F32, x->device))) return NULL;
    if (be->xent(B, C, GDL__R(x), (const int32_t *)tgt->data, o->ignore_index, o->label_smoothing,
                 op == GDL_OP_NLL_LOSS, o->reduction, GDL__R(rows), GDL__R(out), GDL__R(count)) < 0)
        return NULL;
    in[0] = x;
    in[1] = tgt;
    n = gdl__record(opname, op, out, 2, in, &err);
    if (err) return NULL;
    if (n) {
        n->saved[0] = count;
        n->i[0] = o->ignore_index;
        n->i[1] = o->reduction;
        n->f[0] = o->label_smoothing;
    }
    return gdl__finish(opname, out);
}

static int gdl__bw_xent(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    gdl_real *gx = GDL__G(x);
    if (!gx) return 0;
    return be->xent_backward(x->shape[0], x->shape[1], GDL__R(x), (const int32_t *)n->in[1]->data, (int)n->i[0],
                             n->f[0], n->op == GDL_OP_NLL_LOSS, (int)n->i[1], GDL__R(n->out->grad),
                             GDL__R(n->saved[0]), gx);
}

GPUDL_API gdl_tensor *gdl_cross_entropy_ex(gdl_tensor *logits, gdl_tensor *targets, const gdl_ce_opts *opts) {
    gdl_ce_opts o = opts ? *opts : gdl_ce_defaults();
    return gdl__xent("gdl_cross_entropy", GDL_OP_CROSS_ENTROPY, logits, targets, &o);
}
GPUDL_API gdl_tensor *gdl_cross_entropy(gdl_tensor *logits, gdl_tensor *targets) {
    return gdl_cross_entropy_ex(logits, targets, NULL);
}
GPUDL_API gdl_tensor *gdl_nll_loss(gdl_tensor *log_probs, gdl_tensor *targets, gdl_reduction r, int ignore_index) {
    gdl_ce_opts o = gdl_ce_defaults();
    o.reduction = r;
    o.ignore_index = ignore_index;
    return gdl__xent("gdl_nll_loss", GDL_OP_NLL_LOSS, log_probs, targets, &o);
}

static gdl_tensor *gdl__pointwise_loss(const char *opname, int op, gdl_tensor *x, gdl_tensor *y, gdl_reduction r) {
    int err;
    gdl_tensor *out, *in[2];
    const gdl_backend *be;
    GDL__LOWP2(opname, op, gdl__pointwise_loss(opname, op, x, y, r), x, y);
    if (gdl__check_two(opname, "input", x, 1, "target", y, 1) < 0) return NULL;
    if (!gdl_same_shape(x, y)) {
        gdl__set_error("%s: input %s and target %s must have the same shape", opname, gdl_shape_str(x), gdl_shape_str(y));
        return NULL;
    }
    if ((unsigned)r > GDL_REDUCE_NONE) {
        gdl__set_error("%s: bad reduction %d", opname, (int)r);
        return NULL;
    }
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, x->ndim, x->shape, GDL_F32, x->device))) return NULL;
    if (be->pointwise_loss(op == GDL_OP_MSE ? GDL_LOSS_MSE : GDL_LOSS_BCE_LOGITS, x->numel, GDL__R(x), GDL__R(y),
                           GDL__R(out)) < 0)
        return NULL;
    in[0] = x;
    in[1] = y;
    gdl__record(opname, op, out, 2, in, &err);
    if (err || !gdl__finish(opname, out)) return NULL;
    return r == GDL_REDUCE_NONE ? out : r == GDL_REDUCE_SUM ? gdl_sum(out) : gdl_mean(out);
}

static int gdl__bw_pointwise_loss(gdl_node *n, const gdl_backend *be) {
    return be->pointwise_loss_backward(n->op == GDL_OP_MSE ? GDL_LOSS_MSE : GDL_LOSS_BCE_LOGITS, n->out->numel,
                                       GDL__R(n->in[0]), GDL__R(n->in[1]), GDL__R(n->out->grad), GDL__G(n->in[0]),
                                       GDL__G(n->in[1]));
}

GPUDL_API gdl_tensor *gdl_mse_loss(gdl_tensor *input, gdl_tensor *target, gdl_reduction r) {
    return gdl__pointwise_loss("gdl_mse_loss", GDL_OP_MSE, input, target, r);
}
GPUDL_API gdl_tensor *gdl_bce_with_logits(gdl_tensor *input, gdl_tensor *target, gdl_reduction r) {
    return gdl__pointwise_loss("gdl_bce_with_logits", GDL_OP_BCE_WITH_LOGITS, input, target, r);
}

/* ---- the op table, made from the op list (GDL_OP_LIST), by gdl_op ---- */
#define GDL__OP_ROW(id, name, backward, kernel, autocast) {name, backward, kernel, autocast},
static const gdl__op_info gdl__ops[GDL_OP_COUNT] = {GDL_OP_LIST(GDL__OP_ROW)};
#undef GDL__OP_ROW
static const gdl__op_info *gdl__op(int op) { return &gdl__ops[op]; }

/* ---------------------------------------------------------------------------
   [impl-autograd]   The tape is a list of nodes in creation order, so a walk
   from the newest node back visits every tensor after all its consumers.
   ------------------------------------------------------------------------- */

GPUDL_API int gdl_set_requires_grad(gdl_tensor *t, int on) {
    if (gdl__check_in("gdl_set_requires_grad", "t", t, 0) < 0) return -1;
    if (on && !gdl__is_float(t->dtype)) {
        gdl__set_error("gdl_set_requires_grad: only float tensors (f32, bf16, f16) can require grad, got %s %s",
                       gdl_dtype_name(t->dtype), gdl_shape_str(t));
        return -1;
    }
    if (t->node) {
        gdl__set_error("gdl_set_requires_grad: %s is the result of %s, not a leaf", gdl_shape_str(t),
                       gdl_op_name(t->node->op));
        return -1;
    }
    t->requires_grad = on != 0;
    return 0;
}

GPUDL_API int gdl_zero_grad_tensor(gdl_tensor *t) {
    const gdl_backend *be;
    if (gdl__check_in("gdl_zero_grad_tensor", "t", t, 0) < 0) return -1;
    if (!t->grad) return 0;
    if (!(be = gdl__be("gdl_zero_grad_tensor", t->device))) return -1;
    return be->memset0(t->grad->data, (size_t)t->grad->numel *
                                          (t->grad->dtype == GDL_F32 ? sizeof(gdl_real) : gdl_dtype_size(t->grad->dtype)));
}

GPUDL_API int gdl_sgd_update_(gdl_tensor *p, double lr) {
    const char *op = "gdl_sgd_update_";
    const gdl_backend *be;
    gdl_opt_tensor t;
    gdl_opt_hyper h, *dh;
    void *tab;
    int rc;
    if (gdl__check_in(op, "param", p, 1) < 0) return -1;
    if (!p->grad) return 0;
    if (!(be = gdl__be(op, p->device))) return -1;
    /* a one-off table: the optimizers keep theirs */
    memset(&h, 0, sizeof h);
    h.lr = lr;
    if (!(dh = (gdl_opt_hyper *)gdl__scratch(op, p->device, sizeof h)) || be->copy_async(dh, &h, sizeof h, 0, NULL) < 0)
        return -1;
    memset(&t, 0, sizeof t);
    t.n = p->numel;
    t.p = GDL__R(p);
    t.g = GDL__R(p->grad);
    t.hyper = dh;
    if (p->device.type == GDL_DEVICE_CPU) { /* the CPU's table is the entries: one on the stack allocates nothing */
        gdl__cpu_opt_table one;
        one.count = 1;
        one.t[0] = t;
        return be->sgd_multi(&one);
    }
    if (!(tab = be->opt_table_new(1, &t))) return -1;
    rc = be->sgd_multi(tab);
    be->opt_table_free(tab);
    return rc;
}

/* A persistent tensor of dtype dt at `slot` of flat block f (zeroed when zero is set). */
static gdl_tensor *gdl__flat_view(const char *op, gdl__flat *f, void *slot, int ndim, const int64_t *shape,
                                  gdl_dtype dt, int zero) {
    const gdl_backend *be;
    gdl_tensor *v = gdl__make(op, ndim, shape, dt, f->device, 1, slot);
    if (!v) return NULL;
    if (zero && (!(be = gdl__be(op, f->device)) ||
                 be->memset0(slot, (size_t)v->numel * (dt == GDL_F32 ? sizeof(gdl_real) : gdl_dtype_size(dt))) < 0)) {
        GPUDL_FREE(v);
        return NULL;
    }
    v->flat = f;
    f->refs++;
    return v;
}

static int gdl__ensure_grad(gdl_tensor *t) {
    const gdl_backend *be;
    if (t->grad) return 0;
    if (gdl__is_persistent(t)) {
        gdl__flat *f = t->flat;
        /* a parameter in a flat block: its gradient (its dtype: f32, or bf16/f16 with master weights) is the
           slot mirroring it, so the gradients stay one buffer */
        if (f && f->grad_shift && (size_t)((char *)t->data - f->base) < f->params_bytes)
            t->grad = gdl__flat_view("gdl_backward", f, (char *)t->data + f->grad_shift, t->ndim, t->shape, t->dtype,
                                     1);
        else
            t->grad = gdl_zeros(t->ndim, t->shape, t->dtype, t->device);
        return t->grad ? 0 : -1;
    }
    /* in the tensor's dtype, as PyTorch */
    if (!(t->grad = gdl__tmp("gdl_backward", t->ndim, t->shape, t->dtype, t->device))) return -1;
    if (!(be = gdl__be("gdl_backward", t->device))) return -1;
    return be->memset0(t->grad->data, (size_t)t->numel * (t->dtype == GDL_F32 ? sizeof(gdl_real) : gdl_dtype_size(t->dtype)));
}

static int gdl__check_grad(const gdl_node *n, int k, const gdl_backend *be) {
    int64_t bad = 0;
    gdl_tensor *t = n->in[k];
    if (!gdl__anomaly || !t || !t->requires_grad || t->grad->dtype != GDL_F32) return 0; /* low: its f32 source is checked */
    if (be->count_nonfinite(t->numel, GDL__R(t->grad), &bad) < 0) return -1;
    if (bad) {
        gdl__set_error("gdl_backward: the gradient of %s's input %d %s has %lld NaN/Inf values (anomaly mode)",
                       gdl__op(n->op)->name, k, gdl_shape_str(t), (long long)bad);
        return -1;
    }
    return 0;
}

static GDL__TLS gdl_grad_ready_fn gdl__ready_fn;
static GDL__TLS void *gdl__ready_user;
GPUDL_API void gdl_set_grad_ready_hook(gdl_grad_ready_fn fn, void *user) {
    gdl__ready_fn = fn;
    gdl__ready_user = user;
}

/* With a gradient-ready hook: mark each leaf with the oldest node that reads
   it (the walk goes from the newest node back, so that node adds to the
   leaf's gradient last); after that node, the hook gets the leaf. */
static void gdl__mark_last_uses(void) {
    gdl_node *n;
    int k;
    for (n = gdl__tape; n; n = n->prev)
        for (k = 0; k < n->nin; k++)
            if (n->in[k] && n->in[k]->requires_grad && !n->in[k]->node) n->in[k]->last_use = n;
}
static void gdl__signal_ready(gdl_node *n) {
    int k;
    for (k = 0; k < n->nin; k++) {
        gdl_tensor *t = n->in[k];
        if (t && t->last_use == n) {
            t->last_use = NULL; /* once, even when a node reads it twice */
            if (t->grad) gdl__ready_fn(t, gdl__ready_user);
        }
    }
}

static int gdl__backward(const char *op, gdl_tensor *root, const gdl_tensor *seed) {
    gdl_node *n;
    const gdl_backend *be;
    int prev, rc = 0, k;
    if (!root->requires_grad) {
        gdl__set_error("%s: tensor %s does not require grad (no input of the ops that made it requires grad, "
                       "or it was made in no-grad mode)", op, gdl_shape_str(root));
        return -1;
    }
    if (!(be = gdl__be(op, root->device))) return -1;
    /* an optimizer step usually follows: casts of the weights made so far would be stale */
    gdl__ac_ncache = 0;
    /* gradients of intermediates from an earlier backward over the same tape start again */
    for (n = gdl__tape; n; n = n->prev) n->out->grad = NULL;
    if (gdl__ensure_grad(root) < 0) return -1;
    if (root->dtype != GDL_F32 || (seed && seed->dtype != GDL_F32)) {
        gdl_real *one = NULL;
        if (!seed && (!(one = (gdl_real *)gdl__scratch(op, root->device, sizeof(gdl_real))) || be->fill(one, 1, 1) < 0))
            return -1;
        if (gdl__acc_any(op, be, root->device, root->grad->data, root->dtype, seed ? seed->data : (void *)one,
                         seed ? seed->dtype : GDL_F32, root->numel) < 0)
            return -1;
    } else if (seed) {
        if (be->copy2d(1, root->numel, GDL__R(seed), 0, GDL__R(root->grad), 0, 1) < 0)
            return -1;
    } else if (be->unary(GDL_UN_ADD_SCALAR, root->numel, GDL__R(root->grad), GDL__R(root->grad), 1) < 0) {
        return -1;
    }
    if (!root->node) return 0;
    prev = gdl_set_grad_enabled(0);
    if (gdl__ready_fn) gdl__mark_last_uses();
    for (n = gdl__tape; n && rc == 0; n = n->prev) {
        if (n->out->grad) {
            for (k = 0; k < n->nin && rc == 0; k++)
                if (n->in[k] && n->in[k]->requires_grad) rc = gdl__ensure_grad(n->in[k]);
            if (rc == 0 && !(be = gdl__be(op, n->out->device))) rc = -1;
            if (rc == 0) {
                int span = gdl__prof_on ? gdl__prof_push(gdl__prof_bw_name(n->op), n->out->device) : 0;
                if ((rc = gdl__op(n->op)->backward(n, be)) < 0 && strncmp(gdl__err, op, strlen(op)) != 0) {
                    char prev[sizeof gdl__err];
                    memcpy(prev, gdl__err, sizeof prev);
                    gdl__set_error("%s: the backward of %s %s failed: %s", op, gdl__op(n->op)->name,
                                   gdl_shape_str(n->out), prev);
                }
                for (k = 0; k < n->nin && rc == 0; k++) rc = gdl__check_grad(n, k, be);
                gdl__prof_pop(span, rc == 0);
            }
        }
        if (rc == 0 && gdl__ready_fn) gdl__signal_ready(n);
    }
    if (gdl__ready_fn) /* after an error: no stale marks */
        for (n = gdl__tape; n; n = n->prev)
            for (k = 0; k < n->nin; k++)
                if (n->in[k]) n->in[k]->last_use = NULL;
    gdl_set_grad_enabled(prev);
    return rc < 0 ? -1 : 0;
}

GPUDL_API int gdl_backward(gdl_tensor *loss) {
    if (gdl__check_in("gdl_backward", "loss", loss, 0) < 0) return -1;
    if (!gdl__is_float(loss->dtype)) {
        gdl__set_error("gdl_backward: the loss must be a float tensor, got %s %s", gdl_dtype_name(loss->dtype),
                       gdl_shape_str(loss));
        return -1;
    }
    if (loss->numel != 1) {
        gdl__set_error("gdl_backward: the loss must have one element, got %s (use gdl_backward_grad)", gdl_shape_str(loss));
        return -1;
    }
    return gdl__backward("gdl_backward", loss, NULL);
}

GPUDL_API int gdl_backward_grad(gdl_tensor *t, const gdl_tensor *grad) {
    if (gdl__check_two("gdl_backward_grad", "t", t, 0, "grad", grad, 0) < 0) return -1;
    if (!gdl__is_float(t->dtype) || !gdl__is_float(grad->dtype)) {
        gdl__set_error("gdl_backward_grad: expected float tensors, got %s %s and grad %s %s", gdl_dtype_name(t->dtype),
                       gdl_shape_str(t), gdl_dtype_name(grad->dtype), gdl_shape_str(grad));
        return -1;
    }
    if (grad->numel != t->numel) {
        gdl__set_error("gdl_backward_grad: grad %s does not match tensor %s", gdl_shape_str(grad), gdl_shape_str(t));
        return -1;
    }
    return gdl__backward("gdl_backward_grad", t, grad);
}

/* ---------------------------------------------------------------------------
   [impl-formats] IDX, CIFAR-10 binary, safetensors (reader, strict JSON
   parser, atomic writer). Every function fails with -1 and a message that
   names the function, the file and the problem; outputs are written only on
   success, and every error path frees what it allocated.
   ------------------------------------------------------------------------- */
#ifdef GPUDL_ZLIB
#include <zlib.h>
#endif

/* ---- shared helpers ---------------------------------------------------- */

static int gdl__host_is_le(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void gdl__bswap(unsigned char *p, size_t elem, size_t count) {
    size_t i, j;
    for (i = 0; i < count; i++, p += elem)
        for (j = 0; j < elem / 2; j++) {
            unsigned char t = p[j];
            p[j] = p[elem - 1 - j];
            p[elem - 1 - j] = t;
        }
}

static const char *gdl__strerr(int e) { return e ? strerror(e) : "unknown error"; }

/* Read a whole file into a fresh buffer (NUL-terminated for convenience). */
static int gdl__read_file(const char *fn, const char *path, unsigned char **out, size_t *out_len) {
    FILE *f;
    unsigned char *buf;
    size_t len = 0, cap = (size_t)1 << 16, hint = 0;
    long end;
    if (!path) {
        gdl__set_error("%s: path is NULL", fn);
        return -1;
    }
    f = gdl__os_fopen_read(path);
    if (!f) {
        gdl__set_error("%s: %s: cannot open: %s", fn, path, gdl__strerr(errno));
        return -1;
    }
    /* the size, as a hint only: trusted once the first chunk reads fine */
    if (fseek(f, 0, SEEK_END) == 0 && (end = ftell(f)) > 0 && (uint64_t)end < (uint64_t)(((size_t)-1) / 2))
        hint = (size_t)end;
    if (fseek(f, 0, SEEK_SET) != 0) {
        gdl__set_error("%s: %s: cannot seek: %s", fn, path, gdl__strerr(errno));
        fclose(f);
        return -1;
    }
    buf = (unsigned char *)GPUDL_MALLOC(cap + 1);
    if (!buf) {
        gdl__set_error("%s: %s: out of memory", fn, path);
        fclose(f);
        return -1;
    }
    for (;;) {
        size_t k;
        if (len == cap) {
            size_t want = cap * 2;
            unsigned char *nb;
            if (cap > ((size_t)-1) / 4) {
                gdl__set_error("%s: %s: file too large", fn, path);
                goto fail;
            }
            if (hint >= want) want = hint + 1; /* +1: EOF is seen without another regrow */
            nb = (unsigned char *)GPUDL_REALLOC(buf, want + 1);
            if (!nb) {
                gdl__set_error("%s: %s: out of memory reading %zu bytes", fn, path, want);
                goto fail;
            }
            buf = nb;
            cap = want;
        }
        k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0) {
            if (ferror(f)) {
                gdl__set_error("%s: %s: read error: %s", fn, path, gdl__strerr(errno));
                goto fail;
            }
            break;
        }
    }
    fclose(f);
    buf[len] = 0;
    *out = buf;
    *out_len = len;
    return 0;
fail:
    GPUDL_FREE(buf);
    fclose(f);
    return -1;
}

/* ---- IDX ---------------------------------------------------------------- */

/* A byte source: a plain FILE, or a gzFile; two peeked bytes are replayed. */
typedef struct gdl__rd {
    FILE *f;
#ifdef GPUDL_ZLIB
    gzFile gz;
#endif
    unsigned char pb[2];
    size_t npb, ipb;
    int gz_err; /* a zlib error was seen */
    int gz_corrupt; /* ... and it was bad data (a CRC or format error), not the stream ending early */
    int io_errno; /* a stdio read error was seen: its errno */
    char gz_msg[128];
} gdl__rd;

static int gdl__rd_open(const char *fn, const char *path, gdl__rd *r) {
    memset(r, 0, sizeof *r);
    r->f = fopen(path, "rb");
    if (!r->f) {
        gdl__set_error("%s: %s: cannot open: %s", fn, path, gdl__strerr(errno));
        return -1;
    }
    r->npb = fread(r->pb, 1, 2, r->f);
    if (ferror(r->f)) {
        gdl__set_error("%s: %s: read error: %s", fn, path, gdl__strerr(errno));
        fclose(r->f);
        r->f = NULL;
        return -1;
    }
    if (r->npb == 2 && r->pb[0] == 0x1f && r->pb[1] == 0x8b) {
#ifdef GPUDL_ZLIB
        fclose(r->f);
        r->f = NULL;
        r->npb = 0;
        r->gz = gzopen(path, "rb");
        if (!r->gz) {
            gdl__set_error("%s: %s: gzopen failed: %s", fn, path, gdl__strerr(errno));
            return -1;
        }
        gzbuffer(r->gz, 1 << 18);
#else
        gdl__set_error("%s: %s: file is gzip-compressed: build with -DGPUDL_ZLIB and link -lz, "
                       "or gunzip it first", fn, path);
        fclose(r->f);
        r->f = NULL;
        return -1;
#endif
    }
    return 0;
}

static void gdl__rd_close(gdl__rd *r) {
    if (r->f) fclose(r->f);
#ifdef GPUDL_ZLIB
    if (r->gz) gzclose(r->gz);
#endif
    memset(r, 0, sizeof *r);
}

/* Read up to n bytes; fewer means end of data or an error (*err set). */
static size_t gdl__rd_read(gdl__rd *r, void *dst, size_t n, int *err) {
    unsigned char *d = (unsigned char *)dst;
    size_t got = 0;
    while (got < n && r->ipb < r->npb) d[got++] = r->pb[r->ipb++];
#ifdef GPUDL_ZLIB
    if (r->gz) {
        while (got < n) {
            size_t want = n - got;
            int k = gzread(r->gz, d + got, (unsigned)(want > (1u << 30) ? (1u << 30) : want));
            if (k <= 0) {
                int zerr = Z_OK;
                const char *m = gzerror(r->gz, &zerr);
                if (k < 0 || (zerr != Z_OK && zerr != Z_STREAM_END)) {
                    r->gz_err = 1;
                    r->gz_corrupt = zerr == Z_DATA_ERROR;
                    snprintf(r->gz_msg, sizeof r->gz_msg, "%s", m ? m : "gzip error");
                    *err = 1;
                }
                break;
            }
            got += (size_t)k;
        }
        return got;
    }
#endif
    if (got < n) {
        got += fread(d + got, 1, n - got, r->f);
        if (got < n && ferror(r->f)) {
            r->io_errno = errno ? errno : EIO;
            *err = 1;
        }
    }
    return got;
}

/* " (gzip: unexpected end of file)", " (read error: ...)" or "" */
/* A damaged gzip file is not a short one: say so (1), or leave the message to the caller (0). */
static int gdl__rd_corrupt(const char *fn, const char *path, const gdl__rd *r) {
    const char *m = r->gz_msg;
    size_t pl = strlen(path);
    if (!r->gz_corrupt) return 0;
    if (strncmp(m, path, pl) == 0 && m[pl] == ':' && m[pl + 1] == ' ') m += pl + 2; /* zlib names the file too */
    gdl__set_error("%s: %s: corrupt gzip data (zlib: %s): the file is damaged; fetch it again", fn, path, m);
    return 1;
}

static const char *gdl__rd_why(const gdl__rd *r, char *buf, size_t cap) {
    if (r->gz_err) snprintf(buf, cap, " (gzip: %s)", r->gz_msg);
    else if (r->io_errno) snprintf(buf, cap, " (read error: %s)", gdl__strerr(r->io_errno));
    else buf[0] = 0;
    return buf;
}

/* gdl_idx_load's header: the magic (dtype, ndim) and the dims into res; its length (*hlen) and the data's
   size (*bytes). */
static int gdl__idx_header(const char *fn, const char *path, gdl__rd *r, gdl_idx *res, size_t *hlen,
                           uint64_t *bytes, int *err) {
    const uint64_t limit = (uint64_t)1 << 31; /* 2 GiB of data */
    unsigned char hdr[4 + 4 * GDL_IDX_MAX_DIMS];
    char why[160];
    size_t got;
    int d;
    got = gdl__rd_read(r, hdr, 4, err);
    if (got < 4) {
        if (!gdl__rd_corrupt(fn, path, r))
            gdl__set_error("%s: %s: truncated: expected a 4-byte magic number, got %zu bytes%s", fn, path,
                           got, gdl__rd_why(r, why, sizeof why));
        return -1;
    }
    if (hdr[0] != 0 || hdr[1] != 0) {
        gdl__set_error("%s: %s: bad magic 0x%02X%02X%02X%02X: the first two bytes must be zero "
                       "(not an IDX file?)", fn, path, hdr[0], hdr[1], hdr[2], hdr[3]);
        return -1;
    }
    res->dtype_code = hdr[2];
    switch (hdr[2]) {
    case 0x08: case 0x09: res->elem_size = 1; break;
    case 0x0B: res->elem_size = 2; break;
    case 0x0C: case 0x0D: res->elem_size = 4; break;
    case 0x0E: res->elem_size = 8; break;
    default:
        gdl__set_error("%s: %s: unknown type byte 0x%02X in magic 0x%02X%02X%02X%02X (expected 0x08, "
                       "0x09, 0x0B, 0x0C, 0x0D or 0x0E)", fn, path, hdr[2], hdr[0], hdr[1], hdr[2], hdr[3]);
        return -1;
    }
    res->ndim = hdr[3];
    if (res->ndim < 1 || res->ndim > GDL_IDX_MAX_DIMS) {
        gdl__set_error("%s: %s: bad number of dimensions %d in magic (expected 1..%d)", fn, path,
                       res->ndim, GDL_IDX_MAX_DIMS);
        return -1;
    }
    *hlen = 4 + 4 * (size_t)res->ndim;
    got = gdl__rd_read(r, hdr + 4, *hlen - 4, err);
    if (got < *hlen - 4) {
        if (!gdl__rd_corrupt(fn, path, r))
            gdl__set_error("%s: %s: truncated header: expected %zu bytes, got %zu%s", fn, path, *hlen,
                           4 + got, gdl__rd_why(r, why, sizeof why));
        return -1;
    }
    *bytes = res->elem_size;
    res->count = 1;
    for (d = 0; d < res->ndim; d++) {
        const unsigned char *p = hdr + 4 + 4 * d;
        uint64_t v = ((uint64_t)p[0] << 24) | ((uint64_t)p[1] << 16) | ((uint64_t)p[2] << 8) | p[3];
        if (v == 0) {
            gdl__set_error("%s: %s: dimension %d is 0", fn, path, d);
            return -1;
        }
        if (v > limit / *bytes) {
            gdl__set_error("%s: %s: data size exceeds 2 GiB (dimension %d is %llu)", fn, path, d,
                           (unsigned long long)v);
            return -1;
        }
        *bytes *= v;
        res->dims[d] = (int64_t)v;
        res->count *= (int64_t)v;
    }
    return 0;
}

/* The data (bytes of it, into *data) and the end of the file: nothing may follow. */
static int gdl__idx_data(const char *fn, const char *path, gdl__rd *r, size_t hlen, uint64_t bytes,
                         unsigned char **data, int *err) {
    char why[160];
    size_t got = 0, k_read;
    /* The buffer grows with the data read, so that a few bytes claiming 2 GiB
       (a gzip stream's size is not known before it is read) cost a few bytes. */
    {
        size_t cap = 0, want;
        do {
            unsigned char *grown;
            want = (size_t)bytes - got;
            if (cap - got < want) {
                size_t ncap = cap ? cap * 2 : (size_t)1 << 16;
                if (ncap > (size_t)bytes) ncap = (size_t)bytes;
                if (!(grown = (unsigned char *)GPUDL_REALLOC(*data, ncap))) {
                    gdl__set_error("%s: %s: out of memory allocating %llu bytes", fn, path,
                                   (unsigned long long)ncap);
                    return -1;
                }
                *data = grown;
                cap = ncap;
                want = cap - got;
            }
            k_read = gdl__rd_read(r, *data + got, want, err);
            got += k_read;
        } while (k_read == want && got < bytes && !*err);
    }
    if (got < bytes) {
        if (!gdl__rd_corrupt(fn, path, r))
            gdl__set_error("%s: %s: truncated: expected %llu bytes, got %llu%s", fn, path,
                           (unsigned long long)(hlen + bytes),
                           (unsigned long long)(hlen + got), gdl__rd_why(r, why, sizeof why));
        return -1;
    }
    {
        unsigned char extra[4096];
        uint64_t more = 0;
        size_t k;
        while ((k = gdl__rd_read(r, extra, sizeof extra, err)) > 0) more += k;
        if (*err) {
            if (!gdl__rd_corrupt(fn, path, r))
                gdl__set_error("%s: %s: read error after the data%s", fn, path, gdl__rd_why(r, why, sizeof why));
            return -1;
        }
        if (more) {
            gdl__set_error("%s: %s: %llu trailing bytes: expected %llu bytes, got %llu", fn, path,
                           (unsigned long long)more, (unsigned long long)(hlen + bytes),
                           (unsigned long long)(hlen + bytes + more));
            return -1;
        }
    }
    if (*err) {
        if (!gdl__rd_corrupt(fn, path, r))
            gdl__set_error("%s: %s: read error%s", fn, path, gdl__rd_why(r, why, sizeof why));
        return -1;
    }
    return 0;
}

GPUDL_API int gdl_idx_load(const char *path, gdl_idx *out) {
    static const char fn[] = "gdl_idx_load";
    gdl__rd r;
    gdl_idx res;
    int err = 0;
    size_t hlen = 0;
    uint64_t bytes = 0;
    unsigned char *data = NULL;

    if (!path || !out) {
        gdl__set_error("%s: path or out is NULL", fn);
        return -1;
    }
    if (gdl__rd_open(fn, path, &r) < 0) return -1;
    memset(&res, 0, sizeof res);
    if (gdl__idx_header(fn, path, &r, &res, &hlen, &bytes, &err) < 0 ||
        gdl__idx_data(fn, path, &r, hlen, bytes, &data, &err) < 0)
        goto fail;
    if (res.elem_size > 1 && gdl__host_is_le()) gdl__bswap(data, res.elem_size, (size_t)res.count);
    gdl__rd_close(&r);
    res.data = data;
    *out = res;
    return 0;
fail:
    GPUDL_FREE(data);
    gdl__rd_close(&r);
    return -1;
}

GPUDL_API void gdl_idx_free(gdl_idx *idx) {
    if (!idx) return;
    GPUDL_FREE(idx->data);
    memset(idx, 0, sizeof *idx);
}

GPUDL_API int gdl_idx_check_pair(const gdl_idx *images, const gdl_idx *labels, int num_classes,
                                 const char *what) {
    static const char fn[] = "gdl_idx_check_pair";
    const uint8_t *lab;
    int64_t i;
    if (!what) what = "dataset";
    if (!images || !labels || !images->data || !labels->data) {
        gdl__set_error("%s: %s: images or labels not loaded", fn, what);
        return -1;
    }
    if (num_classes < 1 || num_classes > 256) {
        gdl__set_error("%s: %s: num_classes %d must be in 1..256 for u8 labels", fn, what, num_classes);
        return -1;
    }
    if (images->dtype_code != 0x08 || images->ndim != 3) {
        gdl__set_error("%s: %s: images must be u8 (type 0x08) with 3 dims (count, rows, cols), got "
                       "type 0x%02X with %d dims", fn, what, images->dtype_code, images->ndim);
        return -1;
    }
    if (labels->dtype_code != 0x08 || labels->ndim != 1) {
        gdl__set_error("%s: %s: labels must be u8 (type 0x08) with 1 dim, got type 0x%02X with %d dims",
                       fn, what, labels->dtype_code, labels->ndim);
        return -1;
    }
    if (images->dims[0] != labels->dims[0]) {
        gdl__set_error("%s: %s: %lld images but %lld labels", fn, what, (long long)images->dims[0],
                       (long long)labels->dims[0]);
        return -1;
    }
    lab = (const uint8_t *)labels->data;
    for (i = 0; i < labels->dims[0]; i++)
        if (lab[i] >= num_classes) {
            gdl__set_error("%s: %s: label %d at index %lld is out of range [0, %d)", fn, what, lab[i],
                           (long long)i, num_classes);
            return -1;
        }
    return 0;
}

/* ---- CIFAR-10 binary ------------------------------------------------------ */

#define GDL__CIFAR_REC 3073 /* 1 label byte + 3 x 32 x 32 pixel bytes */

GPUDL_API int gdl_cifar10_load(const char *path, uint8_t **images, uint8_t **labels, int64_t *n) {
    static const char fn[] = "gdl_cifar10_load";
    unsigned char *buf, *shrunk;
    uint8_t *lab;
    size_t len, cnt, i;
    if (!images || !labels || !n) {
        gdl__set_error("%s: %s: an output pointer is NULL", fn, path ? path : "(null)");
        return -1;
    }
    if (gdl__read_file(fn, path, &buf, &len) < 0) return -1;
    if (len == 0 || len % GDL__CIFAR_REC != 0) {
        gdl__set_error("%s: %s: size %zu bytes is not a positive multiple of %d (1 label byte + 3072 "
                       "pixel bytes per record)", fn, path, len, GDL__CIFAR_REC);
        GPUDL_FREE(buf);
        return -1;
    }
    cnt = len / GDL__CIFAR_REC;
    for (i = 0; i < cnt; i++)
        if (buf[i * GDL__CIFAR_REC] >= 10) {
            gdl__set_error("%s: %s: record %zu has label %d, out of range [0, 10)", fn, path, i,
                           buf[i * GDL__CIFAR_REC]);
            GPUDL_FREE(buf);
            return -1;
        }
    lab = (uint8_t *)GPUDL_MALLOC(cnt);
    if (!lab) {
        gdl__set_error("%s: %s: out of memory", fn, path);
        GPUDL_FREE(buf);
        return -1;
    }
    /* compact in place: the destination never passes the source */
    for (i = 0; i < cnt; i++) {
        lab[i] = buf[i * GDL__CIFAR_REC];
        memmove(buf + i * 3072, buf + i * GDL__CIFAR_REC + 1, 3072);
    }
    shrunk = (unsigned char *)GPUDL_REALLOC(buf, cnt * 3072);
    if (shrunk) buf = shrunk;
    *images = buf;
    *labels = lab;
    *n = (int64_t)cnt;
    return 0;
}

GPUDL_API int gdl_cifar10_load_dir(const char *dir, int train, uint8_t **images, uint8_t **labels,
                                   int64_t *n) {
    static const char fn[] = "gdl_cifar10_load_dir";
    static const char *const train_names[5] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                               "data_batch_4.bin", "data_batch_5.bin"};
    static const char *const test_names[1] = {"test_batch.bin"};
    const char *const *names = train ? train_names : test_names;
    int nfiles = train ? 5 : 1, k;
    uint8_t *all_img = NULL, *all_lab = NULL;
    int64_t total = 0;
    size_t dlen;
    if (!dir || !images || !labels || !n) {
        gdl__set_error("%s: dir or an output pointer is NULL", fn);
        return -1;
    }
    dlen = strlen(dir);
    for (k = 0; k < nfiles; k++) {
        uint8_t *img = NULL, *lab = NULL;
        int64_t cnt = 0;
        int sep = dlen > 0 && dir[dlen - 1] != '/' && dir[dlen - 1] != '\\';
        char *p = (char *)GPUDL_MALLOC(dlen + (size_t)sep + strlen(names[k]) + 1);
        int rc;
        if (!p) {
            gdl__set_error("%s: %s: out of memory", fn, dir);
            goto fail;
        }
        memcpy(p, dir, dlen);
        if (sep) p[dlen] = '/';
        strcpy(p + dlen + (size_t)sep, names[k]);
        rc = gdl_cifar10_load(p, &img, &lab, &cnt); /* its message names the file */
        GPUDL_FREE(p);
        if (rc < 0) goto fail;
        if (!all_img) {
            all_img = img;
            all_lab = lab;
        } else {
            uint8_t *ni = (uint8_t *)GPUDL_REALLOC(all_img, (size_t)(total + cnt) * 3072);
            uint8_t *nl;
            if (ni) all_img = ni;
            nl = ni ? (uint8_t *)GPUDL_REALLOC(all_lab, (size_t)(total + cnt)) : NULL;
            if (nl) all_lab = nl;
            if (!ni || !nl) {
                gdl__set_error("%s: %s: out of memory concatenating %s", fn, dir, names[k]);
                GPUDL_FREE(img);
                GPUDL_FREE(lab);
                goto fail;
            }
            memcpy(all_img + (size_t)total * 3072, img, (size_t)cnt * 3072);
            memcpy(all_lab + (size_t)total, lab, (size_t)cnt);
            GPUDL_FREE(img);
            GPUDL_FREE(lab);
        }
        total += cnt;
    }
    *images = all_img;
    *labels = all_lab;
    *n = total;
    return 0;
fail:
    GPUDL_FREE(all_img);
    GPUDL_FREE(all_lab);
    return -1;
}

/* ---- safetensors: dtypes, UTF-8, a strict JSON parser --------------------- */

#define GDL__ST_MAX_HEADER 100000000ull
#define GDL__JSON_MAX_DEPTH 64

GPUDL_API size_t gdl_st_dtype_size(const char *dtype) {
    static const struct { const char *name; size_t size; } tab[] = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
        {"I16", 2},  {"U16", 2}, {"F16", 2},  {"BF16", 2},    {"I32", 4},     {"U32", 4},
        {"F32", 4},  {"I64", 8}, {"U64", 8},  {"F64", 8},     {"C64", 8}};
    size_t i;
    if (!dtype) return 0;
    for (i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(dtype, tab[i].name) == 0) return tab[i].size;
    return 0;
}

/* n if s[0, n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF), else the bad offset. */
static size_t gdl__utf8_check(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k, need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return i;
        if (n - i <= need) return i;
        for (k = 1; k <= need; k++) {
            unsigned b = s[i + k];
            if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
        }
        i += need + 1;
    }
    return n;
}

typedef struct gdl__json {
    const unsigned char *s;
    size_t n, i;
    int depth;
    char *str;          /* the last decoded string, NUL-terminated */
    size_t slen, scap;
    const char *tok;    /* the last number token */
    size_t toklen;
    char err[1024];
} gdl__json;

static int gdl__js_fail(gdl__json *J, const char *what) {
    if (!J->err[0]) {
        if (J->i >= J->n)
            snprintf(J->err, sizeof J->err, "invalid JSON: unexpected end of header: %s", what);
        else
            snprintf(J->err, sizeof J->err, "invalid JSON at header byte %zu ('%c'): %s", J->i,
                     J->s[J->i] >= 0x20 && J->s[J->i] < 0x7F ? J->s[J->i] : '?', what);
    }
    return -1;
}

static void gdl__js_ws(gdl__json *J) {
    while (J->i < J->n && (J->s[J->i] == ' ' || J->s[J->i] == '\t' || J->s[J->i] == '\n' || J->s[J->i] == '\r'))
        J->i++;
}

static int gdl__js_peek(gdl__json *J) {
    gdl__js_ws(J);
    return J->i < J->n ? J->s[J->i] : -1;
}

static int gdl__js_putc(gdl__json *J, unsigned char c) {
    if (J->slen + 1 >= J->scap) {
        size_t nc = J->scap ? J->scap * 2 : 64;
        char *ns = (char *)GPUDL_REALLOC(J->str, nc);
        if (!ns) {
            snprintf(J->err, sizeof J->err, "out of memory parsing the header");
            return -1;
        }
        J->str = ns;
        J->scap = nc;
    }
    J->str[J->slen++] = (char)c;
    J->str[J->slen] = 0;
    return 0;
}

static int gdl__js_hex4(gdl__json *J, unsigned *out) {
    unsigned v = 0;
    int k;
    for (k = 0; k < 4; k++) {
        int c = J->i < J->n ? J->s[J->i] : -1, d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return gdl__js_fail(J, "\\u needs 4 hex digits");
        v = v * 16 + (unsigned)d;
        J->i++;
    }
    *out = v;
    return 0;
}

/* Parse a string at J->i (which is '"') into J->str / J->slen. */
static int gdl__js_string(gdl__json *J) {
    J->slen = 0;
    if (gdl__js_putc(J, 0) < 0) return -1;
    J->slen = 0;
    if (J->i >= J->n || J->s[J->i] != '"') return gdl__js_fail(J, "expected a string");
    J->i++;
    for (;;) {
        unsigned c;
        if (J->i >= J->n) return gdl__js_fail(J, "unterminated string");
        c = J->s[J->i];
        if (c == '"') {
            J->i++;
            return 0;
        }
        if (c < 0x20) return gdl__js_fail(J, "control character in string");
        if (c != '\\') {
            if (gdl__js_putc(J, (unsigned char)c) < 0) return -1;
            J->i++;
            continue;
        }
        J->i++;
        if (J->i >= J->n) return gdl__js_fail(J, "unterminated escape");
        c = J->s[J->i++];
        switch (c) {
        case '"': case '\\': case '/': break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
            unsigned cp = 0, lo = 0;
            unsigned char u[4];
            int nu, k;
            if (gdl__js_hex4(J, &cp) < 0) return -1;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return gdl__js_fail(J, "lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (J->i + 1 >= J->n || J->s[J->i] != '\\' || J->s[J->i + 1] != 'u')
                    return gdl__js_fail(J, "high surrogate not followed by a \\u low surrogate");
                J->i += 2;
                if (gdl__js_hex4(J, &lo) < 0) return -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return gdl__js_fail(J, "high surrogate not followed by a low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp < 0x80) { u[0] = (unsigned char)cp; nu = 1; }
            else if (cp < 0x800) { u[0] = (unsigned char)(0xC0 | (cp >> 6)); u[1] = (unsigned char)(0x80 | (cp & 0x3F)); nu = 2; }
            else if (cp < 0x10000) {
                u[0] = (unsigned char)(0xE0 | (cp >> 12)); u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                u[2] = (unsigned char)(0x80 | (cp & 0x3F)); nu = 3;
            } else {
                u[0] = (unsigned char)(0xF0 | (cp >> 18)); u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (unsigned char)(0x80 | (cp & 0x3F)); nu = 4;
            }
            for (k = 0; k < nu; k++)
                if (gdl__js_putc(J, u[k]) < 0) return -1;
            continue;
        }
        default:
            J->i--;
            return gdl__js_fail(J, "invalid escape");
        }
        if (gdl__js_putc(J, (unsigned char)c) < 0) return -1;
    }
}

/* Parse a number; *is_uint says it is a plain non-negative integer that fits in *val. */
static int gdl__js_number(gdl__json *J, int *is_uint, uint64_t *val) {
    size_t st = J->i;
    int neg = 0, frac = 0, ovf = 0;
    uint64_t v = 0;
    if (J->i < J->n && J->s[J->i] == '-') { neg = 1; J->i++; }
    if (J->i >= J->n || J->s[J->i] < '0' || J->s[J->i] > '9') return gdl__js_fail(J, "invalid number");
    if (J->s[J->i] == '0') {
        J->i++;
        if (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') return gdl__js_fail(J, "leading zero in number");
    } else {
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') {
            unsigned d = (unsigned)(J->s[J->i] - '0');
            if (v > (UINT64_MAX - d) / 10) ovf = 1;
            else v = v * 10 + d;
            J->i++;
        }
    }
    if (J->i < J->n && J->s[J->i] == '.') {
        frac = 1;
        J->i++;
        if (J->i >= J->n || J->s[J->i] < '0' || J->s[J->i] > '9') return gdl__js_fail(J, "digit expected after '.'");
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') J->i++;
    }
    if (J->i < J->n && (J->s[J->i] == 'e' || J->s[J->i] == 'E')) {
        frac = 1;
        J->i++;
        if (J->i < J->n && (J->s[J->i] == '+' || J->s[J->i] == '-')) J->i++;
        if (J->i >= J->n || J->s[J->i] < '0' || J->s[J->i] > '9') return gdl__js_fail(J, "digit expected in exponent");
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') J->i++;
    }
    J->tok = (const char *)J->s + st;
    J->toklen = J->i - st;
    *is_uint = !neg && !frac && !ovf;
    *val = v;
    return 0;
}

static int gdl__js_skip(gdl__json *J);

static int gdl__js_literal(gdl__json *J, const char *lit) {
    size_t k = strlen(lit);
    if (J->n - J->i < k || memcmp(J->s + J->i, lit, k) != 0) return gdl__js_fail(J, "invalid literal");
    J->i += k;
    return 0;
}

/* Skip over any JSON value (validating it). */
static int gdl__js_skip(gdl__json *J) {
    int c = gdl__js_peek(J), is_uint;
    uint64_t v;
    switch (c) {
    case '{': case '[': {
        int close = c == '{' ? '}' : ']', first = 1;
        if (++J->depth > GDL__JSON_MAX_DEPTH) return gdl__js_fail(J, "nesting too deep");
        J->i++;
        for (;;) {
            c = gdl__js_peek(J);
            if (c == close && first) break;
            if (close == '}') {
                if (c != '"') return gdl__js_fail(J, "expected a string key");
                if (gdl__js_string(J) < 0) return -1;
                if (gdl__js_peek(J) != ':') return gdl__js_fail(J, "expected ':'");
                J->i++;
            }
            if (gdl__js_skip(J) < 0) return -1;
            first = 0;
            c = gdl__js_peek(J);
            if (c == ',') { J->i++; continue; }
            if (c == close) break;
            return gdl__js_fail(J, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
        }
        J->i++;
        J->depth--;
        return 0;
    }
    case '"': return gdl__js_string(J);
    case 't': return gdl__js_literal(J, "true");
    case 'f': return gdl__js_literal(J, "false");
    case 'n': return gdl__js_literal(J, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return gdl__js_number(J, &is_uint, &v);
        return gdl__js_fail(J, "expected a value");
    }
}

/* Parse [uint, uint, ...] into vals (at most maxn); *count gets the length.
   A non-integer or negative element fails with a message naming field. */
static int gdl__js_uint_array(gdl__json *J, const char *name, const char *field, uint64_t *vals, int maxn,
                              int *count, uint64_t maxval) {
    int c = gdl__js_peek(J), k = 0;
    if (c != '[') {
        snprintf(J->err, sizeof J->err, "tensor '%s': \"%s\" must be an array of non-negative integers", name, field);
        return -1;
    }
    J->i++;
    if (gdl__js_peek(J) == ']') {
        J->i++;
        *count = 0;
        return 0;
    }
    for (;;) {
        int is_uint;
        uint64_t v;
        c = gdl__js_peek(J);
        if (c != '-' && (c < '0' || c > '9')) {
            if (c == -1 || c == '"' || c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n') {
                if (c != -1 && gdl__js_skip(J) < 0) return -1;
                snprintf(J->err, sizeof J->err, "tensor '%s': \"%s\" must be an array of non-negative integers", name, field);
                return -1;
            }
            return gdl__js_fail(J, "expected a value");
        }
        if (gdl__js_number(J, &is_uint, &v) < 0) return -1;
        if (!is_uint || v > maxval) {
            snprintf(J->err, sizeof J->err, "tensor '%s': \"%s\"[%d] is %.*s: %s", name, field, k,
                     (int)(J->toklen > 40 ? 40 : J->toklen), J->tok,
                     is_uint ? "out of range" : "not a non-negative integer");
            return -1;
        }
        if (k >= maxn) {
            snprintf(J->err, sizeof J->err, "tensor '%s': \"%s\" has more than %d elements", name, field, maxn);
            return -1;
        }
        vals[k++] = v;
        c = gdl__js_peek(J);
        if (c == ',') { J->i++; continue; }
        if (c == ']') { J->i++; break; }
        return gdl__js_fail(J, "expected ',' or ']'");
    }
    *count = k;
    return 0;
}

/* Dynamic arrays of entries and metadata while parsing. */
typedef struct gdl__st_build {
    gdl_st_entry *e;
    int n, cap;
    char **mk, **mv;
    int nm, mcap;
} gdl__st_build;

static void gdl__st_build_free(gdl__st_build *b) {
    int k;
    for (k = 0; k < b->nm; k++) {
        GPUDL_FREE(b->mk[k]);
        GPUDL_FREE(b->mv[k]);
    }
    GPUDL_FREE(b->mk);
    GPUDL_FREE(b->mv);
    GPUDL_FREE(b->e);
    memset(b, 0, sizeof *b);
}

static char *gdl__strdup_n(const char *s, size_t n) {
    char *p = (char *)GPUDL_MALLOC(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* Format a shape as "[2, 3]" into buf. */
static const char *gdl__shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t o = 0;
    int d;
    o += (size_t)snprintf(buf, cap, "[");
    for (d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

/* Byte size of dtype x shape into *bytes; 0 if it fits in uint64 (and size_t), else -1. */
static int gdl__st_nbytes(size_t esize, int ndim, const int64_t *shape, uint64_t *bytes) {
    uint64_t b = esize;
    int d, zero = 0;
    for (d = 0; d < ndim; d++)
        if (shape[d] == 0) zero = 1;
    if (zero) {
        *bytes = 0;
        return 0;
    }
    for (d = 0; d < ndim; d++) {
        uint64_t v = (uint64_t)shape[d];
        if (v && b > UINT64_MAX / v) return -1;
        b *= v;
    }
    if (b > (uint64_t)((size_t)-1)) return -1;
    *bytes = b;
    return 0;
}

static int gdl__st_entry_parse(gdl__json *J, gdl_st_entry *e) {
    int seen_dtype = 0, seen_shape = 0, seen_off = 0, c, cnt, d;
    uint64_t vals[GDL_ST_MAX_DIMS], offs[2], bytes;
    size_t esize;
    char sh[200];
    if (gdl__js_peek(J) != '{') {
        if (gdl__js_skip(J) < 0) return -1;
        snprintf(J->err, sizeof J->err, "tensor '%s': expected an object with dtype, shape, data_offsets", e->name);
        return -1;
    }
    if (++J->depth > GDL__JSON_MAX_DEPTH) return gdl__js_fail(J, "nesting too deep");
    J->i++;
    c = gdl__js_peek(J);
    if (c == '}') J->i++;
    else
        for (;;) {
            if (gdl__js_peek(J) != '"') return gdl__js_fail(J, "expected a string key");
            if (gdl__js_string(J) < 0) return -1;
            if (gdl__js_peek(J) != ':') return gdl__js_fail(J, "expected ':'");
            J->i++;
            if (strcmp(J->str, "dtype") == 0 && J->slen == 5) {
                if (seen_dtype++) {
                    snprintf(J->err, sizeof J->err, "tensor '%s': duplicate key \"dtype\"", e->name);
                    return -1;
                }
                if (gdl__js_peek(J) != '"') {
                    if (gdl__js_skip(J) < 0) return -1;
                    snprintf(J->err, sizeof J->err, "tensor '%s': \"dtype\" must be a string", e->name);
                    return -1;
                }
                if (gdl__js_string(J) < 0) return -1;
                if (J->slen >= sizeof e->dtype || strlen(J->str) != J->slen || !gdl_st_dtype_size(J->str)) {
                    snprintf(J->err, sizeof J->err, "tensor '%s': unknown dtype \"%.40s\"", e->name, J->str);
                    return -1;
                }
                memcpy(e->dtype, J->str, J->slen + 1);
            } else if (strcmp(J->str, "shape") == 0 && J->slen == 5) {
                if (seen_shape++) {
                    snprintf(J->err, sizeof J->err, "tensor '%s': duplicate key \"shape\"", e->name);
                    return -1;
                }
                if (gdl__js_uint_array(J, e->name, "shape", vals, GDL_ST_MAX_DIMS, &cnt, (uint64_t)INT64_MAX) < 0)
                    return -1;
                e->ndim = cnt;
                for (d = 0; d < cnt; d++) e->shape[d] = (int64_t)vals[d];
            } else if (strcmp(J->str, "data_offsets") == 0 && J->slen == 12) {
                if (seen_off++) {
                    snprintf(J->err, sizeof J->err, "tensor '%s': duplicate key \"data_offsets\"", e->name);
                    return -1;
                }
                if (gdl__js_uint_array(J, e->name, "data_offsets", offs, 2, &cnt, UINT64_MAX) < 0) return -1;
                if (cnt != 2) {
                    snprintf(J->err, sizeof J->err, "tensor '%s': \"data_offsets\" must have 2 elements, has %d",
                             e->name, cnt);
                    return -1;
                }
                e->begin = offs[0];
                e->end = offs[1];
            } else if (gdl__js_skip(J) < 0) /* unknown keys are allowed, as in the reference reader */
                return -1;
            c = gdl__js_peek(J);
            if (c == ',') { J->i++; continue; }
            if (c == '}') { J->i++; break; }
            return gdl__js_fail(J, "expected ',' or '}'");
        }
    J->depth--;
    if (!seen_dtype || !seen_shape || !seen_off) {
        snprintf(J->err, sizeof J->err, "tensor '%s': missing \"%s\"", e->name,
                 !seen_dtype ? "dtype" : !seen_shape ? "shape" : "data_offsets");
        return -1;
    }
    if (e->end < e->begin) {
        snprintf(J->err, sizeof J->err, "tensor '%s': data_offsets [%llu, %llu]: end < begin", e->name,
                 (unsigned long long)e->begin, (unsigned long long)e->end);
        return -1;
    }
    esize = gdl_st_dtype_size(e->dtype);
    if (gdl__st_nbytes(esize, e->ndim, e->shape, &bytes) < 0) {
        snprintf(J->err, sizeof J->err, "tensor '%s': byte size of %s x %s overflows", e->name, e->dtype,
                 gdl__shape_str(sh, sizeof sh, e->ndim, e->shape));
        return -1;
    }
    if (bytes != e->end - e->begin) {
        snprintf(J->err, sizeof J->err,
                 "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but %s x %s needs %llu", e->name,
                 (unsigned long long)e->begin, (unsigned long long)e->end,
                 (unsigned long long)(e->end - e->begin), e->dtype, gdl__shape_str(sh, sizeof sh, e->ndim, e->shape),
                 (unsigned long long)bytes);
        return -1;
    }
    return 0;
}

static int gdl__st_meta_parse(gdl__json *J, gdl__st_build *b) {
    int c;
    if (gdl__js_peek(J) != '{') {
        if (gdl__js_skip(J) < 0) return -1;
        snprintf(J->err, sizeof J->err, "__metadata__ must be an object of string -> string");
        return -1;
    }
    if (++J->depth > GDL__JSON_MAX_DEPTH) return gdl__js_fail(J, "nesting too deep");
    J->i++;
    if (gdl__js_peek(J) == '}') {
        J->i++;
        J->depth--;
        return 0;
    }
    for (;;) {
        char *key, *val;
        size_t klen;
        if (gdl__js_peek(J) != '"') return gdl__js_fail(J, "expected a string key");
        if (gdl__js_string(J) < 0) return -1;
        klen = J->slen;
        if (strlen(J->str) != klen) {
            snprintf(J->err, sizeof J->err, "__metadata__ key contains a NUL character");
            return -1;
        }
        key = gdl__strdup_n(J->str, klen);
        if (!key) {
            snprintf(J->err, sizeof J->err, "out of memory parsing the header");
            return -1;
        }
        if (gdl__js_peek(J) != ':') {
            GPUDL_FREE(key);
            return gdl__js_fail(J, "expected ':'");
        }
        J->i++;
        if (gdl__js_peek(J) != '"') {
            int rc = gdl__js_skip(J);
            if (rc == 0)
                snprintf(J->err, sizeof J->err, "__metadata__[\"%.100s\"] must be a string", key);
            GPUDL_FREE(key);
            return -1;
        }
        if (gdl__js_string(J) < 0 || strlen(J->str) != J->slen) {
            if (!J->err[0]) snprintf(J->err, sizeof J->err, "__metadata__[\"%.100s\"] contains a NUL character", key);
            GPUDL_FREE(key);
            return -1;
        }
        val = gdl__strdup_n(J->str, J->slen);
        if (!val) {
            GPUDL_FREE(key);
            snprintf(J->err, sizeof J->err, "out of memory parsing the header");
            return -1;
        }
        if (b->nm == b->mcap) {
            int nc = b->mcap ? b->mcap * 2 : 8;
            char **nk = (char **)GPUDL_REALLOC(b->mk, (size_t)nc * sizeof(char *)), **nv;
            if (nk) b->mk = nk;
            nv = nk ? (char **)GPUDL_REALLOC(b->mv, (size_t)nc * sizeof(char *)) : NULL;
            if (nv) b->mv = nv;
            if (!nk || !nv) {
                GPUDL_FREE(key);
                GPUDL_FREE(val);
                snprintf(J->err, sizeof J->err, "out of memory parsing the header");
                return -1;
            }
            b->mcap = nc;
        }
        b->mk[b->nm] = key;
        b->mv[b->nm] = val;
        b->nm++;
        c = gdl__js_peek(J);
        if (c == ',') { J->i++; continue; }
        if (c == '}') { J->i++; break; }
        return gdl__js_fail(J, "expected ',' or '}'");
    }
    J->depth--;
    return 0;
}

static int gdl__cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first duplicate among n strings, or NULL (allocation failure: *oom = 1). */
static const char *gdl__find_dup(const char *const *strs, int n, int *oom) {
    const char **s;
    const char *dup = NULL;
    int k;
    *oom = 0;
    if (n < 2) return NULL;
    s = (const char **)GPUDL_MALLOC((size_t)n * sizeof *s);
    if (!s) {
        *oom = 1;
        return NULL;
    }
    memcpy(s, strs, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, gdl__cmp_str_ptr);
    for (k = 1; k < n && !dup; k++)
        if (strcmp(s[k - 1], s[k]) == 0) dup = s[k];
    GPUDL_FREE(s);
    return dup;
}

static int gdl__cmp_entry_off(const void *a, const void *b) {
    const gdl_st_entry *x = (const gdl_st_entry *)a, *y = (const gdl_st_entry *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The file's first 8 bytes: the header's length (*N), checked against the limit and the file, and the header
   valid UTF-8. */
static int gdl__st_prefix(const char *fn, const char *what, const unsigned char *buf, uint64_t len, uint64_t *N) {
    size_t bad;
    int k;
    if (!buf && len) {
        gdl__set_error("%s: %s: buffer is NULL", fn, what);
        return -1;
    }
    if (len < 8) {
        gdl__set_error("%s: %s: file is %llu bytes, too short for the 8-byte header length", fn, what,
                       (unsigned long long)len);
        return -1;
    }
    *N = 0;
    for (k = 7; k >= 0; k--) *N = (*N << 8) | buf[k];
    if (*N > GDL__ST_MAX_HEADER) {
        gdl__set_error("%s: %s: header length %llu exceeds the limit of 100000000 bytes", fn, what,
                       (unsigned long long)*N);
        return -1;
    }
    if (*N > len - 8) {
        gdl__set_error("%s: %s: header length %llu runs past the end of the file (%llu bytes)", fn, what,
                       (unsigned long long)*N, (unsigned long long)len);
        return -1;
    }
    bad = gdl__utf8_check(buf + 8, (size_t)*N);
    if (bad != (size_t)*N) {
        gdl__set_error("%s: %s: header is not valid UTF-8 (bad byte 0x%02X at header byte %zu)", fn, what,
                       buf[8 + bad], bad);
        return -1;
    }
    return 0;
}

/* The header's JSON object: __metadata__ and the tensors' entries into b. -1: J->err says why. */
static int gdl__st_parse_top(gdl__json *J, gdl__st_build *b) {
    int c = gdl__js_peek(J), seen_meta = 0;
    if (c != '{') {
        if (c == -1) snprintf(J->err, sizeof J->err, "header is empty");
        else if (gdl__js_skip(J) == 0) snprintf(J->err, sizeof J->err, "header's top level is not a JSON object");
        return -1;
    }
    J->i++;
    J->depth = 1;
    if (gdl__js_peek(J) == '}') J->i++;
    else
        for (;;) {
            if (gdl__js_peek(J) != '"') return gdl__js_fail(J, "expected a string key");
            if (gdl__js_string(J) < 0) return -1;
            if (gdl__js_peek(J) != ':') return gdl__js_fail(J, "expected ':'");
            J->i++;
            if (J->slen == 12 && strcmp(J->str, "__metadata__") == 0) {
                if (seen_meta++) {
                    snprintf(J->err, sizeof J->err, "duplicate \"__metadata__\"");
                    return -1;
                }
                if (gdl__st_meta_parse(J, b) < 0) return -1;
            } else {
                gdl_st_entry *e;
                if (J->slen >= GDL_ST_NAME_MAX) {
                    snprintf(J->err, sizeof J->err, "tensor name '%.60s...' is %zu bytes, longer than %d", J->str,
                             J->slen, GDL_ST_NAME_MAX - 1);
                    return -1;
                }
                if (strlen(J->str) != J->slen) {
                    snprintf(J->err, sizeof J->err, "tensor name '%s' contains a NUL character", J->str);
                    return -1;
                }
                if (b->n == b->cap) {
                    int nc = b->cap ? b->cap * 2 : 16;
                    gdl_st_entry *ne = (gdl_st_entry *)GPUDL_REALLOC(b->e, (size_t)nc * sizeof *ne);
                    if (!ne) {
                        snprintf(J->err, sizeof J->err, "out of memory parsing the header");
                        return -1;
                    }
                    b->e = ne;
                    b->cap = nc;
                }
                e = &b->e[b->n++];
                memset(e, 0, sizeof *e);
                memcpy(e->name, J->str, J->slen + 1);
                if (gdl__st_entry_parse(J, e) < 0) return -1;
            }
            c = gdl__js_peek(J);
            if (c == ',') { J->i++; continue; }
            if (c == '}') { J->i++; break; }
            return gdl__js_fail(J, "expected ',' or '}'");
        }
    if (gdl__js_peek(J) != -1) return gdl__js_fail(J, "trailing characters after the JSON object");
    return 0;
}

/* No tensor name and no __metadata__ key twice. -1: J->err says why. */
static int gdl__st_check_dups(gdl__json *J, const gdl__st_build *b) {
    const char **names;
    const char *dup;
    int k, oom = 0;
    if (b->n > 1) {
        names = (const char **)GPUDL_MALLOC((size_t)b->n * sizeof *names);
        if (!names) {
            snprintf(J->err, sizeof J->err, "out of memory");
            return -1;
        }
        for (k = 0; k < b->n; k++) names[k] = b->e[k].name;
        dup = gdl__find_dup(names, b->n, &oom);
        GPUDL_FREE(names);
        if (dup || oom) {
            snprintf(J->err, sizeof J->err, oom ? "out of memory" : "duplicate tensor name '%s'", dup);
            return -1;
        }
    }
    if (b->nm > 1) {
        dup = gdl__find_dup((const char *const *)b->mk, b->nm, &oom);
        if (dup || oom) {
            snprintf(J->err, sizeof J->err, oom ? "out of memory" : "duplicate __metadata__ key '%.100s'", dup);
            return -1;
        }
    }
    return 0;
}

/* The tensors must tile [0, data_len) exactly: no tensor past the end, no hole, no overlap, nothing after. */
static int gdl__st_check_tiling(const char *fn, const char *what, const gdl__st_build *b, uint64_t data_len) {
    gdl_st_entry *sorted = NULL;
    uint64_t pos = 0;
    int k, rc = 0;
    for (k = 0; k < b->n; k++)
        if (b->e[k].end > data_len) {
            gdl__set_error("%s: %s: truncated: tensor '%s' data_offsets [%llu, %llu] go past the end of the "
                           "%llu-byte data buffer", fn, what, b->e[k].name, (unsigned long long)b->e[k].begin,
                           (unsigned long long)b->e[k].end, (unsigned long long)data_len);
            return -1;
        }
    if (b->n > 0) {
        sorted = (gdl_st_entry *)GPUDL_MALLOC((size_t)b->n * sizeof *sorted);
        if (!sorted) {
            gdl__set_error("%s: %s: header: %s", fn, what, "out of memory");
            return -1;
        }
        memcpy(sorted, b->e, (size_t)b->n * sizeof *sorted);
        qsort(sorted, (size_t)b->n, sizeof *sorted, gdl__cmp_entry_off);
        for (k = 0; k < b->n && rc == 0; k++) {
            if (sorted[k].begin > pos) {
                gdl__set_error("%s: %s: hole in the data buffer: bytes [%llu, %llu) belong to no tensor (next is "
                               "'%s')", fn, what, (unsigned long long)pos, (unsigned long long)sorted[k].begin,
                               sorted[k].name);
                rc = -1;
            } else if (sorted[k].begin < pos) {
                gdl__set_error("%s: %s: tensor '%s' data_offsets [%llu, %llu] overlap '%s', which ends at %llu", fn,
                               what, sorted[k].name, (unsigned long long)sorted[k].begin,
                               (unsigned long long)sorted[k].end, sorted[k - 1].name, (unsigned long long)pos);
                rc = -1;
            } else {
                pos = sorted[k].end;
            }
        }
        GPUDL_FREE(sorted);
    }
    if (rc == 0 && pos != data_len) {
        gdl__set_error("%s: %s: %llu trailing bytes after the last tensor (data buffer %llu bytes, tensors end "
                       "at %llu)", fn, what, (unsigned long long)(data_len - pos), (unsigned long long)data_len,
                       (unsigned long long)pos);
        rc = -1;
    }
    return rc;
}

static int gdl__st_parse_impl(const char *fn, const char *what, const unsigned char *buf, uint64_t len,
                              gdl_st_file *out) {
    gdl__json J;
    gdl__st_build b;
    uint64_t N, data_len;

    memset(&J, 0, sizeof J);
    memset(&b, 0, sizeof b);
    if (gdl__st_prefix(fn, what, buf, len, &N) < 0) return -1;
    data_len = len - 8 - N;
    J.s = buf + 8;
    J.n = (size_t)N;
    if (gdl__st_parse_top(&J, &b) < 0 || gdl__st_check_dups(&J, &b) < 0) {
        gdl__set_error("%s: %s: header: %s", fn, what, J.err[0] ? J.err : "invalid");
        goto fail;
    }
    if (gdl__st_check_tiling(fn, what, &b, data_len) < 0) goto fail;
    GPUDL_FREE(J.str);
    memset(out, 0, sizeof *out);
    out->n = b.n;
    out->entries = b.e;
    out->n_meta = b.nm;
    out->meta_keys = b.mk;
    out->meta_vals = b.mv;
    out->data = buf + 8 + N;
    out->data_len = data_len;
    return 0;
fail:
    GPUDL_FREE(J.str);
    gdl__st_build_free(&b);
    return -1;
}

GPUDL_API int gdl_st_parse(const unsigned char *buf, uint64_t len, gdl_st_file *out, const char *what) {
    if (!out) {
        gdl__set_error("gdl_st_parse: out is NULL");
        return -1;
    }
    return gdl__st_parse_impl("gdl_st_parse", what ? what : "(buffer)", buf, len, out);
}

GPUDL_API int gdl_st_read(const char *path, gdl_st_file *out) {
    unsigned char *buf;
    size_t len;
    gdl_st_file f;
    if (!out) {
        gdl__set_error("gdl_st_read: out is NULL");
        return -1;
    }
    if (gdl__read_file("gdl_st_read", path, &buf, &len) < 0) return -1;
    if (gdl__st_parse_impl("gdl_st_read", path, buf, (uint64_t)len, &f) < 0) {
        GPUDL_FREE(buf);
        return -1;
    }
    f.owned = buf;
    *out = f;
    return 0;
}

GPUDL_API void gdl_st_free(gdl_st_file *f) {
    int k;
    if (!f) return;
    for (k = 0; k < f->n_meta; k++) {
        GPUDL_FREE(f->meta_keys[k]);
        GPUDL_FREE(f->meta_vals[k]);
    }
    GPUDL_FREE(f->meta_keys);
    GPUDL_FREE(f->meta_vals);
    GPUDL_FREE(f->entries);
    GPUDL_FREE(f->owned);
    memset(f, 0, sizeof *f);
}

GPUDL_API const gdl_st_entry *gdl_st_find(const gdl_st_file *f, const char *name) {
    int k;
    if (!f || !name) return NULL;
    for (k = 0; k < f->n; k++)
        if (strcmp(f->entries[k].name, name) == 0) return &f->entries[k];
    return NULL;
}

/* ---- safetensors writer ----------------------------------------------------- */

typedef struct gdl__sb {
    char *p;
    size_t len, cap;
    int oom;
} gdl__sb;

static void gdl__sb_put(gdl__sb *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        char *np;
        while (nc < b->len + n + 1) nc *= 2;
        np = (char *)GPUDL_REALLOC(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void gdl__sb_puts(gdl__sb *b, const char *s) { gdl__sb_put(b, s, strlen(s)); }

static void gdl__sb_u64(gdl__sb *b, unsigned long long v) {
    char t[32];
    snprintf(t, sizeof t, "%llu", v);
    gdl__sb_puts(b, t);
}

/* A JSON string literal; s must be valid UTF-8. */
static void gdl__sb_json_str(gdl__sb *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    gdl__sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        switch (c) {
        case '"': gdl__sb_put(b, "\\\"", 2); break;
        case '\\': gdl__sb_put(b, "\\\\", 2); break;
        case '\b': gdl__sb_put(b, "\\b", 2); break;
        case '\f': gdl__sb_put(b, "\\f", 2); break;
        case '\n': gdl__sb_put(b, "\\n", 2); break;
        case '\r': gdl__sb_put(b, "\\r", 2); break;
        case '\t': gdl__sb_put(b, "\\t", 2); break;
        default:
            if (c < 0x20) {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                gdl__sb_put(b, esc, 6);
            } else
                gdl__sb_put(b, (const char *)&c, 1);
        }
    }
    gdl__sb_put(b, "\"", 1);
}

/* A save killed mid-write leaves path.tmp.<pid>.<n> behind. Before writing,
   remove those whose process is gone, so that killed saves do not pile up.
   Only names of exactly that form are touched; this process's own are left
   alone, and so are those of live processes: gdl__os_pid_gone says whether
   the pid lives here, and since a pid from another PID namespace or host (a
   shared volume) means nothing here, a temporary is removed only if its
   write lock can also be taken (a writer holds one while it writes; the
   kernel drops it when the writer dies). A pid reused since keeps its file:
   harmless, only not removed. */
static void gdl__st_remove_stale_temporaries(const char *path) {
    char dirname[4096], full[4352];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t bl = strlen(base);
    gdl__dir d;
    const char *e;
    if (slash) {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dirname) return;
        memcpy(dirname, path, n);
        dirname[n] = 0;
        if (n == 0) strcpy(dirname, "/");
    } else {
        strcpy(dirname, ".");
    }
    if (gdl__dir_open(&d, dirname) < 0) return;
    while ((e = gdl__dir_next(&d)) != NULL) {
        const char *rest;
        char *end;
        long pid;
        if (strncmp(e, base, bl) != 0 || strncmp(e + bl, ".tmp.", 5) != 0) continue;
        rest = e + bl + 5;
        pid = strtol(rest, &end, 10);
        if (end == rest || *end != '.' || pid <= 0 || pid > 0x7fffffffL || pid == gdl__os_pid()) continue;
        rest = end + 1; /* the counter: digits to the end of the name */
        if (*rest < '0' || *rest > '9' || rest[strspn(rest, "0123456789")] != 0) continue;
        if (!gdl__os_pid_gone(pid)) continue;
        snprintf(full, sizeof full, "%s/%s", dirname, e);
        gdl__os_remove_if_unlocked(full);
    }
    gdl__dir_close(&d);
}

/* gdl_st_write's tensors checked before anything is written: names, dtypes, shapes, data; their byte sizes
   (sizes[k]) and names (names[k]). */
static int gdl__st_check_tensors(const char *fn, const char *path, int n, const gdl_st_tensor *tensors,
                                 uint64_t *sizes, const char **names) {
    uint64_t off = 0;
    const char *dup;
    int k, d, oom = 0;
    for (k = 0; k < n; k++) {
        const gdl_st_tensor *t = &tensors[k];
        size_t es, nl;
        if (!t->name) {
            gdl__set_error("%s: %s: tensor %d has no name", fn, path, k);
            return -1;
        }
        nl = strlen(t->name);
        if (nl >= GDL_ST_NAME_MAX || gdl__utf8_check((const unsigned char *)t->name, nl) != nl ||
            strcmp(t->name, "__metadata__") == 0) {
            gdl__set_error("%s: %s: tensor %d: name '%.60s' must be valid UTF-8, shorter than %d bytes and not "
                           "__metadata__", fn, path, k, t->name, GDL_ST_NAME_MAX);
            return -1;
        }
        es = gdl_st_dtype_size(t->dtype);
        if (!es) {
            gdl__set_error("%s: %s: tensor '%s': unknown dtype \"%s\"", fn, path, t->name,
                           t->dtype ? t->dtype : "(null)");
            return -1;
        }
        if (t->ndim < 0 || t->ndim > GDL_ST_MAX_DIMS || (t->ndim > 0 && !t->shape)) {
            gdl__set_error("%s: %s: tensor '%s': ndim %d must be 0..%d (with a shape)", fn, path, t->name, t->ndim,
                           GDL_ST_MAX_DIMS);
            return -1;
        }
        for (d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0) {
                gdl__set_error("%s: %s: tensor '%s': shape[%d] = %lld is negative", fn, path, t->name, d,
                               (long long)t->shape[d]);
                return -1;
            }
        if (gdl__st_nbytes(es, t->ndim, t->shape, &sizes[k]) < 0 || sizes[k] > UINT64_MAX - off) {
            gdl__set_error("%s: %s: tensor '%s': byte size overflows", fn, path, t->name);
            return -1;
        }
        if (sizes[k] > 0 && !t->data) {
            gdl__set_error("%s: %s: tensor '%s': data is NULL", fn, path, t->name);
            return -1;
        }
        off += sizes[k];
        names[k] = t->name;
    }
    dup = gdl__find_dup(names, n, &oom);
    if (dup || oom) {
        if (oom) gdl__set_error("%s: %s: out of memory", fn, path);
        else gdl__set_error("%s: %s: duplicate tensor name '%s'", fn, path, dup);
        return -1;
    }
    return 0;
}

/* gdl_st_write's metadata checked: keys and values valid UTF-8, no key twice. */
static int gdl__st_check_meta(const char *fn, const char *path, int n_meta, const char *const *meta_keys,
                              const char *const *meta_vals) {
    const char *dup;
    int k, oom = 0;
    for (k = 0; k < n_meta; k++) {
        const char *mk = meta_keys[k], *mv = meta_vals[k];
        if (!mk || !mv || gdl__utf8_check((const unsigned char *)mk, strlen(mk)) != strlen(mk) ||
            gdl__utf8_check((const unsigned char *)mv, strlen(mv)) != strlen(mv)) {
            gdl__set_error("%s: %s: metadata %d: key and value must be non-NULL valid UTF-8", fn, path, k);
            return -1;
        }
    }
    dup = gdl__find_dup(meta_keys, n_meta, &oom);
    if (dup || oom) {
        if (oom) gdl__set_error("%s: %s: out of memory", fn, path);
        else gdl__set_error("%s: %s: duplicate metadata key '%s'", fn, path, dup);
        return -1;
    }
    return 0;
}

/* The JSON header into h (h->oom on failure), padded with spaces to a multiple of 8 bytes. */
static void gdl__st_header(gdl__sb *h, int n, const gdl_st_tensor *tensors, const uint64_t *sizes, int n_meta,
                           const char *const *meta_keys, const char *const *meta_vals) {
    uint64_t off = 0;
    int k, d;
    gdl__sb_put(h, "{", 1);
    if (n_meta > 0) {
        gdl__sb_puts(h, "\"__metadata__\":{");
        for (k = 0; k < n_meta; k++) {
            if (k) gdl__sb_put(h, ",", 1);
            gdl__sb_json_str(h, meta_keys[k]);
            gdl__sb_put(h, ":", 1);
            gdl__sb_json_str(h, meta_vals[k]);
        }
        gdl__sb_put(h, "}", 1);
    }
    for (k = 0; k < n; k++) {
        const gdl_st_tensor *t = &tensors[k];
        if (k || n_meta > 0) gdl__sb_put(h, ",", 1);
        gdl__sb_json_str(h, t->name);
        gdl__sb_puts(h, ":{\"dtype\":");
        gdl__sb_json_str(h, t->dtype);
        gdl__sb_puts(h, ",\"shape\":[");
        for (d = 0; d < t->ndim; d++) {
            if (d) gdl__sb_put(h, ",", 1);
            gdl__sb_u64(h, (unsigned long long)t->shape[d]);
        }
        gdl__sb_puts(h, "],\"data_offsets\":[");
        gdl__sb_u64(h, (unsigned long long)off);
        gdl__sb_put(h, ",", 1);
        gdl__sb_u64(h, (unsigned long long)(off + sizes[k]));
        gdl__sb_puts(h, "]}");
        off += sizes[k];
    }
    gdl__sb_put(h, "}", 1);
    while (!h->oom && h->len % 8 != 0) gdl__sb_put(h, " ", 1);
}

/* The tensors' bytes to f, little-endian; -1 (errno set) when a write fails. */
static int gdl__st_write_data(FILE *f, int n, const gdl_st_tensor *tensors, const uint64_t *sizes) {
    int k;
    for (k = 0; k < n; k++) {
        const unsigned char *src = (const unsigned char *)tensors[k].data;
        size_t es = gdl_st_dtype_size(tensors[k].dtype), left = (size_t)sizes[k];
        if (!left) continue;
        if (es == 1 || gdl__host_is_le() || strcmp(tensors[k].dtype, "C64") == 0) {
            if (fwrite(src, 1, left, f) != left) return -1;
            /* C64 on a big-endian host would need per-component swaps: written as is */
        } else {
            unsigned char chunk[4096];
            while (left > 0) {
                size_t m = left < sizeof chunk ? left : sizeof chunk;
                memcpy(chunk, src, m);
                gdl__bswap(chunk, es, m / es);
                if (fwrite(chunk, 1, m, f) != m) return -1;
                src += m;
                left -= m;
            }
        }
    }
    return 0;
}

GPUDL_API int gdl_st_write(const char *path, int n, const gdl_st_tensor *tensors, int n_meta,
                           const char *const *meta_keys, const char *const *meta_vals) {
    static const char fn[] = "gdl_st_write";
    static unsigned counter = 0;
    gdl__sb h;
    uint64_t *sizes = NULL;
    const char **names = NULL;
    char *tmp = NULL;
    FILE *f = NULL;
    int k;
    unsigned char lenb[8];

    memset(&h, 0, sizeof h);
    if (!path || n < 0 || (n > 0 && !tensors) || n_meta < 0 || (n_meta > 0 && (!meta_keys || !meta_vals))) {
        gdl__set_error("%s: %s: bad arguments (path, n=%d, tensors, n_meta=%d, meta arrays)", fn,
                       path ? path : "(null)", n, n_meta);
        return -1;
    }
    if (n > 0) {
        sizes = (uint64_t *)GPUDL_MALLOC((size_t)n * sizeof *sizes);
        names = (const char **)GPUDL_MALLOC((size_t)n * sizeof *names);
        if (!sizes || !names) {
            gdl__set_error("%s: %s: out of memory", fn, path);
            goto fail;
        }
    }
    /* validate everything before touching the file system */
    if (gdl__st_check_tensors(fn, path, n, tensors, sizes, names) < 0 ||
        gdl__st_check_meta(fn, path, n_meta, meta_keys, meta_vals) < 0)
        goto fail;

    /* the header */
    gdl__st_header(&h, n, tensors, sizes, n_meta, meta_keys, meta_vals);
    if (h.oom) {
        gdl__set_error("%s: %s: out of memory building the header", fn, path);
        goto fail;
    }
    if (h.len > GDL__ST_MAX_HEADER) {
        gdl__set_error("%s: %s: header is %zu bytes, over the 100000000-byte limit readers accept", fn, path, h.len);
        goto fail;
    }
    for (k = 0; k < 8; k++) lenb[k] = (unsigned char)((uint64_t)h.len >> (8 * k));

    /* write path.tmp.<pid>.<counter>, flush, fsync, rename over path */
    tmp = (char *)GPUDL_MALLOC(strlen(path) + 64);
    if (!tmp) {
        gdl__set_error("%s: %s: out of memory", fn, path);
        goto fail;
    }
    gdl__st_remove_stale_temporaries(path);
    snprintf(tmp, strlen(path) + 64, "%s.tmp.%ld.%u", path, gdl__os_pid(), ++counter);
    f = fopen(tmp, "wb");
    if (f) gdl__os_lock_temporary(f); /* held until the file is closed: see gdl__st_remove_stale_temporaries */
    if (!f) {
        gdl__set_error("%s: %s: cannot create temporary file %s: %s", fn, path, tmp, gdl__strerr(errno));
        GPUDL_FREE(tmp);
        tmp = NULL; /* nothing to remove */
        goto fail;
    }
    errno = 0;
    if (fwrite(lenb, 1, 8, f) != 8 || fwrite(h.p, 1, h.len, f) != h.len) goto io_fail;
    if (gdl__st_write_data(f, n, tensors, sizes) < 0) goto io_fail;
    if (fflush(f) != 0 || gdl__os_fsync(f) != 0) goto io_fail;
    {
        FILE *g = f;
        f = NULL;
        if (fclose(g) != 0) goto io_fail;
    }
    if (gdl__os_replace(tmp, path) != 0) {
        gdl__set_error("%s: %s: cannot rename %s over it: %s", fn, path, tmp, gdl__strerr(errno));
        goto fail;
    }
    GPUDL_FREE(tmp);
    GPUDL_FREE(h.p);
    GPUDL_FREE(sizes);
    GPUDL_FREE(names);
    return 0;
io_fail:
    gdl__set_error("%s: %s: writing temporary file %s failed: %s", fn, path, tmp, gdl__strerr(errno));
fail:
    if (f) fclose(f);
    if (tmp) {
        remove(tmp);
        GPUDL_FREE(tmp);
    }
    GPUDL_FREE(h.p);
    GPUDL_FREE(sizes);
    GPUDL_FREE(names);
    return -1;
}

/* ---------------------------------------------------------------------------
   [impl-data] datasets, transforms, the DataLoader and its worker threads.

   Loader design. A batch b of an epoch goes to slot b % nslots of a ring of
   host buffers. Slot states: FREE -> FILLING (a worker claimed it) -> READY
   -> HELD (handed out by gdl_loader_next) -> FREE (at the next call). The
   workers claim batches in order, fill them outside the lock, and may run up
   to nslots-1 batches ahead of the consumer. One mutex guards the states and
   the claim counter; cv_work wakes workers (a slot was freed, an epoch
   started, shutdown), cv_ready wakes the consumer (a batch is READY). The
   permutation and the epoch's transform key are written only while no batch
   can be claimed or filled, and published by the mutex. A batch's contents
   depend only on (seed, epoch, batch index), never on the worker.
   GPUDL_NO_THREADS: no threads; batches are always assembled inline.
   ------------------------------------------------------------------------- */

/* Prefixes the current error message with "fn: ". */
static void gdl__data_wrap_error(const char *fn) {
    char prev[1024];
    size_t k = strlen(gdl_last_error());
    if (k >= sizeof prev) k = sizeof prev - 1;
    memcpy(prev, gdl_last_error(), k);
    prev[k] = 0;
    gdl__set_error("%s: %s", fn, prev);
}

/* ---- datasets ------------------------------------------------------------ */

/* Validates the geometry and allocates the struct and the labels (and x when
   alloc_x). NULL + error. */
static gdl_dataset *gdl__ds_alloc(const char *fn, gdl_dtype dt, int ndim, const int64_t *shape, int64_t n,
                                  int num_classes, int alloc_x) {
    gdl_dataset *ds;
    int64_t numel = 1;
    int i;
    if (dt != GDL_U8 && dt != GDL_F32) {
        gdl__set_error("%s: sample dtype must be u8 or f32, got %s", fn, gdl_dtype_name(dt));
        return NULL;
    }
    if (ndim < 1 || ndim > GDL_MAX_DIMS - 1) {
        gdl__set_error("%s: sample ndim %d out of range [1,%d]", fn, ndim, GDL_MAX_DIMS - 1);
        return NULL;
    }
    if (!shape) {
        gdl__set_error("%s: sample_shape is NULL", fn);
        return NULL;
    }
    for (i = 0; i < ndim; i++) {
        if (shape[i] < 1) {
            gdl__set_error("%s: sample shape %s has a dimension < 1", fn, gdl__shape_fmt(ndim, shape));
            return NULL;
        }
        if (numel > ((int64_t)1 << 40) / shape[i]) {
            gdl__set_error("%s: sample shape %s is too large", fn, gdl__shape_fmt(ndim, shape));
            return NULL;
        }
        numel *= shape[i];
    }
    if (n < 1) {
        gdl__set_error("%s: %lld samples: a dataset needs at least one", fn, (long long)n);
        return NULL;
    }
    if (num_classes < 1) {
        gdl__set_error("%s: num_classes %d must be >= 1", fn, num_classes);
        return NULL;
    }
    if (n > ((int64_t)1 << 46) / numel ||
        (uint64_t)(n * numel) > (uint64_t)((size_t)-1) / 2 / gdl_dtype_size(dt)) {
        gdl__set_error("%s: %lld samples of %s %s are too large for this machine", fn, (long long)n,
                       gdl_dtype_name(dt), gdl__shape_fmt(ndim, shape));
        return NULL;
    }
    ds = (gdl_dataset *)GPUDL_MALLOC(sizeof(gdl_dataset));
    if (!ds) {
        gdl__set_error("%s: out of memory", fn);
        return NULL;
    }
    memset(ds, 0, sizeof *ds);
    ds->n = n;
    ds->ndim = ndim;
    memcpy(ds->shape, shape, sizeof(int64_t) * (size_t)ndim);
    ds->sample_numel = numel;
    ds->dtype = dt;
    ds->num_classes = num_classes;
    ds->labels = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)n);
    if (ds->labels && alloc_x) ds->x = GPUDL_MALLOC((size_t)(n * numel) * gdl_dtype_size(dt));
    if (!ds->labels || (alloc_x && !ds->x)) {
        gdl__set_error("%s: out of memory for %lld samples of %s %s", fn, (long long)n, gdl_dtype_name(dt),
                       gdl__shape_fmt(ndim, shape));
        GPUDL_FREE(ds->labels);
        GPUDL_FREE(ds->x);
        GPUDL_FREE(ds);
        return NULL;
    }
    return ds;
}

GPUDL_API void gdl_dataset_free(gdl_dataset *ds) {
    if (!ds) return;
    GPUDL_FREE(ds->x);
    GPUDL_FREE(ds->labels);
    GPUDL_FREE(ds);
}

GPUDL_API gdl_dataset *gdl_dataset_from_arrays(const void *x, gdl_dtype x_dtype, int ndim,
                                               const int64_t *sample_shape, const int32_t *labels,
                                               int64_t n, int num_classes) {
    static const char fn[] = "gdl_dataset_from_arrays";
    gdl_dataset *ds;
    int64_t i;
    if (!x || !labels) {
        gdl__set_error("%s: %s is NULL", fn, !x ? "x" : "labels");
        return NULL;
    }
    if (!(ds = gdl__ds_alloc(fn, x_dtype, ndim, sample_shape, n, num_classes, 1))) return NULL;
    for (i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= num_classes) {
            gdl__set_error("%s: label %ld at index %lld is out of range [0, %d)", fn, (long)labels[i],
                           (long long)i, num_classes);
            gdl_dataset_free(ds);
            return NULL;
        }
    memcpy(ds->labels, labels, sizeof(int32_t) * (size_t)n);
    memcpy(ds->x, x, (size_t)(n * ds->sample_numel) * gdl_dtype_size(x_dtype));
    return ds;
}

/* An (images, labels) IDX pair, errors prefixed with fn. expect_hw > 0
   requires expect_hw x expect_hw images. */
static gdl_dataset *gdl__ds_from_idx(const char *fn, const char *images_path, const char *labels_path,
                                     int num_classes, int expect_hw) {
    gdl_idx im, lb;
    gdl_dataset *ds;
    char what[600];
    int64_t shape[3], i;
    const uint8_t *src;
    if (!images_path || !labels_path) {
        gdl__set_error("%s: %s is NULL", fn, !images_path ? "images_path" : "labels_path");
        return NULL;
    }
    memset(&im, 0, sizeof im);
    memset(&lb, 0, sizeof lb);
    if (gdl_idx_load(images_path, &im) < 0) {
        gdl__data_wrap_error(fn);
        return NULL;
    }
    if (gdl_idx_load(labels_path, &lb) < 0) {
        gdl__data_wrap_error(fn);
        gdl_idx_free(&im);
        return NULL;
    }
    snprintf(what, sizeof what, "%.280s with %.280s", images_path, labels_path);
    if (gdl_idx_check_pair(&im, &lb, num_classes, what) < 0) {
        gdl__data_wrap_error(fn);
        goto fail;
    }
    if (expect_hw > 0 && (im.dims[1] != expect_hw || im.dims[2] != expect_hw)) {
        gdl__set_error("%s: %s: images are %lldx%lld, expected %dx%d", fn, images_path, (long long)im.dims[1],
                       (long long)im.dims[2], expect_hw, expect_hw);
        goto fail;
    }
    shape[0] = 1;
    shape[1] = im.dims[1];
    shape[2] = im.dims[2];
    if (!(ds = gdl__ds_alloc(fn, GDL_U8, 3, shape, im.dims[0], num_classes, 0))) goto fail;
    ds->x = im.data; /* the dataset takes the pixel buffer over */
    im.data = NULL;
    src = (const uint8_t *)lb.data;
    for (i = 0; i < ds->n; i++) ds->labels[i] = (int32_t)src[i];
    gdl_idx_free(&lb);
    return ds;
fail:
    gdl_idx_free(&im);
    gdl_idx_free(&lb);
    return NULL;
}

GPUDL_API gdl_dataset *gdl_dataset_from_idx_ex(const char *images_path, const char *labels_path,
                                               int num_classes) {
    return gdl__ds_from_idx("gdl_dataset_from_idx", images_path, labels_path, num_classes, 0);
}

GPUDL_API gdl_dataset *gdl_dataset_from_idx(const char *images_path, const char *labels_path) {
    return gdl__ds_from_idx("gdl_dataset_from_idx", images_path, labels_path, 10, 0);
}

GPUDL_API gdl_dataset *gdl_dataset_from_cifar10(const char *dir, int train) {
    static const char fn[] = "gdl_dataset_from_cifar10";
    static const int64_t shape[3] = {3, 32, 32};
    uint8_t *img = NULL, *lab = NULL;
    int64_t n = 0, i;
    gdl_dataset *ds;
    if (!dir) {
        gdl__set_error("%s: dir is NULL", fn);
        return NULL;
    }
    if (gdl_cifar10_load_dir(dir, train, &img, &lab, &n) < 0) {
        gdl__data_wrap_error(fn);
        return NULL;
    }
    if (!(ds = gdl__ds_alloc(fn, GDL_U8, 3, shape, n, 10, 0))) {
        GPUDL_FREE(img);
        GPUDL_FREE(lab);
        return NULL;
    }
    ds->x = img;
    for (i = 0; i < n; i++) ds->labels[i] = (int32_t)lab[i];
    GPUDL_FREE(lab);
    return ds;
}

/* Where gdl_dataset_fashion_mnist(NULL, ...) looks, in order. */
static const char *gdl__fmnist_dirs[2] = {"data", "/usr/share/datasets/fashion-mnist"};

static int gdl__file_readable(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fclose(f);
    return 1;
}

/* dir/base, else dir/base.gz, into buf: 1 if one is readable, 0 if not, -1 if the path is too long. */
static int gdl__find_data_file(const char *dir, const char *base, char *buf, size_t cap) {
    size_t dl = strlen(dir);
    const char *sep = (dl > 0 && dir[dl - 1] == '/') ? "" : "/";
    int k = snprintf(buf, cap, "%s%s%s.gz", dir, sep, base);
    if (k < 0 || (size_t)k >= cap) return -1;
    buf[k - 3] = 0; /* first without ".gz" */
    if (gdl__file_readable(buf)) return 1;
    buf[k - 3] = '.';
    return gdl__file_readable(buf);
}

GPUDL_API gdl_dataset *gdl_dataset_fashion_mnist(const char *dir_or_NULL, int train) {
    static const char fn[] = "gdl_dataset_fashion_mnist";
    static const char get[] =
        "get them with `make data` in gpudl's repository (installs Debian's dataset-fashion-mnist, or "
        "downloads and checks the four official files into ./data), or `apt-get install "
        "dataset-fashion-mnist`, or put train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
        "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz from the official Fashion-MNIST page "
        "(https://github.com/zalandoresearch/fashion-mnist) in one of those places";
    const char *split = train ? "train" : "t10k";
    const char *env = getenv("GPUDL_DATA");
    const char *dirs[2];
    char ibase[64], lbase[64], ipath[4096], lpath[4096], where[700];
    int nd, d;
    if (dir_or_NULL) {
        dirs[0] = dir_or_NULL;
        nd = 1;
    } else if (env && env[0]) {
        dirs[0] = env; /* an explicit choice: searching elsewhere too would hide a typo */
        nd = 1;
    } else {
        dirs[0] = gdl__fmnist_dirs[0];
        dirs[1] = gdl__fmnist_dirs[1];
        nd = 2;
    }
    snprintf(ibase, sizeof ibase, "%s-images-idx3-ubyte", split);
    snprintf(lbase, sizeof lbase, "%s-labels-idx1-ubyte", split);
    for (d = 0; d < nd; d++) {
        int hi = gdl__find_data_file(dirs[d], ibase, ipath, sizeof ipath);
        int hl = gdl__find_data_file(dirs[d], lbase, lpath, sizeof lpath);
        if (hi < 0 || hl < 0) {
            gdl__set_error("%s: directory name too long: %.200s...", fn, dirs[d]);
            return NULL;
        }
        if (hi && hl) {
            gdl_dataset *ds = gdl__ds_from_idx(fn, ipath, lpath, 10, 28);
            return ds;
        }
        if (hi || hl) {
            gdl__set_error("%s: %.300s has %s but not %s[.gz]: %s", fn, dirs[d], hi ? ipath : lpath,
                           hi ? lbase : ibase, get);
            return NULL;
        }
    }
    if (dir_or_NULL)
        snprintf(where, sizeof where, "%.300s (the directory given)", dir_or_NULL);
    else if (env && env[0])
        snprintf(where, sizeof where, "%.300s (from GPUDL_DATA)", env);
    else
        snprintf(where, sizeof where, "./%.200s or %.300s (set GPUDL_DATA=DIR to look elsewhere)",
                 gdl__fmnist_dirs[0], gdl__fmnist_dirs[1]);
    gdl__set_error("%s: Fashion-MNIST %s files (%s[.gz], %s[.gz]) not found in %s: %s", fn, split, ibase,
                   lbase, where, get);
    return NULL;
}

GPUDL_API gdl_dataset *gdl_dataset_subset(const gdl_dataset *ds, int64_t start, int64_t count) {
    static const char fn[] = "gdl_dataset_subset";
    gdl_dataset *s;
    size_t es;
    if (!ds) {
        gdl__set_error("%s: ds is NULL", fn);
        return NULL;
    }
    if (start < 0 || count < 1 || start > ds->n || count > ds->n - start) {
        gdl__set_error("%s: samples [%lld, %lld) out of range for a dataset of %lld (count must be >= 1)", fn,
                       (long long)start, (long long)start + (long long)count, (long long)ds->n);
        return NULL;
    }
    if (!(s = gdl__ds_alloc(fn, ds->dtype, ds->ndim, ds->shape, count, ds->num_classes, 1))) return NULL;
    es = gdl_dtype_size(ds->dtype);
    memcpy(s->x, (const char *)ds->x + (size_t)(start * ds->sample_numel) * es,
           (size_t)(count * ds->sample_numel) * es);
    memcpy(s->labels, ds->labels + start, sizeof(int32_t) * (size_t)count);
    return s;
}

/* ---- the loader ---------------------------------------------------------- */

enum { GDL__SLOT_FREE = 0, GDL__SLOT_FILLING, GDL__SLOT_READY, GDL__SLOT_HELD };

typedef struct gdl__slot {
    gdl_real *x;          /* host buffer: batch_size samples of out_numel */
    int32_t *y;           /* host buffer: batch_size labels */
    gdl_tensor *tx, *ty;  /* CPU device: the batch tensors, owning x and y */
    void *copied;         /* pinned: reached when the copy out of x and y is done */
    int state;            /* GDL__SLOT_*, under the mutex */
    int64_t batch;        /* the batch it holds or is filling */
} gdl__slot;

struct gdl_loader {
    gdl_dataset *ds;
    gdl_loader_opts o;
    int64_t n;                           /* samples per epoch: the dataset's, or this rank's shard's */
    int64_t B, nb;                       /* batch size, batches per epoch */
    int out_ndim;                        /* batch dims, with the batch dim */
    int64_t out_shape[GDL_MAX_DIMS];
    int64_t out_numel;                   /* elements of one transformed sample */
    /* the transform plan */
    int norm;                            /* 0, or the number of mean/std channels */
    int64_t norm_plane;                  /* fast path: elements per normalisation channel */
    int64_t planes_per_channel;          /* spatial path: H x W planes per channel */
    gdl_real mean[GDL_TRANSFORM_MAX_CHANNELS], stdv[GDL_TRANSFORM_MAX_CHANNELS];
    int spatial, crop, hflip;            /* crop and/or flip: the per-plane path */
    int64_t planes, H, W, OH, OW, pad;
    /* the epoch */
    int64_t *perm;                       /* shuffle: sample of position i; NULL: identity */
    uint64_t epoch, tkey;
    int running;                         /* an epoch is in progress */
    int64_t cons;                        /* the next batch to hand out */
    int64_t start_batch;                 /* where the next epoch starts (gdl_loader_set_position), else 0 */
    int held;                            /* the slot handed out last, -1 */
    int nslots;
    gdl__slot *slots;
    /* delivery to a GPU: pinned, batches alternate between two device buffers
       (batch b in buffer b & 1), so the copy of a batch overlaps the step
       before it; otherwise one buffer, copied on the compute stream */
    int pinned;
    const gdl_backend *be;
    gdl_tensor *dx[2], *dy[2];
    void *used[2];                       /* reached when the steps reading buffer k were done */
    int64_t delivered;                   /* batches delivered to the device, ever */
    void *stream;
    /* workers */
    int nthreads, started;
#ifndef GPUDL_NO_THREADS
    gdl__thread *threads;
    gdl__mutex mu;
    gdl__cond cv_work, cv_ready;
    int sync_init;                       /* mutex and conditions initialised */
    int active, shutdown;                /* under mu */
    int64_t next_claim;                  /* under mu */
#endif
};

GPUDL_API gdl_loader_opts gdl_loader_defaults(void) {
    gdl_loader_opts o;
    memset(&o, 0, sizeof o);
    o.batch_size = 1;
    o.shuffle = 0;
    o.drop_last = 0;
    o.num_workers = 0;
    o.prefetch = 2;
    o.seed = 0;
    o.pin_memory = 0;
    o.device = gdl_cpu();
    return o;
}

/* One sample, transformed, into out (out_numel elements). */
static void gdl__loader_sample(const gdl_loader *l, int64_t idx, gdl_real *out) {
    const gdl_dataset *ds = l->ds;
    const int64_t sn = ds->sample_numel;
    const uint8_t *xu = ds->dtype == GDL_U8 ? (const uint8_t *)ds->x + (size_t)(idx * sn) : NULL;
    const gdl_real *xf = ds->dtype == GDL_U8 ? NULL : (const gdl_real *)ds->x + (size_t)(idx * sn);
    const gdl_real k255 = (gdl_real)255;
    if (!l->spatial) {
        int64_t e;
        if (!l->norm) {
            if (xu)
                for (e = 0; e < sn; e++) out[e] = (gdl_real)xu[e] / k255;
            else
                memcpy(out, xf, sizeof(gdl_real) * (size_t)sn);
        } else {
            for (e = 0; e < sn; e++) {
                int c = l->norm == 1 ? 0 : (int)(e / l->norm_plane);
                gdl_real v = xu ? (gdl_real)xu[e] / k255 : xf[e];
                out[e] = (v - l->mean[c]) / l->stdv[c];
            }
        }
        return;
    } else {
        /* RandomCrop: top/left of the window in the padded image, shifted
           back by the padding; RandomHorizontalFlip mirrors the window. */
        uint64_t key = gdl_hash64(l->tkey, (uint64_t)idx);
        int64_t top = 0, left = 0, p, y, x;
        int flip = 0;
        if (l->crop) {
            top = (int64_t)(gdl_hash64(key, 0) % (uint64_t)(l->H + 2 * l->pad - l->OH + 1)) - l->pad;
            left = (int64_t)(gdl_hash64(key, 1) % (uint64_t)(l->W + 2 * l->pad - l->OW + 1)) - l->pad;
        }
        if (l->hflip) flip = (int)(gdl_hash64(key, 2) >> 63);
        for (p = 0; p < l->planes; p++) {
            int c = l->norm > 1 ? (int)(p / l->planes_per_channel) : 0;
            gdl_real m = l->norm ? l->mean[c] : (gdl_real)0, s = l->norm ? l->stdv[c] : (gdl_real)1;
            int64_t base = p * l->H * l->W;
            gdl_real *o = out + p * l->OH * l->OW;
            for (y = 0; y < l->OH; y++) {
                int64_t sy = y + top;
                for (x = 0; x < l->OW; x++) {
                    int64_t sx = (flip ? l->OW - 1 - x : x) + left;
                    gdl_real v;
                    if (sy < 0 || sy >= l->H || sx < 0 || sx >= l->W) {
                        v = 0; /* zero padding, placed after normalisation */
                    } else {
                        int64_t e = base + sy * l->W + sx;
                        v = xu ? (gdl_real)xu[e] / k255 : xf[e];
                        if (l->norm) v = (v - m) / s;
                    }
                    o[y * l->OW + x] = v;
                }
            }
        }
    }
}

static int64_t gdl__loader_bsz(const gdl_loader *l, int64_t b) {
    int64_t start = b * l->B, left = l->n - start;
    return left < l->B ? left : l->B;
}

/* The dataset index at position pos of this epoch. Sharded: position pos of
   rank r is position r + pos*W of the epoch's list padded to a multiple of W
   by repeating it from its start, which is the list's element (r + pos*W) mod N. */
static int64_t gdl__loader_index(const gdl_loader *l, int64_t pos) {
    if (l->o.num_replicas > 1) pos = (l->o.rank + pos * (int64_t)l->o.num_replicas) % l->ds->n;
    return l->perm ? l->perm[pos] : pos;
}

/* Batch b of the current epoch into slot s's host buffers. */
static void gdl__loader_fill(const gdl_loader *l, int64_t b, gdl__slot *s) {
    int64_t start = b * l->B, bsz = gdl__loader_bsz(l, b), k;
    for (k = 0; k < bsz; k++) {
        int64_t idx = gdl__loader_index(l, start + k);
        s->y[k] = l->ds->labels[idx];
        gdl__loader_sample(l, idx, s->x + (size_t)(k * l->out_numel));
    }
}

/* Key domains of the loader's random streams. */
#define GDL__PERM_DOMAIN 0x7065726d75746521ull /* "permute!" */
#define GDL__TF_DOMAIN 0x7472616e73666f72ull   /* "transfor" */

/* The permutation and transform key of l->epoch. Workers are idle. */
static void gdl__loader_begin_epoch(gdl_loader *l) {
    l->tkey = gdl_hash64(l->o.seed ^ GDL__TF_DOMAIN, l->epoch);
    if (l->perm) {
        uint64_t pkey = gdl_hash64(l->o.seed ^ GDL__PERM_DOMAIN, l->epoch);
        int64_t n = l->ds->n, i;
        for (i = 0; i < n; i++) l->perm[i] = i;
        for (i = n - 1; i > 0; i--) { /* Fisher-Yates */
            int64_t j = (int64_t)(gdl_hash64(pkey, (uint64_t)i) % (uint64_t)(i + 1)), t = l->perm[i];
            l->perm[i] = l->perm[j];
            l->perm[j] = t;
        }
    }
    l->cons = l->start_batch;
    l->start_batch = 0;
    l->held = -1;
    l->running = 1;
}

#ifndef GPUDL_NO_THREADS
static void *gdl__loader_worker(void *arg) {
    gdl_loader *l = (gdl_loader *)arg;
    gdl__mutex_lock(&l->mu);
    for (;;) {
        int64_t b;
        gdl__slot *s;
        while (!l->shutdown &&
               !(l->active && l->next_claim < l->nb &&
                 l->slots[l->next_claim % l->nslots].state == GDL__SLOT_FREE))
            gdl__cond_wait(&l->cv_work, &l->mu);
        if (l->shutdown) break;
        b = l->next_claim++;
        s = &l->slots[b % l->nslots];
        s->state = GDL__SLOT_FILLING;
        s->batch = b;
        gdl__mutex_unlock(&l->mu);
        gdl__loader_fill(l, b, s);
        gdl__mutex_lock(&l->mu);
        s->state = GDL__SLOT_READY;
        gdl__cond_broadcast(&l->cv_ready);
    }
    gdl__mutex_unlock(&l->mu);
    return NULL;
}
#endif

/* Abandons the epoch in progress: no new claims, waits for the batches being
   filled, frees every slot. */
static int gdl__loader_release(gdl_loader *l, gdl__slot *s);

static void gdl__loader_stop_epoch(gdl_loader *l) {
    int k;
    /* workers refill any slot next epoch: no copy may still read one (a
       failure here is the device's and shows at its next call) */
    for (k = 0; l->pinned && k < l->nslots; k++) (void)gdl__loader_release(l, &l->slots[k]);
#ifndef GPUDL_NO_THREADS
    if (l->started > 0) {
        int i, busy;
        gdl__mutex_lock(&l->mu);
        l->active = 0;
        do {
            busy = 0;
            for (i = 0; i < l->nslots; i++) busy |= l->slots[i].state == GDL__SLOT_FILLING;
            if (busy) gdl__cond_wait(&l->cv_ready, &l->mu);
        } while (busy);
        for (i = 0; i < l->nslots; i++) l->slots[i].state = GDL__SLOT_FREE;
        gdl__mutex_unlock(&l->mu);
    }
#endif
    l->running = 0;
    l->held = -1;
}

static void gdl__loader_destroy(gdl_loader *l) {
    int i;
    if (!l) return;
#ifndef GPUDL_NO_THREADS
    if (l->sync_init) {
        gdl__loader_stop_epoch(l);
        gdl__mutex_lock(&l->mu);
        l->shutdown = 1;
        gdl__cond_broadcast(&l->cv_work);
        gdl__mutex_unlock(&l->mu);
        for (i = 0; i < l->started; i++) gdl__thread_join(&l->threads[i]);
        gdl__cond_destroy(&l->cv_work);
        gdl__cond_destroy(&l->cv_ready);
        gdl__mutex_destroy(&l->mu);
    }
    GPUDL_FREE(l->threads);
#endif
    if (l->slots) {
        for (i = 0; i < l->nslots; i++) {
            gdl__slot *s = &l->slots[i];
            if (s->tx || s->ty) { /* CPU delivery: the tensors own the buffers */
                gdl_free(s->tx);
                gdl_free(s->ty);
            } else if (l->pinned) {
                /* no copy may still read them */
                if (s->copied && l->be->event_synchronize(s->copied) < 0) l->be->synchronize();
                if (s->copied) l->be->event_destroy(s->copied);
                if (s->x) l->be->host_free(s->x);
                if (s->y) l->be->host_free(s->y);
            } else {
                GPUDL_FREE(s->x);
                GPUDL_FREE(s->y);
            }
        }
        GPUDL_FREE(l->slots);
    }
    for (i = 0; i < 2; i++) {
        gdl_free(l->dx[i]);
        gdl_free(l->dy[i]);
        if (l->used[i]) l->be->event_destroy(l->used[i]);
    }
    if (l->stream) l->be->stream_destroy(l->stream);
    GPUDL_FREE(l->perm);
    GPUDL_FREE(l);
}

GPUDL_API void gdl_loader_free(gdl_loader *l) { gdl__loader_destroy(l); }

/* Validates the transform against the samples; fills the plan. 0 / -1. */
static int gdl__loader_plan(const char *fn, gdl_loader *l) {
    const gdl_dataset *ds = l->ds;
    const gdl_transform *t = &l->o.transform;
    const char *ss = gdl__shape_fmt(ds->ndim, ds->shape);
    int i;
    l->out_ndim = ds->ndim + 1;
    l->out_shape[0] = l->B < l->n ? l->B : l->n; /* no buffer holds more than an epoch */
    memcpy(l->out_shape + 1, ds->shape, sizeof(int64_t) * (size_t)ds->ndim);
    l->out_numel = ds->sample_numel;
    if (t->normalize) {
        if (t->normalize < 0 || t->normalize > GDL_TRANSFORM_MAX_CHANNELS ||
            (t->normalize != 1 && (ds->ndim < 2 || t->normalize != ds->shape[0]))) {
            if (ds->ndim >= 2)
                gdl__set_error("%s: transform.normalize has %d channels but the samples are %s (expected 1, or "
                               "%lld channels = dim 0, at most %d)", fn, t->normalize, ss, (long long)ds->shape[0],
                               GDL_TRANSFORM_MAX_CHANNELS);
            else
                gdl__set_error("%s: transform.normalize has %d channels but the samples are %s (expected 1)", fn,
                               t->normalize, ss);
            return -1;
        }
        for (i = 0; i < t->normalize; i++) {
            /* written so that NaN fails too */
            if (!(t->std[i] > 0 && t->std[i] < HUGE_VAL) || !(t->mean[i] > -HUGE_VAL && t->mean[i] < HUGE_VAL)) {
                gdl__set_error("%s: transform channel %d: mean %g, std %g (std must be finite and > 0, mean finite)",
                               fn, i, t->mean[i], t->std[i]);
                return -1;
            }
            l->mean[i] = (gdl_real)t->mean[i];
            l->stdv[i] = (gdl_real)t->std[i];
        }
        l->norm = t->normalize;
        l->norm_plane = ds->sample_numel / ds->shape[0];
    }
    if (t->crop_padding < 0 || t->crop_size < 0 || t->crop_padding > (1 << 20) || t->crop_size > (1 << 20)) {
        gdl__set_error("%s: transform crop_padding %d, crop_size %d: both must be in [0, 2^20]", fn,
                       t->crop_padding, t->crop_size);
        return -1;
    }
    l->crop = t->crop_padding > 0 || t->crop_size > 0;
    l->hflip = t->hflip != 0;
    l->spatial = l->crop || l->hflip;
    if (l->spatial) {
        if (ds->ndim < 2) {
            gdl__set_error("%s: random crop and flip need image samples [C,H,W] (or [H,W]), got %s", fn, ss);
            return -1;
        }
        l->H = ds->shape[ds->ndim - 2];
        l->W = ds->shape[ds->ndim - 1];
        l->planes = ds->sample_numel / (l->H * l->W);
        l->planes_per_channel = l->norm > 1 ? l->planes / ds->shape[0] : 1;
        l->pad = t->crop_padding;
        l->OH = t->crop_size ? t->crop_size : l->H;
        l->OW = t->crop_size ? t->crop_size : l->W;
        if (l->OH > l->H + 2 * l->pad || l->OW > l->W + 2 * l->pad) {
            gdl__set_error("%s: crop size %lldx%lld is larger than the padded image %lldx%lld (samples %s, "
                           "padding %d)", fn, (long long)l->OH, (long long)l->OW, (long long)(l->H + 2 * l->pad),
                           (long long)(l->W + 2 * l->pad), ss, t->crop_padding);
            return -1;
        }
        l->out_shape[l->out_ndim - 2] = l->OH;
        l->out_shape[l->out_ndim - 1] = l->OW;
        l->out_numel = l->planes * l->OH * l->OW;
    }
    if (l->out_numel > ((int64_t)1 << 46) / l->out_shape[0]) {
        gdl__set_error("%s: a batch of %lld samples of %s is too large", fn, (long long)l->out_shape[0], ss);
        return -1;
    }
    return 0;
}

/* gdl_loader_new's options checked. */
static int gdl__loader_check_opts(const char *fn, const gdl_dataset *ds, const gdl_loader_opts *o) {
    if (!ds) {
        gdl__set_error("%s: ds is NULL", fn);
        return -1;
    }
    if (o->batch_size < 1) {
        gdl__set_error("%s: batch_size must be >= 1, got %lld", fn, (long long)o->batch_size);
        return -1;
    }
    if (o->num_workers < 0 || o->num_workers > 256) {
        gdl__set_error("%s: num_workers must be in [0, 256], got %d", fn, o->num_workers);
        return -1;
    }
    if (o->prefetch < 0 || o->prefetch > 1024) {
        gdl__set_error("%s: prefetch must be in [0, 1024] (0: the default 2), got %d", fn, o->prefetch);
        return -1;
    }
    if (o->device.type != GDL_DEVICE_CPU && o->device.type != GDL_DEVICE_CUDA) {
        gdl__set_error("%s: invalid device type %d", fn, o->device.type);
        return -1;
    }
    if (o->num_replicas < 0 || (o->num_replicas > 1 && (o->rank < 0 || o->rank >= o->num_replicas)) ||
        (o->num_replicas <= 1 && o->rank != 0)) {
        gdl__set_error("%s: rank %d is not in [0, num_replicas %d)", fn, o->rank, o->num_replicas);
        return -1;
    }
    return 0;
}

/* A GPU loader's device batch buffers (two with pin_memory, with their events and copy stream). */
static int gdl__loader_device_buffers(const char *fn, gdl_loader *l) {
    int i;
    if (!(l->be = gdl__be(fn, l->o.device))) return -1;
    for (i = 0; i < (l->pinned ? 2 : 1); i++) {
        l->dx[i] = gdl_empty(l->out_ndim, l->out_shape, GDL_F32, l->o.device);
        l->dy[i] = l->dx[i] ? gdl_empty(1, l->out_shape, GDL_I32, l->o.device) : NULL;
        if (!l->dy[i] || (l->pinned && !(l->used[i] = l->be->event_create()))) {
            gdl__data_wrap_error(fn);
            return -1;
        }
    }
    /* the buffers' blocks may come from the cache with kernels still
       queued on them: the first copies wait for those too */
    if (l->pinned && (!(l->stream = l->be->stream_create()) || l->be->event_record(l->used[0], NULL) < 0 ||
                      l->be->event_record(l->used[1], NULL) < 0)) {
        gdl__data_wrap_error(fn);
        return -1;
    }
    return 0;
}

/* The slots' host batch buffers: CPU tensors (a CPU loader), pinned memory, or plain memory. */
static int gdl__loader_slots(const char *fn, gdl_loader *l) {
    int64_t bmax;
    size_t xbytes, ybytes;
    int i, is_cpu = l->o.device.type == GDL_DEVICE_CPU;
    l->slots = (gdl__slot *)GPUDL_MALLOC(sizeof(gdl__slot) * (size_t)l->nslots);
    if (!l->slots) {
        gdl__set_error("%s: out of memory", fn);
        return -1;
    }
    memset(l->slots, 0, sizeof(gdl__slot) * (size_t)l->nslots);
    bmax = l->out_shape[0];
    xbytes = sizeof(gdl_real) * (size_t)(bmax * l->out_numel), ybytes = sizeof(int32_t) * (size_t)bmax;
    for (i = 0; i < l->nslots; i++) {
        gdl__slot *s = &l->slots[i];
        if (is_cpu) {
            s->tx = gdl_empty(l->out_ndim, l->out_shape, GDL_F32, l->o.device);
            s->ty = s->tx ? gdl_empty(1, l->out_shape, GDL_I32, l->o.device) : NULL;
            if (!s->ty) {
                gdl__data_wrap_error(fn);
                return -1;
            }
            s->x = (gdl_real *)s->tx->data;
            s->y = (int32_t *)s->ty->data;
            continue;
        }
        if (l->pinned) {
            s->x = (gdl_real *)l->be->host_alloc(xbytes);
            s->y = s->x ? (int32_t *)l->be->host_alloc(ybytes) : NULL;
            if (!s->y || !(s->copied = l->be->event_create())) {
                gdl__data_wrap_error(fn);
                return -1;
            }
            continue;
        }
        s->x = (gdl_real *)GPUDL_MALLOC(xbytes);
        s->y = (int32_t *)GPUDL_MALLOC(ybytes);
        if (!s->x || !s->y) {
            gdl__set_error("%s: out of memory for %d host batch buffers of %s", fn, l->nslots,
                           gdl__shape_fmt(l->out_ndim, l->out_shape));
            return -1;
        }
    }
    return 0;
}

#ifndef GPUDL_NO_THREADS
/* The worker threads and what they share (l->sync_init once the mutex and conditions exist). */
static int gdl__loader_start_workers(const char *fn, gdl_loader *l) {
    int i;
    l->threads = (gdl__thread *)GPUDL_MALLOC(sizeof(gdl__thread) * (size_t)l->nthreads);
    if (!l->threads) {
        gdl__set_error("%s: out of memory", fn);
        return -1;
    }
    if (gdl__mutex_init(&l->mu) != 0) {
        gdl__set_error("%s: cannot make a mutex", fn);
        return -1;
    }
    if (gdl__cond_init(&l->cv_work) != 0) {
        gdl__mutex_destroy(&l->mu);
        gdl__set_error("%s: cannot make a condition variable", fn);
        return -1;
    }
    if (gdl__cond_init(&l->cv_ready) != 0) {
        gdl__cond_destroy(&l->cv_work);
        gdl__mutex_destroy(&l->mu);
        gdl__set_error("%s: cannot make a condition variable", fn);
        return -1;
    }
    l->sync_init = 1;
    for (i = 0; i < l->nthreads; i++) {
        int rc = gdl__thread_start(&l->threads[i], gdl__loader_worker, l);
        if (rc != 0) {
            gdl__set_error("%s: cannot start worker thread %d of %d: %s", fn, i + 1, l->nthreads, strerror(rc));
            return -1;
        }
        l->started++;
    }
    return 0;
}
#endif

GPUDL_API gdl_loader *gdl_loader_new(gdl_dataset *ds, const gdl_loader_opts *opts) {
    static const char fn[] = "gdl_loader_new";
    gdl_loader_opts o = opts ? *opts : gdl_loader_defaults();
    gdl_loader *l;
    int ahead;
    if (gdl__loader_check_opts(fn, ds, &o) < 0) return NULL;
    if (o.prefetch == 0) o.prefetch = 2;
    l = (gdl_loader *)GPUDL_MALLOC(sizeof(gdl_loader));
    if (!l) {
        gdl__set_error("%s: out of memory", fn);
        return NULL;
    }
    memset(l, 0, sizeof *l);
    l->ds = ds;
    l->o = o;
    l->B = o.batch_size;
    l->n = o.num_replicas > 1 ? (ds->n + o.num_replicas - 1) / o.num_replicas : ds->n;
    l->nb = o.drop_last ? l->n / l->B : (l->n + l->B - 1) / l->B;
    l->held = -1;
    if (gdl__loader_plan(fn, l) < 0) goto fail; /* out_shape[0]: min(B, N), the buffers' batch */
#ifdef GPUDL_NO_THREADS
    l->nthreads = 0;
#else
    l->nthreads = o.num_workers;
#endif
    ahead = o.prefetch > l->nthreads ? o.prefetch : l->nthreads;
    l->nslots = l->nthreads ? ahead + 1 : 1;
    l->pinned = o.pin_memory && o.device.type != GDL_DEVICE_CPU;
    /* the device first: an unusable one fails fast */
    if (o.device.type != GDL_DEVICE_CPU && gdl__loader_device_buffers(fn, l) < 0) goto fail;
    if (o.shuffle) {
        l->perm = (int64_t *)GPUDL_MALLOC(sizeof(int64_t) * (size_t)ds->n);
        if (!l->perm) {
            gdl__set_error("%s: out of memory for a permutation of %lld", fn, (long long)ds->n);
            goto fail;
        }
    }
    if (gdl__loader_slots(fn, l) < 0) goto fail;
#ifndef GPUDL_NO_THREADS
    if (l->nthreads > 0 && gdl__loader_start_workers(fn, l) < 0) goto fail;
#endif
    return l;
fail:
    gdl__loader_destroy(l);
    return NULL;
}

/* Hands slot s (batch of bsz samples) out on the loader's device. 0 / -1. */
/* Pinned delivery of batch b into buffer k = b & 1, with no host wait:
   mark on the compute stream that everything issued so far (all of batch
   b-1's step) is queued before buffer k^1 is reused; make the copy stream
   wait for the mark of buffer k (set when batch b-1 was delivered, so the
   copy overlaps batch b-1's step; for the first two batches, set when the
   loader was made, after any queued kernel on the buffers' cached blocks);
   copy; make the compute stream wait for the copy. The host buffers are reused only after their copy is done
   (gdl__loader_release). */
static int gdl__loader_copy_pinned(gdl_loader *l, gdl__slot *s, int k, size_t xb, size_t yb) {
    const gdl_backend *be = l->be;
    if (be->event_record(l->used[k ^ 1], NULL) < 0) return -1;
    if (be->stream_wait_event(l->stream, l->used[k]) < 0) return -1;
    if (be->copy_async(l->dx[k]->data, s->x, xb, 0, l->stream) < 0 ||
        be->copy_async(l->dy[k]->data, s->y, yb, 0, l->stream) < 0)
        return -1;
    if (be->event_record(s->copied, l->stream) < 0) return -1;
    return be->stream_wait_event(NULL, s->copied);
}

static int gdl__loader_deliver(gdl_loader *l, gdl__slot *s, int64_t bsz, gdl_tensor **x, gdl_tensor **y) {
    static const char fn[] = "gdl_loader_next";
    int k = l->pinned ? (int)(l->delivered & 1) : 0;
    gdl_tensor *tx = s->tx ? s->tx : l->dx[k], *ty = s->ty ? s->ty : l->dy[k];
    tx->shape[0] = bsz;
    tx->numel = bsz * l->out_numel;
    ty->shape[0] = bsz;
    ty->numel = bsz;
    if (!s->tx) {
        size_t xb = sizeof(gdl_real) * (size_t)tx->numel, yb = sizeof(int32_t) * (size_t)bsz;
        /* makes the device current; a plain copy runs on the compute stream,
           after the kernels that still read the buffer */
        if (!gdl__be(fn, l->o.device) ||
            (l->pinned ? gdl__loader_copy_pinned(l, s, k, xb, yb)
                       : l->be->copy(tx->data, s->x, xb, 0) < 0 || l->be->copy(ty->data, s->y, yb, 0)) < 0) {
            gdl__data_wrap_error(fn);
            return -1;
        }
        l->delivered++;
    }
    *x = tx;
    *y = ty;
    return 0;
}

/* A slot's host buffers may be refilled once the copy out of them is done:
   in a steady state it is, and asking costs no wait. */
static int gdl__loader_release(gdl_loader *l, gdl__slot *s) {
    if (!l->pinned) return 0;
    if (!gdl__be("gdl_loader_next", l->o.device) || l->be->event_synchronize(s->copied) < 0) { /* device current */
        gdl__data_wrap_error("gdl_loader_next");
        return -1;
    }
    return 0;
}

static int gdl__loader_next(gdl_loader *l, gdl_tensor **x, gdl_tensor **y);
GPUDL_API int gdl_loader_next(gdl_loader *l, gdl_tensor **x, gdl_tensor **y) {
    int span, rc;
    if (!l || !x || !y) {
        gdl__set_error("gdl_loader_next: %s is NULL", !l ? "l" : !x ? "x" : "y");
        return -1;
    }
    /* the profiler: all the consumer's time in here (waiting for a worker, handing the batch over) */
    span = gdl__prof_on ? gdl__prof_push("gdl_loader_next", gdl_cpu()) : 0; /* host time, on any device */
    rc = gdl__loader_next(l, x, y);
    gdl__prof_pop(span, rc >= 0);
    return rc;
}
static int gdl__loader_next(gdl_loader *l, gdl_tensor **x, gdl_tensor **y) {
    int64_t b;
    gdl__slot *s;
    *x = NULL;
    *y = NULL;
#ifndef GPUDL_NO_THREADS
    if (l->started > 0 && l->held >= 0) { /* the batch handed out last goes back to the workers */
        if (gdl__loader_release(l, &l->slots[l->held]) < 0) return -1;
        gdl__mutex_lock(&l->mu);
        l->slots[l->held].state = GDL__SLOT_FREE;
        gdl__cond_broadcast(&l->cv_work);
        gdl__mutex_unlock(&l->mu);
    }
#endif
    l->held = -1;
    if (!l->running) {
        gdl__loader_begin_epoch(l);
#ifndef GPUDL_NO_THREADS
        if (l->started > 0) {
            gdl__mutex_lock(&l->mu);
            l->next_claim = l->cons;
            l->active = 1;
            gdl__cond_broadcast(&l->cv_work);
            gdl__mutex_unlock(&l->mu);
        }
#endif
    }
    if (l->cons >= l->nb) { /* end of the epoch */
        gdl__loader_stop_epoch(l);
        l->epoch++;
        return 0;
    }
    b = l->cons++;
#ifndef GPUDL_NO_THREADS
    if (l->started > 0) {
        s = &l->slots[b % l->nslots];
        gdl__mutex_lock(&l->mu);
        while (!(s->state == GDL__SLOT_READY && s->batch == b)) gdl__cond_wait(&l->cv_ready, &l->mu);
        s->state = GDL__SLOT_HELD;
        gdl__mutex_unlock(&l->mu);
        l->held = (int)(b % l->nslots);
    } else
#endif
    {
        s = &l->slots[0];
        if (gdl__loader_release(l, s) < 0) return -1;
        gdl__loader_fill(l, b, s);
    }
    return gdl__loader_deliver(l, s, gdl__loader_bsz(l, b), x, y) < 0 ? -1 : 1;
}

GPUDL_API int64_t gdl_loader_num_batches(const gdl_loader *l) {
    if (!l) {
        gdl__set_error("gdl_loader_num_batches: l is NULL");
        return -1;
    }
    return l->nb;
}

GPUDL_API int gdl_loader_set_epoch(gdl_loader *l, uint64_t epoch) {
    if (!l) {
        gdl__set_error("gdl_loader_set_epoch: l is NULL");
        return -1;
    }
    if (l->running) gdl__loader_stop_epoch(l);
    l->epoch = epoch;
    l->start_batch = 0;
    return 0;
}

GPUDL_API uint64_t gdl_loader_epoch(const gdl_loader *l) { return l ? l->epoch : 0; }

GPUDL_API int gdl_loader_set_position(gdl_loader *l, uint64_t epoch, int64_t batch) {
    if (!l) {
        gdl__set_error("gdl_loader_set_position: l is NULL");
        return -1;
    }
    if (batch < 0 || batch > l->nb) {
        gdl__set_error("gdl_loader_set_position: batch %lld out of range [0, %lld]", (long long)batch,
                       (long long)l->nb);
        return -1;
    }
    if (l->running) gdl__loader_stop_epoch(l);
    l->epoch = epoch;
    l->start_batch = batch;
    return 0;
}

#undef GDL__PERM_DOMAIN
#undef GDL__TF_DOMAIN

/* ---------------------------------------------------------------------------
   [impl-nn]   Modules, optimizers, learning-rate schedulers. Front end only:
   modules call the ops of [api-ops]; optimizers call the backends'
   multi-tensor sgd_multi/adam_multi once per device and step.
   ------------------------------------------------------------------------- */

enum {
    GDL__M_LINEAR, GDL__M_CONV2D, GDL__M_BATCHNORM, GDL__M_LAYERNORM, GDL__M_DROPOUT, GDL__M_EMBEDDING,
    GDL__M_RELU, GDL__M_LEAKY_RELU, GDL__M_SIGMOID, GDL__M_TANH, GDL__M_GELU, GDL__M_IDENTITY,
    GDL__M_MAXPOOL, GDL__M_AVGPOOL, GDL__M_GAP, GDL__M_FLATTEN, GDL__M_SEQUENTIAL, GDL__M_RESIDUAL,
    GDL__M_CUSTOM
};

typedef struct gdl__nn_named {
    char *name;    /* local name, owned */
    gdl_tensor *t; /* persistent, owned */
} gdl__nn_named;

struct gdl_module {
    int kind;               /* GDL__M_* */
    char *kind_name;        /* "Linear", owned */
    char *name;             /* name in the parent, owned; "" for a root */
    gdl_module *parent;
    int training;
    int nchild, cap_child;
    gdl_module **child;
    int nparam, cap_param;
    gdl__nn_named *param;
    int nbuf, cap_buf;
    gdl__nn_named *buf;
    int64_t ia[12];         /* integer configuration (per kind, see the constructors) */
    double fa[4];           /* real configuration */
    gdl_forward_fn fwd;     /* custom modules */
    void *user;
    void (*free_user)(void *);
    char **interned;        /* full names handed out by gdl_module_named_tensors */
    int ninterned, cap_interned;
};

static char *gdl__nn_strdup(const char *s) {
    size_t n = strlen(s);
    char *r = (char *)GPUDL_MALLOC(n + 1);
    if (r) memcpy(r, s, n + 1);
    return r;
}

/* arr (of elem-sized items, *cap of them) grown to hold count+1: the same pointer when it
   already does, a reallocated one otherwise, NULL when out of memory (arr is then kept). */
static void *gdl__nn_reserve(void *arr, int *cap, int count, size_t elem) {
    void *p;
    int nc;
    if (arr && count < *cap) return arr;
    nc = *cap ? 2 * *cap : 4;
    while (nc <= count) nc *= 2;
    p = GPUDL_REALLOC(arr, elem * (size_t)nc);
    if (p) *cap = nc;
    return p;
}

/* The dotted path of m from its root ("3.body.0"; "" for a root), in a thread-local ring. */
static const char *gdl__nn_path(const gdl_module *m) {
    static GDL__TLS char ring[4][256];
    static GDL__TLS int slot;
    char *s = ring[slot++ & 3];
    const gdl_module *chain[64], *c;
    int n = 0;
    size_t k = 0;
    for (c = m; c && c->parent && n < 64; c = c->parent) chain[n++] = c;
    s[0] = 0;
    while (n-- > 0) {
        size_t len = strlen(chain[n]->name);
        if (k + len + 2 > 256) break; /* cut an absurdly deep path */
        if (k) s[k++] = '.';
        memcpy(s + k, chain[n]->name, len);
        k += len;
        s[k] = 0;
    }
    return s;
}

/* "Linear '3.body.0'" or "Linear" for a root, in a thread-local ring. */
static const char *gdl__nn_label(const gdl_module *m) {
    static GDL__TLS char ring[4][320];
    static GDL__TLS int slot;
    char *s = ring[slot++ & 3];
    const char *p = gdl__nn_path(m);
    if (p[0]) snprintf(s, 320, "%s '%s'", m->kind_name, p);
    else snprintf(s, 320, "%s", m->kind_name);
    return s;
}

/* PyTorch-like description of the configuration: "in_features=10, out_features=1, bias=True". */
static void gdl__nn_config(const gdl_module *m, char *s, size_t n) {
    const int64_t *a = m->ia;
    s[0] = 0;
    switch (m->kind) {
    case GDL__M_LINEAR:
        snprintf(s, n, "in_features=%lld, out_features=%lld, bias=%s", (long long)a[0], (long long)a[1],
                 m->nparam > 1 ? "True" : "False");
        break;
    case GDL__M_CONV2D:
        snprintf(s, n, "%lld, %lld, kernel_size=(%lld,%lld), stride=(%lld,%lld), padding=(%lld,%lld), "
                 "dilation=(%lld,%lld), groups=%lld", (long long)a[0], (long long)a[1], (long long)a[2],
                 (long long)a[3], (long long)a[4], (long long)a[5], (long long)a[6], (long long)a[7],
                 (long long)a[8], (long long)a[9], (long long)a[10]);
        break;
    case GDL__M_BATCHNORM:
        snprintf(s, n, "%lld, eps=%g, momentum=%g", (long long)a[0], m->fa[0], m->fa[1]);
        break;
    case GDL__M_LAYERNORM: snprintf(s, n, "(%lld,), eps=%g", (long long)a[0], m->fa[0]); break;
    case GDL__M_DROPOUT: snprintf(s, n, "p=%g", m->fa[0]); break;
    case GDL__M_EMBEDDING: snprintf(s, n, "%lld, %lld", (long long)a[0], (long long)a[1]); break;
    case GDL__M_LEAKY_RELU: snprintf(s, n, "negative_slope=%g", m->fa[0]); break;
    case GDL__M_MAXPOOL:
    case GDL__M_AVGPOOL:
        snprintf(s, n, "kernel_size=%lld, stride=%lld, padding=%lld", (long long)a[0], (long long)a[1], (long long)a[2]);
        break;
    case GDL__M_FLATTEN: snprintf(s, n, "start_dim=%lld", (long long)a[0]); break;
    default: break;
    }
}

static void gdl__nn_free_named(gdl__nn_named *v, int n) {
    int i;
    for (i = 0; i < n; i++) {
        gdl_free(v[i].t);
        GPUDL_FREE(v[i].name);
    }
    GPUDL_FREE(v);
}

static void gdl__nn_free_tree(gdl_module *m) {
    int i;
    if (!m) return;
    for (i = 0; i < m->nchild; i++) gdl__nn_free_tree(m->child[i]);
    GPUDL_FREE(m->child);
    gdl__nn_free_named(m->param, m->nparam);
    gdl__nn_free_named(m->buf, m->nbuf);
    for (i = 0; i < m->ninterned; i++) GPUDL_FREE(m->interned[i]);
    GPUDL_FREE(m->interned);
    if (m->free_user) m->free_user(m->user);
    GPUDL_FREE(m->kind_name);
    GPUDL_FREE(m->name);
    GPUDL_FREE(m);
}

GPUDL_API void gdl_module_free(gdl_module *m) {
    if (!m) return;
    if (m->parent) {
        gdl__set_error("gdl_module_free: %s belongs to a parent module; free the root instead", gdl__nn_label(m));
        return;
    }
    gdl__nn_free_tree(m);
}

/* Frees an argument whose ownership a failed call took (unless another module owns it). */
static void gdl__nn_drop(gdl_module *m) {
    if (m && !m->parent) gdl__nn_free_tree(m);
}

static gdl_module *gdl__nn_new(const char *op, int kind, const char *kind_name) {
    gdl_module *m = (gdl_module *)GPUDL_MALLOC(sizeof(gdl_module));
    if (!m) {
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->training = 1;
    m->kind_name = gdl__nn_strdup(kind_name);
    m->name = gdl__nn_strdup("");
    if (!m->kind_name || !m->name) {
        gdl__nn_free_tree(m);
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    return m;
}

/* Is `name` already used by a parameter, buffer or child of m? */
static int gdl__nn_name_taken(const gdl_module *m, const char *name) {
    int i;
    for (i = 0; i < m->nparam; i++)
        if (!strcmp(m->param[i].name, name)) return 1;
    for (i = 0; i < m->nbuf; i++)
        if (!strcmp(m->buf[i].name, name)) return 1;
    for (i = 0; i < m->nchild; i++)
        if (!strcmp(m->child[i]->name, name)) return 1;
    return 0;
}

static int gdl__nn_check_name(const char *op, const gdl_module *m, const char *name) {
    if (!name || !name[0] || strchr(name, '.')) {
        gdl__set_error("%s: bad name \"%s\" (must be non-empty, without '.')", op, name ? name : "(null)");
        return -1;
    }
    if (strlen(name) > 64) {
        gdl__set_error("%s: name \"%.64s...\" is longer than 64 characters", op, name);
        return -1;
    }
    if (gdl__nn_name_taken(m, name)) {
        gdl__set_error("%s: %s already has a member named \"%s\"", op, gdl__nn_label(m), name);
        return -1;
    }
    return 0;
}

/* Adds a tensor to a module's params (buffer = 0) or buffers; takes ownership of t. */
static int gdl__nn_add_tensor(const char *op, gdl_module *m, const char *name, gdl_tensor *t, int buffer) {
    gdl__nn_named *v;
    char *nm;
    if (!m || !t) {
        gdl__null_arg(op, !m ? "module" : "tensor");
        gdl_free(t);
        return -1;
    }
    if (gdl__nn_check_name(op, m, name) < 0) {
        gdl_free(t);
        return -1;
    }
    if (!gdl__own_storage(t) || t->node) {
        gdl__set_error("%s: \"%s\" %s must be a persistent leaf tensor (made by a factory or gdl_clone)", op, name,
                       gdl_shape_str(t));
        gdl_free(t);
        return -1;
    }
    if (!buffer && t->dtype != GDL_F32) {
        gdl__set_error("%s: parameter \"%s\" must be f32, got %s", op, name, gdl_dtype_name(t->dtype));
        gdl_free(t);
        return -1;
    }
    v = (gdl__nn_named *)(buffer ? gdl__nn_reserve(m->buf, &m->cap_buf, m->nbuf, sizeof(gdl__nn_named))
                                 : gdl__nn_reserve(m->param, &m->cap_param, m->nparam, sizeof(gdl__nn_named)));
    if (!v) {
        gdl__set_error("%s: out of memory", op);
        gdl_free(t);
        return -1;
    }
    if (buffer) m->buf = v;
    else m->param = v;
    if (!(nm = gdl__nn_strdup(name))) {
        gdl__set_error("%s: out of memory", op);
        gdl_free(t);
        return -1;
    }
    v = buffer ? &m->buf[m->nbuf++] : &m->param[m->nparam++];
    v->name = nm;
    v->t = t;
    t->name = nm;
    if (!buffer) t->requires_grad = 1;
    return 0;
}

GPUDL_API int gdl_module_add_param(gdl_module *m, const char *name, gdl_tensor *t) {
    return gdl__nn_add_tensor("gdl_module_add_param", m, name, t, 0);
}
GPUDL_API int gdl_module_add_buffer(gdl_module *m, const char *name, gdl_tensor *t) {
    return gdl__nn_add_tensor("gdl_module_add_buffer", m, name, t, 1);
}

static int gdl__nn_add_child(const char *op, gdl_module *m, const char *name, gdl_module *c) {
    gdl_module **kids;
    char *nm;
    if (!m || !c) {
        gdl__null_arg(op, !m ? "module" : "child");
        if (c != m) gdl__nn_drop(c);
        return -1;
    }
    if (c->parent) {
        gdl__set_error("%s: %s already belongs to another module", op, gdl__nn_label(c));
        return -1;
    }
    {
        const gdl_module *a;
        for (a = m; a; a = a->parent)
            if (a == c) {
                gdl__set_error("%s: a module cannot contain itself or one of its ancestors", op);
                return -1;
            }
    }
    if (gdl__nn_check_name(op, m, name) < 0) {
        gdl__nn_drop(c);
        return -1;
    }
    if ((kids = (gdl_module **)gdl__nn_reserve(m->child, &m->cap_child, m->nchild, sizeof(gdl_module *))) != NULL)
        m->child = kids;
    if (!kids || !(nm = gdl__nn_strdup(name))) {
        gdl__set_error("%s: out of memory", op);
        gdl__nn_drop(c);
        return -1;
    }
    GPUDL_FREE(c->name);
    c->name = nm;
    c->parent = m;
    m->child[m->nchild++] = c;
    return 0;
}

GPUDL_API int gdl_module_add_child(gdl_module *m, const char *name, gdl_module *child) {
    return gdl__nn_add_child("gdl_module_add_child", m, name, child);
}

GPUDL_API void *gdl_module_user(const gdl_module *m) { return m ? m->user : NULL; }

/* ---- layer constructors ---- */

/* U(-1/sqrt(fan_in), 1/sqrt(fan_in)) from the global generator, as PyTorch's reset_parameters. */
static gdl_tensor *gdl__nn_uniform_init(int ndim, const int64_t *shape, int64_t fan_in) {
    double bound = fan_in > 0 ? 1.0 / sqrt((double)fan_in) : 0;
    return gdl_uniform(ndim, shape, -bound, bound, gdl_cpu());
}

GPUDL_API gdl_module *gdl_nn_linear(int64_t in_features, int64_t out_features, int bias) {
    const char *op = "gdl_nn_linear";
    gdl_module *m;
    int64_t ws[2];
    if (in_features < 1 || out_features < 1) {
        gdl__set_error("%s: in_features %lld and out_features %lld must be positive", op, (long long)in_features,
                       (long long)out_features);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, GDL__M_LINEAR, "Linear"))) return NULL;
    m->ia[0] = in_features;
    m->ia[1] = out_features;
    ws[0] = out_features;
    ws[1] = in_features;
    if (gdl__nn_add_tensor(op, m, "weight", gdl__nn_uniform_init(2, ws, in_features), 0) < 0 ||
        (bias && gdl__nn_add_tensor(op, m, "bias", gdl__nn_uniform_init(1, ws, in_features), 0) < 0)) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

GPUDL_API gdl_module *gdl_nn_conv2d_ex(int in_channels, int out_channels, const int kernel[2], const int stride[2],
                                       const int padding[2], const int dilation[2], int groups, int bias) {
    const char *op = "gdl_nn_conv2d";
    gdl_module *m;
    int64_t ws[4], fan_in;
    int s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1}, k;
    if (!kernel) {
        gdl__null_arg(op, "kernel");
        return NULL;
    }
    for (k = 0; k < 2; k++) {
        if (stride) s[k] = stride[k];
        if (padding) p[k] = padding[k];
        if (dilation) d[k] = dilation[k];
    }
    if (in_channels < 1 || out_channels < 1 || groups < 1 || in_channels % groups || out_channels % groups) {
        gdl__set_error("%s: in_channels %d and out_channels %d must be positive and divisible by groups %d", op,
                       in_channels, out_channels, groups);
        return NULL;
    }
    if (kernel[0] < 1 || kernel[1] < 1 || s[0] < 1 || s[1] < 1 || p[0] < 0 || p[1] < 0 || d[0] < 1 || d[1] < 1) {
        gdl__set_error("%s: bad kernel (%d,%d), stride (%d,%d), padding (%d,%d) or dilation (%d,%d)", op, kernel[0],
                       kernel[1], s[0], s[1], p[0], p[1], d[0], d[1]);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, GDL__M_CONV2D, "Conv2d"))) return NULL;
    m->ia[0] = in_channels; m->ia[1] = out_channels;
    m->ia[2] = kernel[0]; m->ia[3] = kernel[1];
    m->ia[4] = s[0]; m->ia[5] = s[1];
    m->ia[6] = p[0]; m->ia[7] = p[1];
    m->ia[8] = d[0]; m->ia[9] = d[1];
    m->ia[10] = groups;
    ws[0] = out_channels;
    ws[1] = in_channels / groups;
    ws[2] = kernel[0];
    ws[3] = kernel[1];
    fan_in = ws[1] * ws[2] * ws[3];
    if (gdl__nn_add_tensor(op, m, "weight", gdl__nn_uniform_init(4, ws, fan_in), 0) < 0 ||
        (bias && gdl__nn_add_tensor(op, m, "bias", gdl__nn_uniform_init(1, ws, fan_in), 0) < 0)) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

GPUDL_API gdl_module *gdl_nn_conv2d(int in_channels, int out_channels, int kernel, int stride, int padding,
                                    int dilation, int groups, int bias) {
    int k[2], s[2], p[2], d[2];
    k[0] = k[1] = kernel;
    s[0] = s[1] = stride;
    p[0] = p[1] = padding;
    d[0] = d[1] = dilation;
    return gdl_nn_conv2d_ex(in_channels, out_channels, k, s, p, d, groups, bias);
}

GPUDL_API gdl_module *gdl_nn_batchnorm_ex(int spatial_dims, int64_t C, double eps, double momentum, int affine,
                                          int track_running_stats) {
    const char *op = spatial_dims == 1 ? "gdl_nn_batchnorm1d" : "gdl_nn_batchnorm2d";
    gdl_module *m;
    if (spatial_dims != 1 && spatial_dims != 2) {
        gdl__set_error("gdl_nn_batchnorm_ex: spatial_dims must be 1 or 2, got %d", spatial_dims);
        return NULL;
    }
    if (C < 1 || !(eps > 0) || !(momentum >= 0 && momentum <= 1)) {
        gdl__set_error("%s: bad num_features %lld, eps %g or momentum %g (need C > 0, eps > 0, momentum in [0,1])", op,
                       (long long)C, eps, momentum);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, GDL__M_BATCHNORM, spatial_dims == 1 ? "BatchNorm1d" : "BatchNorm2d"))) return NULL;
    m->ia[0] = C;
    m->ia[1] = spatial_dims;
    m->ia[2] = affine != 0;
    m->ia[3] = track_running_stats != 0;
    m->fa[0] = eps;
    m->fa[1] = momentum;
    if ((affine && (gdl__nn_add_tensor(op, m, "weight", gdl_ones(1, &C, GDL_F32, gdl_cpu()), 0) < 0 ||
                    gdl__nn_add_tensor(op, m, "bias", gdl_zeros(1, &C, GDL_F32, gdl_cpu()), 0) < 0)) ||
        (track_running_stats &&
         (gdl__nn_add_tensor(op, m, "running_mean", gdl_zeros(1, &C, GDL_F32, gdl_cpu()), 1) < 0 ||
          gdl__nn_add_tensor(op, m, "running_var", gdl_ones(1, &C, GDL_F32, gdl_cpu()), 1) < 0))) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}
GPUDL_API gdl_module *gdl_nn_batchnorm1d(int64_t C) { return gdl_nn_batchnorm_ex(1, C, 1e-5, 0.1, 1, 1); }
GPUDL_API gdl_module *gdl_nn_batchnorm2d(int64_t C) { return gdl_nn_batchnorm_ex(2, C, 1e-5, 0.1, 1, 1); }

GPUDL_API gdl_module *gdl_nn_layernorm(int64_t D) {
    const char *op = "gdl_nn_layernorm";
    gdl_module *m;
    if (D < 1) {
        gdl__set_error("%s: normalized_dim %lld must be positive", op, (long long)D);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, GDL__M_LAYERNORM, "LayerNorm"))) return NULL;
    m->ia[0] = D;
    m->fa[0] = 1e-5;
    if (gdl__nn_add_tensor(op, m, "weight", gdl_ones(1, &D, GDL_F32, gdl_cpu()), 0) < 0 ||
        gdl__nn_add_tensor(op, m, "bias", gdl_zeros(1, &D, GDL_F32, gdl_cpu()), 0) < 0) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

GPUDL_API gdl_module *gdl_nn_dropout(double p) {
    gdl_module *m;
    if (!(p >= 0 && p <= 1)) {
        gdl__set_error("gdl_nn_dropout: probability %g is not in [0,1]", p);
        return NULL;
    }
    if (!(m = gdl__nn_new("gdl_nn_dropout", GDL__M_DROPOUT, "Dropout"))) return NULL;
    m->fa[0] = p;
    return m;
}

GPUDL_API gdl_module *gdl_nn_embedding(int64_t V, int64_t D) {
    const char *op = "gdl_nn_embedding";
    gdl_module *m;
    int64_t ws[2];
    if (V < 1 || D < 1 || V > INT32_MAX) {
        gdl__set_error("%s: num_embeddings %lld (at most 2^31-1) and embedding_dim %lld must be positive", op,
                       (long long)V, (long long)D);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, GDL__M_EMBEDDING, "Embedding"))) return NULL;
    m->ia[0] = V;
    m->ia[1] = D;
    ws[0] = V;
    ws[1] = D;
    if (gdl__nn_add_tensor(op, m, "weight", gdl_randn(2, ws, gdl_cpu()), 0) < 0) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

static gdl_module *gdl__nn_simple(const char *op, int kind, const char *kind_name, double f, int64_t i) {
    gdl_module *m = gdl__nn_new(op, kind, kind_name);
    if (m) {
        m->fa[0] = f;
        m->ia[0] = i;
    }
    return m;
}
GPUDL_API gdl_module *gdl_nn_relu(void) { return gdl__nn_simple("gdl_nn_relu", GDL__M_RELU, "ReLU", 0, 0); }
GPUDL_API gdl_module *gdl_nn_leaky_relu(double slope) {
    return gdl__nn_simple("gdl_nn_leaky_relu", GDL__M_LEAKY_RELU, "LeakyReLU", slope, 0);
}
GPUDL_API gdl_module *gdl_nn_sigmoid(void) { return gdl__nn_simple("gdl_nn_sigmoid", GDL__M_SIGMOID, "Sigmoid", 0, 0); }
GPUDL_API gdl_module *gdl_nn_tanh(void) { return gdl__nn_simple("gdl_nn_tanh", GDL__M_TANH, "Tanh", 0, 0); }
GPUDL_API gdl_module *gdl_nn_gelu(int tanh_approx) {
    return gdl__nn_simple("gdl_nn_gelu", GDL__M_GELU, "GELU", 0, tanh_approx != 0);
}
GPUDL_API gdl_module *gdl_nn_identity(void) {
    return gdl__nn_simple("gdl_nn_identity", GDL__M_IDENTITY, "Identity", 0, 0);
}
GPUDL_API gdl_module *gdl_nn_global_avgpool2d(void) {
    return gdl__nn_simple("gdl_nn_global_avgpool2d", GDL__M_GAP, "GlobalAvgPool2d", 0, 0);
}
GPUDL_API gdl_module *gdl_nn_flatten(int start_dim) {
    return gdl__nn_simple("gdl_nn_flatten", GDL__M_FLATTEN, "Flatten", 0, start_dim);
}

static gdl_module *gdl__nn_pool(const char *op, int kind, const char *kind_name, int kernel, int stride, int padding) {
    gdl_module *m;
    if (kernel < 1 || stride < 0 || padding < 0 || padding > kernel / 2) {
        gdl__set_error("%s: bad kernel %d, stride %d or padding %d (kernel >= 1, stride >= 0 (0 = kernel), "
                       "0 <= padding <= kernel/2)", op, kernel, stride, padding);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, kind, kind_name))) return NULL;
    m->ia[0] = kernel;
    m->ia[1] = stride ? stride : kernel;
    m->ia[2] = padding;
    return m;
}
GPUDL_API gdl_module *gdl_nn_maxpool2d(int kernel, int stride, int padding) {
    return gdl__nn_pool("gdl_nn_maxpool2d", GDL__M_MAXPOOL, "MaxPool2d", kernel, stride, padding);
}
GPUDL_API gdl_module *gdl_nn_avgpool2d(int kernel, int stride, int padding) {
    return gdl__nn_pool("gdl_nn_avgpool2d", GDL__M_AVGPOOL, "AvgPool2d", kernel, stride, padding);
}

GPUDL_API gdl_module *gdl_nn_sequential(int n, gdl_module *const *mods) {
    const char *op = "gdl_nn_sequential";
    gdl_module *m = NULL;
    int i, bad = -1;
    char nm[24];
    if (n < 0 || (n > 0 && !mods)) {
        gdl__set_error("%s: bad module list (n %d, mods %s)", op, n, mods ? "given" : "NULL");
        return NULL;
    }
    for (i = 0; i < n && bad < 0; i++)
        if (!mods[i]) bad = i;
    if (bad >= 0) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        if (prev[0]) gdl__set_error("%s: module %d is NULL (after: %s)", op, bad, prev);
        else gdl__set_error("%s: module %d is NULL", op, bad);
    } else {
        m = gdl__nn_new(op, GDL__M_SEQUENTIAL, "Sequential");
    }
    if (!m) { /* ownership was passed: free the given modules */
        for (i = 0; i < n; i++) gdl__nn_drop(mods[i]);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        snprintf(nm, sizeof nm, "%d", i);
        if (gdl__nn_add_child(op, m, nm, mods[i]) < 0) {
            int j;
            for (j = i + 1; j < n; j++) gdl__nn_drop(mods[j]);
            gdl__nn_free_tree(m);
            return NULL;
        }
    }
    return m;
}

GPUDL_API int gdl_nn_sequential_add(gdl_module *seq, gdl_module *mod) {
    char nm[24];
    if (!seq || seq->kind != GDL__M_SEQUENTIAL) {
        if (seq) gdl__set_error("gdl_nn_sequential_add: %s is not a Sequential", gdl__nn_label(seq));
        else gdl__null_arg("gdl_nn_sequential_add", "seq");
        if (mod != seq) gdl__nn_drop(mod);
        return -1;
    }
    snprintf(nm, sizeof nm, "%d", seq->nchild);
    return gdl__nn_add_child("gdl_nn_sequential_add", seq, nm, mod);
}

GPUDL_API gdl_module *gdl_nn_residual(gdl_module *body, gdl_module *shortcut) {
    const char *op = "gdl_nn_residual";
    gdl_module *m;
    if (!body) {
        gdl__null_arg(op, "body");
        gdl__nn_drop(shortcut);
        return NULL;
    }
    if (body == shortcut) {
        gdl__set_error("%s: body and shortcut are the same module", op);
        gdl__nn_drop(body);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, GDL__M_RESIDUAL, "Residual"))) {
        gdl__nn_drop(body);
        gdl__nn_drop(shortcut);
        return NULL;
    }
    m->ia[0] = shortcut != NULL;
    if (gdl__nn_add_child(op, m, "body", body) < 0) {
        gdl__nn_drop(shortcut);
        gdl__nn_free_tree(m);
        return NULL;
    }
    if (shortcut && gdl__nn_add_child(op, m, "shortcut", shortcut) < 0) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

GPUDL_API gdl_module *gdl_nn_custom(const char *kind, gdl_forward_fn forward, void *user, void (*free_user)(void *)) {
    gdl_module *m;
    if (!kind || !kind[0] || !forward) {
        if (!forward) gdl__null_arg("gdl_nn_custom", "forward");
        else gdl__set_error("gdl_nn_custom: kind must be a non-empty string");
        if (free_user) free_user(user);
        return NULL;
    }
    if (!(m = gdl__nn_new("gdl_nn_custom", GDL__M_CUSTOM, kind))) {
        if (free_user) free_user(user);
        return NULL;
    }
    m->fwd = forward;
    m->user = user;
    m->free_user = free_user;
    return m;
}

/* ---- forward ---- */

/* gdl_module_summary's recorder: rows in pre-order; gdl_forward fills the output shapes. */
typedef struct gdl__nn_row {
    gdl_module *m;
    int depth;
    int ran;
    int ndim;
    int64_t shape[GDL_MAX_DIMS];
    int training;
} gdl__nn_row;
static gdl__nn_row *gdl__nn_rows;
static int gdl__nn_nrows;

/* Prefixes the current error with the module (once: nested modules keep the innermost). */
static void gdl__nn_fwd_error(const gdl_module *m) {
    char prev[sizeof gdl__err], cfg[200];
    if (!strncmp(gdl__err, "gdl_forward: ", 13)) return;
    memcpy(prev, gdl__err, sizeof prev);
    gdl__nn_config(m, cfg, sizeof cfg);
    gdl__set_error("gdl_forward: %s (%s): %s", gdl__nn_label(m), cfg, prev);
}

static gdl_tensor *gdl__nn_fwd_fail(const gdl_module *m, const char *want, const char *got) {
    char cfg[200];
    gdl__nn_config(m, cfg, sizeof cfg);
    gdl__set_error("gdl_forward: %s (%s): expected input %s, got %s", gdl__nn_label(m), cfg, want, got);
    return NULL;
}

static gdl_tensor *gdl__nn_param(const gdl_module *m, int i) { return i < m->nparam ? m->param[i].t : NULL; }
static gdl_tensor *gdl__nn_buffer(const gdl_module *m, int i) { return i < m->nbuf ? m->buf[i].t : NULL; }

/* Fusion of a Linear or Conv2d with the activation module after it in a
   Sequential (gdl_nn_set_fusion). It is skipped wherever the intermediate is
   looked at or the numerics would differ: anomaly mode (which checks each
   op's output), gdl_module_summary's recording (each module's output
   shape), autocast or a non-f32 input or parameter. */
static int gdl__nn_fuse = -1; /* -1: not read from GPUDL_NO_FUSION yet */
GPUDL_API int gdl_nn_set_fusion(int on) {
    int prev;
    if (gdl__nn_fuse < 0) {
        const char *e = getenv("GPUDL_NO_FUSION");
        gdl__nn_fuse = !(e && e[0] && strcmp(e, "0") != 0);
    }
    prev = gdl__nn_fuse;
    if (on >= 0) gdl__nn_fuse = on != 0;
    return prev;
}

/* the gdl_act to fuse a followed by b with (input x), or -1 */
static int gdl__nn_fusable(const gdl_module *a, const gdl_module *b, const gdl_tensor *x) {
    int act, k;
    if ((a->kind != GDL__M_LINEAR && a->kind != GDL__M_CONV2D) || gdl_nn_set_fusion(-1) == 0) return -1;
    if (b->kind == GDL__M_RELU) act = GDL_ACT_RELU;
    else if (b->kind == GDL__M_GELU && a->kind == GDL__M_LINEAR) act = b->ia[0] ? GDL_ACT_GELU_TANH : GDL_ACT_GELU;
    else return -1;
    if (gdl__anomaly || gdl__nn_nrows || gdl__ac_dt != GDL_F32 || !x || x->dtype != GDL_F32) return -1;
    for (k = 0; k < a->nparam; k++)
        if (a->param[k].t && a->param[k].t->dtype != GDL_F32) return -1;
    return act;
}

/* the Linear / Conv2d module m's forward with act fused in; input checks as gdl__nn_forward's */
/* A Linear's input [..., in_features] (conv: a Conv2d's [N, in_channels, H, W]) checked against module m:
   0, or -1 after the error; for a Conv2d its stride, padding and dilation. */
static int gdl__nn_check_xw(gdl_module *m, const gdl_tensor *x, int conv, int s[2], int p[2], int d[2]) {
    char want[96];
    const int64_t *a = m->ia;
    if (!conv ? x->ndim < 1 || x->shape[x->ndim - 1] != a[0] : x->ndim != 4 || x->shape[1] != a[0]) {
        if (!conv) snprintf(want, sizeof want, "[..., %lld]", (long long)a[0]);
        else snprintf(want, sizeof want, "[N, %lld, H, W]", (long long)a[0]);
        gdl__nn_fwd_fail(m, want, gdl_shape_str(x));
        return -1;
    }
    if (conv) {
        s[0] = (int)a[4]; s[1] = (int)a[5];
        p[0] = (int)a[6]; p[1] = (int)a[7];
        d[0] = (int)a[8]; d[1] = (int)a[9];
    }
    return 0;
}

static gdl_tensor *gdl__nn_forward_act(gdl_module *m, gdl_tensor *x, gdl_act act) {
    int s[2], p[2], d[2], conv = m->kind != GDL__M_LINEAR;
    if (gdl__nn_check_xw(m, x, conv, s, p, d) < 0) return NULL;
    if (!conv) return gdl_linear_act(x, gdl__nn_param(m, 0), gdl__nn_param(m, 1), act);
    return gdl__conv2d("gdl_conv2d_act", x, gdl__nn_param(m, 0), gdl__nn_param(m, 1), s, p, d, (int)m->ia[10],
                       gdl__act_code("gdl_conv2d_act", (int)act));
}

static gdl_tensor *gdl__nn_forward(gdl_module *m, gdl_tensor *x) {
    char want[96];
    const int64_t *a = m->ia;
    int i;
    switch (m->kind) {
    case GDL__M_LINEAR:
        if (gdl__nn_check_xw(m, x, 0, NULL, NULL, NULL) < 0) return NULL;
        return gdl_linear(x, gdl__nn_param(m, 0), gdl__nn_param(m, 1));
    case GDL__M_CONV2D: {
        int s[2], p[2], d[2];
        if (gdl__nn_check_xw(m, x, 1, s, p, d) < 0) return NULL;
        return gdl_conv2d_ex(x, gdl__nn_param(m, 0), gdl__nn_param(m, 1), s, p, d, (int)a[10]);
    }
    case GDL__M_BATCHNORM:
        if (a[1] == 1 ? (x->ndim != 2 && x->ndim != 3) || x->shape[1] != a[0] : x->ndim != 4 || x->shape[1] != a[0]) {
            if (a[1] == 1) snprintf(want, sizeof want, "[N, %lld] or [N, %lld, L]", (long long)a[0], (long long)a[0]);
            else snprintf(want, sizeof want, "[N, %lld, H, W]", (long long)a[0]);
            return gdl__nn_fwd_fail(m, want, gdl_shape_str(x));
        }
        return gdl_batch_norm(x, gdl__nn_buffer(m, 0), gdl__nn_buffer(m, 1), gdl__nn_param(m, 0), gdl__nn_param(m, 1),
                              m->training, m->fa[1], m->fa[0]);
    case GDL__M_LAYERNORM:
        if (x->ndim < 1 || x->shape[x->ndim - 1] != a[0]) {
            snprintf(want, sizeof want, "[..., %lld]", (long long)a[0]);
            return gdl__nn_fwd_fail(m, want, gdl_shape_str(x));
        }
        return gdl_layer_norm(x, gdl__nn_param(m, 0), gdl__nn_param(m, 1), m->fa[0]);
    case GDL__M_DROPOUT: return gdl_dropout(x, m->fa[0], m->training);
    case GDL__M_EMBEDDING:
        if (x->dtype != GDL_I32) {
            snprintf(want, sizeof want, "i32 indices in [0, %lld)", (long long)a[0]);
            return gdl__nn_fwd_fail(m, want, gdl_dtype_name(x->dtype));
        }
        return gdl_embedding(x, gdl__nn_param(m, 0));
    case GDL__M_RELU: return gdl_relu(x);
    case GDL__M_LEAKY_RELU: return gdl_leaky_relu(x, m->fa[0]);
    case GDL__M_SIGMOID: return gdl_sigmoid(x);
    case GDL__M_TANH: return gdl_tanh(x);
    case GDL__M_GELU: return gdl_gelu(x, (int)a[0]);
    case GDL__M_IDENTITY: return x;
    case GDL__M_MAXPOOL: return gdl_max_pool2d(x, (int)a[0], (int)a[1], (int)a[2]);
    case GDL__M_AVGPOOL: return gdl_avg_pool2d(x, (int)a[0], (int)a[1], (int)a[2]);
    case GDL__M_GAP: return gdl_global_avg_pool2d(x);
    case GDL__M_FLATTEN: return gdl_flatten(x, (int)a[0]);
    case GDL__M_SEQUENTIAL:
        for (i = 0; i < m->nchild && x; i++) {
            int act = i + 1 < m->nchild ? gdl__nn_fusable(m->child[i], m->child[i + 1], x) : -1;
            if (act >= 0) { /* Linear/Conv2d then its activation: one fused op (gdl_nn_set_fusion) */
                x = gdl__nn_forward_act(m->child[i], x, (gdl_act)act);
                if (!x) gdl__nn_fwd_error(m->child[i]);
                i++;
            } else {
                x = gdl_forward(m->child[i], x);
            }
        }
        return x;
    case GDL__M_RESIDUAL: {
        gdl_tensor *y = gdl_forward(m->child[0], x), *sc;
        if (!y) return NULL;
        sc = a[0] ? gdl_forward(m->child[1], x) : x;
        if (!sc) return NULL;
        if (!gdl_same_shape(y, sc)) {
            gdl__set_error("gdl_forward: %s: body output %s and shortcut output %s differ (%s)", gdl__nn_label(m),
                           gdl_shape_str(y), gdl_shape_str(sc), a[0] ? "check the shortcut's stride and channels"
                                                                      : "an identity shortcut needs the body to keep the shape");
            return NULL;
        }
        y = gdl_add(y, sc);
        return y ? gdl_relu(y) : NULL;
    }
    case GDL__M_CUSTOM: return m->fwd(m, x);
    default: gdl__set_error("gdl_forward: unknown module kind %d", m->kind); return NULL;
    }
}

GPUDL_API gdl_tensor *gdl_forward(gdl_module *m, gdl_tensor *x) {
    gdl_tensor *y;
    int i;
    if (!m) {
        gdl__null_arg("gdl_forward", "module");
        return NULL;
    }
    if (!x) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        if (prev[0]) gdl__set_error("gdl_forward: %s: input is NULL (after: %s)", gdl__nn_label(m), prev);
        else gdl__set_error("gdl_forward: %s: input is NULL", gdl__nn_label(m));
        return NULL;
    }
    y = gdl__nn_forward(m, x);
    if (!y) {
        gdl__nn_fwd_error(m);
        return NULL;
    }
    for (i = 0; i < gdl__nn_nrows; i++)
        if (gdl__nn_rows[i].m == m) {
            gdl__nn_rows[i].ran = 1;
            gdl__nn_rows[i].ndim = y->ndim;
            memcpy(gdl__nn_rows[i].shape, y->shape, sizeof y->shape);
        }
    return y;
}

/* ---- tree walks ---- */

GPUDL_API int gdl_module_train(gdl_module *m, int on) {
    int i;
    if (!m) {
        gdl__null_arg("gdl_module_train", "module");
        return -1;
    }
    m->training = on != 0;
    for (i = 0; i < m->nchild; i++) gdl_module_train(m->child[i], on);
    return 0;
}

GPUDL_API int gdl_module_is_training(const gdl_module *m) { return m ? m->training : 0; }

GPUDL_API int gdl_module_to(gdl_module *m, gdl_device dev) {
    int i;
    if (!m) {
        gdl__null_arg("gdl_module_to", "module");
        return -1;
    }
    if (!gdl__be("gdl_module_to", dev)) return -1;
    for (i = 0; i < m->nparam; i++)
        if (gdl_move_(m->param[i].t, dev) < 0) return -1;
    for (i = 0; i < m->nbuf; i++)
        if (gdl_move_(m->buf[i].t, dev) < 0) return -1;
    for (i = 0; i < m->nchild; i++)
        if (gdl_module_to(m->child[i], dev) < 0) return -1;
    return 0;
}

static const gdl_tensor *gdl__nn_first_tensor(const gdl_module *m) {
    int i;
    const gdl_tensor *t;
    if (m->nparam) return m->param[0].t;
    if (m->nbuf) return m->buf[0].t;
    for (i = 0; i < m->nchild; i++)
        if ((t = gdl__nn_first_tensor(m->child[i])) != NULL) return t;
    return NULL;
}

GPUDL_API gdl_device gdl_module_device(const gdl_module *m) {
    const gdl_tensor *t = m ? gdl__nn_first_tensor(m) : NULL;
    return t ? t->device : gdl_cpu();
}

GPUDL_API int gdl_module_zero_grad(gdl_module *m) {
    int i;
    if (!m) {
        gdl__null_arg("gdl_module_zero_grad", "module");
        return -1;
    }
    for (i = 0; i < m->nparam; i++)
        if (gdl_zero_grad_tensor(m->param[i].t) < 0) return -1;
    for (i = 0; i < m->nchild; i++)
        if (gdl_module_zero_grad(m->child[i]) < 0) return -1;
    return 0;
}

GPUDL_API int64_t gdl_module_num_params(const gdl_module *m) {
    int64_t n = 0;
    int i;
    if (!m) return -1;
    for (i = 0; i < m->nparam; i++) n += m->param[i].t->numel;
    for (i = 0; i < m->nchild; i++) n += gdl_module_num_params(m->child[i]);
    return n;
}

GPUDL_API int gdl_module_num_children(const gdl_module *m) { return m ? m->nchild : 0; }
GPUDL_API const char *gdl_module_kind(const gdl_module *m) { return m ? m->kind_name : ""; }
GPUDL_API const char *gdl_module_name(const gdl_module *m) { return m ? m->name : ""; }

GPUDL_API gdl_module *gdl_module_child_at(gdl_module *m, int i) {
    if (!m) {
        gdl__null_arg("gdl_module_child_at", "module");
        return NULL;
    }
    if (i < 0 || i >= m->nchild) {
        gdl__set_error("gdl_module_child_at: index %d out of range: %s has %d children", i, gdl__nn_label(m), m->nchild);
        return NULL;
    }
    return m->child[i];
}

/* Walks `path` (dotted) from m; *rest receives the last component when want_leaf (a tensor name). */
static gdl_module *gdl__nn_walk(const char *op, gdl_module *m, const char *path, int want_leaf, const char **rest) {
    const char *p = path;
    while (1) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        int i, found = -1;
        if (!dot && want_leaf) {
            *rest = p;
            return m;
        }
        for (i = 0; i < m->nchild && found < 0; i++)
            if (strlen(m->child[i]->name) == len && !strncmp(m->child[i]->name, p, len)) found = i;
        if (found < 0) {
            gdl__set_error("%s: no module \"%.*s\" in %s (looking up \"%s\")", op, (int)len, p,
                           m->parent ? gdl__nn_label(m) : m->kind_name, path);
            return NULL;
        }
        m = m->child[found];
        if (!dot) return m;
        p = dot + 1;
    }
}

GPUDL_API gdl_module *gdl_module_child(gdl_module *m, const char *path) {
    if (!m || !path) {
        gdl__null_arg("gdl_module_child", !m ? "module" : "path");
        return NULL;
    }
    return gdl__nn_walk("gdl_module_child", m, path, 0, NULL);
}

GPUDL_API gdl_tensor *gdl_module_tensor(gdl_module *m, const char *name) {
    const char *leaf = NULL;
    gdl_module *o;
    int i;
    if (!m || !name) {
        gdl__null_arg("gdl_module_tensor", !m ? "module" : "name");
        return NULL;
    }
    if (!(o = gdl__nn_walk("gdl_module_tensor", m, name, 1, &leaf))) return NULL;
    for (i = 0; i < o->nparam; i++)
        if (!strcmp(o->param[i].name, leaf)) return o->param[i].t;
    for (i = 0; i < o->nbuf; i++)
        if (!strcmp(o->buf[i].name, leaf)) return o->buf[i].t;
    gdl__set_error("gdl_module_tensor: no parameter or buffer \"%s\" in %s (looking up \"%s\")", leaf,
                   o->parent ? gdl__nn_label(o) : o->kind_name, name);
    return NULL;
}

/* Returns a copy of s owned by root, reusing an equal string (slot hint first). */
static const char *gdl__nn_intern(gdl_module *root, const char *s, int hint) {
    int i;
    char *c, **v;
    if (hint < root->ninterned && !strcmp(root->interned[hint], s)) return root->interned[hint];
    for (i = 0; i < root->ninterned; i++)
        if (!strcmp(root->interned[i], s)) return root->interned[i];
    v = (char **)gdl__nn_reserve(root->interned, &root->cap_interned, root->ninterned, sizeof(char *));
    if (!v) return NULL;
    root->interned = v;
    if (!(c = gdl__nn_strdup(s))) return NULL;
    root->interned[root->ninterned++] = c;
    return c;
}

typedef struct gdl__nn_lister {
    gdl_module *root;
    int which, max, count;
    const char **names;
    gdl_tensor **tensors;
    char path[512];
} gdl__nn_lister;

static int gdl__nn_emit(gdl__nn_lister *L, size_t plen, const gdl__nn_named *v) {
    if (L->count < L->max) {
        if (L->names) {
            const char *s;
            if (plen + strlen(v->name) + 1 > sizeof L->path) {
                gdl__set_error("gdl_module_named_tensors: name \"%s%s\" is too long", L->path, v->name);
                return -1;
            }
            strcpy(L->path + plen, v->name);
            if (!(s = gdl__nn_intern(L->root, L->path, L->count))) {
                gdl__set_error("gdl_module_named_tensors: out of memory");
                return -1;
            }
            L->path[plen] = 0;
            L->names[L->count] = s;
        }
        if (L->tensors) L->tensors[L->count] = v->t;
    }
    L->count++;
    return 0;
}

static int gdl__nn_list(gdl__nn_lister *L, const gdl_module *m, size_t plen) {
    int i;
    if (L->which & GDL_PARAMS)
        for (i = 0; i < m->nparam; i++)
            if (gdl__nn_emit(L, plen, &m->param[i]) < 0) return -1;
    if (L->which & GDL_BUFFERS)
        for (i = 0; i < m->nbuf; i++)
            if (gdl__nn_emit(L, plen, &m->buf[i]) < 0) return -1;
    for (i = 0; i < m->nchild; i++) {
        size_t n = strlen(m->child[i]->name);
        if (plen + n + 2 > sizeof L->path) {
            gdl__set_error("gdl_module_named_tensors: module path \"%s%s\" is too long", L->path, m->child[i]->name);
            return -1;
        }
        memcpy(L->path + plen, m->child[i]->name, n);
        L->path[plen + n] = '.';
        L->path[plen + n + 1] = 0;
        if (gdl__nn_list(L, m->child[i], plen + n + 1) < 0) return -1;
        L->path[plen] = 0;
    }
    return 0;
}

GPUDL_API int gdl_module_named_tensors(gdl_module *m, int which, const char **names, gdl_tensor **tensors, int max) {
    gdl__nn_lister L;
    if (!m) {
        gdl__null_arg("gdl_module_named_tensors", "module");
        return -1;
    }
    if (which < 1 || which > 3 || max < 0) {
        gdl__set_error("gdl_module_named_tensors: bad which %d (GDL_PARAMS, GDL_BUFFERS or both) or max %d", which, max);
        return -1;
    }
    memset(&L, 0, sizeof L);
    L.root = m;
    L.which = which;
    L.max = max;
    L.names = names;
    L.tensors = tensors;
    return gdl__nn_list(&L, m, 0) < 0 ? -1 : L.count;
}

/* ---- summary ---- */

static void gdl__nn_count_str(int64_t v, char *s, size_t n) {
    char tmp[32];
    int len, i, k = 0, lead;
    snprintf(tmp, sizeof tmp, "%lld", (long long)(v < 0 ? -v : v));
    len = (int)strlen(tmp);
    lead = len % 3 ? len % 3 : 3;
    if (v < 0 && (size_t)k + 1 < n) s[k++] = '-';
    for (i = 0; i < len && (size_t)k + 2 < n; i++) {
        if (i >= lead && (i - lead) % 3 == 0) s[k++] = ',';
        s[k++] = tmp[i];
    }
    s[k] = 0;
}

static int gdl__nn_add_rows(gdl_module *m, int depth, gdl__nn_row *rows, int *n) {
    int i;
    rows[*n].m = m;
    rows[*n].depth = depth;
    rows[*n].training = m->training;
    (*n)++;
    for (i = 0; i < m->nchild; i++) gdl__nn_add_rows(m->child[i], depth + 1, rows, n);
    return 0;
}

static int gdl__nn_count_modules(const gdl_module *m) {
    int i, n = 1;
    for (i = 0; i < m->nchild; i++) n += gdl__nn_count_modules(m->child[i]);
    return n;
}

/* (84_quant.h) a quantized module's parameter count (int8 weights, bias) and bytes; 0 for the others */
static int64_t gdl__quant_params(const gdl_module *m, int64_t *bytes);

static void gdl__nn_param_totals(const gdl_module *m, int64_t *total, int64_t *trainable, int64_t *buffers) {
    int i;
    *total += gdl__quant_params(m, NULL);
    for (i = 0; i < m->nparam; i++) {
        *total += m->param[i].t->numel;
        if (m->param[i].t->requires_grad) *trainable += m->param[i].t->numel;
    }
    for (i = 0; i < m->nbuf; i++) *buffers += m->buf[i].t->numel;
    for (i = 0; i < m->nchild; i++) gdl__nn_param_totals(m->child[i], total, trainable, buffers);
}

GPUDL_API int gdl_module_summary(gdl_module *m, int ndim, const int64_t *input_shape, FILE *f) {
    const char *op = "gdl_module_summary";
    gdl__nn_row *rows;
    gdl_tensor *x, *y;
    const gdl_module *first;
    int n = 0, i, prev_grad;
    int64_t total = 0, trainable = 0, buffers = 0;
    char line[80];
    if (!m || !f) {
        gdl__null_arg(op, !m ? "module" : "f");
        return -1;
    }
    if (m->parent) {
        gdl__set_error("%s: %s is a child module; summarise its root", op, gdl__nn_label(m));
        return -1;
    }
    if (gdl__nn_rows) {
        gdl__set_error("%s: called from inside a summary", op);
        return -1;
    }
    rows = (gdl__nn_row *)GPUDL_MALLOC(sizeof(gdl__nn_row) * (size_t)gdl__nn_count_modules(m));
    if (!rows) {
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    memset(rows, 0, sizeof(gdl__nn_row) * (size_t)gdl__nn_count_modules(m));
    gdl__nn_add_rows(m, 0, rows, &n);
    /* an Embedding as the first layer takes i32 indices */
    for (first = m; first->nchild; first = first->child[0]) {}
    x = gdl_zeros(ndim, input_shape, first->kind == GDL__M_EMBEDDING ? GDL_I32 : GDL_F32, gdl_module_device(m));
    if (!x) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        gdl__set_error("%s: cannot make the input: %s", op, prev);
        GPUDL_FREE(rows);
        return -1;
    }
    /* eval mode and no grad: no running-stat updates, no dropout draws, no tape */
    for (i = 0; i < n; i++) rows[i].m->training = 0;
    prev_grad = gdl_set_grad_enabled(0);
    gdl__nn_rows = rows;
    gdl__nn_nrows = n;
    y = gdl_forward(m, x);
    gdl__nn_rows = NULL;
    gdl__nn_nrows = 0;
    gdl_set_grad_enabled(prev_grad);
    for (i = 0; i < n; i++) rows[i].m->training = rows[i].training;
    gdl_free(x);
    if (!y) {
        GPUDL_FREE(rows);
        return -1;
    }
    memset(line, '=', 78);
    line[78] = 0;
    fprintf(f, "%-44s %-20s %12s\n%s\n", "Layer (type)", "Output Shape", "Param #", line);
    for (i = 0; i < n; i++) {
        const gdl_module *r = rows[i].m;
        char label[256], shape[64], params[32];
        int64_t own = 0;
        int k;
        for (k = 0; k < r->nparam; k++) own += r->param[k].t->numel;
        own += gdl__quant_params(r, NULL);
        if (i == 0) snprintf(label, sizeof label, "%s", r->kind_name);
        else snprintf(label, sizeof label, "%*s%s (%s)", 2 * rows[i].depth, "", gdl__nn_path(r), r->kind_name);
        if (rows[i].ran) snprintf(shape, sizeof shape, "%s", gdl__shape_fmt(rows[i].ndim, rows[i].shape));
        else snprintf(shape, sizeof shape, "--");
        if (r->nchild && !r->nparam) snprintf(params, sizeof params, "--");
        else gdl__nn_count_str(own, params, sizeof params);
        fprintf(f, "%-44s %-20s %12s\n", label, shape, params);
    }
    gdl__nn_param_totals(m, &total, &trainable, &buffers);
    fprintf(f, "%s\n", line);
    gdl__nn_count_str(total, line, sizeof line);
    fprintf(f, "Total params: %s\n", line);
    gdl__nn_count_str(trainable, line, sizeof line);
    fprintf(f, "Trainable params: %s\n", line);
    gdl__nn_count_str(total - trainable, line, sizeof line);
    fprintf(f, "Non-trainable params: %s\n", line);
    gdl__nn_count_str(buffers, line, sizeof line);
    fprintf(f, "Buffer elements: %s\n", line);
    gdl__nn_count_str(gdl_module_nbytes(m), line, sizeof line);
    fprintf(f, "Size: %s bytes (parameters and buffers as stored%s)\n", line,
            gdl_module_is_quantized(m) ? "; int8 weights, f32 scales, i32 zero points" : "");
    fprintf(f, "Input shape: %s on %s\n", gdl__shape_fmt(ndim, input_shape), gdl_device_str(gdl_module_device(m)));
    GPUDL_FREE(rows);
    return 0;
}

/* ---------------------------------------------------------------------------
   Optimizers
   ------------------------------------------------------------------------- */

enum { GDL__OPT_SGD, GDL__OPT_ADAM, GDL__OPT_ADAMW };

typedef struct gdl__opt_group {
    double lr, weight_decay;
    double momentum, dampening; /* SGD */
    double beta1, beta2, eps;   /* Adam */
    int nesterov;
    double initial_lr;          /* set by the first scheduler (PyTorch's group['initial_lr']); < 0 unset */
} gdl__opt_group;

typedef struct gdl__opt_param {
    gdl_tensor *p;
    int group;
    gdl_tensor *step;  /* i32 scalar on the CPU: this parameter's step count as of the last read back (the
                          count itself is in the flat block, where the kernels add to it) */
    gdl_tensor *s1;    /* SGD momentum_buffer, Adam exp_avg */
    gdl_tensor *s2;    /* Adam exp_avg_sq */
    char *names[3];
    int dev;           /* its flat block: index in the optimizer's devs */
    size_t off;        /* bytes from the start of each f32 region of that block to its slot */
    size_t off_lo;     /* ... of the parameter and gradient regions (off without master weights) */
    gdl_tensor *master; /* master weights: the f32 master (a view of its slot), NULL without */
    int32_t step_seen; /* the count gdl_optim_state read back into `step`: a different value was written */
} gdl__opt_param;

/* One device's flat block (llm.c's malloc_and_point_parameters), one
   allocation: the parameters, then their gradients, momentum buffers or
   exp_avg, exp_avg_sq (regions of `region` bytes, slots in parameter order,
   64-byte aligned), then each group's hyper-parameters, the GradScaler's
   skip flag (found_inf) and each parameter's step count (int32, indexed by
   parameter). One allocation means one memset
   for zero_grad, contiguous gradients (a bucketed all-reduce can take views
   of them), and one place the kernels read their scalars from. */
typedef struct gdl__opt_dev {
    gdl_device device;
    gdl__flat *flat;
    size_t region;             /* bytes of an f32 region */
    size_t region_lo;          /* bytes of the parameter and gradient regions: `region`, or with master weights
                                  half of it (slots of 2-byte elements) */
    gdl_dtype low;             /* master weights: the parameters' dtype (then an f32 region of masters follows
                                  the gradients); GDL_F32 without */
    int nregions;              /* 2: SGD without momentum, 3: SGD, 4: Adam (the masters not counted) */
    gdl_opt_hyper *hyper;      /* device: [ngroups] */
    gdl_real *skip;            /* device: GradScaler's found_inf for this optimizer (0: step; the kernels skip
                                  the step when it is set) */
    int32_t *steps;            /* device: [nsteps], by parameter index */
    int nsteps;
    gdl_opt_hyper *hyper_seen; /* host: what `hyper` holds (or will once the queued copies run) */
    void *table;               /* the backend's table of the last step ... */
    gdl_opt_tensor *tab;       /* ... and the entries it was made from */
    int ntab;
} gdl__opt_dev;

struct gdl_optimizer {
    int kind;
    gdl__opt_group defaults;
    int ngroups, cap_groups;
    gdl__opt_group *groups;
    int nparams, cap_params;
    gdl__opt_param *params;
    int64_t steps;
    int ndevs;
    gdl__opt_dev *devs;        /* the flat blocks, in the order their devices first appear */
    int layout_dirty;          /* parameters were added: make the blocks again */
    gdl_grad_scaler *scaler;   /* attached: its state goes into checkpoints (gdl_optim_set_grad_scaler) */
    gdl_dtype master;          /* gdl_optim_set_master_weights: the parameters' dtype (f32 masters kept in the
                                  blocks); GDL_F32: off */
    int steps_dirty;           /* 1: the blocks are new, every host step count goes up; 2: gdl_optim_state
                                  handed the step tensors out, those written since (a checkpoint load) go up
                                  (the others may be behind the blocks': replayed graphs step on the device) */
};

static const char *gdl__opt_kind_name(int kind) {
    return kind == GDL__OPT_SGD ? "SGD" : kind == GDL__OPT_ADAM ? "Adam" : "AdamW";
}

static gdl_optimizer *gdl__opt_new(const char *op, int kind, const gdl__opt_group *d) {
    gdl_optimizer *o = (gdl_optimizer *)GPUDL_MALLOC(sizeof(gdl_optimizer));
    if (!o) {
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->defaults = *d;
    return o;
}

GPUDL_API gdl_optimizer *gdl_sgd_new(double lr, double momentum, double dampening, double weight_decay, int nesterov) {
    gdl__opt_group d;
    if (!(lr >= 0) || lr == INFINITY) {
        gdl__set_error("gdl_sgd_new: invalid learning rate %g (must be >= 0)", lr);
        return NULL;
    }
    if (!(momentum >= 0) || momentum == INFINITY || !(weight_decay >= 0) || weight_decay == INFINITY ||
        dampening != dampening) {
        gdl__set_error("gdl_sgd_new: invalid momentum %g, weight_decay %g or dampening %g (momentum and weight_decay "
                       "must be >= 0)", momentum, weight_decay, dampening);
        return NULL;
    }
    if (nesterov && (momentum <= 0 || dampening != 0)) {
        gdl__set_error("gdl_sgd_new: nesterov momentum requires a momentum > 0 and zero dampening (got momentum %g, "
                       "dampening %g)", momentum, dampening);
        return NULL;
    }
    memset(&d, 0, sizeof d);
    d.lr = lr;
    d.momentum = momentum;
    d.dampening = dampening;
    d.weight_decay = weight_decay;
    d.nesterov = nesterov != 0;
    d.initial_lr = -1;
    return gdl__opt_new("gdl_sgd_new", GDL__OPT_SGD, &d);
}

static gdl_optimizer *gdl__adam_new(const char *op, int kind, double lr, double beta1, double beta2, double eps,
                                    double weight_decay) {
    gdl__opt_group d;
    if (!(lr >= 0) || lr == INFINITY) {
        gdl__set_error("%s: invalid learning rate %g (must be >= 0)", op, lr);
        return NULL;
    }
    if (!(eps >= 0)) {
        gdl__set_error("%s: invalid epsilon %g (must be >= 0)", op, eps);
        return NULL;
    }
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1)) {
        gdl__set_error("%s: invalid beta parameters (%g, %g) (each must be in [0,1))", op, beta1, beta2);
        return NULL;
    }
    if (!(weight_decay >= 0)) {
        gdl__set_error("%s: invalid weight_decay %g (must be >= 0)", op, weight_decay);
        return NULL;
    }
    memset(&d, 0, sizeof d);
    d.lr = lr;
    d.beta1 = beta1;
    d.beta2 = beta2;
    d.eps = eps;
    d.weight_decay = weight_decay;
    d.initial_lr = -1;
    return gdl__opt_new(op, kind, &d);
}

GPUDL_API gdl_optimizer *gdl_adam_new(double lr, double beta1, double beta2, double eps, double weight_decay) {
    return gdl__adam_new("gdl_adam_new", GDL__OPT_ADAM, lr, beta1, beta2, eps, weight_decay);
}
GPUDL_API gdl_optimizer *gdl_adamw_new(double lr, double beta1, double beta2, double eps, double weight_decay) {
    return gdl__adam_new("gdl_adamw_new", GDL__OPT_ADAMW, lr, beta1, beta2, eps, weight_decay);
}

static void gdl__opt_free_state(gdl__opt_param *pp) {
    int k;
    gdl_free(pp->step);
    gdl_free(pp->s1);
    gdl_free(pp->s2);
    for (k = 0; k < 3; k++) GPUDL_FREE(pp->names[k]);
}

/* Lets go of the flat blocks (the tensors viewing them keep them alive) and the tables. */
static void gdl__opt_release_devs(gdl_optimizer *opt) {
    int d;
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        const gdl_backend *be = dv->table ? gdl__be("gdl_optim", dv->device) : NULL;
        if (be) be->opt_table_free(dv->table);
        gdl__flat_unref(dv->flat);
        GPUDL_FREE(dv->hyper_seen);
        GPUDL_FREE(dv->tab);
    }
    GPUDL_FREE(opt->devs);
    opt->devs = NULL;
    opt->ndevs = 0;
}

static void gdl__scaler_forget(gdl_grad_scaler *s, gdl_optimizer *opt);
GPUDL_API void gdl_optim_free(gdl_optimizer *opt) {
    int i;
    if (!opt) return;
    if (opt->scaler) gdl__scaler_forget(opt->scaler, opt);
    gdl__opt_release_devs(opt);
    for (i = 0; i < opt->nparams; i++) {
        gdl__opt_free_state(&opt->params[i]);
        gdl_free(opt->params[i].master);
    }
    GPUDL_FREE(opt->params);
    GPUDL_FREE(opt->groups);
    GPUDL_FREE(opt);
}

GPUDL_API int gdl_optim_add_params(gdl_optimizer *opt, gdl_tensor *const *params, int n, double lr,
                                   double weight_decay) {
    const char *op = "gdl_optim_add_params";
    gdl__opt_group g, *gv;
    gdl__opt_param *pv;
    int i, j;
    if (!opt) {
        gdl__null_arg(op, "opt");
        return -1;
    }
    if (n < 0 || (n > 0 && !params)) {
        gdl__set_error("%s: bad parameter list (n %d, params %s)", op, n, params ? "given" : "NULL");
        return -1;
    }
    if (lr == INFINITY || lr != lr || weight_decay != weight_decay || weight_decay == INFINITY) {
        gdl__set_error("%s: invalid learning rate %g or weight_decay %g", op, lr, weight_decay);
        return -1;
    }
    for (i = 0; i < n; i++) {
        gdl_tensor *p = params[i];
        if (!p) {
            char what[32];
            snprintf(what, sizeof what, "params[%d]", i);
            gdl__null_arg(op, what);
            return -1;
        }
        if ((p->dtype != GDL_F32 && p->dtype != opt->master) || !gdl__is_persistent(p) || p->node) {
            gdl__set_error("%s: params[%d] %s %s must be a persistent f32 leaf tensor (a parameter)%s%s", op, i,
                           gdl_dtype_name(p->dtype), gdl_shape_str(p),
                           opt->master != GDL_F32 ? " or one of the master weights' dtype " : "",
                           opt->master != GDL_F32 ? gdl_dtype_name(opt->master) : "");
            return -1;
        }
        for (j = 0; j < opt->nparams; j++)
            if (opt->params[j].p == p) {
                gdl__set_error("%s: params[%d] %s is already in parameter group %d (a parameter may appear in "
                               "only one group)", op, i, gdl_shape_str(p), opt->params[j].group);
                return -1;
            }
        for (j = 0; j < i; j++)
            if (params[j] == p) {
                gdl__set_error("%s: params[%d] and params[%d] are the same tensor", op, j, i);
                return -1;
            }
    }
    if (!(gv = (gdl__opt_group *)gdl__nn_reserve(opt->groups, &opt->cap_groups, opt->ngroups, sizeof(gdl__opt_group)))) {
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    opt->groups = gv;
    if (n > 0) {
        if (!(pv = (gdl__opt_param *)gdl__nn_reserve(opt->params, &opt->cap_params, opt->nparams + n - 1,
                                                     sizeof(gdl__opt_param)))) {
            gdl__set_error("%s: out of memory", op);
            return -1;
        }
        opt->params = pv;
    }
    g = opt->defaults;
    if (lr >= 0) g.lr = lr;
    if (weight_decay >= 0) g.weight_decay = weight_decay;
    for (i = 0; i < n; i++) {
        gdl__opt_param *pp = &opt->params[opt->nparams++];
        memset(pp, 0, sizeof *pp);
        pp->p = params[i];
        pp->group = opt->ngroups;
    }
    opt->groups[opt->ngroups] = g;
    opt->layout_dirty = 1; /* a new group (and its parameters): the blocks are made again at the next use */
    return opt->ngroups++;
}

GPUDL_API int gdl_optim_add_module(gdl_optimizer *opt, gdl_module *m, int no_decay) {
    const char *op = "gdl_optim_add_module";
    gdl_tensor **ps, **nd;
    int n, i, k = 0, j = 0, rc = 0;
    if (!opt || !m) {
        gdl__null_arg(op, !opt ? "opt" : "module");
        return -1;
    }
    if ((n = gdl_module_named_tensors(m, GDL_PARAMS, NULL, NULL, 0)) < 0) return -1;
    ps = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)(2 * n + 1));
    if (!ps) {
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    nd = ps + n;
    gdl_module_named_tensors(m, GDL_PARAMS, NULL, ps, n);
    if (!no_decay) {
        rc = gdl_optim_add_params(opt, ps, n, -1, -1);
    } else {
        for (i = 0; i < n; i++) {
            if (ps[i]->ndim >= 2) ps[k++] = ps[i];
            else nd[j++] = ps[i];
        }
        if (k && gdl_optim_add_params(opt, ps, k, -1, -1) < 0) rc = -1;
        if (rc == 0 && j && gdl_optim_add_params(opt, nd, j, -1, 0) < 0) rc = -1;
    }
    GPUDL_FREE(ps);
    return rc < 0 ? -1 : 0;
}

static int gdl__opt_has_state(const gdl_optimizer *opt, const gdl__opt_param *pp) {
    return opt->kind != GDL__OPT_SGD || opt->groups[pp->group].momentum != 0 || pp->s1;
}

/* ---- the flat blocks ---- */

#define GDL__FLAT_ALIGN 64 /* bytes: every slot starts on a cache line (and a GPU's 128-bit loads) */
static size_t gdl__flat_round(size_t b) { return (b + GDL__FLAT_ALIGN - 1) / GDL__FLAT_ALIGN * GDL__FLAT_ALIGN; }

/* region: 0 the parameter, 1 its gradient, 2 and 3 the state (momentum_buffer; exp_avg, exp_avg_sq), 4 its f32
   master. The block: parameters, gradients (region_lo bytes each), then the masters if any, s1, s2 (region). */
static char *gdl__opt_slot(const gdl_optimizer *opt, const gdl__opt_param *pp, int region) {
    const gdl__opt_dev *dv = &opt->devs[pp->dev];
    size_t f32_at = dv->region_lo * 2;
    if (region < 2) return dv->flat->base + dv->region_lo * (size_t)region + pp->off_lo;
    if (region == 4) return dv->flat->base + f32_at + pp->off;
    return dv->flat->base + f32_at + dv->region * (size_t)(region - 2 + (dv->low != GDL_F32)) + pp->off;
}
/* bytes of the f32 regions after the gradients (masters, state) */
static size_t gdl__opt_f32_bytes(const gdl__opt_dev *dv) {
    return dv->region * (size_t)(dv->nregions - 2 + (dv->low != GDL_F32));
}
static size_t gdl__elt_bytes(gdl_dtype dt) { return dt == GDL_F32 ? sizeof(gdl_real) : gdl_dtype_size(dt); }

/* Moves t's elements into `slot` of block f and lets go of its old storage
   (an allocation, or a slot of another block): the same gdl_tensor* now
   views the block, so every pointer to it stays valid. */
static int gdl__flat_rehome_as(const char *op, gdl_tensor *t, gdl__flat *f, void *slot, gdl_dtype dt,
                               const gdl_tensor *src);
static int gdl__flat_rehome(const char *op, gdl_tensor *t, gdl__flat *f, void *slot) {
    return gdl__flat_rehome_as(op, t, f, slot, t->dtype, t);
}
/* The same, t becoming dtype dt with src's values (t itself, or a master weight's f32 copy; converted, rounding
   to nearest even, on the block's device, where a conversion needs src). */
static int gdl__flat_rehome_as(const char *op, gdl_tensor *t, gdl__flat *f, void *slot, gdl_dtype dt,
                               const gdl_tensor *src) {
    if (t->flat == f && t->data == slot && t->dtype == dt && src == t) return 0;
    if (src->dtype == dt) {
        if (gdl__copy_bytes(op, slot, f->device, src->data, src->device, (size_t)t->numel * gdl__elt_bytes(dt)) < 0)
            return -1;
    } else {
        const gdl_backend *be = gdl__be(op, f->device);
        if (!gdl_device_equal(src->device, f->device)) {
            gdl__set_error("%s: cannot convert %s %s on %s to %s on %s (the optimizer's master weights convert on "
                           "one device)", op, gdl_dtype_name(src->dtype), gdl_shape_str(src),
                           gdl_device_str(src->device), gdl_dtype_name(dt), gdl_device_str(f->device));
            return -1;
        }
        if (!be || be->cast(slot, dt, src->data, src->dtype, t->numel) < 0) return -1;
    }
    if (t->flat == f && t->data == slot) { /* converted in place: the dtype is all that changes */
        t->dtype = dt;
        return 0;
    }
    if (t->flags & GDL__T_OWNS_DATA) {
        const gdl_backend *be = gdl__be(op, t->device);
        if (be) be->free(t->data);
        t->flags &= ~(unsigned)GDL__T_OWNS_DATA;
    } else {
        gdl__flat_unref(t->flat);
    }
    t->data = slot;
    t->device = f->device;
    t->flat = f;
    t->dtype = dt;
    f->refs++;
    return 0;
}

/* a grad the flat block can take: the parameter's dtype, size and device, storage of its own */
static int gdl__opt_grad_fits(const gdl_tensor *p) {
    const gdl_tensor *g = p->grad;
    return g && g->dtype == p->dtype && g->numel == p->numel && gdl_device_equal(g->device, p->device) &&
           gdl__own_storage(g);
}

static int gdl__opt_needs_s1(const gdl_optimizer *opt) {
    int i;
    if (opt->kind != GDL__OPT_SGD) return 1;
    for (i = 0; i < opt->ngroups; i++)
        if (opt->groups[i].momentum != 0) return 1;
    for (i = 0; i < opt->nparams; i++)
        if (opt->params[i].s1) return 1;
    return 0;
}

static void gdl__opt_hyper_of(const gdl__opt_group *g, gdl_opt_hyper *h) {
    memset(h, 0, sizeof *h);
    h->lr = g->lr;
    h->weight_decay = g->weight_decay;
    h->momentum = g->momentum;
    h->dampening = g->dampening;
    h->beta1 = g->beta1;
    h->beta2 = g->beta2;
    h->eps = g->eps;
    h->nesterov = g->nesterov;
}

/* Writes the groups' hyper-parameters that changed into every block: an
   asynchronous copy each on the device's compute stream (from pageable
   memory the copy takes the bytes before it returns), so the kernels of
   the next step read them and nothing waits. */
static int gdl__opt_push_hyper(const char *op, gdl_optimizer *opt) {
    int d, g;
    /* new groups: the blocks are made again at the next use, and every group's values go up then */
    if (opt->layout_dirty) return 0;
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        const gdl_backend *be = NULL;
        for (g = 0; g < opt->ngroups; g++) {
            gdl_opt_hyper h;
            gdl__opt_hyper_of(&opt->groups[g], &h);
            if (!memcmp(&h, &dv->hyper_seen[g], sizeof h)) continue;
            if (gdl__capturing) { /* a copy from the host cannot be recorded: say so before it is lost */
                gdl__set_error("%s: the optimizer's hyper-parameters cannot change inside a CUDA graph capture "
                               "(change them between replays)", op);
                return -1;
            }
            if (!be && !(be = gdl__be(op, dv->device))) return -1;
            if (be->copy_async(&dv->hyper[g], &h, sizeof h, 0, NULL) < 0) return -1;
            dv->hyper_seen[g] = h;
        }
    }
    return 0;
}

/* The blocks' step counts into the host step tensors (waits for the device). */
static int gdl__opt_steps_down(const char *op, gdl_optimizer *opt) {
    int d, i;
    int32_t *buf;
    if (opt->steps_dirty == 1 || !opt->ndevs) return 0; /* the host's are the newer */
    buf = (int32_t *)gdl__arena_alloc(&gdl__host_arena, sizeof(int32_t) * (size_t)(opt->nparams + 1));
    if (!buf) {
        gdl__set_error("%s: out of memory (host)", op);
        return -1;
    }
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        if (gdl__copy_bytes(op, buf, gdl_cpu(), dv->steps, dv->device, sizeof(int32_t) * (size_t)dv->nsteps) < 0)
            return -1;
        for (i = 0; i < dv->nsteps; i++) {
            gdl__opt_param *pp = &opt->params[i];
            /* a count written since the last read (not sent up yet) is kept */
            if (pp->dev != d || !pp->step || (opt->steps_dirty == 2 && *(int32_t *)pp->step->data != pp->step_seen))
                continue;
            *(int32_t *)pp->step->data = pp->step_seen = buf[i];
        }
    }
    return 0;
}

/* The host step tensors into the blocks (asynchronous copies). */
static int gdl__opt_steps_up(const char *op, gdl_optimizer *opt) {
    int d, i;
    int32_t *buf;
    if (!opt->steps_dirty || opt->layout_dirty) return 0; /* a new layout takes them all up */
    if (gdl__capturing) {
        gdl__set_error("%s: the optimizer's step counts were set from the host (a checkpoint load) and cannot be "
                       "sent inside a CUDA graph capture: take a step first", op);
        return -1;
    }
    if (opt->steps_dirty == 2) { /* only the counts written since gdl_optim_state read them */
        for (i = 0; i < opt->nparams; i++) {
            gdl__opt_param *pp = &opt->params[i];
            const gdl_backend *be;
            if (!pp->step || *(const int32_t *)pp->step->data == pp->step_seen) continue;
            if (!(be = gdl__be(op, opt->devs[pp->dev].device)) ||
                be->copy_async(&opt->devs[pp->dev].steps[i], pp->step->data, sizeof(int32_t), 0, NULL) < 0)
                return -1;
            pp->step_seen = *(const int32_t *)pp->step->data;
        }
        opt->steps_dirty = 0;
        return 0;
    }
    buf = (int32_t *)gdl__arena_alloc(&gdl__host_arena, sizeof(int32_t) * (size_t)(opt->nparams + 1));
    if (!buf) {
        gdl__set_error("%s: out of memory (host)", op);
        return -1;
    }
    for (i = 0; i < opt->nparams; i++) {
        const gdl_tensor *st = opt->params[i].step;
        buf[i] = st ? *(const int32_t *)st->data : 0;
    }
    for (d = 0; d < opt->ndevs; d++) {
        const gdl_backend *be = gdl__be(op, opt->devs[d].device);
        if (!be || be->copy_async(opt->devs[d].steps, buf, sizeof(int32_t) * (size_t)opt->nparams, 0, NULL) < 0)
            return -1;
    }
    opt->steps_dirty = 0;
    return 0;
}

/* A parameter into its slots of block f (the layout is opt->devs): with master weights its f32 master
   (made from the parameter the first time, which then becomes dtype opt->master, rounded to nearest even),
   and without, the parameter back to f32 from its master if it had one (the master is let go). */
static int gdl__opt_move_param(const char *op, gdl_optimizer *opt, gdl__opt_param *pp, gdl__flat *f) {
    gdl_tensor *p = pp->p;
    if (opt->master == GDL_F32) {
        if (pp->master) {
            if (gdl__flat_rehome_as(op, p, f, gdl__opt_slot(opt, pp, 0), GDL_F32, pp->master) < 0) return -1;
            gdl_free(pp->master);
            pp->master = NULL;
            return 0;
        }
        return gdl__flat_rehome_as(op, p, f, gdl__opt_slot(opt, pp, 0), GDL_F32, p);
    }
    if (pp->master) {
        if (gdl__flat_rehome(op, pp->master, f, gdl__opt_slot(opt, pp, 4)) < 0) return -1;
    } else {
        gdl_tensor *m = gdl__flat_view(op, f, gdl__opt_slot(opt, pp, 4), p->ndim, p->shape, GDL_F32, 0);
        if (!m) return -1;
        m->name = "master"; /* never in a file: checkpoints save it under the parameter's name */
        /* f32 -> f32: a copy; a parameter of the low dtype (added as one) widens exactly */
        if (gdl__flat_rehome_as(op, m, f, m->data, GDL_F32, p) < 0) {
            gdl_free(m);
            return -1;
        }
        pp->master = m;
    }
    return gdl__flat_rehome_as(op, p, f, gdl__opt_slot(opt, pp, 0), opt->master, pp->master);
}

/* Makes the blocks: one per device the parameters are on, each parameter,
   gradient and state tensor moved into its slot. On an error before the
   moves (out of memory) nothing has changed. */
static int gdl__opt_rebuild(const char *op, gdl_optimizer *opt) {
    gdl__opt_dev *devs;
    int nd = 0, i, d, nregions, *where_dev;
    size_t *where_off, *where_lo;
    size_t lo_size = opt->master == GDL_F32 ? sizeof(gdl_real) : gdl_dtype_size(opt->master);
    size_t hyper_bytes = gdl__flat_round(sizeof(gdl_opt_hyper) * (size_t)(opt->ngroups ? opt->ngroups : 1));
    if (gdl__opt_steps_down(op, opt) < 0) return -1;
    nregions = opt->kind != GDL__OPT_SGD ? 4 : gdl__opt_needs_s1(opt) ? 3 : 2;
    /* the new slots go to the parameters only once the blocks are made: until then the old ones hold */
    where_off = (size_t *)gdl__arena_alloc(&gdl__host_arena, (2 * sizeof(size_t) + sizeof(int)) * (size_t)(opt->nparams + 1));
    devs = (gdl__opt_dev *)GPUDL_MALLOC(sizeof(gdl__opt_dev) * (size_t)(opt->nparams + 1));
    if (!devs || !where_off) {
        GPUDL_FREE(devs);
        gdl__set_error("%s: out of memory (host)", op);
        return -1;
    }
    where_lo = where_off + opt->nparams + 1;
    where_dev = (int *)(where_lo + opt->nparams + 1);
    memset(devs, 0, sizeof(gdl__opt_dev) * (size_t)(opt->nparams + 1));
    for (i = 0; i < opt->nparams; i++) { /* the devices in order of first appearance, the slots */
        const gdl_tensor *p = opt->params[i].p;
        for (d = 0; d < nd && !gdl_device_equal(devs[d].device, p->device); d++) {}
        if (d == nd) devs[nd++].device = p->device;
        where_dev[i] = d;
        where_off[i] = devs[d].region;
        where_lo[i] = devs[d].region_lo;
        devs[d].region += gdl__flat_round((size_t)p->numel * sizeof(gdl_real));
        devs[d].region_lo += gdl__flat_round((size_t)p->numel * lo_size);
    }
    for (d = 0; d < nd; d++) {
        gdl__opt_dev *dv = &devs[d];
        size_t bytes;
        const gdl_backend *be = gdl__be(op, dv->device);
        int ok = 0;
        dv->nregions = nregions;
        dv->low = opt->master;
        bytes = dv->region_lo * 2 + gdl__opt_f32_bytes(dv) + hyper_bytes + GDL__FLAT_ALIGN +
                sizeof(int32_t) * (size_t)(opt->nparams + 1);
        if (be && (dv->flat = (gdl__flat *)GPUDL_MALLOC(sizeof(gdl__flat))) != NULL) {
            memset(dv->flat, 0, sizeof *dv->flat);
            dv->flat->refs = 1;
            dv->flat->device = dv->device;
            dv->flat->bytes = bytes;
            dv->flat->params_bytes = dv->region_lo;
            dv->flat->grad_shift = dv->region_lo;
            dv->hyper_seen = (gdl_opt_hyper *)GPUDL_MALLOC(hyper_bytes);
            if (dv->hyper_seen && (dv->flat->data = be->alloc(bytes + GDL__FLAT_ALIGN)) != NULL) {
                uintptr_t a = (uintptr_t)dv->flat->data;
                dv->flat->base = (char *)dv->flat->data + (GDL__FLAT_ALIGN - a % GDL__FLAT_ALIGN) % GDL__FLAT_ALIGN;
                /* zeros for the state slots; NaN bits in the host copy, so every group is written below */
                memset(dv->hyper_seen, 0xff, hyper_bytes);
                ok = be->memset0(dv->flat->base, bytes) == 0;
            }
        }
        if (!ok) {
            char prev[sizeof gdl__err];
            gdl_device where = dv->device;
            memcpy(prev, gdl__err, sizeof prev);
            for (i = 0; i <= d; i++) {
                if (devs[i].flat && devs[i].flat->data) gdl__be(op, devs[i].device)->free(devs[i].flat->data);
                GPUDL_FREE(devs[i].flat);
                GPUDL_FREE(devs[i].hyper_seen);
            }
            GPUDL_FREE(devs);
            gdl__set_error("%s: cannot make the flat parameter buffer of %.0f bytes on %s: %s", op, (double)bytes,
                           gdl_device_str(where), prev[0] ? prev : "out of memory");
            return -1;
        }
        dv->hyper = (gdl_opt_hyper *)(dv->flat->base + dv->region_lo * 2 + gdl__opt_f32_bytes(dv));
        dv->skip = (gdl_real *)((char *)dv->hyper + hyper_bytes);
        dv->steps = (int32_t *)((char *)dv->skip + GDL__FLAT_ALIGN);
        dv->nsteps = opt->nparams;
    }
    /* the blocks are made: move everything in, then let go of the old ones */
    {
        gdl__opt_dev *old = opt->devs;
        int nold = opt->ndevs, rc = 0;
        opt->devs = devs;
        opt->ndevs = nd;
        for (i = 0; i < opt->nparams; i++) {
            opt->params[i].dev = where_dev[i];
            opt->params[i].off = where_off[i];
            opt->params[i].off_lo = where_lo[i];
        }
        for (i = 0; i < opt->nparams && rc == 0; i++) {
            gdl__opt_param *pp = &opt->params[i];
            gdl__flat *f = devs[pp->dev].flat;
            int gfits = gdl__opt_grad_fits(pp->p);
            if (gdl__opt_move_param(op, opt, pp, f) < 0) rc = -1;
            else if (gfits && gdl__flat_rehome_as(op, pp->p->grad, f, gdl__opt_slot(opt, pp, 1), pp->p->dtype,
                                                  pp->p->grad) < 0)
                rc = -1;
            else if (pp->s1 && gdl__flat_rehome(op, pp->s1, f, gdl__opt_slot(opt, pp, 2)) < 0) rc = -1;
            else if (pp->s2 && gdl__flat_rehome(op, pp->s2, f, gdl__opt_slot(opt, pp, 3)) < 0) rc = -1;
        }
        opt->devs = old;
        opt->ndevs = nold;
        gdl__opt_release_devs(opt);
        opt->devs = devs;
        opt->ndevs = nd;
        opt->layout_dirty = 0;
        opt->steps_dirty = 1;
        if (rc < 0) {
            opt->layout_dirty = 1; /* some tensors moved, some not: made again at the next use */
            return -1;
        }
    }
    if (gdl__opt_push_hyper(op, opt) < 0 || gdl__opt_steps_up(op, opt) < 0) return -1;
    return 0;
}

/* Makes sure every parameter (and its state) is in its slot, making the
   blocks again when the parameters changed: added, moved (gdl_module_to),
   or momentum turned on for an SGD that had no buffers. A gradient made
   outside the block (before it existed, by hand) is moved into its slot. */
static int gdl__opt_layout(const char *op, gdl_optimizer *opt) {
    int i, ok = !opt->layout_dirty && opt->ndevs > 0;
    if (!opt->nparams) return 0;
    if (ok && opt->kind == GDL__OPT_SGD && opt->devs[0].nregions < 3 && gdl__opt_needs_s1(opt)) ok = 0;
    if (ok && opt->devs[0].low != opt->master) ok = 0; /* master weights turned on or off */
    for (i = 0; i < opt->nparams && ok; i++) {
        gdl__opt_param *pp = &opt->params[i];
        const gdl_tensor *p = pp->p;
        if (p->dtype != opt->master || (opt->master != GDL_F32 && (!pp->master ||
                                                                    pp->master->data != gdl__opt_slot(opt, pp, 4))))
            ok = 0;
        else if (p->flat != opt->devs[pp->dev].flat || p->data != gdl__opt_slot(opt, pp, 0) ||
            (pp->s1 && pp->s1->data != gdl__opt_slot(opt, pp, 2)) || (pp->s2 && pp->s2->data != gdl__opt_slot(opt, pp, 3)))
            ok = 0;
    }
    if (!ok) return gdl__opt_rebuild(op, opt);
    for (i = 0; i < opt->nparams; i++) {
        gdl__opt_param *pp = &opt->params[i];
        if (gdl__opt_grad_fits(pp->p) && pp->p->grad->data != gdl__opt_slot(opt, pp, 1) &&
            gdl__flat_rehome(op, pp->p->grad, opt->devs[pp->dev].flat, gdl__opt_slot(opt, pp, 1)) < 0)
            return -1;
    }
    return 0;
}

GPUDL_API int gdl_zero_grad_ex(gdl_optimizer *opt, int set_to_none) {
    int i, d;
    if (!opt) {
        gdl__null_arg("gdl_zero_grad", "opt");
        return -1;
    }
    if (set_to_none) {
        for (i = 0; i < opt->nparams; i++) {
            gdl_tensor *p = opt->params[i].p;
            gdl_free(p->grad);
            p->grad = NULL;
        }
        return 0;
    }
    /* the gradients are one region per block: one memset each (slots of parameters without a grad
       included: backward zeroes a slot when it gives it out) */
    if (gdl__opt_layout("gdl_zero_grad", opt) < 0) return -1;
    for (d = 0; d < opt->ndevs; d++) {
        const gdl_backend *be = gdl__be("gdl_zero_grad", opt->devs[d].device);
        if (!be || be->memset0(opt->devs[d].flat->base + opt->devs[d].region_lo, opt->devs[d].region_lo) < 0)
            return -1;
    }
    for (i = 0; i < opt->nparams; i++) { /* a grad the block could not take (another device or size) */
        gdl__opt_param *pp = &opt->params[i];
        if (pp->p->grad && pp->p->grad->data != gdl__opt_slot(opt, pp, 1) && gdl_zero_grad_tensor(pp->p) < 0)
            return -1;
    }
    return 0;
}
GPUDL_API int gdl_zero_grad(gdl_optimizer *opt) { return gdl_zero_grad_ex(opt, 0); }

/* Makes this parameter's state (zeros, step 0) in its slots; the layout is made. */
static int gdl__opt_ensure_state(const char *op, gdl_optimizer *opt, gdl__opt_param *pp, int index) {
    gdl_tensor *p = pp->p;
    int adam = opt->kind != GDL__OPT_SGD, k;
    char nm[64];
    const char *suffix[3];
    gdl__flat *f;
    if (pp->step) return 0;
    f = opt->devs[pp->dev].flat;
    suffix[0] = "step";
    suffix[1] = adam ? "exp_avg" : "momentum_buffer";
    suffix[2] = "exp_avg_sq";
    pp->step = gdl_zeros(0, NULL, GDL_I32, gdl_cpu()); /* the checkpoint's copy of the count */
    pp->s1 = gdl__flat_view(op, f, gdl__opt_slot(opt, pp, 2), p->ndim, p->shape, GDL_F32, 1);
    if (adam) pp->s2 = gdl__flat_view(op, f, gdl__opt_slot(opt, pp, 3), p->ndim, p->shape, GDL_F32, 1);
    for (k = 0; k < (adam ? 3 : 2); k++) {
        snprintf(nm, sizeof nm, "state.%d.%s", index, suffix[k]);
        pp->names[k] = gdl__nn_strdup(nm);
    }
    if (!pp->step || !pp->s1 || (adam && !pp->s2) || !pp->names[0] || !pp->names[1] || (adam && !pp->names[2])) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        gdl__opt_free_state(pp);
        pp->step = pp->s1 = pp->s2 = NULL;
        pp->names[0] = pp->names[1] = pp->names[2] = NULL;
        gdl__set_error("%s: cannot make the optimizer state of parameter %d %s: %s", op, index, gdl_shape_str(p),
                       prev[0] ? prev : "out of memory");
        return -1;
    }
    pp->step->name = pp->names[0];
    pp->s1->name = pp->names[1];
    if (adam) pp->s2->name = pp->names[2];
    { /* its count in the block starts at 0 too (an asynchronous write: nothing is read back) */
        static const int32_t zero = 0;
        const gdl_backend *be = gdl__be(op, p->device);
        if (!be || be->copy_async(&opt->devs[pp->dev].steps[index], &zero, sizeof zero, 0, NULL) < 0) return -1;
    }
    return 0;
}

/* All or nothing, as one foreach step in PyTorch: every parameter and grad is
   checked and every missing state tensor made (a failure frees what this call
   made) before anything is updated; then one multi-tensor backend call per
   device updates them all (on a GPU one kernel launch, so a failed launch
   updates nothing), and the step counts (in the blocks) advance in that same
   call. With parameters on several devices a failure on a later device
   leaves the earlier devices' parameters updated and counted.
   A steady-state step copies nothing to the device: the table of a device
   is kept while its entries stay the same, and lr changes reach the block
   when they are made (gdl_optim_set_lr, the schedulers). */
static int gdl__step(gdl_optimizer *opt);
GPUDL_API int gdl_step(gdl_optimizer *opt) {
    int span, rc;
    if (!opt) {
        gdl__null_arg("gdl_step", "opt");
        return -1;
    }
    /* the profiler times the whole step on the first parameter's device */
    span = gdl__prof_on && opt->nparams ? gdl__prof_push("gdl_step", opt->params[0].p->device) : 0;
    rc = gdl__step(opt);
    gdl__prof_pop(span, rc == 0);
    return rc;
}
/* gdl_step's parts, in order. Every parameter's grad matches it (device, size, dtype), on a usable device. */
static int gdl__step_check_grads(const char *op, gdl_optimizer *opt) {
    int i;
    for (i = 0; i < opt->nparams; i++) {
        gdl_tensor *p = opt->params[i].p, *g = p->grad;
        if (!g) continue; /* as PyTorch: parameters without a grad are skipped */
        if (!gdl_device_equal(p->device, g->device) || g->numel != p->numel || g->dtype != p->dtype) {
            gdl__set_error("%s: %s parameter %d %s %s on %s has a grad %s %s on %s that does not match", op,
                           gdl__opt_kind_name(opt->kind), i, gdl_dtype_name(p->dtype), gdl_shape_str(p),
                           gdl_device_str(p->device), gdl_dtype_name(g->dtype), gdl_shape_str(g),
                           gdl_device_str(g->device));
            return -1;
        }
        if (!gdl__be(op, p->device)) return -1;
    }
    return 0;
}

/* The state of every parameter the step updates (fresh[i]: made now); on failure none is made. */
static int gdl__step_ensure_states(const char *op, gdl_optimizer *opt, char *fresh) {
    int i;
    for (i = 0; i < opt->nparams; i++) {
        gdl__opt_param *pp = &opt->params[i];
        fresh[i] = 0;
        if (!pp->p->grad || !pp->p->numel) continue;
        if (opt->kind == GDL__OPT_SGD && opt->groups[pp->group].momentum == 0 && !pp->s1) continue;
        fresh[i] = !pp->step;
        if (gdl__opt_ensure_state(op, opt, pp, i) < 0) {
            int j;
            for (j = 0; j < i; j++)
                if (fresh[j]) { /* back to no state, as before this call */
                    gdl__opt_param *q = &opt->params[j];
                    gdl__opt_free_state(q);
                    q->step = q->s1 = q->s2 = NULL;
                    q->names[0] = q->names[1] = q->names[2] = NULL;
                }
            return -1;
        }
    }
    return 0;
}

/* Each device's entries, contiguous in t, in parameter order (count[d] of device d). */
static void gdl__step_entries(gdl_optimizer *opt, gdl_opt_tensor *t, int *count) {
    int n = 0, d, i;
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        count[d] = 0;
        for (i = 0; i < opt->nparams; i++) {
            gdl__opt_param *pp = &opt->params[i];
            gdl_opt_tensor *e;
            if (pp->dev != d || !pp->p->grad || !pp->p->numel) continue;
            e = &t[n + count[d]++];
            memset(e, 0, sizeof *e);
            e->n = pp->p->numel;
            if (pp->master) { /* the f32 master is updated, the parameter rounded from it */
                e->p = GDL__R(pp->master);
                e->plow = pp->p->data;
                e->glow = pp->p->grad->data;
                e->low = (int32_t)pp->p->dtype;
            } else {
                e->p = GDL__R(pp->p);
                e->g = GDL__R(pp->p->grad);
            }
            e->s1 = pp->s1 ? GDL__R(pp->s1) : NULL;
            e->s2 = pp->s2 ? GDL__R(pp->s2) : NULL;
            e->hyper = &dv->hyper[pp->group];
            e->step = pp->step ? &dv->steps[i] : NULL;
            e->skip = dv->skip;
        }
        n += count[d];
    }
}

/* The devices' tables: kept while the entries stay the same (a steady-state step copies nothing). */
static int gdl__step_tables(const char *op, gdl_optimizer *opt, const gdl_opt_tensor *t, const int *count) {
    int d, i;
    for (d = 0, i = 0; d < opt->ndevs; i += count[d], d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        const gdl_backend *be;
        void *tab;
        gdl_opt_tensor *keep;
        if (dv->table && dv->ntab == count[d] && !memcmp(dv->tab, t + i, sizeof(gdl_opt_tensor) * (size_t)count[d]))
            continue;
        if (!(be = gdl__be(op, dv->device))) return -1;
        keep = (gdl_opt_tensor *)GPUDL_MALLOC(sizeof(gdl_opt_tensor) * (size_t)(count[d] + 1));
        if (!keep || !(tab = be->opt_table_new(count[d], t + i))) {
            char prev[sizeof gdl__err];
            memcpy(prev, gdl__err, sizeof prev);
            gdl__set_error("%s: cannot make the %s table of %d parameter%s on %s, nothing was updated: %s", op,
                           gdl__opt_kind_name(opt->kind), count[d], count[d] == 1 ? "" : "s",
                           gdl_device_str(dv->device), keep ? prev : "out of memory (host)");
            GPUDL_FREE(keep);
            return -1;
        }
        if (count[d]) memcpy(keep, t + i, sizeof(gdl_opt_tensor) * (size_t)count[d]);
        if (dv->table) be->opt_table_free(dv->table);
        GPUDL_FREE(dv->tab);
        dv->table = tab;
        dv->tab = keep;
        dv->ntab = count[d];
    }
    return 0;
}

/* The update: one backend call per device. */
static int gdl__step_update(const char *op, gdl_optimizer *opt) {
    int d, adam = opt->kind != GDL__OPT_SGD;
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        const gdl_backend *be;
        int rc;
        if (!dv->ntab) continue;
        if (!(be = gdl__be(op, dv->device))) return -1;
        rc = adam ? be->adam_multi(dv->table, opt->kind == GDL__OPT_ADAMW) : be->sgd_multi(dv->table);
        if (rc < 0) {
            char prev[sizeof gdl__err];
            memcpy(prev, gdl__err, sizeof prev);
            gdl__set_error("%s: the %s update of %d parameter%s on %s failed%s: %s", op, gdl__opt_kind_name(opt->kind),
                           dv->ntab, dv->ntab == 1 ? "" : "s", gdl_device_str(dv->device),
                           d ? " (the parameters of the devices before it were updated)" : ", nothing was updated",
                           prev);
            return -1;
        }
    }
    return 0;
}

static int gdl__step(gdl_optimizer *opt) {
    const char *op = "gdl_step";
    gdl_opt_tensor *t;
    int *count;
    if (gdl__step_check_grads(op, opt) < 0 || gdl__opt_layout(op, opt) < 0) return -1;
    /* the step's lists live in the step arena: a steady-state step stays allocation-free */
    t = (gdl_opt_tensor *)gdl__arena_alloc(&gdl__host_arena, (sizeof(gdl_opt_tensor) + sizeof(int) + 1) *
                                                                 (size_t)(opt->nparams + 1));
    if (!t) {
        gdl__set_error("%s: out of memory (host) for the step's table of %d parameters", op, opt->nparams);
        return -1;
    }
    count = (int *)(t + opt->nparams + 1);
    if (gdl__step_ensure_states(op, opt, (char *)(count + opt->nparams + 1)) < 0 ||
        gdl__opt_push_hyper(op, opt) < 0 || gdl__opt_steps_up(op, opt) < 0)
        return -1;
    gdl__step_entries(opt, t, count);
    if (gdl__step_tables(op, opt, t, count) < 0 || gdl__step_update(op, opt) < 0) return -1;
    opt->steps++;
    return 0;
}

/* ---- GradScaler (torch.amp.GradScaler) ----
   The scale, the growth tracker and found_inf are tensors on the device of
   the first loss scaled; every call queues work on that device and reads
   nothing back, so a captured step with the scaler replays right. Each
   optimizer has a skip flag in its flat block that its kernels read (a
   skipped step changes nothing, step counts included): unscale sets it
   with found_inf, update clears it. Per optimizer, as PyTorch's
   _per_optimizer_states: READY, UNSCALED, STEPPED between updates. */
enum { GDL__SC_READY = 0, GDL__SC_UNSCALED, GDL__SC_STEPPED };

typedef struct gdl__scaler_opt {
    gdl_optimizer *opt;
    int stage;
} gdl__scaler_opt;

struct gdl_grad_scaler {
    gdl_grad_scaler_opts o;
    gdl_tensor *scale, *found_inf, *tracker; /* f32, f32, i32 scalars on dev; NULL until the first scale */
    gdl_device dev;
    double pending_scale;                    /* the state until then */
    int64_t pending_tracker;
    int nopts, cap_opts;
    gdl__scaler_opt *opts;                   /* the optimizers attached (opt->scaler == this) */
};

GPUDL_API gdl_grad_scaler_opts gdl_grad_scaler_defaults(void) {
    gdl_grad_scaler_opts o;
    o.init_scale = 65536.0;
    o.growth_factor = 2.0;
    o.backoff_factor = 0.5;
    o.growth_interval = 2000;
    o.enabled = 1;
    return o;
}

GPUDL_API gdl_grad_scaler *gdl_grad_scaler_new(const gdl_grad_scaler_opts *opts) {
    const char *op = "gdl_grad_scaler_new";
    gdl_grad_scaler_opts o = opts ? *opts : gdl_grad_scaler_defaults();
    gdl_grad_scaler *s;
    if (!(o.init_scale > 0) || o.init_scale - o.init_scale != 0 || (float)o.init_scale - (float)o.init_scale != 0) {
        gdl__set_error("%s: init_scale %g must be > 0 and finite as a float", op, o.init_scale);
        return NULL;
    }
    if (!(o.growth_factor > 1) || o.growth_factor - o.growth_factor != 0) {
        gdl__set_error("%s: growth_factor %g must be > 1 and finite", op, o.growth_factor);
        return NULL;
    }
    if (!(o.backoff_factor > 0 && o.backoff_factor < 1)) {
        gdl__set_error("%s: backoff_factor %g must be in (0,1)", op, o.backoff_factor);
        return NULL;
    }
    if (o.growth_interval < 1) {
        gdl__set_error("%s: growth_interval %d must be >= 1", op, o.growth_interval);
        return NULL;
    }
    if (!(s = (gdl_grad_scaler *)GPUDL_MALLOC(sizeof *s))) {
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->o = o;
    s->o.enabled = o.enabled != 0;
    s->pending_scale = (double)(float)o.init_scale;
    return s;
}

static gdl__scaler_opt *gdl__scaler_find(gdl_grad_scaler *s, const gdl_optimizer *opt) {
    int i;
    for (i = 0; i < s->nopts; i++)
        if (s->opts[i].opt == opt) return &s->opts[i];
    return NULL;
}

/* clears opt's skip flags (queued on its devices) */
static int gdl__scaler_clear_skip(const char *op, gdl_optimizer *opt) {
    int d;
    for (d = 0; d < opt->ndevs; d++) {
        const gdl_backend *be = gdl__be(op, opt->devs[d].device);
        if (!be || be->memset0(opt->devs[d].skip, sizeof(gdl_real)) < 0) return -1;
    }
    return 0;
}

static void gdl__scaler_forget(gdl_grad_scaler *s, gdl_optimizer *opt) {
    gdl__scaler_opt *r = gdl__scaler_find(s, opt);
    if (r) *r = s->opts[--s->nopts];
    opt->scaler = NULL;
}

GPUDL_API int gdl_optim_set_grad_scaler(gdl_optimizer *opt, gdl_grad_scaler *s) {
    const char *op = "gdl_optim_set_grad_scaler";
    if (!opt) {
        gdl__null_arg(op, "opt");
        return -1;
    }
    if (opt->scaler == s) return 0;
    if (s && s->o.enabled && opt->master != GDL_F32) { /* as gdl_optim_set_master_weights refuses the other order */
        gdl__set_error("%s: the optimizer keeps %s parameters with f32 master weights, so its gradients are %s; a "
                       "GradScaler unscales f32 gradients (bf16 needs no loss scaling)", op,
                       gdl_dtype_name(opt->master), gdl_dtype_name(opt->master));
        return -1;
    }
    if (s && s->nopts == s->cap_opts) {
        int cap = s->cap_opts ? 2 * s->cap_opts : 4;
        gdl__scaler_opt *v = (gdl__scaler_opt *)GPUDL_REALLOC(s->opts, sizeof(gdl__scaler_opt) * (size_t)cap);
        if (!v) {
            gdl__set_error("%s: out of memory", op);
            return -1;
        }
        s->opts = v;
        s->cap_opts = cap;
    }
    if (opt->scaler) { /* a skip flag the old scaler set must not outlive it */
        if (gdl__scaler_clear_skip(op, opt) < 0) return -1;
        gdl__scaler_forget(opt->scaler, opt);
    }
    if (s) {
        s->opts[s->nopts].opt = opt;
        s->opts[s->nopts++].stage = GDL__SC_READY;
        opt->scaler = s;
    }
    return 0;
}

GPUDL_API void gdl_grad_scaler_free(gdl_grad_scaler *s) {
    if (!s) return;
    while (s->nopts > 0) {
        gdl_optimizer *opt = s->opts[0].opt;
        gdl__scaler_clear_skip("gdl_grad_scaler_free", opt);
        gdl__scaler_forget(s, opt);
    }
    gdl_free(s->scale);
    gdl_free(s->found_inf);
    gdl_free(s->tracker);
    GPUDL_FREE(s->opts);
    GPUDL_FREE(s);
}

/* the state tensors on dev, at the first scale (PyTorch's _lazy_init_scale_growth_tracker) */
static int gdl__scaler_init(const char *op, gdl_grad_scaler *s, gdl_device dev) {
    int32_t tr = (int32_t)s->pending_tracker;
    if (s->scale) return 0;
    s->scale = gdl_full(0, NULL, s->pending_scale, GDL_F32, dev);
    s->found_inf = gdl_zeros(0, NULL, GDL_F32, dev);
    s->tracker = gdl_from_array(&tr, 0, NULL, GDL_I32, dev);
    if (!s->scale || !s->found_inf || !s->tracker) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        gdl_free(s->scale);
        gdl_free(s->found_inf);
        gdl_free(s->tracker);
        s->scale = s->found_inf = s->tracker = NULL;
        gdl__set_error("%s: cannot make the scaler's state on %s: %s", op, gdl_device_str(dev), prev);
        return -1;
    }
    s->dev = dev;
    return 0;
}

static int gdl__scaler_ready(const char *op, gdl_grad_scaler *s) {
    if (s->scale) return 0;
    gdl__set_error("%s: no loss has been scaled by this GradScaler yet (call gdl_grad_scaler_scale first: the scale "
                   "lives on the loss's device)", op);
    return -1;
}

GPUDL_API gdl_tensor *gdl_grad_scaler_scale(gdl_grad_scaler *s, gdl_tensor *loss) {
    const char *op = "gdl_grad_scaler_scale";
    if (!s || !loss) {
        gdl__null_arg(op, !s ? "s" : "loss");
        return NULL;
    }
    if (!s->o.enabled) return loss;
    if (loss->dtype != GDL_F32 && loss->dtype != GDL_BF16 && loss->dtype != GDL_F16) {
        gdl__set_error("%s: the loss %s is %s; a float loss is scaled", op, gdl_shape_str(loss),
                       gdl_dtype_name(loss->dtype));
        return NULL;
    }
    if (gdl__scaler_init(op, s, loss->device) < 0) return NULL;
    if (!gdl_device_equal(s->dev, loss->device)) {
        gdl__set_error("%s: the loss is on %s but the scaler's scale is on %s; one GradScaler over several devices "
                       "is not supported (use one scaler per device)", op, gdl_device_str(loss->device),
                       gdl_device_str(s->dev));
        return NULL;
    }
    return gdl_mul(loss, s->scale);
}

/* unscale_ on one optimizer; the record exists and is READY */
static int gdl__scaler_unscale(const char *op, gdl_grad_scaler *s, gdl_optimizer *opt, gdl__scaler_opt *r) {
    const gdl_backend *be;
    int i, d;
    for (i = 0; i < opt->nparams; i++) { /* everything checked before anything changes */
        const gdl_tensor *p = opt->params[i].p;
        if (!p->grad) continue;
        if (!gdl_device_equal(p->grad->device, s->dev)) {
            gdl__set_error("%s: parameter %d %s has its gradient on %s but the scaler's scale is on %s; one GradScaler "
                           "over several devices is not supported", op, i, gdl_shape_str(p),
                           gdl_device_str(p->grad->device), gdl_device_str(s->dev));
            return -1;
        }
        if (p->grad->dtype != GDL_F32) {
            gdl__set_error("%s: parameter %d %s has a %s gradient; the scaler unscales f32 gradients", op, i,
                           gdl_shape_str(p), gdl_dtype_name(p->grad->dtype));
            return -1;
        }
    }
    if (!(be = gdl__be(op, s->dev)) || gdl__opt_layout(op, opt) < 0) return -1;
    /* one call per run of consecutive parameters whose gradients are in their slots: the whole gradient
       region in the usual case (the padding between slots is zero: the block starts zeroed and nothing
       writes there, and a zero stays finite). A slot without a gradient (zero_grad set_to_none) may hold
       an old one, so it ends a run; a gradient outside the block is a call of its own. */
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        char *lo = NULL, *hi = NULL;
        for (i = 0; i <= opt->nparams; i++) {
            gdl__opt_param *pp = i < opt->nparams ? &opt->params[i] : NULL;
            gdl_tensor *g = pp && pp->dev == d ? pp->p->grad : NULL;
            char *slot = pp && pp->dev == d ? gdl__opt_slot(opt, pp, 1) : NULL;
            if (pp && pp->dev != d) continue;
            if (g && g->numel && (char *)g->data == slot) {
                if (!lo) lo = slot;
                hi = slot + (size_t)g->numel * sizeof(gdl_real);
                continue;
            }
            if (lo && be->amp_unscale((int64_t)((size_t)(hi - lo) / sizeof(gdl_real)), (gdl_real *)lo,
                                      GDL__R(s->scale), GDL__R(s->found_inf), dv->skip) < 0)
                return -1;
            lo = hi = NULL;
            if (g && g->numel &&
                be->amp_unscale(g->numel, GDL__R(g), GDL__R(s->scale), GDL__R(s->found_inf), dv->skip) < 0)
                return -1;
        }
    }
    r->stage = GDL__SC_UNSCALED;
    return 0;
}

/* the record of opt in s, attaching s to opt when it has no scaler */
static gdl__scaler_opt *gdl__scaler_record(const char *op, gdl_grad_scaler *s, gdl_optimizer *opt) {
    if (opt->scaler && opt->scaler != s) {
        gdl__set_error("%s: the optimizer is attached to another GradScaler (gdl_optim_set_grad_scaler)", op);
        return NULL;
    }
    if (!opt->scaler && gdl_optim_set_grad_scaler(opt, s) < 0) return NULL;
    return gdl__scaler_find(s, opt);
}

GPUDL_API int gdl_grad_scaler_unscale(gdl_grad_scaler *s, gdl_optimizer *opt) {
    const char *op = "gdl_grad_scaler_unscale";
    gdl__scaler_opt *r;
    if (!s || !opt) {
        gdl__null_arg(op, !s ? "s" : "opt");
        return -1;
    }
    if (!s->o.enabled) return 0;
    if (gdl__scaler_ready(op, s) < 0 || !(r = gdl__scaler_record(op, s, opt))) return -1;
    if (r->stage == GDL__SC_UNSCALED) {
        gdl__set_error("%s: already called for this optimizer since the last update (PyTorch: unscale_() has "
                       "already been called on this optimizer since the last update())", op);
        return -1;
    }
    if (r->stage == GDL__SC_STEPPED) {
        gdl__set_error("%s: called after gdl_grad_scaler_step for this optimizer; call gdl_grad_scaler_update first",
                       op);
        return -1;
    }
    return gdl__scaler_unscale(op, s, opt, r);
}

GPUDL_API int gdl_grad_scaler_step(gdl_grad_scaler *s, gdl_optimizer *opt) {
    const char *op = "gdl_grad_scaler_step";
    gdl__scaler_opt *r;
    if (!s || !opt) {
        gdl__null_arg(op, !s ? "s" : "opt");
        return -1;
    }
    if (!s->o.enabled) return gdl_step(opt);
    if (gdl__scaler_ready(op, s) < 0 || !(r = gdl__scaler_record(op, s, opt))) return -1;
    if (r->stage == GDL__SC_STEPPED) {
        gdl__set_error("%s: already called for this optimizer since the last update (call gdl_grad_scaler_update "
                       "after each step)", op);
        return -1;
    }
    if (r->stage == GDL__SC_READY && gdl__scaler_unscale(op, s, opt, r) < 0) return -1;
    /* the kernels read the skip flag: an overflow skips the update on the device */
    if (gdl_step(opt) < 0) return -1;
    r->stage = GDL__SC_STEPPED;
    return 0;
}

GPUDL_API int gdl_grad_scaler_update(gdl_grad_scaler *s) {
    const char *op = "gdl_grad_scaler_update";
    const gdl_backend *be;
    int i, any = 0;
    if (!s) {
        gdl__null_arg(op, "s");
        return -1;
    }
    if (!s->o.enabled) return 0;
    if (gdl__scaler_ready(op, s) < 0) return -1;
    for (i = 0; i < s->nopts; i++) any |= s->opts[i].stage != GDL__SC_READY;
    if (!any) {
        gdl__set_error("%s: no optimizer was unscaled or stepped with this scaler since the last update (PyTorch: "
                       "No inf checks were recorded prior to update)", op);
        return -1;
    }
    if (!(be = gdl__be(op, s->dev)) ||
        be->amp_update_scale(GDL__R(s->scale), (int32_t *)s->tracker->data, GDL__R(s->found_inf),
                             s->o.growth_factor, s->o.backoff_factor, s->o.growth_interval) < 0)
        return -1;
    for (i = 0; i < s->nopts; i++)
        if (s->opts[i].stage != GDL__SC_READY) {
            if (gdl__scaler_clear_skip(op, s->opts[i].opt) < 0) return -1;
            s->opts[i].stage = GDL__SC_READY;
        }
    return 0;
}

/* gdl_fit's retry of a step that failed (out of memory) after the unscale: back to the step's start (found_inf
   and the skip flag cleared: the retry computes them again). Nothing is queued when the last step ended. */
static int gdl__scaler_rearm(gdl_grad_scaler *s, gdl_optimizer *opt) {
    gdl__scaler_opt *r = s->o.enabled && s->scale ? gdl__scaler_find(s, opt) : NULL;
    const gdl_backend *be;
    if (!r || r->stage == GDL__SC_READY) return 0;
    if (!(be = gdl__be("gdl_fit", s->dev)) || be->memset0(s->found_inf->data, sizeof(gdl_real)) < 0 ||
        gdl__scaler_clear_skip("gdl_fit", opt) < 0)
        return -1;
    r->stage = GDL__SC_READY;
    return 0;
}

GPUDL_API double gdl_grad_scaler_get_scale(gdl_grad_scaler *s) {
    if (!s) {
        gdl__null_arg("gdl_grad_scaler_get_scale", "s");
        return NAN;
    }
    if (!s->o.enabled) return 1.0;
    return s->scale ? gdl_item(s->scale) : s->pending_scale;
}

GPUDL_API int64_t gdl_grad_scaler_get_growth_tracker(gdl_grad_scaler *s) {
    if (!s) {
        gdl__null_arg("gdl_grad_scaler_get_growth_tracker", "s");
        return -1;
    }
    return s->tracker ? (int64_t)gdl_item(s->tracker) : s->pending_tracker;
}

GPUDL_API int gdl_grad_scaler_set_state(gdl_grad_scaler *s, double scale, int64_t growth_tracker) {
    const char *op = "gdl_grad_scaler_set_state";
    if (!s) {
        gdl__null_arg(op, "s");
        return -1;
    }
    if (!(scale > 0) || (float)scale - (float)scale != 0 || growth_tracker < 0 || growth_tracker > INT32_MAX) {
        gdl__set_error("%s: scale %g must be > 0 and finite as a float, growth_tracker %lld in [0, 2^31)", op, scale,
                       (long long)growth_tracker);
        return -1;
    }
    if (s->scale) {
        gdl_real v = (gdl_real)(float)scale;
        int32_t t = (int32_t)growth_tracker;
        if (gdl__copy_bytes(op, s->scale->data, s->dev, &v, gdl_cpu(), sizeof v) < 0 ||
            gdl__copy_bytes(op, s->tracker->data, s->dev, &t, gdl_cpu(), sizeof t) < 0)
            return -1;
    }
    s->pending_scale = (double)(float)scale;
    s->pending_tracker = growth_tracker;
    return 0;
}

/* The gradients of params, all on one device, clipped there by one backend
   call (no read back); the norm goes to *dnorm (device memory) if given.
   0; 1 when the gradients are on several devices (the caller clips them
   the slow way); -1 + error. */
static int gdl__clip_fused(const char *op, gdl_tensor *const *params, int n, double max_norm, double *dnorm,
                           const gdl_backend **be_out) {
    gdl_real **g;
    int64_t *ns;
    int i, k = 0;
    gdl_device dev = gdl_cpu();
    const gdl_backend *be;
    if (n < 0 || (n > 0 && !params)) {
        gdl__set_error("%s: bad parameter list (n %d, params %s)", op, n, params ? "given" : "NULL");
        return -1;
    }
    if (!(max_norm >= 0)) {
        gdl__set_error("%s: max_norm %g must be >= 0", op, max_norm);
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (!params[i]) {
            gdl__set_error("%s: params[%d] is NULL", op, i);
            return -1;
        }
        if (!params[i]->grad || !params[i]->grad->numel) continue;
        if (params[i]->grad->dtype != GDL_F32) { /* the kernels read f32 */
            gdl__set_error("%s: params[%d] %s has a %s gradient; gradient clipping takes f32 gradients", op, i,
                           gdl_shape_str(params[i]), gdl_dtype_name(params[i]->grad->dtype));
            return -1;
        }
        if (k++ == 0) dev = params[i]->grad->device;
        else if (!gdl_device_equal(dev, params[i]->grad->device)) return 1;
    }
    if (!(be = gdl__be(op, dev))) return -1;
    *be_out = be;
    /* the lists live in the step arena: a steady-state step stays allocation-free */
    g = (gdl_real **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_real *) * (size_t)(k + 1));
    ns = (int64_t *)gdl__arena_alloc(&gdl__host_arena, sizeof(int64_t) * (size_t)(k + 1));
    if (!g || !ns) {
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    for (i = 0, k = 0; i < n; i++)
        if (params[i]->grad && params[i]->grad->numel) {
            g[k] = GDL__R(params[i]->grad);
            ns[k++] = params[i]->grad->numel;
        }
    return be->clip_grad_norm(k, g, ns, max_norm, dnorm) < 0 ? -1 : 0;
}

GPUDL_API double gdl_clip_grad_norm(gdl_tensor *const *params, int n, double max_norm) {
    const char *op = "gdl_clip_grad_norm";
    double total = 0, norm, coef, *dnorm = NULL;
    const gdl_backend *fbe = NULL;
    int i, rc;
    gdl_device dev = gdl_cpu();
    for (i = 0; i < n && params; i++) /* where the norm is computed: the first gradient's device */
        if (params[i] && params[i]->grad && params[i]->grad->numel) {
            dev = params[i]->grad->device;
            break;
        }
    if (!(dnorm = (double *)gdl__scratch(op, dev, sizeof(double)))) return -1;
    rc = gdl__clip_fused(op, params, n, max_norm, dnorm, &fbe);
    if (rc < 0) return -1;
    if (rc == 0) { /* one device: one call, then the norm's one read back */
        if (fbe->copy(&norm, dnorm, sizeof norm, dev.type == GDL_DEVICE_CPU ? 2 : 1) < 0) return -1;
        return norm;
    }
    /* gradients on several devices: a norm per device, added on the host */
    for (i = 0; i < n; i++) {
        const gdl_backend *be;
        double s = 0;
        if (!params[i]->grad || !params[i]->grad->numel) continue;
        if (params[i]->grad->dtype != GDL_F32) {
            gdl__set_error("%s: params[%d] %s has a %s gradient; gradient clipping takes f32 gradients", op, i,
                           gdl_shape_str(params[i]), gdl_dtype_name(params[i]->grad->dtype));
            return -1;
        }
        if (!(be = gdl__be(op, params[i]->grad->device)) || be->sum_squares(params[i]->grad->numel,
                                                                             GDL__R(params[i]->grad), &s) < 0)
            return -1;
        total += s;
    }
    norm = sqrt(total);
    coef = max_norm / (norm + 1e-6);
    if (!(coef >= 1)) /* PyTorch multiplies by min(coef, 1); a NaN norm spreads NaN as there */
        for (i = 0; i < n; i++) {
            const gdl_backend *be;
            gdl_tensor *g = params[i]->grad;
            if (!g || !g->numel) continue;
            if (!(be = gdl__be(op, g->device)) || be->unary(GDL_UN_SCALE, g->numel, GDL__R(g), GDL__R(g), (gdl_real)coef) < 0)
                return -1;
        }
    return norm;
}

GPUDL_API int gdl_clip_grad_norm_nosync(gdl_tensor *const *params, int n, double max_norm) {
    const gdl_backend *be = NULL;
    int rc = gdl__clip_fused("gdl_clip_grad_norm_nosync", params, n, max_norm, NULL, &be);
    if (rc == 1) return gdl_clip_grad_norm(params, n, max_norm) < 0 ? -1 : 0; /* several devices: read back */
    return rc;
}

GPUDL_API double gdl_optim_clip_grad_norm(gdl_optimizer *opt, double max_norm) {
    gdl_tensor **ps;
    double r;
    int i;
    if (!opt) {
        gdl__null_arg("gdl_optim_clip_grad_norm", "opt");
        return -1;
    }
    if (opt->master != GDL_F32) {
        gdl__set_error("gdl_optim_clip_grad_norm: the optimizer's parameters are %s with f32 master weights "
                       "(gdl_optim_set_master_weights), so their gradients are %s; gradient clipping takes f32 "
                       "gradients", gdl_dtype_name(opt->master), gdl_dtype_name(opt->master));
        return -1;
    }
    /* the list lives in the step arena: a steady-state step stays allocation-free */
    ps = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)(opt->nparams + 1));
    if (!ps) {
        gdl__set_error("gdl_optim_clip_grad_norm: out of memory");
        return -1;
    }
    for (i = 0; i < opt->nparams; i++) ps[i] = opt->params[i].p;
    r = gdl_clip_grad_norm(ps, opt->nparams, max_norm);
    return r;
}

GPUDL_API int gdl_optim_set_master_weights(gdl_optimizer *opt, gdl_dtype dt) {
    const char *op = "gdl_optim_set_master_weights";
    gdl_dtype was;
    if (!opt) {
        gdl__null_arg(op, "opt");
        return -1;
    }
    if (dt != GDL_F32 && dt != GDL_BF16 && dt != GDL_F16) {
        gdl__set_error("%s: dtype %s: the parameters can be bf16 or f16 (with f32 master weights), or f32 (off)", op,
                       gdl_dtype_name(dt));
        return -1;
    }
    if (dt == opt->master) return 0;
    if (gdl__capturing) {
        gdl__set_error("%s: the parameters' dtype (%s to %s) cannot change inside a CUDA graph capture", op,
                       gdl_dtype_name(opt->master), gdl_dtype_name(dt));
        return -1;
    }
    if (dt != GDL_F32 && opt->scaler && opt->scaler->o.enabled) {
        gdl__set_error("%s: the optimizer has a GradScaler, which unscales f32 gradients; %s parameters with master "
                       "weights have %s gradients (bf16 needs no loss scaling)", op, gdl_dtype_name(dt),
                       gdl_dtype_name(dt));
        return -1;
    }
    was = opt->master;
    opt->master = dt;
    opt->layout_dirty = 1;
    if (opt->nparams && gdl__opt_layout(op, opt) < 0) {
        opt->master = was; /* the next use moves what did move back */
        opt->layout_dirty = 1;
        return -1;
    }
    return 0;
}

GPUDL_API gdl_dtype gdl_optim_master_weights(const gdl_optimizer *opt) { return opt ? opt->master : GDL_F32; }

GPUDL_API gdl_tensor *gdl_optim_master_weight(gdl_optimizer *opt, int i) {
    const char *op = "gdl_optim_master_weight";
    if (!opt) {
        gdl__null_arg(op, "opt");
        return NULL;
    }
    if (i < 0 || i >= opt->nparams) {
        gdl__set_error("%s: parameter %d out of range (the optimizer has %d)", op, i, opt->nparams);
        return NULL;
    }
    if (opt->master == GDL_F32) {
        gdl__set_error("%s: the optimizer keeps no master weights (gdl_optim_set_master_weights)", op);
        return NULL;
    }
    if (gdl__opt_layout(op, opt) < 0) return NULL;
    return opt->params[i].master;
}

/* Master weights into the parameters (rounded to nearest even), after they were written (a checkpoint load). */
static int gdl__opt_round_params(const char *op, gdl_optimizer *opt) {
    int i;
    for (i = 0; i < opt->nparams; i++) {
        gdl__opt_param *pp = &opt->params[i];
        const gdl_backend *be;
        if (!pp->master) continue;
        if (!(be = gdl__be(op, pp->p->device)) ||
            be->cast(pp->p->data, pp->p->dtype, pp->master->data, GDL_F32, pp->p->numel) < 0)
            return -1;
    }
    return 0;
}

GPUDL_API int gdl_optim_state(gdl_optimizer *opt, const char **names, gdl_tensor **tensors, int max) {
    int i, k, count = 0;
    if (!opt) {
        gdl__null_arg("gdl_optim_state", "opt");
        return -1;
    }
    if (max < 0) {
        gdl__set_error("gdl_optim_state: max %d must be >= 0", max);
        return -1;
    }
    /* the state lives in the flat blocks; the step counts are read back from there (the one wait), and
       a count written into its step tensor afterwards (a checkpoint load) goes up at the next step */
    if (gdl__opt_layout("gdl_optim_state", opt) < 0 || gdl__opt_steps_down("gdl_optim_state", opt) < 0) return -1;
    if (opt->steps_dirty != 1) opt->steps_dirty = 2;
    for (i = 0; i < opt->nparams; i++) {
        gdl__opt_param *pp = &opt->params[i];
        gdl_tensor *ts[3];
        if (!gdl__opt_has_state(opt, pp)) continue;
        if (gdl__opt_ensure_state("gdl_optim_state", opt, pp, i) < 0) return -1;
        ts[0] = pp->step;
        ts[1] = pp->s1;
        ts[2] = pp->s2;
        for (k = 0; k < 3; k++) {
            if (!ts[k]) continue;
            if (count < max) {
                if (names) names[count] = pp->names[k];
                if (tensors) tensors[count] = ts[k];
            }
            count++;
        }
    }
    return count;
}

GPUDL_API int64_t gdl_optim_get_step(const gdl_optimizer *opt) { return opt ? opt->steps : -1; }
GPUDL_API int gdl_optim_set_step(gdl_optimizer *opt, int64_t step) {
    if (!opt || step < 0) {
        if (!opt) gdl__null_arg("gdl_optim_set_step", "opt");
        else gdl__set_error("gdl_optim_set_step: step %lld must be >= 0", (long long)step);
        return -1;
    }
    opt->steps = step;
    return 0;
}
GPUDL_API int gdl_optim_num_groups(const gdl_optimizer *opt) { return opt ? opt->ngroups : -1; }
GPUDL_API int gdl_optim_num_params(const gdl_optimizer *opt) { return opt ? opt->nparams : -1; }

static gdl__opt_group *gdl__opt_group_at(const char *op, const gdl_optimizer *opt, int group) {
    if (!opt) {
        gdl__null_arg(op, "opt");
        return NULL;
    }
    if (group < 0 || group >= opt->ngroups) {
        gdl__set_error("%s: group %d out of range (the optimizer has %d groups)", op, group, opt->ngroups);
        return NULL;
    }
    return &opt->groups[group];
}

GPUDL_API double gdl_optim_get_lr(const gdl_optimizer *opt, int group) {
    const gdl__opt_group *g = gdl__opt_group_at("gdl_optim_get_lr", opt, group);
    return g ? g->lr : NAN;
}
GPUDL_API int gdl_optim_set_lr(gdl_optimizer *opt, int group, double lr) {
    gdl__opt_group *g = gdl__opt_group_at("gdl_optim_set_lr", opt, group);
    if (!g) return -1;
    if (!(lr >= 0) || lr == INFINITY) {
        gdl__set_error("gdl_optim_set_lr: invalid learning rate %g (must be >= 0)", lr);
        return -1;
    }
    g->lr = lr;
    return gdl__opt_push_hyper("gdl_optim_set_lr", opt); /* into the flat blocks, asynchronously */
}
GPUDL_API double gdl_optim_get_momentum(const gdl_optimizer *opt, int group) {
    const gdl__opt_group *g = gdl__opt_group_at("gdl_optim_get_momentum", opt, group);
    return g ? (opt->kind == GDL__OPT_SGD ? g->momentum : g->beta1) : NAN;
}
GPUDL_API int gdl_optim_set_momentum(gdl_optimizer *opt, int group, double momentum) {
    gdl__opt_group *g = gdl__opt_group_at("gdl_optim_set_momentum", opt, group);
    if (!g) return -1;
    if (!(momentum >= 0 && momentum < 1)) {
        gdl__set_error("gdl_optim_set_momentum: %s %g must be in [0,1)",
                       opt->kind == GDL__OPT_SGD ? "momentum" : "beta1", momentum);
        return -1;
    }
    if (opt->kind == GDL__OPT_SGD) g->momentum = momentum;
    else g->beta1 = momentum;
    return gdl__opt_push_hyper("gdl_optim_set_momentum", opt);
}

/* ---------------------------------------------------------------------------
   Learning-rate schedulers
   ------------------------------------------------------------------------- */

enum { GDL__SCHED_STEP, GDL__SCHED_COSINE, GDL__SCHED_ONECYCLE, GDL__SCHED_LINEAR };

struct gdl_scheduler {
    int kind;
    gdl_optimizer *opt;
    int64_t last_epoch;
    int ngroups;       /* the optimizer's groups when the scheduler was made */
    double *base_lrs;  /* per group: initial_lr */
    double *last_lr;   /* per group: the lr set last */
    int64_t n;         /* step_size, T_max, total_steps or total_iters */
    double a, b;       /* gamma | eta_min | start_factor, end_factor | max_lr */
    double pct_start, final_div;   /* OneCycle */
    int cycle_momentum;
    double base_m, max_m;
};

/* PyTorch's _annealing_cos */
static double gdl__sched_cos(double start, double end, double pct) {
    return end + (start - end) / 2.0 * (cos(3.141592653589793 * pct) + 1);
}

/* lr (and momentum, OneCycle) of group g at step t */
static double gdl__sched_lr(const gdl_scheduler *s, int g, int64_t t, double *momentum) {
    double base = s->base_lrs[g];
    switch (s->kind) {
    case GDL__SCHED_STEP: return base * pow(s->a, (double)(t / s->n));
    case GDL__SCHED_COSINE:
        return s->a + (base - s->a) * (1 + cos(3.141592653589793 * (double)t / (double)s->n)) / 2;
    case GDL__SCHED_LINEAR:
        return base * (s->a + (s->b - s->a) * (double)(t < s->n ? t : s->n) / (double)s->n);
    default: { /* OneCycle, two phases as PyTorch (three_phase=False) */
        double end1 = s->pct_start * (double)s->n - 1, end2 = (double)s->n - 1, pct, lr, initial = base;
        double max_lr = s->a, min_lr = initial / s->final_div;
        if ((double)t <= end1) {
            pct = (double)t / end1;
            lr = gdl__sched_cos(initial, max_lr, pct);
            *momentum = gdl__sched_cos(s->max_m, s->base_m, pct);
        } else {
            pct = ((double)t - end1) / (end2 - end1);
            lr = gdl__sched_cos(max_lr, min_lr, pct);
            *momentum = gdl__sched_cos(s->base_m, s->max_m, pct);
        }
        return lr;
    }
    }
}

static void gdl__sched_apply(gdl_scheduler *s) {
    int g;
    for (g = 0; g < s->ngroups && g < s->opt->ngroups; g++) {
        double m = 0, lr = gdl__sched_lr(s, g, s->last_epoch, &m);
        gdl__opt_group *gr = &s->opt->groups[g];
        gr->lr = lr;
        s->last_lr[g] = lr;
        if (s->kind == GDL__SCHED_ONECYCLE && s->cycle_momentum) {
            if (s->opt->kind == GDL__OPT_SGD) gr->momentum = m;
            else gr->beta1 = m;
        }
    }
    /* into the optimizer's flat blocks now (asynchronous copies); an error here shows at its next step,
       which writes what is still missing */
    if (gdl__opt_push_hyper("gdl_scheduler_step", s->opt) < 0) gdl_clear_error();
}

static gdl_scheduler *gdl__sched_new(const char *op, int kind, gdl_optimizer *opt) {
    gdl_scheduler *s;
    int g;
    if (!opt) {
        gdl__null_arg(op, "opt");
        return NULL;
    }
    if (opt->ngroups == 0) {
        gdl__set_error("%s: the optimizer has no parameter groups yet (add parameters first)", op);
        return NULL;
    }
    s = (gdl_scheduler *)GPUDL_MALLOC(sizeof(gdl_scheduler));
    if (!s) {
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->base_lrs = (double *)GPUDL_MALLOC(sizeof(double) * 2 * (size_t)opt->ngroups);
    if (!s->base_lrs) {
        GPUDL_FREE(s);
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    s->last_lr = s->base_lrs + opt->ngroups;
    s->kind = kind;
    s->opt = opt;
    s->ngroups = opt->ngroups;
    for (g = 0; g < opt->ngroups; g++) {
        /* PyTorch: group.setdefault('initial_lr', group['lr']); base_lrs = initial_lr */
        if (opt->groups[g].initial_lr < 0) opt->groups[g].initial_lr = opt->groups[g].lr;
        s->base_lrs[g] = opt->groups[g].initial_lr;
        s->last_lr[g] = opt->groups[g].lr;
    }
    return s;
}

GPUDL_API gdl_scheduler *gdl_steplr_new(gdl_optimizer *opt, int step_size, double gamma) {
    gdl_scheduler *s;
    if (step_size < 1 || !(gamma >= 0) || gamma == INFINITY) {
        gdl__set_error("gdl_steplr_new: bad step_size %d (must be >= 1) or gamma %g (must be finite, >= 0)", step_size,
                       gamma);
        return NULL;
    }
    if (!(s = gdl__sched_new("gdl_steplr_new", GDL__SCHED_STEP, opt))) return NULL;
    s->n = step_size;
    s->a = gamma;
    gdl__sched_apply(s);
    return s;
}

GPUDL_API gdl_scheduler *gdl_cosine_lr_new(gdl_optimizer *opt, int T_max, double eta_min) {
    gdl_scheduler *s;
    if (T_max < 1 || !(eta_min >= 0) || eta_min == INFINITY) {
        gdl__set_error("gdl_cosine_lr_new: bad T_max %d (must be >= 1) or eta_min %g (must be finite, >= 0)", T_max,
                       eta_min);
        return NULL;
    }
    if (!(s = gdl__sched_new("gdl_cosine_lr_new", GDL__SCHED_COSINE, opt))) return NULL;
    s->n = T_max;
    s->a = eta_min;
    gdl__sched_apply(s);
    return s;
}

GPUDL_API gdl_scheduler *gdl_linear_warmup_new(gdl_optimizer *opt, double start_factor, double end_factor,
                                               int total_iters) {
    gdl_scheduler *s;
    if (!(start_factor > 0 && start_factor <= 1) || !(end_factor >= 0 && end_factor <= 1) || total_iters < 1) {
        gdl__set_error("gdl_linear_warmup_new: bad start_factor %g (must be in (0,1]), end_factor %g (in [0,1]) or "
                       "total_iters %d (>= 1)", start_factor, end_factor, total_iters);
        return NULL;
    }
    if (!(s = gdl__sched_new("gdl_linear_warmup_new", GDL__SCHED_LINEAR, opt))) return NULL;
    s->n = total_iters;
    s->a = start_factor;
    s->b = end_factor;
    gdl__sched_apply(s);
    return s;
}

GPUDL_API gdl_scheduler *gdl_onecycle_lr_new_ex(gdl_optimizer *opt, double max_lr, int total_steps, double pct_start,
                                                double div_factor, double final_div_factor, int cycle_momentum,
                                                double base_momentum, double max_momentum) {
    const char *op = "gdl_onecycle_lr_new";
    gdl_scheduler *s;
    int g;
    if (total_steps < 1 || !(max_lr > 0) || max_lr == INFINITY || !(pct_start >= 0 && pct_start <= 1) ||
        !(div_factor > 0) || !(final_div_factor > 0)) {
        gdl__set_error("%s: bad max_lr %g (> 0), total_steps %d (>= 1), pct_start %g (in [0,1]), div_factor %g or "
                       "final_div_factor %g (> 0)", op, max_lr, total_steps, pct_start, div_factor, final_div_factor);
        return NULL;
    }
    /* PyTorch divides by (pct_start*total - 1) and by the second phase's length */
    if (pct_start * total_steps - 1 <= 0 || (double)total_steps - pct_start * total_steps <= 0) {
        gdl__set_error("%s: total_steps %d with pct_start %g leaves an empty warm-up or annealing phase", op,
                       total_steps, pct_start);
        return NULL;
    }
    if (cycle_momentum && !(base_momentum >= 0 && max_momentum < 1 && base_momentum <= max_momentum)) {
        gdl__set_error("%s: bad base_momentum %g / max_momentum %g (need 0 <= base <= max < 1)", op, base_momentum,
                       max_momentum);
        return NULL;
    }
    if (!(s = gdl__sched_new(op, GDL__SCHED_ONECYCLE, opt))) return NULL;
    s->n = total_steps;
    s->a = max_lr;
    s->pct_start = pct_start;
    s->final_div = final_div_factor;
    s->cycle_momentum = cycle_momentum != 0;
    s->base_m = base_momentum;
    s->max_m = max_momentum;
    for (g = 0; g < s->ngroups; g++) { /* PyTorch overwrites initial_lr = max_lr / div_factor */
        opt->groups[g].initial_lr = max_lr / div_factor;
        s->base_lrs[g] = max_lr / div_factor;
    }
    gdl__sched_apply(s);
    return s;
}

GPUDL_API gdl_scheduler *gdl_onecycle_lr_new(gdl_optimizer *opt, double max_lr, int total_steps) {
    return gdl_onecycle_lr_new_ex(opt, max_lr, total_steps, 0.3, 25, 1e4, 1, 0.85, 0.95);
}

GPUDL_API int gdl_scheduler_set_last_epoch(gdl_scheduler *s, int64_t last_epoch) {
    if (!s) {
        gdl__null_arg("gdl_scheduler_set_last_epoch", "scheduler");
        return -1;
    }
    if (last_epoch < 0 || (s->kind == GDL__SCHED_ONECYCLE && last_epoch > s->n)) {
        if (last_epoch < 0) gdl__set_error("gdl_scheduler_set_last_epoch: last_epoch %lld must be >= 0", (long long)last_epoch);
        else
            gdl__set_error("gdl_scheduler_set_last_epoch: tried to step %lld times; the specified number of total "
                           "steps is %lld", (long long)last_epoch, (long long)s->n);
        return -1;
    }
    s->last_epoch = last_epoch;
    gdl__sched_apply(s);
    return 0;
}

GPUDL_API int gdl_scheduler_step(gdl_scheduler *s) {
    if (!s) {
        gdl__null_arg("gdl_scheduler_step", "scheduler");
        return -1;
    }
    if (s->kind == GDL__SCHED_ONECYCLE && s->last_epoch + 1 > s->n) {
        gdl__set_error("gdl_scheduler_step: OneCycleLR: tried to step %lld times; the specified number of total "
                       "steps is %lld", (long long)(s->last_epoch + 1), (long long)s->n);
        return -1;
    }
    s->last_epoch++;
    gdl__sched_apply(s);
    return 0;
}

GPUDL_API int64_t gdl_scheduler_get_last_epoch(const gdl_scheduler *s) { return s ? s->last_epoch : -1; }

GPUDL_API double gdl_scheduler_get_lr(const gdl_scheduler *s, int group) {
    if (!s) {
        gdl__null_arg("gdl_scheduler_get_lr", "scheduler");
        return NAN;
    }
    if (group < 0 || group >= s->ngroups) {
        gdl__set_error("gdl_scheduler_get_lr: group %d out of range (the scheduler covers %d groups)", group, s->ngroups);
        return NAN;
    }
    return s->last_lr[group];
}

GPUDL_API void gdl_scheduler_free(gdl_scheduler *s) {
    if (!s) return;
    GPUDL_FREE(s->base_lrs);
    GPUDL_FREE(s);
}

/* ---------------------------------------------------------------------------
   [impl-quant]  Quantized modules ([api-quant]): dynamic quantization of
   Linear, static post-training quantization of Linear and Conv2d (observers,
   prepare / calibrate / convert), model copies, sizes, safetensors files.
   Front end on the CPU: the layers quantize, call the int8 GEMM of
   [impl-gemm-int8] and dequantize on host memory.
   ------------------------------------------------------------------------- */

/* round half to even, as nearbyintf in the default rounding mode, without a call into libm (the
   quantization loops run it per element, vectorised): adding and taking away big = 1.5 * 2^23 leaves v
   rounded to an integer wherever |v| < 2^22. Larger values (there is no NaN here) come back within 1 of v,
   which every caller then clamps into an 8-bit range anyway. big comes from gdl__q_big(), a volatile read
   the compiler cannot fold, so the sum survives any flags (-ffast-math would otherwise cancel it). */
static volatile float gdl__q_big_v = 12582912.0f;
static float gdl__q_big(void) { return gdl__q_big_v; }
static float gdl__q_round(float v, float big) {
    const float t = v + big; /* an assignment: rounded to float also where float maths is wider (x87) */
    return t - big;
}

/* min and max of x[0, n) (0 when n is 0) in 8 independent chains; 1 if x holds a NaN */
static int gdl__q_minmax(const gdl_real *x, int64_t n, float *lo, float *hi) {
    float l[8] = {0}, h[8] = {0};
    int64_t i;
    int k, bad = 0;
    if (n > 0)
        for (k = 0; k < 8; k++) l[k] = h[k] = (float)x[0];
    for (i = 0; i + 8 <= n; i += 8)
        for (k = 0; k < 8; k++) {
            const float v = (float)x[i + k];
            bad |= v != v;
            l[k] = v < l[k] ? v : l[k];
            h[k] = v > h[k] ? v : h[k];
        }
    for (; i < n; i++) {
        const float v = (float)x[i];
        bad |= v != v;
        l[0] = v < l[0] ? v : l[0];
        h[0] = v > h[0] ? v : h[0];
    }
    for (k = 1; k < 8; k++) {
        l[0] = l[k] < l[0] ? l[k] : l[0];
        h[0] = h[k] > h[0] ? h[k] : h[0];
    }
    *lo = l[0];
    *hi = h[0];
    return bad;
}

GPUDL_API gdl_qconfig gdl_qconfig_default(void) {
    gdl_qconfig q;
    memset(&q, 0, sizeof q);
    q.per_channel = 1;
    q.reduce_range = 1;
    q.observer = GDL_QOBS_MINMAX;
    q.averaging_constant = 0.01;
    q.percentile = 0.9999;
    return q;
}

GPUDL_API int gdl_choose_qparams(float min, float max, int qmin, int qmax, float *scale, int32_t *zero_point) {
    double s, zmin, zmax, emin, emax, z;
    if (!scale || !zero_point) {
        gdl__null_arg("gdl_choose_qparams", !scale ? "scale" : "zero_point");
        return -1;
    }
    if (qmin >= qmax || min != min || max != max || min > max) {
        gdl__set_error("gdl_choose_qparams: bad range [%g, %g] or integer range [%d, %d]", (double)min, (double)max,
                       qmin, qmax);
        return -1;
    }
    /* fbgemm's ChooseQuantizationParams (preserve_sparsity off), in its order of operations */
    if (min > 0) min = 0;
    if (max < 0) max = 0;
    s = ((double)max - min) / ((double)qmax - qmin);
    if ((float)s == 0.0f || isinf(1.0f / (float)s)) s = 0.1;
    if (s < 6.1e-5) { /* fbgemm's SMALL_SCALE_THRESHOLD: widen the range instead */
        const float org = (float)s, th = 6.1e-5f;
        s = th;
        if (min == 0.0f) max = th * (float)(qmax - qmin);
        else if (max == 0.0f) min = -th * (float)(qmax - qmin);
        else {
            min *= th / org;
            max *= th / org;
        }
    }
    s = (float)s; /* the scale used is the float one */
    zmin = qmin - min / s;
    zmax = qmax - max / s;
    emin = fabs((double)qmin) - fabs(min / s);
    emax = fabs((double)qmax) - fabs(max / s);
    z = emin < emax ? zmin : zmax;
    *scale = (float)s;
    *zero_point = z < qmin ? qmin : z > qmax ? qmax : (int32_t)nearbyint(z);
    return 0;
}

/* PyTorch's observers' affine parameters (UniformQuantizationObserverBase._calculate_qparams, per tensor,
   in float32): the range widened to hold 0, scale (max - min) / (qmax - qmin) at least FLT_EPSILON, zero point
   qmin - round_half_even(min / scale), clamped. */
static void gdl__qparams_affine(float lo, float hi, int qmin, int qmax, float *s, int32_t *z) {
    const float mn = lo < 0 ? lo : 0, mx = hi > 0 ? hi : 0;
    float sc = (mx - mn) / (float)(qmax - qmin), r;
    if (sc < FLT_EPSILON) sc = FLT_EPSILON;
    r = (float)qmin - gdl__q_round(mn / sc, gdl__q_big());
    *s = sc;
    *z = r < (float)qmin ? qmin : r > (float)qmax ? qmax : (int32_t)r;
}

/* ---- observers (activations, per tensor) ---- */

#define GDL__QHIST_BINS 2048

typedef struct gdl__qobs {
    int kind;            /* GDL_QOBS_* */
    double c, pct;       /* moving average's constant; the histogram's percentile */
    int64_t batches;     /* batches seen */
    float lo, hi;        /* min-max, or their moving averages; the histogram's range */
    double *hist;        /* GDL__QHIST_BINS counts over [lo, hi] */
} gdl__qobs;

/* Re-bins the histogram's counts onto [lo, hi] (a range that holds the old one): each old bin's count goes
   to the new bin holding its centre. */
static void gdl__qobs_rebin(gdl__qobs *o, float lo, float hi) {
    double tmp[GDL__QHIST_BINS];
    const double w = ((double)o->hi - o->lo) / GDL__QHIST_BINS, nw = ((double)hi - lo) / GDL__QHIST_BINS;
    int i;
    memcpy(tmp, o->hist, sizeof tmp);
    memset(o->hist, 0, sizeof tmp);
    for (i = 0; i < GDL__QHIST_BINS; i++)
        if (tmp[i] != 0) {
            int b = nw > 0 ? (int)((o->lo + (i + 0.5) * w - lo) / nw) : 0;
            o->hist[b < 0 ? 0 : b >= GDL__QHIST_BINS ? GDL__QHIST_BINS - 1 : b] += tmp[i];
        }
    o->lo = lo;
    o->hi = hi;
}

/* One batch of values. 0 / -1 (NaN or inf: no range can be taken from them). */
static int gdl__qobs_add(const char *what, gdl__qobs *o, const gdl_real *x, int64_t n) {
    float bl = 0, bh = 0;
    int64_t i;
    int bad = 0;
    if (n <= 0) return 0;
    bad = gdl__q_minmax(x, n, &bl, &bh);
    if (bad || isinf(bl) || isinf(bh)) {
        gdl__set_error("gdl_forward: %s: the observed tensor holds NaN or inf", what);
        return -1;
    }
    if (o->kind == GDL_QOBS_MOVING_AVERAGE && o->batches > 0) {
        o->lo = (float)(o->lo + o->c * ((double)bl - o->lo));
        o->hi = (float)(o->hi + o->c * ((double)bh - o->hi));
    } else if (o->kind != GDL_QOBS_HISTOGRAM) {
        if (o->batches == 0 || bl < o->lo) o->lo = bl;
        if (o->batches == 0 || bh > o->hi) o->hi = bh;
    } else {
        double w;
        if (!o->hist && !(o->hist = (double *)GPUDL_MALLOC(sizeof(double) * GDL__QHIST_BINS))) {
            gdl__set_error("gdl_forward: %s: out of memory", what);
            return -1;
        }
        if (o->batches == 0) {
            memset(o->hist, 0, sizeof(double) * GDL__QHIST_BINS);
            o->lo = bl;
            o->hi = bh > bl ? bh : bl + (fabsf(bl) > 1 ? fabsf(bl) * 1e-6f : 1e-6f);
        } else if (bl < o->lo || bh > o->hi) {
            gdl__qobs_rebin(o, bl < o->lo ? bl : o->lo, bh > o->hi ? bh : o->hi);
        }
        w = ((double)o->hi - o->lo) / GDL__QHIST_BINS;
        for (i = 0; i < n; i++) {
            int b = (int)(((double)x[i] - o->lo) / w);
            o->hist[b < 0 ? 0 : b >= GDL__QHIST_BINS ? GDL__QHIST_BINS - 1 : b] += 1;
        }
    }
    o->batches++;
    return 0;
}

/* The observer's range: min-max, the moving averages, or the histogram's percentiles (pct and 1 - pct). */
static void gdl__qobs_range(const gdl__qobs *o, float *lo, float *hi) {
    double total = 0, acc = 0, w;
    int i, first = -1, last = -1;
    *lo = o->lo;
    *hi = o->hi;
    if (o->kind != GDL_QOBS_HISTOGRAM || !o->hist) return;
    for (i = 0; i < GDL__QHIST_BINS; i++) total += o->hist[i];
    w = ((double)o->hi - o->lo) / GDL__QHIST_BINS;
    for (i = 0; i < GDL__QHIST_BINS; i++) {
        acc += o->hist[i];
        if (first < 0 && acc > (1 - o->pct) * total) first = i;
        if (last < 0 && acc >= o->pct * total) last = i;
    }
    if (first > 0) *lo = (float)(o->lo + first * w); /* bin 0 keeps the exact minimum */
    if (last >= 0 && last < GDL__QHIST_BINS - 1) *hi = (float)(o->lo + (last + 1) * w);
}

/* ---- quantized layers: DynamicQuantizedLinear, QuantizedLinear(ReLU), QuantizedConv(ReLU)2d ---- */

enum { GDL__Q_DYNAMIC, GDL__Q_STATIC };

typedef struct gdl__qlayer {
    int mode, conv, relu;  /* GDL__Q_*; a Conv2d; ReLU fused */
    int64_t in, out;       /* the GEMM's K (in_features, or in_channels*kh*kw) and N */
    int64_t ia[12];        /* the float module's configuration (Conv2d: geometry) */
    int per_channel, reduce_range;
    int8_t *w;             /* [out][in] */
    float *w_scale;        /* [out], or [1] per tensor */
    int32_t *w_zp;         /* as w_scale: all 0 (symmetric) */
    float *bias;           /* [out] or NULL */
    float in_scale, out_scale;   /* static: the activations' parameters */
    int32_t in_zp, out_zp;
    gdl__qpack pack;       /* w packed for the GEMM, with its row sums */
} gdl__qlayer;

static void gdl__qlayer_free(void *p) {
    gdl__qlayer *q = (gdl__qlayer *)p;
    if (!q) return;
    GPUDL_FREE(q->w);
    GPUDL_FREE(q->w_scale);
    GPUDL_FREE(q->w_zp);
    GPUDL_FREE(q->bias);
    gdl__qpack_free(&q->pack);
    GPUDL_FREE(q);
}

static int64_t gdl__qlayer_nscale(const gdl__qlayer *q) { return q->per_channel ? q->out : 1; }
static int gdl__qlayer_qmax(const gdl__qlayer *q) { return q->reduce_range ? 127 : 255; }

/* Symmetric int8 weights from an f32 [out][in] (PyTorch's (per_channel_)symmetric MinMax observer): the
   scale of each row (or of the whole) is max(|min|, |max|) / 127.5, at least FLT_EPSILON. */
static void gdl__qlayer_quantize_weight(gdl__qlayer *q, const gdl_real *w) {
    const int64_t rows = q->per_channel ? 1 : q->out, groups = gdl__qlayer_nscale(q);
    const float big = gdl__q_big();
    int64_t g, i;
    for (g = 0; g < groups; g++) {
        const gdl_real *src = w + g * rows * q->in;
        int8_t *dst = q->w + g * rows * q->in;
        float lo = 0, hi = 0, s, inv;
        for (i = 0; i < rows * q->in; i++) {
            const float v = (float)src[i];
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
        s = (-lo > hi ? -lo : hi) / 127.5f;
        if (s < FLT_EPSILON) s = FLT_EPSILON;
        inv = 1.0f / s;
        for (i = 0; i < rows * q->in; i++) {
            const float r = gdl__q_round((float)src[i] * inv, big);
            dst[i] = (int8_t)(r < -128 ? -128 : r > 127 ? 127 : r);
        }
        q->w_scale[g] = s;
        q->w_zp[g] = 0;
    }
}

static gdl_tensor *gdl__qlayer_forward(gdl_module *m, gdl_tensor *x);
static int gdl__is_qlayer(const gdl_module *m) { return m && m->kind == GDL__M_CUSTOM && m->fwd == gdl__qlayer_forward; }

static const char *gdl__qlayer_kind(const gdl__qlayer *q) {
    if (q->mode == GDL__Q_DYNAMIC) return "DynamicQuantizedLinear";
    if (q->conv) return q->relu ? "QuantizedConvReLU2d" : "QuantizedConv2d";
    return q->relu ? "QuantizedLinearReLU" : "QuantizedLinear";
}

/* A quantized layer from a Linear or Conv2d's module configuration (ia), its f32 weight and bias (CPU), and
   for a static layer the activations' parameters. */
static gdl_module *gdl__qlayer_new(const char *op, const char *who, int mode, int conv, int relu, const int64_t *ia,
                                   const gdl_tensor *W, const gdl_tensor *b, const gdl_qconfig *qc,
                                   const float *act_s, const int32_t *act_z) {
    gdl__qlayer *q;
    gdl_module *m;
    int64_t i;
    if (W->device.type != GDL_DEVICE_CPU || W->dtype != GDL_F32 ||
        (b && (b->device.type != GDL_DEVICE_CPU || b->dtype != GDL_F32))) {
        gdl__set_error("%s: %s has a %s weight on %s: quantized modules are made from f32 weights on the CPU "
                       "(gdl_module_to(m, gdl_cpu()) first)", op, who, gdl_dtype_name(W->dtype),
                       gdl_device_str(W->device));
        return NULL;
    }
    if (conv && ia[10] != 1) {
        gdl__set_error("%s: %s has groups=%lld: quantized convolutions take groups=1 only", op, who, (long long)ia[10]);
        return NULL;
    }
    if (!(q = (gdl__qlayer *)GPUDL_MALLOC(sizeof *q))) {
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    memset(q, 0, sizeof *q);
    q->mode = mode;
    q->conv = conv;
    q->relu = relu;
    memcpy(q->ia, ia, sizeof q->ia);
    q->in = conv ? ia[0] * ia[2] * ia[3] : ia[0];
    q->out = ia[1];
    q->per_channel = qc->per_channel != 0;
    q->reduce_range = qc->reduce_range != 0;
    if (act_s) {
        q->in_scale = act_s[0];
        q->out_scale = act_s[1];
        q->in_zp = act_z[0];
        q->out_zp = act_z[1];
    }
    if (q->in > GDL_GEMM_INT8_MAX_K || q->out > INT32_MAX) {
        gdl__qgemm_check(op, 1, (int)(q->out > INT32_MAX ? -1 : q->out), (int)(q->in > INT32_MAX ? INT32_MAX : q->in));
        gdl__qlayer_free(q);
        return NULL;
    }
    q->w = (int8_t *)GPUDL_MALLOC((size_t)(q->in * q->out));
    q->w_scale = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)gdl__qlayer_nscale(q));
    q->w_zp = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)gdl__qlayer_nscale(q));
    q->bias = b ? (float *)GPUDL_MALLOC(sizeof(float) * (size_t)q->out) : NULL;
    if (!q->w || !q->w_scale || !q->w_zp || (b && !q->bias)) {
        gdl__set_error("%s: out of memory", op);
        gdl__qlayer_free(q);
        return NULL;
    }
    gdl__qlayer_quantize_weight(q, (const gdl_real *)W->data);
    if (b)
        for (i = 0; i < q->out; i++) q->bias[i] = (float)((const gdl_real *)b->data)[i];
    if (gdl__qpack_init(op, &q->pack, (int)q->out, (int)q->in, q->w, (ptrdiff_t)q->in) < 0) {
        gdl__qlayer_free(q);
        return NULL;
    }
    if (!(m = gdl_nn_custom(gdl__qlayer_kind(q), gdl__qlayer_forward, q, gdl__qlayer_free))) return NULL;
    memcpy(m->ia, ia, sizeof m->ia);
    return m;
}

/* x (f32) -> u8 with scale s and zero point z into rows of KP bytes (the padding 0). */
static void gdl__q_quantize_rows(const gdl_real *x, int64_t rows, int64_t k, float s, int32_t z, int qmax,
                                 uint8_t *a, int64_t KP) {
    const float inv = 1.0f / s, big = gdl__q_big();
    int64_t i, j;
    for (i = 0; i < rows; i++) {
        const gdl_real *xr = x + i * k;
        uint8_t *ar = a + i * KP;
        for (j = 0; j < k; j++) {
            const float r = gdl__q_round((float)xr[j] * inv, big) + (float)z;
            ar[j] = (uint8_t)(r < 0 ? 0 : r > (float)qmax ? qmax : r);
        }
        for (; j < KP; j++) ar[j] = 0;
    }
}

/* One output value from its int32 sum: dequantized with bias, ReLU; for a static layer rounded onto the
   output's grid (requantized, then dequantized: the value the next layer's quantization gets back exactly). */
static gdl_real gdl__q_out(const gdl__qlayer *q, int32_t acc, int64_t n, float sa, int32_t za) {
    const int32_t v = acc - za * q->pack.colsum[n];
    float y = (float)v * (sa * q->w_scale[q->per_channel ? n : 0]) + (q->bias ? q->bias[n] : 0.0f), r;
    if (q->relu && y < 0) y = 0;
    if (q->mode == GDL__Q_DYNAMIC) return (gdl_real)y;
    r = gdl__q_round(y / q->out_scale, gdl__q_big()) + (float)q->out_zp;
    r = r < 0 ? 0 : r > (float)gdl__qlayer_qmax(q) ? (float)gdl__qlayer_qmax(q) : r;
    return (gdl_real)((r - (float)q->out_zp) * q->out_scale);
}

/* u8 columns of sample xq [C,H,W] (already quantized): row p = output position, KP bytes per row; taps
   outside the image hold the zero point (the quantized 0.0). */
static void gdl__q_im2col(const gdl__qlayer *q, const uint8_t *xq, int64_t H, int64_t W, int64_t OH, int64_t OW,
                          int32_t za, uint8_t *cols, int64_t KP) {
    const int64_t C = q->ia[0], kh = q->ia[2], kw = q->ia[3], sh = q->ia[4], sw = q->ia[5];
    const int64_t ph = q->ia[6], pw = q->ia[7], dh = q->ia[8], dw = q->ia[9];
    int64_t oy, ox, c, i, j;
    for (oy = 0; oy < OH; oy++)
        for (ox = 0; ox < OW; ox++) {
            uint8_t *row = cols + (oy * OW + ox) * KP, *d = row;
            for (c = 0; c < C; c++)
                for (i = 0; i < kh; i++) {
                    const int64_t y = oy * sh - ph + i * dh;
                    for (j = 0; j < kw; j++) {
                        const int64_t xx = ox * sw - pw + j * dw;
                        *d++ = (y < 0 || y >= H || xx < 0 || xx >= W) ? (uint8_t)za : xq[(c * H + y) * W + xx];
                    }
                }
            while (d < row + KP) *d++ = 0;
        }
}

/* checks x for layer m: f32 on the CPU, [..., in] (Linear) or [N, C, H, W] (Conv2d). 0 / -1. */
static int gdl__qlayer_check(const gdl_module *m, const gdl__qlayer *q, const gdl_tensor *x) {
    char want[96];
    const int ok = !q->conv ? x->ndim >= 1 && x->shape[x->ndim - 1] == q->in : x->ndim == 4 && x->shape[1] == q->ia[0];
    if (x->dtype == GDL_F32 && x->device.type == GDL_DEVICE_CPU && ok) return 0;
    if (!q->conv) snprintf(want, sizeof want, "f32 [..., %lld] on the CPU", (long long)q->in);
    else snprintf(want, sizeof want, "f32 [N, %lld, H, W] on the CPU", (long long)q->ia[0]);
    gdl__set_error("gdl_forward: %s (in=%lld, out=%lld, dtype=qint8): expected input %s, got %s %s on %s",
                   gdl__nn_label(m), (long long)(q->conv ? q->ia[0] : q->in), (long long)q->out, want,
                   gdl_dtype_name(x->dtype), gdl_shape_str(x), gdl_device_str(x->device));
    return -1;
}

/* The forward of every quantized layer: see [api-quant]. */
static gdl_tensor *gdl__qlayer_forward(gdl_module *m, gdl_tensor *x) {
    const gdl__qlayer *q = (const gdl__qlayer *)m->user;
    const char *op = "gdl_forward";
    const int64_t KP = q->pack.KP;
    const int qmax = gdl__qlayer_qmax(q);
    const gdl_real *xd;
    gdl_real *yd;
    gdl_tensor *y;
    int64_t shape[GDL_MAX_DIMS], rows, i, n, N = 1, OH = 1, OW = 1, P;
    uint8_t *a = NULL, *cols = NULL;
    int32_t *acc = NULL, za = q->in_zp;
    float sa = q->in_scale;
    int rc = 0;
    if (gdl__qlayer_check(m, q, x) < 0) return NULL;
    memcpy(shape, x->shape, sizeof shape);
    if (q->conv) {
        const int64_t *g = q->ia;
        N = x->shape[0];
        OH = (x->shape[2] + 2 * g[6] - g[8] * (g[2] - 1) - 1) / g[4] + 1;
        OW = (x->shape[3] + 2 * g[7] - g[9] * (g[3] - 1) - 1) / g[5] + 1;
        if (OH < 1 || OW < 1) {
            gdl__set_error("gdl_forward: %s: input %s is smaller than the kernel", gdl__nn_label(m), gdl_shape_str(x));
            return NULL;
        }
        shape[1] = q->out;
        shape[2] = OH;
        shape[3] = OW;
        rows = OH * OW; /* per sample */
    } else {
        shape[x->ndim - 1] = q->out;
        rows = q->in ? x->numel / q->in : 0;
    }
    if (rows > INT32_MAX) {
        gdl__set_error("gdl_forward: %s: %lld rows are more than the int8 GEMM takes", gdl__nn_label(m), (long long)rows);
        return NULL;
    }
    if (!(y = gdl__tmp(op, x->ndim, shape, GDL_F32, x->device))) return NULL;
    xd = (const gdl_real *)x->data;
    yd = (gdl_real *)y->data;
    if (q->mode == GDL__Q_DYNAMIC) { /* the batch's range (PyTorch: over the whole input) */
        float lo, hi;
        const int bad = gdl__q_minmax(xd, x->numel, &lo, &hi);
        if (bad || isinf(lo) || isinf(hi)) {
            gdl__set_error("gdl_forward: %s: the input holds NaN or inf: it cannot be quantized", gdl__nn_label(m));
            return NULL;
        }
        if (gdl_choose_qparams(lo, hi, 0, qmax, &sa, &za) < 0) return NULL;
    }
    P = q->conv ? x->numel : rows * KP; /* the quantized input: the image, or the GEMM's rows */
    a = (uint8_t *)GPUDL_MALLOC((size_t)P + 1);
    acc = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)(rows * q->out) + 1);
    if (q->conv) cols = (uint8_t *)GPUDL_MALLOC((size_t)(rows * KP) + 1);
    if (!a || !acc || (q->conv && !cols)) {
        gdl__set_error("gdl_forward: %s: out of memory", gdl__nn_label(m));
        rc = -1;
    }
    if (rc == 0 && !q->conv) {
        gdl__q_quantize_rows(xd, rows, q->in, sa, za, qmax, a, KP);
        rc = gdl__qgemm(op, (int)rows, a, KP, &q->pack, acc, (ptrdiff_t)q->out);
        for (i = 0; i < rows && rc == 0; i++)
            for (n = 0; n < q->out; n++) yd[i * q->out + n] = gdl__q_out(q, acc[i * q->out + n], n, sa, za);
    } else if (rc == 0) {
        const int64_t chw = x->numel / N;
        int64_t s;
        gdl__q_quantize_rows(xd, 1, x->numel, sa, za, qmax, a, x->numel);
        for (s = 0; s < N && rc == 0; s++) {
            gdl_real *ys = yd + s * q->out * rows;
            gdl__q_im2col(q, a + s * chw, x->shape[2], x->shape[3], OH, OW, za, cols, KP);
            rc = gdl__qgemm(op, (int)rows, cols, KP, &q->pack, acc, (ptrdiff_t)q->out);
            for (i = 0; i < rows && rc == 0; i++) /* [position][channel] -> [channel][position] */
                for (n = 0; n < q->out; n++) ys[n * rows + i] = gdl__q_out(q, acc[i * q->out + n], n, sa, za);
        }
    }
    GPUDL_FREE(a);
    GPUDL_FREE(acc);
    GPUDL_FREE(cols);
    return rc == 0 ? y : NULL;
}

/* ---- fake quantization (QAT) ----
   y = (clamp(round(x / s) + z, qmin, qmax) - z) * s, with the clipped
   straight-through estimator as its gradient: dy/dx = 1 where round(x / s) + z
   is within [qmin, qmax], else 0 (PyTorch's fake_quantize_per_*_affine). It is
   made of two differentiable ops on constants: y = x * mask + (fq - x * mask),
   mask the 0/1 tensor above, so autograd needs nothing new. The sum gives fq
   exactly: where mask is 1, x and fq differ by at most s/2 and either fq is 0
   or they are within a factor 2 of each other, so fq - x is exact (Sterbenz)
   and so is x + (fq - x). rows > 0: per channel, x [rows, ...] with scale[r]
   and zp[r]; rows 0: one scale. */
static gdl_tensor *gdl__fake_quant(const char *op, gdl_tensor *x, int rows, const float *scale, const int32_t *zp,
                                   int qmin, int qmax) {
    gdl_tensor *mask, *c;
    const gdl_real *xd = (const gdl_real *)x->data;
    gdl_real *md, *cd;
    float big;
    const int64_t per = rows > 0 ? x->numel / rows : x->numel;
    int64_t i;
    if (x->dtype != GDL_F32 || x->device.type != GDL_DEVICE_CPU) {
        gdl__set_error("%s: fake quantization takes f32 tensors on the CPU, got %s on %s", op, gdl_dtype_name(x->dtype),
                       gdl_device_str(x->device));
        return NULL;
    }
    if (!(mask = gdl__tmp(op, x->ndim, x->shape, GDL_F32, x->device)) ||
        !(c = gdl__tmp(op, x->ndim, x->shape, GDL_F32, x->device)))
        return NULL;
    md = (gdl_real *)mask->data;
    cd = (gdl_real *)c->data;
    big = gdl__q_big();
    for (i = 0; i < x->numel; i++) {
        const int64_t r = rows > 0 ? i / per : 0;
        const float s = scale[r], inv = 1.0f / s, z = (float)zp[r];
        const float q = gdl__q_round((float)xd[i] * inv, big) + z, qc = q < qmin ? (float)qmin : q > qmax ? (float)qmax : q;
        const gdl_real fq = (gdl_real)((qc - z) * s);
        md[i] = q >= qmin && q <= qmax ? 1 : 0;
        cd[i] = fq - xd[i] * md[i];
    }
    return gdl_add(gdl_mul(x, mask), c);
}

GPUDL_API gdl_tensor *gdl_fake_quantize(gdl_tensor *x, float scale, int32_t zero_point, int qmin, int qmax) {
    const char *op = "gdl_fake_quantize";
    if (!x) {
        gdl__null_arg(op, "x");
        return NULL;
    }
    if (!(scale > 0) || isinf(scale) || qmin >= qmax || zero_point < qmin || zero_point > qmax) {
        gdl__set_error("%s: bad scale %g, zero point %d or range [%d, %d]", op, (double)scale, (int)zero_point, qmin,
                       qmax);
        return NULL;
    }
    return gdl__fake_quant(op, x, 0, &scale, &zero_point, qmin, qmax);
}

/* ---- observed layers (prepare): the float layer, its input and output watched ---- */

typedef struct gdl__qprep {
    int conv, relu;
    int qat, frozen;   /* quantization-aware training: fake-quantized; observers no longer updated */
    gdl_qconfig qc;
    gdl__qobs in, out;
} gdl__qprep;

/* the activations' fake quantization with what obs has seen (nothing seen yet: x as it is) */
static gdl_tensor *gdl__qprep_fq(const gdl__qprep *o, const gdl__qobs *obs, gdl_tensor *x) {
    float lo, hi, s;
    int32_t z;
    if (!x || obs->batches == 0) return x;
    gdl__qobs_range(obs, &lo, &hi);
    gdl__qparams_affine(lo, hi, 0, o->qc.reduce_range ? 127 : 255, &s, &z);
    return gdl__fake_quant("gdl_forward", x, 0, &s, &z, 0, o->qc.reduce_range ? 127 : 255);
}

/* the weight's fake quantization, symmetric per output channel (or per tensor), from its current values */
static gdl_tensor *gdl__qprep_fq_weight(const gdl__qprep *o, gdl_tensor *w) {
    const int64_t rows = w->shape[0], per = w->numel / rows;
    const int groups = o->qc.per_channel ? (int)rows : 1;
    float *s = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)groups);
    int32_t *z = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)groups);
    gdl_tensor *r = NULL;
    int64_t g, i;
    if (s && z) {
        for (g = 0; g < groups; g++) {
            const int64_t n = o->qc.per_channel ? per : w->numel;
            const gdl_real *d = (const gdl_real *)w->data + g * per;
            float amax = 0;
            for (i = 0; i < n; i++) amax = fabsf((float)d[i]) > amax ? fabsf((float)d[i]) : amax;
            s[g] = amax / 127.5f < FLT_EPSILON ? FLT_EPSILON : amax / 127.5f;
            z[g] = 0;
        }
        r = gdl__fake_quant("gdl_forward", w, o->qc.per_channel ? (int)rows : 0, s, z, -128, 127);
    } else {
        gdl__set_error("gdl_forward: out of memory");
    }
    GPUDL_FREE(s);
    GPUDL_FREE(z);
    return r;
}

static void gdl__qprep_free(void *p) {
    gdl__qprep *o = (gdl__qprep *)p;
    if (!o) return;
    GPUDL_FREE(o->in.hist);
    GPUDL_FREE(o->out.hist);
    GPUDL_FREE(o);
}

static gdl_tensor *gdl__qprep_forward(gdl_module *m, gdl_tensor *x) {
    gdl__qprep *o = (gdl__qprep *)m->user;
    /* gdl_module_summary's pass (on zeros) is not data: it is not observed */
    const int observe = gdl__nn_nrows == 0;
    gdl_tensor *y, *w = gdl__nn_param(m, 0);
    int s[2], p[2], d[2];
    if (gdl__nn_check_xw(m, x, o->conv, s, p, d) < 0) return NULL;
    if ((observe || o->qat) && (x->dtype != GDL_F32 || x->device.type != GDL_DEVICE_CPU)) {
        gdl__set_error("gdl_forward: %s: observers watch f32 tensors on the CPU, got %s on %s", gdl__nn_label(m),
                       gdl_dtype_name(x->dtype), gdl_device_str(x->device));
        return NULL;
    }
    if (observe && !o->frozen && gdl__qobs_add(gdl__nn_label(m), &o->in, (const gdl_real *)x->data, x->numel) < 0)
        return NULL;
    if (o->qat) { /* the input and the weight as the quantized layer will see them */
        if (!(x = gdl__qprep_fq(o, &o->in, x)) || !(w = gdl__qprep_fq_weight(o, w))) return NULL;
    }
    y = o->conv ? gdl_conv2d_ex(x, w, gdl__nn_param(m, 1), s, p, d, (int)m->ia[10]) : gdl_linear(x, w, gdl__nn_param(m, 1));
    if (y && o->relu) y = gdl_relu(y);
    if (y && observe && !o->frozen && gdl__qobs_add(gdl__nn_label(m), &o->out, (const gdl_real *)y->data, y->numel) < 0)
        return NULL;
    return o->qat ? gdl__qprep_fq(o, &o->out, y) : y;
}

static int gdl__is_qprep(const gdl_module *m) { return m && m->kind == GDL__M_CUSTOM && m->fwd == gdl__qprep_forward; }

/* Folds BatchNorm2d bn (eval: running statistics) into the Conv2d weight and bias of m, as
   torch.nn.utils.fuse_conv_bn_eval: w' = w * g / sqrt(var + eps) per output channel, b' = (b - mean) * g /
   sqrt(var + eps) + beta (a missing bias taken as 0 and added). 0 / -1. */
static int gdl__qprep_fold_bn(const char *op, gdl_module *m, const gdl_module *bn) {
    const int64_t C = m->ia[1];
    const gdl_tensor *mean = gdl__nn_buffer(bn, 0), *var = gdl__nn_buffer(bn, 1);
    const gdl_tensor *g = bn->ia[2] ? gdl__nn_param(bn, 0) : NULL, *be = bn->ia[2] ? gdl__nn_param(bn, 1) : NULL;
    gdl_tensor *w = gdl__nn_param(m, 0), *b = gdl__nn_param(m, 1);
    int64_t c, i, per;
    if (!bn->ia[3] || bn->ia[0] != C) {
        gdl__set_error("%s: %s cannot be folded into the convolution before it: %s", op, gdl__nn_label(bn),
                       !bn->ia[3] ? "it keeps no running statistics" : "its channels differ");
        return -1;
    }
    if (mean->device.type != GDL_DEVICE_CPU || mean->dtype != GDL_F32 || w->dtype != GDL_F32 ||
        w->device.type != GDL_DEVICE_CPU) {
        gdl__set_error("%s: %s: folding takes f32 tensors on the CPU", op, gdl__nn_label(bn));
        return -1;
    }
    if (!b) {
        if (gdl__nn_add_tensor(op, m, "bias", gdl_zeros(1, &C, GDL_F32, gdl_cpu()), 0) < 0) return -1;
        b = gdl__nn_param(m, 1);
    }
    per = w->numel / C;
    for (c = 0; c < C; c++) {
        const double k = (g ? (double)((const gdl_real *)g->data)[c] : 1.0) /
                         sqrt((double)((const gdl_real *)var->data)[c] + bn->fa[0]);
        gdl_real *wc = (gdl_real *)w->data + c * per, *bc = (gdl_real *)b->data + c;
        for (i = 0; i < per; i++) wc[i] = (gdl_real)(wc[i] * k);
        *bc = (gdl_real)((*bc - ((const gdl_real *)mean->data)[c]) * k + (be ? ((const gdl_real *)be->data)[c] : 0));
    }
    return 0;
}

/* An observed copy of Linear / Conv2d lin (ReLU fused when relu; a BatchNorm2d bn after a Conv2d folded into
   it with its running statistics; quantization-aware when qat). */
static gdl_module *gdl__qprep_new(const char *op, const gdl_module *lin, const gdl_module *bn, int relu, int qat,
                                  const gdl_qconfig *qc) {
    const int conv = lin->kind == GDL__M_CONV2D;
    gdl__qprep *o = (gdl__qprep *)GPUDL_MALLOC(sizeof(gdl__qprep));
    gdl_module *m;
    int i;
    if (!o) {
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    memset(o, 0, sizeof *o);
    o->conv = conv;
    o->relu = relu;
    o->qat = qat;
    o->qc = *qc;
    o->in.kind = o->out.kind = qc->observer;
    o->in.c = o->out.c = qc->averaging_constant;
    o->in.pct = o->out.pct = qc->percentile;
    if (!(m = gdl_nn_custom(conv ? (relu ? (qat ? "QATConvReLU2d" : "ObservedConvReLU2d") : (qat ? "QATConv2d" : "ObservedConv2d"))
                                 : (relu ? (qat ? "QATLinearReLU" : "ObservedLinearReLU") : (qat ? "QATLinear" : "ObservedLinear")),
                            gdl__qprep_forward, o, gdl__qprep_free)))
        return NULL;
    memcpy(m->ia, lin->ia, sizeof m->ia);
    for (i = 0; i < lin->nparam; i++)
        if (gdl__nn_add_tensor(op, m, lin->param[i].name, gdl_clone(lin->param[i].t), 0) < 0) {
            gdl__nn_free_tree(m);
            return NULL;
        }
    if (bn && gdl__qprep_fold_bn(op, m, bn) < 0) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

/* The static quantized layer of an observed one: NULL + error when it has not been calibrated. */
static gdl_module *gdl__qprep_convert(const char *op, const gdl_module *m) {
    const gdl__qprep *o = (const gdl__qprep *)m->user;
    const int qmax = o->qc.reduce_range ? 127 : 255;
    float s[2], lo, hi;
    int32_t z[2];
    if (o->in.batches == 0 || o->out.batches == 0) {
        gdl__set_error("%s: %s has observed no data: calibrate the prepared model (gdl_quant_calibrate, or "
                       "forward passes) before converting it", op, gdl__nn_label(m));
        return NULL;
    }
    gdl__qobs_range(&o->in, &lo, &hi);
    gdl__qparams_affine(lo, hi, 0, qmax, &s[0], &z[0]);
    gdl__qobs_range(&o->out, &lo, &hi);
    gdl__qparams_affine(lo, hi, 0, qmax, &s[1], &z[1]);
    return gdl__qlayer_new(op, gdl__nn_label(m), GDL__Q_STATIC, o->conv, o->relu, m->ia, gdl__nn_param(m, 0),
                           gdl__nn_param(m, 1), &o->qc, s, z);
}

/* ---- model copies ---- */

enum { GDL__QC_DYNAMIC, GDL__QC_PREPARE, GDL__QC_PREPARE_QAT, GDL__QC_CONVERT };

/* In a Sequential, how many modules from child i on become one observed layer: Conv2d + BatchNorm2d +
   ReLU (3), Conv2d + BatchNorm2d or Linear / Conv2d + ReLU (2), Linear / Conv2d (1); 0: not a layer. */
static int gdl__quant_fusable(const gdl_module *seq, int i, const gdl_module **bn, int *relu) {
    const gdl_module *a = seq->child[i], *b = i + 1 < seq->nchild ? seq->child[i + 1] : NULL;
    const gdl_module *c = i + 2 < seq->nchild ? seq->child[i + 2] : NULL;
    *bn = NULL;
    *relu = 0;
    if (a->kind != GDL__M_LINEAR && a->kind != GDL__M_CONV2D) return 0;
    if (seq->kind != GDL__M_SEQUENTIAL || !b) return 1;
    if (a->kind == GDL__M_CONV2D && b->kind == GDL__M_BATCHNORM && b->ia[1] == 2) {
        *bn = b;
        *relu = c && c->kind == GDL__M_RELU;
        return 2 + *relu;
    }
    *relu = b->kind == GDL__M_RELU;
    return 1 + *relu;
}

/* A deep copy of m (parameters cloned) in which, by mode: every Linear is dynamically quantized; every
   Linear and Conv2d observed (a ReLU after it in a Sequential fused in, and replaced by an Identity, as
   torch.ao.quantization.fuse_modules does); every observed layer converted. */
static gdl_module *gdl__quant_copy(const char *op, const gdl_module *m, int mode, const gdl_qconfig *qc) {
    gdl_module *c;
    int i;
    if (mode == GDL__QC_DYNAMIC && m->kind == GDL__M_LINEAR)
        return gdl__qlayer_new(op, gdl__nn_label(m), GDL__Q_DYNAMIC, 0, 0, m->ia, gdl__nn_param(m, 0),
                               gdl__nn_param(m, 1), qc, NULL, NULL);
    if ((mode == GDL__QC_PREPARE || mode == GDL__QC_PREPARE_QAT) && (m->kind == GDL__M_LINEAR || m->kind == GDL__M_CONV2D)) {
        if (m->kind == GDL__M_CONV2D && m->ia[10] != 1) {
            gdl__set_error("%s: %s has groups=%lld: quantized convolutions take groups=1 only", op, gdl__nn_label(m),
                           (long long)m->ia[10]);
            return NULL;
        }
        return gdl__qprep_new(op, m, NULL, 0, mode == GDL__QC_PREPARE_QAT, qc);
    }
    if (mode == GDL__QC_CONVERT && gdl__is_qprep(m)) return gdl__qprep_convert(op, m);
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
    for (i = 0; i < m->nchild; i++) {
        const gdl_module *ch = m->child[i], *bn;
        gdl_module *k;
        int relu, j, nf = mode == GDL__QC_PREPARE || mode == GDL__QC_PREPARE_QAT ? gdl__quant_fusable(m, i, &bn, &relu) : 0;
        if (nf > 1 && (ch->kind == GDL__M_LINEAR || ch->ia[10] == 1)) { /* fused: BatchNorm, ReLU become Identities */
            k = gdl__qprep_new(op, ch, bn, relu, mode == GDL__QC_PREPARE_QAT, qc);
            if (!k || gdl__nn_add_child(op, c, ch->name, k) < 0) goto fail;
            for (j = 1; j < nf; j++) {
                k = gdl_nn_identity();
                if (!k || gdl__nn_add_child(op, c, m->child[i + j]->name, k) < 0) goto fail;
            }
            i += nf - 1;
            continue;
        }
        k = gdl__quant_copy(op, ch, mode, qc);
        if (!k || gdl__nn_add_child(op, c, ch->name, k) < 0) goto fail;
    }
    return c;
fail:
    gdl__nn_free_tree(c);
    return NULL;
}

static gdl_module *gdl__quant_copy_root(const char *op, gdl_module *m, int mode, const gdl_qconfig *qc) {
    gdl_qconfig def = gdl_qconfig_default();
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
    grad = gdl_set_grad_enabled(0);
    r = gdl__quant_copy(op, m, mode, qc);
    gdl_set_grad_enabled(grad);
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

/* A quantized module's parameter count (int8 weights and bias) and bytes; 0 for other modules. */
static int64_t gdl__quant_params(const gdl_module *m, int64_t *bytes) {
    const gdl__qlayer *q;
    if (!gdl__is_qlayer(m)) {
        if (bytes) *bytes = 0;
        return 0;
    }
    q = (const gdl__qlayer *)m->user;
    if (bytes)
        *bytes = q->in * q->out + gdl__qlayer_nscale(q) * 8 + (q->bias ? 4 * q->out : 0) +
                 (q->mode == GDL__Q_STATIC ? 16 : 0);
    return q->in * q->out + (q->bias ? q->out : 0);
}

GPUDL_API int64_t gdl_module_nbytes(const gdl_module *m) {
    int64_t n = 0, qb;
    int i;
    if (!m) return -1;
    for (i = 0; i < m->nparam; i++) n += m->param[i].t->numel * (int64_t)gdl_dtype_size(m->param[i].t->dtype);
    for (i = 0; i < m->nbuf; i++) n += m->buf[i].t->numel * (int64_t)gdl_dtype_size(m->buf[i].t->dtype);
    gdl__quant_params(m, &qb);
    n += qb;
    for (i = 0; i < m->nchild; i++) n += gdl_module_nbytes(m->child[i]);
    return n;
}

/* ---- files ----
   One list of a quantized model's tensors (name, dtype, shape, where the
   values live) serves the writer and the reader. */

typedef struct gdl__qslot {
    char name[GDL_ST_NAME_MAX];
    const char *dtype;  /* "I8", "F32", "I32" */
    int ndim;
    int64_t shape[GDL_MAX_DIMS];
    int64_t numel;
    void *raw;          /* host array of the dtype (quantized modules), or NULL: ... */
    gdl_tensor *t;      /* ... an f32 parameter or buffer (gdl_real on the CPU) */
    gdl__qlayer *q;    /* the layer whose weight is raw (to repack after a load) */
    int zp_free;       /* an activation's zero point: any value (a weight's must be 0) */
} gdl__qslot;

typedef struct gdl__qlist {
    int n, cap;
    gdl__qslot *s;
} gdl__qlist;

static gdl__qslot *gdl__qlist_add(const char *op, gdl__qlist *L, const char *path, const char *leaf, const char *dtype) {
    gdl__qslot *v = (gdl__qslot *)gdl__nn_reserve(L->s, &L->cap, L->n, sizeof(gdl__qslot)), *e;
    if (!v) {
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    L->s = v;
    e = &L->s[L->n++];
    memset(e, 0, sizeof *e);
    if (snprintf(e->name, sizeof e->name, "%s%s%s", path, path[0] ? "." : "", leaf) >= (int)sizeof e->name) {
        gdl__set_error("%s: tensor name \"%s.%s\" is too long", op, path, leaf);
        return NULL;
    }
    e->dtype = dtype;
    return e;
}

static int gdl__qlist_collect(const char *op, gdl__qlist *L, gdl_module *m) {
    const char *path = gdl__nn_path(m);
    gdl__qslot *e;
    int i;
    if (gdl__is_qlayer(m)) {
        gdl__qlayer *q = (gdl__qlayer *)m->user;
        const int64_t ns = gdl__qlayer_nscale(q);
        if (!(e = gdl__qlist_add(op, L, path, "weight_int8", "I8"))) return -1;
        e->ndim = 2; e->shape[0] = q->out; e->shape[1] = q->in; e->numel = q->out * q->in; e->raw = q->w; e->q = q;
        if (q->conv) { /* Conv2d's [out, in, kh, kw] */
            e->ndim = 4; e->shape[1] = q->ia[0]; e->shape[2] = q->ia[2]; e->shape[3] = q->ia[3];
        }
        if (!(e = gdl__qlist_add(op, L, path, "weight_scale", "F32"))) return -1;
        e->ndim = 1; e->shape[0] = ns; e->numel = ns; e->raw = q->w_scale;
        if (!(e = gdl__qlist_add(op, L, path, "weight_zero_point", "I32"))) return -1;
        e->ndim = 1; e->shape[0] = ns; e->numel = ns; e->raw = q->w_zp;
        if (q->bias) {
            if (!(e = gdl__qlist_add(op, L, path, "bias", "F32"))) return -1;
            e->ndim = 1; e->shape[0] = q->out; e->numel = q->out; e->raw = q->bias;
        }
        if (q->mode == GDL__Q_STATIC) { /* the activations' parameters, [1] each */
            static const char *const nm[4] = {"input_scale", "input_zero_point", "output_scale", "output_zero_point"};
            void *const at[4] = {&q->in_scale, &q->in_zp, &q->out_scale, &q->out_zp};
            int k;
            for (k = 0; k < 4; k++) {
                if (!(e = gdl__qlist_add(op, L, path, nm[k], k % 2 ? "I32" : "F32"))) return -1;
                e->ndim = 1; e->shape[0] = 1; e->numel = 1; e->raw = at[k]; e->zp_free = 1;
            }
        }
        return 0;
    }
    for (i = 0; i < m->nparam + m->nbuf; i++) {
        gdl__nn_named *v = i < m->nparam ? &m->param[i] : &m->buf[i - m->nparam];
        if (v->t->dtype != GDL_F32 || v->t->device.type != GDL_DEVICE_CPU) {
            gdl__set_error("%s: %s \"%s\" is %s on %s: quantized models keep f32 tensors on the CPU", op,
                           gdl__nn_label(m), v->name, gdl_dtype_name(v->t->dtype), gdl_device_str(v->t->device));
            return -1;
        }
        if (!(e = gdl__qlist_add(op, L, path, v->name, "F32"))) return -1;
        e->ndim = v->t->ndim;
        memcpy(e->shape, v->t->shape, sizeof e->shape);
        e->numel = v->t->numel;
        e->t = v->t;
    }
    for (i = 0; i < m->nchild; i++)
        if (gdl__qlist_collect(op, L, m->child[i]) < 0) return -1;
    return 0;
}

/* The list of a quantized model m, or -1 (m NULL, not quantized, out of memory). */
static int gdl__qlist_make(const char *op, gdl__qlist *L, gdl_module *m, const char *path) {
    memset(L, 0, sizeof *L);
    if (!m || !path) {
        gdl__null_arg(op, !m ? "module" : "path");
        return -1;
    }
    if (!gdl_module_is_quantized(m)) {
        gdl__set_error("%s: %s holds no quantized module: a float model is saved with gdl_save_model (quantize it "
                       "first: gdl_quantize_dynamic, or gdl_quant_prepare / _calibrate / _convert)", op, gdl__nn_label(m));
        return -1;
    }
    if (gdl__qlist_collect(op, L, m) < 0) {
        GPUDL_FREE(L->s);
        L->s = NULL;
        return -1;
    }
    return 0;
}

GPUDL_API int gdl_quant_save(gdl_module *m, const char *path) {
    static const char *const keys[2] = {"gpudl.quantized", "gpudl"};
    static const char *const vals[2] = {"int8", GPUDL_VERSION};
    const char *op = "gdl_quant_save";
    gdl__qlist L;
    gdl_st_tensor *st;
    float **conv;
    int i, rc = -1;
    if (gdl__qlist_make(op, &L, m, path) < 0) return -1;
    st = (gdl_st_tensor *)GPUDL_MALLOC(sizeof(gdl_st_tensor) * (size_t)L.n);
    conv = (float **)GPUDL_MALLOC(sizeof(float *) * (size_t)L.n);
    if (!st || !conv) {
        gdl__set_error("%s: out of memory", op);
        goto done;
    }
    memset(conv, 0, sizeof(float *) * (size_t)L.n);
    for (i = 0; i < L.n; i++) {
        const gdl__qslot *e = &L.s[i];
        st[i].name = e->name;
        st[i].dtype = e->dtype;
        st[i].ndim = e->ndim;
        st[i].shape = e->shape;
        st[i].data = e->raw;
        if (e->t) { /* gdl_real (float, or double in GPUDL_DOUBLE builds) to float */
            int64_t k;
            if (!(conv[i] = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)e->numel + 1))) {
                gdl__set_error("%s: out of memory", op);
                goto done;
            }
            for (k = 0; k < e->numel; k++) conv[i][k] = (float)((const gdl_real *)e->t->data)[k];
            st[i].data = conv[i];
        }
    }
    rc = gdl_st_write(path, L.n, st, 2, keys, vals);
done:
    if (conv)
        for (i = 0; i < L.n; i++) GPUDL_FREE(conv[i]);
    GPUDL_FREE(conv);
    GPUDL_FREE(st);
    GPUDL_FREE(L.s);
    return rc;
}

static uint32_t gdl__q_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Checks f against the list (names, dtypes, shapes, nothing extra, zero points 0). 0 / -1. */
static int gdl__qload_check(const char *op, const char *path, const gdl__qlist *L, const gdl_st_file *f) {
    int i, k;
    for (k = 0; k < f->n; k++) {
        for (i = 0; i < L->n; i++)
            if (!strcmp(f->entries[k].name, L->s[i].name)) break;
        if (i == L->n) {
            gdl__set_error("%s: %s: unexpected tensor '%s' (not in the quantized model)", op, path, f->entries[k].name);
            return -1;
        }
    }
    for (i = 0; i < L->n; i++) {
        const gdl__qslot *e = &L->s[i];
        const gdl_st_entry *fe = gdl_st_find(f, e->name);
        if (!fe) {
            gdl__set_error("%s: %s: missing tensor '%s' (%s %s)", op, path, e->name, e->dtype,
                           gdl__shape_fmt(e->ndim, e->shape));
            return -1;
        }
        if (strcmp(fe->dtype, e->dtype) || fe->ndim != e->ndim ||
            memcmp(fe->shape, e->shape, sizeof(int64_t) * (size_t)e->ndim)) {
            gdl__set_error("%s: %s: tensor '%s' is %s %s in the file but %s %s in the model", op, path, e->name,
                           fe->dtype, gdl__shape_fmt(fe->ndim, fe->shape), e->dtype, gdl__shape_fmt(e->ndim, e->shape));
            return -1;
        }
        if (!strcmp(e->dtype, "I32") && !e->zp_free) {
            int64_t j;
            for (j = 0; j < e->numel; j++)
                if (gdl__q_le32(f->data + fe->begin + 4 * j) != 0) {
                    gdl__set_error("%s: %s: '%s' holds a nonzero zero point: the int8 weights are symmetric", op, path,
                                   e->name);
                    return -1;
                }
        }
    }
    return 0;
}

GPUDL_API int gdl_quant_load(gdl_module *m, const char *path) {
    const char *op = "gdl_quant_load";
    gdl__qlist L;
    gdl_st_file f;
    gdl__qpack *packs;
    int i, rc = -1;
    if (gdl__qlist_make(op, &L, m, path) < 0) return -1;
    if (gdl_st_read(path, &f) < 0) {
        GPUDL_FREE(L.s);
        return -1;
    }
    /* the new weights packed first: nothing is changed unless all can be */
    packs = (gdl__qpack *)GPUDL_MALLOC(sizeof(gdl__qpack) * (size_t)L.n);
    if (!packs) gdl__set_error("%s: out of memory", op);
    else memset(packs, 0, sizeof(gdl__qpack) * (size_t)L.n);
    if (packs && gdl__qload_check(op, path, &L, &f) == 0) {
        rc = 0;
        for (i = 0; i < L.n && rc == 0; i++)
            if (L.s[i].q)
                rc = gdl__qpack_init(op, &packs[i], (int)L.s[i].q->out, (int)L.s[i].q->in,
                                     (const int8_t *)(f.data + gdl_st_find(&f, L.s[i].name)->begin),
                                     (ptrdiff_t)L.s[i].q->in);
        for (i = 0; i < L.n && rc == 0; i++) {
            const gdl__qslot *e = &L.s[i];
            const unsigned char *src = f.data + gdl_st_find(&f, e->name)->begin;
            int64_t k;
            if (e->q) {
                memcpy(e->raw, src, (size_t)e->numel);
                gdl__qpack_free(&e->q->pack);
                e->q->pack = packs[i];
                memset(&packs[i], 0, sizeof packs[i]);
            } else if (!strcmp(e->dtype, "I32")) {
                for (k = 0; k < e->numel; k++) ((int32_t *)e->raw)[k] = (int32_t)gdl__q_le32(src + 4 * k);
            } else {
                for (k = 0; k < e->numel; k++) {
                    const uint32_t u = gdl__q_le32(src + 4 * k);
                    float v;
                    memcpy(&v, &u, 4);
                    if (e->raw) ((float *)e->raw)[k] = v;
                    else ((gdl_real *)e->t->data)[k] = (gdl_real)v;
                }
            }
        }
    }
    if (packs)
        for (i = 0; i < L.n; i++) gdl__qpack_free(&packs[i]);
    GPUDL_FREE(packs);
    gdl_st_free(&f);
    GPUDL_FREE(L.s);
    return rc;
}
/* ---------------------------------------------------------------------------
   [impl-train]   fit / evaluate with progress output, and checkpoints.
   ------------------------------------------------------------------------- */
GPUDL_API double gdl_now(void) { return gdl__os_wall_seconds(); }

static int gdl__isatty(FILE *f) { return gdl__os_isatty(f); }

GPUDL_API gdl_fit_opts gdl_fit_defaults(void) {
    gdl_fit_opts o;
    memset(&o, 0, sizeof o);
    o.epochs = 1;
    o.accumulate = 1;
    o.verbose = 1;
    o.oom_retry = 1;
    o.cuda_graph = 1;
    return o;
}

GPUDL_API gdl_tensor *gdl_loss_cross_entropy(gdl_tensor *output, gdl_tensor *target, void *user) {
    return gdl_cross_entropy_ex(output, target, (const gdl_ce_opts *)user);
}
GPUDL_API gdl_tensor *gdl_loss_nll(gdl_tensor *output, gdl_tensor *target, void *user) {
    gdl_ce_opts o = user ? *(const gdl_ce_opts *)user : gdl_ce_defaults();
    if (o.label_smoothing != 0) {
        gdl__set_error("gdl_loss_nll: nll_loss has no label smoothing (got %g)", o.label_smoothing);
        return NULL;
    }
    return gdl_nll_loss(output, target, o.reduction, o.ignore_index);
}
GPUDL_API gdl_tensor *gdl_loss_mse(gdl_tensor *output, gdl_tensor *target, void *user) {
    return gdl_mse_loss(output, target, user ? *(const gdl_reduction *)user : GDL_REDUCE_MEAN);
}
GPUDL_API gdl_tensor *gdl_loss_bce_with_logits(gdl_tensor *output, gdl_tensor *target, void *user) {
    return gdl_bce_with_logits(output, target, user ? *(const gdl_reduction *)user : GDL_REDUCE_MEAN);
}

/* Running sums of one pass: loss weighted by batch size, and correct
   predictions when the output is [B,C] logits against i32 labels [B]. */
/* A pass's running metrics. The per-batch sums stay on the device (the
   backend's fit_metrics), so a step reads nothing back; gdl__pass_sync adds
   them into the host fields where they are shown or saved. */
typedef struct gdl__pass {
    double loss_sum;
    int64_t samples, correct, counted; /* as of the last gdl__pass_sync */
    const gdl_backend *be;
    gdl_device dev;
    double *dacc; /* on dev: [0..3] loss_sum, samples, correct, counted since the sync; [4..7] a snapshot */
} gdl__pass;

static int gdl__pass_init(gdl__pass *p, const char *op, gdl_device dev) {
    if (p->dacc) {
        if (gdl_device_equal(p->dev, dev)) return gdl__be(op, dev) ? 0 : -1;
        gdl__set_error("%s: a batch on %s after batches on %s", op, gdl_device_str(dev), gdl_device_str(p->dev));
        return -1;
    }
    if (!(p->be = gdl__be(op, dev))) return -1;
    if (!(p->dacc = (double *)p->be->alloc(8 * sizeof(double)))) return -1;
    p->dev = dev;
    return p->be->memset0(p->dacc, 8 * sizeof(double));
}

static int gdl__pass_batch(gdl__pass *p, gdl_tensor *out, gdl_tensor *y, gdl_tensor *loss) {
    int64_t B = y->ndim >= 1 ? y->shape[0] : 1;
    int cls = out->ndim == 2 && y->dtype == GDL_I32 && y->ndim == 1 && out->shape[0] == B &&
              gdl_device_equal(out->device, y->device);
    if (loss->numel != 1 || loss->dtype != GDL_F32) {
        gdl__set_error("gdl_fit: the loss function returned %s %s, not one f32 value", gdl_dtype_name(loss->dtype),
                       gdl_shape_str(loss));
        return -1;
    }
    const gdl_real *o = (const gdl_real *)out->data;
    if (gdl__pass_init(p, "gdl_fit", loss->device) < 0) return -1;
    if (cls && out->dtype != GDL_F32) { /* bf16/f16 logits (autocast): the metrics kernel reads f32 */
        gdl_real *f;
        if (!gdl__is_float(out->dtype)) cls = 0;
        else if (!(f = (gdl_real *)gdl__scratch("gdl_fit", out->device, sizeof(gdl_real) * (size_t)out->numel)) ||
                 p->be->cast(f, GDL_F32, out->data, out->dtype, out->numel) < 0)
            return -1;
        else o = f;
    }
    return p->be->fit_metrics(GDL__R(loss), B, cls ? out->shape[1] : 0, cls ? o : NULL,
                              cls ? (const int32_t *)y->data : NULL, p->dacc);
}

/* The device's sums into the host fields: the one read of the device. */
static int gdl__dist_settle(const char *op);
static int gdl__pass_sync(gdl__pass *p) {
    double h[4];
    if (!p->dacc) return 0;
    if (gdl__dist_settle("gdl_fit") < 0) return -1; /* DDP's queued NCCL all-reduces end, or time out, first */
    if (!gdl__be("gdl_fit", p->dev) || p->be->copy(h, p->dacc, sizeof h, 1) < 0 ||
        p->be->memset0(p->dacc, sizeof h) < 0)
        return -1;
    p->loss_sum += h[0];
    p->samples += (int64_t)h[1];
    p->correct += (int64_t)h[2];
    p->counted += (int64_t)h[3];
    return 0;
}

/* Snapshot (save != 0) or put back the device's sums, around a batch that may be retried. */
static int gdl__pass_snapshot(gdl__pass *p, int save) {
    if (!p->dacc) return 0;
    if (!gdl__be("gdl_fit", p->dev)) return -1;
    return p->be->copy(save ? p->dacc + 4 : p->dacc, save ? p->dacc : p->dacc + 4, 4 * sizeof(double), 2);
}

static void gdl__pass_free(gdl__pass *p) {
    if (p->dacc && gdl__be("gdl_fit", p->dev)) p->be->free(p->dacc);
    memset(p, 0, sizeof *p);
}

static double gdl__pass_acc(const gdl__pass *p) { return p->counted ? (double)p->correct / (double)p->counted : NAN; }

GPUDL_API int gdl_evaluate(gdl_module *m, gdl_loader *l, gdl_loss_fn loss, void *user, double *loss_out,
                           double *accuracy_out) {
    gdl__pass p;
    gdl_tensor *x, *y;
    int was_training, grad, rc;
    if (!m || !l) {
        gdl__null_arg("gdl_evaluate", !m ? "module" : "loader");
        return -1;
    }
    if (!loss) loss = gdl_loss_cross_entropy;
    memset(&p, 0, sizeof p);
    was_training = gdl_module_is_training(m);
    gdl_module_train(m, 0);
    grad = gdl_set_grad_enabled(0);
    while ((rc = gdl_loader_next(l, &x, &y)) == 1) {
        gdl_tensor *out, *lt;
        gdl_arena_reset();
        if (!(out = gdl_forward(m, x)) || !(lt = loss(out, y, user)) || gdl__pass_batch(&p, out, y, lt) < 0) {
            rc = -1;
            break;
        }
    }
    gdl_set_grad_enabled(grad);
    gdl_module_train(m, was_training);
    if (rc == 0 && gdl__pass_sync(&p) < 0) rc = -1;
    if (rc == 0) {
        if (loss_out) *loss_out = p.samples ? p.loss_sum / (double)p.samples : NAN;
        if (accuracy_out) *accuracy_out = gdl__pass_acc(&p);
    }
    gdl__pass_free(&p);
    return rc < 0 ? -1 : 0;
}

static double gdl__last_draw; /* one bar at a time: a terminal shows one */

/* Would gdl_progress_bar draw now? (gdl_fit reads the device only then.) */
static int gdl__progress_due(FILE *f, int64_t b, int64_t nb) {
    return f && gdl__isatty(f) && !(b != nb && b > 1 && gdl_now() - gdl__last_draw < 0.1);
}

GPUDL_API int gdl_progress_bar(FILE *f, int epoch, int epochs, int64_t b, int64_t nb, double loss,
                               double accuracy, int64_t samples, double t0) {
    double now = gdl_now(), el = now - t0, rate = el > 0 ? (double)samples / el : 0;
    double eta = b > 0 ? el * (double)(nb - b) / (double)b : 0;
    int width = 24, filled = nb > 0 ? (int)(width * b / nb) : width, i;
    if (!gdl__progress_due(f, b, nb)) return 0;
    gdl__last_draw = now;
    fprintf(f, "\repoch %d/%d [", epoch, epochs);
    for (i = 0; i < width; i++) fputc(i < filled ? '=' : (i == filled ? '>' : ' '), f);
    fprintf(f, "] %lld/%lld loss %.4f", (long long)b, (long long)nb, loss);
    if (accuracy == accuracy) fprintf(f, " acc %.2f%%", 100 * accuracy);
    fprintf(f, " %.0f samples/s ETA %.0fs   ", rate, eta);
    fflush(f);
    return 1;
}

/* After the bar, on CUDA: the GPU's load, as nvidia-smi would show it. NVML's index is taken to be CUDA's
   (true with one GPU, or with CUDA_DEVICE_ORDER=PCI_BUS_ID). Silent without NVML. */
static void gdl__progress_gpu(FILE *f, gdl_device dev) {
    gdl_gpu_status s;
    char saved[sizeof gdl__err];
    if (dev.type != GDL_DEVICE_CUDA) return;
    memcpy(saved, gdl__err, sizeof saved); /* a missing NVML is no error of the training */
    if (gdl_gpu_stats(dev.index, &s) < 0) {
        gdl__set_error("%s", saved);
        return;
    }
    if (s.utilization >= 0) fprintf(f, "| GPU %d%% ", s.utilization);
    else fprintf(f, "| GPU ");
    fprintf(f, "%.1f/%.0f GiB   ", s.memory_used / 1073741824.0, s.memory_total / 1073741824.0);
    fflush(f);
}

GPUDL_API void gdl_print_epoch(FILE *f, int epochs, const gdl_epoch_stats *st) {
    int tty = gdl__isatty(f);
    if (tty) fputc('\r', f);
    fprintf(f, "epoch %d/%d: loss %.4f", st->epoch, epochs, st->loss);
    if (st->accuracy == st->accuracy) fprintf(f, " acc %.2f%%", 100 * st->accuracy);
    /* a diverged validation (NaN loss, a counted accuracy) still shows its loss */
    if (st->val_loss == st->val_loss || st->val_accuracy == st->val_accuracy) fprintf(f, " val_loss %.4f", st->val_loss);
    if (st->val_accuracy == st->val_accuracy) fprintf(f, " val_acc %.2f%%", 100 * st->val_accuracy);
    fprintf(f, " %.2fs %.0f samples/s%s\n", st->seconds, st->samples_per_sec, tty ? "                    " : "");
    fflush(f);
}

GPUDL_API FILE *gdl_metrics_csv_open(const char *path) {
    FILE *f;
    if (!path) {
        gdl__null_arg("gdl_metrics_csv_open", "path");
        return NULL;
    }
    if (!(f = fopen(path, "w")) ||
        fprintf(f, "epoch,loss,accuracy,val_loss,val_accuracy,seconds,samples_per_sec\n") < 0 || fflush(f) != 0) {
        if (f) fclose(f);
        gdl__set_error("gdl_metrics_csv_open: cannot write the metrics CSV %s", path);
        return NULL;
    }
    return f;
}

GPUDL_API int gdl_metrics_csv_row(FILE *f, const gdl_epoch_stats *st) {
    if (!f || !st) {
        gdl__null_arg("gdl_metrics_csv_row", !f ? "file" : "stats");
        return -1;
    }
    if (fprintf(f, "%d,%.6f,%.6f,%.6f,%.6f,%.4f,%.1f\n", st->epoch, st->loss, st->accuracy, st->val_loss,
                st->val_accuracy, st->seconds, st->samples_per_sec) < 0 || fflush(f) != 0) {
        gdl__set_error("gdl_metrics_csv_row: cannot write the metrics CSV (disk full?)");
        return -1;
    }
    return 0;
}

/* Where gdl_fit is inside a run, saved with its checkpoints (metadata fit.*). */
typedef struct gdl__fit_state {
    int64_t epoch;        /* gdl_fit's epoch, 1-based */
    int64_t batch;        /* batches of it done */
    int64_t loader_epoch; /* the train loader's epoch number */
    int64_t num_batches;  /* the loader's batches per epoch, checked on resume */
    int64_t val_epoch;    /* the validation loader's epoch number (its transforms depend on it); -1 without */
    double loss_sum;      /* the epoch's running metrics (gdl__pass) */
    double seconds;       /* the epoch's training time so far */
    int64_t samples, correct, counted; /* under DDP: the sums over every rank */
    int64_t replicas, batch_size; /* the train loader's shards (world size) and per-rank batch size */
} gdl__fit_state;
static int gdl__fit_save(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                         const gdl__fit_state *fs);
static int gdl__fit_load(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                         gdl__fit_state *fs, const gdl_loader *train, int epochs, int ddp);

/* The metrics CSV of a resumed run: the rows of epochs before `from` are kept (rewritten atomically), the
   rest dropped, and the file is opened for appending. A missing file is started anew. NULL + error. */
static FILE *gdl__csv_resume(const char *path, int64_t from) {
    FILE *in = fopen(path, "r"), *out;
    char line[1024], *tmp;
    size_t tl = strlen(path) + 16;
    if (!in) return gdl_metrics_csv_open(path);
    if (!(tmp = (char *)GPUDL_MALLOC(tl))) {
        fclose(in);
        gdl__set_error("gdl_fit: out of memory (host)");
        return NULL;
    }
    snprintf(tmp, tl, "%s.tmp", path);
    if (!(out = fopen(tmp, "w"))) {
        fclose(in);
        gdl__set_error("gdl_fit: cannot write %s", tmp);
        GPUDL_FREE(tmp);
        return NULL;
    }
    /* the header always (a run killed early may have left an empty file), then the rows kept */
    fputs("epoch,loss,accuracy,val_loss,val_accuracy,seconds,samples_per_sec\n", out);
    while (fgets(line, sizeof line, in)) {
        char *end;
        long long e = strtoll(line, &end, 10);
        if (end != line && *end == ',' && e < from) fputs(line, out);
    }
    fclose(in);
    if (fclose(out) != 0 || gdl__os_replace(tmp, path) != 0) {
        gdl__set_error("gdl_fit: cannot rewrite the metrics CSV %s", path);
        remove(tmp);
        GPUDL_FREE(tmp);
        return NULL;
    }
    GPUDL_FREE(tmp);
    if (!(out = fopen(path, "a"))) gdl__set_error("gdl_fit: cannot append to the metrics CSV %s", path);
    return out;
}

static int gdl__error_is_oom(void) { return strstr(gdl__err, "out of memory") != NULL; }

/* [impl-dist]: a pass's sums over every rank (in double) */
static int gdl__dist_pass_sum(gdl__pass *p);
/* [impl-dist]: v[0..n-1] summed (max: the largest) over every rank, within the timeout; as is in one process */
static int gdl__dist_reduce_f64(const char *op, const char *what, double *v, int n, int max);
/* [impl-dist]: every rank says whether its part (what) worked: 0 when all did. A rank that failed keeps
   its own error; the others get one saying how many failed. */
static int gdl__dist_agree(const char *op, const char *what, int ok);

/* Forward and backward of one batch in `parts` micro-batches, each loss
   weighted by its share of the batch and by 1/accumulate; the metrics go to
   p. Then, when `step`, gradient clipping and the optimizer step. */
static int gdl__fit_batch(gdl_module *m, gdl_tensor *x, gdl_tensor *y, gdl_optimizer *opt, const gdl_fit_opts *o,
                          gdl_loss_fn loss, int64_t parts, int step, gdl__pass *p) {
    int64_t B = x->shape[0], k;
    if (o->scaler && gdl__scaler_rearm(o->scaler, opt) < 0) return -1; /* after a failed attempt */
    for (k = 0; k < parts; k++) {
        int64_t lo = B * k / parts, hi = B * (k + 1) / parts;
        gdl_tensor *xs = x, *ys = y, *out, *lt;
        double scale = (double)(hi - lo) / (double)B / o->accumulate;
        if (hi == lo) continue;
        gdl_arena_reset();
        if (parts > 1 && (!(xs = gdl_slice(x, lo, hi)) || !(ys = gdl_slice(y, lo, hi)))) return -1;
        /* the region opens after the reset: its cached casts are this step's temporaries */
        if (o->autocast != GDL_F32 && gdl_autocast_begin(o->autocast) < 0) return -1;
        out = o->ddp ? gdl_ddp_forward(o->ddp, xs) : gdl_forward(m, xs);
        lt = out ? loss(out, ys, o->loss_user) : NULL;
        if (o->autocast != GDL_F32) gdl_autocast_end();
        if (!lt) return -1;
        if (gdl__pass_batch(p, out, ys, lt) < 0) return -1; /* on the device: no read back */
        if (scale != 1) lt = gdl_mul_scalar(lt, scale);
        if (lt && o->scaler) lt = gdl_grad_scaler_scale(o->scaler, lt);
        if (!lt) return -1;
        if (o->ddp) { /* the ranks' gradients are averaged once per optimizer step: at its last backward */
            gdl_ddp_set_no_sync(o->ddp, !(step && k == parts - 1));
            if (gdl_ddp_backward(o->ddp, lt) < 0) return -1;
        } else if (gdl_backward(lt) < 0) {
            return -1;
        }
    }
    if (!step) return 0;
    if (o->scaler && o->clip_grad_norm > 0 && gdl_grad_scaler_unscale(o->scaler, opt) < 0) return -1;
    if (o->clip_grad_norm > 0) { /* clipped on the device: nothing read back */
        gdl_tensor **ps = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) *
                                                                                 (size_t)(opt->nparams + 1));
        int i;
        if (!ps) {
            gdl__set_error("gdl_fit: out of memory");
            return -1;
        }
        for (i = 0; i < opt->nparams; i++) ps[i] = opt->params[i].p;
        if (gdl_clip_grad_norm_nosync(ps, opt->nparams, o->clip_grad_norm) < 0) return -1;
    }
    if (o->scaler) return gdl_grad_scaler_step(o->scaler, opt) < 0 ? -1 : gdl_grad_scaler_update(o->scaler);
    return gdl_step(opt);
}

/* gdl_fit's CUDA graphs ([api-graph]): one per input buffer and batch shape.
   The loader delivers a GPU's batches into two fixed device buffers in turn
   (gdl__loader_deliver: its events order each copy after the steps that read
   the buffer before), so a graph recorded on each buffer reads the batch
   where the loader wrote it, and a replay copies nothing: two buffers times
   two shapes (the full batches and the last, partial one). */
#define GDL__FIT_GRAPHS 4
static gdl_graph *gdl__graph_record(const char *op, gdl_device dev, int (*step)(void *ctx), void *ctx);

typedef struct gdl__fit_step { /* what a recorded step works on */
    gdl_module *m;
    gdl_optimizer *opt;
    const gdl_fit_opts *o;
    gdl_loss_fn loss;
    gdl__pass *p;
    gdl_tensor *x, *y;
} gdl__fit_step;

typedef struct gdl__fit_graph {
    int used;           /* 0: a free slot */
    gdl_graph *g;       /* NULL (used): the step could not be captured, so batches of this shape run eagerly */
    const void *xd, *yd; /* the input buffers it reads ... */
    int ndim;           /* ... and the batch's shape and dtypes */
    int64_t shape[GDL_MAX_DIMS], ny;
    gdl_dtype xdt, ydt;
    gdl__fit_step ctx;
} gdl__fit_graph;

/* x and y have the shapes and dtypes fg was recorded for (same_buffers: and are its buffers) */
static int gdl__fit_graph_fits(const gdl__fit_graph *fg, const gdl_tensor *x, const gdl_tensor *y, int same_buffers) {
    if (!fg->used || fg->xdt != x->dtype || fg->ydt != y->dtype || fg->ndim != x->ndim || y->ndim != 1 ||
        fg->ny != y->shape[0] || memcmp(fg->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0)
        return 0;
    return !same_buffers || (fg->xd == x->data && fg->yd == y->data);
}

/* The graph slot for the batch (x, y), and what to do with it: *capture 0: replay it (or, with a NULL
   graph, run eagerly: this shape's capture failed before); 1: run this step eagerly, then record the
   next one (the shape's first step: it makes what the step allocates); 2: record now and replay (another
   buffer of a shape recorded already: everything is made). NULL: eagerly (no slot left). */
static gdl__fit_graph *gdl__fit_graph_find(gdl__fit_graph *graphs, const gdl_tensor *x, const gdl_tensor *y,
                                           int *capture) {
    int k, warm = 0;
    *capture = 0;
    if (x->ndim > GDL_MAX_DIMS || y->ndim != 1) return NULL;
    for (k = 0; k < GDL__FIT_GRAPHS; k++)
        if (gdl__fit_graph_fits(&graphs[k], x, y, 1)) return &graphs[k];
    for (k = 0; k < GDL__FIT_GRAPHS; k++)
        if (gdl__fit_graph_fits(&graphs[k], x, y, 0)) {
            if (!graphs[k].g) return &graphs[k]; /* this shape cannot be captured: eager, no new attempt */
            warm = 1;
        }
    for (k = 0; k < GDL__FIT_GRAPHS; k++)
        if (!graphs[k].used) {
            *capture = warm ? 2 : 1;
            return &graphs[k];
        }
    return NULL;
}

/* what the graph holds: the eager path's step of one whole batch and its zero_grad */
static int gdl__fit_graph_step(void *c) {
    gdl__fit_step *s = (gdl__fit_step *)c;
    if (gdl__fit_batch(s->m, s->x, s->y, s->opt, s->o, s->loss, 1, 1, s->p) < 0) return -1;
    return gdl_zero_grad(s->opt);
}

/* Records the step on the batch (x, y) in the buffers where it lies, after a step of this shape has run
   (so its memory exists). A failure is not an error: the slot stays eager and *why says why. */
static void gdl__fit_graph_capture(gdl__fit_graph *fg, gdl_tensor *x, gdl_tensor *y, gdl_module *m,
                                   gdl_optimizer *opt, const gdl_fit_opts *o, gdl_loss_fn loss, gdl__pass *p,
                                   char *why, size_t whylen) {
    int64_t steps = opt->steps;
    fg->used = 1;
    fg->xd = x->data;
    fg->yd = y->data;
    fg->ndim = x->ndim;
    memset(fg->shape, 0, sizeof fg->shape);
    memcpy(fg->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    fg->ny = y->shape[0];
    fg->xdt = x->dtype;
    fg->ydt = y->dtype;
    fg->ctx.m = m;
    fg->ctx.opt = opt;
    fg->ctx.o = o;
    fg->ctx.loss = loss;
    fg->ctx.p = p;
    fg->ctx.x = x; /* read while recording only: a replay runs the kernels on the buffers */
    fg->ctx.y = y;
    fg->g = gdl__graph_record("gdl_fit", x->device, gdl__fit_graph_step, &fg->ctx);
    opt->steps = steps; /* the recorded gdl_step counted a step that did not run */
    if (!fg->g) snprintf(why, whylen, "%s", gdl_last_error());
}

static void gdl__fit_graphs_free(gdl__fit_graph *fg) {
    int k;
    for (k = 0; k < GDL__FIT_GRAPHS; k++) gdl_graph_free(fg[k].g);
    memset(fg, 0, sizeof(gdl__fit_graph) * GDL__FIT_GRAPHS);
}

/* gdl_fit's run: the options as applied, where it is, and what it holds. */
typedef struct gdl__fit_run {
    gdl_module *m;
    gdl_loader *train;
    gdl_optimizer *opt;
    gdl_fit_opts o;
    gdl_loss_fn loss;
    FILE *log, *csv;
    int rank0, tty, resumed, start_epoch, graph_notice;
    int64_t nb, parts; /* the loader's batches per epoch; micro-batches per batch (oom_split_batch) */
    char *ckpath;      /* the checkpoint file; NULL without checkpoint_dir */
    gdl__fit_state fs; /* as loaded on resume, as saved at a checkpoint */
    gdl__pass p;
    gdl__fit_graph graphs[GDL__FIT_GRAPHS];
    int epoch, micro; /* the epoch under way; micro-batches of the optimizer step so far */
    int64_t b;        /* its batches so far */
    int preempted;    /* opts.preempt: the signal that stopped the run ([impl-cluster]) */
    double t0;        /* when it started (earlier on resume: its time before the checkpoint counts) */
} gdl__fit_run;

/* Records fg on the batch (x, y); a failure leaves the step eager and says so once. */
static void gdl__fit_graph_try(gdl__fit_run *r, gdl__fit_graph *fg, gdl_tensor *x, gdl_tensor *y) {
    char why[sizeof gdl__err];
    why[0] = 0;
    gdl__fit_graph_capture(fg, x, y, r->m, r->opt, &r->o, r->loss, &r->p, why, sizeof why);
    if (!fg->g && r->o.verbose && !r->graph_notice++)
        fprintf(r->log, "%sgdl_fit: the step runs eagerly, not as a CUDA graph: %s\n", r->tty ? "\n" : "", why);
}

/* The arguments and options checked and applied (r->o: as gdl_fit runs them). */
static int gdl__fit_check(gdl__fit_run *r, gdl_module *m, gdl_loader *train, gdl_optimizer *opt,
                          const gdl_fit_opts *opts) {
    gdl_fit_opts *o = &r->o;
    memset(r, 0, sizeof *r);
    *o = opts ? *opts : gdl_fit_defaults();
    r->m = m;
    r->train = train;
    r->opt = opt;
    r->loss = o->loss ? o->loss : gdl_loss_cross_entropy;
    r->log = o->log ? o->log : stdout;
    r->rank0 = !o->ddp || gdl_dist_rank() == 0;
    r->start_epoch = 1;
    r->nb = train ? gdl_loader_num_batches(train) : 0;
    r->parts = 1;
    if (!m || !train || !opt) {
        gdl__null_arg("gdl_fit", !m ? "module" : !train ? "train loader" : "optimizer");
        return -1;
    }
    if (o->autocast != GDL_F32 && o->autocast != GDL_BF16 && o->autocast != GDL_F16) {
        gdl__set_error("gdl_fit: the autocast option must be bf16, f16 or f32 (off), got %s", gdl_dtype_name(o->autocast));
        return -1;
    }
    if (o->epochs < 0 || o->accumulate < 0 || o->checkpoint_every < 0) {
        gdl__set_error("gdl_fit: bad epochs %d, accumulate %d or checkpoint_every %lld", o->epochs, o->accumulate,
                       (long long)o->checkpoint_every);
        return -1;
    }
    if ((o->checkpoint_every > 0 || o->resume) && !o->checkpoint_dir) {
        gdl__set_error("gdl_fit: checkpoint_every and resume need checkpoint_dir");
        return -1;
    }
    if (o->accumulate == 0) o->accumulate = 1;
    if (o->preempt && !o->checkpoint_dir) {
        gdl__set_error("gdl_fit: preempt needs checkpoint_dir: a signal stops the run after a checkpoint there");
        return -1;
    }
    if (o->ddp && gdl_ddp_module(o->ddp) != m) {
        gdl__set_error("gdl_fit: opts.ddp wraps another module than the one given");
        return -1;
    }
    /* the scaler's state goes into the checkpoints and comes back on resume */
    if (o->scaler && opt->scaler != o->scaler && gdl_optim_set_grad_scaler(opt, o->scaler) < 0) return -1;
    if (!r->rank0) { /* under DDP only rank 0 shows and writes */
        o->verbose = 0;
        o->csv_path = NULL;
    }
    r->tty = o->verbose && gdl__isatty(r->log);
    return 0;
}

/* checkpoint_dir: the checkpoint's path, the directory made, and with resume whether to resume (r->resumed).
   On failure nothing is left to free. */
static int gdl__fit_checkpoint_dir(gdl__fit_run *r) {
    const gdl_fit_opts *o = &r->o;
    size_t cl = strlen(o->checkpoint_dir) + 32;
    FILE *probe;
    double have = 0;
    if (!(r->ckpath = (char *)GPUDL_MALLOC(cl))) {
        gdl__set_error("gdl_fit: out of memory (host)");
        return -1;
    }
    snprintf(r->ckpath, cl, "%s/gdl_fit.safetensors", o->checkpoint_dir);
    if (gdl__os_mkdir(o->checkpoint_dir) != 0 && errno != EEXIST) {
        gdl__set_error("gdl_fit: cannot create checkpoint_dir %s: %s", o->checkpoint_dir, gdl__strerr(errno));
        GPUDL_FREE(r->ckpath);
        return -1;
    }
    if (!o->resume) return 0;
    if (r->rank0 && (probe = fopen(r->ckpath, "rb")) != NULL) {
        fclose(probe);
        have = 1;
    }
    /* under DDP rank 0's word: every rank resumes, or none does */
    if (o->ddp && gdl__dist_reduce_f64("gdl_fit", "the look for a checkpoint to resume from", &have, 1, 1) < 0) {
        GPUDL_FREE(r->ckpath);
        return -1;
    }
    r->resumed = have > 0;
    return 0;
}

/* Resume: model, optimizer, scheduler and generator from the checkpoint, the loaders where it was taken. */
static int gdl__fit_resume(gdl__fit_run *r) {
    const gdl_fit_opts *o = &r->o;
    gdl__fit_state *fs = &r->fs;
    /* checked before anything changes (on every rank, under DDP); then model, optimizer, scheduler
       and generator at once */
    if (gdl__fit_load(r->ckpath, r->m, r->opt, o->scheduler, fs, r->train, o->epochs, o->ddp != NULL) < 0) return -1;
    /* cannot fail: the position was checked against this loader */
    gdl_loader_set_position(r->train, (uint64_t)fs->loader_epoch, fs->batch);
    if (o->val && fs->val_epoch >= 0) gdl_loader_set_epoch(o->val, (uint64_t)fs->val_epoch);
    if (!r->rank0) /* the checkpoint's running sums are the job's: rank 0 carries them */
        fs->loss_sum = 0, fs->samples = fs->correct = fs->counted = 0;
    r->start_epoch = (int)fs->epoch;
    if (o->verbose)
        fprintf(r->log, "resuming from %s: epoch %d, batch %lld of %lld\n", r->ckpath, r->start_epoch,
                (long long)fs->batch, (long long)r->nb);
    return 0;
}

/* Everything before the first epoch: checks, the checkpoint directory, resume, the metrics CSV, and the
   history of the epochs a resumed run finished before its checkpoint. Nothing to free on failure. */
static int gdl__fit_begin(gdl__fit_run *r, gdl_module *m, gdl_loader *train, gdl_optimizer *opt,
                          const gdl_fit_opts *opts, gdl_epoch_stats *history) {
    int epoch;
    if (gdl__fit_check(r, m, train, opt, opts) < 0) return -1;
    if (r->o.checkpoint_dir && gdl__fit_checkpoint_dir(r) < 0) return -1;
    if (r->resumed && gdl__fit_resume(r) < 0) {
        GPUDL_FREE(r->ckpath);
        return -1;
    }
    if (r->o.csv_path && !(r->csv = r->resumed ? gdl__csv_resume(r->o.csv_path, r->start_epoch)
                                               : gdl_metrics_csv_open(r->o.csv_path))) {
        GPUDL_FREE(r->ckpath); /* the error says which file and why */
        return -1;
    }
    if (history)
        for (epoch = 1; epoch < r->start_epoch; epoch++) { /* finished before the checkpoint: not known here */
            memset(&history[epoch - 1], 0, sizeof history[0]);
            history[epoch - 1].epoch = epoch;
            history[epoch - 1].loss = history[epoch - 1].accuracy = NAN;
            history[epoch - 1].val_loss = history[epoch - 1].val_accuracy = NAN;
            history[epoch - 1].seconds = history[epoch - 1].samples_per_sec = NAN;
        }
    return 0;
}

/* What a failed attempt at a batch may have changed, to put back before the next. */
typedef struct gdl__fit_undo {
    double loss_sum;
    int64_t samples, correct, counted;
    uint64_t rng_seed, rng_counter;
} gdl__fit_undo;

static int gdl__fit_undo_save(gdl__fit_run *r, gdl__fit_undo *u, gdl_device dev) {
    u->loss_sum = r->p.loss_sum;
    u->samples = r->p.samples, u->correct = r->p.correct, u->counted = r->p.counted;
    u->rng_seed = gdl_rng_get_state(&u->rng_counter);
    return gdl__pass_init(&r->p, "gdl_fit", dev) < 0 || gdl__pass_snapshot(&r->p, 1) < 0 ? -1 : 0;
}

/* Back to before the attempt, with the cached memory given back. */
static int gdl__fit_undo_apply(gdl__fit_run *r, const gdl__fit_undo *u) {
    r->p.loss_sum = u->loss_sum;
    r->p.samples = u->samples, r->p.correct = u->correct, r->p.counted = u->counted;
    if (gdl__pass_snapshot(&r->p, 0) < 0) return -1;
    gdl_rng_set_state(u->rng_seed, u->rng_counter);
    gdl_arena_reset();
    gdl__fit_graphs_free(r->graphs); /* their kernels write into the memory given back next */
    gdl__release_cached_memory();
    return gdl_zero_grad(r->opt);
}

/* After an out-of-memory failure of an attempt: try again? (retried: an attempt was retried already.) From the
   second retry on, or the first without oom_retry, the batch runs in twice as many micro-batches. */
static int gdl__fit_oom_again(gdl__fit_run *r, const gdl_tensor *x, int retried) {
    if (retried && (!r->o.oom_split_batch || 2 * r->parts > x->shape[0])) return 0;
    if (!retried && !r->o.oom_retry && !r->o.oom_split_batch) return 0;
    if (retried || !r->o.oom_retry) { /* the same batch in twice as many parts, from now on */
        r->parts *= 2;
        if (r->o.verbose)
            fprintf(r->log, "%sgdl_fit: out of memory at epoch %d, batch %lld; running each batch as %lld "
                    "micro-batches from now on (%s)\n", r->tty ? "\n" : "", r->epoch, (long long)r->b,
                    (long long)r->parts, gdl__err);
    }
    return 1;
}

/* One batch eagerly (forward, backward and, when last, the optimizer step); an out of memory on the first
   micro-batch of a step is retried and split as the options allow, and the error says where it stopped. */
static int gdl__fit_eager(gdl__fit_run *r, gdl_tensor *x, gdl_tensor *y, int first, int last) {
    gdl__fit_undo u;
    int rc, retried = 0;
    if (gdl__fit_undo_save(r, &u, x->device) < 0) return -1;
    while ((rc = gdl__fit_batch(r->m, x, y, r->opt, &r->o, r->loss, r->parts, last, &r->p)) < 0 && first &&
           gdl__error_is_oom()) {
        if (!gdl__fit_oom_again(r, x, retried)) break;
        retried = 1;
        if (gdl__fit_undo_apply(r, &u) < 0) break;
    }
    if (rc < 0 && gdl__error_is_oom()) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        gdl__set_error("gdl_fit: epoch %d, batch %lld of %lld (the model and optimizer are as after the "
                       "last completed step%s): %s", r->epoch, (long long)r->b, (long long)r->nb,
                       !first ? "; an out-of-memory failure is retried only on the first micro-batch "
                                "of an optimizer step"
                       : retried ? ", after retrying with the cached memory given back"
                                 : "; oom_retry and oom_split_batch can recover",
                       prev);
    }
    return rc;
}

/* A recorded step of this batch's buffers and shape: one launch. */
static int gdl__fit_replay(gdl__fit_run *r, gdl__fit_graph *fg) {
    if (gdl_graph_replay(fg->g) < 0) return -1;
    r->opt->steps++;
    r->micro = 0;
    return r->o.scheduler && r->o.scheduler_per_batch && gdl_scheduler_step(r->o.scheduler) < 0 ? -1 : 0;
}

/* The checkpoint after an optimizer step: the running figures (under DDP: the job's, over every rank) and
   where the run is, saved by rank 0; every rank learns whether the save worked. */
static int gdl__fit_checkpoint(gdl__fit_run *r) {
    gdl__fit_state *fs = &r->fs;
    gdl__pass *p = &r->p;
    double v[5];
    int rc = 0;
    if (gdl__pass_sync(p) < 0) rc = -1;
    fs->epoch = r->epoch;
    fs->batch = r->b;
    fs->loader_epoch = (int64_t)gdl_loader_epoch(r->train);
    fs->num_batches = r->nb;
    fs->val_epoch = r->o.val ? (int64_t)gdl_loader_epoch(r->o.val) : -1;
    fs->seconds = gdl_now() - r->t0;
    fs->loss_sum = p->loss_sum;
    fs->samples = p->samples;
    fs->correct = p->correct;
    fs->counted = p->counted;
    fs->replicas = r->train->o.num_replicas > 1 ? r->train->o.num_replicas : 1;
    fs->batch_size = r->train->B;
    if (!r->o.ddp) return rc == 0 && gdl__fit_save(r->ckpath, r->m, r->opt, r->o.scheduler, fs) < 0 ? -1 : rc;
    /* under DDP the checkpoint holds the job's running figures (every rank's), so that a
       restart with another number of ranks counts them once */
    v[0] = rc < 0, v[1] = p->loss_sum, v[2] = (double)p->samples, v[3] = (double)p->correct;
    v[4] = (double)p->counted;
    if (gdl__dist_reduce_f64("gdl_fit", "the checkpoint's running sums", v, 5, 0) != 0) return -1;
    if (v[0] > 0 && rc == 0)
        gdl__set_error("gdl_fit: %.0f rank(s) failed at the checkpoint of step %lld", v[0],
                       (long long)gdl_optim_get_step(r->opt));
    if (v[0] > 0) rc = -1;
    fs->loss_sum = v[1], fs->samples = (int64_t)v[2], fs->correct = (int64_t)v[3];
    fs->counted = (int64_t)v[4];
    if (rc == 0 && r->rank0 && gdl__fit_save(r->ckpath, r->m, r->opt, r->o.scheduler, fs) < 0) rc = -1;
    /* every rank learns whether rank 0's save worked, and none goes on before the file
       is whole (a barrier): a later resume on any rank reads the complete checkpoint */
    if (gdl__dist_agree("gdl_fit", "saving the checkpoint (rank 0)", rc == 0) < 0) rc = -1;
    return rc;
}

/* [impl-cluster]: after a step, a preemption signal's checkpoint and stop (0 go on, 1 stopped, -1) */
static int gdl__fit_preempt(gdl__fit_run *r);

/* The progress bar, when one is due: the only read of the device in a step. */
static int gdl__fit_progress(gdl__fit_run *r, const gdl_tensor *x) {
    gdl__pass *p = &r->p;
    if (!r->tty || !gdl__progress_due(r->log, r->b, r->nb)) return 0;
    if (gdl__pass_sync(p) < 0) return -1;
    if (gdl_progress_bar(r->log, r->epoch, r->o.epochs, r->b, r->nb, p->samples ? p->loss_sum / (double)p->samples : 0.0,
                         gdl__pass_acc(p), p->samples, r->t0))
        gdl__progress_gpu(r->log, x->device);
    return 0;
}

/* One batch of the loader: the step (replayed as a CUDA graph where one is recorded, else eagerly, with the
   graph recorded after the first step of its shape), then the checkpoint and the progress bar. */
static int gdl__fit_train_batch(gdl__fit_run *r, gdl_tensor *x, gdl_tensor *y) {
    const gdl_fit_opts *o = &r->o;
    gdl__fit_graph *fg = NULL;
    int first, last, capture = 0, stop;
    r->b++;
    first = r->micro == 0;
    last = ++r->micro == o->accumulate || r->b == r->nb;
    if (o->cuda_graph && x->device.type == GDL_DEVICE_CUDA && o->accumulate == 1 && r->parts == 1 && !o->ddp)
        fg = gdl__fit_graph_find(r->graphs, x, y, &capture);
    if (fg && capture == 2) gdl__fit_graph_try(r, fg, x, y); /* the other buffer of a recorded shape: record it now */
    if (fg && fg->g) {
        if (gdl__fit_replay(r, fg) < 0) return -1;
    } else {
        if (gdl__fit_eager(r, x, y, first, last) < 0) return -1;
        if (last) {
            r->micro = 0;
            if (gdl_zero_grad(r->opt) < 0) return -1;
            if (o->scheduler && o->scheduler_per_batch && gdl_scheduler_step(o->scheduler) < 0) return -1;
            if (fg && capture == 1) gdl__fit_graph_try(r, fg, x, y); /* this shape's first step ran: record it */
        }
    }
    if (last && o->checkpoint_every > 0 && gdl_optim_get_step(r->opt) % o->checkpoint_every == 0 &&
        gdl__fit_checkpoint(r) < 0)
        return -1;
    if (last && o->preempt && (stop = gdl__fit_preempt(r)) != 0) return stop; /* 1: stopped by a signal */
    return gdl__fit_progress(r, x);
}

/* The end of an epoch: the scheduler's epoch step, the epoch's figures, validation, history, output, CSV. */
static int gdl__fit_epoch_metrics(gdl__fit_run *r, gdl_epoch_stats *history) {
    const gdl_fit_opts *o = &r->o;
    const gdl__pass *p = &r->p;
    gdl_epoch_stats st;
    if (o->scheduler && !o->scheduler_per_batch && gdl_scheduler_step(o->scheduler) < 0) return -1;
    memset(&st, 0, sizeof st);
    st.epoch = r->epoch;
    st.seconds = gdl_now() - r->t0;
    st.samples = p->samples;
    st.loss = p->samples ? p->loss_sum / (double)p->samples : NAN;
    st.accuracy = gdl__pass_acc(p);
    st.samples_per_sec = st.seconds > 0 ? (double)p->samples / st.seconds : 0;
    st.val_loss = st.val_accuracy = NAN;
    if (o->val) {
        int erc;
        if (o->autocast != GDL_F32 && gdl_autocast_begin(o->autocast) < 0) erc = -1;
        else {
            erc = gdl_evaluate(r->m, o->val, o->loss, o->loss_user, &st.val_loss, &st.val_accuracy);
            if (o->autocast != GDL_F32) gdl_autocast_end();
        }
        if (erc < 0) return -1;
    }
    if (history) history[r->epoch - 1] = st;
    if (o->verbose) gdl_print_epoch(r->log, o->epochs, &st);
    return r->csv && gdl_metrics_csv_row(r->csv, &st) < 0 ? -1 : 0;
}

/* One epoch: its batches (the first epoch of a resumed run from where the checkpoint was taken), then the
   epoch's figures (under DDP over every rank) and the metrics. */
static int gdl__fit_epoch(gdl__fit_run *r, int epoch, gdl_epoch_stats *history) {
    gdl__pass *p = &r->p;
    gdl_tensor *x, *y;
    int rc = 0, got;
    r->epoch = epoch;
    r->b = 0;
    r->micro = 0;
    r->t0 = gdl_now();
    p->loss_sum = 0;
    p->samples = p->correct = p->counted = 0;
    if (r->resumed && epoch == r->start_epoch) { /* the epoch the checkpoint was taken in, part done */
        r->b = r->fs.batch;
        r->t0 -= r->fs.seconds; /* its time so far counts, for the rate and the CSV */
        p->loss_sum = r->fs.loss_sum;
        p->samples = r->fs.samples;
        p->correct = r->fs.correct;
        p->counted = r->fs.counted;
    }
    gdl_module_train(r->m, 1);
    if (gdl_zero_grad(r->opt) < 0) rc = -1;
    while (rc == 0 && (got = gdl_loader_next(r->train, &x, &y)) != 0)
        rc = got < 0 ? -1 : gdl__fit_train_batch(r, x, y);
    if (rc > 0) return 1; /* preempted: a checkpoint of this step is saved */
    if (rc == 0 && gdl__pass_sync(p) < 0) rc = -1;
    if (rc == 0 && r->o.ddp && gdl__dist_pass_sum(p) < 0) rc = -1; /* the epoch's figures over every rank */
    if (rc < 0) return -1;
    return gdl__fit_epoch_metrics(r, history);
}

GPUDL_API int gdl_fit(gdl_module *m, gdl_loader *train, gdl_optimizer *opt, const gdl_fit_opts *opts,
                      gdl_epoch_stats *history) {
    gdl__fit_run r;
    int epoch, rc = 0, catching = opts && opts->preempt;
    if (catching && gdl_preempt_catch(1) < 0) return -1; /* [impl-cluster] */
    if (gdl__fit_begin(&r, m, train, opt, opts, history) < 0) {
        if (catching) gdl_preempt_catch(0);
        return -1;
    }
    for (epoch = r.start_epoch; epoch <= r.o.epochs && rc == 0; epoch++) rc = gdl__fit_epoch(&r, epoch, history);
    gdl__fit_graphs_free(r.graphs);
    gdl__pass_free(&r.p);
    if (r.csv) fclose(r.csv);
    GPUDL_FREE(r.ckpath);
    if (rc < 0 && r.tty) fputc('\n', r.log);
    if (catching) gdl_preempt_catch(0);
    return rc < 0 ? -1 : rc > 0 ? GDL_FIT_PREEMPTED : 0;
}
/* ---- checkpoints ---- */

#define GDL__CKPT_MAX 4096 /* tensors in one checkpoint */

typedef struct gdl__ckpt {
    int n;
    const char *names[GDL__CKPT_MAX]; /* the names in the file */
    gdl_tensor *tensors[GDL__CKPT_MAX];
    char *owned[GDL__CKPT_MAX];       /* prefixed names we allocated */
} gdl__ckpt;

static void gdl__ckpt_free(gdl__ckpt *c) {
    int i;
    for (i = 0; i < c->n; i++) GPUDL_FREE(c->owned[i]);
    GPUDL_FREE(c);
}

/* Collects model (and optimizer) tensors with their file names. */
static gdl__ckpt *gdl__ckpt_collect(const char *op, gdl_module *m, gdl_optimizer *opt, int prefixed) {
    gdl__ckpt *c = (gdl__ckpt *)GPUDL_MALLOC(sizeof(gdl__ckpt));
    const char *names[GDL__CKPT_MAX];
    gdl_tensor *ts[GDL__CKPT_MAX];
    int k, part;
    if (!c) {
        gdl__set_error("%s: out of memory (host)", op);
        return NULL;
    }
    memset(c, 0, sizeof *c);
    /* master weights: the masters are made (or moved) first, and saved under their parameters' names (f32), so a
       resume is bit for bit and a plain f32 model loads them as its parameters */
    if (opt && opt->master != GDL_F32 && gdl__opt_layout(op, opt) < 0) {
        gdl__ckpt_free(c);
        return NULL;
    }
    for (part = 0; part < (opt ? 2 : 1); part++) {
        int n = part == 0 ? gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, names, ts, GDL__CKPT_MAX)
                          : gdl_optim_state(opt, names, ts, GDL__CKPT_MAX);
        if (part == 0 && opt && opt->master != GDL_F32 && n > 0 && n <= GDL__CKPT_MAX) {
            int j;
            for (k = 0; k < n; k++)
                for (j = 0; j < opt->nparams; j++)
                    if (opt->params[j].p == ts[k] && opt->params[j].master) {
                        ts[k] = opt->params[j].master;
                        break;
                    }
        }
        const char *prefix = part == 0 ? "model." : "optim.";
        if (n < 0 || c->n + n > GDL__CKPT_MAX) {
            if (n >= 0) gdl__set_error("%s: more than %d tensors", op, GDL__CKPT_MAX);
            gdl__ckpt_free(c);
            return NULL;
        }
        for (k = 0; k < n; k++) {
            c->tensors[c->n] = ts[k];
            if (prefixed) {
                size_t len = strlen(prefix) + strlen(names[k]) + 1;
                char *s = (char *)GPUDL_MALLOC(len);
                if (!s) {
                    gdl__set_error("%s: out of memory (host)", op);
                    gdl__ckpt_free(c);
                    return NULL;
                }
                snprintf(s, len, "%s%s", prefix, names[k]);
                c->owned[c->n] = s;
                c->names[c->n] = s;
            } else {
                c->names[c->n] = names[k];
            }
            c->n++;
        }
    }
    return c;
}

static int gdl__ckpt_write(const char *op, const char *path, gdl__ckpt *c, int n_meta, const char *const *keys,
                           const char *const *vals) {
    gdl_st_tensor *st = (gdl_st_tensor *)GPUDL_MALLOC(sizeof(gdl_st_tensor) * (size_t)(c->n + 1));
    void **host = (void **)GPUDL_MALLOC(sizeof(void *) * (size_t)(c->n + 1));
    int i, rc = 0;
    if (!st || !host) {
        GPUDL_FREE(st);
        GPUDL_FREE(host);
        gdl__set_error("%s: out of memory (host)", op);
        return -1;
    }
    memset(host, 0, sizeof(void *) * (size_t)(c->n + 1));
    for (i = 0; i < c->n && rc == 0; i++) {
        gdl_tensor *t = c->tensors[i];
        size_t bytes = (size_t)t->numel * gdl_dtype_size(t->dtype);
        if (t->dtype != GDL_F32 && t->dtype != GDL_I32 && t->dtype != GDL_F16 && t->dtype != GDL_BF16) {
            gdl__set_error("%s: tensor %s is %s; checkpoints hold f32 and i32 tensors (f16/bf16 saved as f32)", op,
                           c->names[i], gdl_dtype_name(t->dtype));
            rc = -1;
            break;
        }
        if (t->dtype == GDL_F16 || t->dtype == GDL_BF16) { /* widened exactly, so every file holds one float type */
            uint16_t *h = (uint16_t *)GPUDL_MALLOC(bytes + 1);
            gdl_real *w = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)t->numel + 1);
            int64_t j;
            host[i] = w;
            if (!h || !w || gdl_copy_to_host(t, h, bytes) < 0) {
                if (!h || !w) gdl__set_error("%s: out of memory (host)", op);
                GPUDL_FREE(h);
                rc = -1;
                break;
            }
            for (j = 0; j < t->numel; j++)
                w[j] = (gdl_real)(t->dtype == GDL_F16 ? gdl_f16_to_f32(h[j]) : gdl_bf16_to_f32(h[j]));
            GPUDL_FREE(h);
        } else if (t->device.type == GDL_DEVICE_CPU) {
            host[i] = NULL;
        } else if (!(host[i] = GPUDL_MALLOC(bytes + 1)) || gdl_copy_to_host(t, host[i], bytes) < 0) {
            if (!host[i]) gdl__set_error("%s: out of memory (host)", op);
            rc = -1;
            break;
        }
        st[i].name = c->names[i];
        st[i].dtype = t->dtype == GDL_I32 ? "I32" : sizeof(gdl_real) == 8 ? "F64" : "F32";
        st[i].ndim = t->ndim;
        st[i].shape = t->shape;
        st[i].data = host[i] ? host[i] : t->data;
    }
    if (rc == 0) rc = gdl_st_write(path, c->n, st, n_meta, keys, vals);
    for (i = 0; i < c->n; i++) GPUDL_FREE(host[i]);
    GPUDL_FREE(host);
    GPUDL_FREE(st);
    return rc;
}

GPUDL_API int gdl_save_model(gdl_module *m, const char *path) {
    static const char *const keys[2] = {"format", "gpudl"};
    static const char *const vals[2] = {"pt", GPUDL_VERSION};
    gdl__ckpt *c;
    int rc;
    if (!m || !path) {
        gdl__null_arg("gdl_save_model", !m ? "module" : "path");
        return -1;
    }
    if (!(c = gdl__ckpt_collect("gdl_save_model", m, NULL, 0))) return -1;
    rc = gdl__ckpt_write("gdl_save_model", path, c, 2, keys, vals);
    gdl__ckpt_free(c);
    return rc;
}

/* Checks every tensor of c against the file (names, dtypes, shapes, nothing
   extra) and converts each into a new host buffer of gdl_real: bufs[i]. */
static int gdl__ckpt_check(const char *op, const char *path, const gdl__ckpt *c, const gdl_st_file *f, void **bufs) {
    int i, k;
    for (k = 0; k < f->n; k++) {
        for (i = 0; i < c->n; i++)
            if (strcmp(f->entries[k].name, c->names[i]) == 0) break;
        if (i == c->n) {
            const char *name = f->entries[k].name;
            int is_ckpt = strncmp(name, "model.", 6) == 0 || strncmp(name, "optim.", 6) == 0;
            if (is_ckpt && strcmp(op, "gdl_load_model") == 0)
                gdl__set_error("%s: %s: this is a training checkpoint (it holds '%s'): load it with "
                               "gdl_load_checkpoint, or save the model alone with gdl_save_model", op, path, name);
            else if (strncmp(name, "optim.", 6) == 0)
                gdl__set_error("%s: %s: the file holds optimizer state '%s' that this optimizer has no place for: "
                               "it was saved from another kind of optimizer (Adam's exp_avg into SGD?) or with "
                               "other parameters", op, path, name);
            else if (!is_ckpt && strcmp(op, "gdl_load_checkpoint") == 0)
                gdl__set_error("%s: %s: unexpected tensor '%s': this looks like a model file (gdl_save_model): "
                               "load it with gdl_load_model", op, path, name);
            else
                gdl__set_error("%s: %s: unexpected tensor '%s' (not in the model)", op, path, name);
            return -1;
        }
    }
    for (i = 0; i < c->n; i++) {
        const gdl_st_entry *e = gdl_st_find(f, c->names[i]);
        const gdl_tensor *t = c->tensors[i];
        const unsigned char *src;
        gdl_real *dst;
        int64_t j;
        if (!e) {
            if (strncmp(c->names[i], "optim.", 6) == 0)
                gdl__set_error("%s: %s: missing optimizer state '%s' (saved from another kind of optimizer, or "
                               "without one?)", op, path, c->names[i]);
            else
                gdl__set_error("%s: %s: missing tensor '%s'", op, path, c->names[i]);
            return -1;
        }
        if (e->ndim != t->ndim || (t->ndim && memcmp(e->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))) {
            gdl__set_error("%s: %s: tensor '%s' has shape %s in the file but %s in the model", op, path, c->names[i],
                           gdl__shape_fmt(e->ndim, e->shape), gdl_shape_str(t));
            return -1;
        }
        if (t->dtype == GDL_I32) { /* integer state (step counts): stored as I32, taken as is */
            if (strcmp(e->dtype, "I32")) {
                gdl__set_error("%s: %s: tensor '%s' has dtype %s; expected I32", op, path, c->names[i], e->dtype);
                return -1;
            }
            if (!(bufs[i] = GPUDL_MALLOC(4 * (size_t)t->numel + 1))) {
                gdl__set_error("%s: out of memory (host)", op);
                return -1;
            }
            src = f->data + e->begin;
            for (j = 0; j < t->numel; j++)
                ((int32_t *)bufs[i])[j] = (int32_t)((uint32_t)src[4 * j] | (uint32_t)src[4 * j + 1] << 8 |
                                                    (uint32_t)src[4 * j + 2] << 16 | (uint32_t)src[4 * j + 3] << 24);
            continue;
        }
        if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "F64") && strcmp(e->dtype, "F16") && strcmp(e->dtype, "BF16")) {
            gdl__set_error("%s: %s: tensor '%s' has dtype %s; expected F32, F64, F16 or BF16", op, path, c->names[i],
                           e->dtype);
            return -1;
        }
        if (!(bufs[i] = GPUDL_MALLOC(sizeof(gdl_real) * (size_t)t->numel + 1))) {
            gdl__set_error("%s: out of memory (host)", op);
            return -1;
        }
        dst = (gdl_real *)bufs[i];
        src = f->data + e->begin;
        {
            int kind = !strcmp(e->dtype, "F32") ? 0 : !strcmp(e->dtype, "F64") ? 1 : !strcmp(e->dtype, "F16") ? 2 : 3;
            for (j = 0; j < t->numel; j++) { /* little-endian in the file */
                if (kind == 0) {
                    uint32_t u = (uint32_t)src[4 * j] | (uint32_t)src[4 * j + 1] << 8 | (uint32_t)src[4 * j + 2] << 16 |
                                 (uint32_t)src[4 * j + 3] << 24;
                    dst[j] = (gdl_real)gdl__bits_f32(u);
                } else if (kind == 1) {
                    uint64_t u = 0;
                    double d;
                    int b;
                    for (b = 7; b >= 0; b--) u = u << 8 | src[8 * j + b];
                    memcpy(&d, &u, 8);
                    dst[j] = (gdl_real)d;
                } else {
                    uint16_t h = (uint16_t)(src[2 * j] | src[2 * j + 1] << 8);
                    dst[j] = (gdl_real)(kind == 2 ? gdl_f16_to_f32(h) : gdl_bf16_to_f32(h));
                }
            }
            if (t->dtype == GDL_F16 || t->dtype == GDL_BF16) /* rounded in place (2j <= j's element, read before) */
                for (j = 0; j < t->numel; j++) {
                    float v = (float)dst[j];
                    ((uint16_t *)bufs[i])[j] = t->dtype == GDL_F16 ? gdl_f32_to_f16(v) : gdl_f32_to_bf16(v);
                }
        }
    }
    return 0;
}

static int gdl__ckpt_apply(const char *op, const gdl__ckpt *c, void **bufs) {
    int i;
    for (i = 0; i < c->n; i++)
        if (gdl__copy_bytes(op, c->tensors[i]->data, c->tensors[i]->device, bufs[i], gdl_cpu(),
                            gdl_dtype_size(c->tensors[i]->dtype) * (size_t)c->tensors[i]->numel) < 0)
            return -1;
    return 0;
}

static void gdl__free_bufs(void **bufs, int n) {
    int i;
    if (!bufs) return;
    for (i = 0; i < n; i++) GPUDL_FREE(bufs[i]);
    GPUDL_FREE(bufs);
}

static void **gdl__alloc_bufs(const char *op, int n) {
    void **b = (void **)GPUDL_MALLOC(sizeof(void *) * (size_t)(n + 1));
    if (!b) gdl__set_error("%s: out of memory (host)", op);
    else memset(b, 0, sizeof(void *) * (size_t)(n + 1));
    return b;
}

GPUDL_API int gdl_load_model(gdl_module *m, const char *path) {
    const char *op = "gdl_load_model";
    gdl_st_file f;
    gdl__ckpt *c;
    void **bufs;
    int rc;
    if (!m || !path) {
        gdl__null_arg(op, !m ? "module" : "path");
        return -1;
    }
    if (!(c = gdl__ckpt_collect(op, m, NULL, 0))) return -1;
    if (gdl_st_read(path, &f) < 0) {
        gdl__ckpt_free(c);
        return -1;
    }
    bufs = gdl__alloc_bufs(op, c->n);
    rc = bufs && gdl__ckpt_check(op, path, c, &f, bufs) == 0 ? gdl__ckpt_apply(op, c, bufs) : -1;
    gdl__free_bufs(bufs, c->n);
    gdl__ckpt_free(c);
    gdl_st_free(&f);
    return rc;
}

/* metadata of a training checkpoint */
#define GDL__META_MAX 96 /* 6 + 2 per group (32 at most) + 1 + 12 fit.* keys, with room */
typedef struct gdl__meta {
    int n;
    char keys[GDL__META_MAX][48];
    char vals[GDL__META_MAX][48];
    const char *kp[GDL__META_MAX], *vp[GDL__META_MAX];
} gdl__meta;

static void gdl__meta_add(gdl__meta *md, const char *key, const char *fmt, ...) {
    va_list ap;
    if (md->n >= GDL__META_MAX) return;
    snprintf(md->keys[md->n], sizeof md->keys[0], "%s", key);
    va_start(ap, fmt);
    vsnprintf(md->vals[md->n], sizeof md->vals[0], fmt, ap);
    va_end(ap);
    md->kp[md->n] = md->keys[md->n];
    md->vp[md->n] = md->vals[md->n];
    md->n++;
}

/* the metadata value of key in f, NULL + error when missing */
static const char *gdl__meta_find(const char *op, const char *path, const gdl_st_file *f, const char *key) {
    int i;
    for (i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    gdl__set_error("%s: %s: metadata '%s' is missing: not a gpudl training checkpoint (a model file saved with "
                   "gdl_save_model loads with gdl_load_model)", op, path, key);
    return NULL;
}

/* a metadata value of f as a number; 0 / -1 */
static int gdl__meta_get(const char *op, const char *path, const gdl_st_file *f, const char *key, double *out) {
    const char *v = gdl__meta_find(op, path, f, key);
    char *end;
    if (!v) return -1;
    *out = strtod(v, &end);
    if (end != v && *end == 0) return 0;
    gdl__set_error("%s: %s: metadata '%s' is not a number: '%s'", op, path, key, v);
    return -1;
}

static int gdl__meta_get_u64(const char *op, const char *path, const gdl_st_file *f, const char *key, uint64_t *out) {
    const char *v = gdl__meta_find(op, path, f, key);
    char *end;
    if (!v) return -1;
    *out = (uint64_t)strtoull(v, &end, 10);
    if (end != v && *end == 0) return 0;
    gdl__set_error("%s: %s: metadata '%s' is not an integer: '%s'", op, path, key, v);
    return -1;
}

/* gdl_save_checkpoint, plus gdl_fit's position (fs, may be NULL) as metadata fit.* */
static int gdl__checkpoint_save(const char *op, const char *path, gdl_module *m, gdl_optimizer *opt,
                                gdl_scheduler *sched, int64_t epoch, const gdl__fit_state *fs) {
    gdl__meta *md;
    gdl__ckpt *c;
    uint64_t seed, counter;
    int g, rc;
    if (!m || !path) {
        gdl__null_arg(op, !m ? "module" : "path");
        return -1;
    }
    if (!(md = (gdl__meta *)GPUDL_MALLOC(sizeof(gdl__meta)))) {
        gdl__set_error("%s: out of memory (host)", op);
        return -1;
    }
    md->n = 0;
    seed = gdl_rng_get_state(&counter);
    gdl__meta_add(md, "gpudl.checkpoint", "%s", GPUDL_VERSION);
    gdl__meta_add(md, "epoch", "%lld", (long long)epoch);
    gdl__meta_add(md, "rng.seed", "%llu", (unsigned long long)seed);
    gdl__meta_add(md, "rng.counter", "%llu", (unsigned long long)counter);
    if (opt && gdl_optim_num_groups(opt) > 32) {
        gdl__set_error("%s: the optimizer has %d parameter groups; checkpoints hold at most 32", op,
                       gdl_optim_num_groups(opt));
        GPUDL_FREE(md);
        return -1;
    }
    if (opt) {
        gdl__meta_add(md, "optim.step", "%lld", (long long)gdl_optim_get_step(opt));
        gdl__meta_add(md, "optim.groups", "%d", gdl_optim_num_groups(opt));
        for (g = 0; g < gdl_optim_num_groups(opt) && g < 32; g++) {
            char k[48];
            snprintf(k, sizeof k, "optim.lr.%d", g);
            gdl__meta_add(md, k, "%.17g", gdl_optim_get_lr(opt, g));
            snprintf(k, sizeof k, "optim.momentum.%d", g);
            gdl__meta_add(md, k, "%.17g", gdl_optim_get_momentum(opt, g));
        }
    }
    if (sched) gdl__meta_add(md, "sched.last_epoch", "%lld", (long long)gdl_scheduler_get_last_epoch(sched));
    if (opt && opt->scaler && opt->scaler->o.enabled) { /* PyTorch's GradScaler.state_dict() */
        double sc = gdl_grad_scaler_get_scale(opt->scaler);
        int64_t tr = gdl_grad_scaler_get_growth_tracker(opt->scaler);
        if (sc != sc || tr < 0) {
            GPUDL_FREE(md);
            return -1;
        }
        gdl__meta_add(md, "scaler.scale", "%.17g", sc);
        gdl__meta_add(md, "scaler.growth_tracker", "%lld", (long long)tr);
        gdl__meta_add(md, "scaler.growth_factor", "%.17g", opt->scaler->o.growth_factor);
        gdl__meta_add(md, "scaler.backoff_factor", "%.17g", opt->scaler->o.backoff_factor);
        gdl__meta_add(md, "scaler.growth_interval", "%d", opt->scaler->o.growth_interval);
    }
    if (fs) {
        gdl__meta_add(md, "fit.epoch", "%lld", (long long)fs->epoch);
        gdl__meta_add(md, "fit.batch", "%lld", (long long)fs->batch);
        gdl__meta_add(md, "fit.loader_epoch", "%lld", (long long)fs->loader_epoch);
        gdl__meta_add(md, "fit.num_batches", "%lld", (long long)fs->num_batches);
        gdl__meta_add(md, "fit.val_epoch", "%lld", (long long)fs->val_epoch);
        gdl__meta_add(md, "fit.loss_sum", "%.17g", fs->loss_sum);
        gdl__meta_add(md, "fit.seconds", "%.17g", fs->seconds);
        gdl__meta_add(md, "fit.samples", "%lld", (long long)fs->samples);
        gdl__meta_add(md, "fit.correct", "%lld", (long long)fs->correct);
        gdl__meta_add(md, "fit.counted", "%lld", (long long)fs->counted);
        gdl__meta_add(md, "fit.replicas", "%lld", (long long)fs->replicas);
        gdl__meta_add(md, "fit.batch_size", "%lld", (long long)fs->batch_size);
    }
    if (!(c = gdl__ckpt_collect(op, m, opt, 1))) {
        GPUDL_FREE(md);
        return -1;
    }
    rc = gdl__ckpt_write(op, path, c, md->n, md->kp, md->vp);
    gdl__ckpt_free(c);
    GPUDL_FREE(md);
    return rc;
}

GPUDL_API int gdl_save_checkpoint(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                                  int64_t epoch) {
    return gdl__checkpoint_save("gdl_save_checkpoint", path, m, opt, sched, epoch, NULL);
}

static int gdl__fit_save(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                         const gdl__fit_state *fs) {
    return gdl__checkpoint_save("gdl_fit", path, m, opt, sched, fs->epoch, fs);
}

static int gdl__checkpoint_load(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                                int64_t *epoch, int ddp);

/* gdl_fit's position from the checkpoint at path, checked against this run (the train loader, epochs)
   before anything changes; then the checkpoint itself (all or nothing; under DDP on every rank or on none).
   A checkpoint taken with other shards (world size) or another batch size is resumed where the same
   samples of the epoch are done: its position in samples over every rank (batch x batch size x world
   size) must be a whole number of this run's batches, or the epoch's end. 0 / -1. */
static int gdl__fit_load(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                         gdl__fit_state *fs, const gdl_loader *train, int epochs, int ddp) {
    static const char op[] = "gdl_fit";
    static const char *const keys[12] = {"fit.epoch", "fit.batch", "fit.loader_epoch", "fit.num_batches",
                                         "fit.val_epoch", "fit.loss_sum", "fit.seconds", "fit.samples",
                                         "fit.correct", "fit.counted", "fit.replicas", "fit.batch_size"};
    double v[12];
    gdl_st_file f;
    int i, rc = 0, nk = 10;
    int64_t num_batches = train->nb, W = train->o.num_replicas > 1 ? train->o.num_replicas : 1, B = train->B;
    if (gdl_st_read(path, &f) < 0) goto fail;
    for (i = 0; i < f.n_meta && strncmp(f.meta_keys[i], "fit.", 4) != 0; i++) {
    }
    if (i == f.n_meta) {
        gdl__set_error("%s: cannot resume from %s: it holds no gdl_fit position (fit.* metadata); only checkpoints "
                       "written by gdl_fit's checkpoint_every can be resumed from", op, path);
        gdl_st_free(&f);
        goto fail;
    }
    for (i = 0; i < f.n_meta; i++) /* the shards and batch size: absent from older checkpoints */
        if (strcmp(f.meta_keys[i], "fit.replicas") == 0) nk = 12;
    for (i = 0; i < nk && rc == 0; i++) rc = gdl__meta_get(op, path, &f, keys[i], &v[i]);
    gdl_st_free(&f);
    if (rc < 0) goto fail;
    if (nk == 10) v[10] = (double)W, v[11] = (double)B; /* taken as this run's */
    /* integers in range before they are cast (a damaged file may hold anything, NaN included) */
    for (i = 0; i < nk; i++)
        if (i != 5 && i != 6 && !(v[i] >= -1 && v[i] <= 9e15 && v[i] == (double)(int64_t)v[i])) {
            gdl__set_error("%s: %s: metadata '%s' is not a valid count: %g", op, path, keys[i], v[i]);
            goto fail;
        }
    if (!(v[5] == v[5] && v[6] >= 0)) {
        gdl__set_error("%s: %s: damaged fit.loss_sum or fit.seconds", op, path);
        goto fail;
    }
    if (v[0] < 1 || v[0] > epochs || v[1] < 0 || v[1] > v[3] || v[2] < 0 || v[7] < 0 || v[8] < 0 || v[9] < 0 ||
        v[10] < 1 || v[11] < 1) {
        gdl__set_error("%s: cannot resume from %s: it was taken at epoch %.0f, batch %.0f of %.0f; this run has %d "
                       "epochs", op, path, v[0], v[1], v[3], epochs);
        goto fail;
    }
    fs->batch = (int64_t)v[1];
    if ((int64_t)v[10] == W && (int64_t)v[11] == B) {
        if ((int64_t)v[3] != num_batches) {
            gdl__set_error("%s: cannot resume from %s: it was taken at epoch %.0f, batch %.0f of a loader with %.0f "
                           "batches per epoch; this run's has %lld (another dataset?)", op, path, v[0], v[1], v[3],
                           (long long)num_batches);
            goto fail;
        }
    } else if ((int64_t)v[1] == (int64_t)v[3]) { /* taken at the end of an epoch */
        fs->batch = num_batches;
    } else { /* the same samples done: the sampler re-shards the epoch for this run's world size */
        int64_t done = (int64_t)v[1] * (int64_t)v[10] * (int64_t)v[11];
        if (done % (W * B) != 0 || done / (W * B) > num_batches) {
            gdl__set_error("%s: cannot resume from %s: it was taken in epoch %.0f after %lld samples (batch %.0f of "
                           "batch size %.0f on %.0f ranks); with batch size %lld on %lld ranks (%lld samples a step) "
                           "that is not a whole number of batches: resume from a checkpoint at an epoch's end, or "
                           "keep the samples per step", op, path, v[0], (long long)done, v[1], v[11], v[10],
                           (long long)B, (long long)W, (long long)(W * B));
            goto fail;
        }
        fs->batch = done / (W * B);
    }
    fs->epoch = (int64_t)v[0];
    fs->loader_epoch = (int64_t)v[2];
    fs->num_batches = num_batches;
    fs->val_epoch = (int64_t)v[4];
    fs->loss_sum = v[5]; /* printed with %.17g: exact */
    fs->seconds = v[6];
    fs->samples = (int64_t)v[7];
    fs->correct = (int64_t)v[8];
    fs->counted = (int64_t)v[9];
    fs->replicas = W;
    fs->batch_size = B;
    return gdl__checkpoint_load(path, m, opt, sched, NULL, ddp);
fail:
    if (ddp) gdl__dist_agree(op, "loading the checkpoint to resume from", 0);
    return -1;
}

/* ddp: every rank loads, or none: the ranks agree once everything is checked, before anything changes
   (*agreed says it was done) */
static int gdl__checkpoint_load_(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                                 int64_t *epoch, int ddp, int *agreed) {
    const char *op = "gdl_load_checkpoint";
    gdl_st_file f;
    gdl__ckpt *c;
    void **bufs = NULL;
    double ep = 0, step = 0, groups = 0, last = 0, lr[32], mom[32], sc_scale = 0, sc_tracker = 0, sc_opt[3];
    uint64_t seed = 0, counter = 0;
    int g, ng = 0, rc = -1, has_scaler = 0;
    if (!m || !path) {
        gdl__null_arg(op, !m ? "module" : "path");
        return -1;
    }
    if (!(c = gdl__ckpt_collect(op, m, opt, 1))) return -1;
    if (gdl_st_read(path, &f) < 0) {
        gdl__ckpt_free(c);
        return -1;
    }
    /* read and check everything before changing anything */
    if (gdl__meta_get(op, path, &f, "epoch", &ep) < 0 || gdl__meta_get_u64(op, path, &f, "rng.seed", &seed) < 0 ||
        gdl__meta_get_u64(op, path, &f, "rng.counter", &counter) < 0)
        goto done;
    if (opt) {
        ng = gdl_optim_num_groups(opt);
        if (gdl__meta_get(op, path, &f, "optim.step", &step) < 0 || gdl__meta_get(op, path, &f, "optim.groups", &groups) < 0)
            goto done;
        if ((int)groups != ng || ng > 32) {
            gdl__set_error("%s: %s: the file has %d parameter groups, the optimizer %d", op, path, (int)groups, ng);
            goto done;
        }
        for (g = 0; g < ng; g++) {
            char k[48];
            snprintf(k, sizeof k, "optim.lr.%d", g);
            if (gdl__meta_get(op, path, &f, k, &lr[g]) < 0) goto done;
            snprintf(k, sizeof k, "optim.momentum.%d", g);
            if (gdl__meta_get(op, path, &f, k, &mom[g]) < 0) goto done;
        }
    }
    if (sched && gdl__meta_get(op, path, &f, "sched.last_epoch", &last) < 0) goto done;
    if (opt && opt->scaler) { /* older checkpoints and runs without a scaler have none: the scaler is left as is */
        for (g = 0; g < f.n_meta && strcmp(f.meta_keys[g], "scaler.scale") != 0; g++) {
        }
        has_scaler = g < f.n_meta;
        if (has_scaler && (gdl__meta_get(op, path, &f, "scaler.scale", &sc_scale) < 0 ||
                           gdl__meta_get(op, path, &f, "scaler.growth_tracker", &sc_tracker) < 0 ||
                           gdl__meta_get(op, path, &f, "scaler.growth_factor", &sc_opt[0]) < 0 ||
                           gdl__meta_get(op, path, &f, "scaler.backoff_factor", &sc_opt[1]) < 0 ||
                           gdl__meta_get(op, path, &f, "scaler.growth_interval", &sc_opt[2]) < 0))
            goto done;
        if (has_scaler && (!(sc_scale > 0) || (float)sc_scale - (float)sc_scale != 0 || !(sc_tracker >= 0) ||
                           sc_tracker > INT32_MAX || sc_tracker != (double)(int64_t)sc_tracker ||
                           !(sc_opt[0] > 1) || sc_opt[0] - sc_opt[0] != 0 || !(sc_opt[1] > 0 && sc_opt[1] < 1) ||
                           !(sc_opt[2] >= 1 && sc_opt[2] <= INT32_MAX) || sc_opt[2] != (double)(int64_t)sc_opt[2])) {
            gdl__set_error("%s: %s: the scaler's state is out of range (scale %g, growth_tracker %g, growth_factor %g, "
                           "backoff_factor %g, growth_interval %g)", op, path, sc_scale, sc_tracker, sc_opt[0],
                           sc_opt[1], sc_opt[2]);
            goto done;
        }
    }
    if (opt) {
        if (!(step >= 0)) {
            gdl__set_error("%s: %s: optimizer step %g is negative", op, path, step);
            goto done;
        }
        for (g = 0; g < ng; g++)
            if (!(lr[g] >= 0) || !(mom[g] >= 0 && mom[g] < 1)) {
                gdl__set_error("%s: %s: group %d has lr %g or momentum %g out of range", op, path, g, lr[g], mom[g]);
                goto done;
            }
    }
    if (!(bufs = gdl__alloc_bufs(op, c->n)) || gdl__ckpt_check(op, path, c, &f, bufs) < 0) goto done;
    if (ddp) {
        *agreed = 1;
        if (gdl__dist_agree("gdl_fit", "loading the checkpoint to resume from", 1) < 0) goto done;
    }
    /* apply: the scheduler first, since it may refuse the position (OneCycle past its total
       steps); it changes only the learning rates, which are set again below */
    if (sched) {
        int64_t before = gdl_scheduler_get_last_epoch(sched);
        if (gdl_scheduler_set_last_epoch(sched, (int64_t)last) < 0) {
            char why[sizeof gdl__err];
            memcpy(why, gdl__err, sizeof why);
            gdl_scheduler_set_last_epoch(sched, before);
            gdl__set_error("%s: %s: %s", op, path, why);
            goto done;
        }
    }
    if (gdl__ckpt_apply(op, c, bufs) < 0) goto done;
    if (opt && opt->master != GDL_F32 && gdl__opt_round_params(op, opt) < 0) goto done; /* from the masters loaded */
    if (opt) {
        gdl_optim_set_step(opt, (int64_t)step);
        for (g = 0; g < ng; g++) { /* in range: checked above */
            gdl_optim_set_lr(opt, g, lr[g]);
            gdl_optim_set_momentum(opt, g, mom[g]);
        }
        if (has_scaler) { /* as GradScaler.load_state_dict: the factors and interval too */
            if (gdl_grad_scaler_set_state(opt->scaler, sc_scale, (int64_t)sc_tracker) < 0) goto done;
            opt->scaler->o.growth_factor = sc_opt[0];
            opt->scaler->o.backoff_factor = sc_opt[1];
            opt->scaler->o.growth_interval = (int)sc_opt[2];
        }
    }
    gdl_rng_set_state(seed, counter);
    if (epoch) *epoch = (int64_t)ep;
    rc = 0;
done:
    gdl__free_bufs(bufs, c->n);
    gdl__ckpt_free(c);
    gdl_st_free(&f);
    return rc;
}

static int gdl__checkpoint_load(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                                int64_t *epoch, int ddp) {
    int agreed = 0, rc = gdl__checkpoint_load_(path, m, opt, sched, epoch, ddp, &agreed);
    if (ddp && !agreed) gdl__dist_agree("gdl_fit", "loading the checkpoint to resume from", 0);
    return rc;
}

GPUDL_API int gdl_load_checkpoint(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                                  int64_t *epoch) {
    return gdl__checkpoint_load(path, m, opt, sched, epoch, 0);
}

/* ---------------------------------------------------------------------------
   [impl-graph]   gdl_graph_capture / replay: the backend records the
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
    if (!(g = (gdl_graph *)GPUDL_MALLOC(sizeof *g))) {
        gdl__set_error("%s: out of host memory", op);
        return NULL;
    }
    memset(g, 0, sizeof *g);
    g->dev = dev;
    g->step = step;
    g->ctx = ctx;
    if (!(g->be = gdl__be_lookup(op, dev))) goto fail;
    if (dev.type == GDL_DEVICE_CPU) return g;
    gdl_arena_reset();
    if (g->be->graph_begin() < 0) goto fail;
    gdl__capturing = 1;
    rc = step(ctx);
    gdl__capturing = 0;
    if (rc < 0) {
        /* keep the step's error: ending the capture adds CUDA's own (invalidated) */
        char why[sizeof gdl__err];
        snprintf(why, sizeof why, "%s", gdl_last_error());
        g->be->graph_end(&g->exec);
        gdl__set_error("%s: the step cannot be captured on %s: %s (MANUAL [api-graph]: no host reads, new "
                       "tensors or dropout inside a captured step)",
                       op, gdl_device_str(dev), why);
        goto fail;
    }
    if (g->be->graph_end(&g->exec) < 0) {
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
        rc = g->be->graph_launch(g->exec);
        gdl__prof_pop(span, rc == 0);
        return rc;
    }
}

GPUDL_API void gdl_graph_free(gdl_graph *g) {
    if (!g) return;
    if (g->exec && gdl__be_lookup("gdl_graph_free", g->dev)) g->be->graph_destroy(g->exec);
    GPUDL_FREE(g);
}

/* ---------------------------------------------------------------------------
   [impl-dist]   The launcher's environment and the collectives (MPI).
   ------------------------------------------------------------------------- */

#ifdef GPUDL_MPI
#include <mpi.h>
#endif

#define GDL__DIST_DEFAULT_TIMEOUT 600.0 /* seconds, PyTorch's default for NCCL process groups */

static struct {
    int init, rank, world, local;
    const char *launcher;
    int64_t seq;     /* collectives this rank has started: the ranks are in step when theirs agree */
    int broken;      /* a collective timed out or failed: no further MPI call is made */
    char broken_why[160];
    int have_id;         /* NCCL's id of the job was handed round at init */
    unsigned char id[GDL_COMM_ID_BYTES];
    int comm_dev;        /* the communicator's CUDA device + 1; 0: none made yet */
#ifdef GPUDL_MPI
    MPI_Comm comm;   /* a duplicate of MPI_COMM_WORLD whose errors return */
    MPI_Comm ctl;    /* another: "where are you?" between waiting ranks, never mixed with the data */
    int mpi_ours;    /* gdl_dist_init started MPI: shutdown ends it */
#endif
} gdl__dist; /* zero: not initialised (rank 0 of 1, "single") */

static double gdl__dist_timeout_s; /* 0: GDL__DIST_DEFAULT_TIMEOUT */
static int gdl__dist_timeout_called; /* gdl_dist_set_timeout was called: GPUDL_DIST_TIMEOUT no longer counts */

/* The variable `name` as a whole number in [lo, hi]: 1 set, 0 unset, -1 bad. */
static int gdl__env_int(const char *op, const char *launcher, const char *name, long lo, long hi, int *out) {
    const char *v = getenv(name);
    char *end;
    long x;
    if (!v) return 0;
    x = strtol(v, &end, 10);
    if (!v[0] || *end || x < lo || x > hi) {
        gdl__set_error("%s: %s='%s' (%s) is not a whole number in [%ld, %ld]", op, name, v, launcher, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 1;
}

#ifdef GPUDL_MPI
static int gdl__mpi_fail(const char *op, const char *call, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    gdl__set_error("%s: %s failed: %s", op, call, msg);
    return -1;
}
#endif

/* The GPU backend that carries collectives of CUDA tensors (NCCL), NULL when this build or machine has none. */
static const gdl_backend *gdl__dist_gpu(void) {
    return gdl__cuda_registry && gdl_cuda_device_count() > 0 ? gdl__cuda_registry->backend() : NULL;
}

/* ---- the rendezvous without MPI: NCCL's id from rank 0 over TCP, as torchrun's
   env:// store. Rank 0 listens at MASTER_PORT; every other rank connects to
   MASTER_ADDR:MASTER_PORT (retrying while rank 0 is not up yet), says its rank
   and world size, and receives the id once every rank has come. Each side
   gives up after the timeout with an error naming the address. */
#if !defined(GPUDL_MPI) && defined(GDL__OS_SOCKETS)
#define GDL__HAVE_RDV 1
#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* macOS: SIGPIPE stays possible */
#endif

enum { GDL__RDV_HELLO = 12, GDL__RDV_REPLY = 12 + GDL_COMM_ID_BYTES };

static void gdl__put32(unsigned char *b, uint32_t v) {
    b[0] = (unsigned char)(v >> 24), b[1] = (unsigned char)(v >> 16), b[2] = (unsigned char)(v >> 8),
    b[3] = (unsigned char)v;
}
static uint32_t gdl__get32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* poll's milliseconds for `left` seconds: at most an hour at a time (the callers poll again while time is
   left), so a long or infinite timeout (GPUDL_DIST_TIMEOUT=inf) never overflows an int */
static int gdl__poll_ms(double left) { return left >= 3600 ? 3600000 : left <= 0 ? 0 : (int)(left * 1000) + 1; }

/* n bytes in or out of fd before the deadline (gdl_now seconds): 0, or -1 with errno (ETIMEDOUT, EPIPE: closed) */
static int gdl__rdv_io(int fd, unsigned char *b, size_t n, int out, double deadline) {
    size_t k = 0;
    while (k < n) {
        struct pollfd pf;
        double left = deadline - gdl_now();
        ssize_t r;
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        pf.fd = fd, pf.events = (short)(out ? POLLOUT : POLLIN), pf.revents = 0;
        if (poll(&pf, 1, gdl__poll_ms(left)) <= 0) continue;
        r = out ? send(fd, b + k, n - k, MSG_NOSIGNAL) : recv(fd, b + k, n - k, 0);
        if (r == 0) errno = EPIPE;
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return -1;
        }
        k += (size_t)r;
    }
    return 0;
}

/* connect() that gives up at the deadline: a host that does not answer would otherwise hold a blocking
   connect for the kernel's SYN retries (minutes). 0, or -1 with errno. */
static int gdl__rdv_connect_by(int fd, const struct sockaddr *sa, socklen_t len, double deadline) {
    int fl = fcntl(fd, F_GETFL, 0), rc, err = 0;
    socklen_t el = sizeof err;
    struct pollfd pf;
    double left;
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return connect(fd, sa, len);
    rc = connect(fd, sa, len);
    if (rc != 0 && errno == EINPROGRESS) {
        pf.fd = fd, pf.events = POLLOUT;
        for (;;) {
            int pr;
            left = deadline - gdl_now();
            if (left <= 0) {
                errno = ETIMEDOUT;
                return -1;
            }
            pf.revents = 0;
            if ((pr = poll(&pf, 1, gdl__poll_ms(left))) > 0) break;
            if (pr < 0 && errno != EINTR) return -1;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) return -1;
        if (err) {
            errno = err;
            return -1;
        }
        rc = 0;
    }
    if (rc == 0) fcntl(fd, F_SETFL, fl);
    return rc;
}

/* A TCP connection to host:port, or -1 with errno, or -2: host is no address (it does not resolve). */
static int gdl__rdv_connect(const char *host, int port, double deadline) {
#ifdef AI_PASSIVE /* getaddrinfo: POSIX 2001, hidden by a bare -std=c99 */
    struct addrinfo hints, *res, *a;
    char ps[16];
    int fd = -1, e = ECONNREFUSED;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof ps, "%d", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0) return -2;
    for (a = res; a; a = a->ai_next) {
        if ((fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol)) < 0) continue;
        if (gdl__rdv_connect_by(fd, a->ai_addr, a->ai_addrlen, deadline) == 0) break;
        e = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) errno = e;
    return fd;
#else /* numeric IPv4 (or localhost) only */
    struct sockaddr_in sa;
    int fd;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = !strcmp(host, "localhost") ? htonl(0x7f000001u) : inet_addr(host);
    if (sa.sin_addr.s_addr == (in_addr_t)-1) return -2;
    if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0) return -1;
    if (gdl__rdv_connect_by(fd, (struct sockaddr *)&sa, sizeof sa, deadline) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
#endif
}

/* gdl__rendezvous on rank 0: waits for every other rank at MASTER_PORT (until deadline), then sends each the id. */
static int gdl__rdv_serve(const char *op, int world, const unsigned char *id, double timeout, double deadline,
                          const char *addr, long port) {
    unsigned char hello[GDL__RDV_HELLO], reply[GDL__RDV_REPLY];
    int lfd, one = 1, got = 0, i, rc = -1, *fds;
    struct sockaddr_in sa;
    char *seen;
    if (!(fds = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)world)) || !(seen = (char *)GPUDL_MALLOC((size_t)world))) {
        GPUDL_FREE(fds);
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    memset(seen, 0, (size_t)world);
    for (i = 0; i < world; i++) fds[i] = -1; /* by rank */
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if ((lfd = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, world) != 0) {
        gdl__set_error("%s: rank 0 cannot listen at MASTER_PORT=%ld: %s", op, port, strerror(errno));
        if (lfd >= 0) close(lfd);
        GPUDL_FREE(fds), GPUDL_FREE(seen);
        return -1;
    }
    while (got < world - 1) {
        struct pollfd pf;
        double left = deadline - gdl_now();
        int fd, r, w;
        if (left <= 0) {
            char missing[200];
            size_t k = 0;
            for (i = 1; i < world && k + 12 < sizeof missing; i++)
                if (!seen[i]) k += (size_t)snprintf(missing + k, sizeof missing - k, "%s%d", k ? ", " : "", i);
            gdl__set_error("%s: rank 0 waited %g s (GPUDL_DIST_TIMEOUT) at MASTER_ADDR=%s MASTER_PORT=%ld: %d of "
                           "%d ranks came; missing: rank %s", op, timeout, addr, port, got + 1, world, missing);
            goto done;
        }
        pf.fd = lfd, pf.events = POLLIN, pf.revents = 0;
        if (poll(&pf, 1, gdl__poll_ms(left)) <= 0 || (fd = accept(lfd, NULL, NULL)) < 0) continue;
        if (gdl__rdv_io(fd, hello, sizeof hello, 0, gdl_now() + 10 < deadline ? gdl_now() + 10 : deadline) < 0 ||
            memcmp(hello, "gdlR", 4) != 0) {
            close(fd); /* not one of ours (a port scan, a stale job): wait on */
            continue;
        }
        r = (int)gdl__get32(hello + 4), w = (int)gdl__get32(hello + 8);
        if (w != world || r <= 0 || r >= world) {
            memset(reply, 0, sizeof reply);
            gdl__put32(reply, 1);
            gdl__put32(reply + 4, (uint32_t)world);
            (void)gdl__rdv_io(fd, reply, sizeof reply, 1, gdl_now() + 1);
            close(fd);
            if (w != world) {
                gdl__set_error("%s: rank %d says WORLD_SIZE=%d, rank 0 says %d (MASTER_ADDR=%s MASTER_PORT=%ld)",
                               op, r, w, world, addr, port);
                goto done;
            }
            continue; /* no rank of this job (its launcher checks RANK < WORLD_SIZE): wait on */
        }
        if (seen[r]) { /* a rank that came again (restarted): its newer connection is the one to answer */
            close(fds[r]);
        } else {
            seen[r] = 1;
            got++;
        }
        fds[r] = fd;
        if (got == world - 1) /* a rank that went away since it came (EOF: readable) comes again */
            for (i = 1; i < world; i++) {
                struct pollfd q;
                q.fd = fds[i], q.events = POLLIN, q.revents = 0;
                if (poll(&q, 1, 0) > 0) {
                    close(fds[i]);
                    fds[i] = -1, seen[i] = 0, got--;
                }
            }
    }
    memset(reply, 0, sizeof reply);
    gdl__put32(reply + 4, (uint32_t)world);
    memcpy(reply + 12, id, GDL_COMM_ID_BYTES);
    rc = 0;
    for (i = 1; i < world; i++)
        if (gdl__rdv_io(fds[i], reply, sizeof reply, 1, deadline) < 0 && rc == 0) {
            gdl__set_error("%s: rank 0 could not send the job's id to rank %d: %s", op, i, strerror(errno));
            rc = -1;
        }
done:
    for (i = 1; i < world; i++)
        if (fds[i] >= 0) close(fds[i]);
    close(lfd);
    GPUDL_FREE(fds), GPUDL_FREE(seen);
    return rc;
}

/* gdl__rendezvous on the other ranks: reaches rank 0 (until deadline), says who it is, receives the id. */
static int gdl__rdv_join(const char *op, int rank, int world, unsigned char *id, double timeout, double deadline,
                         const char *addr, long port) {
    unsigned char hello[GDL__RDV_HELLO], reply[GDL__RDV_REPLY];
    int fd = -1, e = 0;
    while ((fd = gdl__rdv_connect(addr, (int)port, deadline)) < 0) { /* rank 0 may not listen yet */
        e = fd == -2 ? 0 : errno;
        if (gdl_now() + 0.1 > deadline) {
            gdl__set_error("%s: rank %d could not reach rank 0 at MASTER_ADDR=%s MASTER_PORT=%ld within %g s "
                           "(GPUDL_DIST_TIMEOUT): %s", op, rank, addr, port, timeout,
                           fd == -2 ? "MASTER_ADDR does not resolve to an address"
#ifndef AI_PASSIVE
                                      " (this build takes numeric IPv4 addresses only: define _POSIX_C_SOURCE "
                                      "200112L or more for host names)"
#endif
                                    : strerror(e));
            return -1;
        }
        gdl__os_sleep_ms(100);
    }
    memcpy(hello, "gdlR", 4);
    gdl__put32(hello + 4, (uint32_t)rank);
    gdl__put32(hello + 8, (uint32_t)world);
    if (gdl__rdv_io(fd, hello, sizeof hello, 1, deadline) < 0 ||
        gdl__rdv_io(fd, reply, sizeof reply, 0, deadline) < 0) {
        e = errno;
        close(fd);
        gdl__set_error("%s: rank %d reached MASTER_ADDR=%s MASTER_PORT=%ld but got no answer within %g s "
                       "(GPUDL_DIST_TIMEOUT): %s", op, rank, addr, port, timeout,
                       e == EPIPE ? "rank 0 gave up (some rank never came)" : strerror(e));
        return -1;
    }
    close(fd);
    if (gdl__get32(reply) != 0) {
        gdl__set_error("%s: rank 0 at MASTER_ADDR=%s MASTER_PORT=%ld refused rank %d: it says WORLD_SIZE=%u, this "
                       "rank %d", op, addr, port, rank, gdl__get32(reply + 4), world);
        return -1;
    }
    memcpy(id, reply + 12, GDL_COMM_ID_BYTES);
    return 0;
}

/* [impl-cluster]: MASTER_ADDR / MASTER_PORT, or what Kubeflow or srun's node list give ("" unset); 0 / -1 */
static int gdl__cluster_master(const char *op, char *addr, size_t alen, char *port, size_t plen);

/* Rank 0 hands `id` to every rank; the others receive it. 0 / -1 + error naming MASTER_ADDR, MASTER_PORT. */
static int gdl__rendezvous(const char *op, int rank, int world, unsigned char *id, double timeout) {
    char addr[256], ps[32], *end;
    long port;
    double deadline = gdl_now() + timeout;
    if (gdl__cluster_master(op, addr, sizeof addr, ps, sizeof ps) < 0) return -1;
    if (!addr[0] || !ps[0]) {
        gdl__set_error("%s: %s is not set: the %d processes of a job without MPI meet at MASTER_ADDR:MASTER_PORT "
                       "(rank 0's host and a free port, as torchrun sets them)", op, !addr[0] ?
                       "MASTER_ADDR" : "MASTER_PORT", world);
        return -1;
    }
    port = strtol(ps, &end, 10);
    if (!ps[0] || *end || port < 1 || port > 65535) {
        gdl__set_error("%s: MASTER_PORT='%s' is not a port number in [1, 65535]", op, ps);
        return -1;
    }
    return rank == 0 ? gdl__rdv_serve(op, world, id, timeout, deadline, addr, port)
                     : gdl__rdv_join(op, rank, world, id, timeout, deadline, addr, port);
}
#endif

/* The communicator of CUDA device dev, made at the first collective on it (NCCL's id was handed round
   at init). The GPU backend, made current; NULL + error. */
static const gdl_backend *gdl__dist_comm(const char *op, gdl_device dev) {
    const gdl_backend *be = gdl__be(op, dev);
    if (!be) return NULL;
    if (gdl__dist.comm_dev == dev.index + 1) return be;
    if (gdl__dist.comm_dev) {
        gdl__set_error("%s: the job's NCCL communicator is on cuda:%d, the tensor on %s: one device per process", op,
                       gdl__dist.comm_dev - 1, gdl_device_str(dev));
        return NULL;
    }
    if (!gdl__dist.have_id) { /* one process: its own id */
        if (gdl__dist.world > 1) {
            gdl__set_error("%s: no NCCL id was handed round at gdl_dist_init (no GPU then?)", op);
            return NULL;
        }
        if (be->comm_id(gdl__dist.id, GDL_COMM_ID_BYTES) < 0) return NULL;
        gdl__dist.have_id = 1;
    }
    if (be->comm_init(dev.index, gdl__dist.id, gdl__dist.world, gdl__dist.rank) < 0) return NULL;
    gdl__dist.comm_dev = dev.index + 1;
    return be;
}

#ifdef GPUDL_MPI
static int gdl__dist_wait(const char *op, const char *what, MPI_Request *req);
#endif

/* The host is about to read the device (which waits for the compute stream, and so for the queued NCCL
   collectives it joined): the communication stream is waited for first, within the timeout, so that a
   peer that never comes gives an error rather than a read that waits for ever. 0 without a communicator. */
static int gdl__dist_settle(const char *op) {
    const gdl_backend *be;
    if (!gdl__dist.comm_dev || gdl__dist.world < 2) return 0;
    be = gdl__dist_comm(op, gdl_cuda(gdl__dist.comm_dev - 1));
    return be ? be->comm_sync(0, gdl_dist_timeout()) : -1;
}

/* [impl-cluster]: an Indexed Job's, a PyTorchJob's or Kubeflow's PET_* rank and size (1), none (0), -1 */
static int gdl__cluster_env(const char *op, int *rank, int *world, int *local, const char **launcher);

/* gdl_dist_init's environment: the launcher's rank, world size and local rank (none: one process), and
   GPUDL_DIST_TIMEOUT. */
static int gdl__dist_env(const char *op, int *rank, int *world, int *local, const char **launcher) {
    /* the launchers' variables: rank, world size, local rank */
    static const char *const L[3][4] = {
        {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
        {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
        {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
    const char *v;
    int k = gdl__cluster_env(op, rank, world, local, launcher); /* [impl-cluster]: Kubernetes' */
    if (k < 0) return -1;
    for (k = k ? 3 : 0; k < 3; k++) {
        int i;
        if (!getenv(L[k][1]) && !getenv(L[k][2])) continue;
        for (i = 1; i < 4; i++)
            if (!getenv(L[k][i])) {
                gdl__set_error("%s: %s is set (%s) but %s is not", op, getenv(L[k][1]) ? L[k][1] : L[k][2],
                               L[k][0], L[k][i]);
                return -1;
            }
        *launcher = L[k][0];
        if (gdl__env_int(op, *launcher, L[k][2], 1, 1L << 20, world) < 0 ||
            gdl__env_int(op, *launcher, L[k][1], 0, *world - 1, rank) < 0 ||
            gdl__env_int(op, *launcher, L[k][3], 0, *world - 1, local) < 0)
            return -1;
        break;
    }
    if ((v = getenv("GPUDL_DIST_TIMEOUT")) != NULL) {
        char *end;
        double t = strtod(v, &end);
        if (!v[0] || *end || !(t > 0)) {
            gdl__set_error("%s: GPUDL_DIST_TIMEOUT='%s' is not a number of seconds > 0 (how long a collective "
                           "waits for the other ranks; 'inf': for ever)", op, v);
            return -1;
        }
        if (!gdl__dist_timeout_called) gdl__dist_timeout_s = t;
    }
    return 0;
}

#ifdef GPUDL_MPI
/* MPI started (unless the program did) and its two communicators made; MPI's rank and size checked against
   the launcher's (or taken, with another MPI launcher). */
static int gdl__dist_mpi_start(const char *op, int *rank, int *world, const char **launcher) {
    int flag = 0, rc, mr, ms;
    if (MPI_Finalized(&flag) == MPI_SUCCESS && flag) {
        gdl__set_error("%s: MPI was finalised (gdl_dist_shutdown): it cannot start again in this process", op);
        return -1;
    }
    if ((rc = MPI_Initialized(&flag)) != MPI_SUCCESS) return gdl__mpi_fail(op, "MPI_Initialized", rc);
    if (!flag) {
        int provided;
        if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
            return gdl__mpi_fail(op, "MPI_Init_thread", rc);
        gdl__dist.mpi_ours = 1;
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &gdl__dist.comm)) != MPI_SUCCESS)
        return gdl__mpi_fail(op, "MPI_Comm_dup", rc);
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &gdl__dist.ctl)) != MPI_SUCCESS) {
        MPI_Comm_free(&gdl__dist.comm);
        return gdl__mpi_fail(op, "MPI_Comm_dup", rc);
    }
    MPI_Comm_set_errhandler(gdl__dist.comm, MPI_ERRORS_RETURN); /* errors come back; nothing exits */
    MPI_Comm_set_errhandler(gdl__dist.ctl, MPI_ERRORS_RETURN);
    MPI_Comm_rank(gdl__dist.comm, &mr);
    MPI_Comm_size(gdl__dist.comm, &ms);
    if (!strcmp(*launcher, "single")) { /* another MPI launcher (mpiexec of MPICH...): MPI's word */
        *launcher = ms > 1 ? "mpi" : "single";
        *rank = mr;
        *world = ms;
    } else if (mr != *rank || ms != *world) {
        gdl__set_error("%s: the environment (%s) says rank %d of %d but MPI says rank %d of %d: were the "
                       "processes started by another launcher than the one whose variables are set?",
                       op, *launcher, *rank, *world, mr, ms);
        MPI_Comm_free(&gdl__dist.comm);
        MPI_Comm_free(&gdl__dist.ctl);
        return -1;
    }
    return 0;
}
#endif

/* NCCL's id, for collectives of CUDA tensors: made by rank 0, handed round over MPI or the rendezvous
   (gdl__dist.have_id: every rank has it). */
static int gdl__dist_share_id(const char *op, int rank, int world) {
    gdl__dist.have_id = 0;
    gdl__dist.comm_dev = 0;
#ifdef GPUDL_MPI
    if (world > 1) {
        /* rank 0 always broadcasts, with the id a status word (0: no GPU backend there, 1: the id, 2: making it
           failed), and every rank waits with the timeout: no rank is left waiting for a broadcast that never
           comes, whichever ranks have GPUs. A rank without one, or all without an id, have no NCCL (CUDA
           collectives fail then, saying so); a failed id fails every rank's init. */
        const gdl_backend *be = gdl__dist_gpu();
        unsigned char buf[1 + GDL_COMM_ID_BYTES];
        MPI_Request q;
        int rc;
        char keep[sizeof gdl__err];
        memset(buf, 0, sizeof buf);
        if (rank == 0 && be) buf[0] = be->comm_id(buf + 1, GDL_COMM_ID_BYTES) == 0 ? 1 : 2;
        memcpy(keep, gdl__err, sizeof keep);
        gdl__dist.rank = rank, gdl__dist.world = world; /* for the timed wait's report */
        gdl__dist.seq = 0;
        rc = MPI_Ibcast(buf, (int)sizeof buf, MPI_BYTE, 0, gdl__dist.comm, &q);
        if (rc != MPI_SUCCESS) return gdl__mpi_fail(op, "MPI_Ibcast of NCCL's id", rc);
        if (gdl__dist_wait(op, "the broadcast of NCCL's id from rank 0", &q) < 0) return -1;
        if (buf[0] == 2) {
            if (rank == 0) {
                char why[sizeof gdl__err];
                memcpy(why, keep, sizeof why);
                gdl__set_error("%s: rank 0 could not make NCCL's id: %s", op, why);
            } else {
                gdl__set_error("%s: rank 0 could not make NCCL's id (its own error says why)", op);
            }
            return -1;
        }
        if (buf[0] == 1 && be) {
            memcpy(gdl__dist.id, buf + 1, GDL_COMM_ID_BYTES);
            gdl__dist.have_id = 1;
        }
    }
#else
    if (world > 1 && gdl__dist_gpu()) {
        const gdl_backend *be = gdl__dist_gpu();
        if (rank == 0 && be->comm_id(gdl__dist.id, GDL_COMM_ID_BYTES) < 0) return -1;
#if defined(GDL__HAVE_RDV)
        if (gdl__rendezvous(op, rank, world, gdl__dist.id, gdl_dist_timeout()) < 0) return -1;
#else
        gdl__set_error("%s: %d processes without MPI need the TCP rendezvous (MASTER_ADDR, MASTER_PORT), which this "
                       "platform lacks in gpudl yet (no sockets: Windows)", op, world);
        return -1;
#endif
        gdl__dist.have_id = 1;
    }
#endif
    return 0;
}

GPUDL_API int gdl_dist_init(void) {
    static const char op[] = "gdl_dist_init";
    int rank = 0, world = 1, local = 0;
    const char *launcher = "single";
    if (gdl__dist.init) {
        gdl__set_error("%s: already initialised (rank %d of %d)", op, gdl__dist.rank, gdl__dist.world);
        return -1;
    }
    if (gdl__dist_env(op, &rank, &world, &local, &launcher) < 0) return -1;
#ifdef GPUDL_MPI
    if (gdl__dist_mpi_start(op, &rank, &world, &launcher) < 0) return -1;
#else
#ifdef GDL__OS_NO_MPI
    if (world > 1 && !gdl__dist_gpu()) {
        gdl__set_error("%s: %d processes (%s): %s; this build is without a communication backend", op, world,
                       launcher, GDL__OS_NO_MPI);
        return -1;
    }
#endif
    if (world > 1 && !gdl__dist_gpu()) {
        gdl__set_error("%s: %d processes (%s), but this build has no communication backend: build with "
                       "-DGPUDL_MPI (mpicc ...), or with GPUDL_CUDA and NCCL on a machine with GPUs", op, world,
                       launcher);
        return -1;
    }
#endif
    if (gdl__dist_share_id(op, rank, world) < 0) goto fail;
    gdl__dist.rank = rank;
    gdl__dist.world = world;
    gdl__dist.local = local;
    gdl__dist.launcher = launcher;
    gdl__dist.seq = 0;
    gdl__dist.broken = 0;
    gdl__dist.init = 1;
    return 0;
fail:
#ifdef GPUDL_MPI
    /* no MPI_Finalize: it waits for every rank without a limit, and another may have failed otherwise (the
       launcher ends the job when the process exits) */
    MPI_Comm_free(&gdl__dist.comm);
    MPI_Comm_free(&gdl__dist.ctl);
#endif
    gdl__dist.rank = 0, gdl__dist.world = 0, gdl__dist.broken = 0, gdl__dist.have_id = 0;
    return -1;
}

GPUDL_API int gdl_dist_is_initialized(void) { return gdl__dist.init; }
GPUDL_API int gdl_dist_rank(void) { return gdl__dist.rank; }
GPUDL_API int gdl_dist_world_size(void) { return gdl__dist.init ? gdl__dist.world : 1; }
GPUDL_API int gdl_dist_local_rank(void) { return gdl__dist.local; }
GPUDL_API const char *gdl_dist_launcher(void) { return gdl__dist.init ? gdl__dist.launcher : "single"; }

GPUDL_API gdl_device gdl_dist_device(void) {
    int n = gdl_cuda_device_count();
    return n > 0 ? gdl_cuda(gdl__dist.local % n) : gdl_cpu();
}

#ifdef GPUDL_MPI
static int gdl__dist_arrive(const char *op, const char *what);
static int gdl__dist_meet(void) {
    return gdl__dist_arrive("gdl_dist_shutdown", "the meeting of every rank before MPI_Finalize");
}
#endif

GPUDL_API void gdl_dist_shutdown(void) {
    if (gdl__dist.comm_dev) { /* queued collectives end (or time out) before the communicator goes */
        const gdl_backend *be = gdl__dist_gpu();
        if (be) {
            char keep[sizeof gdl__err];
            memcpy(keep, gdl__err, sizeof keep); /* shutdown reports nothing: the caller's last error stays */
            (void)gdl__be_lookup("gdl_dist_shutdown", gdl_cuda(gdl__dist.comm_dev - 1));
            (void)be->comm_sync(0, gdl_dist_timeout());
            be->comm_destroy();
            memcpy(gdl__err, keep, sizeof keep);
        }
        gdl__dist.comm_dev = 0;
    }
    gdl__dist.have_id = 0;
#ifdef GPUDL_MPI
    /* MPI_Finalize waits for every rank without a limit: the ranks meet first, within the timeout, and
       after a failure (or when one does not come) MPI is left as it is; the launcher ends the job when
       the process exits */
    if (gdl__dist.init && !gdl__dist.broken && (gdl__dist.world == 1 || gdl__dist_meet() == 0)) {
        MPI_Comm_free(&gdl__dist.comm);
        MPI_Comm_free(&gdl__dist.ctl);
        if (gdl__dist.mpi_ours) MPI_Finalize();
        gdl__dist.mpi_ours = 0;
    }
#endif
    gdl__dist.init = 0;
    gdl__dist.broken = 0;
    gdl__dist.rank = gdl__dist.local = 0;
}

GPUDL_API int gdl_dist_set_timeout(double seconds) {
    if (!(seconds > 0)) {
        gdl__set_error("gdl_dist_set_timeout: %g is not a number of seconds > 0 (INFINITY: wait for ever)", seconds);
        return -1;
    }
    gdl__dist_timeout_s = seconds;
    gdl__dist_timeout_called = 1;
    return 0;
}

GPUDL_API double gdl_dist_timeout(void) { return gdl__dist_timeout_s > 0 ? gdl__dist_timeout_s : GDL__DIST_DEFAULT_TIMEOUT; }

#ifdef GPUDL_MPI
enum { GDL__TAG_ASK = 1, GDL__TAG_ANSWER = 2 };

/* An MPI call failed: nothing more can be trusted of the communicator. */
static int gdl__dist_fail(const char *op, const char *call, int rc) {
    gdl__mpi_fail(op, call, rc);
    gdl__dist.broken = 1;
    snprintf(gdl__dist.broken_why, sizeof gdl__dist.broken_why, "%s: %s failed", op, call);
    return -1;
}

/* Answers the ranks asking where this one is: its collective number and what it is. The answers go
   from a ring of buffers: an answer is short and sent eagerly, long gone before its buffer comes back. */
static void gdl__dist_answer(const char *what) {
    static char ring[16][128];
    static int next;
    int flag = 0;
    MPI_Status st;
    while (MPI_Iprobe(MPI_ANY_SOURCE, GDL__TAG_ASK, gdl__dist.ctl, &flag, &st) == MPI_SUCCESS && flag) {
        char c;
        char *a = ring[next++ & 15];
        MPI_Request r;
        if (MPI_Recv(&c, 1, MPI_CHAR, st.MPI_SOURCE, GDL__TAG_ASK, gdl__dist.ctl, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return;
        snprintf(a, sizeof ring[0], "%lld %s", (long long)gdl__dist.seq, what);
        if (MPI_Isend(a, (int)strlen(a) + 1, MPI_CHAR, st.MPI_SOURCE, GDL__TAG_ANSWER, gdl__dist.ctl, &r) ==
            MPI_SUCCESS)
            MPI_Request_free(&r);
    }
}

static void gdl__dist_nap(int ms) { gdl__os_sleep_ms(ms); }

/* The wait of `what` (a collective of op) ran out of time: ask the other ranks where they are for a
   moment (those waiting in a collective answer), and say who did not arrive. Always -1. */
static int gdl__dist_timed_out(const char *op, const char *what, double waited) {
    static const char ask = 1;
    int W = gdl__dist.world, me = gdl__dist.rank, r, heard = 0, nmiss = 0, nwait = 0;
    char *seen = (char *)GPUDL_MALLOC((size_t)W + 1);
    char miss[256] = "", wait[512] = "", buf[128];
    double t = gdl_dist_timeout(), grace = t / 4 < 0.5 ? 0.5 : t / 4 > 5 ? 5 : t / 4, until;
    size_t km = 0, kw = 0;
    gdl__dist.broken = 1;
    snprintf(gdl__dist.broken_why, sizeof gdl__dist.broken_why, "%s timed out: %s", op, what);
    if (seen) memset(seen, 0, (size_t)W + 1);
    for (r = 0; seen && r < W; r++)
        if (r != me) {
            MPI_Request q;
            if (MPI_Isend((void *)&ask, 1, MPI_CHAR, r, GDL__TAG_ASK, gdl__dist.ctl, &q) == MPI_SUCCESS)
                MPI_Request_free(&q);
        }
    until = MPI_Wtime() + grace;
    while (seen && heard < W - 1 && MPI_Wtime() < until) {
        int flag = 0;
        MPI_Status st;
        gdl__dist_answer(what); /* those that time out at the same moment ask too */
        if (MPI_Iprobe(MPI_ANY_SOURCE, GDL__TAG_ANSWER, gdl__dist.ctl, &flag, &st) != MPI_SUCCESS) break;
        if (!flag) {
            gdl__dist_nap(1);
            continue;
        }
        if (MPI_Recv(buf, (int)sizeof buf, MPI_CHAR, st.MPI_SOURCE, GDL__TAG_ANSWER, gdl__dist.ctl,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        buf[sizeof buf - 1] = 0;
        if (st.MPI_SOURCE < 0 || st.MPI_SOURCE >= W || seen[st.MPI_SOURCE]) continue;
        seen[st.MPI_SOURCE] = 1;
        heard++;
        if (nwait++ < 4 && kw < sizeof wait) {
            char *sp = strchr(buf, ' ');
            long long s2 = strtoll(buf, NULL, 10);
            kw += (size_t)snprintf(wait + kw, sizeof wait - kw, "%srank %d waits in %s (%lld started%s)",
                                   kw ? "; " : "", st.MPI_SOURCE, sp ? sp + 1 : "?", s2,
                                   s2 == gdl__dist.seq ? "" : ": the ranks are out of step, they did not call "
                                                              "the same collectives in the same order");
        }
    }
    for (r = 0; seen && r < W; r++)
        if (r != me && !seen[r] && nmiss++ < 8 && km < sizeof miss)
            km += (size_t)snprintf(miss + km, sizeof miss - km, "%s%d", km ? ", " : "", r);
    if (nmiss > 8 && km < sizeof miss) snprintf(miss + km, sizeof miss - km, " and %d more", nmiss - 8);
    gdl__set_error("%s: %s: timed out after %.3g s waiting for the other ranks (this is rank %d of %d, %lld "
                   "collectives started): %s%s%s%s%s. Set GPUDL_DIST_TIMEOUT (seconds, now %g) or call "
                   "gdl_dist_set_timeout if a rank is only slow. The process group is unusable now: end this "
                   "process with a non-zero status and the launcher ends the others",
                   op, what, waited, me, W, (long long)gdl__dist.seq, nmiss > 1 ? "ranks " : nmiss ? "rank " : "",
                   miss, nmiss ? " did not arrive (no answer: stalled, dead, or busy outside gpudl's collectives)"
                               : seen ? "every other rank answered" : "(out of memory: the others were not asked)",
                   kw ? "; " : "", wait, t);
    GPUDL_FREE(seen);
    return -1;
}

/* Waits for req within the timeout, polling: a rank that stalls or dies makes this one fail with an error
   instead of hanging. For the first 0.1 s it tests and yields the processor by turns (as MPI's own waits
   spin: the latency stays; a rank sharing the core runs), then naps a millisecond between tests, answering
   the ranks that ask where this one is. 0 / -1. */
static int gdl__dist_wait(const char *op, const char *what, MPI_Request *req) {
    double t0 = MPI_Wtime(), limit = gdl_dist_timeout(), now;
    for (;;) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return gdl__dist_fail(op, "MPI_Test", rc);
        if (done) return 0;
        now = MPI_Wtime();
        if (now - t0 >= limit) return gdl__dist_timed_out(op, what, now - t0);
        if (now - t0 > 0.1) {
            gdl__dist_answer(what);
            gdl__dist_nap(1);
        } else {
            gdl__dist_nap(0);
        }
    }
}

/* Starting a collective: rc is what its MPI_I... call returned. Then the timed wait. 0 / -1. */
static int gdl__dist_run(const char *op, const char *call, const char *what, int rc, MPI_Request *req) {
    if (rc != MPI_SUCCESS) return gdl__dist_fail(op, call, rc);
    return gdl__dist_wait(op, what, req);
}

/* Before a blocking collective: every rank has arrived (a barrier within the timeout). MPI's blocking
   collectives are faster than its non-blocking ones (OpenMPI's tuned algorithms: about half the time of
   MPI_Iallreduce on 0.4 and 40 MB here), and once every rank is there they complete; a barrier of a
   few microseconds buys the timeout. 0 / -1. */
static int gdl__dist_arrive(const char *op, const char *what) {
    MPI_Request q;
    gdl__dist.seq++;
    return gdl__dist_run(op, "MPI_Ibarrier", what, MPI_Ibarrier(gdl__dist.comm, &q), &q);
}
#endif

/* Every collective first: initialised, and no earlier failure. */
static int gdl__dist_ready(const char *op) {
    if (!gdl__dist.init) {
        gdl__set_error("%s: call gdl_dist_init first", op);
        return -1;
    }
    if (gdl__dist.broken) {
        gdl__set_error("%s: the process group is unusable after an earlier failure (%s): end the process with a "
                       "non-zero status", op, gdl__dist.broken_why);
        return -1;
    }
    return 0;
}

/* A collective's tensor: initialised, a CPU tensor of f32 (or i32 where
   the op allows it). */
static int gdl__dist_check(const char *op, const char *what, const gdl_tensor *t, int i32_ok) {
    if (gdl__dist_ready(op) < 0) return -1;
    if (!t) {
        gdl__null_arg(op, what);
        return -1;
    }
    if (t->dtype != GDL_F32 && !(i32_ok && t->dtype == GDL_I32)) {
        gdl__set_error("%s: %s is %s %s; expected f32%s", op, what, gdl_dtype_name(t->dtype), gdl_shape_str(t),
                       i32_ok ? " or i32" : "");
        return -1;
    }
#ifndef GPUDL_MPI
    if (t->device.type == GDL_DEVICE_CPU && gdl__dist.world > 1) {
        gdl__set_error("%s: %s %s is on the CPU: collectives of CPU tensors among %d processes go through MPI: "
                       "build with -DGPUDL_MPI (mpicc ...); NCCL (this build's transport) takes CUDA tensors", op,
                       what, gdl_shape_str(t), gdl__dist.world);
        return -1;
    }
#endif
    return 0;
}

/* A collective of CUDA tensors: NCCL on the device's communication stream, ordered after the compute
   stream's work and before what the compute stream does next; the host does not wait. */
static int gdl__dist_nccl(const char *op, int kind, const gdl_tensor *send, gdl_tensor *recv, int64_t count,
                          int avg, int root) {
    const gdl_backend *be = gdl__dist_comm(op, recv->device);
    return be ? be->collective(kind, send->data, recv->data, count, recv->dtype, avg, root, 1) : -1;
}

#ifdef GPUDL_MPI
static MPI_Datatype gdl__mpi_type(gdl_dtype dt) {
    if (dt == GDL_I32) return MPI_INT;
    return sizeof(gdl_real) == sizeof(double) ? MPI_DOUBLE : MPI_FLOAT;
}
#endif

/* x /= world: the mean, as NCCL's and PyTorch's AVG (sum, then divide) */
static void gdl__dist_divide(gdl_tensor *t) {
    gdl_real *x = (gdl_real *)t->data, w = (gdl_real)gdl__dist.world;
    int64_t i;
    if (gdl__dist.world == 1) return;
    for (i = 0; i < t->numel; i++) x[i] /= w;
}

GPUDL_API int gdl_dist_all_reduce(gdl_tensor *t, gdl_dist_op op) {
    static const char fn[] = "gdl_dist_all_reduce";
    if (gdl__dist_check(fn, "t", t, op == GDL_SUM) < 0) return -1;
    if (op != GDL_SUM && op != GDL_AVG) {
        gdl__set_error("%s: op %d is neither GDL_SUM nor GDL_AVG", fn, (int)op);
        return -1;
    }
    if (t->numel > INT32_MAX) {
        gdl__set_error("%s: %s has more than 2^31 elements", fn, gdl_shape_str(t));
        return -1;
    }
    if (t->device.type == GDL_DEVICE_CUDA) return gdl__dist_nccl(fn, GDL_COLL_ALL_REDUCE, t, t, t->numel, op == GDL_AVG, 0);
#ifdef GPUDL_MPI
    if (gdl__dist.world > 1) {
        char what[96];
        int rc;
        snprintf(what, sizeof what, "the all-reduce of %s %s", gdl_dtype_name(t->dtype), gdl_shape_str(t));
        if (gdl__dist_arrive(fn, what) < 0) return -1;
        rc = MPI_Allreduce(MPI_IN_PLACE, t->data, (int)t->numel, gdl__mpi_type(t->dtype), MPI_SUM, gdl__dist.comm);
        if (rc != MPI_SUCCESS) return gdl__dist_fail(fn, "MPI_Allreduce", rc);
    }
#endif
    if (op == GDL_AVG) gdl__dist_divide(t);
    return 0;
}

GPUDL_API int gdl_dist_broadcast(gdl_tensor *t, int root) {
    static const char fn[] = "gdl_dist_broadcast";
    if (gdl__dist_check(fn, "t", t, 1) < 0) return -1;
    if (root < 0 || root >= gdl__dist.world) {
        gdl__set_error("%s: root %d is not a rank (world size %d)", fn, root, gdl__dist.world);
        return -1;
    }
    if (t->numel > INT32_MAX) {
        gdl__set_error("%s: %s has more than 2^31 elements", fn, gdl_shape_str(t));
        return -1;
    }
    if (t->device.type == GDL_DEVICE_CUDA) return gdl__dist_nccl(fn, GDL_COLL_BROADCAST, t, t, t->numel, 0, root);
#ifdef GPUDL_MPI
    if (gdl__dist.world > 1) {
        char what[96];
        int rc;
        snprintf(what, sizeof what, "the broadcast of %s %s from rank %d", gdl_dtype_name(t->dtype),
                 gdl_shape_str(t), root);
        if (gdl__dist_arrive(fn, what) < 0) return -1;
        rc = MPI_Bcast(t->data, (int)t->numel, gdl__mpi_type(t->dtype), root, gdl__dist.comm);
        if (rc != MPI_SUCCESS) return gdl__dist_fail(fn, "MPI_Bcast", rc);
    }
#endif
    return 0;
}

/* big = world x small elements, one dtype */
static int gdl__dist_pair(const char *fn, const char *bn, const gdl_tensor *big, const char *sn,
                          const gdl_tensor *small, int i32_ok) {
    if (gdl__dist_check(fn, bn, big, i32_ok) < 0 || gdl__dist_check(fn, sn, small, i32_ok) < 0) return -1;
    if (big->dtype != small->dtype || big->numel != small->numel * gdl__dist.world || big->numel > INT32_MAX) {
        gdl__set_error("%s: %s %s %s must have world size (%d) x the elements of %s %s %s, in one dtype", fn, bn,
                       gdl_dtype_name(big->dtype), gdl_shape_str(big), gdl__dist.world, sn,
                       gdl_dtype_name(small->dtype), gdl_shape_str(small));
        return -1;
    }
    if (big->data == small->data) {
        gdl__set_error("%s: %s and %s are the same memory", fn, bn, sn);
        return -1;
    }
    if (big->device.type != small->device.type || big->device.index != small->device.index) {
        gdl__set_error("%s: %s is on %s, %s on %s: one device", fn, bn, gdl_device_str(big->device), sn,
                       gdl_device_str(small->device));
        return -1;
    }
    return 0;
}

GPUDL_API int gdl_dist_all_gather(gdl_tensor *out, const gdl_tensor *in) {
    static const char fn[] = "gdl_dist_all_gather";
    if (gdl__dist_pair(fn, "out", out, "in", in, 1) < 0) return -1;
    if (in->device.type == GDL_DEVICE_CUDA) return gdl__dist_nccl(fn, GDL_COLL_ALL_GATHER, in, out, in->numel, 0, 0);
#ifdef GPUDL_MPI
    if (gdl__dist.world > 1) {
        MPI_Datatype ty = gdl__mpi_type(in->dtype);
        char what[96];
        int rc;
        snprintf(what, sizeof what, "the all-gather of %s %s", gdl_dtype_name(in->dtype), gdl_shape_str(in));
        if (gdl__dist_arrive(fn, what) < 0) return -1;
        rc = MPI_Allgather(in->data, (int)in->numel, ty, out->data, (int)in->numel, ty, gdl__dist.comm);
        return rc != MPI_SUCCESS ? gdl__dist_fail(fn, "MPI_Allgather", rc) : 0;
    }
#endif
    memcpy(out->data, in->data, (size_t)in->numel * gdl_dtype_size(in->dtype));
    return 0;
}

GPUDL_API int gdl_dist_reduce_scatter(gdl_tensor *out, const gdl_tensor *in, gdl_dist_op op) {
    static const char fn[] = "gdl_dist_reduce_scatter";
    if (gdl__dist_pair(fn, "in", in, "out", out, op == GDL_SUM) < 0) return -1;
    if (op != GDL_SUM && op != GDL_AVG) {
        gdl__set_error("%s: op %d is neither GDL_SUM nor GDL_AVG", fn, (int)op);
        return -1;
    }
    if (in->device.type == GDL_DEVICE_CUDA)
        return gdl__dist_nccl(fn, GDL_COLL_REDUCE_SCATTER, in, out, out->numel, op == GDL_AVG, 0);
#ifdef GPUDL_MPI
    if (gdl__dist.world > 1) {
        char what[96];
        int rc;
        snprintf(what, sizeof what, "the reduce-scatter of %s %s", gdl_dtype_name(in->dtype), gdl_shape_str(in));
        if (gdl__dist_arrive(fn, what) < 0) return -1;
        rc = MPI_Reduce_scatter_block(in->data, out->data, (int)out->numel, gdl__mpi_type(in->dtype), MPI_SUM,
                                      gdl__dist.comm);
        if (rc != MPI_SUCCESS) return gdl__dist_fail(fn, "MPI_Reduce_scatter_block", rc);
    } else
#endif
        memcpy(out->data, in->data, (size_t)out->numel * gdl_dtype_size(out->dtype));
    if (op == GDL_AVG) gdl__dist_divide(out);
    return 0;
}

/* ---- DistributedDataParallel ---- */

typedef struct gdl__bucket {
    int first, count;   /* params[first .. first+count-1] of the reversed list */
    int64_t numel;
    int pending;        /* gradients not complete yet in this backward */
    int started;
    gdl_real *buf;      /* the bucket's gradients, flat */
#ifdef GPUDL_MPI
    MPI_Request req;
#endif
} gdl__bucket;

struct gdl_ddp {
    gdl_module *m;
    gdl_ddp_opts o;
    int np, nbuckets, no_sync, failed;
    gdl_tensor **params;  /* the module's parameters, last first */
    int *bucket_of;       /* bucket of params[i] */
    gdl__bucket *b;
    int nbuf;
    gdl_tensor **bufs;    /* buffers, broadcast at each forward */
    const gdl_backend *gpu; /* CUDA parameters: the buckets are device memory, all-reduced by NCCL */
    gdl_device dev;
};

GPUDL_API gdl_ddp_opts gdl_ddp_defaults(void) {
    gdl_ddp_opts o;
    o.bucket_cap_mb = 25;
    o.first_bucket_mb = 1;
    o.broadcast_buffers = 1;
    return o;
}

GPUDL_API void gdl_ddp_free(gdl_ddp *d) {
    int i;
    if (!d) return;
    if (d->gpu && d->b) { /* the buckets' last all-reduce is queued on the device before their memory goes back */
        if (gdl__be_lookup("gdl_ddp_free", d->dev)) (void)d->gpu->comm_join();
        for (i = 0; i < d->nbuckets; i++) d->gpu->free(d->b[i].buf);
    }
    for (i = 0; d->b && !d->gpu && i < d->nbuckets; i++) {
#ifdef GPUDL_MPI
        /* an all-reduce left in flight by a timeout may still write its bucket: leaked, deliberately */
        if (d->b[i].req != MPI_REQUEST_NULL && d->b[i].started && gdl__dist.broken) continue;
#endif
        GPUDL_FREE(d->b[i].buf);
    }
    GPUDL_FREE(d->b);
    GPUDL_FREE(d->bucket_of);
    GPUDL_FREE(d->params);
    GPUDL_FREE(d->bufs);
    GPUDL_FREE(d);
}

GPUDL_API gdl_ddp *gdl_ddp_new(gdl_module *m, const gdl_ddp_opts *o) {
    static const char fn[] = "gdl_ddp_new";
    gdl_ddp *d;
    gdl_tensor **tmp = NULL;
    int i, n, nb;
    double cap;
    int64_t bytes;
    if (!gdl__dist.init) {
        gdl__set_error("%s: call gdl_dist_init first", fn);
        return NULL;
    }
    if (!m) {
        gdl__null_arg(fn, "module");
        return NULL;
    }
    d = (gdl_ddp *)GPUDL_MALLOC(sizeof *d);
    if (!d) {
        gdl__set_error("%s: out of memory", fn);
        return NULL;
    }
    memset(d, 0, sizeof *d);
    d->m = m;
    d->o = o ? *o : gdl_ddp_defaults();
    if (!(d->o.bucket_cap_mb > 0) || !(d->o.first_bucket_mb > 0)) {
        gdl__set_error("%s: bucket sizes must be > 0 MB (bucket_cap_mb %g, first_bucket_mb %g)", fn,
                       d->o.bucket_cap_mb, d->o.first_bucket_mb);
        goto fail;
    }
    if ((n = gdl_module_named_tensors(m, GDL_PARAMS, NULL, NULL, 0)) < 0 ||
        (d->nbuf = gdl_module_named_tensors(m, GDL_BUFFERS, NULL, NULL, 0)) < 0)
        goto fail;
    d->np = n;
    tmp = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)(n + 1));
    d->params = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)(n + 1));
    d->bucket_of = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)(n + 1));
    d->bufs = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)(d->nbuf + 1));
    d->b = (gdl__bucket *)GPUDL_MALLOC(sizeof(gdl__bucket) * (size_t)(n + 1));
    if (!tmp || !d->params || !d->bucket_of || !d->bufs || !d->b) {
        gdl__set_error("%s: out of memory", fn);
        goto fail;
    }
    memset(d->b, 0, sizeof(gdl__bucket) * (size_t)(n + 1));
    if (gdl_module_named_tensors(m, GDL_PARAMS, NULL, tmp, n) != n ||
        gdl_module_named_tensors(m, GDL_BUFFERS, NULL, d->bufs, d->nbuf) != d->nbuf)
        goto fail;
    for (i = 0; i < n; i++) d->params[i] = tmp[n - 1 - i]; /* backward meets the last layers first */
    for (i = 0; i < n; i++) {
        gdl_device pd = d->params[i]->device, d0 = d->params[0]->device;
        if (gdl__dist_check(fn, "a parameter", d->params[i], 0) < 0) goto fail;
        if (pd.type != d0.type || pd.index != d0.index) {
            gdl__set_error("%s: parameters on %s and %s: DDP takes a module on one device", fn, gdl_device_str(d0),
                           gdl_device_str(pd));
            goto fail;
        }
    }
    if (n > 0 && d->params[0]->device.type == GDL_DEVICE_CUDA) {
        d->dev = d->params[0]->device;
        if (!(d->gpu = gdl__dist_comm(fn, d->dev))) goto fail;
    }
    /* buckets: fill up to the cap, the first one to first_bucket_mb */
    nb = 0;
    bytes = 0;
    cap = d->o.first_bucket_mb * 1048576.0;
    for (i = 0; i < n; i++) {
        int64_t pb = d->params[i]->numel * (int64_t)sizeof(gdl_real);
        if (nb == 0 || (d->b[nb - 1].count > 0 && (double)(bytes + pb) > cap)) {
            if (nb > 0) cap = d->o.bucket_cap_mb * 1048576.0;
            d->b[nb].first = i;
            nb++;
            bytes = 0;
        }
        d->b[nb - 1].count++;
        d->b[nb - 1].numel += d->params[i]->numel;
        d->bucket_of[i] = nb - 1;
        bytes += pb;
    }
    d->nbuckets = nb;
    for (i = 0; i < nb; i++)
        if (d->b[i].numel > INT32_MAX ||
            !(d->b[i].buf = (gdl_real *)(d->gpu ? d->gpu->alloc(sizeof(gdl_real) * (size_t)(d->b[i].numel + 1))
                                                : GPUDL_MALLOC(sizeof(gdl_real) * (size_t)(d->b[i].numel + 1))))) {
            gdl__set_error("%s: out of memory for a bucket of %lld gradients", fn, (long long)d->b[i].numel);
            goto fail;
        }
    /* the same start on every rank */
    for (i = 0; i < n; i++)
        if (gdl_dist_broadcast(d->params[i], 0) < 0) goto fail;
    for (i = 0; i < d->nbuf; i++)
        if (gdl_dist_broadcast(d->bufs[i], 0) < 0) goto fail;
    GPUDL_FREE(tmp);
    return d;
fail:
    GPUDL_FREE(tmp);
    gdl_ddp_free(d);
    return NULL;
}

GPUDL_API int gdl_ddp_num_buckets(const gdl_ddp *d) { return d ? d->nbuckets : 0; }
GPUDL_API gdl_module *gdl_ddp_module(const gdl_ddp *d) { return d ? d->m : NULL; }

static int gdl__dist_reduce_f64(const char *op, const char *what, double *v, int n, int max) {
#ifdef GPUDL_MPI
    if (gdl__dist.init && gdl__dist.world > 1) {
        MPI_Request q;
        if (gdl__dist_ready(op) < 0) return -1;
        gdl__dist.seq++;
        return gdl__dist_run(op, "MPI_Iallreduce", what,
                             MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, max ? MPI_MAX : MPI_SUM, gdl__dist.comm,
                                            &q), &q);
    }
#else
    if (gdl__dist.init && gdl__dist.world > 1) {
        /* NCCL is the transport: every rank's doubles gathered bit for bit (as pairs of i32), then summed
           (or the max taken) in rank order on the host, so every rank gets the same exact figures; the
           host waits with the timeout before it reads, so a missing peer fails here, never hangs */
        gdl_device dev = gdl__dist.comm_dev ? gdl_cuda(gdl__dist.comm_dev - 1) : gdl_dist_device();
        int64_t s1[1], sw[1];
        gdl_tensor *in = NULL, *all = NULL, *h = NULL;
        const gdl_backend *be;
        int rc = -1, r, k;
        if (gdl__dist_ready(op) < 0) return -1;
        s1[0] = 2 * (int64_t)n, sw[0] = 2 * (int64_t)n * gdl__dist.world;
        if ((in = gdl_from_array(v, 1, s1, GDL_I32, dev)) && (all = gdl_empty(1, sw, GDL_I32, dev)) &&
            gdl_dist_all_gather(all, in) == 0 && (be = gdl__dist_comm(op, dev)) &&
            be->comm_sync(0, gdl_dist_timeout()) == 0 && (h = gdl_to(all, gdl_cpu()))) {
            const double *g = (const double *)h->data;
            for (k = 0; k < n; k++) {
                double a = g[k];
                for (r = 1; r < gdl__dist.world; r++) a = max ? (g[r * n + k] > a ? g[r * n + k] : a) : a + g[r * n + k];
                v[k] = a;
            }
            rc = 0;
        }
        if (rc < 0) {
            char why[sizeof gdl__err];
            memcpy(why, gdl__err, sizeof why);
            gdl__set_error("%s: %s over NCCL: %s", op, what, why);
        }
        gdl_free(h), gdl_free(all), gdl_free(in);
        return rc;
    }
#endif
    return 0;
}

static int gdl__dist_agree(const char *op, const char *what, int ok) {
    double bad = ok ? 0 : 1;
    char keep[sizeof gdl__err];
    memcpy(keep, gdl__err, sizeof keep);
    if (gdl__dist_reduce_f64(op, what, &bad, 1, 0) < 0) {
        if (!ok) memcpy(gdl__err, keep, sizeof keep); /* this rank's own failure says more */
        return -1;
    }
    if (!ok) return -1;
    if (bad > 0) {
        gdl__set_error("%s: %.0f of %d ranks failed %s (their own errors say why)", op,
                       bad, gdl_dist_world_size(), what);
        return -1;
    }
    return 0;
}

static int gdl__dist_pass_sum(gdl__pass *p) {
    double v[4];
    v[0] = p->loss_sum, v[1] = (double)p->samples, v[2] = (double)p->correct, v[3] = (double)p->counted;
    if (gdl__dist_reduce_f64("gdl_fit", "the all-reduce of the epoch's loss and accuracy sums", v, 4, 0) < 0)
        return -1;
    p->loss_sum = v[0], p->samples = (int64_t)v[1], p->correct = (int64_t)v[2], p->counted = (int64_t)v[3];
    return 0;
}
GPUDL_API void gdl_ddp_set_no_sync(gdl_ddp *d, int on) {
    if (d) d->no_sync = on != 0;
}

GPUDL_API gdl_tensor *gdl_ddp_forward(gdl_ddp *d, gdl_tensor *x) {
    int i;
    if (!d) {
        gdl__null_arg("gdl_ddp_forward", "ddp");
        return NULL;
    }
    if (d->o.broadcast_buffers && gdl__dist.world > 1)
        for (i = 0; i < d->nbuf; i++)
            if (gdl_dist_broadcast(d->bufs[i], 0) < 0) return NULL;
    return gdl_forward(d->m, x);
}

/* A bucket's gradients are complete: gather them and start the all-reduce. On a GPU the copies are
   queued on the compute stream, and NCCL's all-reduce (the mean) on the communication stream after
   them: backward goes on while it runs. */
static void gdl__ddp_start(gdl_ddp *d, gdl__bucket *b) {
    int64_t off = 0;
    int i;
    if (d->gpu) {
        for (i = b->first; i < b->first + b->count && !d->failed; i++) {
            gdl_tensor *p = d->params[i];
            size_t bytes = sizeof(gdl_real) * (size_t)p->numel;
            if ((p->grad ? d->gpu->copy(b->buf + off, p->grad->data, bytes, 2) : d->gpu->memset0(b->buf + off, bytes)) < 0)
                d->failed = 1;
            off += p->numel;
        }
        if (!d->failed && d->gpu->collective(GDL_COLL_ALL_REDUCE, b->buf, b->buf, b->numel, GDL_F32, 1, 0, 0) < 0)
            d->failed = 1;
        b->started = !d->failed;
        return;
    }
    for (i = b->first; i < b->first + b->count; i++) {
        gdl_tensor *p = d->params[i];
        if (p->grad) memcpy(b->buf + off, p->grad->data, sizeof(gdl_real) * (size_t)p->numel);
        else memset(b->buf + off, 0, sizeof(gdl_real) * (size_t)p->numel); /* unused this step: adds nothing */
        off += p->numel;
    }
    b->started = 1;
#ifdef GPUDL_MPI
    if (gdl__dist.world > 1) {
        int rc;
        gdl__dist.seq++;
        rc = MPI_Iallreduce(MPI_IN_PLACE, b->buf, (int)b->numel, gdl__mpi_type(GDL_F32), MPI_SUM, gdl__dist.comm,
                            &b->req);
        if (rc != MPI_SUCCESS) {
            gdl__dist_fail("gdl_ddp_backward", "MPI_Iallreduce", rc);
            b->started = 0;
            d->failed = 1;
        }
    }
#endif
}

static void gdl__ddp_ready(gdl_tensor *leaf, void *user) {
    gdl_ddp *d = (gdl_ddp *)user;
    int i;
    for (i = 0; i < d->np; i++)
        if (d->params[i] == leaf) {
            gdl__bucket *b = &d->b[d->bucket_of[i]];
            if (--b->pending == 0 && !d->failed) gdl__ddp_start(d, b);
            return;
        }
}

GPUDL_API int gdl_ddp_backward(gdl_ddp *d, gdl_tensor *loss) {
    static const char fn[] = "gdl_ddp_backward";
    int i, rc;
    if (!d) {
        gdl__null_arg(fn, "ddp");
        return -1;
    }
    for (i = 0; i < d->np; i++)
        if (d->params[i]->dtype != GDL_F32) { /* master weights turned on after gdl_ddp_new */
            gdl__set_error("%s: parameter %s is %s (an optimizer's master weights?); DDP all-reduces f32 gradients",
                           fn, gdl_shape_str(d->params[i]), gdl_dtype_name(d->params[i]->dtype));
            return -1;
        }
    if (d->no_sync) return gdl_backward(loss);
    if (gdl__dist_ready(fn) < 0) return -1;
    d->failed = 0;
    for (i = 0; i < d->nbuckets; i++) {
        d->b[i].pending = d->b[i].count;
        d->b[i].started = 0;
    }
    gdl_set_grad_ready_hook(gdl__ddp_ready, d);
    rc = gdl_backward(loss);
    gdl_set_grad_ready_hook(NULL, NULL);
    /* parameters backward did not reach (unused this step): their buckets go now, with zeros */
    for (i = 0; i < d->nbuckets && !d->failed; i++)
        if (!d->b[i].started) gdl__ddp_start(d, &d->b[i]);
#ifdef GPUDL_MPI
    /* every request started must complete, error or not; after a timeout or an MPI error no MPI call is
       made again, and the requests still in flight keep their buckets (see gdl_ddp_free) */
    for (i = 0; i < d->nbuckets; i++)
        if (d->b[i].started && gdl__dist.world > 1 && !d->gpu && !gdl__dist.broken) {
            char what[96];
            snprintf(what, sizeof what, "the all-reduce of gradient bucket %d of %d (%lld values)", i + 1,
                     d->nbuckets, (long long)d->b[i].numel);
            if (gdl__dist_wait(fn, what, &d->b[i].req) < 0) d->failed = 1;
        }
#endif
    if (d->gpu) { /* the compute stream waits for the all-reduces, then takes the means back */
        if (rc < 0 || d->failed || !gdl__be(fn, d->dev) || d->gpu->comm_join() < 0) return -1;
        for (i = 0; i < d->nbuckets; i++) {
            gdl__bucket *b = &d->b[i];
            int64_t off = 0;
            int k;
            for (k = b->first; k < b->first + b->count; k++) {
                gdl_tensor *p = d->params[k];
                if (gdl__ensure_grad(p) < 0) return -1; /* a flat block's parameter: its slot, as on the CPU */
                if (d->gpu->copy(p->grad->data, b->buf + off, sizeof(gdl_real) * (size_t)p->numel, 2) < 0) return -1;
                off += p->numel;
            }
        }
        return 0;
    }
    if (rc < 0 || d->failed) return -1;
    for (i = 0; i < d->nbuckets; i++) { /* the mean over the ranks, back into the gradients */
        gdl__bucket *b = &d->b[i];
        int64_t off = 0, j;
        gdl_real w = (gdl_real)gdl__dist.world;
        int k;
        for (k = b->first; k < b->first + b->count; k++) {
            gdl_tensor *p = d->params[k];
            if (gdl__ensure_grad(p) < 0) return -1;
            for (j = 0; j < p->numel; j++) ((gdl_real *)p->grad->data)[j] = b->buf[off + j] / w;
            off += p->numel;
        }
    }
    return 0;
}

GPUDL_API int gdl_dist_barrier(void) {
    if (gdl__dist_ready("gdl_dist_barrier") < 0) return -1;
#ifdef GPUDL_MPI
    if (gdl__dist.comm_dev) { /* NCCL's queued collectives done first, with the timeout: a missing peer
                                 fails here rather than leave MPI_Barrier waiting */
        const gdl_backend *be = gdl__dist_comm("gdl_dist_barrier", gdl_cuda(gdl__dist.comm_dev - 1));
        if (!be || be->comm_sync(0, gdl_dist_timeout()) < 0) return -1;
    }
    if (gdl__dist.world > 1) {
        MPI_Request q;
        gdl__dist.seq++;
        return gdl__dist_run("gdl_dist_barrier", "MPI_Ibarrier", "the barrier", MPI_Ibarrier(gdl__dist.comm, &q),
                             &q);
    }
#else
    if (gdl__dist.world > 1) { /* NCCL is the transport: an all-reduce, waited for with the timeout */
        const gdl_backend *be = gdl__dist_comm("gdl_dist_barrier", gdl__dist.comm_dev ? gdl_cuda(gdl__dist.comm_dev - 1)
                                                                                     : gdl_dist_device());
        if (!be || be->comm_sync(1, gdl_dist_timeout()) < 0) return -1;
    }
#endif
    return 0;
}

/* ---------------------------------------------------------------------------
   [impl-cluster]   What workload managers hand a job: Slurm's host lists (the
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
   Unset ones stay "". 0, or -1 + error (a bad node list). Only the rendezvous without MPI asks. */
#if defined(GDL__HAVE_RDV)
static int gdl__cluster_master(const char *op, char *addr, size_t alen, char *port, size_t plen) {
    static const char *const lists[3] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
    const char *a = getenv("MASTER_ADDR"), *p = getenv("MASTER_PORT"), *job;
    int i;
    if (!a || !a[0]) a = getenv("PET_MASTER_ADDR");
    if (!p) p = getenv("PET_MASTER_PORT");
    snprintf(addr, alen, "%s", a ? a : "");
    snprintf(port, plen, "%s", p ? p : "");
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
    if (!port[0] && (job = getenv("SLURM_JOB_ID")) != NULL && job[0])
        snprintf(port, plen, "%lu", 20000 + strtoul(job, NULL, 10) % 20000);
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
        if (!nn[0] || *end || lo < 1 || lo > (1L << 20) || hi != lo) {
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

/* gdl_fit after an optimizer step, with opts.preempt: a signal caught on any rank (the ranks agree) stops
   the run here, after a checkpoint of this step (unless checkpoint_every just wrote it). 0: go on; 1:
   stopped, saved; -1 + error. */
static int gdl__fit_preempt(gdl__fit_run *r) {
    int sig = r->o.ddp ? gdl_preempt_check() : gdl_preempt_signal();
    if (sig <= 0) return sig;
    if (!(r->o.checkpoint_every > 0 && gdl_optim_get_step(r->opt) % r->o.checkpoint_every == 0) &&
        gdl__fit_checkpoint(r) < 0)
        return -1;
    r->preempted = sig;
    if (r->o.verbose)
        fprintf(r->log, "%sgdl_fit: signal %d at epoch %d, batch %lld of %lld (step %lld): checkpoint saved to %s; "
                "stopping (resume = 1 continues from it)\n", r->tty ? "\n" : "", sig, r->epoch, (long long)r->b,
                (long long)r->nb, (long long)gdl_optim_get_step(r->opt), r->ckpath);
    return 1;
}
/* ---------------------------------------------------------------------------
   [impl-monitor]   The allocators' counters (gdl_memory_stats), then NVML.
   ------------------------------------------------------------------------- */
GPUDL_API int gdl_memory_stats(gdl_device dev, gdl_memory_status *s) {
    const gdl_backend *be;
    if (!s) {
        gdl__null_arg("gdl_memory_stats", "s");
        return -1;
    }
    if (!(be = gdl__be("gdl_memory_stats", dev)) || be->memory_stats(dev.index, s) < 0) return -1;
    if (dev.type == GDL_DEVICE_CPU) {
        s->arena_used = gdl__host_arena.used + gdl__hdr_arena[gdl__arena_gen & 1].used;
        s->arena_reserved = gdl__host_arena.reserved + gdl__hdr_arena[0].reserved + gdl__hdr_arena[1].reserved;
    } else { /* gdl__be has checked the index */
        s->arena_used = gdl__gpu_arena[dev.index].used;
        s->arena_reserved = gdl__gpu_arena[dev.index].reserved;
    }
    return 0;
}

GPUDL_API int gdl_memory_reset_peak(gdl_device dev) {
    const gdl_backend *be = gdl__be("gdl_memory_reset_peak", dev);
    return be ? be->memory_reset_peak(dev.index) : -1;
}

GPUDL_API const char *gdl_memory_summary(gdl_device dev) {
    static GDL__TLS char buf[2048];
    gdl_memory_status m;
    size_t k = 0;
    const char *rule = "------------------------------------------------------------\n";
    if (gdl_memory_stats(dev, &m) < 0) return NULL;
#define GDL__SUM(...) (k += (size_t)snprintf(buf + k, k < sizeof buf ? sizeof buf - k : 0, __VA_ARGS__))
    GDL__SUM("%s", rule);
    GDL__SUM("gpudl memory summary, %s (%s)\n", gdl_device_str(dev), gdl_device_name(dev));
    GDL__SUM("%s", rule);
    GDL__SUM("%-28s %15s %15s\n", "", "current", "peak");
    GDL__SUM("%-28s %15.0f %15.0f\n", "allocated (bytes)", (double)m.allocated, (double)m.peak_allocated);
    GDL__SUM("%-28s %15.0f %15.0f\n", "reserved (bytes)", (double)m.reserved, (double)m.peak_reserved);
    GDL__SUM("%-28s %15.0f %15.0f\n", "step arena used / reserved", (double)m.arena_used,
             (double)m.arena_reserved);
    GDL__SUM("%s", rule);
    GDL__SUM("%-28s %15lld\n", "allocation requests", (long long)m.requests);
    GDL__SUM("%-28s %15lld\n", "cache hits", (long long)m.cache_hits);
    GDL__SUM("%-28s %15lld\n", dev.type == GDL_DEVICE_CPU ? "mallocs" : "cudaMalloc calls",
             (long long)m.device_mallocs);
    GDL__SUM("%-28s %15lld\n", "frees", (long long)m.frees);
    GDL__SUM("%-28s %15lld\n", "cache releases", (long long)m.cache_releases);
    GDL__SUM("%s", rule);
#undef GDL__SUM
    return buf;
}

/* NVML loaded at run time (gdl__dl_open: dlopen, LoadLibrary). Only the few entry points used are
   declared here, with NVML's documented types (nvmlDevice_t is a pointer;
   nvmlReturn_t an int, 0 is success, 3 "not supported"). */
#if defined(GDL__OS_DL)
typedef struct { unsigned int gpu, memory; } gdl__nvml_util;
typedef struct { unsigned long long total, free, used; } gdl__nvml_mem;
typedef struct gdl__nvml_dev *gdl__nvml_device;
static struct {
    int ok;
    char why[300];
    int (*init)(void);
    int (*count)(unsigned int *);
    int (*handle)(unsigned int, gdl__nvml_device *);
    int (*handle_pci)(const char *, gdl__nvml_device *);
    int (*name)(gdl__nvml_device, char *, unsigned int);
    int (*util)(gdl__nvml_device, gdl__nvml_util *);
    int (*mem)(gdl__nvml_device, gdl__nvml_mem *);
    int (*temp)(gdl__nvml_device, int, unsigned int *);
    int (*power)(gdl__nvml_device, unsigned int *);
    int (*limit)(gdl__nvml_device, unsigned int *);
    int (*clock)(gdl__nvml_device, int, unsigned int *);
    const char *(*errstr)(int);
} gdl__nvml;

/* Loads and initialises NVML, once per process (gdl__nvml_load). */
static void gdl__nvml_load_once(void) {
    {
        const char *lib = getenv("GPUDL_NVML_LIB");
        void *h;
        int rc;
        char why[200];
        if (!lib || !lib[0]) lib = GDL__NVML_DEFAULT_LIB;
        if (!(h = gdl__dl_open(lib, why, sizeof why))) {
            snprintf(gdl__nvml.why, sizeof gdl__nvml.why, "NVML not available (%s): no NVIDIA driver here", why);
        } else {
            /* object to function pointer through memcpy: ISO C has no cast between them */
#define GDL__NVML_SYM(field, sym)                                                   \
            do {                                                                    \
                void *p_ = gdl__dl_sym(h, sym);                                     \
                if (!p_) {                                                          \
                    snprintf(gdl__nvml.why, sizeof gdl__nvml.why,                   \
                             "NVML not available: %s has no %s (driver too old?)", lib, sym); \
                    goto nvml_done;                                                 \
                }                                                                   \
                memcpy(&gdl__nvml.field, &p_, sizeof p_);                           \
            } while (0)
            GDL__NVML_SYM(init, "nvmlInit_v2");
            GDL__NVML_SYM(count, "nvmlDeviceGetCount_v2");
            GDL__NVML_SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
            GDL__NVML_SYM(handle_pci, "nvmlDeviceGetHandleByPciBusId_v2");
            GDL__NVML_SYM(name, "nvmlDeviceGetName");
            GDL__NVML_SYM(util, "nvmlDeviceGetUtilizationRates");
            GDL__NVML_SYM(mem, "nvmlDeviceGetMemoryInfo");
            GDL__NVML_SYM(temp, "nvmlDeviceGetTemperature");
            GDL__NVML_SYM(power, "nvmlDeviceGetPowerUsage");
            GDL__NVML_SYM(limit, "nvmlDeviceGetEnforcedPowerLimit");
            GDL__NVML_SYM(clock, "nvmlDeviceGetClockInfo");
            GDL__NVML_SYM(errstr, "nvmlErrorString");
#undef GDL__NVML_SYM
            if ((rc = gdl__nvml.init()) != 0)
                snprintf(gdl__nvml.why, sizeof gdl__nvml.why, "NVML not available: nvmlInit failed: %s",
                         gdl__nvml.errstr(rc));
            else
                gdl__nvml.ok = 1;
        nvml_done:
            if (!gdl__nvml.ok) gdl__dl_close(h); /* kept open while in use: NVML has no clean unload */
        }
    }
}

/* 0 / -1 + error. The first call of any thread loads; the others wait for it (monitors poll from
   threads of their own). */
static int gdl__nvml_load(const char *op) {
#ifdef GDL__OS_THREADS
    static gdl__once_flag once = GDL__ONCE_INIT;
    gdl__once(&once, gdl__nvml_load_once);
#else
    static int tried;
    if (!tried) {
        tried = 1;
        gdl__nvml_load_once();
    }
#endif
    if (!gdl__nvml.ok) gdl__set_error("%s: %s", op, gdl__nvml.why);
    return gdl__nvml.ok ? 0 : -1;
}

GPUDL_API int gdl_gpu_count(void) {
    unsigned int n = 0;
    int rc;
    if (gdl__nvml_load("gdl_gpu_count") < 0) return -1;
    if (gdl_cuda_device_count() > 0) return gdl_cuda_device_count(); /* gdl_gpu_stats maps them to NVML's */
    if ((rc = gdl__nvml.count(&n)) != 0) {
        gdl__set_error("gdl_gpu_count: nvmlDeviceGetCount: %s", gdl__nvml.errstr(rc));
        return -1;
    }
    return (int)n;
}

GPUDL_API int gdl_gpu_stats(int index, gdl_gpu_status *s) {
    static const char fn[] = "gdl_gpu_stats";
    gdl__nvml_device d;
    gdl__nvml_util u;
    gdl__nvml_mem m;
    unsigned int v;
    int rc, n;
    if (!s) {
        gdl__null_arg(fn, "s");
        return -1;
    }
    if ((n = gdl_gpu_count()) < 0) {
        char why[sizeof gdl__err]; /* the message is rewritten from a copy: its buffer is gdl__set_error's */
        memcpy(why, gdl__err, sizeof why);
        gdl__set_error("%s: %s", fn, why + strlen("gdl_gpu_count: "));
        return -1;
    }
    if (gdl_cuda_device_count() > 0) {
        /* CUDA's index: NVML's device with the same PCI bus id (the orders differ under
           CUDA_VISIBLE_DEVICES, or without CUDA_DEVICE_ORDER=PCI_BUS_ID) */
        char bus[64];
        const gdl_backend *be;
        if (index < 0 || index >= n) {
            gdl__set_error("%s: no CUDA device %d (%d available)", fn, index, n);
            return -1;
        }
        if (!(be = gdl__be_lookup(fn, gdl_cuda(index)))) return -1;
        if (be->pci_bus_id(index, bus, (int)sizeof bus) < 0) {
            char why[sizeof gdl__err];
            memcpy(why, gdl__err, sizeof why);
            gdl__set_error("%s: cuda:%d: no PCI bus id to find it by in NVML: %s", fn, index, why);
            return -1;
        }
        if ((rc = gdl__nvml.handle_pci(bus, &d)) != 0) {
            gdl__set_error("%s: cuda:%d (PCI %s): NVML does not list it: %s", fn, index, bus, gdl__nvml.errstr(rc));
            return -1;
        }
    } else if (index < 0 || index >= n) {
        gdl__set_error("%s: no GPU %d (NVML sees %d)", fn, index, n);
        return -1;
    } else if ((rc = gdl__nvml.handle((unsigned)index, &d)) != 0) {
        gdl__set_error("%s: GPU %d: %s", fn, index, gdl__nvml.errstr(rc));
        return -1;
    }
    if ((rc = gdl__nvml.mem(d, &m)) != 0) {
        gdl__set_error("%s: GPU %d: %s", fn, index, gdl__nvml.errstr(rc));
        return -1;
    }
    memset(s, 0, sizeof *s);
    s->memory_used = (size_t)m.used;
    s->memory_total = (size_t)m.total;
    if (gdl__nvml.name(d, s->name, sizeof s->name) != 0) snprintf(s->name, sizeof s->name, "GPU %d", index);
    s->name[sizeof s->name - 1] = 0;
    /* what a GPU does not report (3: not supported) is left unknown, not an error */
    if (gdl__nvml.util(d, &u) == 0) {
        s->utilization = (int)u.gpu;
        s->memory_utilization = (int)u.memory;
    } else {
        s->utilization = s->memory_utilization = -1;
    }
    s->temperature = gdl__nvml.temp(d, 0 /* NVML_TEMPERATURE_GPU */, &v) == 0 ? (int)v : -1;
    s->power = gdl__nvml.power(d, &v) == 0 ? v / 1000.0 : NAN;
    s->power_limit = gdl__nvml.limit(d, &v) == 0 ? v / 1000.0 : NAN;
    s->sm_clock = gdl__nvml.clock(d, 1 /* NVML_CLOCK_SM */, &v) == 0 ? (int)v : -1;
    s->memory_clock = gdl__nvml.clock(d, 2 /* NVML_CLOCK_MEM */, &v) == 0 ? (int)v : -1;
    return 0;
}
#else
GPUDL_API int gdl_gpu_count(void) {
    gdl__set_error("gdl_gpu_count: GPU monitoring is not compiled in: build with -DGPUDL_CUDA or -DGPUDL_NVML");
    return -1;
}
GPUDL_API int gdl_gpu_stats(int index, gdl_gpu_status *s) {
    (void)index;
    (void)s;
    gdl__set_error("gdl_gpu_stats: GPU monitoring is not compiled in: build with -DGPUDL_CUDA or -DGPUDL_NVML");
    return -1;
}
#endif

#endif /* GPUDL_IMPLEMENTATION_DONE */
#endif /* GPUDL_IMPLEMENTATION */

/*
   LICENSE (MIT)
   Copyright (c) 2026 the gpudl authors.
   Permission is hereby granted, free of charge, to any person obtaining a copy
   of this software and associated documentation files (the "Software"), to deal
   in the Software without restriction, including without limitation the rights
   to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
   copies of the Software, and to permit persons to whom the Software is
   furnished to do so, subject to the following conditions: the above copyright
   notice and this permission notice shall be included in all copies or
   substantial portions of the Software. THE SOFTWARE IS PROVIDED "AS IS",
   WITHOUT WARRANTY OF ANY KIND.
*/
