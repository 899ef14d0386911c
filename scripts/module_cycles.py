#!/usr/bin/env python3
"""Fails when sibling modules of one folder of src/ import each other.

For each folder of src/ (the crate root and every module directory), the sibling
modules are its `x.rs` files and `x/` directories (a file and a directory of one
name are one module). Module a depends on sibling b when code in a (any file under
it, at any depth) names a path into b: `use super::b::…`, `use crate::<folder>::b::…`,
or `super::b::…` / `crate::…` paths in expressions and types (brace groups of `use`
expanded). Comments, string literals and visibilities (`pub(in crate::…)`) are not
dependencies. A cycle in that graph (a uses b, directly or through other siblings,
and b uses a) is listed, and the script exits 1.

Usage: scripts/module_cycles.py [SRC_DIR]   (default: src)
"""

import os
import re
import sys

SEGMENT = r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*"
PATH = re.compile(r"(?<![A-Za-z0-9_])(\$?crate|super|self)((?:\s*::\s*" + SEGMENT + r")+)")
USE = re.compile(r"\buse\s+([^;]*);", re.S)
INLINE_MOD = re.compile(r"\bmod\s+(" + SEGMENT + r")\s*\{")
VISIBILITY = re.compile(r"\bpub\s*\(\s*(?:in\s+[^)]*|crate|super|self)\s*\)")
PUB_USE = re.compile(r"\bpub(?:\s*\([^)]*\))?\s+use\s+([^;]*);", re.S)


def strip(text):
    """Removes comments, string and char literals (keeping line structure)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 40]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(?:\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:i + 12]):
            m = re.match(r"'(?:\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:i + 12])
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand(tree):
    """Expands a `use` tree (`a::{b, c::{d as e}}`) into its paths."""
    tree = re.sub(r"\s+", "", tree)
    depth, start = 0, None
    for k, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = k
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                prefix, inner, rest = tree[:start], tree[start + 1:k], tree[k + 1:]
                parts, d, last = [], 0, 0
                for m, c2 in enumerate(inner):
                    if c2 == "{":
                        d += 1
                    elif c2 == "}":
                        d -= 1
                    elif c2 == "," and d == 0:
                        parts.append(inner[last:m])
                        last = m + 1
                parts.append(inner[last:])
                return [p for part in parts if part for p in expand(prefix + part + rest)]
    return [tree.split(" as ")[0]]


def module_path(rel):
    """`a/b.rs` -> ['a', 'b']; `a/mod.rs` -> ['a']; `lib.rs` -> []."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main") and (parts[-1] != "lib" or len(parts) == 1):
        parts = parts[:-1]
    return parts


def resolve(head, segments, here):
    """The absolute module path a reference names, or None."""
    if head.endswith("crate"):
        base = []
    elif head == "self":
        base = list(here)
    else:  # super
        base = here[:-1]
    while segments and segments[0] in ("super", "self"):
        if segments[0] == "super":
            if not base:
                return None
            base = base[:-1]
        segments = segments[1:]
    return base + segments


def references(text, file_module):
    """(module path of the code, absolute path it names) for every path in `text`."""
    text = VISIBILITY.sub("", text)
    # Inline modules: the module path at each offset.
    spans = []
    for m in INLINE_MOD.finditer(text):
        depth, k = 0, m.end() - 1
        while k < len(text):
            if text[k] == "{":
                depth += 1
            elif text[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        spans.append((m.end(), k, m.group(1)))

    def here(offset):
        inner = [name for (a, b, name) in spans if a <= offset < b]
        return file_module + inner

    found = []
    used = set()
    for m in USE.finditer(text):
        used.update(range(m.start(), m.end()))
        for path in expand(m.group(1)):
            segs = [s for s in path.split("::") if s]
            if segs and segs[0] in ("crate", "$crate", "super", "self"):
                segs = [s for s in segs if s not in ("*",)]
                target = resolve(segs[0], segs[1:], here(m.start()))
                if target is not None:
                    found.append((here(m.start()), target))
    for m in PATH.finditer(text):
        if m.start() in used:
            continue
        segs = [s for s in re.split(r"\s*::\s*", m.group(2)) if s]
        target = resolve(m.group(1), segs, here(m.start()))
        if target is not None:
            found.append((here(m.start()), target))
    return found


def reexports(text, file_module, children):
    """{(module path + item name): the path it re-exports} for the `pub use` lines of a file
    (e.g. `store::Write` -> `store::write::Write`), so that a name used through a parent's
    re-export counts as an edge to the module that defines it."""
    out = {}
    for m in PUB_USE.finditer(text):
        for path in expand(m.group(1)):
            segs = [s for s in path.split("::") if s]
            if not segs or segs[-1] in ("*", "self"):
                continue
            if segs[0] in ("crate", "$crate", "super", "self"):
                target = resolve(segs[0], segs[1:], file_module)
            elif segs[0] in children.get(tuple(file_module), ()):
                target = list(file_module) + segs
            else:
                continue
            if target is not None:
                out[tuple(file_module) + (segs[-1],)] = target
    return out


def through_reexports(target, table):
    """`target` with every re-exported prefix followed to where it is defined."""
    for _ in range(16):
        for k in range(len(target), 0, -1):
            found = table.get(tuple(target[:k]))
            if found is not None and list(found) != list(target[:k]):
                target = list(found) + list(target[k:])
                break
        else:
            return target
    return target


def cycles(graph):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                rel = os.path.relpath(os.path.join(root, name), src)
                files[rel] = module_path(rel)
    folders = {tuple(p[:-1]) for p in files.values() if p} | {()}
    children = {f: set() for f in folders}
    for p in files.values():
        for k in range(len(p)):
            children.setdefault(tuple(p[:k]), set()).add(p[k])

    texts = {}
    table = {}
    for rel, fmod in sorted(files.items()):
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            texts[rel] = strip(f.read())
        table.update(reexports(texts[rel], fmod, children))

    # edges[folder][a] = {b: [evidence]}
    edges = {}
    for rel, fmod in sorted(files.items()):
        text = texts[rel]
        for code_at, target in references(text, fmod):
            target = through_reexports(target, table)
            for depth in range(len(code_at)):
                folder = tuple(code_at[:depth])
                if tuple(target[:depth]) != folder or len(target) <= depth:
                    continue
                a, b = code_at[depth], target[depth]
                if a != b and b in children.get(folder, ()):
                    ev = edges.setdefault(folder, {}).setdefault(a, {}).setdefault(b, [])
                    ev.append(f"{rel}: {'::'.join(target)}")

    failed = False
    for folder in sorted(edges):
        graph = {a: set(bs) for a, bs in edges[folder].items()}
        for comp in cycles(graph):
            failed = True
            where = os.path.join(src, *folder) if folder else src
            print(f"import circle in {where}/: {' <-> '.join(comp)}")
            for a in comp:
                for b in sorted(graph.get(a, ())):
                    if b in comp:
                        sample = sorted(set(edges[folder][a][b]))
                        print(f"  {a} -> {b}: {sample[0]}" + (f" (+{len(sample) - 1} more)" if len(sample) > 1 else ""))
    if failed:
        sys.exit(1)
    print("no import circle between sibling modules")


if __name__ == "__main__":
    main()
