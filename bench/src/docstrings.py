"""Prints every docstring of the Python standard library, the topics of the built-in
help (the language reference), and every docstring of the packages installed next to
this interpreter, as JSON lines: {"source": "module.Qualified.name", "text": "..."}.

embedwire-bench runs this once (`python -I -B -c <this file>`) and caches the output;
picking paragraphs and queries from it is done in Rust (corpus.rs). The text is as
`ast.get_docstring(clean=True)` returns it: indentation removed, paragraphs
separated by blank lines. The order is deterministic: the stdlib in sorted path
order, the help topics by name, then site-packages in sorted path order; inside a
file, the module docstring, then classes and functions depth-first.
"""
import ast
import json
import os
import sys
import sysconfig
import warnings

SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


def definitions(node, prefix):
    """Yields (qualified name, docstring) of node and of its nested definitions."""
    doc = ast.get_docstring(node, clean=True)
    if doc:
        yield prefix, doc
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from definitions(child, f"{prefix}.{child.name}")


def emit(source, text):
    sys.stdout.write(json.dumps({"source": source, "text": text}) + "\n")


def tree_docstrings(root):
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIP_DIRS)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            module = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
            try:
                with open(path, encoding="utf-8") as f:
                    source = f.read()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    tree = ast.parse(source, filename=path)
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for qualname, doc in definitions(tree, module):
                emit(qualname, doc)


def main():
    paths = sysconfig.get_paths()
    tree_docstrings(paths["stdlib"])
    from pydoc_data.topics import topics

    for name in sorted(topics):
        emit(f"pydoc_data.topics.{name}", topics[name])
    if os.path.realpath(paths["purelib"]) != os.path.realpath(paths["stdlib"]):
        tree_docstrings(paths["purelib"])


main()
