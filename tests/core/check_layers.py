#!/usr/bin/env python3
"""check_layers.py — the layer DAG of fsdp.c, checked on the sources and on the built objects.

Layers and what each may use come from CMakeLists.txt itself (every `fsdp_add_layer(NAME fsdp_DEP ...)`,
closed transitively), so the check follows the build. It fails (exit 1, one line per finding) on:
  1. an upward include: src/<L>/... includes "<M>/..." with M neither L nor below L. The public headers
     belong to the layer that implements them (include/fsdp.h: core; fsdp_model.h, fsdp_gpt.h: model);
  2. an include cycle among the project's headers;
  3. with --build: an object of layer L that uses a symbol defined in a layer not below L (nm of
     libfsdp_<L>.a), or a cycle between the objects of one layer (a.c calls b.c and b.c calls a.c,
     directly or round a longer loop): inside each layer the files form a DAG too.
It prints each layer's files in an order that respects that DAG (lowest first), with their lines.
--selftest runs the checks on small made-up trees and symbol tables that hold each kind of fault, and
fails if any goes unreported.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

# Loops between the files of one layer that exist on main and are owned elsewhere; each is printed on
# every run, and any other loop (or a longer one through these files) fails the check. Remove an entry
# once its loop is gone (the check then says so).
KNOWN_LOOPS = set()  # empty: the last two (llama.c <-> llama_hf.c, train.c <-> export.c) were cut
PUBLIC_OWNER = {"fsdp.h": "core", "fsdp_model.h": "model", "fsdp_gpt.h": "model"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_layers(cmakelists):
    """{layer: set(direct deps)} from fsdp_add_layer(...) calls."""
    text = open(cmakelists).read()
    deps = {}
    for m in re.finditer(r"fsdp_add_layer\(\s*(\w+)([^)]*)\)", text):
        if m.group(1) == "name":  # the function's own definition
            continue
        deps[m.group(1)] = {t[len("fsdp_"):] for t in m.group(2).split() if t.startswith("fsdp_")}
    return deps


def closure(deps):
    """{layer: set(layers below it)}; a cycle in the layer graph itself is reported by the caller."""
    below = {}

    def visit(l, stack):
        if l in below:
            return below[l]
        if l in stack:
            raise ValueError("layer cycle: " + " -> ".join(stack + [l]))
        acc = set()
        for d in deps.get(l, ()):
            acc |= {d} | visit(d, stack + [l])
        below[l] = acc
        return acc

    for l in deps:
        visit(l, [])
    return below


def find_cycle(graph):
    """A cycle (list of nodes, first == last) in {node: iterable(succ)}, or None."""
    color = {}
    for start in sorted(graph):
        if color.get(start):
            continue
        stack = [(start, iter(sorted(graph.get(start, ()))))]
        path = [start]
        color[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
                path.pop()
                continue
            c = color.get(nxt, 0)
            if c == 1:
                return path[path.index(nxt):] + [nxt]
            if c == 0:
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
    return None


def topo(graph, nodes):
    """nodes ordered so that every node comes after what it uses (graph: node -> used nodes)."""
    out, done = [], set()

    def visit(n):
        if n in done:
            return
        done.add(n)
        for d in sorted(graph.get(n, ())):
            if d in nodes:
                visit(d)
        out.append(n)

    for n in sorted(nodes):
        visit(n)
    return out


def layer_of(rel):
    """The layer of a path relative to the source root (src/<L>/..., include/x.h), or None."""
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) >= 3:
        return parts[1]
    if parts[0] == "include" and len(parts) == 2:
        return PUBLIC_OWNER.get(parts[1])
    return None


def resolve(inc, src_root):
    for base in ("src", "include"):
        if os.path.isfile(os.path.join(src_root, base, inc)):
            return base + "/" + inc
    return None


def check_sources(src_root, below):
    """(findings, include graph {file: set(files)}) over src/ and include/."""
    findings, graph = [], {}
    files = []
    for base in ("src", "include"):
        for d, _, names in os.walk(os.path.join(src_root, base)):
            for n in names:
                if n.endswith((".c", ".h", ".cpp")):
                    files.append(os.path.relpath(os.path.join(d, n), src_root))
    for rel in sorted(files):
        text = open(os.path.join(src_root, rel), errors="replace").read()
        me = layer_of(rel)
        graph[rel] = set()
        for inc in INCLUDE_RE.findall(text):
            tgt = resolve(inc, src_root)
            if tgt is None:
                continue  # a system or generated header
            graph[rel].add(tgt)
            other = layer_of(tgt)
            if me is None or other is None or other == me:
                continue
            if other not in below.get(me, set()):
                findings.append("%s (layer %s) includes %s (layer %s), which is not below it" % (rel, me, inc, other))
    cyc = find_cycle(graph)
    if cyc:
        findings.append("include cycle: " + " -> ".join(cyc))
    return findings, graph


def nm_table(lib):
    """{object: (defined symbols, used symbols)} of a static library."""
    out = subprocess.run(["nm", "-A", lib], capture_output=True, text=True, check=True).stdout
    tab = collections.defaultdict(lambda: (set(), set()))
    for line in out.splitlines():
        p = line.split()
        if len(p) < 2:
            continue
        obj = p[0].split(":")[1] if p[0].count(":") >= 2 else p[0]
        obj = obj.rstrip(":")
        kind, sym = p[-2], p[-1]
        if kind == "U":
            tab[obj][1].add(sym)
        elif kind in "TDBRCV":
            tab[obj][0].add(sym)
    return tab


def check_objects(tables, below):
    """tables: {layer: {object: (defs, uses)}}. (findings, {layer: {object: set(objects used)}})."""
    findings, graphs = [], {}
    owner = {}
    for layer, tab in tables.items():
        for obj, (defs, _) in tab.items():
            for s in defs:
                owner.setdefault(s, (layer, obj))
    for layer, tab in sorted(tables.items()):
        g = {obj: set() for obj in tab}
        for obj, (_, uses) in sorted(tab.items()):
            for s in sorted(uses):
                if s not in owner:
                    continue  # a system library's
                ol, oo = owner[s]
                if ol == layer:
                    if oo != obj:
                        g[obj].add(oo)
                elif ol not in below.get(layer, set()):
                    findings.append("%s (layer %s) uses %s from %s (layer %s), which is not below it" % (obj, layer, s, oo, ol))
        for lname, objs in KNOWN_LOOPS:  # a known loop: cut it (printed), then look for others
            if lname == layer and objs <= set(g):
                a, b = sorted(objs)
                if b in g[a] and a in g[b]:
                    print("check_layers: known loop in layer %s: %s <-> %s (see KNOWN_LOOPS)" % (layer, a, b))
                    g[b].discard(a)
                else:
                    findings.append("layer %s: the known loop %s <-> %s is gone; remove it from KNOWN_LOOPS" % (layer, a, b))
        cyc = find_cycle(g)
        if cyc:
            findings.append("layer %s: its files call each other round a loop: %s" % (layer, " -> ".join(cyc)))
        graphs[layer] = g
    return findings, graphs


def report_order(src_root, graphs):
    for layer, g in sorted(graphs.items()):
        items = []
        for obj in topo(g, set(g)):
            src = obj[:-2] if obj.endswith(".o") else obj  # name.c.o -> name.c
            lines = "?"
            for d, _, names in os.walk(os.path.join(src_root, "src", layer)):
                if src in names:
                    lines = sum(1 for _ in open(os.path.join(d, src), errors="replace"))
                    break
            items.append("%s(%s)" % (src, lines))
        print("  %s: %s" % (layer, " < ".join(items)))


def run(src_root, build):
    deps = read_layers(os.path.join(src_root, "CMakeLists.txt"))
    if not deps:
        return ["no fsdp_add_layer(...) found in CMakeLists.txt"]
    try:
        below = closure(deps)
    except ValueError as e:
        return [str(e)]
    findings, _ = check_sources(src_root, below)
    if build:
        tables = {}
        for layer in deps:
            lib = os.path.join(build, "libfsdp_%s.a" % layer)
            if os.path.isfile(lib):
                tables[layer] = nm_table(lib)
            else:
                findings.append("%s is missing: build the project first" % lib)
        f2, graphs = check_objects(tables, below)
        findings += f2
        if not f2:
            print("layers (each file after what it calls):")
            report_order(src_root, graphs)
    for l in sorted(below):
        if l in deps and any(t in deps for t in below[l] | {l}):
            print("  %s may include: %s" % (l, ", ".join(sorted(t for t in below[l] | {l} if t in deps))))
    return findings


def selftest():
    ok = True

    def tree(files):
        d = tempfile.mkdtemp(prefix="check_layers_")
        for rel, text in files.items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            open(p, "w").write(text)
        return d

    cm = "fsdp_add_layer(core m)\nfsdp_add_layer(comm fsdp_core)\nfsdp_add_layer(shard fsdp_comm)\n"
    below = closure(read_layers(os.path.join(tree({"CMakeLists.txt": cm}), "CMakeLists.txt")))
    if below != {"core": set(), "comm": {"core"}, "shard": {"comm", "core"}}:
        print("selftest: layers read wrong: %r" % below)
        ok = False
    clean = {"CMakeLists.txt": cm, "include/fsdp.h": "", "src/core/core.h": '#include "fsdp.h"\n',
             "src/comm/a.h": '#include "core/core.h"\n', "src/shard/s.c": '#include "comm/a.h"\n'}
    cases = {
        "clean tree": (clean, 0),
        "upward include": (dict(clean, **{"src/comm/b.c": '#include "shard/s.h"\n', "src/shard/s.h": ""}), 1),
        "include cycle": (dict(clean, **{"src/comm/x.h": '#include "comm/y.h"\n', "src/comm/y.h": '#include "comm/x.h"\n'}), 1),
    }
    for name, (files, want) in cases.items():
        got = len(check_sources(tree(files), below)[0])
        if (got > 0) != (want > 0):
            print("selftest: %s: %d findings, want %s" % (name, got, "some" if want else "none"))
            ok = False
    objs = {
        "clean objects": ({"comm": {"a.o": ({"fa"}, {"fb"}), "b.o": ({"fb"}, set())}}, 0),
        "calls round a loop": ({"comm": {"a.o": ({"fa"}, {"fb"}), "b.o": ({"fb"}, {"fc"}), "c.o": ({"fc"}, {"fa"})}}, 1),
        "upward call": ({"comm": {"a.o": ({"fa"}, {"fs"})}, "shard": {"s.o": ({"fs"}, {"fa"})}}, 1),
    }
    for name, (tables, want) in objs.items():
        got = len(check_objects(tables, below)[0])
        if (got > 0) != (want > 0):
            print("selftest: %s: %d findings, want %s" % (name, got, "some" if want else "none"))
            ok = False
    print("selftest: %s" % ("every planted fault found, none in the clean cases" if ok else "FAILED"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--build", help="build folder with libfsdp_<layer>.a (object-level checks)")
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args()
    if a.selftest:
        return 0 if selftest() else 1
    findings = run(os.path.abspath(a.src), a.build)
    for f in findings:
        print("check_layers: " + f, file=sys.stderr)
    print("check_layers: %d findings" % len(findings))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
