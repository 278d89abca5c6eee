"""tests/onnx_check.py — the ONNX files tests/onnx_export.c wrote, checked against the real runtimes.

    python onnx_check.py DIR

For every run of DIR/nets.txt (net, batch, and for several inputs or outputs their counts): onnx.checker.check_model(full_check=True) on DIR/<net>.onnx (shape
inference included; a file with external data is checked by path), then ONNX Runtime (CPU) runs it
on each saved input, and its outputs must equal gpudl's within 1e-5 relative: max |ort - gpudl| /
max |gpudl|. An int8 (QDQ) net is run twice: with ONNX Runtime's graph optimizations off
(ORT_DISABLE_ALL: the QDQ graph as written) within 1e-5 relative too, and at the default level within
one step of its output's quantization: the optimizer quantizes each float bias to int32 at
x_scale * w_scale (then fuses QLinearConv / QLinearMatMul), which gdl does not, and a value near a
rounding boundary moves an output one step. The recurrent nets must hold their layers as ONNX LSTM /
GRU nodes (RNN_NODES), not unrolled. Prints one line a net and batch; exits 1 on the first failure's end with every failure
listed."""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

TOL = 1e-5
# the recurrent layers each net's file holds as ONNX nodes: op type -> count (gdl__ox_rnn_find's fusion)
RNN_NODES = {"text_lstm": {"LSTM": 1}, "text_gru": {"GRU": 4}, "lstm_states": {"LSTM": 2}}


def output_quantum(model):
    """the scale of the DequantizeLinear that makes a one-output graph's output (through Identity), or None"""
    if len(model.graph.output) != 1:
        return None
    made = {o: n for n in model.graph.node for o in n.output}
    n = made.get(model.graph.output[0].name)
    while n is not None and n.op_type == "Identity":
        n = made.get(n.input[0])
    if n is None or n.op_type != "DequantizeLinear":
        return None
    inits = {t.name: t for t in model.graph.initializer}
    return float(numpy_helper.to_array(inits[n.input[1]]))


def main(d):
    with open(os.path.join(d, "nets.txt")) as f:
        runs = [line.split() for line in f if line.strip()]
    failures = []
    checked = {}
    qsteps = {}  # an int8 net's output quantum (its last DequantizeLinear's scale)
    unoptimized = {}  # an int8 net's session with ONNX Runtime's graph optimizations off
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    for run in runs:
        net, batch = run[0], run[1]
        nin, nout = (int(run[2]), int(run[3])) if len(run) > 3 else (0, 0)
        path = os.path.join(d, net + ".onnx")
        if net not in checked:
            try:
                onnx.checker.check_model(path, full_check=True)
                model = onnx.load(path)
                sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            except Exception as e:  # the checker's or the runtime's refusal is the test's failure
                failures.append("%s: %s" % (net, str(e).splitlines()[0] if str(e) else type(e).__name__))
                checked[net] = None
                print("FAIL %-22s %s" % (net, failures[-1]))
                continue
            checked[net] = sess
            qsteps[net] = output_quantum(model)
            if qsteps[net]:  # the QDQ graph as written, without the optimizer's int32 biases
                plain = ort.SessionOptions()
                plain.intra_op_num_threads, plain.log_severity_level = 1, 3
                plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                unoptimized[net] = ort.InferenceSession(path, plain, providers=["CPUExecutionProvider"])
            for op, want in RNN_NODES.get(net, {}).items():
                got = sum(n.op_type == op for n in model.graph.node)
                if got != want:
                    failures.append("%s: %d %s nodes, want %d (a layer left unrolled)" % (net, got, op, want))
                    print("FAIL %-22s %s" % (net, failures[-1]))
            ext = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
            print("     %-22s opset %d, %d nodes, %d initializers%s" % (
                net, model.opset_import[0].version, len(model.graph.node), len(model.graph.initializer),
                ", external data" if ext else ""))
        sess = checked[net]
        if sess is None:
            continue
        def npy(kind, k, count):  # a run's k-th input or output: <net>.b<N>.in.npy, or .in<k>.npy when counted
            return np.load(os.path.join(d, "%s.b%s.%s%s.npy" % (net, batch, kind, k if count else "")))
        xs = [npy("in", k, nin) for k in range(max(nin, 1))]
        wants = [npy("out", k, nout) for k in range(max(nout, 1))]
        try:
            gots = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})
        except Exception as e:  # a runtime's refusal at this batch size is the test's failure
            failures.append("%s batch %s: ONNX Runtime failed: %s" % (net, batch, str(e).splitlines()[0]))
            print("FAIL " + failures[-1])
            continue
        qstep = qsteps.get(net)
        if qstep:
            plain = unoptimized[net].run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})
            gots = [(g, p) for g, p in zip(gots, plain)]
        for k, (got, want) in enumerate(zip(gots, wants)):
            what = "output %d" % k if len(wants) > 1 else "output"
            got, plain = got if qstep else (got, None)
            if plain is not None:  # int8, optimizations off: gdl's outputs within 1e-5 relative
                rel = float(np.max(np.abs(plain.astype(np.float64) - want))) / max(float(np.max(np.abs(want))), 1e-30)
                ok = plain.shape == want.shape and rel <= TOL
                print("%s %-22s batch %s: %s %s, ORT_DISABLE_ALL, max relative error %.2e" % (
                    "ok  " if ok else "FAIL", net, batch, what, list(want.shape), rel))
                if not ok:
                    failures.append("%s batch %s: %s (optimizations off): relative error %.3e over %.0e" % (
                        net, batch, what, rel, TOL))
            if got.shape != want.shape:
                failures.append("%s batch %s: ONNX Runtime's %s is %s, gpudl's %s" % (net, batch, what, got.shape,
                                                                                   want.shape))
                print("FAIL " + failures[-1])
                continue
            err = float(np.max(np.abs(got.astype(np.float64) - want)))
            if qstep:  # int8, optimized: every output within one step of the output's quantization (the int32
                # biases move a value near a rounding boundary across it; 1e-3 of a step for the float sums)
                off = float(np.mean(np.abs(got.astype(np.float64) - want) > qstep / 2))
                ok = err <= qstep * (1 + 1e-3) and np.all(np.isfinite(got))
                print("%s %-22s batch %s: %s %s, max error %.2e = %.2f output quanta, %.0f%% of the outputs off" % (
                    "ok  " if ok else "FAIL", net, batch, what, list(want.shape), err, err / qstep, 100 * off))
                if not ok:
                    failures.append("%s batch %s: %s: error %.3e (one quantum: %.3e), %.0f%% of the outputs off" % (
                        net, batch, what, err, qstep, 100 * off))
                continue
            rel = err / max(float(np.max(np.abs(want))), 1e-30)
            ok = rel <= TOL and np.all(np.isfinite(got))
            print("%s %-22s batch %s: %s %s, max relative error %.2e" % (
                "ok  " if ok else "FAIL", net, batch, what, list(want.shape), rel))
            if not ok:
                failures.append("%s batch %s: %s: relative error %.3e over %.0e" % (net, batch, what, rel, TOL))
    if failures:
        print("onnx_check: %d failures:\n  %s" % (len(failures), "\n  ".join(failures)))
        return 1
    print("onnx_check: %d runs of %d nets match ONNX Runtime %s (onnx %s)" % (
        len(runs), len(checked), ort.__version__, onnx.__version__))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python onnx_check.py DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
