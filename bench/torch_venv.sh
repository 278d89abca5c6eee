# torch_venv.sh — sourced by the bench/compare_*.sh scripts that run PyTorch on the CPU beside gpudl:
# makes sure the virtual environment $TORCH_VENV (default build/torch-venv) has torch and numpy (installed
# once), sets py to its python and prints the CPU model, gpudl's commit, torch's version, $threads threads
# and $runs (what the script repeats), and the load average before the runs.
venv=${TORCH_VENV:-build/torch-venv}
if ! "$venv/bin/python" -c "import torch, numpy" 2>/dev/null; then
    echo "installing torch and numpy into $venv (once)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch numpy
fi
py="$venv/bin/python"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs online"
echo "gpudl $(git rev-parse --short HEAD 2>/dev/null || echo '?'), torch $("$py" -c 'import torch; print(torch.__version__)'), $threads threads, $runs"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
