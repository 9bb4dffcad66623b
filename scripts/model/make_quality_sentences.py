#!/usr/bin/env python3
"""Regenerates quality_sentences.txt and calibration_sentences.txt from offline text.

Usage: make_quality_sentences.py [--out-dir DIR]   (run with the setup venv's python)

The text is the docstrings of the Python standard library and of the packages pinned in
requirements.txt (numpy, sympy, onnx, ...), read with `ast` (nothing is imported). Docstrings
are split into paragraphs, code and parameter lists are dropped, paragraphs are split
into sentences, and sentences of 5..60 words that are mostly letters are kept. Short
queries (3..6 words) come from one-line summaries ("Return the number of items"),
lowercased and without the final period, the way people type searches.

Every candidate is deduplicated, then ordered by a SHA-1 of its text, which makes the
choice deterministic and mixes the sources. The first sentences go to the evaluation
set (verify_int8.py), the next ones to a disjoint calibration set (the int8 search and
static calibration), so choices made on calibration are judged on unseen text. The
result depends on the Python version and the pinned packages, so the files are
committed; this script documents and reproduces them.
"""

import argparse
import ast
import hashlib
import re
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
EVAL_SENTENCES = 2000
EVAL_QUERIES = 400
CALIBRATION_SENTENCES = 400
CALIBRATION_QUERIES = 100
# Pinned in requirements.txt, so the text is the same wherever the setup venv is made;
# the dev packages that may share the venv are left out on purpose.
PACKAGES = ["numpy", "sympy", "mpmath", "onnx", "onnxruntime", "packaging", "google/protobuf"]
MAX_PER_FILE = 12  # no single module dominates the set

# Paragraphs that are code, doctest, tables or parameter lists rather than prose.
NOT_PROSE = re.compile(r"(>>>|\.\.\. |::|^\s*[-=~*]{3,}|^\s*[A-Za-z_]\w*\s*:\s*\S|\w\(.*\)\s*->|[{}\[\]\\`|])", re.M)
SENTENCE_END = re.compile(r"(?<=[a-z0-9)][.!?])\s+(?=[A-Z])")
WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")


def docstrings(path):
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node)
            if text:
                yield text


def is_prose(text, min_words, max_words):
    words = text.split()
    if not min_words <= len(words) <= max_words:
        return False
    letters = sum(len(w) for w in WORD.findall(text))
    # Mostly real words: identifiers like foo_bar or numbers-heavy lines fall below this.
    return letters >= 0.75 * sum(c.isalnum() for c in text) and "_" not in text and "=" not in text


def sentences_and_queries(text):
    sentences, queries = [], []
    paragraphs = re.split(r"\n\s*\n", text)
    summary = paragraphs[0].strip()
    if "\n" not in summary and summary.endswith(".") and is_prose(summary, 3, 6):
        queries.append(summary[:-1].lower())
    for paragraph in paragraphs:
        if NOT_PROSE.search(paragraph) or paragraph.startswith((" ", "\t")):
            continue
        for sentence in SENTENCE_END.split(" ".join(paragraph.split())):
            if sentence[:1].isupper() and sentence.endswith((".", "?", "!")) and is_prose(sentence, 5, 60):
                sentences.append(sentence)
    return sentences, queries


def source_files():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    site = Path(sysconfig.get_paths()["purelib"])
    roots = [stdlib] + [site / name for name in PACKAGES]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if root == stdlib and ("site-packages" in path.parts or "test" in path.parts):
                continue
            yield path


def stable_order(items):
    return sorted(set(items), key=lambda s: hashlib.sha1(s.encode()).hexdigest())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=HERE)
    args = parser.parse_args()

    sentences, queries = [], []
    for path in source_files():
        found_s, found_q = [], []
        for text in docstrings(path):
            s, q = sentences_and_queries(text)
            found_s += s
            found_q += q
        sentences += stable_order(found_s)[:MAX_PER_FILE]
        queries += stable_order(found_q)[:MAX_PER_FILE]
    sentences, queries = stable_order(sentences), stable_order(q for q in queries if q not in sentences)
    need_s, need_q = EVAL_SENTENCES + CALIBRATION_SENTENCES, EVAL_QUERIES + CALIBRATION_QUERIES
    if len(sentences) < need_s or len(queries) < need_q:
        sys.exit(f"only {len(sentences)} sentences and {len(queries)} queries found")
    header = (f"# {{}} lines from docstrings of the Python {sys.version.split()[0]} stdlib and the setup "
              "venv's packages, made by make_quality_sentences.py (one per line; this line is skipped)\n")
    splits = {
        "quality_sentences.txt": sentences[:EVAL_SENTENCES] + queries[:EVAL_QUERIES],
        "calibration_sentences.txt": sentences[EVAL_SENTENCES:need_s] + queries[EVAL_QUERIES:need_q],
    }
    for name, lines in splits.items():
        lines = stable_order(lines)
        (args.out_dir / name).write_text(header.format(len(lines)) + "\n".join(lines) + "\n")
        print(f"make_quality_sentences: wrote {len(lines)} lines to {args.out_dir / name}")


if __name__ == "__main__":
    main()
