#!/usr/bin/env python3
"""tools/layers.py — which part of gpudl.h uses which: the layer check.

The layers of gpudl.h are the groups of src/PARTS, each opened by a
"# ---- name ----" heading, in order (docs/DESIGN.md, "Which part may use which"). A part may
use what its own layer and the layers before it define; a use of something
defined in a later layer (reachable only through a forward declaration, or a
public declaration in api/) is an upward use. This script reads the parts,
finds each top-level function and global variable a part defines, and reports
every use of one from a part of an earlier layer. The public header's parts
(api/) only declare: they are not read as users.

    python3 tools/layers.py            list the upward uses, one a line, and their count
    python3 tools/layers.py --graph    also who uses whom: for each pair of parts, how many
                                       names of the one the other uses
    python3 tools/layers.py --forward  also the uses, inside one layer, of what a later part
                                       of it defines (allowed: a layer's parts are one unit)
    python3 tools/layers.py --check    exit 1 when an upward use is not in the accepted
                                       list below (the one DESIGN.md gives with its reasons),
                                       when an accepted one is gone, or when DESIGN.md does
                                       not name an accepted one (so the lists stay true)

It is a tokenizer, not a compiler: comments and string literals are blanked,
every preprocessor branch is read (so a use under #ifdef GPUDL_CUDA counts),
and a use inside a macro body counts for the part that defines the macro.
Python 3, standard library only.
"""
import os
import re
import sys

# The upward uses that stay, with their reasons in docs/DESIGN.md ("Which part
# may use which"): (user part, used name). --check holds the two lists equal.
ACCEPTED = {
    # the runtime picks a device's backend; the CPU's table is made from the
    # kernels, after them (as CUDA's comes from gpudl_cuda.cu, gdl_cuda_backend)
    ("runtime/devices.h", "gdl__cpu_backend"),
}

KEYWORDS = set("""auto break case char const continue default do double else enum
extern float for goto if inline int long register restrict return short signed
sizeof static struct switch typedef union unsigned void volatile while _Bool
_Complex _Alignas _Alignof _Atomic _Noreturn _Static_assert _Thread_local
__attribute__ __declspec __inline __inline__ __restrict __restrict__
GPUDL_API""".split())


def blank(text):
    """Comments, string and character literals become spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_pp(text):
    """(code, macros): preprocessor lines (with their continuations) moved out
    of the code, which keeps its line count."""
    code, macros = [], []
    lines = text.split("\n")
    k = 0
    while k < len(lines):
        ln = lines[k]
        if ln.lstrip().startswith("#"):
            block = [ln]
            while block[-1].endswith("\\") and k + 1 < len(lines):
                k += 1
                block.append(lines[k])
            macros.append(" ".join(block))
            code.extend([""] * len(block))
        else:
            code.append(ln)
        k += 1
    return "\n".join(code), "\n".join(macros)


TOKEN = re.compile(r"[A-Za-z_]\w*|\S")


def definitions(code):
    """Names of the top-level functions and global variables defined in code."""
    defs = set()
    toks = TOKEN.findall(code)
    stmt = []          # the tokens of the top-level statement so far
    depth = 0          # brace depth
    in_func = False    # the braces being skipped are a function's body
    for t in toks:
        if depth > 0:
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                if depth == 0 and in_func:
                    stmt = []
            continue
        if t == "{":
            # an initialised aggregate (a global), a function's body, or the
            # braces of a struct / union / enum / extern "C"
            in_func = "=" not in stmt and _is_func(stmt)
            if in_func:
                name = _func_name(stmt)
                if name:
                    defs.add(name)
            else:
                stmt.append("{...}")
            depth = 1
        elif t == ";":
            _global(stmt, defs)
            stmt = []
        else:
            stmt.append(t)
    return defs


def _is_func(stmt):
    # a definition's head ends with its parameter list (attributes come first)
    return bool(stmt) and stmt[-1] == ")" and stmt[0] != "typedef"


def _func_name(stmt):
    # the identifier before the parameter list: the first "(" whose left
    # neighbour is a name that is not an attribute or keyword
    for k, t in enumerate(stmt):
        if t == "(" and k > 0:
            name = stmt[k - 1]
            if re.match(r"[A-Za-z_]\w*$", name) and name not in KEYWORDS and \
                    not name.startswith("__") and not re.match(r"GDL_[A-Z0-9_]*$", name):
                return name
    return None


def _global(stmt, defs):
    """A top-level declaration ending in ";": add the variables it defines."""
    if not stmt or stmt[0] in ("typedef", "extern"):
        return
    if "{...}" in stmt and stmt[0] in ("struct", "union", "enum"):
        stmt = stmt[stmt.index("{...}") + 1:]    # struct X {...} name;  -> name
        if not stmt:
            return
        stmt = ["int"] + stmt
    elif stmt[0] in ("struct", "union", "enum") and len(stmt) <= 2:
        return                                   # struct X;  (a declaration)
    # the declarators, split at commas outside brackets
    pieces, cur, depth = [], [], 0
    for t in stmt:
        if t in "([":
            depth += 1
        elif t in ")]":
            depth -= 1
        if t == "," and depth == 0:
            pieces.append(cur)
            cur = []
        else:
            cur.append(t)
    pieces.append(cur)
    for k, piece in enumerate(pieces):
        head = piece[:piece.index("=")] if "=" in piece else piece
        if "(" in head and not (head.index("(") + 1 < len(head) and head[head.index("(") + 1] == "*"):
            return                               # a prototype (not a pointer to one)
        names = [x for x in head if re.match(r"[A-Za-z_]\w*$", x) and x not in KEYWORDS]
        if "(" in head:                          # (*name)(...)
            names = [x for x in head[head.index("("):] if re.match(r"[A-Za-z_]\w*$", x)][:1]
        elif "[" in head:
            names = [x for x in head[:head.index("[")] if re.match(r"[A-Za-z_]\w*$", x) and x not in KEYWORDS]
        if k == 0 and not names:
            return
        if names:
            defs.add(names[-1] if "(" not in head else names[0])


def main(argv):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    src = os.path.join(root, "src")
    parts, layer = [], {}                       # layer: part -> (rank, heading)
    heading = (0, "")
    with open(os.path.join(src, "PARTS")) as f:
        for ln in f:
            s = ln.strip()
            h = re.match(r"#\s*----\s*(.*?)\s*----\s*$", s)
            if h:
                heading = (heading[0] + 1, h.group(1))
            elif s and not s.startswith("#"):
                parts.append(s.split()[0])
                layer[parts[-1]] = heading
    code, macro, defs = {}, {}, {}
    for p in parts:
        with open(os.path.join(src, p)) as f:
            c, m = split_pp(blank(f.read()))
        code[p], macro[p] = c, m
        defs[p] = definitions(c) if not p.startswith("api/") else set()
    owner = {}
    for p in parts:
        for d in defs[p]:
            owner.setdefault(d, p)
    graph = {}
    upward, forward = [], []
    for p in parts:
        if p.startswith("api/"):                 # declarations, and the manual's examples
            continue
        seen = set()
        for name in re.findall(r"[A-Za-z_]\w*", code[p] + "\n" + macro[p]):
            q = owner.get(name)
            if q is None or q == p or name in seen:
                continue
            seen.add(name)
            graph[(p, q)] = graph.get((p, q), 0) + 1
            if layer[q][0] > layer[p][0]:
                upward.append((p, name, q))
            elif parts.index(q) > parts.index(p):
                forward.append((p, name, q))
    if "--graph" in argv:
        for (p, q), n in sorted(graph.items(), key=lambda x: (parts.index(x[0][0]), parts.index(x[0][1]))):
            mark = "  UPWARD" if layer[q][0] > layer[p][0] else ""
            print(f"{p:28} uses {q:28} {n:4}{mark}")
        print()
    if "--forward" in argv:
        for p, name, q in forward:
            print(f"{p}: {name} (defined in {q}, later in the same layer)")
        print(f"{len(forward)} uses of a later part of the same layer")
        print()
    bad = 0
    for p, name, q in upward:
        ok = (p, name) in ACCEPTED
        bad += not ok
        print(f"{p}: {name} (defined in {q}, layer \"{layer[q][1]}\"){'  accepted' if ok else ''}")
    print(f"{len(upward)} upward uses, {len(upward) - bad} of them accepted")
    gone = ACCEPTED - {(p, name) for p, name, q in upward}
    for p, name in sorted(gone):
        print(f"{p}: {name} is accepted in tools/layers.py but no longer used: drop it there and in docs/DESIGN.md")
    with open(os.path.join(root, "docs", "DESIGN.md")) as f:
        design = f.read()
    untold = sorted((p, name) for p, name in ACCEPTED if f"`{name}`" not in design or f"`{p}`" not in design)
    for p, name in untold:
        print(f"{p}: {name} is accepted in tools/layers.py but docs/DESIGN.md does not give its reason")
    if "--check" in argv and (bad or gone or untold):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
