#!/bin/sh
# test_fetch.sh — tests tools/fetch_data.sh's download path without a network:
# a local file:// mirror serves good, corrupt and missing files; a refused
# loopback port stands in for "no network". Needs curl, gzip and the Debian
# dataset-fashion-mnist package (the source of the good files; `make test`'s
# set-up installs it); the text path (fetch_data.sh text) uses the installed
# fortunes and a failing stand-in apt-get. Ends with "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.." || exit 1
src=/usr/share/datasets/fashion-mnist
pass=0 fail=0 skip=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT

if ! command -v curl >/dev/null 2>&1 || [ ! -f $src/t10k-labels-idx1-ubyte.gz ]; then
    echo "SKIP: needs curl and $src (sh tools/deps.sh test installs both)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
fetch() { # data-dir mirror-dir -> runs the script, output in $t/out, status in $rc
    GPUDL_DATA="$1" GPUDL_FETCH=download GPUDL_DATA_MIRROR="$2" sh tools/fetch_data.sh >"$t/out" 2>&1
    rc=$?
}
leftovers() { ls -A "$1" 2>/dev/null | grep -c '\.part\.' ; }

# a good mirror: the package's files as served
mkdir -p "$t/good" && cp $src/*.gz "$t/good/" || exit 1
fetch "$t/d1" "file://$t/good"
[ $rc -eq 0 ] && ok "good mirror: exit 0" || { bad "good mirror: exit $rc"; cat "$t/out"; }
n=0
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [ -f "$t/d1/$f" ] && cmp -s "$t/d1/$f" "$(gzip -dc $src/$f.gz > "$t/ref" && echo "$t/ref")" && n=$((n + 1))
done
[ $n -eq 4 ] && ok "good mirror: four IDX files, byte-identical to the package's" || bad "good mirror: $n of 4 files right"
[ "$(leftovers "$t/d1")" -eq 0 ] && ok "good mirror: no temporary left" || bad "good mirror: temporaries left"
stamp=$(ls -l --time-style=+%s.%N "$t/d1")
fetch "$t/d1" "file://$t/nowhere"
[ $rc -eq 0 ] && [ ! -s "$t/out" ] && [ "$stamp" = "$(ls -l --time-style=+%s.%N "$t/d1")" ] &&
    ok "second run: does nothing, prints nothing" || { bad "second run did work (exit $rc)"; cat "$t/out"; }

# a mirror whose labels decompress fine but hold one changed byte
mkdir -p "$t/corrupt" && cp $src/*.gz "$t/corrupt/" || exit 1
gzip -dc $src/t10k-labels-idx1-ubyte.gz > "$t/labels" && printf '\377' | dd of="$t/labels" bs=1 seek=100 conv=notrunc 2>/dev/null &&
    gzip -c "$t/labels" > "$t/corrupt/t10k-labels-idx1-ubyte.gz" || exit 1
fetch "$t/d2" "file://$t/corrupt"
[ $rc -ne 0 ] && grep -q 'fails its checksum' "$t/out" && ok "changed byte: refused by its checksum" ||
    { bad "changed byte: exit $rc"; cat "$t/out"; }
[ ! -e "$t/d2/t10k-labels-idx1-ubyte" ] && [ "$(leftovers "$t/d2")" -eq 0 ] &&
    ok "changed byte: nothing of it kept" || bad "changed byte: a file was kept"

# a mirror whose gzip stream is damaged
mkdir -p "$t/badgz" && cp $src/*.gz "$t/badgz/" || exit 1
printf '\000\000\000\000' | dd of="$t/badgz/t10k-labels-idx1-ubyte.gz" bs=1 seek=2000 conv=notrunc 2>/dev/null || exit 1
fetch "$t/d3" "file://$t/badgz"
[ $rc -ne 0 ] && grep -q 'not a valid gzip\|fails its checksum' "$t/out" && [ ! -e "$t/d3/t10k-labels-idx1-ubyte" ] &&
    [ "$(leftovers "$t/d3")" -eq 0 ] && ok "damaged gzip: refused, nothing kept" || { bad "damaged gzip: exit $rc"; cat "$t/out"; }

# a mirror missing one file
mkdir -p "$t/missing" && cp $src/*.gz "$t/missing/" && rm "$t/missing/t10k-images-idx3-ubyte.gz" || exit 1
fetch "$t/d4" "file://$t/missing"
[ $rc -ne 0 ] && grep -q 'could not download .*t10k-images-idx3-ubyte.gz' "$t/out" && [ ! -e "$t/d4/t10k-images-idx3-ubyte" ] &&
    [ "$(leftovers "$t/d4")" -eq 0 ] && ok "missing file: clear error, nothing kept" || { bad "missing file: exit $rc"; cat "$t/out"; }
# ... and the files fetched before the failure were checked, so a later run only fetches what is missing
cp $src/t10k-images-idx3-ubyte.gz "$t/missing/"
fetch "$t/d4" "file://$t/missing"
[ $rc -eq 0 ] && [ "$(grep -c ' ok ' "$t/out")" -eq 2 ] && ! grep -q train- "$t/out" && ok "rerun after failure: fetches only the missing file" ||
    { bad "rerun after failure: exit $rc"; cat "$t/out"; }

# no network: a loopback port nobody listens on
fetch "$t/d5" "http://127.0.0.1:9"
[ $rc -ne 0 ] && grep -q 'no network?' "$t/out" && [ "$(ls -A "$t/d5" | wc -l)" -eq 0 ] &&
    ok "no network: clear error, nothing written" || { bad "no network: exit $rc"; cat "$t/out"; }
# the text data (fetch_data.sh text): present -> nothing to do; missing with apt-get failing -> a clear
# error and nothing written
fort=/usr/share/games/fortunes
if [ -f $fort/cookie ] && [ -d $fort/ru ]; then
    mkdir -p "$t/txt" && cp -r $fort "$t/txt/fortunes" || exit 1
    GPUDL_DATA="$t/txt" sh tools/fetch_data.sh text >"$t/out" 2>&1
    rc=$?
    [ $rc -eq 0 ] && [ ! -s "$t/out" ] && ok "text: present, nothing done" || { bad "text: present: exit $rc"; cat "$t/out"; }
    rm "$t/txt/fortunes/zippy"
    mkdir -p "$t/bin" && printf '#!/bin/sh\necho "E: Failed to fetch (no network)" >&2\nexit 100\n' >"$t/bin/apt-get" &&
        chmod +x "$t/bin/apt-get" || exit 1
    PATH="$t/bin:$PATH" GPUDL_DATA="$t/txt" sh tools/fetch_data.sh text >"$t/out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && grep -q 'apt-get download failed: E: Failed to fetch' "$t/out" && [ ! -e "$t/txt/fortunes/zippy" ] &&
        [ "$(ls -A "$t/txt" | grep -c part)" -eq 0 ] && ok "text: download fails: clear error, nothing kept" ||
        { bad "text: download fails: exit $rc"; cat "$t/out"; }
else
    skip=$((skip + 1))
    echo "  SKIP text: needs Debian's fortunes in $fort (sh tools/deps.sh test installs them)"
fi
# the dictionary (fetch_data.sh dict) the same way: present -> nothing to do; missing with apt-get failing -> a
# clear error and nothing written
dict=/usr/share/dictd/freedict-eng-deu
if [ -f $dict.index ] && [ -f $dict.dict.dz ]; then
    mkdir -p "$t/dd/freedict" && cp $dict.index $dict.dict.dz "$t/dd/freedict/" || exit 1
    GPUDL_DATA="$t/dd" sh tools/fetch_data.sh dict >"$t/out" 2>&1
    rc=$?
    [ $rc -eq 0 ] && [ ! -s "$t/out" ] && ok "dict: present, nothing done" || { bad "dict: present: exit $rc"; cat "$t/out"; }
    rm "$t/dd/freedict/freedict-eng-deu.index"
    mkdir -p "$t/bin" && printf '#!/bin/sh\necho "E: Failed to fetch (no network)" >&2\nexit 100\n' >"$t/bin/apt-get" &&
        chmod +x "$t/bin/apt-get" || exit 1
    PATH="$t/bin:$PATH" GPUDL_DATA="$t/dd" sh tools/fetch_data.sh dict >"$t/out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && grep -q 'apt-get download failed: E: Failed to fetch' "$t/out" &&
        [ "$(ls -A "$t/dd" | grep -c part)" -eq 0 ] && ok "dict: download fails: clear error, nothing kept" ||
        { bad "dict: download fails: exit $rc"; cat "$t/out"; }
else
    skip=$((skip + 1))
    echo "  SKIP dict: needs Debian's dict-freedict-eng-deu in /usr/share/dictd (sh tools/deps.sh test installs it)"
fi
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
