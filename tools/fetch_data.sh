#!/bin/sh
# tools/fetch_data.sh — makes sure Fashion-MNIST is where gpudl looks for it
# (`make data`; `make run` calls it); `sh tools/fetch_data.sh text` does the
# same for the text data, Debian's fortunes (`make data-text`, see the end), and
# `sh tools/fetch_data.sh dict` for Debian's FreeDict English-German dictionary (`make data-dict`).
#
# Where the data may already be, as gdl_dataset_fashion_mnist(NULL, ...) searches:
# $GPUDL_DATA if set (then only there), else ./data, then
# /usr/share/datasets/fashion-mnist. If none has the four files:
#   1. with apt-get usable (root, or `sudo -n`) and GPUDL_DATA unset, install
#      Debian's dataset-fashion-mnist;
#   2. otherwise download the four official .gz files into $GPUDL_DATA or ./data
#      with curl (or wget), decompress each, check it against the SHA-256 below,
#      and only then rename it into place: no half-written file is ever left.
# Environment (for mirrors and tests): GPUDL_DATA_MIRROR, the base URL of the
# four .gz files (file:// works with curl); GPUDL_FETCH=download skips apt.
set -u

# ---- the text data: Debian's fortunes (English, de, es, it, pl, ru) ----
# Where gdl_fortunes_english / gdl_fortunes_languages(NULL, ...) look: $GPUDL_DATA/fortunes
# if GPUDL_DATA is set (then only there), else ./data/fortunes, then /usr/share/games/fortunes.
# If none has them:
#   1. with apt-get usable (root, or `sudo -n`) and GPUDL_DATA unset, install the packages
#      (tools/deps.sh data-text);
#   2. otherwise `apt-get download` them (no root needed; apt checks each package against the
#      signed archive's index), unpack their /usr/share/games/fortunes with dpkg-deb into a
#      temporary beside $GPUDL_DATA/fortunes (or ./data/fortunes) and rename it into place.
fortune_pkgs="fortunes-min fortunes fortunes-de fortunes-es fortunes-it fortunes-pl fortunes-ru"
# unpack_debs DEST WHAT PACKAGE...: `apt-get download` the packages into a temporary beside DEST
# ($work, removed on exit) and unpack them with dpkg-deb into $work/root; WHAT names them in messages
unpack_debs() {
    dest=$1 what=$2
    shift 2
    if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
        echo "gpudl: cannot fetch $what: apt-get and dpkg-deb (Debian, Ubuntu) are needed to get Debian's" \
             "packages ($*); elsewhere, copy the files a Debian system has into $dest" >&2
        return 1
    fi
    parent=$(dirname "$dest")
    mkdir -p "$parent" || { echo "gpudl: cannot create $parent" >&2; return 1; }
    work="$parent/.$(basename "$dest").part.$$"
    trap 'rm -rf "$work"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    mkdir -p "$work/debs" "$work/root" || return 1
    echo "gpudl: downloading Debian's $* into $dest"
    if ! err=$(cd "$work/debs" && apt-get download -q "$@" 2>&1); then
        echo "gpudl: apt-get download failed: $(printf '%s\n' "$err" | grep -v '^W:' | tail -n 2)" \
             "-- no network, or an old package list (apt-get update)?" >&2
        return 1
    fi
    for deb in "$work"/debs/*.deb; do
        dpkg-deb -x "$deb" "$work/root" || { echo "gpudl: $deb does not unpack" >&2; return 1; }
    done
}
has_text() { # dir -> 0 if a file of each package is there (as tools/deps.sh probes them)
    for f in fortunes riddles cookie zippy de/anekdoten es/refranes.fortunes it/italia pl/7thguard ru/2001.03; do
        [ -s "$1/$f" ] || return 1
    done
}
fetch_text() {
    if [ -n "${GPUDL_DATA:-}" ]; then tdir=$GPUDL_DATA/fortunes; has_text "$tdir" && return 0
    else
        tdir=data/fortunes
        has_text "$tdir" && return 0
        has_text /usr/share/games/fortunes && return 0
        if [ "${GPUDL_FETCH:-}" != download ]; then
            sh "$(dirname "$0")/deps.sh" data-text 2>/dev/null && has_text /usr/share/games/fortunes && return 0
            echo "gpudl: Debian's fortunes packages could not be installed here; unpacking them into $tdir instead"
        fi
    fi
    # shellcheck disable=SC2086 # the package names, split on purpose
    unpack_debs "$tdir" "the fortunes" $fortune_pkgs || return 1
    has_text "$work/root/usr/share/games/fortunes" ||
        { echo "gpudl: the unpacked packages lack the expected files" >&2; return 1; }
    rm -rf "$tdir" && mv "$work/root/usr/share/games/fortunes" "$tdir" || return 1
    echo "gpudl:   the fortunes are in $tdir"
}
if [ "${1:-}" = text ]; then fetch_text; exit $?; fi

# ---- the dictionary: Debian's FreeDict English-German (examples/seq2seq.c) ----
# Where seq2seq looks: $GPUDL_DATA/freedict if GPUDL_DATA is set (then only there), else ./data/freedict,
# then /usr/share/dictd. If none has it: 1. with apt-get usable and GPUDL_DATA unset, install
# dict-freedict-eng-deu (tools/deps.sh data-dict); 2. otherwise `apt-get download` it, unpack it with dpkg-deb
# beside the destination, add a plain .dict (gzip -dc of the .dict.dz: a build without zlib reads that) and
# rename the folder into place. GPUDL_FETCH=download goes straight to 2 (a plain .dict in ./data/freedict, for
# builds without zlib).
dict_name=freedict-eng-deu
has_dict() { [ -s "$1/$dict_name.index" ] && { [ -s "$1/$dict_name.dict" ] || [ -s "$1/$dict_name.dict.dz" ]; }; }
fetch_dict() {
    if [ -n "${GPUDL_DATA:-}" ]; then ddir=$GPUDL_DATA/freedict; has_dict "$ddir" && return 0
    else
        ddir=data/freedict
        has_dict "$ddir" && return 0
        if [ "${GPUDL_FETCH:-}" != download ]; then
            has_dict /usr/share/dictd && return 0
            sh "$(dirname "$0")/deps.sh" data-dict 2>/dev/null && has_dict /usr/share/dictd && return 0
            echo "gpudl: Debian's dict-freedict-eng-deu could not be installed here; unpacking it into $ddir instead"
        fi
    fi
    unpack_debs "$ddir" "the dictionary" dict-freedict-eng-deu || return 1
    src="$work/root/usr/share/dictd"
    gzip -dc "$src/$dict_name.dict.dz" >"$src/$dict_name.dict" ||
        { echo "gpudl: $dict_name.dict.dz does not decompress (a corrupt download)" >&2; return 1; }
    has_dict "$src" || { echo "gpudl: the unpacked package lacks $dict_name.index" >&2; return 1; }
    rm -rf "$ddir" && mv "$src" "$ddir" || return 1
    echo "gpudl:   the dictionary is in $ddir"
}
if [ "${1:-}" = dict ]; then fetch_dict; exit $?; fi

dir=${GPUDL_DATA:-data}
mirror=${GPUDL_DATA_MIRROR:-http://fashion-mnist.s3-website.eu-central-1.amazonaws.com}
mirror=${mirror%/}

# SHA-256 of the decompressed IDX bytes: Debian's package re-compresses the
# official files (its .gz sums differ) but holds the same IDX bytes.
sums='
train-images-idx3-ubyte c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888
train-labels-idx1-ubyte bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9
t10k-images-idx3-ubyte  5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b
t10k-labels-idx1-ubyte  0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34
'
names=$(printf '%s\n' "$sums" | awk 'NF { print $1 }')

has_all() { # dir -> 0 if all four files are there (plain or .gz)
    for n in $names; do
        [ -f "$1/$n" ] || [ -f "$1/$n.gz" ] || return 1
    done
    return 0
}

if [ -n "${GPUDL_DATA:-}" ]; then
    has_all "$dir" && exit 0
else
    has_all data && exit 0
    has_all /usr/share/datasets/fashion-mnist && exit 0
fi

# the package, installed as deps.sh installs everything (it says nothing when it cannot)
if [ "${GPUDL_FETCH:-}" != download ] && [ -z "${GPUDL_DATA:-}" ]; then
    if sh "$(dirname "$0")/deps.sh" data 2>/dev/null && has_all /usr/share/datasets/fashion-mnist; then
        exit 0
    fi
    echo "gpudl: Debian's dataset-fashion-mnist could not be installed here; downloading the files instead"
fi

if command -v curl >/dev/null 2>&1; then get=curl
elif command -v wget >/dev/null 2>&1 && [ "${mirror#file:}" = "$mirror" ]; then get=wget
else
    echo "gpudl: cannot fetch Fashion-MNIST: neither curl nor wget is installed (apt-get install curl), and" \
         "Debian's dataset-fashion-mnist could not be installed" >&2
    exit 1
fi
command -v sha256sum >/dev/null 2>&1 || { echo "gpudl: sha256sum (coreutils) is missing" >&2; exit 1; }
mkdir -p "$dir" || { echo "gpudl: cannot create $dir" >&2; exit 1; }

# The temporaries live beside their destination (same file system, so the
# final mv is an atomic rename) and go on any exit, Ctrl-C included.
tmp_gz=""; tmp_idx=""
cleanup() { rm -f "$tmp_gz" "$tmp_idx"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "gpudl: downloading Fashion-MNIST into $dir from $mirror"
for n in $names; do
    want=$(printf '%s\n' "$sums" | awk -v n="$n" '$1 == n { print $2 }')
    if [ -f "$dir/$n" ] || [ -f "$dir/$n.gz" ]; then continue; fi
    url="$mirror/$n.gz"
    tmp_gz="$dir/.$n.gz.part.$$"; tmp_idx="$dir/.$n.part.$$"
    if [ $get = curl ]; then
        err=$(curl -fsS --retry 2 --connect-timeout 20 --max-time 600 -o "$tmp_gz" "$url" 2>&1)
    else
        err=$(wget -q --tries=3 --timeout=20 -O "$tmp_gz" "$url" 2>&1)
    fi
    if [ $? -ne 0 ]; then
        err=$(printf '%s\n' "$err" | tail -n 1) # curl repeats it once per retry
        echo "gpudl: could not download $url: ${err:-$get failed} -- no network? Without one: apt-get install" \
             "dataset-fashion-mnist, or copy the four files into $dir" >&2
        rm -f "$tmp_gz"; exit 1
    fi
    if ! gzip -dc "$tmp_gz" > "$tmp_idx" 2>/dev/null; then
        echo "gpudl: $url is not a valid gzip file (corrupt or truncated download); nothing was kept" >&2
        rm -f "$tmp_gz" "$tmp_idx"; exit 1
    fi
    got=$(sha256sum "$tmp_idx" | cut -c1-64)
    if [ "$got" != "$want" ]; then
        echo "gpudl: $n from $url fails its checksum (SHA-256 of the IDX bytes $got, expected $want); nothing was kept" >&2
        rm -f "$tmp_gz" "$tmp_idx"; exit 1
    fi
    # keep the decompressed IDX: the checked bytes are the bytes on disk, and
    # reading it needs no zlib
    mv -f "$tmp_idx" "$dir/$n" || exit 1
    rm -f "$tmp_gz"
    echo "gpudl:   $n ok (SHA-256 checked)"
done
exit 0
