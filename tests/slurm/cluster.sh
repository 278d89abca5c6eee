#!/bin/sh
# tests/slurm/cluster.sh — a real one-node Slurm cluster for the tests: munged, slurmctld and slurmd
# as plain processes (no systemd), their configuration, keys, sockets, state and logs in one directory.
#
#   sh tests/slurm/cluster.sh start DIR   writes DIR/slurm.conf (and cgroup.conf, the munge key), starts
#                                         the three daemons and waits until the node takes jobs; exit 0,
#                                         or 1 with the daemons' logs (and nothing left running)
#   sh tests/slurm/cluster.sh stop DIR    cancels every job, stops the daemons, and ends every process
#                                         the cluster started (found by GPUDL_SLURM_CLUSTER=DIR in its
#                                         environment, which the daemons pass on to job steps and tasks)
#   sh tests/slurm/cluster.sh check       0 where a cluster can start here (root, the programs); else
#                                         prints why not
#
# Then SLURM_CONF=DIR/slurm.conf for sbatch, srun, squeue, scontrol. The configuration suits a container:
# proctrack/linuxproc (no cgroups to track processes), task/none, no accounting; cgroup.conf names
# cgroup/v1 and IgnoreSystemd=yes because Debian's Slurm 22.05 loads the cgroup plugin anyway and
# cgroup/v2 refuses hybrid cgroup mounts. The node is `hostname -s`, at 127.0.0.1; the ports are free
# ones picked at start, so two clusters (two test runs) do not meet. Root only: slurmd runs jobs as their
# users, and munged here has no munge user to run as.
set -u
cmd=${1:-}
dir=${2:-}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
        echo $((20000 + $(od -An -N2 -tu2 /dev/urandom) % 30000))
}

check() {
    if [ "$(id -u)" != 0 ]; then echo "not root (munged and slurmd run as root here)"; return 1; fi
    for p in munged slurmctld slurmd sbatch srun scontrol squeue scancel; do
        command -v "$p" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin
        command -v "$p" >/dev/null 2>&1 || { echo "no $p (apt-get install slurm-wlm munge)"; return 1; }
    done
    return 0
}

# the processes of the cluster in DIR: the daemons and what they forked (slurmstepd) carry
# GPUDL_SLURM_CLUSTER=DIR (set for them alone); the jobs' scripts and tasks carry the SLURM_CONF they were
# submitted with and a SLURM_JOB_ID
ours() {
    for e in /proc/[0-9]*/environ; do
        p=${e#/proc/}
        p=${p%/environ}
        [ "$p" = $$ ] && continue
        v=$( { tr '\0' '\n' <"$e"; } 2>/dev/null) || continue
        case "$v" in
        *"GPUDL_SLURM_CLUSTER=$1
"* | *"GPUDL_SLURM_CLUSTER=$1") echo "$p" ;;
        *"SLURM_CONF=$1/slurm.conf"*) case "$v" in *SLURM_JOB_ID=*) echo "$p" ;; esac ;;
        esac
    done
}

stop() {
    [ -f "$dir/slurm.conf" ] || return 0
    unset GPUDL_SLURM_CLUSTER # (set by a failed start) not in this script's own processes
    export SLURM_CONF="$dir/slurm.conf"
    if [ -f "$dir/slurmctld.pid" ]; then
        timeout 10 scancel --quiet --full "--user=$(id -un)" >/dev/null 2>&1
        i=0
        while [ $i -lt 20 ] && [ -n "$(timeout 5 squeue -h -o %i 2>/dev/null)" ]; do sleep 0.5; i=$((i + 1)); done
    fi
    for d in slurmd slurmctld munged; do
        [ -f "$dir/$d.pid" ] && kill "$(cat "$dir/$d.pid")" 2>/dev/null
    done
    i=0
    while [ $i -lt 20 ] && [ -n "$(ours "$dir")" ]; do sleep 0.25; i=$((i + 1)); done
    left=$(ours "$dir")
    if [ -n "$left" ]; then
        echo "cluster.sh: killing what is left of the cluster: $(for p in $left; do tr '\0' ' ' </proc/$p/cmdline; echo "($p)"; done)"
        # shellcheck disable=SC2086
        kill -9 $left 2>/dev/null
        sleep 0.5
    fi
    rm -f "$dir"/*.pid
    [ -z "$(ours "$dir")" ]
}

start() {
    why=$(check) || { echo "cluster.sh: cannot start: $why"; return 1; }
    PATH=$PATH:/usr/sbin:/sbin
    mkdir -p "$dir/state" "$dir/spool" "$dir/munge" || return 1
    chmod 700 "$dir" "$dir/munge"
    host=$(hostname -s)
    ctld_port=$(free_port)
    d_port=$(free_port)
    while [ "$d_port" = "$ctld_port" ]; do d_port=$(free_port); done
    # munge: a key of our own, its socket and state in DIR
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null
    chmod 400 "$dir/munge/munge.key"
    cat >"$dir/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
IgnoreSystemd=yes
EOF
    cat >"$dir/slurm.conf" <<EOF
# the one-node cluster of gpudl's tests (tests/slurm/cluster.sh)
ClusterName=gpudltest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid.slurm
SlurmdPidFile=$dir/slurmd.pid.slurm
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=600
InactiveLimit=0
Waittime=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 RealMemory=1024 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF="$dir/slurm.conf" GPUDL_SLURM_CLUSTER="$dir"
    munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
        --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" --log-file="$dir/munged.log" \
        -F >>"$dir/munged.log" 2>&1 &
    echo $! >"$dir/munged.pid"
    i=0
    while [ $i -lt 40 ] && [ ! -S "$dir/munge/munge.sock" ]; do sleep 0.25; i=$((i + 1)); done
    slurmctld -D -i -f "$dir/slurm.conf" >>"$dir/slurmctld.log" 2>&1 &
    echo $! >"$dir/slurmctld.pid"
    slurmd -D -f "$dir/slurm.conf" -N "$host" >>"$dir/slurmd.log" 2>&1 &
    echo $! >"$dir/slurmd.pid"
    # up when the node is idle: it takes jobs
    i=0
    while [ $i -lt 120 ]; do
        st=$(timeout 5 sinfo -h -n "$host" -o %t 2>/dev/null)
        case "$st" in idle*) echo "cluster.sh: Slurm is up in $dir (node $host, slurmctld port $ctld_port)"; return 0 ;; esac
        sleep 0.25
        i=$((i + 1))
    done
    echo "cluster.sh: Slurm did not come up within 30 s (node state '${st:-none}'); the logs:"
    for l in munged slurmctld slurmd; do echo "-- $l"; tail -n 15 "$dir/$l.log" 2>/dev/null; done
    stop
    return 1
}

case "$cmd" in
start) [ -n "$dir" ] || { echo "usage: cluster.sh start DIR" >&2; exit 2; }; start ;;
stop) [ -n "$dir" ] || { echo "usage: cluster.sh stop DIR" >&2; exit 2; }; stop ;;
check) check ;;
*) echo "usage: sh tests/slurm/cluster.sh start DIR | stop DIR | check" >&2; exit 2 ;;
esac
