"""BERT uncased WordPiece tokenization from a vocab.txt, in plain Python.

The int8 scripts only need token ids that are the same for the fp32 and the int8 graph,
and close to what the server's tokenizer gives; this avoids pinning the `tokenizers`
package, whose declared dependencies (huggingface-hub and its own) would all have to
be pinned too because setup-model.sh installs with --no-deps. It follows BERT's
BasicTokenizer (clean, split CJK characters, lowercase, strip accents, split
punctuation) and then greedy longest-match-first WordPiece.
"""

import unicodedata
from pathlib import Path

MAX_WORD_CHARS = 100  # longer words become [UNK], as in BERT


def _is_punctuation(char):
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(code):
    return (0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0x20000 <= code <= 0x2A6DF
            or 0x2A700 <= code <= 0x2CEAF or 0xF900 <= code <= 0xFAFF or 0x2F800 <= code <= 0x2FA1F)


def _basic_words(text):
    """Whitespace/punctuation split of lowercased, accent-stripped text."""
    chars = []
    for char in text:
        code = ord(char)
        if code == 0 or code == 0xFFFD or unicodedata.category(char) in ("Cc", "Cf") and char not in "\t\n\r":
            continue
        chars.append(f" {char} " if _is_cjk(code) else (" " if char.isspace() else char))
    text = unicodedata.normalize("NFD", "".join(chars).lower())
    text = "".join(char for char in text if unicodedata.category(char) != "Mn")
    words = []
    for token in text.split():
        current = ""
        for char in token:
            if _is_punctuation(char):
                if current:
                    words.append(current)
                words.append(char)
                current = ""
            else:
                current += char
        if current:
            words.append(current)
    return words


class WordPieceTokenizer:
    def __init__(self, vocab_path, max_length=256):
        tokens = Path(vocab_path).read_text(encoding="utf-8").splitlines()
        self.vocab = {token: index for index, token in enumerate(tokens)}
        self.max_length = max_length  # sentence-transformers' max_seq_length, [CLS]/[SEP] included
        self.cls, self.sep, self.unk = (self.vocab[t] for t in ("[CLS]", "[SEP]", "[UNK]"))

    def _word_ids(self, word):
        if len(word) > MAX_WORD_CHARS:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    break
                end -= 1
            else:
                return [self.unk]
            start = end
        return ids

    def encode(self, text):
        """[CLS] ids... [SEP], truncated to max_length."""
        ids = [i for word in _basic_words(text) for i in self._word_ids(word)]
        return [self.cls, *ids[: self.max_length - 2], self.sep]
