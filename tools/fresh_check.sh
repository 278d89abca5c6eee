#!/bin/sh
# tools/fresh_check.sh — `make test-fresh`: CI and `make run` on a fresh Debian.
#
#   sh tools/fresh_check.sh [--new] [--keep] [REV]
#
# A green `make test` on a developer's machine can hide an install step that
# only works because an earlier session left a package behind. This check
# starts from a minimal Debian root (debootstrap --variant=minbase) of the
# release and archive this machine uses, as our fresh machines do, with the
# CUDA toolkit of this machine mounted read-only at /usr/local/cuda (our
# machines have it preinstalled). It clones the repository's REV (default
# HEAD: what is committed, as CI sees it) into the root, runs what CI runs,
# `CI=true bash .ci/run` with no standard input, then `make run` in a second
# fresh clone, and prints what each part installed, whether it passed and how
# long it took.
#
#   --new    make the cached minimal root anew (it is kept, pristine, in
#            build/fresh/base; every run works on a copy of it)
#   --keep   keep the run's root (build/fresh/run) for a look afterwards
#
# Needs root (chroot, mounts) and debootstrap (sh tools/deps.sh fresh installs
# it). Not part of `make test`: run it before resolving work that touched
# tools/deps.sh, the Makefile or its fragments, or .ci/run. Logs:
# build/fresh/ci.log and build/fresh/run.log.
set -u

cd "$(dirname "$0")/.." || exit 1
top=$(pwd)
new=0 keep=0 rev=HEAD
for a in "$@"; do
    case "$a" in
    --new) new=1 ;;
    --keep) keep=1 ;;
    -*) echo "usage: sh tools/fresh_check.sh [--new] [--keep] [REV]" >&2; exit 2 ;;
    *) rev=$a ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "fresh_check: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
sh tools/deps.sh fresh || exit 1
commit=$(git rev-parse --verify "$rev^{commit}") || { echo "fresh_check: no commit $rev" >&2; exit 1; }

dir=$top/build/fresh
base=$dir/base
root=$dir/run
mkdir -p "$dir" || exit 1

# --- what is mounted under the run's root, and its removal -----------------
mounted_under() { # the mount points under $root, deepest first
    awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts | sort -r
}
in_root_pids() { # the processes whose root is the run's root
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
    done
}
unmount_all() {
    # what the suite left running in there (an MPI daemon, a stopped run) goes first
    pids=$(in_root_pids)
    [ -z "$pids" ] || { kill $pids 2>/dev/null; sleep 2; kill -9 $(in_root_pids) 2>/dev/null; }
    for m in $(mounted_under); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
    if [ -n "$(mounted_under)" ]; then
        echo "fresh_check: still mounted under $root (not removed):" >&2
        mounted_under >&2
        return 1
    fi
}
remove_root() {
    # never remove while anything (the host's /dev) is mounted inside
    unmount_all && rm -rf "$root"
}
cleanup() {
    if [ "$keep" = 1 ]; then unmount_all; else remove_root; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

now() { date +%s; }
times=""
step_time() { # name start
    times="$times$(printf '  %-34s %5ss' "$1" $(( $(now) - $2 )))
"
}

# --- the minimal root, cached ----------------------------------------------
# The release and the archive: this machine's own (its apt sources), so the
# fresh root sees the packages our machines see.
. /etc/os-release
suite=${VERSION_CODENAME:-}
mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
         grep -v security | head -n 1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; exit } }' \
                            /etc/apt/sources.list 2>/dev/null)
[ -n "$suite" ] && [ -n "$mirror" ] || { echo "fresh_check: cannot tell this machine's Debian release or archive" >&2; exit 1; }

remove_root || exit 1
t=$(now)
if [ "$new" = 1 ] || [ ! -x "$base/bin/sh" ]; then
    rm -rf "$base" "$base.tmp"
    echo "fresh_check: debootstrap --variant=minbase $suite"
    debootstrap --variant=minbase "$suite" "$base.tmp" "$mirror" >"$dir/debootstrap.log" 2>&1 ||
        { tail -n 20 "$dir/debootstrap.log" >&2; echo "fresh_check: debootstrap failed" >&2; exit 1; }
    mv "$base.tmp" "$base"
    step_time "debootstrap (minbase $suite)" "$t"
fi
t=$(now)
cp -a "$base" "$root" || exit 1
# the machine's package sources (the same archive, updates and security) and name service
rm -f "$root/etc/apt/sources.list"
cp /etc/apt/sources.list "$root/etc/apt/" 2>/dev/null
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && cp "$f" "$root/etc/apt/sources.list.d/"
done
cp /etc/resolv.conf "$root/etc/resolv.conf"
step_time "copy of the root" "$t"

mount -t proc proc "$root/proc" &&
mount -t sysfs sysfs "$root/sys" &&
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev" || { echo "fresh_check: mounts failed" >&2; exit 1; }
# The toolkit as it is installed here: its directory (read-only), the
# /usr/local/cuda link to it, and the loader's configuration for its libraries
# (a program linked with cuBLAS runs without LD_LIBRARY_PATH, as on our machines).
if [ -d /usr/local/cuda/bin ]; then
    cuda=$(readlink -f /usr/local/cuda)
    mkdir -p "$root$cuda"
    mount --bind "$cuda" "$root$cuda" && mount -o remount,bind,ro "$root$cuda" ||
        { echo "fresh_check: cannot mount the CUDA toolkit" >&2; exit 1; }
    [ -L /usr/local/cuda ] && ln -sfn "$(readlink /usr/local/cuda)" "$root/usr/local/cuda"
    for f in /etc/ld.so.conf.d/*.conf; do
        grep -q "^/usr/local/cuda" "$f" 2>/dev/null && cp "$f" "$root/etc/ld.so.conf.d/"
    done
    chroot "$root" /sbin/ldconfig
else
    echo "fresh_check: no CUDA toolkit in /usr/local/cuda: the nvcc parts will be skipped"
fi

# --- the clones and the runs -----------------------------------------------
clone() { # where
    rm -rf "$root$1"
    git clone --quiet --no-checkout "$top" "$root$1" && git -C "$root$1" checkout --quiet "$commit"
}
in_root() { # command: a clean environment, no standard input, as CI
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        CI=true chroot "$root" /bin/sh -c "$1" </dev/null
}
result=0
summary=""

t=$(now)
clone /root/ci || exit 1
echo "fresh_check: CI=true bash .ci/run at $(git rev-parse --short "$commit") (log: build/fresh/ci.log)"
if in_root 'cd /root/ci && bash .ci/run' >"$dir/ci.log" 2>&1; then ci=passed; else ci="FAILED (exit $?)"; result=1; fi
step_time "CI=true bash .ci/run" "$t"
tail -n 25 "$dir/ci.log"

t=$(now)
clone /root/user || exit 1
echo "fresh_check: make run in a second fresh clone (log: build/fresh/run.log)"
if in_root 'cd /root/user && make run' >"$dir/run.log" 2>&1; then run=passed; else run="FAILED (exit $?)"; result=1; fi
step_time "make run" "$t"
tail -n 8 "$dir/run.log"

installed=$(grep -h '^gpudl: installing' "$dir/ci.log" "$dir/run.log" 2>/dev/null)
echo
echo "fresh_check: commit $(git rev-parse --short "$commit"), $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores"
echo "fresh_check: what the project's own set-up installed into minbase $suite:"
echo "${installed:-  (nothing)}" | sed 's/^gpudl: /  /'
echo "fresh_check: CI (.ci/run): $ci; make run: $run"
printf 'fresh_check: times\n%s' "$times"
exit $result
