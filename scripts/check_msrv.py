"""Checks that Cargo.toml's rust-version is at least every dependency's: a declared minimum
that the dependencies cannot build with is a promise the crate does not keep. Only the
library's own dependency tree counts: the workspace's other crates are not published.

This machine cannot download another toolchain (rustup reaches no server here), so the
minimum is checked against what the dependency tree declares, not by building with it."""
import json
import subprocess
import sys


def version(text):
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


metadata = json.loads(
    subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
)
ours = next(p for p in metadata["packages"] if p["name"] == "lambda-idempotency")
declared = version(ours["rust_version"])
# The library's own dependency tree, features as its users get them by default (normal and
# build dependencies): not the workspace's other crates (the example, the benchmark
# harness, the test support), nor the features they turn on, nor dev-dependencies.
tree = subprocess.run(
    ["cargo", "tree", "-p", ours["name"], "-e", "normal,build", "--prefix", "none",
     "--format", "{p}", "--locked"],
    check=True,
    capture_output=True,
    text=True,
).stdout
in_tree = {tuple(line.split()[:2]) for line in tree.splitlines() if line.strip()}
used = {p["id"] for p in metadata["packages"] if (p["name"], "v" + p["version"]) in in_tree}
needed = max(
    (version(p["rust_version"]), p["name"])
    for p in metadata["packages"]
    if p["id"] in used and p.get("rust_version") and p["id"] != ours["id"]
)
if needed[0] > declared:
    sys.exit(
        f"rust-version {ours['rust_version']} is below what {needed[1]} needs "
        f"({'.'.join(map(str, needed[0]))}): raise it in Cargo.toml"
    )
print(f"rust-version {ours['rust_version']}: every dependency builds with it "
      f"(the highest need is {needed[1]}, {'.'.join(map(str, needed[0]))})")
