"""Plain BM25 (k1 0.9, b 0.4) over a BEIR-format folder: the yardstick of
`embedwire-bench retrieval`'s keyword mode. Standard library only.

Documents are title + " " + text, tokens are lower-cased runs of letters and digits
(no stemming, no stop words: "plain"). Writes the run, one line per hit:
`query_id <TAB> doc_id <TAB> rank <TAB> score`, best 100 per query, for the queries
of the split's qrels; the bench computes the metrics with the same code as for the
server's rankings.

usage: python3 bm25_baseline.py DATASET_DIR SPLIT OUT_FILE
"""

import json
import math
import re
import sys
from collections import Counter, defaultdict

K1, B, DEPTH = 0.9, 0.4, 100
TOKEN = re.compile(r"\w+")


def tokens(text):
    return TOKEN.findall(text.lower())


def main(folder, split, out_path):
    ids, lengths, postings = [], [], defaultdict(list)
    with open(f"{folder}/corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            words = tokens(f"{doc.get('title', '')} {doc.get('text', '')}")
            for term, count in Counter(words).items():
                postings[term].append((len(ids), count))
            ids.append(doc["_id"])
            lengths.append(len(words))
    n, average = len(ids), sum(lengths) / max(len(lengths), 1)
    idf = {t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in postings.items()}
    wanted = set()
    with open(f"{folder}/qrels/{split}.tsv", encoding="utf-8") as f:
        next(f)
        wanted.update(line.split("\t")[0] for line in f if line.strip())
    with open(f"{folder}/queries.jsonl", encoding="utf-8") as f, open(out_path, "w") as out:
        for line in f:
            query = json.loads(line)
            if query["_id"] not in wanted:
                continue
            scores = defaultdict(float)
            for term in tokens(query["text"]):
                for doc, tf in postings.get(term, ()):
                    norm = K1 * (1 - B + B * lengths[doc] / average)
                    scores[doc] += idf[term] * tf * (K1 + 1) / (tf + norm)
            best = sorted(scores.items(), key=lambda item: -item[1])[:DEPTH]
            for rank, (doc, score) in enumerate(best, 1):
                out.write(f"{query['_id']}\t{ids[doc]}\t{rank}\t{score:.6f}\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
