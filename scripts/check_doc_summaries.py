"""Lists public items whose docs do not start with one plain sentence.

    python3 scripts/check_doc_summaries.py [PATH...]     # default: src

The first sentence of an item's docs is its summary on docs.rs (module pages, search): it
should read as one plain sentence in the descriptive style of tower's docs ("Builds ...",
"A ...", "Returns ..."). A regex over the `///` blocks preceding `pub` items (not
`pub(crate)`, not `pub use`, not in `mod tests` or `mod sealed`), flagging:

- missing: no `///` docs (rustdoc's `missing_docs` lint reports most of these too);
- fragment: the summary starts with a lowercase word or punctuation, so it reads as the
  tail of a sentence (code spans and links are fine: "`None` when ...");
- unended: the first paragraph has no sentence end;
- long: the first sentence runs past 200 characters, too long for a summary line.

Prints `path:line: kind: item: summary` per offender; exits 1 when any is found. A heuristic:
read what it lists, do not rewrite docs to please it.
"""
import pathlib
import re
import sys

ITEM = re.compile(
    r"^\s*pub\s+(?:(?:const|async|unsafe|extern\s+\"C\")\s+)*"
    r"(fn|struct|enum|trait|type|const|static|mod|union)\s+(\w+)"
    r"|^\s*pub\s+(\w+)\s*:"  # a public field
)
LONG = 200


def summary(lines):
    """The first paragraph of a doc block, joined into one line."""
    paragraph = []
    for line in lines:
        text = line.strip()
        if not text:
            if paragraph:
                break
            continue
        if text.startswith("```") or text.startswith("#"):
            break
        paragraph.append(text)
    return " ".join(paragraph)


def first_sentence(text):
    """The text up to the first sentence end outside code spans, or None."""
    in_code = False
    for i, ch in enumerate(text):
        if ch == "`":
            in_code = not in_code
        elif ch in ".!?" and not in_code:
            after = text[i + 1 : i + 2]
            if after in ("", " ") and not text[max(0, i - 3) : i + 1].endswith(("e.g.", "i.e.")):
                return text[: i + 1]
    return None


def module_docs(path, name):
    """The `//!` docs of module `name` declared in `path`, from its own file."""
    base = path.parent if path.name in ("lib.rs", "mod.rs") else path.with_suffix("")
    for candidate in (base / f"{name}.rs", base / name / "mod.rs"):
        if candidate.exists():
            docs = []
            for line in candidate.read_text().splitlines():
                if not line.strip().startswith("//!"):
                    break
                docs.append(line.strip()[3:])
            return docs
    return []


def check(path):
    offenders = []
    docs = []
    in_attribute = in_sealed = False
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        stripped = line.strip()
        if in_sealed:
            in_sealed = line != "}"
            continue
        if stripped == "mod sealed {":
            in_sealed = True
            continue
        if in_attribute:
            in_attribute = not stripped.endswith("]")
            continue
        if re.match(r"(pub(\(crate\))?\s+)?mod tests\b", stripped):
            break
        if stripped.startswith("///"):
            docs.append(stripped[3:])
            continue
        if stripped.startswith("#["):
            in_attribute = not stripped.endswith("]")
            continue
        match = ITEM.match(line)
        if match and not stripped.startswith("pub use"):
            name = match.group(2) or match.group(3)
            if match.group(1) == "mod" and stripped.endswith(";") and not docs:
                docs = module_docs(path, name)
            if not docs:
                offenders.append((number, "missing", name, ""))
            else:
                text = summary(docs)
                sentence = first_sentence(text)
                if not text:
                    offenders.append((number, "missing", name, ""))
                elif re.match(r"[a-z]", text) or re.match(r"[^\w`\[*\"(]", text):
                    offenders.append((number, "fragment", name, text[:100]))
                elif sentence is None:
                    offenders.append((number, "unended", name, text[:100]))
                elif len(sentence) > LONG:
                    offenders.append((number, "long", name, sentence[:100] + "..."))
        docs = []
    return offenders


def main(args):
    roots = [pathlib.Path(arg) for arg in args] or [pathlib.Path("src")]
    found = 0
    for root in roots:
        files = sorted(root.rglob("*.rs")) if root.is_dir() else [root]
        for path in files:
            if path.name == "tests.rs" or "tests" in path.parts[1:-1]:
                continue
            for number, kind, name, text in check(path):
                found += 1
                print(f"{path}:{number}: {kind}: {name}: {text}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
