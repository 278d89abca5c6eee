/* ---------------------------------------------------------------------------
   src/api/graph.h   A whole training step captured once and replayed, as
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

